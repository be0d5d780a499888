"""`make bench-models`: whole networks timed as users run them, stock torch against the overlay.

What a user sees is a model's step, not a layer's pass: depthwise layers are a share of it, beside
the pointwise convolutions, norms and activations that no variant changes. For each model of
models.py and each configuration (fp32 NCHW; bf16 and fp16 channels_last, under autocast as mixed
precision is trained), it times
  training   batch 64, model.train(): forward, cross-entropy on random labels, backward
  inference  batch 1, model.eval() under no_grad: forward
with each variant of MODEL_VARIANTS: stock (overlay off, always timed: every figure is relative to
it), and the overlay routing every depthwise convolution to cuDNN, to ours, or as measured (auto:
what a user of the overlay gets).

Each variant is first checked (model_check.py): the whole model at a small batch against float64,
held to stock's own error; then in each mode the very step that is timed, every depthwise
convolution held to float64 from its own inputs. A variant that fails either is not timed.

Then one step is profiled (how many of our kernels ran, and their share of the step's GPU time), and
the step is timed as bench passes are (timing.time_pass: CUDA-graph replays, medians of CUDA events
after a warm-up). Beside each model: the byte floor of its depthwise layers (floor.py), the least time
the depthwise share of the step could take.

The report (JSON, schema dwconv-model-bench/1) is written after each model and configuration; given
stop_after_s it starts none that would end past it, and says where it stopped.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from .floor import floor_ms
from .layers import CONFIGS_2D, Layer, Problem
from .model_check import CHECK_BATCH, LAYER_TOLERANCE, SLACK, TOLERANCE, check, layer_check, loss_scale
from .model_steps import MODES, ModelProblem, build, inference_step, make_images, model_variant, training_step
from .models import IMAGE_SIZE, MODELS, depthwise_census
from .run import error_text, import_overlay, write_json
from .schema import MODEL_NAMES, MODELS_SCHEMA, ends_in_time, parse_model_variants, parse_models
from .timing import copy_bandwidth, time_pass

OUR_KERNELS = "dwconv::"  # in the name of every kernel of ours (namespace at::native::dwconv)


def model_problems(model_names: list[str] | None, configs: tuple[tuple[str, str], ...] | None) -> list[ModelProblem]:
    """Each model (default: all) in each configuration (default: the bench's CONFIGS_2D)."""
    chosen = parse_models(",".join(model_names or ())) or MODEL_NAMES
    return [ModelProblem(m, dtype, layout) for m in chosen for dtype, layout in configs or CONFIGS_2D]


def our_kernel_share(step, batch) -> dict:
    """One step under the profiler: how many of our kernels ran, their GPU time and the step's (ms)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(batch)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]  # with copies and sets
    if not kernels:
        raise RuntimeError("the profiler recorded no GPU activity (is CUPTI usable here?): our kernels' share "
                           "cannot be told")
    ours = [e for e in kernels if OUR_KERNELS in e.name]
    return {"ours": len(ours), "ours_ms": sum(e.time_range.elapsed_us() for e in ours) / 1e3,
            "all_ms": sum(e.time_range.elapsed_us() for e in kernels) / 1e3}


def depthwise_floor_ms(problem: ModelProblem, mode: str, bandwidth_bytes_per_ms: float) -> float:
    """The byte floor of the model's depthwise layers at the mode's batch: each pass the mode runs."""
    dtype = problem.dtype
    total = 0.0
    for channels, size, kernel, stride, bias in depthwise_census(MODELS[problem.model], IMAGE_SIZE):
        layer = Layer(problem.model, f"{channels}@{size}", channels, size, kernel, stride, bias)
        passname = "step" if mode == "training" else "forward"
        total += floor_ms(Problem(layer, MODES[mode], dtype, problem.layout, (passname,)), passname,
                          bandwidth_bytes_per_ms)
    return total


def run_models(out_path: Path, model_names: list[str] | None, variant_names: str = "", repeats: int = 30,
               warmup: int = 3, command: str = "", stop_after_s: float | None = None,
               configs: tuple[tuple[str, str], ...] | None = None, device: str = "cuda") -> dict:
    """The run, into out_path (device: where the models run; "cpu" only for the CPU test of the
    orchestration, tests/run_models_on_cpu.py, with the timing stood in for)."""
    variants = parse_model_variants(variant_names)
    chosen = model_problems(model_names, configs)
    overlay = import_overlay()
    started = time.monotonic()
    bandwidth = copy_bandwidth()
    report = {
        "schema": MODELS_SCHEMA, "command": command, "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else device, "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(), "overlay_patchset": overlay.PATCHSET_HASH,
        "routing_measured_on": overlay.routing_measured_on(), "copy_bandwidth_GBps": bandwidth / 1e6,
        "kernel_paths_off": list(overlay.disabled_kernels()),  # DWCONV_DISABLE_KERNELS: every variant ran without them
        "settings": {"repeats": repeats, "warmup": warmup, "check_batch": CHECK_BATCH, "slack": SLACK,
                     "tolerance": dict(TOLERANCE), "layer_tolerance": dict(LAYER_TOLERANCE), "modes": dict(MODES),
                     "image_size": IMAGE_SIZE,
                     "variants": list(variants), "models": model_names or list(MODELS),
                     "cudnn_benchmark": torch.backends.cudnn.benchmark,
                     "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                     "configs": [f"{dtype}/{layout}" for dtype, layout in configs or CONFIGS_2D]},
        "rows": [],
    }
    longest_s = 0.0
    for index, problem in enumerate(chosen, 1):
        if not ends_in_time(time.monotonic() - started, longest_s, stop_after_s):
            report["cut_short"] = {"problems_done": index - 1, "problems": len(chosen), "stop_after_s": stop_after_s,
                                   "next": problem.label}
            print(f"stopping: {index - 1} of {len(chosen)} models and configurations measured, the next would end "
                  f"past {stop_after_s:.0f} s", flush=True)
            break
        problem_started = time.monotonic()
        model = build(problem, device)
        checks = check(problem, model, overlay, variants, device)
        check_s = time.monotonic() - problem_started
        for mode, batch_size in MODES.items():
            mode_started = time.monotonic()
            row = {"model": problem.model, "dtype": problem.dtype, "layout": problem.layout, "mode": mode,
                   "batch": batch_size, "depthwise_floor_ms": depthwise_floor_ms(problem, mode, bandwidth),
                   "ms": {}, "graph": {}, "kernels": {}, "errors": {}, "check": checks, "layer_check": {},
                   "seconds": {"whole-model check": check_s}}  # where the run's time goes, for sizing device calls
            model.train(mode == "training")
            model.zero_grad(set_to_none=True)
            batches = [make_images(problem, batch_size, device) for _ in range(2)]
            try:
                scale = loss_scale(model, problem.dtype, batches[0], overlay) if mode == "training" else 1.0
            except Exception as err:  # noqa: BLE001 - stock's own step failed: nothing of this mode is measured
                row["errors"] = {name: error_text(err, "loss scale") for name in variants}
                row["ms"] = dict.fromkeys(variants)
                report["rows"].append(row)
                continue
            # fp16 trains under a loss scale (GradScaler's), and the step timed is the step checked
            if mode == "training":
                step = training_step(model, problem.dtype, scale)
            else:
                step = inference_step(model, problem.dtype)
            for name in variants:
                row["ms"][name] = None
                if not checks[name]["ok"]:
                    continue
                row["layer_check"][name] = layer_check(problem, mode, model, batches[0], overlay, name, scale)
                if not row["layer_check"][name]["ok"]:
                    continue
                errors = []
                try:
                    with model_variant(overlay, name):
                        row["kernels"][name] = our_kernel_share(step, batches[0])
                except Exception as err:  # noqa: BLE001 - recorded; the step is still timed
                    errors.append(error_text(err, "profiling"))
                try:
                    with model_variant(overlay, name):
                        timing = time_pass(step, batches, repeats, warmup)
                    row["ms"][name], row["graph"][name] = timing.ms, timing.graph
                except Exception as err:  # noqa: BLE001 - recorded, and the run goes on
                    errors.append(error_text(err, "timing"))
                if errors:
                    row["errors"][name] = "; ".join(errors)
                torch.cuda.empty_cache()
            row["seconds"]["mode"] = time.monotonic() - mode_started
            report["rows"].append(row)
            times = "  ".join(f"{v} {row['ms'][v]:.3f}" if row["ms"].get(v) is not None else f"{v} -" for v in variants)
            print(f"[{index}/{len(chosen)} {time.monotonic() - started:5.0f}s] {problem.label} {mode} b{batch_size}: "
                  f"{times}  depthwise floor {row['depthwise_floor_ms']:.3f}", flush=True)
        del model
        torch.cuda.empty_cache()
        write_json(out_path, report)
        longest_s = max(longest_s, time.monotonic() - problem_started)
    write_json(out_path, report)
    return report
