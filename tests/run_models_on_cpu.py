"""Run in the pinned torch's environment (no GPU): what `make bench-models` does short of timing,
on the CPU. Prints one JSON line of findings for tests/test_bench_models.py:

  parameters {model: count}             of models.py's builds
  census {model: [[C, H, k, s, bias], ...]}  their depthwise layers, one image's forward pass
  floor {model: ms}                     depthwise_floor_ms, inference, fp32 NCHW, at 1 byte/ms
  check {case: verdict}                 model_check.check (the whole model) on a shrunken input, with an
                                        overlay stand-in whose "ours" routing computes correctly, or with
                                        the filter flipped (a planted bug, which the check must catch)
  layers {case: verdict}                model_check.layer_check (each depthwise layer in the timed step), in
                                        training and inference, with a stand-in that computes each pass as
                                        our kernels do (rounded_once), correct and with planted bugs: the
                                        filter flipped, the weight gradient alone flipped, grad_input alone
                                        10 % off
  relative_error {case: error}          the checks' measure with NaN and infinities in either result
  overflow {variant: verdict}           the whole-model check where stock's own fp16 gradients overflow
  steps {case: ...}                     the training and inference steps run once: the loss, and whether
                                        every parameter got a gradient
  run {...}                             model_run.run_models on the CPU, its timing and profiling stood in
                                        for (each runs the step once): the report's rows, and a run cut short

The overlay's routing changes nothing on the CPU, so the stand-in's modes stand for it: stock and
cuDNN leave torch's convolution alone, "ours" (and routed) swap in the variant under test through a
global forward hook on the depthwise convolutions.
"""

import contextlib
import json
import sys
import warnings
from pathlib import Path

warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from build_scripts.bench import model_check, model_report, model_run, model_steps  # noqa: E402
from build_scripts.bench.models import MODELS, depthwise_census, is_depthwise  # noqa: E402
from build_scripts.bench.timing import Timing  # noqa: E402


class OverlayStandIn:
    """enable/disable/routing/set_routing (and disabled_kernels, none) as dwconv_overlay has them; under "ours" or "auto" every
    depthwise convolution's output comes from `ours(module, input)`."""

    def __init__(self, ours):
        self.mode, self.on, self.ours, self.hook = "auto", True, ours, None

    def routing(self):
        return self.mode

    def enabled(self):
        return self.on

    def disabled_kernels(self):
        return []

    def set_routing(self, mode):
        self.mode = mode
        self._rehook()

    def enable(self):
        self.on = True
        self._rehook()

    def disable(self):
        self.on = False
        self._rehook()

    def _rehook(self):
        if self.hook is not None:
            self.hook.remove()
            self.hook = None
        if self.on and self.mode in ("ours", "auto"):
            ours = self.ours
            self.hook = torch.nn.modules.module.register_module_forward_hook(
                lambda module, inputs, output: ours(module, inputs[0]) if is_depthwise(module) else None)


def correct(module, x):
    return F.conv2d(x, module.weight, module.bias, module.stride, module.padding, module.dilation, module.groups)


def flipped(module, x):
    return F.conv2d(x, module.weight.flip(-1, -2), module.bias, module.stride, module.padding, module.dilation,
                    module.groups)


def altered_gradient(alter):
    """An autograd Function: the identity forward, its gradient passed through alter."""
    class Altered(torch.autograd.Function):
        @staticmethod
        def forward(ctx, tensor):
            return tensor.clone()

        @staticmethod
        def backward(ctx, grad):
            return alter(grad)
    return Altered


FLIPPED_GRADIENT = altered_gradient(lambda grad: grad.flip(-1, -2))  # in the filter's two dimensions
SCALED_GRADIENT = altered_gradient(lambda grad: grad * 1.1)  # 10 % too large


def rounded_once(module, x, weight):
    """The convolution as our kernels compute each pass: its operands in the dtype it runs in
    (autocast's), float32 arithmetic, each result (output, grad_input, grad_weight) rounded once.
    The CPU's own low-precision backward is no such yardstick: without AVX-512 (AMD EPYC, AVX2) it
    sums a 7x7 grad_input in bf16 (1.2e-2 of its largest magnitude, against 2e-3 rounded once;
    fp16: 1.7e-3 against 2.5e-4), which a correct kernel must not be held to."""
    device = x.device.type
    low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
    bias = module.bias.to(low).float() if module.bias is not None else None
    with torch.autocast(device, enabled=False):
        out = F.conv2d(x.to(low).float(), weight.to(low).float(), bias, module.stride, module.padding,
                       module.dilation, module.groups)
    return out.to(low)


