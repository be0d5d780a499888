"""The full build's tools on the real pinned torch (CPU only, as L0 runs it): the
runtime image's self-test and `make test-upstream` in overlay mode, with the overlay
that `make overlay` stages. No GPU here, so both must say so, not pass."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.patchset import PatchSet
from build_scripts.pin import load_pin
from build_scripts.runtime_env import ensure_runtime_env
from build_scripts.upstream_runs import DEFAULT_OVERLAY_DIR
from build_scripts.upstream_tests import SELECTIONS
from build_scripts.wheel_cache import cache_dir

pytestmark = pytest.mark.l0

SELFTEST = REPO_ROOT / "docker" / "runtime" / "selftest.py"


def pytest_site() -> str:
    return str(Path(pytest.__file__).parent.parent)


@pytest.fixture(scope="module")
def stock_python():
    return str(ensure_runtime_env(load_pin(), cache_dir()))


@pytest.fixture(scope="module")
def staged_overlay():
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "overlay"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (DEFAULT_OVERLAY_DIR / "dwconv_overlay" / "__init__.py").is_file()
    return DEFAULT_OVERLAY_DIR


def test_selftest_refuses_stock_torch(stock_python):
    proc = subprocess.run([stock_python, SELFTEST], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"torch 2.11.0+cu130 (commit {load_pin().commit}), CUDA 13.0")
    assert "selftest: FAIL: this torch carries no patch set (torch._dwconv_patchset is missing)" in proc.stderr


def test_selftest_with_the_overlay_and_no_gpu_says_so(stock_python, staged_overlay):
    proc = subprocess.run([stock_python, SELFTEST, "--overlay"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(staged_overlay)})
    assert proc.returncode == 1
    assert f"patch set {PatchSet.load().hash} (overlay)" in proc.stdout
    assert "routing: auto; table measured on: " in proc.stdout
    assert "selftest: FAIL: no CUDA device is visible: run it on a machine with an NVIDIA GPU" in proc.stderr


def test_make_test_upstream_with_the_overlay_reports_the_failures_it_brings(stock_python, staged_overlay, tmp_path):
    tests = tmp_path / "test"
    for selection in SELECTIONS:
        (tests / selection.file).parent.mkdir(parents=True, exist_ok=True)
        (tests / selection.file).write_text("def test_nn_conv2d_nn_functional_conv_nn_Conv2d_cuda():\n    pass\n")
    (tests / "nn/test_convolution.py").write_text(textwrap.dedent("""\
        import sys
        def test_depthwise_cuda():
            assert "dwconv_overlay" not in sys.modules, "fails only where the overlay is loaded"
        def test_plain_cuda():
            pass
    """))
    out = tmp_path / "out"
    # The pinned torch's environment has no pytest; the harness venv's (same Python) stands in.
    env = {**os.environ, "UPSTREAM_TESTS": str(tests), "UPSTREAM_OUT": str(out), "ALLOW_CPU": "1",
           "PYTHON_UNDER_TEST": stock_python, "WITH": "overlay", "PYTHONPATH": pytest_site()}
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "test-upstream"], cwd=REPO_ROOT,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error: 1 new failure(s) with the patch set" in proc.stderr
    summary = (out / "summary.md").read_text()
    assert "- `nn.test_convolution::test_depthwise_cuda`: failed (stock: passed)" in summary
    assert f"patch set {PatchSet.load().hash[:12]}, device none (CPU only)" in summary
    assert "(not a git checkout: the harness cannot verify which version these files are)" in summary
    assert "| patched | 6 | 1 | 0 | 0 | 0 | 0 |" in summary
    assert "| stock (baseline) | 7 | 0 | 0 | 0 | 0 | 0 |" in summary


def test_make_test_upstream_refuses_a_machine_without_a_gpu_or_pytest(stock_python, staged_overlay, tmp_path):
    # WITH empty, as make exports a variable nobody set: the overlay, the default.
    env = {**os.environ, "UPSTREAM_TESTS": str(tmp_path), "PYTHON_UNDER_TEST": stock_python, "WITH": ""}
    env.pop("ALLOW_CPU", None)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "test-upstream"], cwd=REPO_ROOT,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert ": pytest is not installed there; " in proc.stderr
    assert "no CUDA device is visible, so the tests would exercise none of our kernels" in proc.stderr
