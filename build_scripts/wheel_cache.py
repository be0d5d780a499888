"""The pinned torch wheel and the CUDA headers its headers include, fetched
once from PyPI and unpacked into a cache outside the repository.

Cache layout (DWCONV_CACHE, default ~/.cache/dwconv):
  wheels/torch-2.11.0-<tags>.whl          the pinned wheel as pip downloaded it
  torch-2.11.0+cu130/                     what L0 needs from it: torch/include,
                                          torch/lib/<the libraries we link>, torchgen
  cuda-headers/<toolkit version>/include  cuBLAS, cuSPARSE, cuSOLVER headers from
                                          the nvidia-* wheels the pinned wheel requires
Each unpacked directory is written under a temporary name and renamed into
place when complete, so an interrupted run is redone rather than trusted.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from .errors import HarnessError
from .pin import Pin
from .wheel_facts import metadata_text, version_py_value

# The libraries the overlay and L0 link against (libtorch_cuda pulls in the rest at run time).
LINK_LIBRARIES = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so")
# The nvidia-* packages whose headers torch's CUDA headers include (ATen/cuda/CUDAContextLight.h).
HEADER_PACKAGES = ("nvidia-cublas", "nvidia-cusparse", "nvidia-cusolver")


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("DWCONV_CACHE"):
        return Path(env["DWCONV_CACHE"]).expanduser().resolve()
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "dwconv"


@dataclass(frozen=True)
class PinnedTorch:
    """The unpacked pinned wheel: what compiling and linking against it needs."""

    root: Path  # holds torch/ and torchgen/ (a PYTHONPATH entry for torchgen)
    wheel: Path
    cuda_include: Path

    @property
    def include_dirs(self) -> list[Path]:
        inc = self.root / "torch" / "include"
        return [inc, inc / "torch" / "csrc" / "api" / "include"]

    @property
    def lib_dir(self) -> Path:
        return self.root / "torch" / "lib"

    @property
    def packaged_aten(self) -> Path:
        return self.root / "torchgen" / "packaged" / "ATen"

    @property
    def packaged_autograd(self) -> Path:
        return self.root / "torchgen" / "packaged" / "autograd"

    def packaged_yaml(self, flavour_dir: str) -> Path:
        if flavour_dir == "native_functions":
            return self.packaged_aten / "native" / "native_functions.yaml"
        return self.packaged_autograd / "derivatives.yaml"


def pip_download(requirements: list[str], dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--progress-bar", "off", "--disable-pip-version-check", "-q", "-d", str(dest), *requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise HarnessError(
            f"pip download {' '.join(requirements)} failed (L0 needs PyPI once; later runs use "
            f"the cache):\n{proc.stderr.strip()[-2000:]}"
        )


def _wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        return metadata_text(zf)


def verify_torch_wheel(wheel: Path, pin: Pin) -> None:
    """Refuse a wheel that is not the pinned build, naming both versions."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            version_py = zf.read("torch/version.py").decode()
    except (zipfile.BadZipFile, KeyError) as err:
        raise HarnessError(f"{wheel} is not a readable torch wheel ({err}); delete it and run again") from None
    found = {
        "version": version_py_value(version_py, "__version__"),
        "commit": version_py_value(version_py, "git_version"),
        "cuda": version_py_value(version_py, "cuda"),
    }
    wanted = {"version": pin.stock_version, "commit": pin.commit, "cuda": pin.cuda_version}
    wrong = [f"{k} {found[k]!r} (pinned: {wanted[k]!r})" for k in wanted if found[k] != wanted[k]]
    if wrong:
        raise HarnessError(f"{wheel.name} is not the pinned torch: " + "; ".join(wrong))


def fetch_torch_wheel(pin: Pin, cache: Path) -> Path:
    wheels = cache / "wheels"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    pattern = f"torch-{pin.version}-{tag}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        print(f"[L0] downloading torch=={pin.version} (about 530 MB) into {wheels}", file=sys.stderr)
        pip_download([f"torch=={pin.version}"], wheels)
        found = sorted(wheels.glob(pattern))
        if not found:
            raise HarnessError(f"pip download left no {pattern} in {wheels}")
    verify_torch_wheel(found[-1], pin)
    return found[-1]


