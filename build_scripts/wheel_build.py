"""Compiling the patched, pinned tree into the custom torch wheel.

The same code runs in the builder stage of docker/builder.Dockerfile (`make build`)
and on a prepared machine (`make build-local`): the settings below are the whole
difference between our wheel and a plain `python -m build` of v2.11.0.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import REPO_ROOT
from .errors import HarnessError
from .pin import CudaArch, Pin
from .source import validate_checkout
from .wheel_facts import check_built_wheel

if TYPE_CHECKING:  # the requirements step runs before the harness's own dependencies exist
    from .patchset import PatchSet

# Memory to allow per compile job. The worst sources, flash attention (about 4.5 GB
# for one file, pytorch/pytorch#124018), are off; 3 GiB for the rest is an estimate,
# not a measurement made here. MAX_JOBS in the environment overrides the sizing.
GIB_PER_COMPILE_JOB = 3
# Free disk to ask for beside the checkout: the build tree, the wheel and the
# Python environment (an estimate with margin; see the README's requirements).
MIN_FREE_DISK_GB = 40


@dataclass(frozen=True)
class BuildSetting:
    name: str
    value: str
    why: str


def build_settings(pin: Pin, archs: tuple[CudaArch, ...], max_jobs: int) -> list[BuildSetting]:
    """The environment of the wheel build, each variable with the reason for its value."""
    s = BuildSetting
    return [
        s("PYTORCH_BUILD_VERSION", pin.wheel_version,
          "the wheel's version: a PEP 440 local label keeps `torch==2.11.0` requirements satisfied"),
        s("PYTORCH_BUILD_NUMBER", "1",
          "required beside PYTORCH_BUILD_VERSION; a number above 1 would append .postN"),
        s("TORCH_CUDA_ARCH_LIST", ";".join(str(a) for a in archs),
          "the pin's archs (pin.toml), or TORCH_CUDA_ARCH_LIST from the caller"),
        s("MAX_JOBS", str(max_jobs),
          f"parallel compile jobs: min(CPUs, memory / {GIB_PER_COMPILE_JOB} GiB), unless MAX_JOBS is set"),
        s("USE_CUDA", "1", "the point of the build"),
        s("USE_CUDNN", "1", "kept: cuDNN serves every non-depthwise convolution, and the routing compares with it"),
        s("USE_FLASH_ATTENTION", "0",
          "flash-attention kernels are the build's slowest, most memory-hungry sources; convolution never uses them"),
        s("USE_MEM_EFF_ATTENTION", "0", "the same for the memory-efficient attention kernels"),
        s("USE_FBGEMM_GENAI", "0",
          "FBGEMM's GenAI GEMMs: unrelated (CMake forces them on anyway when the arch list holds 10.0)"),
        s("USE_DISTRIBUTED", "0", "one process per GPU is all the tests and benchmarks need; drops gloo and tensorpipe"),
        s("USE_NCCL", "0", "depends on USE_DISTRIBUTED; said explicitly so that NCCL is never built from its submodule"),
        s("USE_NVSHMEM", "0", "depends on USE_DISTRIBUTED (symmetric memory); said explicitly"),
        s("USE_CUSPARSELT", "0", "not in the CUDA base images; sparse semi-structured matmul only"),
        s("USE_CUDSS", "0", "not in the CUDA base images; sparse direct solvers only"),
        s("USE_CUFILE", "0", "GPUDirect Storage: unrelated, and absent from the runtime image"),
        s("BUILD_TEST", "0", "setup.py builds the C++ tests unless told not to; the Python tests run from test/"),
        s("USE_KINETO", "1", "kept: the profiler is how the self-test and the tests see which kernels ran"),
        s("USE_CCACHE", "1",
          "v2.11.0's default: CMake puts ccache in front of the C, C++ and CUDA compilers when it is on PATH"),
    ]


def available_memory_bytes() -> int:
    """Memory this process may use: the cgroup limit when there is one, else MemTotal."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def default_max_jobs(cpus: int, memory_bytes: int) -> int:
    by_memory = memory_bytes // (GIB_PER_COMPILE_JOB * 2**30)
    return max(1, min(cpus, by_memory))


def max_jobs(environ: dict[str, str]) -> int:
    value = environ.get("MAX_JOBS", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise HarnessError(f"MAX_JOBS={value!r} is not a positive integer")
        return int(value)
    return default_max_jobs(len(os.sched_getaffinity(0)), available_memory_bytes())


def build_environment(settings: list[BuildSetting], environ: dict[str, str]) -> dict[str, str]:
    """The caller's environment with our settings on top (setup.py hands BUILD_*, USE_*,
    CMAKE_* and TORCH_CUDA_ARCH_LIST to CMake)."""
    return {**environ, **{setting.name: setting.value for setting in settings}}


def harness_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    return tomllib.loads(pyproject.read_text())["project"]["dependencies"]


def requirements_command(python: str, src: Path) -> list[str]:
    """Install what v2.11.0 needs to build (the checkout's own requirements file, and
    PyPA build), with what the harness itself needs to patch."""
    return [python, "-m", "pip", "install", "--disable-pip-version-check",
            "-r", str(src / "requirements-build.txt"), "build", *harness_requirements()]


def wheel_command(python: str, out_dir: Path) -> list[str]:
    """v2.11.0's release wheels are built with PyPA build, without isolation."""
    return [python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out_dir)]


