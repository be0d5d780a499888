"""How long a `make bench` run will take, estimated from the runs the results folder holds.

A device call has minutes, and a session a quarter of an hour, so what a call asks of the bench must
be sized before the machine starts. Since 2026-11-27 every report records where each problem's
seconds went (`problem_seconds`: the float64 check, the buffers, the timing) beside each variant's
time per pass, and those records size the next run:
  check    a problem's float64 check of the patch set's variants alone (the look-back's runs: about
           10 ms), and more where a variant meets cuDNN (stock on channels_last or fp16, cudnn,
           routed): the first call of each shape builds cuDNN's plans, 0.1-0.5 s a problem on the H200
  timing   for each variant and pass, the runs the timing makes (one warm-up run on each of the K
           buffer sets, then warmup + repeats graph replays of K runs each) at the recorded time a
           run, and what each timed pass costs beyond its runs (capture, events: a few ms)
  start    the process, torch, the overlay, the copy bandwidth and FMA rate, and the first problem's
           lazy initialisation
A problem no report timed takes the times a byte of the problems most like it (of its set, batch, dtype
and layout, or the nearest such kind), scaled by the bytes its step moves. A variant no report timed
takes the nearest recorded: ours for ours with a path switched off (ours with another kernel), the
fastest of ours, stock and cuDNN for routed, stock for native, else the slowest recorded. The estimate
says how many problems it could not look up; with a configuration's records left out, the H200's fp16
run came out about a quarter short (tests/test_bench_sizing.py).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from .floor import allocation_bytes, buffer_sets_needed, pass_bytes, rotation_bytes
from .layers import Problem, label_text
from .schema import SCHEMA, switched_off_path

# Measured 2026-11-27 on the H200: a bench step's seconds less the sum of its problems' came to 6-10 s,
# and the first problem's check took up to 3.4 s where the median was 0.2 s.
RUN_START_S = 12.0
MEETS_CUDNN = ("stock", "cudnn", "routed")
LAUNCH_RECORDING_S = 0.5  # a pass of ours run once more under the profiler (LAUNCHES=1): not yet measured
MEMORY_BUDGET = 24 << 30  # as run.py's default
DEFAULT_L2_BYTES = 50 << 20


@dataclass(frozen=True)
class Recorded:
    """One problem as one report recorded it."""
    set: str
    kind: tuple[int, str, str]  # batch, dtype, layout
    check_s: float
    met_cudnn: bool
    timing_s: float
    buffer_sets: int
    runs: int  # of each variant and pass: K x (1 + warmup + repeats)
    ms: dict[tuple[str, str], float]  # (variant, pass) -> median ms a run
    step_bytes: int


class History:
    """The problems the reports under a folder recorded."""

    def __init__(self, records: dict[str, list[Recorded]], l2_bytes: int = DEFAULT_L2_BYTES):
        self.records = records  # by problem label, in the order the reports were read
        self.l2_bytes = l2_bytes

    @classmethod
    def load(cls, folder: Path) -> History:
        records: dict[str, list[Recorded]] = {}
        l2_bytes = DEFAULT_L2_BYTES
        for path in sorted(folder.rglob("*.json")):
            try:
                report = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(report, dict) or report.get("schema") != SCHEMA:
                continue
            l2_bytes = report.get("l2_bytes") or l2_bytes
            for label, record in _recorded_problems(report):
                records.setdefault(label, []).append(record)
        return cls(records, l2_bytes)

    def every(self) -> list[Recorded]:
        return [r for records in self.records.values() for r in records]

    def of_kind(self, problem: Problem) -> list[Recorded]:
        """Records of other problems like this one: the first found of those of its set, batch, dtype
        and layout; of its batch, dtype and layout; of its set and batch; of its batch; any."""
        every = self.every()
        kind = (problem.batch, problem.dtype, problem.layout)
        tiers = (lambda r: r.set == problem.layer.set and r.kind == kind, lambda r: r.kind == kind,
                 lambda r: r.set == problem.layer.set and r.kind[0] == problem.batch,
                 lambda r: r.kind[0] == problem.batch, lambda r: True)
        for alike in tiers:
            found = [r for r in every if alike(r)]
            if found:
                return found
        return []

    def pass_overhead_s(self) -> float:
        """What a timed pass and variant costs beyond its runs: the median over every recorded problem."""
        per_pass = [(r.timing_s - r.runs * sum(r.ms.values()) / 1000) / len(r.ms) for r in self.every() if r.ms]
        return max(statistics.median(per_pass), 0.0) if per_pass else 0.005


def _recorded_problems(report: dict):
    settings = report.get("settings", {})
    met_cudnn = any(v in MEETS_CUDNN for v in settings.get("variants", ()))
    by_problem: dict[str, list[dict]] = {}
    for row in report.get("rows", []):
        if row.get("problem_seconds"):
            label = label_text(row["set"], row["layer"], row["batch"], row["dtype"], row["layout"])
            by_problem.setdefault(label, []).append(row)
    for label, rows in by_problem.items():
        first = rows[0]
        seconds, sets = first["problem_seconds"], first.get("buffer_sets") or 1
        by_pass = {row["pass"]: row["bytes"] for row in rows}
        yield label, Recorded(
            set=first["set"], kind=(first["batch"], first["dtype"], first["layout"]),
            check_s=seconds.get("check", 0.0), met_cudnn=met_cudnn, timing_s=seconds.get("timing", 0.0),
            buffer_sets=sets, runs=sets * (1 + settings.get("warmup", 3) + settings.get("repeats", 30)),
            ms={(v, row["pass"]): ms for row in rows for v, ms in row["ms"].items() if ms},
            step_bytes=by_pass.get("step") or sum(by_pass.values()))


def _step_bytes(problem: Problem) -> int:
    return pass_bytes(problem, "step") if "step" in problem.passes else sum(pass_bytes(problem, p) for p in problem.passes)


@dataclass(frozen=True)
class Estimate:
    seconds: float
    problems: int
    looked_up: int  # problems some report recorded; the rest were scaled from others of their kind

    def text(self) -> str:
        unknown = self.problems - self.looked_up
        return f"{self.seconds:.0f} s for {self.problems} problems" + (
            f" ({unknown} not recorded before: scaled from others of their kind)" if unknown else "")


def _stand_in_ms(variant: str, passname: str, ms: dict[tuple[str, str], float]) -> float | None:
    """A variant's recorded time, or the nearest one recorded: ours for ours without a path, the
    fastest of ours, stock and cuDNN for routed, stock for native."""
    if (variant, passname) in ms:
        return ms[variant, passname]
    if switched_off_path(variant):
        return ms.get(("ours", passname))
    if variant == "routed":
        known = [ms[v, passname] for v in ("ours", "stock", "cudnn") if (v, passname) in ms]
        return min(known) if known else None
    if variant == "native":
        return ms.get(("stock", passname))
    return None


def _check_s(records: list[Recorded], meets_cudnn: bool) -> float | None:
    """The check's seconds in runs that met cuDNN as this one will; a run that will not meet it may
    take a run's that did (the larger figure), never the other way round."""
    same = [r.check_s for r in records if r.met_cudnn == meets_cudnn]
    if same:
        return statistics.median(same)
    return statistics.median(r.check_s for r in records) if records and not meets_cudnn else None


