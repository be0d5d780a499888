"""A `make bench-models` report (JSON, from model_run.py) as markdown and a PNG plot: models.md and
models.png beside it. The markdown needs only the standard library, the plot matplotlib."""

from __future__ import annotations

import json
from pathlib import Path

from .report import DTYPE_TITLES, VARIANT_TITLES, fmt, geomean
from .schema import paths_off_of

MODE_TITLES = {"training": "training step (forward, loss, backward)", "inference": "inference (forward, no_grad)"}


def config_title(row: dict) -> str:
    return f"{DTYPE_TITLES[row['dtype']]} {'NCHW' if row['layout'] == 'contiguous' else row['layout']}" + (
        " (autocast)" if row["dtype"] != "float32" else "")


def passed(row: dict, variant: str) -> bool:
    """Whether the variant passed both checks and was timed without an error (a report from before the
    layer check, 2026-11-26, has only the whole-model one)."""
    return (row["check"].get(variant, {}).get("ok", False)
            and row.get("layer_check", {}).get(variant, {"ok": "layer_check" not in row}).get("ok", False)
            and variant not in row.get("errors", {}))


def speedup(row: dict, variant: str, over: str = "stock") -> float | None:
    """over's time / variant's; None where either has none or variant failed its check."""
    a, b = row["ms"].get(variant), row["ms"].get(over)
    return b / a if a and b and passed(row, variant) else None


def our_share(row: dict, variant: str) -> float | None:
    """Our kernels' share of the GPU time of the variant's profiled step."""
    kernels = row["kernels"].get(variant)
    return kernels["ours_ms"] / kernels["all_ms"] if kernels and kernels["all_ms"] else None


def check_text(row: dict, variant: str) -> str:
    """What went wrong with the variant in this row: its checks' verdicts, and any error of its timing."""
    words = []
    result = row["check"].get(variant)
    if result is None:
        words.append("not checked")
    elif "failed" in result:
        words.append(f"whole model failed: {result['failed']}")
    elif not result["ok"]:
        words.append(f"whole model FAILED ({result['worst']} at {100 * result['of_bound']:.0f} % of bound)")
    layers = row.get("layer_check", {}).get(variant)
    if layers is not None and "failed" in layers:
        words.append(f"layers failed: {layers['failed']}")
    elif layers is not None and not layers["ok"]:
        words.append(f"layers FAILED ({layers['worst']}: error {layers['error']:.2g}, tolerance {layers['tolerance']:g})")
    if variant in row.get("errors", {}):
        words.append(row["errors"][variant])
    return ", ".join(words) or "ok"


def seconds_lines(rows: list[dict]) -> list[str]:
    """Where the run's seconds went (rows from 2026-11-26 on record them), for sizing device calls."""
    timed = [r for r in rows if r.get("seconds")]
    if not timed:
        return []
    checks = {(r["model"], r["dtype"], r["layout"]): r["seconds"]["whole-model check"] for r in timed}
    modes = sum(r["seconds"].get("mode", 0.0) for r in timed)
    return [f"- {sum(checks.values()) + modes:.0f} s over {len(checks)} model configurations: whole-model checks "
            f"{sum(checks.values()):.0f} s, then each mode's layer checks, profiling and timing {modes:.0f} s", ""]


def layer_check_text(settings: dict) -> str:
    tolerance = settings.get("layer_tolerance")
    if tolerance is None:  # a report from before the layer check
        return ""
    tolerances = ", ".join(f"{DTYPE_TITLES[dtype]} {tolerance[dtype]:g}" for dtype in DTYPE_TITLES if dtype in tolerance
                           and dtype != "float64")
    return ("; then the timed step itself, once, each depthwise convolution's output and gradients against "
            f"float64 from its own inputs, within {tolerances} of the reference's largest magnitude")


def failed_checks(report: dict) -> list[str]:
    """What went wrong in the run, a line each: a variant failing a check, a step that could not be
    profiled or timed."""
    failed = {}
    for row in report["rows"]:
        config = f"{row['model']} {row['dtype']} {row['layout']}"
        for variant, result in row["check"].items():
            if not result["ok"]:
                label = f"{config}: {variant}"
                failed.setdefault(label, f"{label} (whole model: {result.get('failed') or result})")
        for variant, result in row.get("layer_check", {}).items():
            if not result["ok"]:
                label = f"{config} {row['mode']}: {variant}"
                failed[label] = f"{label} (depthwise layers: {result.get('failed') or result})"
        for variant, error in row["errors"].items():
            line = f"{config} {row['mode']}: {variant}: {error}"
            failed[line] = line
    return list(failed.values())


