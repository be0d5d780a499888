"""The depthwise-convolution patch set, hot-loaded into a stock torch 2.11.0+cu130.

    import dwconv_overlay          # loads libdwconv_overlay.so: torch now runs our kernels
    dwconv_overlay.disable()       # back to upstream's kernels, in this process
    dwconv_overlay.enable()
    dwconv_overlay.enabled()       # -> bool
    dwconv_overlay.set_routing("ours")   # depthwise convolutions: "auto" (as measured, the
                                         # default), "ours" (always), "cudnn" (cuDNN always)
                                         # or "upstream" (never ours)
    print(dwconv_overlay.explain_routing(x, conv.weight, conv.bias, conv.stride, conv.padding,
                                         conv.dilation, conv.groups))  # who runs each pass, and why
    dwconv_overlay.load_routing_table("a100.tsv")  # "auto" by a table measured on this kind of GPU
                                                   # (`make routing-table TABLE=a100.tsv`); None: built in
    dwconv_overlay.disable_kernels(["register_tiled"])  # a specialised kernel path off
    dwconv_overlay.disable_kernels([])                  # all back on

Only the process that imports it is patched. It refuses a torch other than the
one it was built for. (Loading the library with torch.ops.load_library directly
patches torch too; the library then checks the commit itself.)
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ._build_info import CUDA_ARCHS, PATCHSET_HASH, PINNED_COMMIT, PINNED_TORCH_VERSION

__all__ = ["enable", "disable", "enabled", "set_routing", "routing", "routing_measured_on", "explain_routing",
           "load_routing_table", "disable_kernels", "disabled_kernels", "kernel_paths",
           "LIBRARY", "PATCHSET_HASH", "CUDA_ARCHS"]

LIBRARY = Path(__file__).with_name("libdwconv_overlay.so")


def set_routing(mode: str) -> None:
    """Which depthwise convolutions convolution/convolution_backward give our kernels:
    "auto" (where the routing table measured ours faster), "ours" (all it can take),
    "cudnn" (none: all to cuDNN, as the routing's cuDNN route runs it) or "upstream"
    (none: upstream's own choice). The environment variable DWCONV_ROUTING sets the start value."""
    torch.ops.dwconv.set_routing(mode)


def routing() -> str:
    return str(torch.ops.dwconv.routing())


def routing_measured_on() -> str:
    """Where the routing table's measurements come from (device, torch, date, arch), and the file
    a loaded table came from."""
    return str(torch.ops.dwconv.routing_measured_on())


def load_routing_table(path: str | os.PathLike | None) -> None:
    """Routes "auto" by the table in this file, written by `make routing-table BENCH=<report>
    TABLE=<file>` from a bench on the GPU it is for, in place of the table built in (None: back to
    that). A file that cannot be read or parsed is refused, naming the line, and the table in use
    stays. The environment variable DWCONV_ROUTING_TABLE loads one at start."""
    torch.ops.dwconv.load_routing_table("" if path is None else os.fsdecode(path))


def explain_routing(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                    stride=1, padding=0, dilation=1, groups: int = 1) -> str:
    """Who would compute each pass of this conv1d/conv2d (F.conv1d/conv2d's arguments) on a CUDA
    device, forward, backward_input and backward_weight, and why: the routing mode, or the measured
    layer that decided it, with its times. Only the tensors' sizes, strides and dtypes are read, so
    they may be on any device, meta tensors included: a layer can be asked about without a GPU."""
    dims = input.dim() - 2
    kernel = list(weight.shape[2:])

    def per_dim(value) -> list[int]:
        return [int(value)] * dims if isinstance(value, int) else [int(v) for v in value]

    if isinstance(padding, str):
        padding = _explicit_padding(padding, kernel, per_dim(dilation))
    return str(torch.ops.dwconv.explain_routing(input, weight, bias, per_dim(stride), per_dim(padding),
                                                per_dim(dilation), False, [0] * dims, groups))


def _explicit_padding(padding: str, kernel: list[int], dilation: list[int]) -> list[int]:
    """padding="valid" or "same" as the numbers aten::convolution receives."""
    if padding == "valid":
        return [0] * len(kernel)
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    if padding != "same" or any(t % 2 for t in totals):
        raise ValueError(f"explain_routing: padding {padding!r} is not one aten::convolution receives as numbers "
                         "(\"same\" with an even kernel pads the input first): pass the padded input and the numbers")
    return [t // 2 for t in totals]


def kernel_paths() -> list[str]:
    """The names of the 2D kernels' specialised paths, each of which disable_kernels can switch off."""
    return list(torch.ops.dwconv.kernel_paths())


def disable_kernels(names: list[str] | str) -> None:
    """Switches the named specialised kernel paths off, and every other one on ([] turns all on):
    each pass a path served then takes the kernel it takes where that path does not apply. For
    measuring what a path brings and for testing the fallbacks. The environment variable
    DWCONV_DISABLE_KERNELS (names separated by commas) sets the start value."""
    torch.ops.dwconv.disable_kernels([names] if isinstance(names, str) else list(names))


def disabled_kernels() -> list[str]:
    return list(torch.ops.dwconv.disabled_kernels())


def _check_torch() -> None:
    found = (torch.__version__, torch.version.git_version)
    if found != (PINNED_TORCH_VERSION, PINNED_COMMIT):
        raise ImportError(
            f"dwconv_overlay is built for torch {PINNED_TORCH_VERSION} (commit {PINNED_COMMIT}), "
            f"but this process has torch {found[0]} (commit {found[1]}); install torch=={PINNED_TORCH_VERSION.split('+')[0]} "
            "from the cu130 wheels, or rebuild the overlay for this torch"
        )


def enable() -> None:
    torch.ops.dwconv.set_enabled(True)


def disable() -> None:
    torch.ops.dwconv.set_enabled(False)


def enabled() -> bool:
    return bool(torch.ops.dwconv.enabled())


_check_torch()
torch.ops.load_library(str(LIBRARY))
