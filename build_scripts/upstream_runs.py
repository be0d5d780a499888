"""Which torch `make test-upstream` tests, and against which baseline.

  WITH=overlay  stock torch in PYTHON_UNDER_TEST with the overlay loaded; baseline: the
                same Python without it (the default, and what a GPU machine can run)
  WITH=local    a Python with a `make build` wheel installed; baseline: STOCK_PYTHON,
                or BASELINE=<outcomes.json> of an earlier run
  WITH=image    the runtime image from `make docker`; baseline as for local
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError
from .gitutil import head_commit, is_worktree_root
from .pin import Pin
from .upstream_tests import TEST_ENVIRONMENT, Comparison, TorchUnderTest, load_baseline, run_all, write_results

PLUGIN_DIR = REPO_ROOT / "build_scripts" / "pytest_plugins"
DEFAULT_OVERLAY_DIR = REPO_ROOT / "build" / "l0" / "overlay-staging"
CONTAINER_TESTS = "/upstream/test"
CONTAINER_OUT = "/upstream/out"

_PROBE = """
import importlib.util, json, torch
try:
    import dwconv_overlay
    overlay = dwconv_overlay.PATCHSET_HASH if dwconv_overlay.enabled() else None
except ImportError:
    overlay = None
try:
    from torch import _dwconv_patchset
    built = _dwconv_patchset.PATCHSET_HASH
except ImportError:
    built = None
cuda = torch.cuda.is_available()
print(json.dumps({"version": torch.__version__, "commit": torch.version.git_version, "cuda": cuda,
                  "device": torch.cuda.get_device_name() if cuda else None, "overlay": overlay, "built": built,
                  "pytest": importlib.util.find_spec("pytest") is not None}))
"""


@dataclass(frozen=True)
class Plan:
    patched: TorchUnderTest
    baseline: TorchUnderTest | None     # None: the baseline comes from baseline_file
    baseline_file: Path | None


def overlay_torch(python: str, overlay_dir: Path, environ: dict[str, str] | None = None) -> TorchUnderTest:
    if not (overlay_dir / "dwconv_overlay" / "__init__.py").is_file():
        raise HarnessError(f"no staged overlay in {overlay_dir}: run `make overlay` first (or set DWCONV_OVERLAY_DIR)")
    inherited = (os.environ if environ is None else environ).get("PYTHONPATH")
    return TorchUnderTest(
        label=f"overlay {overlay_dir} on stock torch ({python})",
        command=(python,),
        env={"PYTHONPATH": ":".join(filter(None, (str(overlay_dir), str(PLUGIN_DIR), inherited)))},
        pytest_args=("-p", "dwconv_overlay_plugin"),
    )


def plain_torch(python: str, label: str) -> TorchUnderTest:
    return TorchUnderTest(label=f"{label} ({python})", command=(python,))


def image_torch(image: str, tests_dir: Path, out_dir: Path) -> TorchUnderTest:
    env_flags = [flag for key, value in TEST_ENVIRONMENT.items() for flag in ("-e", f"{key}={value}")]
    return TorchUnderTest(
        label=f"image {image}",
        command=("docker", "run", "--rm", "--gpus", "all", *env_flags,
                 "-v", f"{tests_dir}:{CONTAINER_TESTS}:ro", "-v", f"{out_dir}:{CONTAINER_OUT}",
                 "-w", CONTAINER_TESTS, "--entrypoint", "python", image),
        tests_dir_seen=CONTAINER_TESTS,
        out_dir_seen=CONTAINER_OUT,
    )


def plan(mode: str, *, python: str, stock_python: str | None, image: str | None, baseline_file: Path | None,
         overlay_dir: Path, tests_dir: Path, out_dir: Path) -> Plan:
    if mode == "overlay":
        return Plan(overlay_torch(python, overlay_dir), plain_torch(python, "stock torch"), None)
    if mode == "local":
        patched = plain_torch(python, "local build")
    elif mode == "image":
        if not image:
            raise HarnessError("WITH=image needs IMAGE=<tag> (the tag `make docker` printed)")
        patched = image_torch(image, tests_dir, out_dir)
    else:
        raise HarnessError(f"WITH={mode!r}: expected overlay, local or image")
    if stock_python:
        return Plan(patched, plain_torch(stock_python, "stock torch"), None)
    if baseline_file:
        return Plan(patched, None, baseline_file)
    raise HarnessError(f"WITH={mode} needs a stock-torch baseline: STOCK_PYTHON=<python with torch "
                       "2.11.0+cu130>, or BASELINE=<outcomes.json of an earlier run>")


def probe(torch: TorchUnderTest) -> dict:
    """Versions, GPU and patch state of the torch the tests would run on."""
    proc = subprocess.run([*torch.command, "-c", _PROBE], capture_output=True, text=True,
                          env={**os.environ, **torch.env})
    if proc.returncode != 0:
        raise HarnessError(f"{torch.label}: torch does not import:\n{proc.stderr.strip()[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_probe(facts: dict, pin: Pin, torch: TorchUnderTest, *, patched: bool, allow_cpu: bool) -> None:
    problems = []
    if not facts["pytest"]:
        problems.append("pytest is not installed there")
    if facts["commit"] != pin.commit:
        problems.append(f"its torch is {facts['version']} at commit {facts['commit']}, not the pinned {pin.commit}")
    if patched and not (facts["overlay"] or facts["built"]):
        problems.append("it carries no patch set (no torch._dwconv_patchset, no enabled dwconv_overlay)")
    if not patched and (facts["overlay"] or facts["built"]):
        problems.append("the baseline carries the patch set; it must be stock torch")
    if not facts["cuda"] and not allow_cpu:
        problems.append("no CUDA device is visible, so the tests would exercise none of our kernels")
    if problems:
        raise HarnessError(f"{torch.label}: " + "; ".join(problems))


def describe_test_files(tests_dir: Path, pin: Pin) -> str:
    """Where the test files come from, for the summary; the pinned checkout's test/ is checked."""
    checkout = tests_dir.parent
    if tests_dir.name == "test" and is_worktree_root(checkout):
        commit = head_commit(checkout)
        if commit != pin.commit:
            raise HarnessError(f"{tests_dir} belongs to a checkout at {commit}, not the pinned {pin.commit}")
        return f"{tests_dir} (checkout at the pinned commit {commit[:12]})"
    return f"{tests_dir} (not a git checkout: the harness cannot verify which version these files are)"