def unpack_wheels(wheels: list[Path], dest: Path, place) -> None:
    """Extract into dest, atomically, each member for which place(name) gives
    a destination path (relative to dest); members it maps to None are skipped."""
    partial = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                for member in zf.infolist():
                    target = None if member.is_dir() else place(member.filename)
                    if target:
                        (partial / target).parent.mkdir(parents=True, exist_ok=True)
                        (partial / target).write_bytes(zf.read(member))
        (partial / ".complete").write_text("\n".join(w.name for w in wheels) + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _place_torch_member(name: str) -> str | None:
    if name.startswith(("torch/include/", "torchgen/")) or name == "torch/version.py":
        return name
    if name.startswith("torch/lib/") and name[len("torch/lib/"):] in LINK_LIBRARIES:
        return name
    return None


def _place_nvidia_header(name: str) -> str | None:
    """nvidia/cu13/include/cublas_v2.h -> include/cublas_v2.h"""
    parts = name.split("/")
    if len(parts) > 3 and parts[0] == "nvidia" and parts[2] == "include":
        return "/".join(["include", *parts[3:]])
    return None


def _requirement_pins(metadata: str) -> dict[str, tuple[str, str]]:
    """Requires-Dist lines as name -> (spec, marker), for pins (== specs) only."""
    pins = {}
    for line in Parser().parsestr(metadata).get_all("Requires-Dist") or []:
        requirement, _, marker = line.partition(";")
        match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(\[[^\]]*\])?\s*==\s*([^\s;]+)", requirement)
        if match:
            pins.setdefault(match.group(1).lower(), (match.group(3), marker.strip()))
    return pins


def cuda_header_requirements(torch_wheel: Path, download_dir: Path) -> tuple[str, list[str]]:
    """('<toolkit version>', ['nvidia-cublas==13.1.0.3.*', ...]) as torch pins them.

    torch 2.11 pins the `cuda-toolkit` meta-package, whose extras pin the
    nvidia-* packages; older wheels pinned nvidia-* directly.
    """
    torch_pins = _requirement_pins(_wheel_metadata(torch_wheel))
    direct = {n: v for n, (v, _) in torch_pins.items() if n in HEADER_PACKAGES}
    if len(direct) == len(HEADER_PACKAGES):
        return "direct-" + direct["nvidia-cublas"], [f"{n}=={v}" for n, v in direct.items()]
    if "cuda-toolkit" not in torch_pins:
        raise HarnessError(f"{torch_wheel.name} pins neither cuda-toolkit nor {', '.join(HEADER_PACKAGES)}")
    toolkit = torch_pins["cuda-toolkit"][0]
    pip_download([f"cuda-toolkit=={toolkit}"], download_dir)
    meta = _wheel_metadata(next(download_dir.glob("cuda_toolkit-*.whl")))
    pins = {n: v for n, (v, marker) in _requirement_pins(meta).items()
            if n in HEADER_PACKAGES and "linux" in marker}
    missing = [n for n in HEADER_PACKAGES if n not in pins]
    if missing:
        raise HarnessError(f"cuda-toolkit=={toolkit} pins none of {', '.join(missing)} for Linux")
    return toolkit, [f"{n}=={pins[n]}" for n in HEADER_PACKAGES]


def fetch_cuda_headers(torch_wheel: Path, cache: Path) -> Path:
    root = cache / "cuda-headers"
    # Which toolkit the wheel resolved to, so that a warm run needs no network.
    resolved = root / f"{torch_wheel.name}.toolkit"
    if resolved.exists() and (root / resolved.read_text().strip() / ".complete").exists():
        return root / resolved.read_text().strip() / "include"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        downloads = Path(tmp)
        toolkit, requirements = cuda_header_requirements(torch_wheel, downloads)
        dest = root / toolkit
        if not (dest / ".complete").exists():
            print(f"[L0] downloading CUDA headers: {' '.join(requirements)}", file=sys.stderr)
            pip_download(requirements, downloads)
            unpack_wheels(sorted(downloads.glob("nvidia_*.whl")), dest, _place_nvidia_header)
    resolved.write_text(toolkit + "\n")
    return dest / "include"


def ensure_pinned_torch(pin: Pin, cache: Path | None = None) -> PinnedTorch:
    cache = cache or cache_dir()
    wheel = fetch_torch_wheel(pin, cache)
    root = cache / f"torch-{pin.stock_version}"
    marker = root / ".complete"
    if not marker.exists() or marker.read_text().strip() != wheel.name:
        print(f"[L0] unpacking headers, torchgen and libraries of {wheel.name}", file=sys.stderr)
        unpack_wheels([wheel], root, _place_torch_member)
    return PinnedTorch(root, wheel, fetch_cuda_headers(wheel, cache))
