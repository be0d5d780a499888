"""A bench report (JSON, from run.py) as markdown tables and PNG plots.

Works on any machine with the JSON: markdown needs only the standard library, the plots
matplotlib. Several reports (one run split over device calls) are read as one when they
come from the same device and torch.
"""

from __future__ import annotations

import json
from math import exp, log
from pathlib import Path
from statistics import median

from ..errors import HarnessError
from .floor import ELEMENT_BYTES
from .launches import KERNEL_NAMESPACE, function_name
from .layers import DEFAULT_SETS, GEOMEAN_SETS, label_text, problems
from .predictions import load as load_predictions
from .predictions import markdown_lines as predictions_markdown_lines
from .schema import (BASELINES, kernel_paths_of, one_run_ms, passed, paths_off_of, problem_row, row_key,
                     switched_off_path)

PASSES = ("forward", "backward_input", "backward_weight", "step")
PASS_TITLES = {"forward": "forward", "backward_input": "backward-input", "backward_weight": "backward-weight",
               "step": "training step"}
DTYPE_TITLES = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
VARIANT_TITLES = {"stock": "stock", "cudnn": "cuDNN", "native": "native", "ours": "ours", "routed": "routed"}
LARGE_ACTIVATION_BYTES = 8 << 20
# Two timings of one pass closer than this are the same: the same row timed in two runs on the
# H100 differed by 1 % at the 90th percentile, 3.4 % at the 99th (results/NVIDIA-H100-80GB-HBM3/
# 2026-11-22). A kernel path "changes" a row, or the routing loses one, past it.
NOISE = 0.03


def variant_title(variant: str) -> str:
    path = switched_off_path(variant)
    return f"ours without {path}" if path else VARIANT_TITLES[variant]


def ours_runs(row: dict) -> str:
    """The kernels of ours a pass launched, as `make bench LAUNCHES=1` recorded them, with their grids
    ("grad_weight_register_tiled_kernel 96x19x1 + grad_weight_finish_kernel 3x1x1"); "-" where none were."""
    recorded = row.get("launches", {}).get("ours")
    if not isinstance(recorded, list):
        return "-"
    return " + ".join(f"{function_name(launch['kernel'])} {'x'.join(map(str, launch['grid']))}"
                      for launch in recorded if KERNEL_NAMESPACE in launch["kernel"]) or "-"


def problem_label(row: dict) -> str:
    """A row's problem as a cut-short run names the first one it left (run_bench's "next")."""
    return label_text(row["set"], row["layer"], row["batch"], row["dtype"], row["layout"])


def failed_checks(report: dict, baselines: bool | None = None) -> list[str]:
    """Each problem and variant that failed its check, once (every row of a problem carries its checks):
    of every variant, or (baselines True or False) of upstream's BASELINES alone or of the others alone."""
    failed = {}
    for row in report["rows"]:
        for variant, result in row["check"].items():
            if baselines is not None and (variant in BASELINES) != baselines:
                continue
            label = f"{problem_label(row)}: {variant}"
            if not result["ok"]:
                failed.setdefault(label, f"{label} ({result.get('failed') or result.get('error')})")
    return list(failed.values())


# What decides how a report's numbers were taken: reports that differ in it are not one run.
METHOD_SETTINGS = ("check_batch", "cudnn_allow_tf32", "cudnn_benchmark", "cudnn_deterministic", "l2_multiple")


def method(report: dict) -> dict:
    settings = report.get("settings", {})
    return {key: settings.get(key) for key in METHOD_SETTINGS}


