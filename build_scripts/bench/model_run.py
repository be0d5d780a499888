"""`make bench-models`: whole networks timed as users run them, stock torch against the overlay.

What a user sees is a model's step, not a layer's pass: depthwise layers are a share of it, beside
the pointwise convolutions, norms and activations that no variant changes. For each model of
models.py and each configuration (fp32 NCHW; bf16 and fp16 channels_last, under autocast as mixed
precision is trained), it times
  training   batch 64, model.train(): forward, cross-entropy on random labels, backward
  inference  batch 1, model.eval() under no_grad: forward
with each variant of MODEL_VARIANTS: stock (overlay off), and the overlay routing every depthwise
convolution to cuDNN, to ours, or as measured (auto: what a user of the overlay gets).

Each variant is first checked: a batch of 4 through the model's forward, loss and backward in the
variant and in float64 (stock, the same weights and data), every output and parameter gradient
compared (each relative to its reference's largest magnitude); a variant passes when no tensor's error
exceeds SLACK times stock's own error on it plus TOLERANCE of its dtype, so the routing can make no
model worse than stock computes it. The check runs the model in eval mode (no dropout, and the
convolutions run the same passes), its BatchNorms holding the check batch's statistics (calibrated):
a train-mode BatchNorm's backward cancels so much at a small batch that stock's own error on some
tensors reaches percents in fp32, behind which a wrong kernel hides; with torch's initial statistics
activations shrink layer by layer until fp16 computes zeros whoever runs the convolutions. A filter
flipped in every depthwise layer fails the check by 2.6x its bound or more on the CPU
(tests/test_bench_models.py; 1.2x, so nearly passing, in train mode).

Then one step is profiled (how many of our kernels ran, and their share of the step's GPU time), and
the step is timed as bench passes are (timing.time_pass: CUDA-graph replays, medians of CUDA events
after a warm-up). Beside each model: the byte floor of its depthwise layers (floor.py), the least time
the depthwise share of the step could take.

The report (JSON, schema dwconv-model-bench/1) is written after each model and configuration; given
stop_after_s it starts none that would end past it, and says where it stopped.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from .floor import floor_ms
from .layers import CONFIGS_2D, Layer, Problem
from .models import IMAGE_SIZE, MODELS, depthwise_census
from .run import import_overlay, write_json
from .schema import MODEL_NAMES, MODELS_SCHEMA, ends_in_time, parse_model_variants, parse_models
from .timing import copy_bandwidth, time_pass
from .variants import DTYPES

ROUTING_OF = {"cudnn": "cudnn", "ours": "ours", "routed": "auto"}  # the overlay's routing mode each runs
MODES = {"training": 64, "inference": 1}  # batch of each
CHECK_BATCH = 4
CLASSES = 1000
SLACK = 3.0
TOLERANCE = {"float32": 1e-3, "float16": 5e-3, "bfloat16": 3e-2}
OUR_KERNELS = "dwconv::"  # in the name of every kernel of ours (namespace at::native::dwconv)


@dataclass(frozen=True)
class ModelProblem:
    model: str
    dtype: str
    layout: str

    @property
    def label(self) -> str:
        return f"{self.model} {self.dtype} {self.layout}"


def model_problems(model_names: list[str] | None, configs: tuple[tuple[str, str], ...] | None) -> list[ModelProblem]:
    """Each model (default: all) in each configuration (default: the bench's CONFIGS_2D)."""
    chosen = parse_models(",".join(model_names or ())) or MODEL_NAMES
    return [ModelProblem(m, dtype, layout) for m in chosen for dtype, layout in configs or CONFIGS_2D]


@contextlib.contextmanager
def model_variant(overlay, name: str):
    """stock: the overlay off; the others: on, routing every depthwise convolution as the variant says."""
    previous = overlay.routing()
    if name == "stock":
        overlay.disable()
    else:
        overlay.enable()
        overlay.set_routing(ROUTING_OF[name])
    try:
        yield
    finally:
        overlay.set_routing(previous)
        overlay.enable()


def autocast(dtype: str, device_type: str):
    """Mixed precision as users train it: autocast to bf16/fp16 (the graph captures need its cache off)."""
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=DTYPES[dtype], cache_enabled=False)


def build(problem: ModelProblem, device: str = "cuda") -> torch.nn.Module:
    torch.manual_seed(0)
    model = MODELS[problem.model]().to(device)
    return model.to(memory_format=torch.channels_last) if problem.layout == "channels_last" else model


def make_images(problem: ModelProblem, batch: int, device: str = "cuda", dtype=torch.float32,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, device=device, dtype=dtype, generator=generator)
    if problem.layout == "channels_last":
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, CLASSES, (batch,), device=device, generator=generator)
    return images, labels


def training_step(model: torch.nn.Module, dtype: str):
    def step(batch):
        images, labels = batch
        with autocast(dtype, images.device.type):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        return loss.detach()
    return step


def inference_step(model: torch.nn.Module, dtype: str):
    def step(batch):
        with torch.no_grad(), autocast(dtype, batch[0].device.type):
            return model(batch[0])
    return step


