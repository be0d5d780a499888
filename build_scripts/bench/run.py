"""The GPU run of `make bench`: check every implementation against float64, then time it.

Writes the report (JSON, schema dwconv-bench/1) after every problem, so that a run cut
short still leaves what it measured. Each row is one problem and pass, with the time of
every variant (ms, median per run), the byte floor beside it, and the checks it passed.
Given stop_after_s, it starts no problem that would end past that many seconds, judged by
the longest problem so far, and the report says where it stopped (`cut_short`), so that a
device call with a time limit ends with a whole report.

A variant whose check raised is not timed. One that ran but missed the tolerance is timed (the times
are kept, in case the tolerance is what was wrong), and the report flags it: bench.md judges no
target by it and `make routing-table` routes nothing by it. Where a variant's failure leaves the
CUDA context unusable (an illegal address, a launch failure: CUDA's sticky errors fail every later
call of the process), the run stops there and the report says so (`cut_short` with its reason),
rather than spend its time recording every later problem as failed.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from ..upstream_runs import DEFAULT_OVERLAY_DIR
from .floor import L2_MULTIPLE, allocation_bytes, buffer_sets_needed, pass_bytes, rotation_bytes
from .launches import record_launches
from .layers import CHECK_MAX_MACS, CONFIGS_2D, DEFAULT_SETS, Problem, checked_problem, matching, problems
from .report import problem_label
from .schema import SCHEMA, ends_in_time, parse_variants, problem_row
from .timing import copy_bandwidth, fma_rate, time_pass
from .variants import (
    DTYPES, Overlay, cudnn_gradient_backend, make_buffers, passes_of, stock_backend,
)

# Largest error allowed, relative to the reference's largest magnitude (fp32 also covers cuDNN, timed
# with TF32 off as the routing runs it, and stock's own choice).
TOLERANCE = {"float64": 1e-10, "float32": 2e-3, "float16": 4e-3, "bfloat16": 3e-2}


def import_overlay():
    staging = Path(os.environ.get("DWCONV_OVERLAY_DIR") or DEFAULT_OVERLAY_DIR)
    if (staging / "dwconv_overlay" / "__init__.py").exists():
        sys.path.insert(0, str(staging))
    import dwconv_overlay
    return dwconv_overlay


def error_text(err: Exception, what: str = "") -> str:
    """An exception as a report records it: one line, at most 300 characters, after what failed."""
    return f"{what + ': ' if what else ''}{type(err).__name__}: {err}".splitlines()[0][:300]


class ContextLost(RuntimeError):
    """A variant raised, and the CUDA context no longer runs anything: the process can measure no more."""

    def __init__(self, variant: str, failure: str, probe: str):
        super().__init__(f"the CUDA context was lost: {variant} raised {failure}; a call after it raised {probe}")


def context_lost(device: str = "cuda") -> str | None:
    """After a variant raised: what a fresh call on the GPU raises where the context is lost, else None
    (a run on the CPU, or a GPU that has run nothing yet, has no context to lose; memory the failed
    variant still holds is no lost context)."""
    if not str(device).startswith("cuda") or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
        torch.ones(1, device=device).add_(1).cpu()
    except torch.cuda.OutOfMemoryError:
        return None
    except Exception as err:  # noqa: BLE001 - any other failure here means the context is gone
        return error_text(err)
    return None


def stop_if_context_lost(variant: str, failure: str, device: str = "cuda") -> None:
    """After `variant` raised `failure`: ContextLost where the GPU no longer runs anything."""
    probe = context_lost(device)
    if probe:
        raise ContextLost(variant, failure, probe)


def _outputs(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def relative_error(got, reference) -> float:
    """The largest error of a pass's outputs (a step's: output, grad_input, grad_weight[, grad_bias])
    relative to each reference output's largest magnitude."""
    got, reference = _outputs(got), _outputs(reference)
    if len(got) != len(reference):
        raise RuntimeError(f"{len(got)} outputs, expected {len(reference)}")
    worst = 0.0
    for g, ref in zip(got, reference):
        if g.shape != ref.shape:
            raise RuntimeError(f"shape {tuple(g.shape)}, expected {tuple(ref.shape)}")
        g, ref = g.double(), ref.double()
        finite = torch.isfinite(ref)
        if not torch.equal(torch.isfinite(g), finite) or not torch.equal(_non_finite_kinds(g[~finite]),
                                                                          _non_finite_kinds(ref[~finite])):
            return math.inf  # a NaN or an infinity where the reference has none, or another one: never a match
        if finite.all():
            g_finite, ref_finite = g, ref
        else:
            g_finite, ref_finite = g[finite], ref[finite]
        if ref_finite.numel() == 0:
            continue
        scale = ref_finite.abs().max().item() or 1.0
        worst = max(worst, (g_finite - ref_finite).abs().max().item() / scale)
    return worst


