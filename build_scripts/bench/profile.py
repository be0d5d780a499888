"""`make profile` (GPU): Nsight Compute on chosen bench passes of our kernels.

The timing says how far a pass is from its floor; a profile says why. For each bench problem
and pass chosen (SETS, PASSES, MATCH: a regular expression on the problem's label), Nsight
Compute's `ncu` runs one process that calls our implementation of that pass once, and
profiles every kernel of the patch set it launches (at::native::dwconv::...) with a few
sections: throughput against the GPU's peaks, memory, occupancy, launch shape, warp stalls.
Writes, under the output folder:

  profile.csv   ncu's details page of every kernel, as it printed it, each row led by the problem
  profile.md    a table a kernel a line: problem, pass, kernel, grid, block, registers, duration,
                DRAM and SM throughput, achieved occupancy, cycles an issued instruction

One ncu process a problem, so that each kernel is known by its problem without NVTX; its caches
are flushed between the replays of a kernel (ncu's default), so the numbers are cold-cache ones.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import HarnessError
from .layers import TRAINING_PASSES, Problem, problems

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats")
DEFAULT_PASSES = "backward_weight"  # PASSES when unset: the pass furthest from its floor
OUR_KERNELS = "regex:dwconv::"  # matched against the demangled name: the patch set's kernels only
# What profile.md shows of each kernel: (column, ncu's metric name).
SHOWN = (("duration", "Duration"), ("DRAM %", "DRAM Throughput"), ("memory %", "Memory Throughput"),
         ("SM %", "Compute (SM) Throughput"), ("occupancy %", "Achieved Occupancy"),
         ("registers", "Registers Per Thread"), ("cycles/issue", "Warp Cycles Per Issued Instruction"))


@dataclass(frozen=True)
class Target:
    index: int  # in problems(sets): how the profiled process finds it again
    problem: Problem
    passname: str

    @property
    def label(self) -> str:
        p = self.problem
        return f"{p.layer.set} {p.layer.name} b{p.batch} {p.dtype} {p.layout}"


def targets(sets: list[str] | None, passes: list[str], match: str = "") -> list[Target]:
    """The problems of `sets` whose label `match` finds, each with those of `passes` it times."""
    unknown = [p for p in passes if p not in TRAINING_PASSES]
    if unknown:
        raise HarnessError(f"profile: unknown pass(es) {unknown}; PASSES takes {', '.join(TRAINING_PASSES)}")
    try:
        pattern = re.compile(match)
    except re.error as err:
        raise HarnessError(f"profile: MATCH={match!r} is not a regular expression: {err}") from None
    try:
        chosen = problems(sets)
    except ValueError as err:
        raise HarnessError(f"profile: {err}") from None
    found = [Target(i, problem, passname) for i, problem in enumerate(chosen)
             for passname in passes if passname in problem.passes]
    found = [t for t in found if pattern.search(t.label)]
    if not found:
        raise HarnessError(f"profile: no bench problem of {sets or 'any set'} matches MATCH={match!r} "
                           f"with a pass among {passes}")
    return found


def ncu_command(ncu: str, python: str, target: Target, sets: list[str] | None) -> list[str]:
    sections = [arg for name in SECTIONS for arg in ("--section", name)]
    return [ncu, "--csv", "--page", "details", "--print-units", "base", "--kernel-name-base", "demangled",
            "-k", OUR_KERNELS, *sections, python, "-m", "build_scripts.bench.profile",
            ",".join(sets or []), str(target.index), target.passname]


def parse_details(text: str) -> list[dict]:
    """ncu's --csv --page details output (its own ==PROF== lines and anything else skipped) as one
    dict a profiled kernel: ID, kernel, block, grid, and each metric's (value, unit) by name."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    kernels: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name") is None or row.get("Kernel Name") is None:
            raise HarnessError("profile: ncu's CSV has no Kernel Name / Metric Name columns; see profile.csv")
        key = row.get("ID") or row["Kernel Name"]
        kernel = kernels.setdefault(key, {"id": key, "kernel": row["Kernel Name"], "block": row.get("Block Size", ""),
                                          "grid": row.get("Grid Size", ""), "metrics": {}})
        kernel["metrics"].setdefault(row["Metric Name"], (row.get("Metric Value", ""), row.get("Metric Unit", "")))
    return list(kernels.values())