def calibrated(model: torch.nn.Module, images: torch.Tensor) -> torch.nn.Module:
    """A copy of the model in eval mode whose BatchNorms hold the statistics of these images, so that
    activations keep their scale through the layers as in a trained model (with torch's initial
    statistics, an identity, they shrink layer by layer, to 1e-28 in EfficientNet-B0's gates)."""
    model = copy.deepcopy(model)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # a cumulative average: after one batch, that batch's statistics
    model.train()
    with torch.no_grad():
        model(images)
    return model.eval()


def _outputs_and_gradients(model: torch.nn.Module, dtype: str, batch) -> dict[str, torch.Tensor]:
    """The training step's logits and every parameter's gradient, by name."""
    model.zero_grad(set_to_none=True)
    images, labels = batch
    with autocast(dtype, images.device.type):
        logits = model(images)
    F.cross_entropy(logits.float(), labels).backward()
    tensors = {"logits": logits.detach()}
    tensors.update({f"grad {name}": p.grad for name, p in model.named_parameters() if p.grad is not None})
    return tensors


def _errors(got: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict[str, float]:
    """Each tensor's largest error relative to its reference's largest magnitude."""
    if got.keys() != reference.keys():
        raise RuntimeError(f"tensors {sorted(set(got) ^ set(reference))} missing on one side")
    errors = {}
    for name, ref in reference.items():
        if got[name].shape != ref.shape:
            raise RuntimeError(f"{name}: shape {tuple(got[name].shape)}, expected {tuple(ref.shape)}")
        errors[name] = (got[name].double() - ref).abs().max().item() / (ref.abs().max().item() or 1.0)
    return errors


def judge(errors: dict[str, float], stock_errors: dict[str, float], dtype: str) -> dict:
    """ok where no tensor's error passes SLACK x stock's error on it + TOLERANCE; worst: the tensor
    nearest its bound (or furthest past it), with its error and stock's."""
    def bound(name):
        return SLACK * stock_errors[name] + TOLERANCE[dtype]
    worst = max(errors, key=lambda name: errors[name] / bound(name))
    return {"ok": all(errors[n] <= bound(n) for n in errors), "worst": worst, "error": errors[worst],
            "stock_error": stock_errors[worst], "of_bound": errors[worst] / bound(worst)}


def check(problem: ModelProblem, model: torch.nn.Module, overlay, variants, device: str = "cuda") -> dict:
    """variant -> judge()'s verdict (stock's against TOLERANCE alone is not asked: it is the yardstick),
    or {"failed": message, "ok": False}."""
    generator = torch.Generator(device=device).manual_seed(0)
    batch = make_images(problem, CHECK_BATCH, device=device, generator=generator)
    with model_variant(overlay, "stock"):
        model = calibrated(model, batch[0])
    exact = copy.deepcopy(model).double()
    with model_variant(overlay, "stock"):
        reference = _outputs_and_gradients(exact, "float32", (batch[0].double(), batch[1]))
    errors, results = {}, {}
    for name in ("stock", *[v for v in variants if v != "stock"]):
        try:
            with model_variant(overlay, name):
                errors[name] = _errors(_outputs_and_gradients(copy.deepcopy(model), problem.dtype, batch), reference)
        except Exception as err:  # noqa: BLE001 - recorded in the report, and the run goes on
            results[name] = {"failed": f"{type(err).__name__}: {err}".splitlines()[0][:300], "ok": False}
    for name in variants:
        if name not in results and "stock" in errors:
            results[name] = judge(errors[name], errors["stock"], problem.dtype)
        results.setdefault(name, {"failed": "stock failed its own step, the yardstick", "ok": False})
    return results


def our_kernel_share(step, batch) -> dict:
    """One step under the profiler: how many of our kernels ran, their GPU time and all kernels' (ms)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(batch)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
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
        "settings": {"repeats": repeats, "warmup": warmup, "check_batch": CHECK_BATCH, "slack": SLACK,
                     "tolerance": dict(TOLERANCE), "modes": dict(MODES), "image_size": IMAGE_SIZE,
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
        for mode, batch_size in MODES.items():
            row = {"model": problem.model, "dtype": problem.dtype, "layout": problem.layout, "mode": mode,
                   "batch": batch_size, "depthwise_floor_ms": depthwise_floor_ms(problem, mode, bandwidth),
                   "ms": {}, "graph": {}, "kernels": {}, "errors": {}, "check": checks}
            model.train(mode == "training")
            model.zero_grad(set_to_none=True)
            step = (training_step if mode == "training" else inference_step)(model, problem.dtype)
            batches = [make_images(problem, batch_size, device) for _ in range(2)]
            for name in variants:
                if "failed" in checks[name]:
                    row["ms"][name] = None
                    continue
                try:
                    with model_variant(overlay, name):
                        row["kernels"][name] = our_kernel_share(step, batches[0])
                        timing = time_pass(step, batches, repeats, warmup)
                    row["ms"][name], row["graph"][name] = timing.ms, timing.graph
                except Exception as err:  # noqa: BLE001 - recorded, and the run goes on
                    row["ms"][name] = None
                    row["errors"][name] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
                torch.cuda.empty_cache()
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


def failed_checks(report: dict) -> list[str]:
    failed = {}
    for row in report["rows"]:
        for variant, result in row["check"].items():
            if not result["ok"]:
                label = f"{row['model']} {row['dtype']} {row['layout']}: {variant}"
                failed.setdefault(label, f"{label} ({result.get('failed') or result})")
    return list(failed.values())