def _non_finite_kinds(values: torch.Tensor) -> torch.Tensor:
    """NaN, +inf and -inf as 0, 1 and -1, for comparing where two results are not finite."""
    return torch.nan_to_num(values, nan=0.0, posinf=1.0, neginf=-1.0)


def reference_passes(stock: dict[str, Callable], passes: tuple[str, ...], exact) -> dict:
    """Each pass's float64 result; a step's output and gradients serve as the forward's and the
    gradients' too (the same values: half the float64 work of a training problem)."""
    reference = {}
    if "step" in passes:
        step = reference["step"] = stock["step"](exact)
        reference.update(zip(("forward", "backward_input", "backward_weight"), step))
    for p in passes:
        if p not in reference:
            reference[p] = stock[p](exact)
    return {p: reference[p] for p in passes}


def check(problem: Problem, overlay: Overlay, variants, device: str = "cuda") -> dict:
    """Each variant's passes against the float64 result of upstream's native kernel, on random data:
    variant -> {"error": relative max error per pass, "ok": bool} (or {"failed": message})."""
    checked = checked_problem(problem)
    generator = torch.Generator(device=device).manual_seed(0)
    inputs = make_buffers(checked, device=device, dtype=torch.float64, generator=generator).to(DTYPES[problem.dtype])
    exact = inputs.to(torch.float64)  # the very values the variants get, in float64
    # upstream's own float64 kernel, cuDNN off: stock would give a channels_last float64 call to cuDNN, one of
    # the variants under test, whose float64 depthwise path no run has timed at a batch of 64
    with overlay.variant("native"):
        reference = reference_passes(passes_of("stock", checked), problem.passes, exact)
    results = {}
    for name in variants:
        try:
            with overlay.variant(name):
                fns = passes_of(name, checked)
                errors = {}
                for p in problem.passes:
                    try:
                        errors[p] = relative_error(fns[p](inputs), reference[p])
                    except RuntimeError as err:
                        raise RuntimeError(f"{p}: {err}") from err
            results[name] = {"error": errors, "ok": all(e <= TOLERANCE[problem.dtype] for e in errors.values())}
        except Exception as err:  # noqa: BLE001 - recorded in the report, and the run goes on
            results[name] = {"failed": error_text(err), "ok": False}
            stop_if_context_lost(name, results[name]["failed"], device)
    del inputs, exact, reference
    return results


