"""`make bench-models`' checks of a variant against float64, before anything of it is timed.

  whole model   check(): a batch of CHECK_BATCH through the model's forward, loss and backward in the
                variant and in float64 (stock, the same weights and data), the logits and every
                parameter gradient compared, each relative to its reference's largest magnitude; a
                variant passes when no tensor's error exceeds SLACK times stock's own error on it plus
                TOLERANCE of its dtype, so that the routing makes no model worse than stock computes it.
                It runs the model in eval mode (no dropout, and the convolutions run the same passes),
                its BatchNorms holding the check batch's statistics (calibrated): a train-mode
                BatchNorm's backward cancels so much at a small batch that stock's own error on some
                tensors reaches percents in fp32, behind which a wrong kernel hides; with torch's
                initial statistics activations shrink layer by layer until fp16 computes zeros whoever
                runs the convolutions.
  each layer    layer_check(): the very step that is timed (its mode, batch and images), every depthwise
                convolution's input, output and gradients recorded as the variant computed them, each
                held to float64 computed from the same inputs (stock, NCHW) within LAYER_TOLERANCE, the
                bench's per-pass tolerance. Where stock's own error through the whole model is large
                (bf16's gradients: 0.2 to 2 of their largest magnitude), the whole-model bound is too
                loose to catch a wrong backward kernel; a layer's error is the kernel's alone.

In both the fp16 loss is scaled as GradScaler does (loss_scale()): without it, ConvNeXt-T's gradients
under its 1e-6 layer scale underflow to zeros, which every variant computes.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .model_steps import ModelProblem, autocast, inference_step, make_images, model_variant, training_step
from .models import is_depthwise
from .run import TOLERANCE as LAYER_TOLERANCE
from .run import error_text, relative_error
from .variants import DTYPES

CHECK_BATCH = 4
SLACK = 3.0
TOLERANCE = {"float32": 1e-3, "float16": 5e-3, "bfloat16": 3e-2}
LARGEST_LOSS_SCALE = 2.0 ** 24  # fp16: halved from here until stock's gradients are all finite
LOSS_SCALE_HEADROOM = 4.0        # then backed off by this, so that a variant rounding otherwise does not overflow


def loss_scale(model: torch.nn.Module, dtype: str, batch, overlay) -> float:
    """fp16: the largest power of two up to LARGEST_LOSS_SCALE by which stock's step at this batch keeps
    every parameter gradient finite (GradScaler's scale once it has grown), over LOSS_SCALE_HEADROOM;
    other dtypes need none."""
    if dtype != "float16":
        return 1.0
    scale = LARGEST_LOSS_SCALE
    with model_variant(overlay, "stock"):
        while scale > 1.0:
            model.zero_grad(set_to_none=True)
            training_step(model, dtype, scale)(batch)
            if all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
                break
            scale /= 2
    model.zero_grad(set_to_none=True)
    return max(scale / LOSS_SCALE_HEADROOM, 1.0)


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


def _outputs_and_gradients(model: torch.nn.Module, dtype: str, batch, scale: float) -> dict[str, torch.Tensor]:
    """The training step's logits and every parameter's gradient (unscaled), by name."""
    model.zero_grad(set_to_none=True)
    images, labels = batch
    with autocast(dtype, images.device.type):
        logits = model(images)
    (F.cross_entropy(logits.float(), labels) * scale).backward()
    tensors = {"logits": logits.detach()}
    tensors.update({f"grad {name}": p.grad / scale for name, p in model.named_parameters() if p.grad is not None})
    return tensors


def _errors(got: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict[str, float]:
    """Each tensor's largest error relative to its reference's largest magnitude."""
    if got.keys() != reference.keys():
        raise RuntimeError(f"tensors {sorted(set(got) ^ set(reference))} missing on one side")
    errors = {}
    for name, ref in reference.items():
        try:
            errors[name] = relative_error(got[name], ref)
        except RuntimeError as err:
            raise RuntimeError(f"{name}: {err}") from None
    return errors


def judge(errors: dict[str, float], stock_errors: dict[str, float], dtype: str) -> dict:
    """ok where no tensor's error passes SLACK x stock's error on it + TOLERANCE; worst: the tensor
    nearest its bound (or furthest past it), with its error and stock's."""
    def bound(name):
        return SLACK * stock_errors[name] + TOLERANCE[dtype]
    worst = max(errors, key=lambda name: errors[name] / bound(name))
    return {"ok": all(errors[n] <= bound(n) for n in errors), "worst": worst, "error": errors[worst],
            "stock_error": stock_errors[worst], "of_bound": errors[worst] / bound(worst)}


def _failure(err: Exception) -> dict:
    return {"failed": error_text(err), "ok": False}


def check(problem: ModelProblem, model: torch.nn.Module, overlay, variants, device: str = "cuda") -> dict:
    """The whole-model check: variant -> judge()'s verdict (stock's against TOLERANCE alone is not asked:
    it is the yardstick), or {"failed": message, "ok": False}."""
    generator = torch.Generator(device=device).manual_seed(0)
    batch = make_images(problem, CHECK_BATCH, device=device, generator=generator)
    with model_variant(overlay, "stock"):
        model = calibrated(model, batch[0])
    scale = loss_scale(model, problem.dtype, batch, overlay)
    exact = copy.deepcopy(model).double()
    with model_variant(overlay, "stock"):
        reference = _outputs_and_gradients(exact, "float32", (batch[0].double(), batch[1]), scale)
    errors, results = {}, {}
    for name in ("stock", *[v for v in variants if v != "stock"]):
        try:
            with model_variant(overlay, name):
                got = _outputs_and_gradients(copy.deepcopy(model), problem.dtype, batch, scale)
            errors[name] = _errors(got, reference)
        except Exception as err:  # noqa: BLE001 - recorded in the report, and the run goes on
            results[name] = _failure(err)
    not_finite = [tensor for tensor, error in errors.get("stock", {}).items() if not math.isfinite(error)]
    for name in variants:
        if name not in results and "stock" in errors and not not_finite:
            results[name] = judge(errors[name], errors["stock"], problem.dtype)
        yardstick = f"is not finite on {not_finite[:3]}" if not_finite else "failed"
        results.setdefault(name, {"failed": f"stock's own step, the yardstick, {yardstick}", "ok": False})
    return results


@dataclass
class LayerRecord:
    """What one depthwise convolution got and gave in a step, as the variant computed it."""
    module: torch.nn.Conv2d
    input: torch.Tensor | None = None
    output: torch.Tensor | None = None
    grad_input: torch.Tensor | None = None   # None where no gradient flows to the input
    grad_output: torch.Tensor | None = None


@contextlib.contextmanager
def recording(model: torch.nn.Module):
    """{name: LayerRecord} of the model's depthwise convolutions, filled by the steps run within. The
    input goes through an alias whose gradient hook sees the convolution's grad_input alone (the
    input's own gradient also sums its other uses: a residual)."""
    records, handles = {}, []

    def before(record):
        def hook(module, inputs):
            x = inputs[0]
            if x.requires_grad:
                x = torch.ops.aten.alias.default(x)  # the same data and strides: the same kernels run
                x.register_hook(lambda grad: setattr(record, "grad_input", grad))
            record.input = x.detach()
            return (x, *inputs[1:])
        return hook

    def after(record):
        def hook(module, inputs, output):
            record.output = output.detach()
            if output.requires_grad:
                output.register_hook(lambda grad: setattr(record, "grad_output", grad))
        return hook

    for name, module in model.named_modules():
        if is_depthwise(module):
            record = records[name] = LayerRecord(module)
            handles += [module.register_forward_pre_hook(before(record)), module.register_forward_hook(after(record))]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()


def layer_errors(records: dict[str, LayerRecord], dtype: str, gradients: bool) -> tuple[dict[str, float], list[str]]:
    """Each recorded tensor's error against float64 computed from the layer's recorded input, its
    weights and (gradients) its recorded grad_output, as the dtype the convolution ran in holds them
    (a scaled loss scales grad_output and the gradients alike); and the tensors whose reference is all
    zeros (a gradient that underflowed on its way), which no kernel can get wrong."""
    low = DTYPES[dtype]
    errors, zeros = {}, []
    for name, r in records.items():
        if r.output is None or (gradients and r.grad_output is None):
            raise RuntimeError(f"{name}: the step did not run it{' backward' if r.output is not None else ''}")
        m = r.module
        x = r.input.to(low).double().contiguous().requires_grad_(r.grad_input is not None)
        w = m.weight.detach().to(low).double().requires_grad_(gradients)
        b = m.bias.detach().to(low).double().requires_grad_(gradients) if m.bias is not None else None
        out = F.conv2d(x, w, b, m.stride, m.padding, m.dilation, m.groups)
        errors[f"{name} output"] = relative_error(r.output, out.detach())
        if not gradients:
            continue
        wanted = {"grad_input": x if r.grad_input is not None else None, "grad_weight": w, "grad_bias": b}
        wanted = {k: t for k, t in wanted.items() if t is not None}
        exact = dict(zip(wanted, torch.autograd.grad(out, list(wanted.values()), r.grad_output.double())))
        got = {"grad_input": r.grad_input, "grad_weight": m.weight.grad,
               "grad_bias": m.bias.grad if m.bias is not None else None}
        for key, reference in exact.items():
            errors[f"{name} {key}"] = relative_error(got[key], reference)
            if not reference.any():
                zeros.append(f"{name} {key}")
    return errors, zeros


def layer_check(problem: ModelProblem, mode: str, model: torch.nn.Module, batch, overlay, variant: str,
                scale: float = 1.0) -> dict:
    """The timed step (training: the model in train mode, the loss times scale) run once under the
    variant, each depthwise convolution held to float64 within LAYER_TOLERANCE: {"ok", "worst": "<layer>
    <tensor>", "error", "tolerance", "tensors", "zero_references": [names]} or {"failed": ..., "ok": False}."""
    training = mode == "training"
    try:
        with recording(model) as records:
            with model_variant(overlay, variant):
                if training:
                    model.zero_grad(set_to_none=True)
                    training_step(model, problem.dtype, scale)(batch)
                else:
                    inference_step(model, problem.dtype)(batch)
        if not records:
            raise RuntimeError("the model has no depthwise convolution")
        with model_variant(overlay, "stock"):
            errors, zeros = layer_errors(records, problem.dtype, training)
    except Exception as err:  # noqa: BLE001 - recorded in the report, and the run goes on
        return _failure(err)
    worst = max(errors, key=errors.get)
    tolerance = LAYER_TOLERANCE[problem.dtype]
    return {"ok": errors[worst] <= tolerance, "worst": worst, "error": errors[worst], "tolerance": tolerance,
            "tensors": len(errors), "zero_references": zeros}
