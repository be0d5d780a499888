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
from overlay_loader import dwconv_overlay, kernel_paths_off, stock_kernels  # noqa: E402
from profiling import op_names  # noqa: E402
import kernel_cases  # noqa: E402
import weight_gradient_references  # noqa: E402

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


def depthwise_backward(grad_out, x, w, stride, padding, dilation, mask=(True, True)):
    """Our backward kernels, called as the op, in x's layout: (grad_input, grad_weight) as `mask`
    asks. Through aten::convolution, cuDNN would take channels_last, and with cuDNN off upstream
    copies it to NCHW before our kernels see it."""
    return torch.ops.aten._conv_depthwise2d_backward(grad_out, x, w, w.shape[2:], stride, padding, dilation, list(mask))


def depthwise_backward_with_bias(grad_out, x, w, stride, padding, dilation, mask=(True, True, True)):
    """dwconv::conv_depthwise2d_backward, the backward the routing calls: (grad_input, grad_weight,
    grad_bias) as `mask` asks, grad_bias summed by the weight-gradient kernel when both are asked."""
    return torch.ops.dwconv.conv_depthwise2d_backward(grad_out, x, w, w.shape[2:], stride, padding, dilation,
                                                      list(mask))


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


def placed(x, memory_format, offset):
    """x's values, contiguous in memory_format, starting `offset` elements past a 16-byte boundary."""
    if offset == 0:
        return x.contiguous(memory_format=memory_format)
    storage = torch.empty(x.numel() + offset, device=x.device, dtype=x.dtype)[offset:]
    n, c, h, w = x.shape
    if memory_format == torch.channels_last:
        shifted = storage.view(n, h, w, c).permute(0, 3, 1, 2)
    else:
        shifted = storage.view(n, c, h, w)
    return shifted.copy_(x)


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
                # The input's suggested layout (channels_last strides, even for one channel) is the output's.
                expected_format = torch.channels_last if channels_last else torch.contiguous_format
                self.assertTrue(out.is_contiguous(memory_format=expected_format))

                grad_out = torch.randn_like(ref)
                ref.backward(grad_out)
                grad_input, grad_weight = depthwise_backward(
                    grad_out.to(device=device, dtype=dtype).contiguous(memory_format=expected_format), x, w, *args)
                self.assertTrue(grad_input.is_contiguous(memory_format=expected_format))
                scale = case["kernel"][0] * case["kernel"][1] * case["m"]
                self.assertEqual(grad_input.double().cpu(), x64.grad, atol=atol * scale, rtol=rtol)
                reduction = case["n"] * ref.shape[2] * ref.shape[3]
                self.assertEqual(grad_weight.double().cpu(), w64.grad, atol=atol * reduction ** 0.5 * 4, rtol=rtol * 4)

    def check_kernel_choices(self, cases_of, device, dtype):
        """Each call of the table cases_of(element size) (tests/gpu/kernel_cases.py, whose
        expectations tests/test_kernel_choice.py checks against the host code's choice on a CPU),
        with the kernel paths its expectation names switched off: whether each pass launches each
        kernel as the table says, as the profiler sees it (backward-input and the weight gradient
        each asked for alone, and both together: kernel_cases.BACKWARD), and that the forward pass,
        backward-input, the weight gradient and the bias gradient summed with it match float64, the
        bias summed by the weight-gradient kernel (no reduction of its own), asked for alone and
        together."""
        atol, rtol = TOLERANCES[dtype]
        for expectation in cases_of(torch.empty((), dtype=dtype).element_size()):
            call = expectation.call
            with self.subTest(call.label, call=call), kernel_paths_off(expectation.disabled):
                memory_format = torch.channels_last if call.layout == "cl" else torch.contiguous_format
                x = placed(torch.randn(call.n, call.c, *call.size, device=device, dtype=dtype), memory_format,
                           call.input_offset)
                c_out = call.c * call.multiplier
                w = torch.randn(c_out, 1, *call.kernel, device=device, dtype=dtype)
                b = torch.randn(c_out, device=device, dtype=dtype)
                args = (call.stride, call.padding, call.dilation)
                ref, x64, w64, b64 = reference(x, w, b, *args)
                grad_out = placed(torch.randn(ref.shape, device=device, dtype=dtype), memory_format,
                                  call.grad_output_offset)
                forward = lambda: depthwise(x, w, b, *args)  # noqa: E731

                def backward(mask):
                    return lambda: depthwise_backward_with_bias(grad_out, x, w, *args, mask=mask)
                passes = {"forward": forward, "backward-input": backward((True, False, False)),
                          "grad-weight": backward((False, True, True)),
                          kernel_cases.BACKWARD: backward((True, True, True))}
                launched_by = {pass_: op_names(run) for pass_, run in passes.items()}
                for pass_, kernels in expectation.launches.items():
                    for kernel, expected in kernels.items():
                        self.assertEqual(launched(launched_by[pass_], kernel), expected,
                                         f"{pass_}: {kernel} {'not ' if expected else ''}launched")
                for pass_ in ("grad-weight", kernel_cases.BACKWARD):
                    self.assertFalse(any("reduce_kernel" in n for n in launched_by[pass_]),
                                     f"{pass_}: the bias gradient took a reduction of its own")

                out = forward()
                self.assertTrue(out.is_contiguous(memory_format=memory_format))
                self.assertEqual(out.double().cpu(), ref, atol=atol * ref.abs().max().item() + atol, rtol=rtol)
                ref.backward(grad_out.double().cpu())
                taps = call.kernel[0] * call.kernel[1] * call.multiplier
                reduction = call.n * ref.shape[2] * ref.shape[3]
                alone = (passes["backward-input"]()[0], *passes["grad-weight"]()[1:])
                for how, (grad_input, grad_weight, grad_bias) in (("alone", alone),
                                                                  ("together", passes[kernel_cases.BACKWARD]())):
                    with self.subTest(gradients=how):
                        self.assertTrue(grad_input.is_contiguous(memory_format=memory_format))
                        self.assertEqual(grad_input.double().cpu(), x64.grad,
                                         atol=atol * (x64.grad.abs().max().item() + taps), rtol=rtol)
                        self.assertEqual(grad_weight.double().cpu(), w64.grad, atol=atol * reduction ** 0.5 * 4,
                                         rtol=rtol * 4)
                        self.assertEqual(grad_bias.double().cpu(), b64.grad, atol=atol * reduction ** 0.5 * 4,
                                         rtol=rtol * 4)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.bfloat16)
    def test_bias_gradient_for_every_mask(self, device, dtype):
        """grad_bias from the weight-gradient kernel (with grad_weight) or a sum (without), None
        where it is not asked, and the other outputs as the mask says, on a sweep of shapes."""
        atol, rtol = TOLERANCES[dtype]
        for case in random_cases(12, seed=3):
            x, w, _ = make_inputs(case, dtype, device, channels_last=case["bias"])
            args = (case["stride"], case["padding"], case["dilation"])
            grad_out = torch.randn_like(depthwise(x, w, None, *args))
            expected = grad_out.double().sum((0, 2, 3)).cpu()
            reduction = grad_out.numel() // grad_out.shape[1]
            for mask in itertools.product((False, True), repeat=3):
                with self.subTest(case=case, mask=mask):
                    grads = depthwise_backward_with_bias(grad_out, x, w, *args, mask=mask)
                    self.assertEqual([g is not None for g in grads], list(mask))
                    if mask[2]:
                        self.assertEqual(grads[2].dtype, dtype)
                        self.assertEqual(grads[2].double().cpu(), expected, atol=atol * reduction ** 0.5 * 4,
                                         rtol=rtol * 4)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_register_tiled_kernel(self, device, dtype):
        self.check_kernel_choices(kernel_cases.register_tiled_cases, device, dtype)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_channels_last_tiled_kernel(self, device, dtype):
        self.check_kernel_choices(kernel_cases.channels_last_tiled_cases, device, dtype)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_channels_last_grad_weight_kernels(self, device, dtype):
        self.check_kernel_choices(kernel_cases.channels_last_grad_weight_cases, device, dtype)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_large_filter_kernel(self, device, dtype):
        self.check_kernel_choices(kernel_cases.large_filter_cases, device, dtype)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_row_kernel(self, device, dtype):
        self.check_kernel_choices(kernel_cases.row_cases, device, dtype)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_column_kernel(self, device, dtype):
        self.check_kernel_choices(kernel_cases.column_cases, device, dtype)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_stride2_grad_input_kernels(self, device, dtype):
        self.check_kernel_choices(kernel_cases.stride2_grad_input_cases, device, dtype)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_pixel_kernel(self, device, dtype):
        self.check_kernel_choices(kernel_cases.pixel_cases, device, dtype)

    @onlyCUDA
    @dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
    def test_plane_stream_kernel(self, device, dtype):
        self.check_kernel_choices(kernel_cases.plane_stream_cases, device, dtype)

    @onlyCUDA
    def test_empty_batch(self, device):
        x = torch.randn(0, 8, 10, 10, device=device)
        w = torch.randn(16, 1, 3, 3, device=device, requires_grad=True)
        out = depthwise(x, w, None, (1, 1), (1, 1), (1, 1))
        self.assertEqual(out.shape, (0, 16, 10, 10))
        xg = x.clone().requires_grad_()
        F.conv2d(xg, w, None, 1, 1, 1, groups=8).sum().backward()
        self.assertEqual(w.grad, torch.zeros_like(w))
        for mask in ((False, True, True), (False, False, True)):
            grad_bias = depthwise_backward_with_bias(torch.randn_like(out), x, w.detach(), (1, 1), (1, 1), (1, 1),
                                                     mask=mask)[2]
            self.assertEqual(grad_bias, torch.zeros(16, device=device))

    @onlyCUDA
    def test_gradcheck_and_gradgradcheck(self, device):
        for case in random_cases(6, seed=1):
            x, w, b = make_inputs(case, torch.float64, device)
            x.requires_grad_(), w.requires_grad_()
            fn = lambda x, w: F.conv2d(x, w, b, case["stride"], case["padding"], case["dilation"], groups=case["c"])  # noqa: E731
            # The double backward's grouped convolutions are upstream's and may run cuDNN, whose
            # weight-gradient algorithms are not deterministic unless asked; ours always are.
            with torch.backends.cudnn.flags(enabled=True, deterministic=True, benchmark=False):
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
            grad_input, grad_weight = depthwise_backward(torch.ones_like(ref), x, w, case["stride"], case["padding"],
                                                         case["dilation"])
            self.assertFalse(grad_input.isnan().any())
            self.assertFalse(grad_weight.isnan().any())

    @onlyCUDA
    @dtypes(torch.float32, torch.float16, torch.bfloat16)
    def test_weight_gradient_is_bitwise_deterministic(self, device, dtype):
        x = torch.randn(32, 64, 56, 56, device=device, dtype=dtype)
        for kernel in (3, 7, 13):  # the register-tiled (NCHW and channels_last) and large-filter kernels
            w = torch.randn(64, 1, kernel, kernel, device=device, dtype=dtype)
            grads = []
            for memory_format in (torch.contiguous_format, torch.channels_last) * 2:
                grad_out = torch.ones(32, 64, 56, 56, device=device, dtype=dtype).contiguous(memory_format=memory_format)
                grads.append(depthwise_backward(grad_out, x.contiguous(memory_format=memory_format), w, (1, 1),
                                                (kernel // 2, kernel // 2), (1, 1), mask=(False, True))[1])
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
    @largeTensorTest("20GB", device="cuda")
    def test_a_grid_stride_walk_near_2_31_elements_stays_inside(self, device):
        """2046 x 1024 x 1025 outputs are 2,047 short of 2^31, so 32-bit indices address them, but the
        direct kernel's grid-stride counter (channels_last at multiplier 2 is the direct kernel's)
        would pass INT32_MAX on its last step: it counts in 64 bits there. Nothing past the output
        is written, and its last channels are what a small call gives."""
        x = torch.empty(1, 1023, 1024, 1025, device=device, memory_format=torch.channels_last).normal_()
        w = torch.randn(2046, 1, 3, 3, device=device)
        numel, guard = 2046 * 1024 * 1025, 2 ** 20
        storage = torch.full((numel + guard,), float("nan"), device=device)
        out = storage[:numel].view(1, 1024, 1025, 2046).permute(0, 3, 1, 2)  # channels_last, in storage
        args = ([3, 3], None, [1, 1], [1, 1], [1, 1])
        names = op_names(lambda: torch.ops.aten._conv_depthwise2d.out(x, w, *args, out=out))
        self.assertTrue(launched(names, kernel_cases.DIRECT), names)
        self.assertTrue(storage[numel:].isnan().all(), "written past the output")
        small = torch.ops.aten._conv_depthwise2d(x[:, -1:].contiguous(memory_format=torch.channels_last), w[-2:],
                                                 *args)
        self.assertEqual(out[:, -2:], small, atol=1e-5, rtol=1e-5)

    @onlyCUDA
    @largeTensorTest("32GB", device="cuda")  # weight, grad_weight and its float partial sums: 8.6 GB each
    def test_a_weight_of_2_31_elements_is_indexed_in_64_bits(self, device):
        """240M channels of 3x3 on 1x1 planes: input and output fit 32-bit indices, the weight does
        not; a channel near its end is what a small call gives, in every pass."""
        x = torch.randn(1, 240_000_000, 1, 1, device=device)
        w = torch.randn(240_000_000, 1, 3, 3, device=device)
        out = depthwise(x, w, None, (1, 1), (1, 1), (1, 1))
        grad_input, grad_weight = depthwise_backward(torch.ones_like(out), x, w, (1, 1), (1, 1), (1, 1))
        tail = slice(-3, None)
        small = depthwise(x[:, tail].contiguous(), w[tail], None, (1, 1), (1, 1), (1, 1))
        small_gi, small_gw = depthwise_backward(torch.ones_like(small), x[:, tail].contiguous(), w[tail], (1, 1),
                                                (1, 1), (1, 1))
        self.assertEqual(out[:, tail], small)
        self.assertEqual(grad_input[:, tail], small_gi)
        self.assertEqual(grad_weight[tail], small_gw)

    @onlyCUDA
    def test_an_output_overlapping_an_input_is_refused(self, device):
        x = torch.randn(2, 4, 10, 10, device=device)
        w = torch.randn(4, 1, 3, 3, device=device)
        with self.assertRaisesRegex(RuntimeError, "unsupported operation"):
            torch.ops.aten._conv_depthwise2d.out(x, w, [3, 3], None, [1, 1], [1, 1], [1, 1], out=x)

    @onlyCUDA
    def test_the_backward_with_bias_refuses_a_grad_output_on_another_device(self, device):
        x = torch.randn(2, 4, 10, 10, device=device)
        w = torch.randn(4, 1, 3, 3, device=device)
        with self.assertRaisesRegex(RuntimeError, "grad_output must be on the input's device"):
            depthwise_backward_with_bias(torch.randn(2, 4, 10, 10), x, w, (1, 1), (1, 1), (1, 1))

    @onlyCUDA
    def test_nan_and_inf_propagate_as_in_stock(self, device):
        """In the forward, and in the weight gradient too where an inf lies in the input's last
        row or column, which tiles past the plane's edge meet (emulated: tests/emulator)."""
        x = torch.randn(2, 4, 20, 19, device=device)
        x[0, 1, 5, 5] = float("nan")
        x[1, 2, 10, 3] = float("inf")
        x[:, 3, -1, -1] = float("inf")
        x[0, 0, 7, -1] = -float("inf")
        for memory_format in (torch.contiguous_format, torch.channels_last):
            xm = x.contiguous(memory_format=memory_format)
            for out_channels in (4, 8):  # multiplier 1 (this small grid: the pixel kernel) and 2 (the tiles)
                w = torch.randn(out_channels, 1, 3, 3, device=device)
                grad_out = torch.randn(2, out_channels, 20, 19, device=device).contiguous(memory_format=memory_format)
                ours = (depthwise(xm, w, None, (1, 1), (1, 1), (1, 1)),
                        depthwise_backward(grad_out, xm, w, (1, 1), (1, 1), (1, 1), mask=(False, True))[1])
                # stock's weight gradient through upstream's own entry point (the overlay's backward op
                # has no kernel while it is disabled), with cuDNN off so that upstream's native kernel
                # runs, as for these calls stock does: cuDNN's algorithms would spread an inf over a tile
                with stock_kernels(), torch.backends.cudnn.flags(enabled=False):
                    stock = (depthwise(xm, w, None, (1, 1), (1, 1), (1, 1)),
                             torch.ops.aten.convolution_backward(grad_out, xm, w, None, [1, 1], [1, 1], [1, 1], False,
                                                                 [0, 0], 4, [False, True, False])[1])
                for what, got, want in zip(("output", "grad_weight"), ours, stock):
                    label = f"{what}, {out_channels} output channels, {memory_format}"
                    self.assertTrue(torch.equal(got.isnan(), want.isnan()), label)
                    self.assertTrue(torch.equal(got.isinf(), want.isinf()), label)

    @onlyCUDA
    @dtypes(torch.float32, torch.bfloat16)
    def test_an_inf_in_grad_output_gives_either_weight_gradient_torch_gives(self, device, dtype):
        """An inf or NaN in grad_output, where the output's window reaches into the padding, over
        one call of each kernel path (so every weight-gradient kernel, alone and with grad_input):
        grad_input has the NaNs and infinities of float64, and each element of the weight gradient
        is what torch's float64 CPU convolution gives (the padding's zeros multiplied in: 0 x inf is
        NaN) or what upstream's CUDA kernel gives (those terms left out), as the emulator checks."""
        atol, rtol = TOLERANCES[dtype]
        for path, call, takes in kernel_cases.kernel_path_cases(torch.empty((), dtype=dtype).element_size()):
            with self.subTest(path=path):
                memory_format = torch.channels_last if call.layout == "cl" else torch.contiguous_format
                x = torch.randn(call.n, call.c, *call.size, device=device, dtype=dtype).to(memory_format=memory_format)
                w = torch.randn(call.c, 1, *call.kernel, device=device, dtype=dtype)
                args = (call.stride, call.padding, call.dilation)
                grad_out = weight_gradient_references.with_inf_and_nan(
                    torch.randn(depthwise(x, w, None, *args).shape, device=device, dtype=dtype))
                grad_out = grad_out.contiguous(memory_format=memory_format)
                passes = {"grad-weight": lambda: depthwise_backward(grad_out, x, w, *args, mask=(False, True)),
                          kernel_cases.BACKWARD: lambda: depthwise_backward(grad_out, x, w, *args)}
                for name, kernel_name in takes.items():
                    if name in passes:
                        self.assertTrue(launched(op_names(passes[name]), kernel_name), name)
                (_, alone), (grad_input, together) = passes["grad-weight"](), passes[kernel_cases.BACKWARD]()
                references = weight_gradient_references.weight_gradients(grad_out, x, call.kernel, *args)
                self.assertFalse(torch.equal(references[0].isnan(), references[1].isnan()), "the padding met no inf")
                reduction = call.n * grad_out.shape[2] * grad_out.shape[3]
                for label, got in (("the weight gradient alone", alone), ("with grad_input", together)):
                    self.assertTrue(weight_gradient_references.matches_either(
                        got, references, atol * reduction ** 0.5 * 4, rtol * 4), label)
                grad_input64 = torch.nn.grad.conv2d_input(x.shape, w.double().cpu(), grad_out.double().cpu(), *args,
                                                          groups=call.c)
                got = grad_input.double().cpu()
                self.assertTrue(torch.equal(got.isnan(), grad_input64.isnan()), "grad_input's NaNs")
                self.assertTrue(torch.equal(got[got.isinf()], grad_input64[grad_input64.isinf()]), "its infinities")
                self.assertTrue(bool(weight_gradient_references.matches(
                    got, grad_input64, atol * grad_input64[grad_input64.isfinite()].abs().max().item() + atol, rtol).all()))

    @onlyCUDA
    @dtypes(torch.float16, torch.bfloat16)
    def test_tensor_core_kernel_keeps_inf_and_nan_in_their_channels(self, device, dtype):
        """The tensor-core kernel's products multiply every channel of a 16-byte vector by the
        diagonal's zeros, and 0 x inf is NaN: an inf or NaN must still reach only its own channel's
        outputs (the kernel sums a NaN again from its own channel), forward and backward-input, as
        in float64."""
        call = kernel_cases.TENSOR_CORE_CALL
        x = torch.randn(call.n, call.c, *call.size, device=device, dtype=dtype)
        x[0, 3, 10, 10] = float("inf")
        x[1, 9, 20, 30] = float("nan")
        x[2, 17, 0, 55] = -float("inf")  # the plane's corner, at the end of a strip
        x[3, 40, 33, 7] = float("inf")
        x = x.contiguous(memory_format=torch.channels_last)
        w = torch.randn(call.c, 1, *call.kernel, device=device, dtype=dtype)
        args = (call.stride, call.padding, call.dilation)
        names = op_names(lambda: (depthwise(x, w, None, *args), depthwise_backward(x, x, w, *args, mask=(True, False))))
        self.assertTrue(launched(names, kernel_cases.CHANNELS_LAST_MMA), names)
        out64, x64, w64, _ = reference(x, w, None, *args)
        grad_input64 = torch.nn.grad.conv2d_input(x64.shape, w64, x64.detach(), *args, groups=call.c)
        for what, got, want in (("output", depthwise(x, w, None, *args), out64),
                                ("grad_input", depthwise_backward(x, x, w, *args, mask=(True, False))[0],
                                 grad_input64)):
            got = got.double().cpu()
            self.assertTrue(torch.equal(got.isnan(), want.isnan()), what)
            self.assertTrue(torch.equal(got.isinf(), want.isinf()), what)
            self.assertTrue(torch.equal(got[got.isinf()], want[want.isinf()]), what)  # the sign of each inf
            finite = want.isfinite()
            self.assertLess(float((got[finite] - want[finite]).abs().max()), 0.1 * float(want[finite].abs().max()), what)

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
        other kernels and still match float64 (forward, backward-input and the weight gradient, and
        both gradients together);
        switched back on, the path takes them again."""
        atol, rtol = TOLERANCES[dtype]
        cases = kernel_cases.kernel_path_cases(torch.empty((), dtype=dtype).element_size())
        self.assertEqual(sorted(path for path, _, _ in cases), sorted(dwconv_overlay.kernel_paths()))
        for path, call, takes in cases:
            with self.subTest(path=path):
                n, kernel = call.n, call.kernel
                memory_format = torch.channels_last if call.layout == "cl" else torch.contiguous_format
                x = torch.randn(n, call.c, *call.size, device=device, dtype=dtype).to(memory_format=memory_format)
                w = torch.randn(call.c, 1, *kernel, device=device, dtype=dtype)
                b = torch.randn(call.c, device=device, dtype=dtype)
                args = (call.stride, call.padding, call.dilation)
                ref, x64, w64, _ = reference(x, w, b, *args)
                grad_out = torch.randn(ref.shape, device=device, dtype=dtype).to(memory_format=memory_format)
                ref.backward(grad_out.double().cpu())
                passes = {
                    "forward": lambda: depthwise(x, w, b, *args),
                    "backward-input": lambda: torch.ops.aten._conv_depthwise2d_backward(
                        grad_out, x, w, kernel, *args, [True, False])[0],
                    "grad-weight": lambda: torch.ops.aten._conv_depthwise2d_backward(
                        grad_out, x, w, kernel, *args, [False, True])[1],
                    kernel_cases.BACKWARD: lambda: torch.ops.aten._conv_depthwise2d_backward(
                        grad_out, x, w, kernel, *args, [True, True]),
                }
                for name, kernel_name in takes.items():
                    self.assertTrue(launched(op_names(passes[name]), kernel_name), f"{name} with every path on")
                dwconv_overlay.disable_kernels([path])
                try:
                    self.assertEqual(dwconv_overlay.disabled_kernels(), [path])
                    for name, kernel_name in takes.items():
                        self.assertFalse(launched(op_names(passes[name]), kernel_name), f"{name} with {path} off")
                    out, grad_input, grad_weight, both = (passes[name]() for name in passes)
                finally:
                    dwconv_overlay.disable_kernels([])
                self.assertEqual(out.double().cpu(), ref, atol=atol * ref.abs().max().item() + atol, rtol=rtol)
                reduction = n * ref.shape[2] * ref.shape[3]
                for gi, gw in ((grad_input, grad_weight), both):
                    self.assertEqual(gi.double().cpu(), x64.grad, atol=atol * x64.grad.abs().max().item() + atol,
                                     rtol=rtol)
                    self.assertEqual(gw.double().cpu(), w64.grad, atol=atol * reduction ** 0.5 * 4, rtol=rtol * 4)
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