def correct_in_float(module, x):
    return rounded_once(module, x, module.weight)


def flipped_in_float(module, x):
    return rounded_once(module, x, module.weight.flip(-1, -2))


def wrong_weight_gradient(module, x):
    return rounded_once(module, x, FLIPPED_GRADIENT.apply(module.weight))


def wrong_input_gradient(module, x):
    return rounded_once(module, SCALED_GRADIENT.apply(x), module.weight)


# The layer check holds each tensor to the bench's per-pass tolerance: its stand-ins compute as our
# kernels do. (The whole-model check's, correct and flipped, are torch's own convolutions: "ours"
# must then err exactly as stock does.)
LAYER_BUGS = {"correct": correct_in_float, "flipped": flipped_in_float, "weight-gradient": wrong_weight_gradient,
              "input-gradient": wrong_input_gradient}


@contextlib.contextmanager
def image_size(size):
    """The images' size for the steps and the floor alike."""
    saved = model_run.IMAGE_SIZE
    model_run.IMAGE_SIZE = model_steps.IMAGE_SIZE = size
    try:
        yield
    finally:
        model_run.IMAGE_SIZE = model_steps.IMAGE_SIZE = saved


class TimedOverlay(OverlayStandIn):
    PATCHSET_HASH = "cpu-test"

    def routing_measured_on(self):
        return "nowhere"

    def disabled_kernels(self):  # as under DWCONV_DISABLE_KERNELS=row: the report records it
        return ["row"]


def layer_check(problem, model, mode, ours, scaled=True):
    """model_check.layer_check of the "ours" stand-in computing as ours does, on a batch of 2, with the
    loss scale model_check.loss_scale finds (scaled) or none."""
    model.train(mode == "training")
    batch = model_steps.make_images(problem, 2, device="cpu")
    overlay = OverlayStandIn(ours)
    try:
        scale = model_check.loss_scale(model, problem.dtype, batch, overlay) if scaled and mode == "training" else 1.0
        return {**model_check.layer_check(problem, mode, model, batch, overlay, "ours", scale), "scale": scale}
    finally:
        overlay.disable()  # its hook is global


def fp16_cases():
    """ConvNeXt-T in fp16, whose gradients under its 1e-6 layer scale underflow without a loss scale."""
    problem = model_steps.ModelProblem("ConvNeXt-T", "float16", "channels_last")
    model = model_steps.build(problem, device="cpu")
    return {f"{bug}{'' if scaled else ' unscaled'}": layer_check(problem, model, "training", LAYER_BUGS[bug], scaled)
            for bug in ("correct", "weight-gradient") for scaled in (True, False)}


def overflowing_check():
    """The whole-model check in fp16 under a loss scale that overflows stock's own gradients."""
    problem = model_steps.ModelProblem("MobileNetV2", "float16", "channels_last")
    model = model_steps.build(problem, device="cpu")
    overlay, saved = OverlayStandIn(correct), model_check.loss_scale
    model_check.loss_scale = lambda *args: 2.0 ** 40
    try:
        return model_check.check(problem, model, overlay, ("stock", "ours"), device="cpu")
    finally:
        model_check.loss_scale = saved
        overlay.disable()


def relative_errors():
    reference = torch.tensor([1.0, -2.0, float("inf"), 4.0], dtype=torch.float64)
    nan, inf = float("nan"), float("inf")
    cases = {"equal": reference, "off by 0.4": torch.tensor([1.0, -2.0, inf, 4.4]),
             "NaN": torch.tensor([1.0, nan, inf, 4.0]), "finite for inf": torch.tensor([1.0, -2.0, 3.0, 4.0]),
             "-inf for inf": torch.tensor([1.0, -2.0, -inf, 4.0]), "extra inf": torch.tensor([1.0, -inf, inf, 4.0])}
    found = {case: model_check.relative_error(got.to(torch.bfloat16), reference) for case, got in cases.items()}
    found["NaN in both"] = model_check.relative_error(torch.tensor([nan, 1.0]), torch.tensor([nan, 2.0]))
    return found


