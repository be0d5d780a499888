"""Run one GPU test's body in the pinned torch on the CPU, with torch's CPU convolutions standing in
for our kernels (tests/pretend_cuda.py: tests/gpu imports as on the GPU machine), so that what the
test computes and asserts around the kernels (its data, references and matches) runs before any
GPU time is spent on it. The profiler's kernel names are not checked here.

Usage: python run_gpu_test_on_cpu.py <test> <stand-in> [kernel path ...]
  test      a TestDepthwise2d method taking (device, dtype)
  stand-in  "correct" (the CPU convolution, in float32), or a planted bug:
            "inf dropped" (the weight gradient's infinities and NaNs made finite),
            "grad_input signs lost" (grad_input's absolute values)
  paths     kernel_cases.kernel_path_cases rows to run (default: every row)
Prints one JSON line: {dtype: "pass" | the assertion's message}.
"""

import json
import sys
import warnings
from pathlib import Path

warnings.simplefilter("ignore")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "gpu"))

from pretend_cuda import pretend_one_cuda_device  # noqa: E402

pretend_one_cuda_device()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.testing._internal import common_device_type  # noqa: E402

common_device_type.instantiate_device_type_tests = lambda *args, **kwargs: None  # keep the generic class
import kernel_cases  # noqa: E402
import test_depthwise2d  # noqa: E402

PLANTED = {
    "correct": lambda grad_input, grad_weight: (grad_input, grad_weight),
    "inf dropped": lambda grad_input, grad_weight: (grad_input, torch.nan_to_num(grad_weight)),
    "grad_input signs lost": lambda grad_input, grad_weight: (grad_input.abs(), grad_weight),
}


def stand_ins(planted):
    def forward(x, w, b, stride, padding, dilation):
        return F.conv2d(x.float(), w.float(), None if b is None else b.float(), stride, padding, dilation,
                        groups=x.shape[1]).to(x.dtype)

    def backward(grad_out, x, w, stride, padding, dilation, mask=(True, True)):
        grad_input, grad_weight, _ = torch.ops.aten.convolution_backward(
            grad_out.float(), x.float(), w.float(), None, list(stride), list(padding), list(dilation), False,
            [0, 0], x.shape[1], [True, True, False])
        grad_input, grad_weight = planted(grad_input, grad_weight)
        return (grad_input.to(x.dtype) if mask[0] else None), (grad_weight.to(x.dtype) if mask[1] else None)

    return forward, backward


def main():
    test_name, stand_in, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
    test_depthwise2d.depthwise, test_depthwise2d.depthwise_backward = stand_ins(PLANTED[stand_in])
    test_depthwise2d.op_names = lambda run: []
    test_depthwise2d.launched = lambda names, kernel: True
    if paths:
        every_row = kernel_cases.kernel_path_cases
        kernel_cases.kernel_path_cases = lambda element_size: [
            row for row in every_row(element_size) if row[0] in paths]

    class OnTheCpu(test_depthwise2d.TestDepthwise2d):
        device_type = "cuda"  # what onlyCUDA asks; the tensors are the CPU's

        def runTest(self):
            pass

    found = {}
    for dtype in (torch.float32, torch.bfloat16):
        try:
            getattr(test_depthwise2d.TestDepthwise2d, test_name)(OnTheCpu(), "cpu", dtype)
            found[str(dtype)] = "pass"
        except AssertionError as error:
            found[str(dtype)] = str(error)[:500]
    print(json.dumps(found))


if __name__ == "__main__":
    main()
