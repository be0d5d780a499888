"""`make plan-audit BENCH=<report>`: the kernels a GPU run launched (`make bench LAUNCHES=1`) against
the launches the host code plans for that GPU on a CPU, pass by pass.

`make plan-report` and the notes reason about every kernel's waves from the plans the kernel-choice
driver (tests/emulator/kernel_choice.cpp) makes on a CPU. They hold on a GPU only where the GPU's
launches are those plans: the same kernel, grid, block and dynamic shared memory. Since v55 a plan
also depends on what only the GPU knows, the registers its code of a kernel takes
(GpuLimits::compiled_registers); the driver is given the registers the profiler recorded, as the
runtime gives the planners theirs. Each audited launch is listed with its registers, the blocks an
SM holds by them and its waves: what plan-report estimates, as measured.

Audited: the forward, backward-input and backward-weight rows of each variant whose launches the
report holds (the bench records ours; an ours-without-<path> would be planned with its paths switched
off), and of a training step's row the kernel that computes both gradients where one does (conv1d's
fused backwards); its other kernels are the forward's and the gradients' own, audited on their rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .bench.launches import KERNEL_NAMESPACE, function_name
from .bench.profile import short_name
from .bench.report import problem_label
from .bench.schema import paths_off_of, switched_off_paths
from .errors import HarnessError
from .plan_report import BOTH_GRADIENTS, DRIVER_DTYPES, Gpu, Launch, call_line, registers_line, run_driver

# The driver's pass for each audited row's: a training step's, where one kernel computes both gradients.
ROW_PASSES = {"forward": "forward", "backward_input": "backward-input", "backward_weight": "grad-weight",
              "step": BOTH_GRADIENTS}


def registers_lines(report: dict) -> list[str]:
    """The driver's "registers <instance> <count>" lines for every kernel of ours the run recorded."""
    counts = {}
    for row in report["rows"]:
        for recorded in row.get("launches", {}).values():
            for launch in recorded if isinstance(recorded, list) else ():
                if KERNEL_NAMESPACE in launch["kernel"]:
                    counts[short_name(launch["kernel"])] = launch["registers"]
    return [registers_line(name, count) for name, count in sorted(counts.items())]


def row_call_line(row: dict, gpu: Gpu, variant: str, paths_off: list[str] = ()) -> str:
    """The driver's line for a bench row's pass, with the variant's paths switched off, and the paths the
    run's process ran without (its DWCONV_DISABLE_KERNELS, the report's kernel_paths_off)."""
    layout = "cl" if row["layout"] == "channels_last" else "nchw"
    disabled = list(dict.fromkeys([*paths_off, *switched_off_paths(variant)]))
    return call_line(DRIVER_DTYPES[row["dtype"]], ROW_PASSES[row["pass"]], layout, row["batch"], row["channels"],
                     (row["height"], row["width"]), tuple(row["kernel"]), tuple(row["stride"]),
                     tuple(row["padding"]), (1, 1), gpu=gpu, disabled=disabled)


@dataclass(frozen=True)
class Audited:
    """One pass of one variant: what the host code planned, what the GPU ran (the planned kernel's
    first launch, None where it launched none), and how they differ (empty: as planned)."""
    label: str
    variant: str
    planned: Launch | None
    ran: dict | None
    differences: tuple[str, ...]


def compare(planned: Launch, recorded: list[dict]) -> tuple[dict | None, tuple[str, ...]]:
    """The recorded launch of the planned kernel and what differs from the plan: the kernel, grid,
    block, and dynamic shared memory (the recorded figure holds the static too, so it may be more)."""
    ran = [launch for launch in recorded if function_name(launch["kernel"]) == planned.kernel]
    if not ran:
        ours = [function_name(launch["kernel"]) for launch in recorded if KERNEL_NAMESPACE in launch["kernel"]]
        return None, (f"planned {planned.kernel}, ran {', '.join(ours) or 'none of ours'}",)
    launch, differences = ran[0], []
    if tuple(launch["grid"]) != planned.grid:
        differences.append(f"grid {'x'.join(map(str, launch['grid']))}, planned {'x'.join(map(str, planned.grid))}")
    if tuple(launch["block"]) != planned.block:
        differences.append(f"block {'x'.join(map(str, launch['block']))}, planned "
                           f"{'x'.join(map(str, planned.block))}")
    if launch["shared_bytes"] < planned.shared_bytes:
        differences.append(f"shared {launch['shared_bytes']} B, planned {planned.shared_bytes} B")
    return launch, tuple(differences)


