"""The 2D depthwise kernels run on the CPU through tests/emulator (no GPU needed): every kernel,
both layouts, 32/64-bit indexing, float/double/half, against float64 loops. Then proof that the
emulator fails when the kernels are wrong, a missing __syncthreads() included."""

import re
import subprocess
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.pin import load_pin
from build_scripts.wheel_cache import cache_dir, ensure_pinned_torch

pytestmark = pytest.mark.l0

EMULATOR = Path(__file__).parent / "emulator"
KERNELS = "ATen/native/cuda/DepthwiseConv2dKernels.cuh"
OURS = REPO_ROOT / "patches" / "files" / "aten" / "src"


def build(tmp_path: Path, include_root: Path) -> Path:
    torch = ensure_pinned_torch(load_pin(), cache_dir())
    binary = tmp_path / "emulate_depthwise2d"
    subprocess.run(
        ["g++", "-std=c++20", "-O2", "-pthread", f"-I{include_root}", f"-I{EMULATOR}",
         *[f"-I{d}" for d in torch.include_dirs], str(EMULATOR / "emulate_depthwise2d.cpp"), "-o", str(binary),
         f"-L{torch.lib_dir}", "-lc10", f"-Wl,-rpath,{torch.lib_dir}"],
        check=True, capture_output=True, text=True,
    )
    return binary


def run(binary: Path, *args: str):
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=900)
    match = re.search(r"^(\d+) passed, (\d+) failed$", proc.stdout, re.M)
    assert match, proc.stdout + proc.stderr
    return proc, int(match.group(1)), int(match.group(2))


def test_kernels_match_float64_on_the_emulated_gpu(tmp_path):
    proc, passed, failed = run(build(tmp_path, OURS))
    assert failed == 0 and proc.returncode == 0, proc.stdout
    assert passed >= 700


@pytest.mark.parametrize("mutation", [
    ("__syncthreads();  // the previous member's tile is no longer read", "// barrier removed"),
    ("const int tap = kBackward ? taps_count - 1 - i : i;", "const int tap = i;"),
    ("for (int half = kThreads / 2; half > 0; half /= 2) {", "for (int half = kThreads / 4; half > 0; half /= 2) {"),
])
def test_emulator_catches_broken_kernels(tmp_path, mutation):
    old, new = mutation
    mutated = tmp_path / "src"
    (mutated / KERNELS).parent.mkdir(parents=True)
    text = (OURS / KERNELS).read_text()
    assert text.count(old) == 1, f"the kernels changed: {old!r} is not in {KERNELS}"
    (mutated / KERNELS).write_text(text.replace(old, new))
    proc, _, failed = run(build(tmp_path, mutated), "12")
    assert failed > 0 and proc.returncode == 1, proc.stdout