def merge(reports: list[dict], names: list[str]) -> dict:
    """Reports of one card and torch as one (a bench cut short, then the sets it left, or a run of
    other variants): where two timed the same problem, pass and variant, the later stands, and each
    row keeps every run's times (`runs`), so that a ratio of two variants is read from one run; a cut
    that a later report made up for is no longer reported."""
    first = reports[0]
    for name, r in zip(names[1:], reports[1:]):
        if (r["device"], r["torch"]) != (first["device"], first["torch"]):
            raise ValueError(f"{name} is from {r['device']}, torch {r['torch']}; {names[0]} from "
                             f"{first['device']}, torch {first['torch']}: not one run")
        if set(paths_off_of(r)) != set(paths_off_of(first)):
            raise ValueError(f"{name} ran ours with kernel paths {paths_off_text(r)} off, {names[0]} with "
                             f"{paths_off_text(first)}: two different kernels' numbers do not make one table")
        if method(r) != method(first):
            raise ValueError(f"{name} was measured as {method(r)}, {names[0]} as {method(first)}: numbers of two "
                             "methods do not make one table")
    rows: dict[tuple[str, str], dict] = {}
    for r in reports:
        for row in r["rows"]:
            key = row_key(row)
            earlier = rows.get(key, {})
            # per-variant fields (times, checks, graphs) keep the variants only the earlier run timed
            rows[key] = {**earlier, **row, **{k: {**earlier[k], **v} for k, v in row.items()
                                              if isinstance(v, dict) and isinstance(earlier.get(k), dict)},
                         "runs": [*earlier.get("runs", []), row["ms"]]}
    merged = dict(first)
    merged["rows"] = list(rows.values())
    # the variants any of them timed, in order of first appearance: the tables show each
    merged["settings"] = {**first.get("settings", {}), "variants": list(dict.fromkeys(
        v for r in reports for v in r.get("settings", {}).get("variants", [])))}
    merged["kernel_paths"] = [path for path in kernel_paths_of(first) if all(path in kernel_paths_of(r) for r in reports)]
    merged["overlay_patchsets"] = list(dict.fromkeys(r["overlay_patchset"] for r in reports if r.get("overlay_patchset")))
    merged["commands"] = [r.get("command", "") for r in reports]
    merged["cut_short"] = [r["cut_short"] for i, r in enumerate(reports)
                           if "cut_short" in r and not any(problem_label(row) == r["cut_short"]["next"]
                                                           for later in reports[i + 1:] for row in later["rows"])]
    return merged


def load(paths: list[Path]) -> dict:
    return merge([json.loads(p.read_text()) for p in paths], [str(p) for p in paths])


def cut_short_lines(report: dict) -> list[str]:
    """What a run left unmeasured: at its time limit (run_bench's stop_after_s), or where a variant's failure
    lost the CUDA context (the cut's reason)."""
    cuts = report.get("cut_short") or []
    return [(f"- **Cut short**, {c['reason']}: " if c.get("reason") else
             f"- **Cut short** at its limit of {c['stop_after_s']:.0f} s: ")
            + f"{c['problems_done']} of {c['problems']} problems measured; not measured from {c['next']} on"
            for c in ([cuts] if isinstance(cuts, dict) else cuts)]


def seconds_lines(rows: list[dict]) -> list[str]:
    """Where the run's seconds went (rows from 2026-11-26 on record their problem's), for sizing device calls."""
    spent = {problem_label(row): row["problem_seconds"] for row in rows if row.get("problem_seconds")}
    if not spent:
        return []
    parts = {part: sum(s.get(part, 0.0) for s in spent.values()) for part in ("check", "buffers", "timing")}
    per_problem = sorted(sum(s.values()) for s in spent.values())
    return [f"- {sum(parts.values()):.0f} s over {len(spent)} problems (median {per_problem[len(per_problem) // 2]:.1f} s, "
            f"longest {per_problem[-1]:.1f} s): float64 checks {parts['check']:.0f} s, buffers "
            f"{parts['buffers']:.0f} s, timing {parts['timing']:.0f} s"]


def config_title(row: dict) -> str:
    """fp32 NCHW, bf16 channels_last, ...; conv1d's layouts are contiguous and channels_last (transposed)."""
    dtype = DTYPE_TITLES.get(row["dtype"], row["dtype"])
    if row["conv"] == "1d":
        return f"conv1d {dtype} {row['layout']}"
    return f"{dtype} {'NCHW' if row['layout'] == 'contiguous' else row['layout']}"


def speedup(row: dict, variant: str, over: str) -> float | None:
    """How many times faster `variant` ran than `over`, both timed in one run (the last that timed both);
    None where no run did, or `variant` failed its check (the time of a wrong result proves nothing; `over`
    is a baseline, and its time stands: it is what a user gets)."""
    times = one_run_ms(row, (variant, over))
    return times[over] / times[variant] if times and passed(row, variant) else None


def floor_fraction(row: dict, variant: str = "ours") -> float | None:
    t = row["ms"].get(variant)
    return row["floor_ms"] / t if t and passed(row, variant) else None


def roofline_fraction(row: dict, variant: str = "ours") -> float | None:
    """The larger of the byte floor and the compute floor, over the time (reports without the
    compute floor: the byte floor)."""
    t = row["ms"].get(variant)
    return max(row["floor_ms"], row.get("compute_floor_ms") or 0) / t if t and passed(row, variant) else None


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return exp(sum(log(v) for v in values) / len(values)) if values else None