def audit(report: dict, binary: Path) -> list[Audited]:
    """Every audited pass of a bench report against the driver's plans for its GPU."""
    if not report.get("settings", {}).get("launches"):
        raise HarnessError("plan-audit: this report recorded no launches; run the bench with LAUNCHES=1 "
                           "(`make bench LAUNCHES=1 ...`)")
    gpu = Gpu(report["sm_count"], report["arch"])
    keys, lines, errors = [], [], []
    for row in report["rows"]:
        if row["pass"] not in ROW_PASSES:
            continue
        label = f"{problem_label(row)} {row['pass'].replace('step', 'step, both gradients')}"
        for variant, recorded in row.get("launches", {}).items():
            if isinstance(recorded, dict):  # not recorded: why
                errors.append(Audited(label, variant, None, None, (f"not recorded: {recorded.get('error')}",)))
                continue
            keys.append((label, variant, recorded))
            lines.append(row_call_line(row, gpu, variant, paths_off_of(report)))
    if not keys and not errors:
        raise HarnessError("plan-audit: the report holds no recorded launches: the bench records ours, so its "
                           "VARIANTS must name ours")
    answers = run_driver(binary, lines, "--plans", preamble=registers_lines(report)) if lines else []
    audited = []
    for (label, variant, recorded), answer in zip(keys, answers):
        if "+" in answer:  # a step whose gradients two kernels compute ("<one> ...+<other> ..."), each on its row
            continue
        planned = Launch.parse(answer)
        ran, differences = compare(planned, recorded)
        audited.append(Audited(label, variant, planned, ran, differences))
    return audited + errors


def markdown(audited: list[Audited], report: dict, source: str) -> str:
    gpu = Gpu(report["sm_count"], report["arch"])
    differing = [a for a in audited if a.differences]
    lines = [f"# Launches on {report['device']} against the host code's plans ({gpu})", "",
             f"From {source} (overlay patch set {report.get('overlay_patchset', '?')[:12]}, {report.get('date', '?')}). "
             f"**{len(audited) - len(differing)} of {len(audited)} passes launched as planned.** Registers: the "
             f"profiler's for the launch; blocks an SM and waves by them (as `make plan-report REGISTERS=1` "
             f"estimates them); shared: static and dynamic."
             + (f" The run's process had kernel paths {', '.join(paths_off_of(report))} off (DWCONV_DISABLE_KERNELS): "
                "every pass is planned without them." if paths_off_of(report) else "")
             + (f" The recording stopped before {report['launches_cut_short']['next']}: its rows and the later "
                f"ones are not audited." if "launches_cut_short" in report else ""), "",
             "| pass | variant | kernel | grid | block | shared KB | registers | blocks/SM | waves | as planned |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for a in sorted(audited, key=lambda a: (not a.differences, a.label, a.variant)):
        verdict = "yes" if not a.differences else "**no**: " + "; ".join(a.differences)
        if a.ran is None:
            kernel = a.planned.kernel if a.planned else "-"
            lines.append(f"| {a.label} | {a.variant} | {kernel} | - | - | - | - | - | - | {verdict} |")
            continue
        launch = Launch(a.planned.kernel, tuple(a.ran["grid"]), tuple(a.ran["block"]), a.ran["shared_bytes"])
        registers = a.ran["registers"]
        lines.append(f"| {a.label} | {a.variant} | {a.planned.kernel} | {'x'.join(map(str, launch.grid))} | "
                     f"{'x'.join(map(str, launch.block))} | {launch.shared_bytes / 1024:.1f} | {registers} | "
                     f"{launch.blocks_per_sm(gpu.sm, registers)} | {launch.waves(gpu, registers):.2f} | {verdict} |")
    return "\n".join(lines) + "\n"


def read_report(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise HarnessError(f"plan-audit: cannot read the bench report {path}: {err}") from None