def markdown(report: dict) -> str:
    variants = report["settings"]["variants"]
    s = report["settings"]
    tolerances = ", ".join(f"{DTYPE_TITLES[dtype]} {value:g}" for dtype, value in s["tolerance"].items())
    lines = [
        f"# Whole-model benchmark: {report['device']}, torch {report['torch']}, {report['date']}", "",
        f"Command: `{report['command']}`", "",
        f"Overlay patch set {report['overlay_patchset']}; routing table measured on {report['routing_measured_on']}; "
        f"CUDA {report['cuda']}, cuDNN {report['cudnn']} (benchmark {s['cudnn_benchmark']}, TF32 "
        f"{s['cudnn_allow_tf32']} as torch's default for stock's convolutions); copy bandwidth "
        f"{report['copy_bandwidth_GBps']:.0f} GB/s. Milliseconds a step, median of {s['repeats']} timed runs "
        f"(CUDA-graph replays where the step could be captured) after {s['warmup']} warm-up runs, random "
        f"{s['image_size']}x{s['image_size']} images. Variants: stock (overlay off); the overlay routing every "
        f"depthwise convolution to cuDNN, to ours, or as its table says (routed, what a user gets). Each variant's "
        f"forward, loss and backward at batch {s['check_batch']} are checked against float64 first (eval mode, "
        f"BatchNorm statistics taken from that batch; logits and every parameter gradient within {s['slack']:g}x "
        f"stock's own error plus {tolerances}){layer_check_text(s)}. \"ours' share\": our kernels' "
        f"part of the step's GPU time (one profiled step); \"depthwise floor\": the byte floor of the model's "
        f"depthwise layers, the least their part of the step can take.", "",
    ]
    lines += seconds_lines(report["rows"])
    if paths_off_of(report):
        lines += [f"- **Kernel paths off** (DWCONV_DISABLE_KERNELS): {', '.join(paths_off_of(report))}; ours and routed "
                  "ran without them, as a torch run with that setting does.", ""]
    cut = report.get("cut_short")
    if cut:
        lines += [f"- **Cut short** at {cut['stop_after_s']:.0f} s: {cut['problems_done']} of {cut['problems']} "
                  f"model configurations measured; not measured from {cut['next']} on.", ""]
    for mode, title in MODE_TITLES.items():
        rows = [r for r in report["rows"] if r["mode"] == mode]
        if not rows:
            continue
        lines += [f"## {title}, batch {rows[0]['batch']}", "",
                  "| model | config | " + " | ".join(VARIANT_TITLES[v] for v in variants) +
                  " | routed / stock | ours / stock | ours' share | depthwise floor | our kernels (ours, routed) | check |",
                  "| --- | --- | " + " | ".join("---:" for _ in variants) + " | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in rows:
            times = " | ".join(fmt(r["ms"].get(v)) for v in variants)
            counts = ", ".join(str(r["kernels"][v]["ours"]) if v in r["kernels"] else "–" for v in ("ours", "routed"))
            share = our_share(r, "ours")
            failing = [f"{VARIANT_TITLES[v]}: {check_text(r, v)}" for v in variants if not passed(r, v)]
            lines.append(f"| {r['model']} | {config_title(r)} | {times} | {fmt(speedup(r, 'routed'), '.2f')}× | "
                         f"{fmt(speedup(r, 'ours'), '.2f')}× | {fmt(share and 100 * share, '.0f')} % | "
                         f"{r['depthwise_floor_ms']:.3f} | {counts} | {'; '.join(failing) or 'all ok'} |")
        lines.append("")
        for config in dict.fromkeys(config_title(r) for r in rows):
            mean = geomean(speedup(r, "routed") for r in rows if config_title(r) == config)
            lines.append(f"- {config}: routed / stock, geomean over the models: {fmt(mean, '.2f')}×")
        lines.append("")
    return "\n".join(lines)


def plot(report: dict, out_dir: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in MODE_TITLES if any(r["mode"] == m for r in report["rows"])]
    fig, axes = plt.subplots(len(modes), 1, figsize=(12, 4.5 * len(modes)), squeeze=False)
    for ax, mode in zip(axes[:, 0], modes):
        rows = [r for r in report["rows"] if r["mode"] == mode]
        xs = range(len(rows))
        for offset, (variant, color) in enumerate((("routed", "tab:green"), ("ours", "tab:blue"), ("cudnn", "tab:orange"))):
            ax.bar([x + (offset - 1) * 0.27 for x in xs], [speedup(r, variant) or 0 for r in rows], width=0.27,
                   color=color, label=f"{VARIANT_TITLES[variant]} / stock")
        ax.axhline(1, color="black", linewidth=0.8)
        ax.set_xticks(list(xs), [f"{r['model']}\n{config_title(r)}" for r in rows], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("speedup over stock (×)")
        ax.set_title(f"Whole-model {MODE_TITLES[mode]}, batch {rows[0]['batch']}")
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{report['device']}, torch {report['torch']}, {report['date']}")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path = out_dir / "models.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_model_report(path: Path, out_dir: Path, with_plot: bool = True) -> list[Path]:
    report = json.loads(path.read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "models.md"]
    written[0].write_text(markdown(report))
    if with_plot:
        written.append(plot(report, out_dir))
    return written