def fmt(value, spec=".3f", none="–") -> str:
    return none if value is None else format(value, spec)


def activation_bytes(row: dict) -> int:
    return row["batch"] * row["channels"] * row["height"] * row["width"] * ELEMENT_BYTES[row["dtype"]]


def issue_rows() -> list[dict]:
    """A row (without times) for every problem and pass of the issue's sets: what each target is
    stated over, so that a report that timed part of it says so instead of judging the part."""
    return [problem_row(p, passname, 1.0) for p in problems(list(DEFAULT_SETS)) for passname in p.passes]


def _judged(rows: list[dict], stated_over: list[dict], wanted, value) -> tuple[list[dict], int]:
    """The rows a target wants that have a value (their times, checks passed), and how many of the rows
    it is stated over (issue_rows()) it wants."""
    expected = {row_key(r) for r in stated_over if wanted(r)}
    return [r for r in rows if row_key(r) in expected and value(r) is not None], len(expected)


def _verdict(have: list, expected: int, met: bool) -> str:
    return "–" if len(have) < expected or not have else ("yes" if met else "no")


def _coverage(have: list, expected: int) -> str:
    return "" if len(have) == expected else f" ({len(have)} of the {expected} it is stated over timed and checked)"


def _step_gap(steps: list[dict], variant: str, goal: float) -> str:
    """How far a step geomean short of `goal` is from it, in the unit a kernel is tuned in: the one
    fraction of its roofline floor that every step would have to reach for the geomean to be `goal`
    (goal / the geomean of stock over the floor), beside the median fraction the steps reach now."""
    stock_over_floor = geomean(r["ms"]["stock"] / max(r["floor_ms"], r.get("compute_floor_ms") or 0) for r in steps)
    if goal > stock_over_floor:
        return (f"; {goal:g}× is past the floor: stock's steps already run at a geomean "
                f"{1 / stock_over_floor:.0%} of their roofline floor")
    return (f"; {goal:g}× needs every step at {goal / stock_over_floor:.0%} of its roofline floor "
            f"(now a median {median(roofline_fraction(r, variant) for r in steps):.0%})")


def targets(rows: list[dict]) -> list[tuple[str, str, str]]:
    """(target, what was measured, met?) for each of issue 6's tuning targets, judged on the issue's
    layer sets: rows of the coverage sets (layers.COVERAGE_SETS) are shown but judge nothing. A target
    is judged only where every row it is stated over was timed, and its variant passed its check;
    otherwise it shows what was measured, and on how many of the rows."""
    rows = [r for r in rows if r["set"] in DEFAULT_SETS]
    stated_over = issue_rows()
    out = []
    for dtype, layout in (("bfloat16", "channels_last"), ("float32", "contiguous")):
        for variant in ("ours", "routed"):
            timed, expected = _judged(rows, stated_over,
                                      lambda r: r["pass"] == "step" and r["set"] in GEOMEAN_SETS and r["batch"] > 1
                                      and (r["dtype"], r["layout"]) == (dtype, layout),
                                      lambda r: speedup(r, variant, "stock"))
            g = geomean(speedup(r, variant, "stock") for r in timed)
            out.append((f"training-step geomean {variant} / stock ≥ 2×, {', '.join(GEOMEAN_SETS)}, "
                        f"{config_title({'dtype': dtype, 'layout': layout, 'conv': '2d'})}",
                        f"{fmt(g, '.2f')}× over {len(timed)} layers" + _coverage(timed, expected)
                        + (_step_gap(timed, variant, 2) if g is not None and g < 2 else ""),
                        _verdict(timed, expected, g is not None and g >= 2)))
    routed, expected = _judged(rows, stated_over, lambda r: True, lambda r: speedup(r, "routed", "stock"))
    slower = [r for r in routed if speedup(r, "routed", "stock") < 1 - NOISE]
    worst = min((speedup(r, "routed", "stock") for r in slower), default=None)
    out.append(("every layer and pass routed at least as fast as stock",
                f"{len(slower)} of {len(routed)} rows slower by over {NOISE:.0%}" + (f" (worst {worst:.2f}×)" if worst else "")
                + _coverage(routed, expected), _verdict(routed, expected, not slower)))
    for passes, goal in ((("forward", "backward_input"), 0.75), (("backward_weight",), 0.60)):
        big, expected = _judged(rows, stated_over,
                                lambda r: r["pass"] in passes and r["conv"] == "2d" and max(r["kernel"]) <= 7
                                and activation_bytes(r) >= LARGE_ACTIVATION_BYTES, floor_fraction)
        fractions = [floor_fraction(r) for r in big]
        met = sum(1 for f in fractions if f >= goal)
        low = min(fractions, default=None)
        # At the measured FMA rate, these rows' multiply-adds alone take longer than the goal allows.
        compute_bound = sum(1 for r in big if (r.get("compute_floor_ms") or 0) > r["floor_ms"] / goal)
        out.append((f"{' and '.join(PASS_TITLES[p] for p in passes)} ≥ {goal:.0%} of the floor (k ≤ 7, ≥ 8 MB of "
                    f"activations)", f"{met} of {len(big)} rows; lowest {fmt(low and 100 * low, '.0f')}%" + (
                        f"; {compute_bound} of them out of reach on CUDA cores (their compute floor is over "
                        f"the floor / {goal:.0%})" if compute_bound else "") + _coverage(big, expected),
                    _verdict(big, expected, met == len(big))))
    large, expected = _judged(rows, stated_over, lambda r: r["set"] == "RepLKNet-31B" and r["batch"] > 1,
                              lambda r: speedup(r, "ours", "stock"))
    low = min((speedup(r, "ours", "stock") for r in large), default=None)
    out.append(("large kernels ≥ 2× over stock (every pass)", f"lowest {fmt(low, '.2f')}×" + _coverage(large, expected),
                _verdict(large, expected, low is not None and low >= 2)))
    conv1d, expected = _judged(rows, stated_over, lambda r: r["conv"] == "1d", floor_fraction)
    high = max((1 / floor_fraction(r) for r in conv1d), default=None)
    out.append(("conv1d within 1.3× of the floor", f"worst {fmt(high, '.2f')}× the floor" + _coverage(conv1d, expected),
                _verdict(conv1d, expected, high is not None and high <= 1.3)))
    return out


