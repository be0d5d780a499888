"""The bench variants' argument mappings, run on the CPU in the pinned torch (float64):
tests/run_bench_variants_on_cpu.py checks the generic passes (stock, native, routed) and the
cuDNN variant's gradients, written as transposed convolutions, against autograd, for a
shrunken copy of every kernel size, stride and bias of the layer sets, in both layouts."""

import json
import subprocess

import pytest

from build_scripts import REPO_ROOT
from build_scripts.pin import load_pin
from build_scripts.runtime_env import ensure_runtime_env
from build_scripts.wheel_cache import cache_dir

pytestmark = pytest.mark.l0  # needs the pinned torch (installed once, cached with L0's)


@pytest.fixture(scope="module")
def outcomes():
    python = ensure_runtime_env(load_pin(), cache_dir())
    proc = subprocess.run([str(python), str(REPO_ROOT / "tests" / "run_bench_variants_on_cpu.py")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("group", ["generic/forward", "generic/backward_input", "generic/backward_weight",
                                   "generic/step", "cudnn/backward_input", "cudnn/backward_weight", "layout"])
def test_every_geometry_matches_autograd(outcomes, group):
    results = {k: v for k, v in outcomes.items() if k.startswith(group + "/")}
    assert len(results) >= 20  # every geometry of the sets, two lengths (and layouts)
    assert any("conv1d" in k for k in results) and any("k31" in k for k in results) and any(" s2 " in k for k in results)
    assert {k: v for k, v in results.items() if v != "pass"} == {}


def test_the_float64_check_checks_every_pass_and_fails_a_variant_off_by_five_percent(outcomes):
    results = {k: v for k, v in outcomes.items() if k.startswith("check/")}
    assert len(results) >= 40 and any("conv1d" in k for k in results) and any("bfloat16" in k for k in results)
    assert {k: v for k, v in results.items() if v != "pass"} == {}


def test_cudnn_settings_set_the_named_flags_alone_and_work_once_the_flags_are_frozen(outcomes):
    results = {k: v for k, v in outcomes.items() if k.startswith("cudnn_settings/")}
    assert results == {"cudnn_settings/unfrozen": "pass", "cudnn_settings/frozen": "pass"}


def test_a_lost_cuda_context_stops_the_check_and_the_run_where_it_happened(outcomes):
    results = {k: v for k, v in outcomes.items() if k.startswith("context/")}
    assert results == {"context/a run on the cpu has no context to lose": "pass",
                       "context/a failure that leaves the context goes on": "pass",
                       "context/a lost context stops the check": "pass",
                       "context/run_bench stops at a lost context": "pass"}


def test_a_bench_with_kernel_paths_off_records_them_and_refuses_to_time_one_again(outcomes):
    results = {k: v for k, v in outcomes.items() if k.startswith("paths_off/")}
    assert results == {"paths_off/recorded, and look-back leaves them out": "pass",
                       "paths_off/an ours-without of a path already off is refused": "pass"}
