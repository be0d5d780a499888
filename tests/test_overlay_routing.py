"""The routing's switches in the real overlay, loaded into the pinned torch on the CPU:
dwconv_overlay.set_routing / routing, DWCONV_ROUTING at start (a bad value is an error
that names it), and CPU convolutions untouched by the overlay's CUDA kernels."""

import os
import subprocess

import pytest

from build_scripts.check import DEFAULT_WORK_DIR, run_l0
from build_scripts.patchset import PatchSet
from build_scripts.pin import load_pin
from build_scripts.runtime_env import ensure_runtime_env
from build_scripts.wheel_cache import cache_dir

pytestmark = pytest.mark.l0

PROBE = """
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {staging!r})
import torch, dwconv_overlay
try:
    print("start", dwconv_overlay.routing())
except RuntimeError as err:
    print("error", str(err).splitlines()[0])
    sys.exit(0)
for mode in ("ours", "upstream", "auto"):
    dwconv_overlay.set_routing(mode)
    print("set", dwconv_overlay.routing())
try:
    dwconv_overlay.set_routing("fastest")
except RuntimeError as err:
    print("refused", str(err).splitlines()[0])
print("measured", dwconv_overlay.routing_measured_on())
x, w = torch.randn(2, 6, 9, 9, dtype=torch.float64), torch.randn(6, 1, 3, 3, dtype=torch.float64)
dwconv_overlay.set_routing("ours")
ours = torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 6)
dwconv_overlay.disable()
print("cpu", torch.equal(ours, torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 6)))
"""


@pytest.fixture(scope="module")
def probe():
    pin = load_pin()
    run_l0(pin, PatchSet.load())
    python = ensure_runtime_env(pin, cache_dir())
    code = PROBE.format(staging=str(DEFAULT_WORK_DIR / "overlay-staging"))

    def run(routing_env=None):
        env = {k: v for k, v in os.environ.items() if k != "DWCONV_ROUTING"}
        if routing_env is not None:
            env["DWCONV_ROUTING"] = routing_env
        proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.splitlines()
    return run


def test_routing_modes_switch_and_a_bad_one_is_refused(probe):
    lines = probe()
    assert lines[:4] == ["start auto", "set ours", "set upstream", "set auto"]
    assert lines[4] == "refused dwconv routing must be auto, ours or upstream, got 'fastest'"
    assert lines[5].startswith("measured ")
    assert lines[6] == "cpu True"


def test_the_environment_sets_the_starting_mode(probe):
    assert probe("upstream")[0] == "start upstream"
    assert probe("fastest") == ["error DWCONV_ROUTING must be auto, ours or upstream, got 'fastest'"]
