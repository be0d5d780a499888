"""The overlay's run-time switches, in the real overlay loaded into the pinned torch on the CPU:
the routing (dwconv_overlay.set_routing / routing, DWCONV_ROUTING at start) and the kernel paths
(dwconv_overlay.disable_kernels / disabled_kernels / kernel_paths, DWCONV_DISABLE_KERNELS at
start). A bad value is an error that names it. CPU convolutions are untouched by the overlay's
CUDA kernels."""

import os
import subprocess

import pytest

from build_scripts import REPO_ROOT
from build_scripts.check import DEFAULT_WORK_DIR, run_l0
from build_scripts.patchset import PatchSet
from build_scripts.pin import load_pin
from build_scripts.runtime_env import ensure_runtime_env
from build_scripts.wheel_cache import cache_dir

pytestmark = pytest.mark.l0

SWITCHES_FROM_THE_ENVIRONMENT = ("DWCONV_ROUTING", "DWCONV_DISABLE_KERNELS")
PROLOGUE = """
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {staging!r})
import torch, dwconv_overlay
"""
ROUTING = """
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


KERNEL_PATHS = """
try:
    print("start", ",".join(dwconv_overlay.disabled_kernels()))
except RuntimeError as err:
    print("error", str(err).splitlines()[0])
    sys.exit(0)
print("paths", ",".join(dwconv_overlay.kernel_paths()))
dwconv_overlay.disable_kernels(["register_tiled", "row"])
print("set", ",".join(dwconv_overlay.disabled_kernels()))
try:
    dwconv_overlay.disable_kernels(["large_filter", "fastest"])
except RuntimeError as err:
    print("refused", str(err).splitlines()[0])
print("kept", ",".join(dwconv_overlay.disabled_kernels()))
dwconv_overlay.disable_kernels("column")
print("one", ",".join(dwconv_overlay.disabled_kernels()))
dwconv_overlay.disable_kernels([])
print("none", ",".join(dwconv_overlay.disabled_kernels()))
"""

# The bench's variants (build_scripts/bench/variants.py) set the switches around each timing.
BENCH_VARIANTS = """
sys.path.insert(0, {repo!r})
from build_scripts.bench.variants import Overlay
overlay = Overlay(dwconv_overlay)
def state():
    return dwconv_overlay.enabled(), dwconv_overlay.disabled_kernels(), dwconv_overlay.routing()
dwconv_overlay.set_routing("upstream")
for name in ("stock", "ours", "ours-without-row", "routed"):
    with overlay.variant(name):
        print(name, *state())
print("after", *state())
"""


@pytest.fixture(scope="module")
def probe():
    """probe(code, **environment): the lines `code` prints in the pinned torch with the overlay
    imported, with only the given switches in its environment."""
    pin = load_pin()
    run_l0(pin, PatchSet.load())
    python = ensure_runtime_env(pin, cache_dir())
    prologue = PROLOGUE.format(staging=str(DEFAULT_WORK_DIR / "overlay-staging"))

    def run(code, **switches):
        env = {k: v for k, v in os.environ.items() if k not in SWITCHES_FROM_THE_ENVIRONMENT}
        env.update(switches)
        proc = subprocess.run([str(python), "-c", prologue + code], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.splitlines()
    return run


def test_routing_modes_switch_and_a_bad_one_is_refused(probe):
    lines = probe(ROUTING)
    assert lines[:4] == ["start auto", "set ours", "set upstream", "set auto"]
    assert lines[4] == "refused dwconv routing must be auto, ours or upstream, got 'fastest'"
    assert lines[5].startswith("measured ")
    assert lines[6] == "cpu True"


def test_the_environment_sets_the_starting_mode(probe):
    assert probe(ROUTING, DWCONV_ROUTING="upstream")[0] == "start upstream"
    assert probe(ROUTING, DWCONV_ROUTING="fastest") == [
        "error DWCONV_ROUTING must be auto, ours or upstream, got 'fastest'"]


ALL_PATHS = ("channels_last_tiled,register_tiled,register_tiled_grad_weight,channels_last_register_grad_weight,"
             "large_filter,large_filter_grad_weight,row,column,stride2_grad_input,register_tiled_stride2,"
             "tile_vector_loads")
UNKNOWN_PATH = "no depthwise kernel path is called 'fastest'; the paths are " + ALL_PATHS.replace(",", ", ")


def test_kernel_paths_switch_off_and_on_and_an_unknown_one_is_refused(probe):
    assert probe(KERNEL_PATHS) == [
        "start ", "paths " + ALL_PATHS, "set register_tiled,row",
        "refused dwconv.disable_kernels: " + UNKNOWN_PATH,
        "kept register_tiled,row",  # a refused list changes nothing
        "one column", "none "]


def test_the_environment_sets_the_starting_kernel_paths(probe):
    assert probe(KERNEL_PATHS, DWCONV_DISABLE_KERNELS=" tile_vector_loads, large_filter ,")[0] == \
        "start large_filter,tile_vector_loads"
    assert probe(KERNEL_PATHS, DWCONV_DISABLE_KERNELS="row,fastest") == [
        "error DWCONV_DISABLE_KERNELS: " + UNKNOWN_PATH]


def test_each_bench_variant_sets_the_switches_and_puts_them_back(probe):
    assert probe(BENCH_VARIANTS.format(repo=str(REPO_ROOT))) == [
        "stock False [] upstream", "ours True [] upstream", "ours-without-row True ['row'] upstream",
        "routed True [] auto", "after True [] upstream"]
