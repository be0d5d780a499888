"""A small subset of the depthwise kernels for compute-sanitizer (memcheck, racecheck): the
calls of kernel_cases.SANITIZER_CASES (with the pixel path off: they are small, and each is there
for a tile) and PIXEL_SANITIZER_CASES (every path on) in float32 and bfloat16, NCHW and
channels_last, forward, backward-input and the weight gradient (with and without the bias
gradient), each on its own and both gradients together (one kernel for both where one takes them),
through the ops themselves (aten::convolution would send channels_last to cuDNN, or with
cuDNN off make it NCHW). Together they run every kernel of DepthwiseConv2d.cu, which
tests/test_kernel_choice.py checks on a CPU."""

import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overlay_loader import kernel_paths_off  # noqa: E402
from kernel_cases import PIXEL_OFF, PIXEL_SANITIZER_CASES, SANITIZER_CASES  # noqa: E402

for dtype, (cases, disabled) in itertools.product((torch.float32, torch.bfloat16),
                                                  ((SANITIZER_CASES, PIXEL_OFF), (PIXEL_SANITIZER_CASES, ()))):
    with kernel_paths_off(disabled):
        for n, c, m, h, w, kernel, stride, padding, dilation in cases:
            for memory_format in (torch.contiguous_format, torch.channels_last):
                x = torch.randn(n, c, h, w, device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
                weight = torch.randn(c * m, 1, *kernel, device="cuda", dtype=dtype)
                out = torch.ops.aten._conv_depthwise2d(x, weight, kernel, None, stride, padding, dilation)
                grad_out = torch.randn_like(out).contiguous(memory_format=memory_format)
                for mask in ([True, False], [True, True]):  # backward-input's kernel, then both gradients
                    torch.ops.aten._conv_depthwise2d_backward(grad_out, x, weight, kernel, stride, padding, dilation,
                                                              mask)
                # the weight gradient again, summing grad_output for the bias on the way
                torch.ops.dwconv.conv_depthwise2d_backward(grad_out, x, weight, kernel, stride, padding, dilation,
                                                           [False, True, True])
torch.cuda.synchronize()
print("sanitizer subset done")
