"""The depthwise-convolution patch set, hot-loaded into a stock torch 2.11.0+cu130.

    import dwconv_overlay          # loads libdwconv_overlay.so: torch now runs our kernels
    dwconv_overlay.disable()       # back to upstream's kernels, in this process
    dwconv_overlay.enable()
    dwconv_overlay.enabled()       # -> bool
    dwconv_overlay.set_routing("ours")   # depthwise convolutions: "auto" (as measured,
                                         # the default), "ours" (always) or "upstream" (never)

Only the process that imports it is patched. It refuses a torch other than the
one it was built for. (Loading the library with torch.ops.load_library directly
patches torch too; the library then checks the commit itself.)
"""

from __future__ import annotations

from pathlib import Path

import torch

from ._build_info import CUDA_ARCHS, PATCHSET_HASH, PINNED_COMMIT, PINNED_TORCH_VERSION

__all__ = ["enable", "disable", "enabled", "set_routing", "routing", "routing_measured_on",
           "LIBRARY", "PATCHSET_HASH", "CUDA_ARCHS"]

LIBRARY = Path(__file__).with_name("libdwconv_overlay.so")


def set_routing(mode: str) -> None:
    """Which depthwise convolutions convolution/convolution_backward give our kernels:
    "auto" (where the routing table measured ours faster), "ours" (all it can take)
    or "upstream" (none). The environment variable DWCONV_ROUTING sets the start value."""
    torch.ops.dwconv.set_routing(mode)


def routing() -> str:
    return str(torch.ops.dwconv.routing())


def routing_measured_on() -> str:
    """Where the routing table's measurements come from (device, torch, date)."""
    return str(torch.ops.dwconv.routing_measured_on())


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
