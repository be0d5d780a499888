"""`make overlay`: the patch set's kernels as a library and a wheel for stock torch 2.11.0.

L0 builds and checks the library (build/l0/libdwconv_overlay.so); this packs it,
with the loader package from patches/overlay/dwconv_overlay, into
dist/dwconv_overlay-<version>-py3-none-linux_x86_64.whl. The library has no
Python ABI (it is loaded with torch.ops.load_library), so one wheel serves every
Python that torch 2.11.0 supports.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import zipfile
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError
from .patchset import PatchSet
from .pin import CudaArch, Pin

PACKAGE = "dwconv_overlay"
DIST_DIR = REPO_ROOT / "dist"
WHEEL_TAG = "py3-none-linux_x86_64"


def overlay_version(pin: Pin, patchset_hash: str) -> str:
    """2.11.0+cu130.dwconv.<patch-set hash>: which torch, and which patch set."""
    return f"{pin.version}+{pin.local_label}.{patchset_hash[:12]}"


def build_info(pin: Pin, patchset_hash: str, archs: tuple[CudaArch, ...]) -> str:
    return (
        "# Written by `make overlay` (build_scripts/overlay.py).\n"
        f"PINNED_TORCH_VERSION = {pin.stock_version!r}\n"
        f"PINNED_COMMIT = {pin.commit!r}\n"
        f"PATCHSET_HASH = {patchset_hash!r}\n"
        f"CUDA_ARCHS = {tuple(str(a) for a in archs)!r}\n"
    )


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(dest_dir: Path, version: str, files: dict[str, bytes], pin: Pin) -> Path:
    """A wheel holding `files` (path in the wheel -> bytes), with its metadata."""
    dist_info = f"{PACKAGE}-{version}.dist-info"
    files = dict(files)
    files[f"{dist_info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        f"Name: {PACKAGE}\n"
        f"Version: {version}\n"
        f"Summary: Depthwise convolution kernels of the dwconv patch set, for torch {pin.stock_version}\n"
        f"Requires-Dist: torch=={pin.version}\n"
    ).encode()
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: dwconv build_scripts.overlay\n"
        f"Root-Is-Purelib: false\nTag: {WHEEL_TAG}\n"
    ).encode()
    record = [_record_line(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    dest_dir.mkdir(parents=True, exist_ok=True)
    wheel = dest_dir / f"{PACKAGE}-{version}-{WHEEL_TAG}.whl"
    partial = wheel.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    partial.replace(wheel)
    return wheel


def package_files(library: Path, pin: Pin, patch_set: PatchSet, archs: tuple[CudaArch, ...]) -> dict[str, bytes]:
    """The overlay package: the loader, its build info and the library (path -> bytes)."""
    loader = patch_set.overlay_root / PACKAGE
    files = {f"{PACKAGE}/{p.name}": p.read_bytes() for p in sorted(loader.glob("*.py"))}
    if f"{PACKAGE}/__init__.py" not in files:
        raise HarnessError(f"{loader}/__init__.py is missing")
    files[f"{PACKAGE}/_build_info.py"] = build_info(pin, patch_set.hash, archs).encode()
    files[f"{PACKAGE}/libdwconv_overlay.so"] = library.read_bytes()
    return files


def stage(files: dict[str, bytes], dest: Path) -> Path:
    """Write the package files under dest (a directory to put on sys.path)."""
    shutil.rmtree(dest, ignore_errors=True)
    for name, data in files.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)
    return dest


def build_overlay(pin: Pin, archs: tuple[CudaArch, ...] | None = None, dest_dir: Path = DIST_DIR) -> Path:
    from .check import run_l0  # L0 stages and load-tests this package; it imports us

    patch_set = PatchSet.load()
    archs = archs or pin.archs()
    report = run_l0(pin, patch_set, archs=archs)
    print(report.summary())
    if report.library is None:
        raise HarnessError("there is no overlay library: the patch set has no kernel sources")
    files = package_files(report.library, pin, patch_set, archs)
    return write_wheel(dest_dir, overlay_version(pin, patch_set.hash), files, pin)
