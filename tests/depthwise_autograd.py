"""Checks of the depthwise ops' derivatives on direct calls, in float64.

Shared by the GPU tests (tests/gpu/test_depthwise_autograd.py: the real kernels) and the
CPU check (tests/run_autograd_on_cpu.py: reference kernels stand in for the CUDA ones, so
the formulas and the overlay's generated Autograd kernels are checked without a GPU).
Each check raises on failure. Stdlib and torch only.

The ops: aten::_conv_depthwise2d, aten::conv_depthwise3d and their backward operators
aten::_conv_depthwise2d_backward, aten::_conv_depthwise3d_backward (the patch set's).
References are torch's own grouped convolution on the CPU, in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.autograd import forward_ad, gradcheck, gradgradcheck


@dataclass(frozen=True)
class Case:
    name: str
    batch: int
    channels: int
    multiplier: int  # out_channels = channels * multiplier
    size: tuple[int, ...]  # spatial input size: (H, W) or (D, H, W)
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    bias: bool

    @property
    def dims(self) -> int:
        return len(self.size)


CASES = [
    Case("2d_k3", 2, 3, 1, (7, 6), (3, 3), (1, 1), (1, 1), (1, 1), True),
    Case("2d_multiplier2_strided_dilated", 2, 2, 2, (7, 8), (3, 2), (2, 1), (1, 0), (1, 2), True),
    Case("2d_conv1d_shaped", 1, 4, 1, (1, 9), (1, 4), (1, 1), (0, 3), (1, 1), False),
    Case("3d_k3", 1, 2, 1, (4, 5, 5), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), True),
    Case("3d_multiplier2_strided", 2, 2, 2, (5, 4, 6), (2, 3, 1), (2, 1, 1), (0, 1, 0), (1, 1, 2), False),
]


def forward_op(case: Case):
    return torch.ops.aten._conv_depthwise2d if case.dims == 2 else torch.ops.aten.conv_depthwise3d


def backward_op(case: Case):
    return torch.ops.aten._conv_depthwise2d_backward if case.dims == 2 else torch.ops.aten._conv_depthwise3d_backward


def make_inputs(case: Case, device, dtype=torch.float64, memory_format=torch.contiguous_format, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(case.batch, case.channels, *case.size, dtype=dtype, generator=generator)
    w = torch.randn(case.channels * case.multiplier, 1, *case.kernel, dtype=dtype, generator=generator)
    b = torch.randn(case.channels * case.multiplier, dtype=dtype, generator=generator) if case.bias else None
    x = x.to(device).contiguous(memory_format=memory_format).requires_grad_()
    w = w.to(device).requires_grad_()
    b = b.to(device).requires_grad_() if b is not None else None
    return x, w, b


def call(case: Case, x, w, b):
    return forward_op(case)(x, w, case.kernel, b, case.stride, case.padding, case.dilation)


def call_backward(case: Case, grad_output, x, w, output_mask=(True, True)):
    return backward_op(case)(grad_output, x, w, case.kernel, case.stride, case.padding, case.dilation,
                             list(output_mask))


def reference(case: Case, x, w, b):
    """Torch's grouped convolution on the CPU in float64, on detached copies (with grad)."""
    def leaf(t):
        return None if t is None else t.detach().cpu().double().requires_grad_()
    x64, w64, b64 = leaf(x), leaf(w), leaf(b)
    conv = F.conv2d if case.dims == 2 else F.conv3d
    out = conv(x64, w64, b64, case.stride, case.padding, case.dilation, groups=case.channels)
    return out, x64, w64, b64


def _inputs(case, device):
    x, w, b = make_inputs(case, device)
    return (x, w, b) if b is not None else (x, w)


def _forward(case):
    return lambda x, w, b=None: call(case, x, w, b)


def check_gradcheck(case: Case, device) -> None:
    assert gradcheck(_forward(case), _inputs(case, device))


def check_gradgradcheck(case: Case, device) -> None:
    assert gradgradcheck(_forward(case), _inputs(case, device))


def _tangents(case: Case, device, seed=1):
    return make_inputs(case, device, seed=seed)


