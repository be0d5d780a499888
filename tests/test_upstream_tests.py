"""`make test-upstream` without a GPU: the selection, the JUnit reading, the comparison
with stock torch, and a whole run on a stand-in upstream test/ directory whose tests
behave differently when DWCONV_FAKE_PATCHED is set (standing in for the patch set)."""

import json
import subprocess
import sys
import textwrap

import pytest

from build_scripts import REPO_ROOT
from build_scripts.errors import HarnessError
from build_scripts.pin import load_pin
from build_scripts.upstream_runs import DEFAULT_OVERLAY_DIR, check_probe, overlay_torch, plan, describe_test_files
from build_scripts.upstream_tests import (
    SELECTIONS,
    Comparison,
    TorchUnderTest,
    load_baseline,
    read_junit,
    run_all,
    summary_markdown,
    write_results,
)

PATCHED = "os.environ.get('DWCONV_FAKE_PATCHED') == '1'"
FAKE_TESTS = {
    "nn/test_convolution.py": f"""
        import os
        def test_conv_backend_cuda_depthwise2d():
            assert not {PATCHED}, "our kernel broke this"
        def test_conv_broken_upstream_too():
            assert False
        def test_conv_fixed_by_us():
            assert {PATCHED}
        def test_conv_skipped():
            import pytest; pytest.skip("needs 20 GB")
    """,
    "test_nn.py": """
        def test_Conv2d_depthwise_cuda():
            pass
        def test_unrelated_module():
            assert False, "not selected by -k, so never run"
    """,
    "test_ops.py": """
        import pytest
        @pytest.mark.xfail(reason="known")
        def test_dtypes_nn_functional_conv2d_cuda():
            assert False
    """,
    "test_ops_gradients.py": "def test_fn_grad_nn_functional_conv2d_cuda_float64():\n    pass\n",
    "test_ops_fwd_gradients.py": "def test_forward_mode_AD_nn_functional_conv2d_cuda_float64():\n    pass\n",
    "test_modules.py": "def test_forward_nn_Conv2d_cuda_float32():\n    pass\n",
}


@pytest.fixture
def fake_upstream(tmp_path):
    tests = tmp_path / "upstream" / "test"
    for name, body in FAKE_TESTS.items():
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text(textwrap.dedent(body))
    return tests


def python_under_test(patched: bool) -> TorchUnderTest:
    return TorchUnderTest(label="patched" if patched else "stock", command=(sys.executable,),
                          env={"DWCONV_FAKE_PATCHED": "1" if patched else "0"})