def _scaled_ms(records: list[Recorded], size: int) -> dict[tuple[str, str], float]:
    """Times a run of a problem of `size` step bytes, from problems of its kind: their median a byte."""
    keys = {key for r in records for key in r.ms}
    return {key: size * statistics.median(r.ms[key] / r.step_bytes for r in records if key in r.ms) for key in keys}


def problem_seconds(problem: Problem, variants: tuple[str, ...], repeats: int, warmup: int, history: History,
                    pass_overhead_s: float, launches: bool = False) -> tuple[float, bool]:
    """(seconds, whether the problem itself was recorded): by its own records, else its kind's."""
    meets_cudnn = any(v in MEETS_CUDNN for v in variants)
    own = history.records.get(problem.label, [])
    kind = None if own else history.of_kind(problem)
    if own:
        ms = {key: t for r in own for key, t in r.ms.items()}  # the newest report's where several timed it
        sets = round(statistics.median(r.buffer_sets for r in own))
    else:
        ms = _scaled_ms(kind, _step_bytes(problem))
        sets = buffer_sets_needed(rotation_bytes(problem), allocation_bytes(problem), history.l2_bytes, MEMORY_BUDGET)
    check = _check_s(own, meets_cudnn)
    if check is None:
        check = _check_s(history.of_kind(problem) if kind is None else kind, meets_cudnn)
    if check is None:  # nothing like it checked this way: the slowest check recorded
        check = max((r.check_s for r in history.every()), default=1.0)
    runs = sets * (1 + warmup + repeats)
    timing = 0.0
    for variant in variants:
        for passname in problem.passes:
            per_run = _stand_in_ms(variant, passname, ms)
            if per_run is None:  # nothing stands in: the slowest variant recorded for the pass
                per_run = max((t for (_, p), t in ms.items() if p == passname), default=None)
            if per_run is None:  # the pass never recorded for such a problem: any recorded, a byte at a time
                per_run = max((t for (_, p), t in _scaled_ms(history.every(), _step_bytes(problem)).items()
                               if p == passname), default=0.0)
            timing += runs * per_run / 1000 + pass_overhead_s
    recording = LAUNCH_RECORDING_S * len(problem.passes) if launches else 0.0
    return check + timing + recording, bool(own)


def estimate(chosen: list[Problem], variants: tuple[str, ...], history: History, repeats: int = 30,
             warmup: int = 3, launches: bool = False) -> Estimate:
    overhead = history.pass_overhead_s()
    seconds, looked_up = RUN_START_S, 0
    for problem in chosen:
        s, found = problem_seconds(problem, variants, repeats, warmup, history, overhead, launches)
        seconds += s
        looked_up += found
    return Estimate(seconds, len(chosen), looked_up)