def look_back(rows: list[dict], variants: list[str]) -> list[tuple[str, int, float | None, float | None, float | None]]:
    """For each ours-without-<path> variant: (path, rows the path changes, geomean, best and worst of
    time without it / time with it over those rows). Above 1: the path is faster."""
    out = []
    for variant in variants:
        path = switched_off_path(variant)
        if path is None:
            continue
        gains = [g for g in (speedup(r, "ours", variant) for r in rows) if g and abs(g - 1) >= NOISE]
        out.append((path, len(gains), geomean(gains), max(gains, default=None), min(gains, default=None)))
    return out


def rotation_text(report: dict) -> str:
    """How many times the L2 a pass's runs over the rotating sets touch: the least any row reached
    (reports before 2026-11-25 did not record it, and stated 3x, which they reached about once)."""
    multiples = [r["rotation_l2_multiple"] for r in report["rows"] if "rotation_l2_multiple" in r]
    if not multiples:
        return f"sized for 3× the {report['l2_bytes'] >> 20} MB L2 over all three passes: about 1× for one pass"
    return f"a pass's runs over them touch {min(multiples):.1f}× the {report['l2_bytes'] >> 20} MB L2 at the least"


def check_text(settings: dict) -> str:
    batch = settings.get("check_batch")
    if batch != "problem":
        return f"at batch {batch}"
    macs = settings.get("check_max_macs")
    return "at each problem's own batch" + (
        f" (at a smaller one, with the same kernels, where its float64 reference would take over {macs / 1e9:.1f} G "
        "multiply-adds a pass: the largest filters)" if macs else "")


def paths_off_text(report: dict) -> str:
    return ", ".join(paths_off_of(report)) or "none"


def paths_off_lines(report: dict) -> list[str]:
    """The header's word on a run with kernel paths switched off in the process (DWCONV_DISABLE_KERNELS)."""
    if not paths_off_of(report):
        return []
    return [f"- **Kernel paths off** (DWCONV_DISABLE_KERNELS): {paths_off_text(report)}. Ours and routed ran "
            "without them, as a torch run with that setting does; `make routing-table` routes by these numbers "
            "only for such a run"]


def cudnn_benchmark_lines(settings: dict) -> list[str]:
    """The header's word on a run with torch.backends.cudnn.benchmark on (CUDNN_BENCHMARK=1)."""
    if not settings.get("cudnn_benchmark"):
        return []
    return ["- **torch.backends.cudnn.benchmark on** (CUDNN_BENCHMARK=1): cuDNN chose each shape's algorithms by "
            "timing them on its first call, as for users who set it: stock's cuDNN calls, the cudnn variant and "
            "the routing's cuDNN route alike. The routing table is made from runs with it off, torch's default"]


