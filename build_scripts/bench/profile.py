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

  profile-<n>.log  the n-th target's ncu run as it printed it, stdout then stderr (the profiled
                process's traceback, when it failed)

One ncu process a problem, so that each kernel is known by its problem without NVTX; its caches
are flushed between the replays of a kernel (ncu's default), so the numbers are cold-cache ones.
The clocks are left as the card runs them (`--clock-control none`: ncu would otherwise lock them
to base for the run, and a device machine's clocks are not ours to change), so durations are at the
clocks the bench sees; profile.md gives the SM clock each kernel ran at. profile.md is rewritten
after every target, a target that fails is recorded and the next one run, and no target is begun
that the slowest so far says would end past BENCH_STOP_AFTER seconds (what `make gpu-session`
gives each step).
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import HarnessError
from .layers import TRAINING_PASSES, Problem, label_pattern, problems
from .schema import configs_text, parse_configs

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats")
DEFAULT_PASSES = "backward_weight"  # PASSES when unset: the pass furthest from its floor
OUR_KERNELS = "regex:dwconv::"  # matched against the demangled name: the patch set's kernels only
SPEED_OF_LIGHT = "GPU Speed Of Light Throughput"
# What profile.md shows of each kernel: (column, ncu's section name or None for any, its metric name).
# "Memory Throughput" is also a byte rate in the memory section: the percentage is Speed of Light's.
SHOWN = (("duration", None, "Duration"), ("SM MHz", None, "SM Frequency"),
         ("DRAM %", None, "DRAM Throughput"), ("memory %", SPEED_OF_LIGHT, "Memory Throughput"),
         ("SM %", None, "Compute (SM) Throughput"), ("occupancy %", None, "Achieved Occupancy"),
         ("registers", None, "Registers Per Thread"), ("cycles/issue", None, "Warp Cycles Per Issued Instruction"))
# The warp stall breakdown (cycles a warp spends stalled for each reason, per issued instruction):
# WarpStateStats prints only its summary in the details page, so the reasons are asked for by name.
# ncu matches a regex: against metric names with their suffixes (^...$ for a whole name).
STALL_PREFIX, STALL_PER_ISSUE = "smsp__average_warps_issue_stalled_", "_per_issue_active"
STALL_METRICS = "regex:^" + re.escape(STALL_PREFIX) + ".*" + re.escape(STALL_PER_ISSUE + ".ratio") + "$"
# Options newer ncu releases have and older ones refuse: passed only where `ncu --help` lists them.
# Kernel renaming could simplify the demangled names the -k filter matches; a config file in the
# working directory or $HOME could add options of its own.
OPTIONAL_OPTIONS = (("--rename-kernels", "off"), ("--config-file", "off"))
# ncu's own failures, as against those of the process it profiles: no later target would fare better.
NCU_FATAL = re.compile(r"ERR_NVGPUCTRPERM|LibraryNotLoaded|Failed to initialize|Cannot lock|not supported", re.I)


@dataclass(frozen=True)
class Target:
    index: int  # in problems(sets, configs_2d): how the profiled process finds it again
    problem: Problem
    passname: str

    @property
    def label(self) -> str:
        return self.problem.label


def targets(sets: list[str] | None, passes: list[str], match: str = "",
            configs_2d: tuple[tuple[str, str], ...] | None = None) -> list[Target]:
    """The problems of `sets` (2D layers in configs_2d) whose label `match` finds, each with those of
    `passes` it times."""
    unknown = [p for p in passes if p not in TRAINING_PASSES]
    if unknown:
        raise HarnessError(f"profile: unknown pass(es) {unknown}; PASSES takes {', '.join(TRAINING_PASSES)}")
    try:
        pattern = label_pattern(match)
        chosen = problems(sets, configs_2d)
    except ValueError as err:
        raise HarnessError(f"profile: {err}") from None
    found = [Target(i, problem, passname) for i, problem in enumerate(chosen)
             for passname in passes if passname in problem.passes]
    found = [t for t in found if pattern.search(t.label)]
    if not found:
        raise HarnessError(f"profile: no bench problem of {sets or 'any set'} matches MATCH={match!r} "
                           f"with a pass among {passes}")
    return found


def ncu_command(ncu: str, python: str, target: Target, sets: list[str] | None,
                optional: tuple[str, ...] = (), configs_2d: tuple[tuple[str, str], ...] | None = None) -> list[str]:
    sections = [arg for name in SECTIONS for arg in ("--section", name)]
    return [ncu, "--csv", "--page", "details", "--print-units", "base", "--kernel-name-base", "demangled",
            "--clock-control", "none", *optional, "-k", OUR_KERNELS, *sections, "--metrics", STALL_METRICS,
            python, "-m", "build_scripts.bench.profile", ",".join(sets or []), str(target.index), target.passname,
            configs_text(configs_2d)]


def optional_options(help_text: str) -> tuple[str, ...]:
    """Those of OPTIONAL_OPTIONS this ncu's --help lists, as arguments."""
    return tuple(arg for option, value in OPTIONAL_OPTIONS if option in help_text for arg in (option, value))


def parse_details(text: str) -> list[dict]:
    """ncu's --csv --page details output (its own ==PROF== lines and anything else skipped) as one
    dict a profiled kernel: ID, kernel, block, grid, and each metric's (value, unit) by name, and by
    (section, name) in "by_section"."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    kernels: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name") is None or row.get("Kernel Name") is None:
            raise HarnessError("profile: ncu's CSV has no Kernel Name / Metric Name columns; see profile.csv")
        if not row["Metric Name"]:
            continue  # a rule's advice, not a metric
        key = row.get("ID") or row["Kernel Name"]
        kernel = kernels.setdefault(key, {"id": key, "kernel": row["Kernel Name"], "block": row.get("Block Size", ""),
                                          "grid": row.get("Grid Size", ""), "metrics": {}, "by_section": {}})
        value = (row.get("Metric Value", ""), row.get("Metric Unit", ""))
        kernel["metrics"].setdefault(row["Metric Name"], value)
        kernel["by_section"].setdefault((row.get("Section Name", ""), row["Metric Name"]), value)
    return list(kernels.values())


def short_name(kernel: str) -> str:
    """void at::native::dwconv::channels_last_stream_kernel<c10::BFloat16, (bool)0, 7, 1>(const T1 *, ...)
    -> channels_last_stream_kernel<BFloat16, (bool)0, 7, 1>: the parameter list (the last balanced
    parentheses; casts in the template arguments stay), the return type and the namespaces dropped."""
    name = kernel.strip()
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = re.sub(r"^void\s+", "", name.strip())
    name = re.sub(r"\b(at::native::dwconv|c10)::", "", name)
    return name.replace("at::native::", "")


def metric(kernel: dict, section: str | None, name: str) -> tuple[str, str]:
    if section is not None and (section, name) in kernel.get("by_section", {}):
        return kernel["by_section"][(section, name)]
    return kernel["metrics"].get(name, ("", ""))


def top_stalls(kernel: dict, count: int = 2) -> str:
    """The reasons warps stalled most, with their cycles per issued instruction: "long_scoreboard 3.1"."""
    stalls = []
    for name, (value, _) in kernel["metrics"].items():
        # "selected" is the cycle a warp issues in, not a stall
        if name.startswith(STALL_PREFIX) and STALL_PER_ISSUE in name and "_selected" not in name:
            try:
                stalls.append((float(value.replace(",", "")), name[len(STALL_PREFIX):name.index(STALL_PER_ISSUE)]))
            except ValueError:
                continue
    return ", ".join(f"{reason} {cycles:.2g}" for cycles, reason in sorted(stalls, reverse=True)[:count])


def megahertz(value: str, unit: str) -> str:
    """A clock as ncu gives it in base units (hz, or cycle/second; thousands separated by commas) in MHz."""
    try:
        hertz = float(value.replace(",", ""))
    except ValueError:
        return f"{value} {unit}".strip()
    return f"{hertz / 1e6:.0f}" if unit.lower() in ("hz", "cycle/second", "") else f"{value} {unit}"


def markdown(rows: list[tuple[Target, dict]], header: str, failed: list[tuple[Target, str]] = ()) -> str:
    columns = ["problem", "pass", "kernel", "grid", "block", *(c for c, _, _ in SHOWN), "top stalls (cycles/issue)"]
    out = [header, "", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for target, kernel in rows:
        shown = []
        for _, section, name in SHOWN:
            value, unit = metric(kernel, section, name)
            if name == "SM Frequency":
                shown.append(megahertz(value, unit))
            else:
                shown.append(f"{value} {unit}".strip() if unit and unit not in ("%", "register/thread") else value)
        out.append("| " + " | ".join([target.label, target.passname, f"`{short_name(kernel['kernel'])}`",
                                      kernel["grid"], kernel["block"], *shown, top_stalls(kernel)]) + " |")
    if failed:
        out += ["", "## Not profiled", ""]
        out += [f"- {target.label} {target.passname}: {reason}" for target, reason in failed]
    return "\n".join(out) + "\n"


def find_ncu(ncu: str) -> str | None:
    """`ncu` on PATH, else where CUDA and Nsight Compute install it."""
    found = shutil.which(ncu)
    if found or ncu != "ncu":
        return found
    def version(path: str) -> tuple:  # /opt/nvidia/nsight-compute/2025.10.1/ncu after 2025.9.0
        return tuple(int(part) for part in re.findall(r"\d+", Path(path).parent.name))

    candidates = ["/usr/local/cuda/bin/ncu",
                  *sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), key=version, reverse=True)]
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def failure(proc: subprocess.CompletedProcess) -> tuple[str, bool] | None:
    """Why a target's ncu run gave nothing to read (None: it profiled our kernels): ncu's errors, and
    the last lines the profiled process wrote to stderr (its traceback); and whether ncu itself failed
    (judged on ncu's own lines only), which no later target would escape."""
    lines = (proc.stdout + proc.stderr).splitlines()
    errors = [line for line in lines if line.startswith("==ERROR==")]
    if proc.returncode == 0 and not errors:
        if parse_details(proc.stdout):
            return None
        warnings = [line for line in lines if line.startswith("==WARNING==")]
        return "; ".join(["no kernel of ours was profiled", *warnings]), False
    own = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("==")]
    reason = "; ".join(errors + own[-10:]) or f"exit {proc.returncode}, no message"
    return reason, any(NCU_FATAL.search(line) for line in errors)


def run_profile(out_dir: Path, sets: list[str] | None, passes: list[str], match: str, ncu: str = "ncu",
                python: str = sys.executable, stop_after_s: float | None = None,
                configs_2d: tuple[tuple[str, str], ...] | None = None, paths_off: list[str] = ()) -> Path:
    """paths_off: the kernel paths this process's DWCONV_DISABLE_KERNELS switches off, which each profiled
    process inherits (profile.md says so: the kernels are then those ours runs without them)."""
    started = time.monotonic()
    found = targets(sets, passes, match, configs_2d)
    ncu_path = find_ncu(ncu)
    if ncu_path is None:
        raise HarnessError(f"profile: Nsight Compute's `{ncu}` is not on PATH, in /usr/local/cuda/bin or in "
                           "/opt/nvidia/nsight-compute/<version> (set NCU=/path/to/ncu)")
    help_run = subprocess.run([ncu_path, "--help"], capture_output=True, text=True)
    version = subprocess.run([ncu_path, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    optional = optional_options(help_run.stdout)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "profile.md"
    configs_setting = f" CONFIGS={configs_text(configs_2d)}" if configs_2d else ""
    header = (f"# ncu profile of our kernels: SETS={','.join(sets or [])}{configs_setting} PASSES={','.join(passes)} "
              f"MATCH={match!r}\n\n{version[-1] if version else ncu_path}; clocks as the card runs them "
              "(--clock-control none)"
              + (f"; kernel paths off (DWCONV_DISABLE_KERNELS): {', '.join(paths_off)}, so the kernels are those ours "
                 "runs without them" if paths_off else ""))
    raw, rows, failed = [], [], []
    slowest = 0.0
    for n, target in enumerate(found, 1):
        elapsed = time.monotonic() - started
        if stop_after_s is not None and elapsed + slowest > stop_after_s:
            failed += [(t, f"not begun: the {stop_after_s:.0f} s limit") for t in found[n - 1:]]
            print(f"stopping: {n - 1} of {len(found)} targets profiled, the next would end past {stop_after_s:.0f} s",
                  flush=True)
            break
        target_started = time.monotonic()
        proc = subprocess.run(ncu_command(ncu_path, python, target, sets, optional, configs_2d), capture_output=True,
                              text=True)
        slowest = max(slowest, time.monotonic() - target_started)
        (out_dir / f"profile-{n}.log").write_text(f"# {target.label} {target.passname}\n{proc.stdout}\n"
                                                 f"# stderr\n{proc.stderr}")
        raw.append(f"# {target.label} {target.passname}\n{proc.stdout}")
        (out_dir / "profile.csv").write_text("\n".join(raw))
        failed_why = failure(proc)
        if failed_why is not None:
            reason, ncu_failed = failed_why
            failed.append((target, reason))
            print(f"[{n}/{len(found)}] {target.label} {target.passname}: error: {reason}", flush=True)
            report.write_text(markdown(rows, header, failed))
            if ncu_failed:
                raise HarnessError(f"profile: ncu failed on {target.label} {target.passname} "
                                   f"(exit {proc.returncode}): {reason}")
            continue
        kernels = parse_details(proc.stdout)
        print(f"[{n}/{len(found)}] {target.label} {target.passname}: "
              + ", ".join(short_name(k["kernel"]).split("<")[0] for k in kernels), flush=True)
        rows += [(target, kernel) for kernel in kernels]
        report.write_text(markdown(rows, header, failed))
    report.write_text(markdown(rows, header, failed))
    print(f"wrote {report} and {out_dir / 'profile.csv'}")
    errors = [(t, r) for t, r in failed if not r.startswith("not begun")]
    if errors:
        raise HarnessError("profile: " + "; ".join(f"{t.label} {t.passname}: {r}" for t, r in errors))
    return report


def profile_one(sets: list[str] | None, index: int, passname: str,
                configs_2d: tuple[tuple[str, str], ...] | None = None) -> None:
    """The process ncu watches: our implementation of one pass of one problem, called once."""
    import torch

    from .run import import_overlay
    from .variants import Overlay, make_buffers, passes_of

    problem = problems(sets, configs_2d)[index]
    overlay = Overlay(import_overlay())
    buffers = make_buffers(problem)
    with overlay.variant("ours"):
        passes_of("ours", problem)[passname](buffers)
    torch.cuda.synchronize()


if __name__ == "__main__":
    sets_arg, index_arg, pass_arg, configs_arg = sys.argv[1:5]
    profile_one([s for s in sets_arg.split(",") if s] or None, int(index_arg), pass_arg, parse_configs(configs_arg))
