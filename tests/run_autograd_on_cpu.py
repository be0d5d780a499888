"""Run the derivative checks of tests/depthwise_autograd.py on the CPU, through the overlay.

The depthwise ops have CUDA kernels only. Here torch's grouped convolution, registered
for the CPU key, stands in for them, so what runs is exactly what has no GPU in it:
the overlay's generated Autograd kernels and our derivatives.yaml formulas. Each check
runs with the overlay enabled and again disabled (stock torch's formulas).

Usage: python run_autograd_on_cpu.py <staging dir holding dwconv_overlay/>
Prints one JSON object: {"<check>/<case>": {"overlay": "pass" | error, "stock": ...},
"gaps": {what the overlay cannot mirror: found or not}}.
Runs in the pinned torch's environment (stdlib and torch only).
"""

import json
import sys
import warnings
from pathlib import Path

warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dwconv_overlay  # noqa: E402
from depthwise_autograd import CASES, CHECKS  # noqa: E402


def stand_in_forward(conv):
    def forward(x, w, kernel_size, bias, stride, padding, dilation):
        return conv(x, w, bias, stride, padding, dilation, groups=x.shape[1])
    return forward


def stand_in_backward(grad_output, x, w, kernel_size, stride, padding, dilation, output_mask):
    grad_input, grad_weight, _ = torch.ops.aten.convolution_backward(
        grad_output, x, w, None, stride, padding, dilation, False, [0] * len(stride), x.shape[1],
        [output_mask[0], output_mask[1], False])
    return grad_input, grad_weight


def register_stand_ins() -> torch.library.Library:
    library = torch.library.Library("aten", "IMPL")
    library.impl("_conv_depthwise2d", stand_in_forward(F.conv2d), "CPU")
    library.impl("conv_depthwise3d", stand_in_forward(F.conv3d), "CPU")
    library.impl("_conv_depthwise2d_backward", stand_in_backward, "CPU")
    library.impl("_conv_depthwise3d_backward", stand_in_backward, "CPU")
    return library


def outcome(check, case) -> str:
    try:
        check(case, "cpu")
        return "pass"
    except Exception as error:  # noqa: BLE001 - the outcome is the report
        return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:300]}"


def main() -> None:
    stand_ins = register_stand_ins()  # noqa: F841 - registered while it lives
    results = {}
    for check_name, check in CHECKS.items():
        for case in CASES:
            dwconv_overlay.enable()
            overlay = outcome(check, case)
            dwconv_overlay.disable()
            stock = outcome(check, case)
            results[f"{check_name}/{case.name}"] = {"overlay": overlay, "stock": stock}
    dwconv_overlay.enable()
    # What the overlay cannot mirror: a patched build also binds the new ops in torch._C._nn
    # (python_module: nn); a stock torch's generated bindings cannot grow.
    results["gaps"] = {"torch._C._nn binding": hasattr(torch._C._nn, "_conv_depthwise2d_backward"),
                       "torch.ops.aten": str(torch.ops.aten._conv_depthwise2d_backward.default._schema)}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