def test_a_run_counts_only_the_failures_the_patch_set_brings(fake_upstream, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    patched = run_all(python_under_test(True), fake_upstream, out, "patched")
    baseline = run_all(python_under_test(False), fake_upstream, out, "baseline")
    comparison = Comparison(patched, baseline)
    assert comparison.new_failures == [
        ("nn.test_convolution::test_conv_backend_cuda_depthwise2d", "failed", "passed")]
    assert comparison.fixed == ["nn.test_convolution::test_conv_fixed_by_us"]
    assert patched["nn.test_convolution::test_conv_broken_upstream_too"] == "failed"  # but not new
    assert patched["nn.test_convolution::test_conv_skipped"] == "skipped"
    assert patched["test_ops::test_dtypes_nn_functional_conv2d_cuda"] == "xfailed"
    assert "test_nn::test_unrelated_module" not in patched  # -k kept it out
    assert len(patched) == 9
    summary = write_results(out, comparison, {"test files": str(fake_upstream)}).read_text()
    assert "## New failures: 1\n\n- `nn.test_convolution::test_conv_backend_cuda_depthwise2d`: failed (stock: passed)" in summary
    assert "| patched | 5 | 2 | 0 | 1 | 1 | 0 |" in summary  # passed failed error skipped xfailed not-run
    assert load_baseline(out / "outcomes.json") == baseline


def test_a_test_file_that_crashes_counts_as_an_error(fake_upstream, tmp_path):
    (fake_upstream / "test_modules.py").write_text("import os\nos._exit(139)\n")  # dies in collection, no report
    out = tmp_path / "out"
    out.mkdir()
    outcomes = run_all(python_under_test(True), fake_upstream, out, "patched",
                       selections=tuple(s for s in SELECTIONS if s.file == "test_modules.py"))
    assert outcomes == {"test_modules.py::<whole file>": "error"}
    assert Comparison(outcomes, {"x::y": "passed"}).unrun_files == ["test_modules.py"]  # fails the target
    assert (out / "patched-test_modules.log").read_text().startswith("$ ")


def test_missing_test_files_are_named(tmp_path):
    with pytest.raises(HarnessError, match=r"lacks upstream test files: nn/test_convolution.py, .*set UPSTREAM_TESTS"):
        run_all(python_under_test(True), tmp_path, tmp_path, "patched")


def test_tests_missing_from_the_patched_run_are_new_failures():
    comparison = Comparison(patched={"a::x": "passed"}, baseline={"a::x": "passed", "a::y": "passed", "a::z": "skipped"})
    assert comparison.new_failures == [("a::y", "not run", "passed")]


def test_failures_shared_with_stock_are_not_new():
    comparison = Comparison(patched={"a::x": "error", "a::y": "failed"}, baseline={"a::x": "failed", "a::y": "skipped"})
    assert comparison.new_failures == [("a::y", "failed", "skipped")]


def test_junit_outcomes(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text("""<?xml version="1.0"?><testsuites><testsuite>
      <testcase classname="m.C" name="ok"/>
      <testcase classname="m.C" name="bad"><failure message="x"/></testcase>
      <testcase classname="m.C" name="err"><error message="x"/></testcase>
      <testcase classname="m.C" name="skip"><skipped type="pytest.skip" message="x"/></testcase>
      <testcase classname="m.C" name="xf"><skipped type="pytest.xfail" message="x"/></testcase>
      <testcase classname="m.C" name="teardown"/>
      <testcase classname="m.C" name="teardown"><error message="teardown"/></testcase>
    </testsuite></testsuites>""")
    assert read_junit(report) == {"m.C::ok": "passed", "m.C::bad": "failed", "m.C::err": "error",
                                  "m.C::skip": "skipped", "m.C::xf": "xfailed", "m.C::teardown": "error"}


def test_selection_covers_the_upstream_convolution_tests():
    files = [s.file for s in SELECTIONS]
    assert files == ["nn/test_convolution.py", "test_nn.py", "test_ops.py", "test_ops_gradients.py",
                     "test_ops_fwd_gradients.py", "test_modules.py"]


def test_summary_without_new_failures_says_none():
    text = summary_markdown(Comparison({"a::x": "passed"}, {"a::x": "passed"}), {"device": "H100"})
    assert "- device: H100" in text and "## New failures: 0\n\nnone" in text


# -- which torch, which baseline --------------------------------------------------

def test_plans(tmp_path):
    common = dict(python="py", stock_python=None, image=None, baseline_file=None, overlay_dir=tmp_path,
                  tests_dir=tmp_path, out_dir=tmp_path)
    with pytest.raises(HarnessError, match=r"no staged overlay in .*: run `make overlay` first"):
        plan("overlay", **common)
    with pytest.raises(HarnessError, match="WITH=local needs a stock-torch baseline: STOCK_PYTHON=.*BASELINE="):
        plan("local", **common)
    with pytest.raises(HarnessError, match="WITH=image needs IMAGE=<tag>"):
        plan("image", **common)
    with pytest.raises(HarnessError, match="WITH='wheel': expected overlay, local or image"):
        plan("wheel", **common)
    image_plan = plan("image", **{**common, "image": "dw:1", "stock_python": "stock-py"})
    cmd = image_plan.patched.command
    assert cmd[:5] == ("docker", "run", "--rm", "--gpus", "all") and cmd[-1] == "dw:1"
    assert f"{tmp_path}:/upstream/test:ro" in cmd and "PYTORCH_TESTING_DEVICE_ONLY_FOR=cuda" in cmd
    assert image_plan.baseline.command == ("stock-py",)
    assert plan("local", **{**common, "baseline_file": tmp_path / "o.json"}).baseline_file == tmp_path / "o.json"


def test_the_overlay_plan_loads_the_overlay_through_a_pytest_plugin(tmp_path):
    (tmp_path / "dwconv_overlay").mkdir()
    (tmp_path / "dwconv_overlay" / "__init__.py").write_text("")
    torch = overlay_torch("py", tmp_path)
    assert torch.pytest_args == ("-p", "dwconv_overlay_plugin")
    assert torch.env["PYTHONPATH"].split(":")[0] == str(tmp_path)
    assert DEFAULT_OVERLAY_DIR == REPO_ROOT / "build" / "l0" / "overlay-staging"


@pytest.mark.parametrize("enabled, expect", [("True", "dwconv overlay: patch set 0123456789ab, enabled"),
                                             ("False", "dwconv_overlay loaded but is disabled")])
def test_overlay_plugin_refuses_a_disabled_overlay(tmp_path, enabled, expect):
    overlay = tmp_path / "dwconv_overlay"
    overlay.mkdir()
    (overlay / "__init__.py").write_text(f"PATCHSET_HASH = '0123456789abcdef'\ndef enabled():\n    return {enabled}\n")
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "dwconv_overlay_plugin", str(tmp_path / "test_x.py")],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{tmp_path}:{REPO_ROOT / 'build_scripts/pytest_plugins'}",
                               "PATH": "/usr/bin:/bin"})
    assert expect in proc.stdout + proc.stderr
    assert (proc.returncode == 0) == (enabled == "True")