def _expected_jvp(case, primals, tangents):
    """conv is bilinear: d(conv(x, w) + b) = conv(dx, w) + conv(x, dw) + db."""
    x, w, b = primals
    dx, dw, db = tangents
    first, *_ = reference(case, dx, w, db)
    second, *_ = reference(case, x, dw, None)
    return (first + second).detach()


def check_forward_ad(case: Case, device) -> None:
    primals, tangents = make_inputs(case, device), _tangents(case, device)
    with forward_ad.dual_level():
        duals = [None if p is None else forward_ad.make_dual(p.detach(), t.detach()) for p, t in zip(primals, tangents)]
        tangent = forward_ad.unpack_dual(call(case, *duals)).tangent
    assert tangent is not None, "forward AD gave no tangent"
    torch.testing.assert_close(tangent.cpu(), _expected_jvp(case, primals, tangents))


def check_func_jvp(case: Case, device) -> None:
    primals, tangents = make_inputs(case, device), _tangents(case, device)
    present = [i for i, p in enumerate(primals) if p is not None]

    def f(*args):
        full = [None, None, None]
        for i, a in zip(present, args):
            full[i] = a
        return call(case, *full)
    _, tangent = torch.func.jvp(f, tuple(primals[i].detach() for i in present),
                                tuple(tangents[i].detach() for i in present))
    torch.testing.assert_close(tangent.cpu(), _expected_jvp(case, primals, tangents))


def check_forward_over_reverse(case: Case, device) -> None:
    assert gradgradcheck(_forward(case), _inputs(case, device), check_fwd_over_rev=True)


def check_backward_op_reference(case: Case, device) -> None:
    x, w, _ = make_inputs(case, device)
    out, x64, w64, _ = reference(case, x, w, None)
    grad_output = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    expected = torch.autograd.grad(out, (x64, w64), grad_output)
    for mask in [(True, True), (True, False), (False, True)]:
        got = call_backward(case, grad_output.to(device), x.detach(), w.detach(), mask)
        for wanted, value, result in zip(mask, got, expected):
            if wanted:
                torch.testing.assert_close(value.cpu(), result)
            else:
                assert value is None or not value.defined(), "an output the mask leaves out was computed"


def check_backward_op_gradcheck(case: Case, device) -> None:
    x, w, _ = make_inputs(case, device)
    out, *_ = reference(case, x, w, None)
    grad_output = torch.randn(out.shape, dtype=torch.float64, device=device, requires_grad=True)

    def backward(grad_output, x, w):
        return call_backward(case, grad_output, x, w)
    node = backward(grad_output, x, w)[0].grad_fn
    assert node is not None and node.name() == f"ConvDepthwise{case.dims}DBackwardBackward0", (
        f"the backward op's outputs come from {node.name() if node else None}, not its own derivatives entry")
    assert gradcheck(backward, (grad_output, x, w))
    assert gradgradcheck(backward, (grad_output, x, w))


def check_profiler_names(case: Case, device) -> None:
    """The backward of a direct call runs the backward operator, by name."""
    x, w, b = make_inputs(case, device)
    out = call(case, x, w, b)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        out.backward(torch.ones_like(out))
    names = {event.name for event in profile.events()}
    wanted = f"aten::_conv_depthwise{case.dims}d_backward"
    assert wanted in names, f"{wanted} is not among the profiled ops: {sorted(n for n in names if 'conv' in n)}"


# The derivatives of direct calls: upstream's formulas fail all of these.
DERIVATIVE_CHECKS = {
    "gradcheck": check_gradcheck,
    "gradgradcheck": check_gradgradcheck,
    "forward_ad": check_forward_ad,
    "func_jvp": check_func_jvp,
    "forward_over_reverse": check_forward_over_reverse,
}
# The new operators (stock torch has none).
BACKWARD_OP_CHECKS = {
    "backward_op_reference": check_backward_op_reference,
    "backward_op_gradcheck": check_backward_op_gradcheck,
    "profiler_names": check_profiler_names,
}
CHECKS = {**DERIVATIVE_CHECKS, **BACKWARD_OP_CHECKS}