def markdown(report: dict, predictions=(), predictions_error: str | None = None) -> str:
    """bench.md: the header, the targets, the look-back, the predictions graded (predictions.markdown_lines,
    or predictions_error where the predictions file could not be read), and the tables."""
    rows = report["rows"]
    variants = report["settings"]["variants"]
    lines = [
        f"# Depthwise convolution benchmark: {report['device']}, torch {report['torch']}, {report['date']}",
        "",
        *(f"Command: `{c}`" for c in report.get("commands", [report.get("command", "")])),
        "",
        *cut_short_lines(report),
        *seconds_lines(rows),
        f"- CUDA {report['cuda']}, cuDNN {report['cudnn']}"
        f"{' (timed as the routing runs it: TF32 off, deterministic)' if report['settings'].get('cudnn_deterministic') else ''}; "
        f"overlay patch set {', '.join(report.get('overlay_patchsets') or [report['overlay_patchset']])}; "
        f"routing table measured on: {report['routing_measured_on']}",
        *paths_off_lines(report),
        *cudnn_benchmark_lines(report["settings"]),
        f"- Copy bandwidth {report['copy_bandwidth_GBps']:.0f} GB/s (device-to-device, read + write); the floor is "
        "the bytes a pass must move over it (build_scripts/bench/floor.py)",
        *([f"- FP32 FMA rate {report['fp32_fma_TFLOPS']:.1f} TFLOPS (cuBLAS SGEMM, TF32 off); the roofline is the "
           "larger of the floor and the pass's multiply-adds over that rate (it differs from the floor only where a "
           "pass computes more than it moves: the large filters)"] if report.get("fp32_fma_TFLOPS") else []),
        *([f"- {report['sm_count']} SMs of {report['arch']}: `make plan-report SMS={report['sm_count']} "
           f"ARCH={report['arch']}` gives each pass's kernel, launch and waves on it"] if "arch" in report else []),
        f"- Times: ms per run, median of {report['settings']['repeats']} CUDA-graph replays over rotating buffer sets "
        f"({rotation_text(report)}), CUDA events; random data",
        f"- Checked first against float64 {check_text(report['settings'])} (relative max error ≤ "
        f"{report['settings']['tolerance']}); a variant that failed its check judges no target",
        "- Variants: stock = torch's automatic choice; cuDNN = forced; native = upstream's depthwise kernel forced; "
        "ours = the patch set's kernels (overlay, forced); routed = the overlay's automatic routing; ours without "
        "<path> = ours with that kernel path switched off (dwconv_overlay.disable_kernels)",
        "",
        "## Targets",
        "",
        "| target | measured | met |",
        "| --- | --- | --- |",
        *(f"| {t} | {m} | {ok} |" for t, m, ok in targets(rows)),
    ]
    paths = look_back(rows, variants)
    if paths:
        lines += ["", "## Look-back: what each kernel path brings", "",
                  f"Time with the path switched off / time with it on (ours), over the rows where that moves by "
                  f"{NOISE:.0%} or more; above 1× the path is faster.", "",
                  "| kernel path | rows changed | geomean | best | worst |", "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {path} | {count} of {len(rows)} | {fmt(g, '.2f')}× | {fmt(best, '.2f')}× | "
                  f"{fmt(worst, '.2f')}× |" for path, count, g, best, worst in paths]
    lines += predictions_markdown_lines(report, list(predictions), paths_off_of(report))
    if predictions_error:
        lines += ["", "## Predictions", "", f"Not graded: {predictions_error}"]
    bad = [r for r in rows if any(not c["ok"] for c in r["check"].values())]
    if bad:
        lines += ["", "## Failed checks", ""]
        lines += sorted({f"- {r['set']} {r['layer']} b{r['batch']} {config_title(r)}: " + ", ".join(
            f"{v}: {c.get('failed') or c.get('error')}" for v, c in r["check"].items() if not c["ok"]) for r in bad})
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["set"], config_title(r), r["batch"]), []).append(r)
    for (set_name, config, batch), group in groups.items():
        recorded = any("launches" in r for r in group)  # LAUNCHES=1: which of our kernels ran, beside the times
        lines += ["", f"## {set_name}, {config}, batch {batch}", "",
                  "| layer | pass | " + " | ".join(variant_title(v) for v in variants)
                  + " | floor | ours % of floor | ours % of roofline | ours / stock | ours / cuDNN | stock runs |"
                  + (" ours runs |" if recorded else ""),
                  "| --- | --- | " + " | ".join("---:" for _ in variants) + " | ---: | ---: | ---: | ---: | ---: | --- |"
                  + (" --- |" if recorded else "")]
        for r in group:
            times = " | ".join(fmt(r["ms"].get(v), ".4f") for v in variants)
            lines.append(
                f"| {r['layer']} | {PASS_TITLES[r['pass']]} | {times} | {r['floor_ms']:.4f} | "
                f"{fmt(floor_fraction(r) and 100 * floor_fraction(r), '.0f')} | "
                f"{fmt(roofline_fraction(r) and 100 * roofline_fraction(r), '.0f')} | "
                f"{fmt(speedup(r, 'ours', 'stock'), '.2f')}× | {fmt(speedup(r, 'ours', 'cudnn'), '.2f')}× | "
                f"{r['backends']['stock_forward']} |" + (f" {ours_runs(r)} |" if recorded else ""))
    return "\n".join(lines) + "\n"