def run_bench(out_path: Path, set_names: list[str] | None, variant_names: str = "", repeats: int = 30,
              warmup: int = 3, memory_budget_bytes: int = 24 << 30, command: str = "",
              stop_after_s: float | None = None, configs_2d: tuple[tuple[str, str], ...] | None = None,
              match: str = "", launches: bool = False) -> dict:
    """Times the problems of the sets (2D layers in configs_2d) whose label `match` finds, every
    variant of each checked against float64 first; the report goes to out_path after each problem.
    With `launches`, once every problem is timed (so that no profiler runs beside a timing), each pass
    of ours is run once more under the profiler, and its rows keep the kernels it launched
    (launches.py), for `make plan-audit`, within the same stop_after_s."""
    overlay = Overlay(import_overlay())
    paths_off = list(overlay.module.disabled_kernels())  # DWCONV_DISABLE_KERNELS: every variant keeps them off
    variants = parse_variants(variant_names, overlay.module.kernel_paths(), paths_off)
    if paths_off:
        print(f"kernel paths off in this process (DWCONV_DISABLE_KERNELS): {', '.join(paths_off)}; ours and routed "
              "are timed without them", flush=True)
    chosen = matching(problems(set_names, configs_2d), match)
    props = torch.cuda.get_device_properties(0)
    started = time.monotonic()
    bandwidth = copy_bandwidth()
    macs_per_ms = fma_rate()
    report = {
        "schema": SCHEMA,
        "command": command,
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "overlay_patchset": overlay.module.PATCHSET_HASH,
        "routing_measured_on": overlay.module.routing_measured_on(),
        "kernel_paths": list(overlay.module.kernel_paths()),  # which versions' kernels it holds (predictions.py)
        "kernel_paths_off": paths_off,
        "copy_bandwidth_GBps": bandwidth / 1e6,
        "fp32_fma_TFLOPS": 2 * macs_per_ms / 1e9,
        "l2_bytes": props.L2_cache_size,
        "sm_count": props.multi_processor_count,  # with arch, `make plan-report SMS= ARCH=` for this GPU
        "arch": f"sm_{props.major}{props.minor}",
        "settings": {"repeats": repeats, "warmup": warmup, "check_batch": "problem", "check_max_macs": CHECK_MAX_MACS,
                     "tolerance": TOLERANCE,
                     "l2_multiple": L2_MULTIPLE, "cudnn_allow_tf32": False, "cudnn_deterministic": True,
                     "cudnn_benchmark": torch.backends.cudnn.benchmark,
                     "variants": list(variants), "sets": set_names or list(DEFAULT_SETS), "match": match,
                     "launches": launches,
                     "configs_2d": [f"{dtype}/{layout}" for dtype, layout in configs_2d or CONFIGS_2D]},
        "rows": [],
    }
    longest_problem_s = 0.0
    measured = []  # (problem, its rows, its checks), for the launches recorded after the timing

    def stop_before(index: int, problem: Problem, message: str, **reason: str) -> None:
        """The run ends before `problem`: cut_short says where (and why, for anything but the time limit)."""
        report["cut_short"] = {"problems_done": index - 1, "problems": len(chosen), "stop_after_s": stop_after_s,
                               "next": problem.label, **reason}
        print(f"stopping: {message}", flush=True)
        write_json(out_path, report)

    for index, problem in enumerate(chosen, 1):
        done = f"{index - 1} of {len(chosen)} problems measured"
        if not ends_in_time(time.monotonic() - started, longest_problem_s, stop_after_s):
            stop_before(index, problem, f"{done}, the next would end past {stop_after_s:.0f} s")
            break
        problem_started = time.monotonic()
        try:
            rows, checks = measure_problem(problem, overlay, variants, props, bandwidth, macs_per_ms, repeats, warmup,
                                           memory_budget_bytes, progress=f"{index}/{len(chosen)}", started=started)
        except ContextLost as lost:
            stop_before(index, problem, f"{problem.label}: {lost}; {done}, the rest not (a fresh process measures them)",
                        reason=f"{problem.label}: {lost}")
            break
        report["rows"] += rows
        write_json(out_path, report)
        longest_problem_s = max(longest_problem_s, time.monotonic() - problem_started)
        measured.append((problem, rows, checks))
    if launches and not report.get("cut_short", {}).get("reason"):  # not on a lost context
        record_run_launches(report, measured, overlay, out_path, started, stop_after_s)
    return report


