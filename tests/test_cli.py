"""The verbs as a user types them: make help, and the harness CLI behind each make verb."""

import os
import subprocess
import sys

from build_scripts import REPO_ROOT

VERBS = ("source patch unpatch check overlay build build-local docker test lint test-gpu test-upstream bench "
         "bench-report routing-table resource-report gpu-session gpu-plan gpu-plan-estimate gpu-plan-import clean").split()


def harness(*args, env=None):
    return subprocess.run([sys.executable, "-m", "build_scripts", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_make_help_lists_every_verb():
    out = subprocess.run(["make", "-s", "help"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("  make ")]
    assert set(VERBS) <= set(listed)


def test_bench_without_a_gpu_says_so(tmp_path):
    proc = harness("bench", "run", "--results", str(tmp_path))
    assert proc.returncode != 0
    assert proc.stderr.startswith("error: make bench ")
    assert "has no torch" in proc.stderr or "needs a CUDA device" in proc.stderr
    assert not any(tmp_path.iterdir())


def test_cudnn_benchmark_comes_from_make_s_variable(monkeypatch):
    from build_scripts.__main__ import build_parser
    for value, expected in (("1", True), ("", False), ("0", False)):
        monkeypatch.setenv("CUDNN_BENCHMARK", value)
        assert build_parser().parse_args(["bench", "run"]).cudnn_benchmark is expected
    assert build_parser().parse_args(["bench", "models", "--cudnn-benchmark"]).cudnn_benchmark


def test_bench_and_plan_report_refuse_a_configuration_they_do_not_know(tmp_path):
    for args in (("bench", "run", "--results", str(tmp_path)), ("plan-report",)):
        proc = harness(*args, env={"CONFIGS": "float32/nhwc"})
        assert proc.returncode != 0
        assert "unknown configuration 'float32/nhwc'" in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir())


def test_bench_report_and_routing_table_name_what_they_need(tmp_path):
    proc = harness("bench", "report", str(tmp_path / "missing.json"))
    assert proc.returncode == 1 and "no such report" in proc.stderr
    proc = harness("routing-table", env={"BENCH": ""})
    assert proc.returncode == 1 and "name the bench reports" in proc.stderr


def test_patch_on_a_checkout_of_another_commit(fake_tree):
    tree, commit = fake_tree
    proc = harness("patch", env={"PYTORCH_SRC": str(tree)})
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ")
    assert f"is at commit {commit}" in proc.stderr
    assert "the pin is PyTorch v2.11.0 (70d99e998b4955e0049d13a98d77ae1b14db1f45)" in proc.stderr
    assert subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True).stdout == ""


def test_source_on_a_directory_that_is_not_a_checkout(tmp_path):
    proc = harness("source", env={"PYTORCH_SRC": str(tmp_path)})
    assert proc.returncode == 1
    assert "is not the root of a git checkout of PyTorch" in proc.stderr


def test_unpatch_of_an_unpatched_tree_is_a_no_op(fake_tree):
    proc = harness("unpatch", env={"PYTORCH_SRC": str(fake_tree[0])})
    assert proc.returncode == 0
    assert "no patch set is applied; nothing to do" in proc.stdout


def test_series_prints_the_hash():
    proc = harness("series")
    assert proc.returncode == 0
    assert proc.stdout.startswith("patch set ") and len(proc.stdout.split()[2]) == 64
