"""GPU tests of the depthwise 2D kernels, run through the overlay on stock torch 2.11.0+cu130.

Upstream style (torch.testing._internal): device-type tests and OpInfo tests over the conv
OpInfos. Run with `make test-gpu` on a machine with an NVIDIA GPU, torch 2.11.0+cu130 and the
overlay staged by `make overlay` (build/l0/overlay-staging, or DWCONV_OVERLAY_DIR).

The stock kernels are reached in the same process with dwconv_overlay.disable().
"""

import itertools
import random
import re
from contextlib import nullcontext
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch 2.11.0+cu130, which is not installed here")
if not torch.cuda.is_available():
    pytest.skip("the GPU tests need a CUDA device; there is none here", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402
from torch.testing._internal.common_device_type import (  # noqa: E402
    dtypes, instantiate_device_type_tests, largeTensorTest, onlyCUDA, ops,
)
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import TestCase, run_tests, gradcheck, gradgradcheck  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overlay_loader import dwconv_overlay, stock_kernels  # noqa: E402
from profiling import op_names  # noqa: E402

TOLERANCES = {  # (atol, rtol) against a float64 reference
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}


def reference(x, w, b, stride, padding, dilation):
    """Float64 depthwise convolution on the CPU, with its gradients."""
    x64 = x.detach().double().cpu().contiguous().requires_grad_()
    w64 = w.detach().double().cpu().contiguous().requires_grad_()
    b64 = b.detach().double().cpu().requires_grad_() if b is not None else None
    out = F.conv2d(x64, w64, b64, stride, padding, dilation, groups=x.shape[1])
    return out, x64, w64, b64


def depthwise(x, w, b, stride, padding, dilation):
    """Our forward kernel, called as the op (the route F.conv2d takes for NCHW)."""
    return torch.ops.aten._conv_depthwise2d(x, w, w.shape[2:], b, stride, padding, dilation)


def random_cases(count, seed=0):
    """A randomized sweep of every parameter: kernel (square, 1xk, kx1), stride, padding,
    dilation, multiplier, batch, bias, H = 1 (conv1d) and channels."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        kh, kw = rng.choice([(1, 1), (3, 3), (5, 5), (7, 7), (1, 11), (11, 1), (2, 4), (13, 13), (1, 4)])
        h = 1 if kh == 1 and rng.random() < 0.3 else rng.randint(max(1, kh), 40)
        cases.append(dict(
            n=rng.choice([1, 2, 5]), c=rng.choice([1, 3, 8, 32]), m=rng.choice([1, 1, 2, 3]),
            h=h, w=rng.randint(kw, 90), kernel=(kh, kw),
            stride=(rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2])),
            padding=(rng.randint(0, kh // 2 + 1), rng.randint(0, kw // 2 + 1)),
            dilation=(rng.choice([1, 1, 2]), rng.choice([1, 1, 2])),
            bias=rng.random() < 0.5,
        ))
    return [c for c in cases if (c["h"] + 2 * c["padding"][0] - c["dilation"][0] * (c["kernel"][0] - 1) > 0
                                 and c["w"] + 2 * c["padding"][1] - c["dilation"][1] * (c["kernel"][1] - 1) > 0)]


def make_inputs(case, dtype, device, channels_last=False, weight_kind="contiguous"):
    x = torch.randn(case["n"], case["c"], case["h"], case["w"], device=device, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    c_out = case["c"] * case["m"]
    if weight_kind == "expanded":  # one filter shared by every channel, stride 0 along channels
        w = torch.randn(1, 1, *case["kernel"], device=device, dtype=dtype).expand(c_out, 1, *case["kernel"])
    elif weight_kind == "noncontiguous":
        w = torch.randn(c_out, 1, case["kernel"][1], case["kernel"][0], device=device, dtype=dtype).transpose(2, 3)
    else:
        w = torch.randn(c_out, 1, *case["kernel"], device=device, dtype=dtype)
    b = torch.randn(c_out, device=device, dtype=dtype) if case["bias"] else None
    return x, w, b


def channels_last_misaligned(x):
    """x's values, channels_last-contiguous, starting one element past a 16-byte boundary."""
    n, c, h, w = x.shape
    storage = torch.empty(x.numel() + 1, device=x.device, dtype=x.dtype)
    shifted = storage[1:].view(n, h, w, c).permute(0, 3, 1, 2)
    shifted.copy_(x)
    return shifted


CHANNELS_LAST_TILED = "tiled_channels_last_kernel"
CHANNELS_LAST_REGISTER_TILED = "channels_last_register_tiled_kernel"
REGISTER_TILED = "register_tiled_nchw_kernel"
REGISTER_TILED_GRAD_WEIGHT = "grad_weight_register_tiled_kernel"
CHANNELS_LAST_GRAD_WEIGHT = "grad_weight_register_channels_last_kernel"
LARGE_FILTER = "large_filter_kernel"
LARGE_FILTER_GRAD_WEIGHT = "grad_weight_large_filter_kernel"
ROW = "row_kernel"
ROW_GRAD_WEIGHT = "grad_weight_row_kernel"
COLUMN = "column_kernel"
COLUMN_GRAD_WEIGHT = "grad_weight_column_kernel"
STRIDE2_NCHW = "stride2_grad_input_nchw_kernel"
STRIDE2_CHANNELS_LAST = "stride2_grad_input_channels_last_kernel"


# One call each specialised path takes: (path, layout, batch, channels (16-byte vectors of them for
# channels_last), size, kernel, stride, padding, {pass: the kernel it runs with every path on}).
# tile_vector_loads changes how the register tiles are staged, not which kernel runs.
KERNEL_PATH_CASES = [
    ("channels_last_tiled", "cl", 2, 8, (20, 33), (3, 4), 1, (1, 1),
     {"forward": CHANNELS_LAST_TILED, "backward-input": CHANNELS_LAST_TILED}),
    ("channels_last_register_tiled", "cl", 2, 8, (20, 33), (3, 3), 1, (1, 1),
     {"forward": CHANNELS_LAST_REGISTER_TILED, "backward-input": CHANNELS_LAST_REGISTER_TILED}),
    ("register_tiled", "nchw", 2, 3, (56, 56), (3, 3), 1, (1, 1),
     {"forward": REGISTER_TILED, "backward-input": REGISTER_TILED}),
    ("register_tiled_grad_weight", "nchw", 2, 3, (56, 56), (5, 5), 1, (2, 2), {"grad-weight": REGISTER_TILED_GRAD_WEIGHT}),
    ("channels_last_register_grad_weight", "cl", 3, 8, (20, 33), (3, 3), 1, (1, 1),
     {"grad-weight": CHANNELS_LAST_GRAD_WEIGHT}),
    ("large_filter", "nchw", 2, 4, (30, 30), (13, 13), 1, (6, 6),
     {"forward": LARGE_FILTER, "backward-input": LARGE_FILTER}),
    ("large_filter_grad_weight", "cl", 2, 2, (28, 28), (13, 13), 1, (6, 6), {"grad-weight": LARGE_FILTER_GRAD_WEIGHT}),
    ("row", "nchw", 2, 8, (1, 2048), (1, 4), 1, (0, 3),
     {"forward": ROW, "backward-input": ROW, "grad-weight": ROW_GRAD_WEIGHT}),
    ("column", "cl", 2, 16, (1, 256), (1, 4), 1, (0, 3),
     {"forward": COLUMN, "backward-input": COLUMN, "grad-weight": COLUMN_GRAD_WEIGHT}),
    ("stride2_grad_input", "nchw", 2, 8, (30, 30), (3, 3), 2, (1, 1), {"backward-input": STRIDE2_NCHW}),
    ("register_tiled_stride2", "nchw", 2, 8, (30, 30), (3, 3), 2, (1, 1),
     {"forward": REGISTER_TILED, "grad-weight": REGISTER_TILED_GRAD_WEIGHT}),
    ("tile_vector_loads", "nchw", 2, 3, (56, 56), (3, 3), 1, (1, 1), {}),
]


def launched(names, kernel):
    """Whether the kernel of that exact name is among the profiler's names (not one whose name
    merely contains it: grad_weight_large_filter_kernel is not large_filter_kernel)."""
    return any(re.search(rf"(?<![A-Za-z0-9_]){kernel}\b", n) for n in names)


class TestDepthwise2d(TestCase):
    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_forward_and_gradients_match_float64(self, device, dtype):
        atol, rtol = TOLERANCES[dtype]
        for case, channels_last, weight_kind in itertools.product(
                random_cases(40), (False, True), ("contiguous", "noncontiguous", "expanded")):
            if weight_kind != "contiguous" and random.Random(str(case)).random() < 0.7:
                continue  # weights of other layouts on a sample of the sweep
            with self.subTest(case=case, channels_last=channels_last, weight=weight_kind):
                x, w, b = make_inputs(case, dtype, device, channels_last, weight_kind)
                args = (case["stride"], case["padding"], case["dilation"])
                out = depthwise(x, w, b, *args)
                ref, x64, w64, b64 = reference(x, w, b, *args)
                self.assertEqual(out.double().cpu(), ref, atol=atol * ref.abs().max().item() + atol, rtol=rtol)
                expected_format = torch.channels_last if channels_last and case["c"] > 1 else torch.contiguous_format
                self.assertTrue(out.is_contiguous(memory_format=expected_format))

                grad_out = torch.randn_like(ref)
                ref.backward(grad_out)
                xg, wg = x.detach().requires_grad_(), w.detach().clone().requires_grad_()
                with torch.backends.cudnn.flags(enabled=False):  # else cuDNN takes channels_last and fp16
                    out = F.conv2d(xg, wg, b, *args, groups=case["c"])
                    out.backward(grad_out.to(device=device, dtype=dtype))
                scale = case["kernel"][0] * case["kernel"][1] * case["m"]
                self.assertEqual(xg.grad.double().cpu(), x64.grad, atol=atol * scale, rtol=rtol)
                reduction = case["n"] * ref.shape[2] * ref.shape[3]
                self.assertEqual(wg.grad.double().cpu(), w64.grad, atol=atol * reduction ** 0.5 * 4, rtol=rtol * 4)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_register_tiled_kernel(self, device, dtype):
        """Which NCHW passes the register-tiled kernels take (square 3, 5 or 7 at stride 1: forward,
        backward-input and the weight gradient; square 3 or 5 at stride 2: forward and the weight
        gradient, backward-input going to the stride-2 kernel; dilation 1), over plane sizes that
        give one plane a block, several tiles a plane, and many planes a block with the last block
        part-filled; and that all three passes match float64."""
        atol, rtol = TOLERANCES[dtype]
        every, strided, none = {"forward", "backward-input", "grad-weight"}, {"forward", "grad-weight"}, set()
        cases = [  # (batch, channels, size, kernel, stride, padding, dilation, multiplier, passes register-tiled)
            (2, 3, (112, 112), 3, 1, 1, 1, 1, every),     # 4 tiles a plane
            (3, 5, (56, 56), 7, 1, 3, 1, 1, every),       # a plane a block
            (5, 7, (28, 28), 5, 1, 2, 1, 2, every),       # several planes a block; backward sums two planes
            (3, 37, (14, 14), 3, 1, 1, 1, 1, every),      # 16 planes a block, the last part-filled
            (1, 70, (7, 7), 7, 1, 3, 1, 1, every),        # 7x7 planes
            (2, 4, (300, 9), 5, 1, 0, 1, 1, every),       # tall and narrow, no padding
            (2, 4, (1, 500), 3, 1, 1, 1, 1, every),       # one input row
            (2, 8, (30, 30), 3, 2, 1, 1, 1, strided),     # stride 2
            (2, 16, (112, 112), 3, 2, 1, 1, 1, strided),  # MobileNetV2's 96@112 s2, narrowed: tiles split their rows
            (3, 6, (57, 30), 5, 2, 2, 1, 2, strided),     # 5x5 stride 2, multiplier 2, an odd height
            (4, 96, (14, 14), 3, 2, 1, 1, 1, strided),    # 7x7 outputs, many planes a block
            (2, 8, (30, 30), 7, 2, 3, 1, 1, none),        # 7x7 is not compiled for stride 2
            (2, 8, (30, 30), 3, 1, 2, 2, 1, none),        # dilation 2
            (2, 8, (30, 30), 9, 1, 4, 1, 1, none),        # no compiled size
        ]
        for n, c, size, kernel, stride, padding, dilation, m, expected in cases:
            with self.subTest(n=n, c=c, size=size, kernel=kernel, stride=stride, dilation=dilation, multiplier=m):
                x = torch.randn(n, c, *size, device=device, dtype=dtype)
                w = torch.randn(c * m, 1, kernel, kernel, device=device, dtype=dtype)
                b = torch.randn(c * m, device=device, dtype=dtype)
                args = ((stride, stride), (padding, padding), (dilation, dilation))

                names = op_names(lambda: depthwise(x, w, b, *args))
                self.assertEqual(launched(names, REGISTER_TILED), "forward" in expected)
                out = depthwise(x, w, b, *args)
                ref, x64, w64, _ = reference(x, w, b, *args)
                self.assertEqual(out.double().cpu(), ref, atol=atol * ref.abs().max().item() + atol, rtol=rtol)

                grad_out = torch.randn(out.shape, device=device, dtype=dtype)
                backward = lambda: torch.ops.aten._conv_depthwise2d_backward(  # noqa: E731
                    grad_out, x, w, (kernel, kernel), *args, [True, True])
                names = op_names(backward)
                self.assertEqual(launched(names, REGISTER_TILED), "backward-input" in expected)
                self.assertEqual(launched(names, REGISTER_TILED_GRAD_WEIGHT), "grad-weight" in expected)
                grad_input, grad_weight = backward()
                ref.backward(grad_out.double().cpu())
                self.assertEqual(grad_input.double().cpu(), x64.grad, atol=atol * kernel * kernel * m, rtol=rtol)
                reduction = n * out.shape[2] * out.shape[3]
                self.assertEqual(grad_weight.double().cpu(), w64.grad, atol=atol * reduction ** 0.5 * 4, rtol=rtol * 4)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_channels_last_tiled_kernel(self, device, dtype):
        """Which channels_last calls the 16-byte tiled kernels take (multiplier 1, channels a whole
        number of 16-byte vectors, 16-byte aligned data, a tile that fits in shared memory; for
        backward-input also stride 1): the register-tiled one for square 3, 5 and 7 at stride 1 and
        3 and 5 at stride 2 (dilation 1) where its tile uses two thirds of its lanes, the general
        one for the rest; and that their forward and backward-input match float64."""
        atol, rtol = TOLERANCES[dtype]
        vector = 16 // torch.empty((), dtype=dtype).element_size()
        tiled, register = CHANNELS_LAST_TILED, CHANNELS_LAST_REGISTER_TILED
        cases = [  # (channels, size, kernel, stride, padding, dilation, multiplier, aligned, forward's kernel)
            (8 * vector, (20, 33), 3, 1, 1, 1, 1, True, register),     # 8 vectors a block
            (8 * vector, (56, 56), 5, 1, 2, 1, 1, True, register),     # several tiles down and across
            (3 * vector, (14, 14), 7, 1, 3, 1, 1, True, register),
            (4 * vector, (11, 60), 5, 2, 2, 1, 1, True, register),     # stride 2: backward-input elsewhere
            (18 * vector, (9, 9), 3, 2, 1, 1, 1, True, tiled),         # 5x5 outputs: too few for 4-row lanes
            (8 * vector, (2, 40), 3, 1, 1, 1, 1, True, tiled),         # 2 rows: half of each lane idle
            (8 * vector, (20, 20), 7, 2, 3, 1, 1, True, tiled),        # 7x7 is not compiled for stride 2
            (2 * vector, (12, 12), 3, 1, 2, 2, 1, True, tiled),        # dilation
            (8 * vector, (1, 700), (1, 4), 1, (0, 3), 1, 1, True, tiled),  # conv1d, one long tile row
            (16 * vector, (1, 700), (1, 4), 1, (0, 3), 1, 1, True, COLUMN),  # 16 vectors: the column kernel
            (4 * vector + 1, (16, 16), 3, 1, 1, 1, 1, True, None),    # channels not whole vectors
            (4 * vector, (16, 16), 3, 1, 1, 1, 2, True, None),        # multiplier 2
            (4 * vector, (16, 16), 3, 1, 1, 1, 1, False, None),       # data off a 16-byte boundary
            (8 * vector, (40, 40), 31, 1, 15, 1, 1, True, None),      # no tile fits in shared memory
        ]
        for c, size, kernel, stride, padding, dilation, m, aligned, forward_kernel in cases:
            with self.subTest(c=c, size=size, kernel=kernel, stride=stride, multiplier=m, aligned=aligned):
                kernel = kernel if isinstance(kernel, tuple) else (kernel, kernel)
                padding = padding if isinstance(padding, tuple) else (padding, padding)
                x = torch.randn(2, c, *size, device=device, dtype=dtype).to(memory_format=torch.channels_last)
                x = x if aligned else channels_last_misaligned(x)
                w = torch.randn(c * m, 1, *kernel, device=device, dtype=dtype)
                b = torch.randn(c * m, device=device, dtype=dtype)
                args = ((stride, stride), padding, (dilation, dilation))

                names = op_names(lambda: depthwise(x, w, b, *args))
                self.assertEqual(launched(names, register), forward_kernel == register)
                self.assertEqual(launched(names, tiled), forward_kernel == tiled)
                self.assertTrue(forward_kernel is None or launched(names, forward_kernel))
                out = depthwise(x, w, b, *args)
                ref, x64, w64, _ = reference(x, w, b, *args)
                self.assertTrue(out.is_contiguous(memory_format=torch.channels_last))
                self.assertEqual(out.double().cpu(), ref, atol=atol * ref.abs().max().item() + atol, rtol=rtol)

                grad_out = torch.randn(out.shape, device=device, dtype=dtype).to(memory_format=torch.channels_last)
                grad_out = grad_out if aligned else channels_last_misaligned(grad_out)
                backward = lambda: torch.ops.aten._conv_depthwise2d_backward(  # noqa: E731
                    grad_out, x, w, kernel, *args, [True, False])
                names = op_names(backward)
                backward_kernel = forward_kernel if stride == 1 else None  # same-size planes at stride 1
                self.assertEqual(launched(names, register), backward_kernel == register)
                self.assertEqual(launched(names, tiled), backward_kernel == tiled)
                grad_input = backward()[0]
                ref.backward(grad_out.double().cpu())
                self.assertTrue(grad_input.is_contiguous(memory_format=torch.channels_last))
                self.assertEqual(grad_input.double().cpu(), x64.grad,
                                 atol=atol * kernel[0] * kernel[1] * m, rtol=rtol)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_channels_last_register_grad_weight(self, device, dtype):
        """Which channels_last weight gradients the register-blocked kernel takes (square 3, 5 or 7,
        stride 1 or 2, dilation 1, multiplier 1; for the half types an even channel count and data
        aligned to a channel pair), and that it matches float64."""
        atol, rtol = TOLERANCES[dtype]
        pairs = torch.empty((), dtype=dtype).element_size() == 2
        cases = [  # (channels, size, kernel, stride, padding, dilation, multiplier, aligned, expect register)
            (64, (20, 33), 3, 1, 1, 1, 1, True, True),     # 32 channel lanes
            (144, (15, 15), 3, 2, 1, 1, 1, True, True),    # 144 bf16 channels: 9 blocks of 8 lanes
            (18, (9, 9), 5, 2, 2, 1, 1, True, True),
            (12, (14, 14), 7, 1, 3, 1, 1, True, True),     # sums reduced in chunks
            (7, (12, 12), 3, 1, 1, 1, 1, True, not pairs),  # odd channels: no pairs
            (8, (12, 12), 3, 1, 1, 1, 1, False, not pairs),  # one element off: pairs misaligned
            (8, (12, 12), 3, 1, 1, 1, 2, True, False),     # multiplier 2
            (8, (12, 12), 3, 3, 1, 1, 1, True, False),     # stride 3
            (8, (12, 12), 3, 1, 2, 2, 1, True, False),     # dilation 2
            (8, (12, 12), 9, 1, 4, 1, 1, True, False),     # no compiled size
        ]
        for c, size, kernel, stride, padding, dilation, m, aligned, expected in cases:
            with self.subTest(c=c, size=size, kernel=kernel, stride=stride, multiplier=m, aligned=aligned):
                x = torch.randn(3, c, *size, device=device, dtype=dtype).to(memory_format=torch.channels_last)
                x = x if aligned else channels_last_misaligned(x)
                w = torch.randn(c * m, 1, kernel, kernel, device=device, dtype=dtype)
                args = ((stride, stride), (padding, padding), (dilation, dilation))
                ref, x64, w64, _ = reference(x, w, None, *args)
                grad_out = torch.randn(ref.shape, device=device, dtype=dtype).to(memory_format=torch.channels_last)
                grad_out = grad_out if aligned else channels_last_misaligned(grad_out)
                backward = lambda: torch.ops.aten._conv_depthwise2d_backward(  # noqa: E731
                    grad_out, x, w, (kernel, kernel), *args, [False, True])
                names = op_names(backward)
                self.assertEqual(any(CHANNELS_LAST_GRAD_WEIGHT in n for n in names), expected)
                grad_weight = backward()[1]
                ref.backward(grad_out.double().cpu())
                reduction = 3 * ref.shape[2] * ref.shape[3]
                self.assertEqual(grad_weight.double().cpu(), w64.grad, atol=atol * reduction ** 0.5 * 4, rtol=rtol * 4)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_large_filter_kernel(self, device, dtype):
        """Which calls the large-filter kernels take (stride 1, dilation 1, 16 taps or more, not a
        compiled 3/5/7 size, 2 output rows or more, and for the weight gradient 2 kernel rows or
        more; NCHW or channels_last, any alignment), over the RepLKNet-31B planes and filters and
        odd shapes, and that forward, backward-input and the weight gradient match float64."""
        atol, rtol = TOLERANCES[dtype]
        cases = [  # (batch, channels, size, kernel, padding, multiplier, layout, expect large-filter)
            (2, 4, (56, 56), (31, 31), (15, 15), 1, "nchw", True),   # RepLKNet-31B stage 1: a plane a block
            (2, 6, (28, 28), (29, 29), (14, 14), 1, "cl", True),
            (3, 10, (14, 14), (27, 27), (13, 13), 1, "nchw", True),  # two planes a block
            (2, 20, (7, 7), (13, 13), (6, 6), 2, "cl", True),        # 8 planes a block; backward sums two planes
            (2, 3, (40, 61), (9, 31), (4, 15), 1, "nchw", True),     # not square, a 3-tap rest
            (1, 2, (100, 13), (51, 5), (25, 2), 1, "cl", True),      # SLaK's 51x5
            (2, 8, (20, 20), (13, 13), (6, 6), 1, "cl-misaligned", True),
            (2, 4, (30, 30), (4, 4), (1, 2), 1, "nchw", True),       # 16 taps, uneven output size
            (2, 4, (30, 30), (3, 5), (1, 2), 1, "nchw", False),      # 15 taps
            (2, 4, (30, 30), (7, 7), (3, 3), 1, "nchw", False),      # a compiled size: register-tiled
            (1, 3, (1, 300), (1, 31), (0, 15), 1, "nchw", False),    # conv1d: one row keeps the tiled kernel
        ]
        for n, c, size, kernel, padding, m, layout, expected in cases:
            with self.subTest(n=n, c=c, size=size, kernel=kernel, multiplier=m, layout=layout):
                x = torch.randn(n, c, *size, device=device, dtype=dtype)
                if layout != "nchw":
                    x = x.to(memory_format=torch.channels_last)
                if layout == "cl-misaligned":
                    x = channels_last_misaligned(x)
                w = torch.randn(c * m, 1, *kernel, device=device, dtype=dtype)
                b = torch.randn(c * m, device=device, dtype=dtype)
                args = ((1, 1), padding, (1, 1))

                names = op_names(lambda: depthwise(x, w, b, *args))
                self.assertEqual(launched(names, LARGE_FILTER), expected)
                out = depthwise(x, w, b, *args)
                ref, x64, w64, _ = reference(x, w, b, *args)
                self.assertEqual(out.double().cpu(), ref, atol=atol * ref.abs().max().item() + atol, rtol=rtol)

                grad_out = torch.randn(out.shape, device=device, dtype=dtype)
                if layout != "nchw":
                    grad_out = grad_out.to(memory_format=torch.channels_last)
                if layout == "cl-misaligned":
                    grad_out = channels_last_misaligned(grad_out)
                backward = lambda: torch.ops.aten._conv_depthwise2d_backward(  # noqa: E731
                    grad_out, x, w, kernel, *args, [True, True])
                names = op_names(backward)
                self.assertEqual(launched(names, LARGE_FILTER), expected)
                self.assertEqual(launched(names, LARGE_FILTER_GRAD_WEIGHT), expected)
                grad_input, grad_weight = backward()
                ref.backward(grad_out.double().cpu())
                taps = kernel[0] * kernel[1] * m
                self.assertEqual(grad_input.double().cpu(), x64.grad,
                                 atol=atol * x64.grad.abs().max().item() + atol * taps ** 0.5, rtol=rtol)
                reduction = n * out.shape[2] * out.shape[3]
                self.assertEqual(grad_weight.double().cpu(), w64.grad, atol=atol * reduction ** 0.5 * 4, rtol=rtol * 4)

    def check_conv1d_kernels(self, device, dtype, case, kernel, grad_weight_kernel):
        """One conv1d call (N, C, 1, width): whether its forward, backward-input and weight gradient
        run `kernel`, `kernel` and `grad_weight_kernel` as case["expected"] says, and that all three
        match float64. Layouts: nchw, misaligned (NCHW, the input one element off a 16-byte
        boundary), cl (channels_last, as a transposed (N, L, C) tensor), cl-misaligned."""
        atol, rtol = TOLERANCES[dtype]
        n, c, width, k, m, layout = (case[key] for key in ("n", "c", "width", "kernel", "multiplier", "layout"))
        x = torch.randn(n, c, 1, width, device=device, dtype=dtype)
        if layout.startswith("cl"):
            x = x.to(memory_format=torch.channels_last)
        if layout == "cl-misaligned":
            x = channels_last_misaligned(x)
        if layout == "misaligned":
            x = torch.empty(x.numel() + 1, device=device, dtype=dtype)[1:].view_as(x).copy_(x)
        w = torch.randn(c * m, 1, 1, k, device=device, dtype=dtype)
        b = torch.randn(c * m, device=device, dtype=dtype)
        args = ((1, case["stride"]), (0, case["padding"]), (1, case["dilation"]))

        names = op_names(lambda: depthwise(x, w, b, *args))
        self.assertEqual(launched(names, kernel), case["expected"][0])
        out = depthwise(x, w, b, *args)
        ref, x64, w64, _ = reference(x, w, b, *args)
        self.assertEqual(out.double().cpu(), ref, atol=atol * ref.abs().max().item() + atol, rtol=rtol)

        grad_out = torch.randn(out.shape, device=device, dtype=dtype)
        if layout.startswith("cl"):
            grad_out = grad_out.to(memory_format=torch.channels_last)
        backward = lambda: torch.ops.aten._conv_depthwise2d_backward(  # noqa: E731
            grad_out, x, w, (1, k), *args, [True, True])
        names = op_names(backward)
        self.assertEqual(launched(names, kernel), case["expected"][1])
        self.assertEqual(launched(names, grad_weight_kernel), case["expected"][2])
        grad_input, grad_weight = backward()
        ref.backward(grad_out.double().cpu())
        self.assertEqual(grad_input.double().cpu(), x64.grad,
                         atol=atol * x64.grad.abs().max().item() + atol * (k * m) ** 0.5, rtol=rtol)
        reduction = n * out.shape[3]
        self.assertEqual(grad_weight.double().cpu(), w64.grad, atol=atol * reduction ** 0.5 * 4, rtol=rtol * 4)

    @staticmethod
    def conv1d_cases(rows):
        keys = ("n", "c", "width", "kernel", "stride", "padding", "dilation", "multiplier", "layout", "expected")
        return [dict(zip(keys, row)) for row in rows]

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_row_kernel(self, device, dtype):
        """Which conv1d calls the row kernels take (rows of one input row, NCHW-contiguous, a 1 x 2,
        3 or 4 filter at stride 1 and dilation 1, 64 outputs or more, 16-byte aligned data; backward-
        input where it is a correlation, padding at most k - 1), over Mamba's shape and odd ones,
        and that forward, backward-input and the weight gradient match float64."""
        cases = self.conv1d_cases([  # (batch, channels, width, kernel, stride, padding, dilation, multiplier,
            #                            layout, expect row: forward, backward-input, weight gradient)
            (2, 8, 2048, 4, 1, 3, 1, 1, "nchw", (True, True, True)),      # Mamba's causal conv1d
            (3, 5, 203, 3, 1, 1, 1, 1, "nchw", (True, True, True)),       # each row's window at another offset
            (2, 3, 150, 2, 1, 1, 1, 2, "nchw", (True, True, True)),       # multiplier 2
            (2, 4, 100, 4, 1, 5, 1, 1, "nchw", (True, False, True)),      # padding past k - 1: no correlation
            (1, 4, 300, 4, 1, 3, 1, 1, "misaligned", (False, True, False)),  # input off a 16-byte boundary
            (2, 4, 300, 5, 1, 2, 1, 1, "nchw", (False, False, False)),    # no compiled width
            (2, 4, 40, 4, 1, 3, 1, 1, "nchw", (False, False, False)),     # 43 outputs: too narrow
            (2, 4, 300, 4, 2, 3, 1, 1, "nchw", (False, False, False)),    # stride 2
            (2, 4, 300, 4, 1, 3, 2, 1, "nchw", (False, False, False)),    # dilation 2
            (2, 16, 300, 4, 1, 3, 1, 1, "cl", (False, False, False)),     # channels_last: the column kernels
        ])
        for case in cases:
            with self.subTest(**{key: value for key, value in case.items() if key != "expected"}):
                self.check_conv1d_kernels(device, dtype, case, ROW, ROW_GRAD_WEIGHT)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_column_kernel(self, device, dtype):
        """Which channels_last conv1d calls (a transposed (N, L, C) projection output) the column
        kernels take (multiplier 1, channels a whole number of 16-byte vectors and 16 vectors or
        more, a 1 x 2, 3 or 4 filter at stride 1 and dilation 1, 16-byte aligned data; backward-
        input where it is a correlation), and that forward, backward-input and the weight
        gradient match float64."""
        vector = 16 // torch.empty((), dtype=dtype).element_size()
        cases = self.conv1d_cases([  # (batch, channels, width, kernel, stride, padding, dilation, multiplier,
            #                            layout, expect column: forward, backward-input, weight gradient)
            (2, 512, 1024, 4, 1, 3, 1, 1, "cl", (True, True, True)),               # Mamba's causal conv1d
            (2, 16 * vector, 47, 4, 1, 3, 1, 1, "cl", (True, True, True)),         # segments past both ends
            (3, 17 * vector, 20, 2, 1, 1, 1, 1, "cl", (True, True, True)),         # a part-filled vector group
            (2, 16 * vector, 37, 3, 1, 5, 1, 1, "cl", (True, False, True)),        # padding past k - 1
            (2, 16 * vector, 100, 4, 1, 3, 1, 1, "cl-misaligned", (False, True, False)),
            (2, 8 * vector, 100, 4, 1, 3, 1, 1, "cl", (False, False, False)),      # 8 vectors: too few
            (2, 16 * vector + 1, 100, 4, 1, 3, 1, 1, "cl", (False, False, False)),  # not whole vectors
            (2, 16 * vector, 100, 4, 1, 3, 1, 2, "cl", (False, False, False)),     # multiplier 2
            (2, 16 * vector, 100, 4, 2, 3, 1, 1, "cl", (False, False, False)),     # stride 2
            (2, 16 * vector, 100, 5, 1, 2, 1, 1, "cl", (False, False, False)),     # no compiled width
            (2, 16 * vector, 100, 4, 1, 3, 1, 1, "nchw", (False, False, False)),   # NCHW: the row kernels
        ])
        for case in cases:
            with self.subTest(**{key: value for key, value in case.items() if key != "expected"}):
                self.check_conv1d_kernels(device, dtype, case, COLUMN, COLUMN_GRAD_WEIGHT)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_stride2_grad_input_kernels(self, device, dtype):
        """Which backward-inputs the stride-2 kernels take (stride 2, dilation 1, a square 3x3 or
        5x5 filter, the same padding parity along both axes, 32-bit indexing; NCHW with any
        multiplier, channels_last with multiplier 1, channels a whole number of 16-byte vectors and
        16-byte aligned data), over MobileNetV2's and EfficientNet's shapes and odd ones, and that
        grad_input matches float64."""
        atol, rtol = TOLERANCES[dtype]
        vector = 16 // torch.empty((), dtype=dtype).element_size()
        cases = [  # (channels, size, kernel, padding, dilation, multiplier, layout, expected kernel or None)
            (32, (112, 112), 3, 1, 1, 1, "nchw", STRIDE2_NCHW),             # MobileNetV2's 96@112 s2, narrowed
            (24, (56, 56), 5, 2, 1, 1, "nchw", STRIDE2_NCHW),               # EfficientNet's 144@56 k5 s2
            (8, (27, 33), 3, 0, 1, 2, "nchw", STRIDE2_NCHW),                # no padding, odd sizes, multiplier 2
            (6, (14, 15), 5, (3, 1), 1, 1, "nchw", STRIDE2_NCHW),           # odd padding, not whole 4-column rows
            (8 * vector, (28, 28), 3, 1, 1, 1, "cl", STRIDE2_CHANNELS_LAST),
            (5 * vector, (15, 14), 5, 2, 1, 1, "cl", STRIDE2_CHANNELS_LAST),  # a part-filled vector group
            (4 * vector, (20, 20), 3, 2, 1, 1, "cl", STRIDE2_CHANNELS_LAST),  # even padding past a phase
            (4 * vector, (20, 20), 3, 1, 1, 2, "cl", None),                 # multiplier 2: direct
            (4 * vector + 1, (20, 20), 3, 1, 1, 1, "cl", None),             # channels not whole vectors
            (4 * vector, (20, 20), 3, 1, 1, 1, "cl-misaligned", None),
            (8, (30, 30), 7, 3, 1, 1, "nchw", None),                        # no compiled size
            (8, (30, 30), 3, 2, 2, 1, "nchw", None),                        # dilation 2
            (8, (30, 30), 3, (1, 0), 1, 1, "nchw", None),                   # padding parities differ
        ]
        for c, size, kernel, padding, dilation, m, layout, expected in cases:
            with self.subTest(c=c, size=size, kernel=kernel, padding=padding, dilation=dilation, multiplier=m,
                              layout=layout):
                padding = padding if isinstance(padding, tuple) else (padding, padding)
                x = torch.randn(2, c, *size, device=device, dtype=dtype)
                if layout.startswith("cl"):
                    x = x.to(memory_format=torch.channels_last)
                w = torch.randn(c * m, 1, kernel, kernel, device=device, dtype=dtype)
                args = ((2, 2), padding, (dilation, dilation))
                ref, x64, _, _ = reference(x, w, None, *args)
                grad_out = torch.randn(ref.shape, device=device, dtype=dtype)
                if layout.startswith("cl"):
                    grad_out = grad_out.to(memory_format=torch.channels_last)
                if layout == "cl-misaligned":
                    grad_out = channels_last_misaligned(grad_out)
                backward = lambda: torch.ops.aten._conv_depthwise2d_backward(  # noqa: E731
                    grad_out, x, w, (kernel, kernel), *args, [True, False])
                names = op_names(backward)
                for name in (STRIDE2_NCHW, STRIDE2_CHANNELS_LAST):
                    self.assertEqual(launched(names, name), name == expected, name)
                grad_input = backward()[0]
                ref.backward(grad_out.double().cpu())
                self.assertTrue(grad_input.is_contiguous(
                    memory_format=torch.channels_last if layout.startswith("cl") else torch.contiguous_format))
                self.assertEqual(grad_input.double().cpu(), x64.grad,
                                 atol=atol * kernel * kernel * m + atol * x64.grad.abs().max().item(), rtol=rtol)

    @onlyCUDA
    def test_empty_batch(self, device):
        x = torch.randn(0, 8, 10, 10, device=device)
        w = torch.randn(16, 1, 3, 3, device=device, requires_grad=True)
        out = depthwise(x, w, None, (1, 1), (1, 1), (1, 1))
        self.assertEqual(out.shape, (0, 16, 10, 10))
        xg = x.clone().requires_grad_()
        F.conv2d(xg, w, None, 1, 1, 1, groups=8).sum().backward()
        self.assertEqual(w.grad, torch.zeros_like(w))

    @onlyCUDA
    def test_gradcheck_and_gradgradcheck(self, device):
        for case in random_cases(6, seed=1):
            x, w, b = make_inputs(case, torch.float64, device)
            x.requires_grad_(), w.requires_grad_()
            fn = lambda x, w: F.conv2d(x, w, b, case["stride"], case["padding"], case["dilation"], groups=case["c"])  # noqa: E731
            self.assertTrue(gradcheck(fn, (x, w)))
            self.assertTrue(gradgradcheck(fn, (x, w)))

    @onlyCUDA
    @dtypes(torch.float32, torch.bfloat16)
    def test_every_output_element_is_written(self, device, dtype):
        for case in random_cases(10, seed=2):
            x, w, b = make_inputs(case, dtype, device, channels_last=case["bias"])
            ref = depthwise(x, w, b, case["stride"], case["padding"], case["dilation"])
            out = torch.full_like(ref, float("nan"))
            torch.ops.aten._conv_depthwise2d.out(x, w, w.shape[2:], b, case["stride"], case["padding"],
                                                  case["dilation"], out=out)
            self.assertFalse(out.isnan().any())
            # Backward buffers come from the caching allocator: poison what it will hand out.
            torch.empty(64 * 2**20, device=device).fill_(float("nan"))
            xg, wg = x.detach().requires_grad_(), w.detach().clone().requires_grad_()
            with torch.backends.cudnn.flags(enabled=False):
                F.conv2d(xg, wg, b, case["stride"], case["padding"], case["dilation"], groups=case["c"]).sum().backward()
            self.assertFalse(xg.grad.isnan().any())
            self.assertFalse(wg.grad.isnan().any())

    @onlyCUDA
    @dtypes(torch.float32, torch.float16, torch.bfloat16)
    def test_weight_gradient_is_bitwise_deterministic(self, device, dtype):
        x = torch.randn(32, 64, 56, 56, device=device, dtype=dtype)
        for kernel in (3, 7, 13):  # the register-tiled (NCHW and channels_last) and large-filter kernels
            w = torch.randn(64, 1, kernel, kernel, device=device, dtype=dtype)
            grads = []
            for channels_last in (False, True, False, True):
                xi = x.to(memory_format=torch.channels_last) if channels_last else x
                wg = w.clone().requires_grad_()
                with torch.backends.cudnn.flags(enabled=False):
                    F.conv2d(xi, wg, None, 1, kernel // 2, 1, groups=64).backward(
                        torch.ones(32, 64, 56, 56, device=device, dtype=dtype))
                grads.append(wg.grad)
            self.assertTrue(torch.equal(grads[0], grads[2]), f"{kernel}x{kernel} NCHW")
            self.assertTrue(torch.equal(grads[1], grads[3]), f"{kernel}x{kernel} channels_last")

    @onlyCUDA
    @largeTensorTest("24GB", device="cuda")
    def test_64bit_indexing(self, device):
        # 2 * 32769 * 32768 > 2^31 elements: only the 64-bit path can address the tail.
        x = torch.randn(1, 2, 32769, 32768, device=device, dtype=torch.bfloat16)
        w = torch.randn(2, 1, 3, 3, device=device, dtype=torch.bfloat16)
        out = depthwise(x, w, None, (1, 1), (1, 1), (1, 1))
        window = x[:, :, -6:, -40:]
        ref, *_ = reference(window, w, None, (1, 1), (1, 1), (1, 1))
        # Rows and columns away from the window's own border match the full-tensor result.
        self.assertEqual(out[:, :, -5:-1, -39:-1].double().cpu(), ref[:, :, 1:5, 1:39], atol=0.05, rtol=0.02)

    @onlyCUDA
    def test_nan_and_inf_propagate_as_in_stock(self, device):
        x = torch.randn(2, 4, 20, 20, device=device)
        x[0, 1, 5, 5] = float("nan")
        x[1, 2, 10, 3] = float("inf")
        w = torch.randn(8, 1, 3, 3, device=device)
        ours = depthwise(x, w, None, (1, 1), (1, 1), (1, 1))
        with stock_kernels():
            stock = depthwise(x, w, None, (1, 1), (1, 1), (1, 1))
        self.assertTrue(torch.equal(ours.isnan(), stock.isnan()))
        self.assertTrue(torch.equal(ours.isinf(), stock.isinf()))

    @onlyCUDA
    @dtypes(torch.float32, torch.bfloat16)
    def test_differential_against_stock(self, device, dtype):
        atol, rtol = TOLERANCES[dtype]
        for case in random_cases(20, seed=3):
            x, w, b = make_inputs(case, dtype, device)
            args = (case["stride"], case["padding"], case["dilation"])
            results = []
            for use_stock in (False, True):
                xg, wg = x.detach().requires_grad_(), w.detach().clone().requires_grad_()
                ctx = stock_kernels() if use_stock else nullcontext()
                with ctx:
                    out = F.conv2d(xg, wg, b, *args, groups=case["c"])
                    out.backward(torch.ones_like(out))
                results.append((out.detach(), xg.grad, wg.grad))
            for ours, stock in zip(*results):
                self.assertEqual(ours, stock, atol=atol * 10 * max(1.0, stock.abs().max().item()), rtol=rtol * 10)

    @onlyCUDA
    @dtypes(torch.float32, torch.bfloat16)
    def test_each_kernel_path_switched_off_falls_back(self, device, dtype):
        """dwconv_overlay.disable_kernels: with one specialised path off, the passes it takes run
        other kernels and still match float64 (forward, backward-input and the weight gradient);
        switched back on, the path takes them again."""
        atol, rtol = TOLERANCES[dtype]
        vector = 16 // torch.empty((), dtype=dtype).element_size()
        self.assertEqual(sorted(case[0] for case in KERNEL_PATH_CASES), sorted(dwconv_overlay.kernel_paths()))
        for path, layout, n, c, size, kernel, stride, padding, takes in KERNEL_PATH_CASES:
            with self.subTest(path=path):
                c = c * vector if layout == "cl" else c
                memory_format = torch.channels_last if layout == "cl" else torch.contiguous_format
                x = torch.randn(n, c, *size, device=device, dtype=dtype).to(memory_format=memory_format)
                w = torch.randn(c, 1, *kernel, device=device, dtype=dtype)
                b = torch.randn(c, device=device, dtype=dtype)
                args = ((stride, stride), padding, (1, 1))
                ref, x64, w64, _ = reference(x, w, b, *args)
                grad_out = torch.randn(ref.shape, device=device, dtype=dtype).to(memory_format=memory_format)
                ref.backward(grad_out.double().cpu())
                passes = {
                    "forward": lambda: depthwise(x, w, b, *args),
                    "backward-input": lambda: torch.ops.aten._conv_depthwise2d_backward(
                        grad_out, x, w, kernel, *args, [True, False])[0],
                    "grad-weight": lambda: torch.ops.aten._conv_depthwise2d_backward(
                        grad_out, x, w, kernel, *args, [False, True])[1],
                }
                for name, kernel_name in takes.items():
                    self.assertTrue(launched(op_names(passes[name]), kernel_name), f"{name} with every path on")
                dwconv_overlay.disable_kernels([path])
                try:
                    self.assertEqual(dwconv_overlay.disabled_kernels(), [path])
                    for name, kernel_name in takes.items():
                        self.assertFalse(launched(op_names(passes[name]), kernel_name), f"{name} with {path} off")
                    out, grad_input, grad_weight = (passes[name]() for name in passes)
                finally:
                    dwconv_overlay.disable_kernels([])
                self.assertEqual(out.double().cpu(), ref, atol=atol * ref.abs().max().item() + atol, rtol=rtol)
                self.assertEqual(grad_input.double().cpu(), x64.grad,
                                 atol=atol * x64.grad.abs().max().item() + atol, rtol=rtol)
                reduction = n * ref.shape[2] * ref.shape[3]
                self.assertEqual(grad_weight.double().cpu(), w64.grad, atol=atol * reduction ** 0.5 * 4, rtol=rtol * 4)
                for name, kernel_name in takes.items():
                    self.assertTrue(launched(op_names(passes[name]), kernel_name), f"{name} with {path} on again")

    @onlyCUDA
    def test_ops_pass_opcheck(self, device):
        """torch.library.opcheck on _conv_depthwise2d and the backward ops the overrides add: their
        schemas, autograd registration, Meta kernels against the CUDA kernels (shapes, strides,
        dtypes under fake tensors) and AOT dispatch with dynamic shapes; 2D in both layouts, and 3D."""
        forward = torch.ops.aten._conv_depthwise2d.default
        op2d, op3d = torch.ops.aten._conv_depthwise2d_backward.default, torch.ops.aten._conv_depthwise3d_backward.default
        for memory_format in (torch.contiguous_format, torch.channels_last):
            with self.subTest(memory_format=memory_format):
                x = torch.randn(2, 6, 9, 11, device=device, dtype=torch.float64).to(memory_format=memory_format)
                w = torch.randn(12, 1, 3, 3, device=device, dtype=torch.float64)
                go = torch.randn(2, 12, 5, 6, device=device, dtype=torch.float64).to(memory_format=memory_format)
                for mask in ([True, True], [False, True]):
                    torch.library.opcheck(op2d, (go, x, w, [3, 3], [2, 2], [1, 1], [1, 1], mask))
                for bias in (None, torch.randn(12, device=device, dtype=torch.float64)):
                    torch.library.opcheck(forward, (x, w, [3, 3], bias, [2, 2], [1, 1], [1, 1]))
        x3 = torch.randn(2, 4, 5, 6, 7, device=device, dtype=torch.float64)
        w3 = torch.randn(4, 1, 3, 3, 3, device=device, dtype=torch.float64)
        go3 = torch.randn(2, 4, 5, 6, 7, device=device, dtype=torch.float64)
        torch.library.opcheck(op3d, (go3, x3, w3, [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [True, True]))

    @onlyCUDA
    def test_overlay_switches_kernels(self, device):
        def active(op):
            return [line for line in torch._C._dispatch_dump(op).splitlines() if line.startswith("CUDA:")][0]
        self.assertIn("RegisterOverlay.cpp", active("aten::_conv_depthwise2d"))
        with stock_kernels():
            self.assertNotIn("RegisterOverlay.cpp", active("aten::_conv_depthwise2d"))
        self.assertTrue(dwconv_overlay.enabled())


# OpInfo tests: the conv OpInfos' depthwise samples, ours against a float64 reference.
conv_opinfos = [op for op in op_db if op.name in ("nn.functional.conv1d", "nn.functional.conv2d")]


class TestDepthwise2dOpInfo(TestCase):
    @onlyCUDA
    @ops(conv_opinfos, allowed_dtypes=(torch.float32, torch.float64, torch.bfloat16))
    def test_depthwise_samples_match_float64(self, device, dtype, op):
        seen = 0
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            groups = sample.kwargs.get("groups", 1)
            x, w = sample.input, sample.args[0]
            if x.dim() < 3 or groups <= 1 or groups != x.shape[-(w.dim() - 1)]:
                continue  # not depthwise
            seen += 1
            out = op(sample.input, *sample.args, **sample.kwargs)
            ref = op(sample.input.double().cpu(), *[a.double().cpu() if torch.is_tensor(a) else a for a in sample.args],
                     **sample.kwargs)
            atol, rtol = TOLERANCES[dtype]
            self.assertEqual(out.double().cpu(), ref, atol=atol * 10, rtol=rtol * 10)
        if op.name == "nn.functional.conv2d":
            self.assertGreater(seen, 0, "upstream's conv2d OpInfo has depthwise samples")


instantiate_device_type_tests(TestDepthwise2d, globals(), only_for="cuda")
instantiate_device_type_tests(TestDepthwise2dOpInfo, globals(), only_for="cuda")

if __name__ == "__main__":
    run_tests()
