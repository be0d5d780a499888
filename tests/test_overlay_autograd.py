"""The derivatives our overrides set, checked on the CPU through the real overlay.

L0 builds the overlay, including the Autograd kernels that build_scripts/torchgen_overlay.py
generates from the merged derivatives.yaml. tests/run_autograd_on_cpu.py loads it into the
pinned torch (no GPU), lets torch's grouped convolution stand in for the CUDA kernels, and
runs the float64 checks of tests/depthwise_autograd.py with the overlay enabled and disabled.
The GPU tests (tests/gpu/test_depthwise_autograd.py) run the same checks on the real kernels.
"""

import json
import subprocess

import pytest

from build_scripts import REPO_ROOT
from build_scripts.check import DEFAULT_WORK_DIR, run_l0
from build_scripts.patchset import PatchSet
from build_scripts.pin import load_pin
from build_scripts.runtime_env import ensure_runtime_env
from build_scripts.wheel_cache import cache_dir

pytestmark = pytest.mark.l0

DERIVATIVE_CHECKS = ["gradcheck", "gradgradcheck", "forward_ad", "func_jvp", "forward_over_reverse"]
BACKWARD_OP_CHECKS = ["backward_op_reference", "backward_op_gradcheck", "profiler_names"]


@pytest.fixture(scope="module")
def outcomes():
    pin = load_pin()
    run_l0(pin, PatchSet.load())  # stages the overlay in build/l0 (reuses `make check`'s work)
    python = ensure_runtime_env(pin, cache_dir())
    proc = subprocess.run([str(python), str(REPO_ROOT / "tests" / "run_autograd_on_cpu.py"),
                           str(DEFAULT_WORK_DIR / "overlay-staging")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def by_check(outcomes, check):
    return {key: value for key, value in outcomes.items() if key.split("/")[0] == check}


@pytest.mark.parametrize("check", DERIVATIVE_CHECKS + BACKWARD_OP_CHECKS)
def test_every_case_passes_through_the_overlay(outcomes, check):
    results = by_check(outcomes, check)
    assert len(results) == 5 and any("/2d_" in k for k in results) and any("/3d_" in k for k in results)
    failed = {key: value["overlay"] for key, value in results.items() if value["overlay"] != "pass"}
    assert not failed


@pytest.mark.parametrize("check", DERIVATIVE_CHECKS)
def test_stock_formulas_fail_every_case(outcomes, check):
    """The fix is proven, not assumed: upstream's formulas fail the same checks."""
    stock = {key: value["stock"] for key, value in by_check(outcomes, check).items()}
    assert all(outcome != "pass" for outcome in stock.values()), stock
    expected = ("expected input" if check in ("gradcheck", "gradgradcheck", "forward_over_reverse")
                else "Trying to use forward AD with")
    assert all(expected in outcome for outcome in stock.values()), stock


def test_stock_has_no_derivatives_for_the_backward_ops(outcomes):
    """Disabled, the backward op's outputs come from the stand-in's own graph, not from its
    derivatives entry; and a direct call's backward fails before it could run the op."""
    gradchecks = {key: value["stock"] for key, value in by_check(outcomes, "backward_op_gradcheck").items()}
    assert all(outcome.startswith("AssertionError: the backward op's outputs come from") for outcome in gradchecks.values())
    profiled = {key: value["stock"] for key, value in by_check(outcomes, "profiler_names").items()}
    assert all("expected input" in outcome for outcome in profiled.values()), profiled


def test_what_the_overlay_cannot_mirror(outcomes):
    """A patched build binds the new ops in torch._C._nn too; the overlay cannot add
    generated Python bindings to a stock torch, so there they are torch.ops.aten only."""
    gaps = outcomes["gaps"]
    assert gaps["torch._C._nn binding"] is False
    assert gaps["torch.ops.aten"].startswith("aten::_conv_depthwise2d_backward(Tensor grad_output, Tensor self")
