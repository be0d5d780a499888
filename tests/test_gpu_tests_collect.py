"""The GPU tests are built right before any GPU time is spent on them: collected in the pinned
torch with the real overlay loaded (tests/collect_gpu_tests_on_cpu.py pretends torch.cuda has
one device), so their imports, OpInfo look-ups, decorators and device-type instantiation run
as they will on the GPU machine. Nothing runs here; the GPU run is still owed."""

import json
import os
import subprocess
import sys

import pytest

from build_scripts import REPO_ROOT
from build_scripts.check import DEFAULT_WORK_DIR
from build_scripts.pin import load_pin
from build_scripts.runtime_env import ensure_runtime_env
from build_scripts.wheel_cache import cache_dir

pytestmark = pytest.mark.l0  # the pinned torch and L0's staged overlay

# The GPU machine's Python has pytest and numpy; tests/gpu/requirements.txt lists the rest.
TEST_PACKAGES = ["pytest>=8", "numpy"]


def gpu_test_site(python) -> str:
    """A folder, kept in the cache, with what the GPU tests import besides torch."""
    site = cache_dir() / f"gpu-test-site-py{sys.version_info.major}{sys.version_info.minor}"
    marker = site / ".complete"
    if not marker.exists():
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target",
                        str(site), "--upgrade", *TEST_PACKAGES, "-r", str(REPO_ROOT / "tests/gpu/requirements.txt")],
                       check=True, capture_output=True, text=True)
        marker.write_text("\n".join(TEST_PACKAGES) + "\n")
    return str(site)


@pytest.fixture(scope="module")
def collected(overlay_probe):  # overlay_probe: L0 has built and staged the overlay
    python = ensure_runtime_env(load_pin(), cache_dir())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([gpu_test_site(python), str(DEFAULT_WORK_DIR / "overlay-staging")]))
    proc = subprocess.run([str(python), str(REPO_ROOT / "tests/collect_gpu_tests_on_cpu.py"), "tests/gpu"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["exit"] == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return result["ids"]


def test_every_gpu_test_file_collects(collected):
    files = {node.split("::")[0] for node in collected}
    on_disk = {f"tests/gpu/{p.name}" for p in (REPO_ROOT / "tests/gpu").glob("test_*.py")}
    assert files == on_disk
    assert len(collected) >= 150


def test_device_type_and_opinfo_tests_are_instantiated_for_cuda(collected):
    names = {node.split("::")[-1] for node in collected}
    for dtype in ("float64", "float32", "float16", "bfloat16"):
        assert f"test_forward_and_gradients_match_float64_cuda_{dtype}" in names
    for op in ("conv1d", "conv2d"):
        assert f"test_depthwise_samples_match_float64_nn_functional_{op}_cuda_float32" in names
    assert "test_gradcheck_and_gradgradcheck_cuda" in names
    assert {"test_compute_sanitizer[memcheck]", "test_compute_sanitizer[racecheck]"} <= names