def orchestration():
    """run_models end to end on the CPU, with stand-ins for what needs a GPU: the copy bandwidth (1e6
    bytes/ms), the profiled step (the step run once; 0 kernels of ours under stock and the cuDNN
    routing, 7 otherwise) and the timing (the step run once on the first batch; 2 ms under stock,
    1 ms otherwise)."""
    import tempfile
    overlay = TimedOverlay(correct)
    uses_ours = lambda: overlay.on and overlay.mode in ("ours", "auto")  # noqa: E731

    def kernel_share(step, batch):
        step(batch)
        return {"ours": 7 if uses_ours() else 0, "ours_ms": 0.5 if uses_ours() else 0.0, "all_ms": 4.0}

    def time_pass(fn, buffer_sets, repeats, warmup):
        fn(buffer_sets[0])
        return Timing(1.0 if uses_ours() else 2.0, graph=True)

    stand_ins = {"import_overlay": lambda: overlay, "copy_bandwidth": lambda: 1e6, "our_kernel_share": kernel_share,
                 "time_pass": time_pass}
    saved = {name: getattr(model_run, name) for name in stand_ins}
    for name, stand_in in stand_ins.items():
        setattr(model_run, name, stand_in)
    saved_modes = dict(model_steps.MODES)
    model_steps.MODES.update(training=2)  # at 32x32: the orchestration, not the numbers
    try:
        with image_size(32), tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "models.json"
            configs = (("float32", "contiguous"), ("bfloat16", "channels_last"))
            report = model_run.run_models(out, ["MobileNetV2"], "", repeats=3, warmup=1, command="cpu test",
                                          configs=configs, device="cpu")
            written = json.loads(out.read_text())
            cut = model_run.run_models(out, ["ConvNeXt-T"], "stock,ours", configs=configs, device="cpu",
                                       stop_after_s=0.0)
    finally:
        for name, original in saved.items():
            setattr(model_run, name, original)
        model_steps.MODES.update(saved_modes)
        overlay.disable()
    return {"written_equals_returned": written == report, "schema": report["schema"],
            "kernel_paths_off": report["kernel_paths_off"],
            "variants": report["settings"]["variants"], "failed": model_report.failed_checks(report),
            "rows": [{key: row[key] for key in ("model", "dtype", "layout", "mode", "batch", "ms", "graph", "kernels",
                                                "errors", "layer_check", "seconds")} | {"floor": row["depthwise_floor_ms"],
                                                                             "checked": sorted(row["check"])}
                     for row in report["rows"]],
            "markdown": model_report.markdown(report), "cut": cut.get("cut_short"), "cut_rows": len(cut["rows"])}


def main():
    found = {"parameters": {}, "census": {}, "floor": {}, "check": {}, "layers": {}, "steps": {}}
    for name, build in MODELS.items():
        found["parameters"][name] = sum(p.numel() for p in build().parameters())
        found["census"][name] = [list(layer) for layer in depthwise_census(build)]
        found["floor"][name] = model_run.depthwise_floor_ms(model_steps.ModelProblem(name, "float32", "contiguous"),
                                                            "inference", 1.0)
    with image_size(64):  # a quarter of 224: small enough for two CPU cores, every layer still run
        for name in MODELS:
            for dtype, layout in (("float32", "contiguous"), ("bfloat16", "channels_last")):
                problem = model_steps.ModelProblem(name, dtype, layout)
                model = model_steps.build(problem, device="cpu")
                for bug, ours in (("correct", correct), ("flipped", flipped)):
                    overlay = OverlayStandIn(ours)
                    try:
                        verdicts = model_check.check(problem, model, overlay, ("stock", "ours"), device="cpu")
                    finally:
                        overlay.disable()  # its hook is global
                    found["check"][f"{name} {dtype} {layout} {bug}"] = verdicts
            problem = model_steps.ModelProblem(name, "bfloat16", "channels_last")
            model = model_steps.build(problem, device="cpu")
            batch = model_steps.make_images(problem, 2, device="cpu")
            loss = model_steps.training_step(model, problem.dtype)(batch)
            model.eval()
            logits = model_steps.inference_step(model, problem.dtype)(batch)
            found["steps"][name] = {
                "loss": loss.item(), "loss_requires_grad": loss.requires_grad,
                "all_gradients": all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters()),
                "logits": list(logits.shape), "logits_dtype": str(logits.dtype),
                "logits_requires_grad": logits.requires_grad,
            }
    with image_size(32):  # every layer still runs (the last on a 1x1 plane)
        for name in MODELS:
            for dtype, layout in (("float32", "contiguous"), ("bfloat16", "channels_last")):
                problem = model_steps.ModelProblem(name, dtype, layout)
                model = model_steps.build(problem, device="cpu")
                for mode in ("training", "inference"):
                    for bug, ours in LAYER_BUGS.items():
                        found["layers"][f"{name} {dtype} {layout} {mode} {bug}"] = layer_check(problem, model, mode,
                                                                                               ours)
        found["fp16"] = fp16_cases()
        found["overflow"] = overflowing_check()
    found["relative_error"] = relative_errors()
    found["run"] = orchestration()
    print(json.dumps(found))


if __name__ == "__main__":
    main()
