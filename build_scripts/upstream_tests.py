"""`make test-upstream`: upstream's convolution tests, run against a patched torch and
against stock torch, with only the failures that the patch set brings counted.

A run is one pytest per selected test file, with a JUnit report each; outcomes are
keyed by test id, and the patched run is compared with the baseline run: a test
that fails (or errors, or is missing) with the patch set but not on stock torch is
a new failure, and only new failures fail the target.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .errors import HarnessError


@dataclass(frozen=True)
class UpstreamSelection:
    file: str              # relative to upstream's test/ directory
    keyword: str | None    # pytest -k expression, None for the whole file
    what: str


# The upstream tests that exercise convolution; CUDA instances only (our kernels are CUDA).
SELECTIONS = (
    UpstreamSelection("nn/test_convolution.py", None, "the convolution suite (depthwise, backends, cuDNN nhwc)"),
    UpstreamSelection("test_nn.py", "conv1d or conv2d or conv3d or convtranspose",
                      "the Conv* module tests generated from common_nn"),
    UpstreamSelection("test_ops.py", "nn_functional_conv", "conv OpInfos: dtypes, variants, noncontiguous, out="),
    UpstreamSelection("test_ops_gradients.py", "nn_functional_conv", "conv OpInfos: gradcheck, gradgradcheck"),
    UpstreamSelection("test_ops_fwd_gradients.py", "nn_functional_conv", "conv OpInfos: forward-mode AD"),
    UpstreamSelection("test_modules.py", "nn_Conv", "nn.Conv* ModuleInfos"),
)
# instantiate_device_type_tests makes CUDA instances only.
TEST_ENVIRONMENT = {"PYTORCH_TESTING_DEVICE_ONLY_FOR": "cuda", "PYTHONUNBUFFERED": "1"}
FAILING = ("failed", "error", "not run")
WHOLE_FILE = "::<whole file>"  # the id standing for a file whose pytest left no report


@dataclass(frozen=True)
class TorchUnderTest:
    """How to start a Python with the torch to test, and where it sees our directories."""
    label: str
    command: tuple[str, ...]                  # e.g. (python,) or (docker, run, ..., image, python)
    env: dict[str, str] = field(default_factory=dict)
    pytest_args: tuple[str, ...] = ()         # e.g. ("-p", "dwconv_overlay_plugin")
    tests_dir_seen: str | None = None         # the test dir as the command sees it (containers)
    out_dir_seen: str | None = None


def pytest_command(torch: TorchUnderTest, selection: UpstreamSelection, tests_dir: Path, report: Path) -> list[str]:
    test_root = torch.tests_dir_seen or str(tests_dir)
    report_seen = f"{torch.out_dir_seen}/{report.name}" if torch.out_dir_seen else str(report)
    cmd = [*torch.command, "-m", "pytest", f"{test_root}/{selection.file}", "-q", "-p", "no:cacheprovider",
           f"--junitxml={report_seen}", *torch.pytest_args]
    if selection.keyword:
        cmd += ["-k", selection.keyword]
    return cmd


def read_junit(report: Path) -> dict[str, str]:
    """test id -> passed, failed, error, skipped or xfailed, from a pytest JUnit report."""
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None:
            outcome = "failed"
        elif case.find("error") is not None:
            outcome = "error"
        elif (skipped := case.find("skipped")) is not None:
            outcome = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
        else:
            outcome = "passed"
        # A test that errors in teardown after passing appears twice; the worse one counts.
        if outcomes.get(test_id) not in ("failed", "error"):
            outcomes[test_id] = outcome
    return outcomes


def run_selection(torch: TorchUnderTest, selection: UpstreamSelection, tests_dir: Path, out_dir: Path,
                  name: str, timeout_s: int) -> dict[str, str]:
    report = out_dir / f"{name}-{selection.file.replace('/', '_').removesuffix('.py')}.xml"
    report.unlink(missing_ok=True)
    cmd = pytest_command(torch, selection, tests_dir, report)
    log = report.with_suffix(".log")
    print(f"[test-upstream] {name}: {selection.file}" + (f" -k {selection.keyword!r}" if selection.keyword else ""),
          file=sys.stderr, flush=True)
    env = {**os.environ, **TEST_ENVIRONMENT, **torch.env}
    with log.open("w") as log_file:
        log_file.write(f"$ {shlex.join(cmd)}\n")
        log_file.flush()
        try:
            proc = subprocess.run(cmd, cwd=tests_dir, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                  timeout=timeout_s)
            status = proc.returncode
        except subprocess.TimeoutExpired:
            status = f"timeout after {timeout_s} s"
    if report.is_file():
        return read_junit(report)
    # pytest died before writing its report (a crash, a timeout): one entry stands for the file.
    print(f"[test-upstream] {name}: {selection.file} left no report (status {status}); see {log}", file=sys.stderr)
    return {f"{selection.file}{WHOLE_FILE}": "error"}


@dataclass
class Comparison:
    patched: dict[str, str]
    baseline: dict[str, str]

    @property
    def new_failures(self) -> list[tuple[str, str, str]]:
        """(test id, outcome with the patch set, outcome on stock) for each failure the patch set brings."""
        ids = set(self.patched) | {t for t, o in self.baseline.items() if o == "passed"}
        rows = []
        for test_id in sorted(ids):
            ours = self.patched.get(test_id, "not run")
            stock = self.baseline.get(test_id, "not run")
            if ours in FAILING and stock not in FAILING:
                rows.append((test_id, ours, stock))
        return rows

    @property
    def unrun_files(self) -> list[str]:
        """Files that left no report in either run: a comparison that did not happen."""
        return sorted({t.removesuffix(WHOLE_FILE) for t in (*self.patched, *self.baseline) if t.endswith(WHOLE_FILE)})

    @property
    def fixed(self) -> list[str]:
        return sorted(t for t, o in self.baseline.items() if o in ("failed", "error")
                      and self.patched.get(t) == "passed")


def counts(outcomes: dict[str, str]) -> dict[str, int]:
    tally = Counter(outcomes.values())
    return {k: tally.get(k, 0) for k in ("passed", "failed", "error", "skipped", "xfailed", "not run")}


def summary_markdown(comparison: Comparison, context: dict[str, str]) -> str:
    lines = ["# Upstream convolution tests", ""]
    lines += [f"- {key}: {value}" for key, value in context.items()]
    lines += ["", "| run | " + " | ".join(counts({})) + " |", "|---" * (len(counts({})) + 1) + "|"]
    for name, outcomes in (("patched", comparison.patched), ("stock (baseline)", comparison.baseline)):
        lines.append(f"| {name} | " + " | ".join(str(v) for v in counts(outcomes).values()) + " |")
    new = comparison.new_failures
    lines += ["", f"## New failures: {len(new)}", ""]
    lines += [f"- `{test_id}`: {ours} (stock: {stock})" for test_id, ours, stock in new] or ["none"]
    if comparison.fixed:
        lines += ["", f"## Failing on stock, passing with the patch set: {len(comparison.fixed)}", ""]
        lines += [f"- `{test_id}`" for test_id in comparison.fixed]
    return "\n".join(lines) + "\n"


def run_all(torch: TorchUnderTest, tests_dir: Path, out_dir: Path, name: str,
            selections: tuple[UpstreamSelection, ...] = SELECTIONS, timeout_s: int = 3600) -> dict[str, str]:
    missing = [s.file for s in selections if not (tests_dir / s.file).is_file()]
    if missing:
        raise HarnessError(f"{tests_dir} lacks upstream test files: {', '.join(missing)}; set UPSTREAM_TESTS "
                           "to the test/ directory of a v2.11.0 checkout")
    outcomes: dict[str, str] = {}
    for selection in selections:
        outcomes.update(run_selection(torch, selection, tests_dir, out_dir, name, timeout_s))
    return outcomes


def write_results(out_dir: Path, comparison: Comparison, context: dict[str, str]) -> Path:
    (out_dir / "outcomes.json").write_text(json.dumps(
        {"context": context, "patched": comparison.patched, "baseline": comparison.baseline}, indent=1, sort_keys=True))
    summary = out_dir / "summary.md"
    summary.write_text(summary_markdown(comparison, context))
    return summary


def load_baseline(path: Path) -> dict[str, str]:
    """Stock torch's outcomes from an earlier run's outcomes.json (its baseline)."""
    try:
        return json.loads(path.read_text())["baseline"]
    except (OSError, ValueError, KeyError) as err:
        raise HarnessError(f"{path} is not an outcomes.json of `make test-upstream` ({err})") from None