def run_test_upstream(pin: Pin, the_plan: Plan, tests_dir: Path, out_dir: Path, *, allow_cpu: bool = False,
                      timeout_s: int = 3600) -> Comparison:
    context = {"test files": describe_test_files(tests_dir, pin)}
    patched_facts = probe(the_plan.patched)
    check_probe(patched_facts, pin, the_plan.patched, patched=True, allow_cpu=allow_cpu)
    context["patched"] = (f"{the_plan.patched.label}: torch {patched_facts['version']}, patch set "
                          f"{(patched_facts['overlay'] or patched_facts['built'])[:12]}, "
                          f"device {patched_facts['device'] or 'none (CPU only)'}")
    out_dir.mkdir(parents=True, exist_ok=True)
    if the_plan.baseline is not None:
        baseline_facts = probe(the_plan.baseline)
        check_probe(baseline_facts, pin, the_plan.baseline, patched=False, allow_cpu=allow_cpu)
        context["baseline"] = f"{the_plan.baseline.label}: torch {baseline_facts['version']}"
    else:
        context["baseline"] = f"stock-torch outcomes from {the_plan.baseline_file}"
    patched = run_all(the_plan.patched, tests_dir, out_dir, "patched", timeout_s=timeout_s)
    if the_plan.baseline is not None:
        baseline = run_all(the_plan.baseline, tests_dir, out_dir, "baseline", timeout_s=timeout_s)
    else:
        baseline = load_baseline(the_plan.baseline_file)
    comparison = Comparison(patched, baseline)
    summary = write_results(out_dir, comparison, context)
    print(summary.read_text())
    print(f"[test-upstream] summary: {summary}, outcomes: {out_dir / 'outcomes.json'}")
    if comparison.unrun_files:
        raise HarnessError("these test files did not run (so nothing was compared for them); see the logs in "
                           f"{out_dir}: " + ", ".join(comparison.unrun_files))
    return comparison
