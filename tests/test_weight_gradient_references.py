"""The float64 references the GPU tests hold an inf in grad_output to
(tests/gpu/weight_gradient_references.py), checked in the pinned torch on the CPU
(tests/run_weight_gradient_references_on_cpu.py): with finite data both are torch's weight
gradient; with an inf in grad_output one is torch's float64 CPU answer (the padding's zeros
multiplied in) and the other the sum of the terms inside the plane; the element-by-element match
takes either and nothing else."""

import json
import subprocess

import pytest

from build_scripts import REPO_ROOT

pytestmark = pytest.mark.l0  # the pinned torch


@pytest.fixture(scope="module")
def found():
    from build_scripts.pin import load_pin
    from build_scripts.runtime_env import ensure_runtime_env
    from build_scripts.wheel_cache import cache_dir
    python = ensure_runtime_env(load_pin(), cache_dir())
    proc = subprocess.run([str(python), str(REPO_ROOT / "tests" / "run_weight_gradient_references_on_cpu.py")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


CASES = ["3x3 padding 1", "5x5 stride 2, multiplier 2", "3x3 dilation 2, padding 1 by 2", "1x4 padding 3 (conv1d)"]


@pytest.mark.parametrize("finding", ["finite", "zero_padded", "in_bounds", "padding_met"])
def test_each_reference_is_what_it_says_on_every_case(found, finding):
    assert found[finding] == dict.fromkeys(CASES, True)


def test_the_match_takes_either_reference_and_refuses_the_rest(found):
    assert found["accepts"] == dict.fromkeys(
        ["in_bounds", "zero_padded", "a mix", "NaN where both are finite", "finite where both are inf",
         "an inf of the other sign", "1e-3 off", "every kind of element met"], True)