def probe_facts(**changes):
    facts = {"version": "2.11.0+cu130", "commit": load_pin().commit, "cuda": True, "device": "NVIDIA H100",
             "overlay": "a" * 64, "built": None, "pytest": True}
    return {**facts, **changes}


def test_probe_checks():
    pin, torch = load_pin(), TorchUnderTest("t", ("py",))
    check_probe(probe_facts(), pin, torch, patched=True, allow_cpu=False)
    with pytest.raises(HarnessError, match="t: no CUDA device is visible, so the tests would exercise none of our kernels"):
        check_probe(probe_facts(cuda=False), pin, torch, patched=True, allow_cpu=False)
    check_probe(probe_facts(cuda=False), pin, torch, patched=True, allow_cpu=True)
    with pytest.raises(HarnessError, match="it carries no patch set"):
        check_probe(probe_facts(overlay=None), pin, torch, patched=True, allow_cpu=False)
    with pytest.raises(HarnessError, match="the baseline carries the patch set"):
        check_probe(probe_facts(), pin, torch, patched=False, allow_cpu=False)
    with pytest.raises(HarnessError, match="its torch is 2.10.0 at commit 1234, not the pinned"):
        check_probe(probe_facts(version="2.10.0", commit="1234", overlay=None), pin, torch, patched=False, allow_cpu=False)


def test_tests_origin_checks_a_checkout_and_flags_a_loose_copy(fake_tree, tmp_path):
    tree, commit = fake_tree
    (tree / "test").mkdir()
    with pytest.raises(HarnessError, match=f"belongs to a checkout at {commit}, not the pinned"):
        describe_test_files(tree / "test", load_pin())
    assert "cannot verify which version" in describe_test_files(tmp_path, load_pin())


def test_the_test_upstream_harness_runs_on_a_bare_python():
    # GPU machines have no network for a .venv: `make test-upstream` runs on the standard library.
    code = "import build_scripts.__main__, build_scripts.upstream_runs, build_scripts.source, build_scripts.pin"
    subprocess.run([sys.executable, "-S", "-c", code], cwd=REPO_ROOT, check=True)


def test_outcomes_file_is_json_with_both_runs(tmp_path):
    write_results(tmp_path, Comparison({"a::x": "failed"}, {"a::x": "passed"}), {"k": "v"})
    data = json.loads((tmp_path / "outcomes.json").read_text())
    assert data == {"context": {"k": "v"}, "patched": {"a::x": "failed"}, "baseline": {"a::x": "passed"}}
