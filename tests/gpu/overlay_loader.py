"""Import the overlay for the GPU tests: from DWCONV_OVERLAY_DIR, else from what
`make overlay` / `make check` staged in build/l0/overlay-staging, else an installed wheel."""

import contextlib
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
staging = Path(os.environ.get("DWCONV_OVERLAY_DIR") or REPO_ROOT / "build" / "l0" / "overlay-staging")
if (staging / "dwconv_overlay" / "__init__.py").exists():
    sys.path.insert(0, str(staging))

import dwconv_overlay  # noqa: E402  (patches torch on import)


@contextlib.contextmanager
def stock_kernels():
    """Run the enclosed code on upstream's kernels, then switch ours back on."""
    dwconv_overlay.disable()
    try:
        yield
    finally:
        dwconv_overlay.enable()


@contextlib.contextmanager
def routing(mode):
    """Run the enclosed code with the overlay's routing set to mode, then the one before."""
    previous = dwconv_overlay.routing()
    dwconv_overlay.set_routing(mode)
    try:
        yield
    finally:
        dwconv_overlay.set_routing(previous)


@contextlib.contextmanager
def kernel_paths_off(paths):
    """Run the enclosed code with the kernel paths `paths` switched off, then every path on again."""
    dwconv_overlay.disable_kernels(list(paths))
    try:
        yield
    finally:
        dwconv_overlay.disable_kernels([])
