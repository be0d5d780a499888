"""Run in the pinned torch's environment (no GPU): what `make bench-models` does short of timing,
on the CPU. Prints one JSON line of findings for tests/test_bench_models.py:

  parameters {model: count}             of models.py's builds
  census {model: [[C, H, k, s, bias], ...]}  their depthwise layers, one image's forward pass
  floor {model: ms}                     depthwise_floor_ms, inference, fp32 NCHW, at 1 byte/ms
  check {case: verdict}                 model_run.check on a shrunken input, with an overlay stand-in whose
                                        "ours" routing computes correctly, or with the filter flipped (a
                                        planted bug, which the check must catch)
  steps {case: ...}                     the training and inference steps run once: the loss, and whether
                                        every parameter got a gradient

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

from build_scripts.bench import model_run  # noqa: E402
from build_scripts.bench.models import MODELS, depthwise_census, is_depthwise  # noqa: E402


class OverlayStandIn:
    """enable/disable/routing/set_routing as dwconv_overlay has them; under "ours" or "auto" every
    depthwise convolution's output comes from `ours(module, input)`."""

    def __init__(self, ours):
        self.mode, self.on, self.ours, self.hook = "auto", True, ours, None

    def routing(self):
        return self.mode

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


@contextlib.contextmanager
def image_size(size):
    saved = model_run.IMAGE_SIZE
    model_run.IMAGE_SIZE = size
    try:
        yield
    finally:
        model_run.IMAGE_SIZE = saved


def main():
    found = {"parameters": {}, "census": {}, "floor": {}, "check": {}, "steps": {}}
    for name, build in MODELS.items():
        found["parameters"][name] = sum(p.numel() for p in build().parameters())
        found["census"][name] = [list(layer) for layer in depthwise_census(build)]
        found["floor"][name] = model_run.depthwise_floor_ms(model_run.ModelProblem(name, "float32", "contiguous"),
                                                            "inference", 1.0)
    with image_size(64):  # a quarter of 224: small enough for two CPU cores, every layer still run
        for name in MODELS:
            for dtype, layout in (("float32", "contiguous"), ("bfloat16", "channels_last")):
                problem = model_run.ModelProblem(name, dtype, layout)
                model = model_run.build(problem, device="cpu")
                for bug, ours in (("correct", correct), ("flipped", flipped)):
                    overlay = OverlayStandIn(ours)
                    try:
                        verdicts = model_run.check(problem, model, overlay, ("stock", "ours"), device="cpu")
                    finally:
                        overlay.disable()  # its hook is global
                    found["check"][f"{name} {dtype} {layout} {bug}"] = verdicts
            problem = model_run.ModelProblem(name, "bfloat16", "channels_last")
            model = model_run.build(problem, device="cpu")
            batch = model_run.make_images(problem, 2, device="cpu")
            loss = model_run.training_step(model, problem.dtype)(batch)
            model.eval()
            logits = model_run.inference_step(model, problem.dtype)(batch)
            found["steps"][name] = {
                "loss": loss.item(), "loss_requires_grad": loss.requires_grad,
                "all_gradients": all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters()),
                "logits": list(logits.shape), "logits_dtype": str(logits.dtype),
                "logits_requires_grad": logits.requires_grad,
            }
    print(json.dumps(found))


if __name__ == "__main__":
    main()
