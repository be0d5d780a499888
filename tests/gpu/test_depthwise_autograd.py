"""GPU tests of the depthwise ops' derivatives and backward operators, through the overlay.

The float64 checks of tests/depthwise_autograd.py (gradcheck, gradgradcheck, forward AD through
torch.autograd.forward_ad and torch.func.jvp, forward-over-reverse, the backward operators
against a reference) on direct calls of aten::_conv_depthwise2d and aten::conv_depthwise3d,
on the real CUDA kernels. Each also runs on stock torch (dwconv_overlay.disable()) as an
expected failure: upstream's formulas fail them, so the fix is proven, not assumed.

Run with `make test-gpu` (tests/cpu: tests/test_overlay_autograd.py runs the same checks
on the CPU with stand-in kernels).
"""

import sys
import unittest
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch 2.11.0+cu130, which is not installed here")
if not torch.cuda.is_available():
    pytest.skip("the GPU tests need a CUDA device; there is none here", allow_module_level=True)

from torch.testing._internal.common_utils import (  # noqa: E402
    TestCase, instantiate_parametrized_tests, parametrize, run_tests,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overlay_loader import stock_kernels  # noqa: E402
from depthwise_autograd import CASES, CHECKS, call, make_inputs  # noqa: E402

CASE_BY_NAME = {case.name: case for case in CASES}
COPY_OPS = {"aten::copy_", "aten::clone", "aten::contiguous", "aten::_to_copy"}


class TestDepthwiseAutograd(TestCase):
    @parametrize("case", list(CASE_BY_NAME))
    @parametrize("check", list(CHECKS))
    def test_overlay(self, case, check):
        CHECKS[check](CASE_BY_NAME[case], "cuda")

    @parametrize("case", list(CASE_BY_NAME))
    @parametrize("check", list(CHECKS))
    @unittest.expectedFailure
    def test_stock(self, case, check):
        with stock_kernels():
            CHECKS[check](CASE_BY_NAME[case], "cuda")

    def _backward_ops(self, memory_format):
        case = CASE_BY_NAME["2d_k3"]
        x, w, b = make_inputs(case, "cuda", torch.float32, memory_format)
        out = call(case, x, w, b)
        grad = torch.randn_like(out).contiguous(memory_format=memory_format)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            out.backward(grad)
        return {event.name for event in profile.events()}, x

    def test_channels_last_gradient_takes_no_copy(self):
        names, x = self._backward_ops(torch.channels_last)
        self.assertIn("aten::_conv_depthwise2d_backward", names)
        self.assertFalse(names & COPY_OPS, f"the backward copied: {sorted(names & COPY_OPS)}")
        self.assertTrue(x.grad.is_contiguous(memory_format=torch.channels_last))

    @unittest.expectedFailure
    def test_channels_last_gradient_takes_no_copy_on_stock(self):
        with stock_kernels():  # upstream's formula: grad.contiguous(), and groups=1
            names, _ = self._backward_ops(torch.channels_last)
        self.assertFalse(names & COPY_OPS)


instantiate_parametrized_tests(TestDepthwiseAutograd)

if __name__ == "__main__":
    run_tests()