def short_name(kernel: str) -> str:
    """at::native::dwconv::grad_weight_row_kernel<c10::BFloat16, int, 4>(...) -> grad_weight_row_kernel<BFloat16, int, 4>"""
    name = re.sub(r"\(.*\)$", "", kernel)
    name = re.sub(r"\b(at::native::dwconv|c10)::", "", name)
    return name.replace("at::native::", "")


def markdown(rows: list[tuple[Target, dict]], header: str) -> str:
    columns = ["problem", "pass", "kernel", "grid", "block", *(c for c, _ in SHOWN)]
    out = [header, "", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for target, kernel in rows:
        shown = []
        for _, metric in SHOWN:
            value, unit = kernel["metrics"].get(metric, ("", ""))
            shown.append(f"{value} {unit}".strip() if unit and unit not in ("%", "register/thread") else value)
        out.append("| " + " | ".join([target.label, target.passname, f"`{short_name(kernel['kernel'])}`",
                                      kernel["grid"], kernel["block"], *shown]) + " |")
    return "\n".join(out) + "\n"


def run_profile(out_dir: Path, sets: list[str] | None, passes: list[str], match: str, ncu: str = "ncu",
                python: str = sys.executable) -> Path:
    found = targets(sets, passes, match)
    ncu_path = shutil.which(ncu)
    if ncu_path is None:
        raise HarnessError(f"profile: Nsight Compute's `{ncu}` is not on PATH (set NCU=/path/to/ncu)")
    out_dir.mkdir(parents=True, exist_ok=True)
    raw, rows = [], []
    for n, target in enumerate(found, 1):
        proc = subprocess.run(ncu_command(ncu_path, python, target, sets), capture_output=True, text=True)
        raw.append(f"# {target.label} {target.passname}\n{proc.stdout}")
        (out_dir / "profile.csv").write_text("\n".join(raw))
        errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("==ERROR==")]
        if proc.returncode != 0 or errors:
            message = "; ".join(errors) or (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise HarnessError(f"profile: ncu failed on {target.label} {target.passname} (exit {proc.returncode}): "
                               f"{message}")
        kernels = parse_details(proc.stdout)
        print(f"[{n}/{len(found)}] {target.label} {target.passname}: "
              + ", ".join(short_name(k["kernel"]).split("<")[0] for k in kernels), flush=True)
        rows += [(target, kernel) for kernel in kernels]
    report = out_dir / "profile.md"
    report.write_text(markdown(rows, f"# ncu profile of our kernels: SETS={','.join(sets or [])} "
                                     f"PASSES={','.join(passes)} MATCH={match!r}"))
    print(f"wrote {report} and {out_dir / 'profile.csv'}")
    return report


def profile_one(sets: list[str] | None, index: int, passname: str) -> None:
    """The process ncu watches: our implementation of one pass of one problem, called once."""
    import torch

    from .run import import_overlay
    from .variants import Overlay, make_buffers, passes_of

    problem = problems(sets)[index]
    overlay = Overlay(import_overlay())
    buffers = make_buffers(problem)
    with overlay.variant("ours"):
        passes_of("ours", problem, torch.backends.cudnn.allow_tf32)[passname](buffers)
    torch.cuda.synchronize()


if __name__ == "__main__":
    sets_arg, index_arg, pass_arg = sys.argv[1:4]
    profile_one([s for s in sets_arg.split(",") if s] or None, int(index_arg), pass_arg)
