"""Compilers and the flags PyTorch builds its CUDA sources with.

One definition serves L0 and the overlay, so what L0 compiles is what the
overlay ships. The flags follow the pinned release's own build:
  - torch/share/cmake/Caffe2/public/cuda.cmake: --expt-relaxed-constexpr,
    --expt-extended-lambda; C++17 (CMAKE_CUDA_STANDARD = CMAKE_CXX_STANDARD);
  - torch/utils/cpp_extension.py COMMON_NVCC_FLAGS: the __CUDA_NO_HALF*__ and
    __CUDA_NO_BFLOAT16_CONVERSIONS__ defines ATen's half types rely on;
  - Release builds: -O3 -DNDEBUG; the new C++11 ABI; -Xfatbin -compress-all;
  - --threads=0: each arch's device compile in parallel, one thread a CPU (nvcc
    prints each arch's ptxas report whole, in order, as without it);
  - HAVE_AVX512/AVX2_CPU_DEFINITION: libtorch_cpu is built with them, and
    DispatchStub's layout depends on them, so code that registers a stub
    from outside libtorch must agree (UPSTREAM.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import HarnessError
from .pin import CudaArch, Pin
from .wheel_cache import PinnedTorch

COMMON_DEFINES = [
    "-DNDEBUG",
    "-D_GLIBCXX_USE_CXX11_ABI=1",
    "-DUSE_CUDA",
    "-DAT_PER_OPERATOR_HEADERS",
    "-DHAVE_AVX512_CPU_DEFINITION",
    "-DHAVE_AVX2_CPU_DEFINITION",
]
NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "-Xfatbin", "-compress-all",
    "--threads=0",
    "-DCUDA_HAS_FP16=1",
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
]
CXX_FLAGS = ["-std=c++17", "-O3", "-fPIC"]
_OUTPUT_TAIL_LINES = 60


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path
    cxx: str
    cuda_home: Path

    @property
    def cuda_include(self) -> Path:
        return self.cuda_home / "include"

    @property
    def cuda_lib(self) -> Path:
        lib64 = self.cuda_home / "lib64"
        return lib64 if lib64.is_dir() else self.cuda_home / "lib"


def nvcc_release(nvcc: Path) -> str:
    proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True)
    match = re.search(r"release (\d+\.\d+)", proc.stdout)
    if proc.returncode != 0 or not match:
        raise HarnessError(f"{nvcc} --version did not report a CUDA release:\n{proc.stdout}{proc.stderr}")
    return match.group(1)


def find_toolchain(pin: Pin) -> Toolchain:
    """nvcc of the pinned CUDA release (NVCC, PATH or /usr/local/cuda) and a C++ compiler."""
    candidates = [os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    nvcc = next((Path(c) for c in candidates if c and Path(c).is_file()), None)
    if nvcc is None:
        raise HarnessError(
            f"nvcc not found (looked at $NVCC, PATH and /usr/local/cuda/bin): install the CUDA "
            f"{pin.cuda_version} toolkit or point NVCC at its nvcc"
        )
    release = nvcc_release(nvcc)
    if release != pin.cuda_version:
        raise HarnessError(f"{nvcc} is CUDA {release}, but the pin is CUDA {pin.cuda_version}")
    cxx = os.environ.get("CXX") or "g++"
    if not shutil.which(cxx):
        raise HarnessError(f"C++ compiler {cxx!r} not found (set CXX)")
    return Toolchain(nvcc, cxx, _cuda_home(nvcc))


def _cuda_home(nvcc: Path) -> Path:
    """The toolkit nvcc belongs to (nvcc may be a wrapper script elsewhere)."""
    candidates = [nvcc.resolve().parent.parent, os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                  "/usr/local/cuda"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "include" / "cuda_runtime.h").is_file():
            return Path(candidate)
    raise HarnessError(f"cannot find the CUDA toolkit of {nvcc} (set CUDA_HOME)")


def compiler_version(compiler: str) -> str:
    """The compiler's own `--version` text (what a cached result must match)."""
    proc = subprocess.run([compiler, "--version"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout else compiler


def include_flags(include_roots: list[Path], torch: PinnedTorch, toolchain: Toolchain) -> list[str]:
    """Ours first (they replace upstream's), then the pinned headers, then CUDA's."""
    flags = [f"-I{p}" for p in include_roots + torch.include_dirs]
    return flags + ["-isystem", str(torch.cuda_include), "-isystem", str(toolchain.cuda_include)]


def _tail(text: str) -> str:
    lines = text.strip().splitlines()
    if len(lines) > _OUTPUT_TAIL_LINES:
        lines = [f"... ({len(lines) - _OUTPUT_TAIL_LINES} lines above)"] + lines[-_OUTPUT_TAIL_LINES:]
    return "\n".join(lines)


def run_compiler(cmd: list[str], what: str) -> str:
    # LC_ALL=C: plain ASCII quotes in diagnostics, whatever the user's locale.
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    if proc.returncode != 0:
        raise HarnessError(f"{what}:\n{_tail(proc.stderr + proc.stdout)}\n(command: {' '.join(cmd)})")
    return proc.stderr


def compile_command(toolchain: Toolchain, source: Path, obj: Path, includes: list[str],
                    archs: tuple[CudaArch, ...]) -> list[str]:
    if source.suffix == ".cu":
        gencode = [flag for arch in archs for flag in arch.gencode_flags()]
        return [str(toolchain.nvcc), "-c", str(source), "-o", str(obj),
                *NVCC_FLAGS, *COMMON_DEFINES, *gencode, *includes]
    return [toolchain.cxx, "-c", str(source), "-o", str(obj), *CXX_FLAGS, *COMMON_DEFINES, *includes]


def link_command(toolchain: Toolchain, objects: list[Path], output: Path, torch: PinnedTorch) -> list[str]:
    """A shared library with every symbol resolved against the pinned libraries.

    -Bsymbolic: the library defines functions libtorch_cuda also defines (the
    at::native entry points it replaces); its own references must bind to its own.
    """
    return [
        toolchain.cxx, "-shared", "-o", str(output), *map(str, objects),
        "-Wl,--no-undefined", "-Wl,--no-as-needed", "-Wl,-Bsymbolic",
        f"-L{torch.lib_dir}", "-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda",
        f"-L{toolchain.cuda_lib}", "-lcudart",
    ]
