"""GPU tests whose bodies are run here before a GPU runs them (tests/run_gpu_test_on_cpu.py): in the
pinned torch with the real overlay imported and a pretend device, torch's CPU convolutions standing
in for our kernels. The test must pass with them, over every kernel path's call, and fail with each
planted bug. The kernels themselves are still owed a GPU."""

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

sys.path.insert(0, str(REPO_ROOT / "tests"))
from test_gpu_tests_collect import gpu_test_site  # noqa: E402

pytestmark = pytest.mark.l0  # the pinned torch and L0's staged overlay

INF_IN_GRAD_OUTPUT = "test_an_inf_in_grad_output_gives_either_weight_gradient_torch_gives"


@pytest.fixture(scope="module")
def run_on_cpu(overlay_probe):  # overlay_probe: L0 has built and staged the overlay
    python = ensure_runtime_env(load_pin(), cache_dir())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([gpu_test_site(python), str(DEFAULT_WORK_DIR / "overlay-staging")]))

    def run(test, stand_in, *paths):
        proc = subprocess.run([str(python), str(REPO_ROOT / "tests/run_gpu_test_on_cpu.py"), test, stand_in, *paths],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run


def test_an_inf_in_grad_output_passes_with_correct_stand_ins_over_every_kernel_path(run_on_cpu):
    assert run_on_cpu(INF_IN_GRAD_OUTPUT, "correct") == {"torch.float32": "pass", "torch.bfloat16": "pass"}


@pytest.mark.parametrize("planted, message", [("inf dropped", "the weight gradient alone"),
                                              ("grad_input signs lost", "its infinities")])
def test_an_inf_in_grad_output_fails_a_planted_bug(run_on_cpu, planted, message):
    found = run_on_cpu(INF_IN_GRAD_OUTPUT, planted, "register_tiled_grad_weight", "column")
    assert set(found) == {"torch.float32", "torch.bfloat16"}
    assert all(message in verdict for verdict in found.values()), found