def measure_problem(problem: Problem, overlay: Overlay, variants, props, bandwidth: float, macs_per_ms: float,
                    repeats: int, warmup: int, memory_budget_bytes: int, progress: str,
                    started: float) -> tuple[list[dict], dict]:
    """A problem's rows, a pass each, and its variants' checks: each variant checked against float64,
    then timed; ContextLost where a variant's failure left the GPU unable to run anything more."""
    problem_started = time.monotonic()
    checks = check(problem, overlay, variants)
    # where a problem's seconds go (the float64 check, the buffers, the timing), for sizing device calls
    seconds = {"check": time.monotonic() - problem_started}
    sets_needed = buffer_sets_needed(rotation_bytes(problem), allocation_bytes(problem), props.L2_cache_size,
                                     memory_budget_bytes)
    buffer_sets = [make_buffers(problem) for _ in range(sets_needed)]
    backends = {"stock_forward": stock_backend(problem, buffer_sets[0]),
                "cudnn_gradients": cudnn_gradient_backend(problem, buffer_sets[0])}
    seconds["buffers"] = time.monotonic() - problem_started - seconds["check"]
    rows = []
    for passname in problem.passes:
        row = problem_row(problem, passname, bandwidth, macs_per_ms)
        row.update(buffer_sets=sets_needed, rotation_l2_multiple=sets_needed * pass_bytes(problem, passname)
                   / props.L2_cache_size, backends=backends, check={v: checks[v] for v in variants},
                   problem_seconds=seconds)
        for name in variants:
            if "failed" in checks[name]:
                row["ms"][name] = None
                continue
            try:
                with overlay.variant(name):
                    timing = time_pass(passes_of(name, problem)[passname], buffer_sets, repeats, warmup)
                row["ms"][name], row["graph"][name] = timing.ms, timing.graph
            except Exception as err:  # noqa: BLE001 - recorded, and the run goes on
                row["ms"][name] = None
                row["errors"][name] = error_text(err)
                stop_if_context_lost(name, row["errors"][name])
        rows.append(row)
        times = "  ".join(f"{v} {row['ms'][v]:.4f}" if row["ms"][v] is not None else f"{v} -" for v in variants)
        print(f"[{progress} {time.monotonic() - started:5.0f}s] {problem.label} {passname}: {times}  "
              f"floor {row['floor_ms']:.4f}", flush=True)
    del buffer_sets
    torch.cuda.empty_cache()
    seconds["timing"] = time.monotonic() - problem_started - seconds["check"] - seconds["buffers"]
    return rows, checks


def record_run_launches(report: dict, measured: list, overlay: Overlay, out_path: Path, started: float,
                        stop_after_s: float | None) -> None:
    """Each measured problem's rows given the launches of ours (record_pass_launches), a problem at a
    time while the next ends within stop_after_s; where it stops, report["launches_cut_short"] names
    the first problem left without them."""
    longest_s = 0.0
    for problem, rows, checks in measured:
        if not ends_in_time(time.monotonic() - started, longest_s, stop_after_s):
            report["launches_cut_short"] = {"next": problem.label, "stop_after_s": stop_after_s}
            print(f"stopping the launches' recording: the next would end past {stop_after_s:.0f} s", flush=True)
            break
        problem_started = time.monotonic()
        buffers = make_buffers(problem)
        for row in rows:
            row["launches"] = record_pass_launches(problem, row["pass"], overlay, checks, buffers)
        del buffers
        write_json(out_path, report)
        longest_s = max(longest_s, time.monotonic() - problem_started)
    print(f"recorded the launches of {sum('launches' in row for row in report['rows'])} rows", flush=True)


# The variant whose launches LAUNCHES=1 records: a profiled run a pass, kept to ours so that a look-back's
# many ours-without-<path> variants do not spend a device call's seconds on it.
RECORDED_VARIANT = "ours"


def record_pass_launches(problem: Problem, passname: str, overlay: Overlay, checks: dict, buffers) -> dict:
    """{"ours": the kernels one run of the pass launched, or {"error": why} where it was not recorded
    (recording raised, or ours raised in its float64 check)}; {} where ours is not a variant of the run."""
    if RECORDED_VARIANT not in checks:
        return {}
    if "failed" in checks[RECORDED_VARIANT]:
        return {RECORDED_VARIANT: {"error": "ours raised in its float64 check"}}
    try:
        with overlay.variant(RECORDED_VARIANT):
            run_pass = passes_of(RECORDED_VARIANT, problem)[passname]
            return {RECORDED_VARIANT: record_launches(lambda: run_pass(buffers))}
    except Exception as err:  # noqa: BLE001 - recorded in the report, and the run goes on
        return {RECORDED_VARIANT: {"error": error_text(err)}}


def write_json(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(report, indent=1))
    partial.replace(path)