def _check_pinned_checkout(src: Path, pin: Pin, force: bool):
    checkout = validate_checkout(src, pin, force)
    if not (src / "requirements-build.txt").is_file():
        raise HarnessError(f"{src} has no requirements-build.txt; is it a PyTorch checkout of {pin.tag}?")
    return checkout


def check_build_tree(src: Path, pin: Pin, patch_set: PatchSet, force: bool = False) -> None:
    """The tree must be the pinned commit carrying exactly the current patch set."""
    checkout = _check_pinned_checkout(src, pin, force)
    if checkout.stamp is None:
        raise HarnessError(f"{src} is not patched; run `make patch` first (PYTORCH_SRC={src})")
    if checkout.stamp.patchset_hash != patch_set.hash:
        raise HarnessError(
            f"{src} carries patch set {checkout.stamp.patchset_hash[:12]}, but the current one is "
            f"{patch_set.hash[:12]}; run `make patch` to bring the tree up to date"
        )


def _cudnn_header(environ: dict[str, str]) -> Path | None:
    roots = [environ.get("CUDNN_INCLUDE_DIR", "")]
    if environ.get("CUDNN_ROOT"):
        roots.append(f"{environ['CUDNN_ROOT']}/include")
    roots += [f"{environ.get('CUDA_HOME', '/usr/local/cuda')}/include", "/usr/include",
              "/usr/include/x86_64-linux-gnu"]
    headers = (Path(root) / "cudnn_version.h" for root in roots if root)
    return next((header for header in headers if header.is_file()), None)


def preflight_problems(src: Path, pin: Pin, environ: dict[str, str], which=shutil.which,
                       disk_free=None) -> list[str]:
    """What a machine lacks for `make build-local`, each with what to do about it."""
    problems = []
    cuda_home = environ.get("CUDA_HOME", "")
    nvcc = which("nvcc") or (cuda_home and which(f"{cuda_home}/bin/nvcc"))
    if not nvcc:
        problems.append(f"nvcc is not on PATH: install CUDA {pin.cuda_version} and put its bin/ on PATH "
                        "(or set CUDA_HOME)")
    else:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        if f"release {pin.cuda_version}," not in out:
            last = out.strip().splitlines()[-1] if out.strip() else "(no version output)"
            problems.append(f"{nvcc} is not CUDA {pin.cuda_version}: {last}")
    if _cudnn_header(environ) is None:
        problems.append("cuDNN headers (cudnn_version.h) not found: install cuDNN 9 for CUDA "
                        f"{pin.cuda_version}, or set CUDNN_INCLUDE_DIR / CUDNN_ROOT")
    if not which("git"):
        problems.append("git is not on PATH")
    existing = next(p for p in (src, *src.parents) if p.exists())  # the checkout may not be cloned yet
    free = disk_free(existing) if disk_free else shutil.disk_usage(existing).free
    if free < MIN_FREE_DISK_GB * 10**9:
        problems.append(f"only {free / 1e9:.0f} GB free at {src}; the build needs about {MIN_FREE_DISK_GB} GB")
    return problems


def run_logged(cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
    print(f"+ (cd {cwd} && {shlex.join(cmd)})", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=cwd, env=env)
    if proc.returncode != 0:
        raise HarnessError(f"{shlex.join(cmd[:4])} ... failed with status {proc.returncode} (its output is above)")


def _announce(settings: list[BuildSetting]) -> None:
    print("[build] wheel build settings:", file=sys.stderr)
    for setting in settings:
        print(f"  {setting.name}={setting.value}  # {setting.why}", file=sys.stderr)


def install_requirements(src: Path, pin: Pin, environ: dict[str, str], python: str = sys.executable,
                         force: bool = False) -> None:
    """Step one: the build requirements of the pinned checkout at src (patched or not)."""
    _check_pinned_checkout(src, pin, force)
    run_logged(requirements_command(python, src), src, dict(environ))


def compile_wheel(src: Path, pin: Pin, patch_set: PatchSet, out_dir: Path, environ: dict[str, str],
                  python: str = sys.executable, force: bool = False) -> Path:
    """Step two: build the wheel from the patched tree at src, check it, move it to out_dir."""
    check_build_tree(src, pin, patch_set, force)
    settings = build_settings(pin, pin.archs(environ), max_jobs(environ))
    _announce(settings)
    env = build_environment(settings, environ)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        run_logged(wheel_command(python, staging), src, env)
        wheels = sorted(staging.glob("torch-*.whl"))
        if len(wheels) != 1:
            raise HarnessError(f"the build left {len(wheels)} torch wheels in {staging}, expected one")
        check_built_wheel(wheels[0], pin, patch_set.hash)
        final = out_dir / wheels[0].name
        wheels[0].replace(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"[build] {final}: torch {pin.wheel_version}, patch set {patch_set.hash[:12]}", file=sys.stderr)
    return final