def plots(report: dict, out_dir: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if r["batch"] > 1 or r["conv"] == "1d"]
    configs = list(dict.fromkeys(config_title(r) for r in rows))
    written = []

    def layer_label(r):
        return f"{r['set'].split()[0].split('-')[0]} {r['layer']}"

    fig, axes = plt.subplots(len(configs), 1, figsize=(16, 4.2 * len(configs)), squeeze=False)
    for ax, config in zip(axes[:, 0], configs):
        steps = [r for r in rows if r["pass"] == "step" and config_title(r) == config]
        xs = range(len(steps))
        for offset, (variant, over, color) in enumerate((("ours", "stock", "tab:blue"), ("routed", "stock", "tab:green"),
                                                         ("ours", "cudnn", "tab:orange"))):
            values = [speedup(r, variant, over) or 0 for r in steps]
            ax.bar([x + (offset - 1) * 0.27 for x in xs], values, width=0.27, color=color,
                   label=f"{VARIANT_TITLES[variant]} / {VARIANT_TITLES[over]}")
        ax.axhline(1, color="black", linewidth=0.8)
        ax.axhline(2, color="gray", linewidth=0.8, linestyle="--")
        ax.set_yscale("log")
        ticks = [0.25, 0.5, 1, 2, 4, 8, 16, 32]
        ax.set_yticks(ticks, [f"{t:g}×" for t in ticks])
        ax.minorticks_off()
        ax.set_xticks(list(xs), [layer_label(r) for r in steps], rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("speedup (×)")
        batches = sorted({r["batch"] for r in steps})
        ax.set_title(f"Training-step speedup per layer, {config}, batch {'/'.join(map(str, batches))}")
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{report['device']}, torch {report['torch']}, {report['date']}")
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    written.append(out_dir / "speedup.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(len(configs), 1, figsize=(16, 4.2 * len(configs)), squeeze=False)
    for ax, config in zip(axes[:, 0], configs):
        subset = [r for r in rows if config_title(r) == config]
        layers = list(dict.fromkeys(layer_label(r) for r in subset))
        for offset, passname in enumerate(PASSES):
            by_layer = {layer_label(r): floor_fraction(r) or 0 for r in subset if r["pass"] == passname}
            ax.bar([x + (offset - 1.5) * 0.2 for x in range(len(layers))], [by_layer.get(n, 0) for n in layers],
                   width=0.2, label=PASS_TITLES[passname])
        for level in (0.6, 0.75, 1.0):
            ax.axhline(level, color="gray", linewidth=0.8, linestyle="--" if level < 1 else "-")
        ax.set_xticks(range(len(layers)), layers, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("floor / measured (ours)")
        ax.set_ylim(0, 1.1)
        ax.set_title(f"Fraction of the byte floor reached by our kernels, per pass, {config}")
        ax.legend(loc="upper left", fontsize=8, ncol=4)
    fig.suptitle(f"{report['device']}, torch {report['torch']}, {report['date']}")
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    written.append(out_dir / "floor.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def write_report(paths: list[Path], out_dir: Path, with_plots: bool = True) -> list[Path]:
    report = load(paths)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "bench.md"]
    try:
        predictions, error = load_predictions(), None
    except (ValueError, OSError, HarnessError) as err:  # a GPU run's report is written whatever the file holds
        predictions, error = [], str(err)
    written[0].write_text(markdown(report, predictions, error))
    if with_plots:
        written += plots(report, out_dir)
    return written
