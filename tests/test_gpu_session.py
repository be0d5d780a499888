"""`make gpu-session` (build_scripts/gpu_session.py): steps run in order within a budget, each
stopped in time with its whole process group, every outcome summarised. Stand-in steps here;
the real ones need a GPU."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT, gpu_session
from build_scripts.errors import HarnessError
from build_scripts.gpu_session import KERNEL_TESTS, Step, gpu_test_targets, run_session, steps

ANY_LINE = re.compile(r"\S")


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for a PID 1 that may never reap it)."""
    time.sleep(0.2)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def python_step(name: str, *programs: str, summary=ANY_LINE) -> Step:
    return Step(name, [[sys.executable, "-c", program] for program in programs], summary)


@pytest.fixture
def quick_limits(monkeypatch):
    monkeypatch.setattr(gpu_session, "RESERVE_S", 0.5)
    monkeypatch.setattr(gpu_session, "MIN_STEP_S", 1.0)
    monkeypatch.setattr(gpu_session, "BENCH_REPORT_S", 0.0)


def test_steps_run_in_order_with_a_log_each_and_a_summary(tmp_path, quick_limits, capsys):
    available = {
        "first": python_step("first", "print('one passed in 0.1s')"),
        "broken": python_step("broken", "import sys; print('it broke'); sys.exit(3)", "print('never reached')",
                              summary=re.compile("no line says this")),
        "last": python_step("last", "print('last ran')"),
    }
    outcomes = run_session(["first", "broken", "last"], tmp_path, 60, available, env=dict(os.environ))
    assert [(o.step, o.status) for o in outcomes] == [
        ("first", "passed"), ("broken", "failed (exit 3)"), ("last", "passed")]
    assert "never reached" not in (tmp_path / "broken.log").read_text()
    assert "it broke" in (tmp_path / "broken.log").read_text() and "it broke" in outcomes[1].lines  # where it ended
    summary = (tmp_path / "session.md").read_text()
    assert "| broken | failed (exit 3) |" in summary and "one passed in 0.1s" in summary
    assert capsys.readouterr().out.rstrip().endswith(summary.rstrip().splitlines()[-1])  # printed last


def test_a_step_past_the_budget_is_stopped_with_all_its_processes_and_the_rest_skipped(tmp_path, quick_limits):
    pid_file = tmp_path / "child.pid"
    # The step's child ignores SIGTERM, as a process stuck in the driver would not answer it.
    hang = ("import subprocess; p = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; exec sleep 60']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); p.wait()")
    available = {"hang": python_step("hang", hang), "after": python_step("after", "print('ran')")}
    started = time.monotonic()
    outcomes = run_session(["hang", "after"], tmp_path, 3, available, env=dict(os.environ))
    assert time.monotonic() - started < 3 + 6  # the budget, and the grace given to SIGTERM at most
    assert [(o.step, o.status) for o in outcomes] == [("hang", "stopped at the budget"), ("after", "skipped")]
    assert not running(int(pid_file.read_text()))
    assert "| after | skipped | 0 |" in (tmp_path / "session.md").read_text()


def test_a_session_told_to_stop_stops_its_running_step_with_it(tmp_path):
    """`make gpu-plan` ends a leg past its budget with SIGTERM; the step then running, in a process group
    of its own, must not outlive the session into the next leg."""
    pid_file = tmp_path / "step.pid"
    script = (f"import sys; from pathlib import Path; from build_scripts.gpu_session import *\n"
              f"stop_steps_on_sigterm()\n"
              f"step = Step('hang', [[sys.executable, '-c', "
              f"\"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)\"]], "
              f"re.compile('x'))\n"
              f"run_session(['hang'], Path({str(tmp_path)!r}), 60, {{'hang': step}})\n")
    session = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.1)
    step_pid = int(pid_file.read_text())
    session.terminate()
    assert session.wait(timeout=15) == 128 + 15
    assert not running(step_pid)


def test_the_bench_is_told_to_stop_before_the_budget(tmp_path, quick_limits, monkeypatch):
    monkeypatch.setattr(gpu_session, "BENCH_REPORT_S", 5.0)
    available = {"env": python_step("env", "import os; print('limit', os.environ['BENCH_STOP_AFTER'])")}
    run_session(["env"], tmp_path, 60, available, env=dict(os.environ))
    limit = int(re.search(r"limit (\d+)", (tmp_path / "env.log").read_text()).group(1))
    assert 50 <= limit <= 60 - 0.5 - 5


def test_the_summary_keeps_the_lines_that_say_how_a_step_went(tmp_path, quick_limits):
    pytest_like = python_step("tests", "print('collected 3 items'); print('FAILED tests/gpu/a.py::b'); "
                                       "print('==== 1 failed, 2 passed in 4.20s ====')",
                              summary=steps(tmp_path, "python", "make", "", "")["tests"].summary)
    outcome, = run_session(["tests"], tmp_path, 60, {"tests": pytest_like}, env=dict(os.environ))
    assert outcome.lines == ["FAILED tests/gpu/a.py::b", "==== 1 failed, 2 passed in 4.20s ===="]


def test_unknown_steps_are_refused_with_the_list_and_nothing_runs(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(HarnessError, match=r"unknown step\(s\) \['benchmark'\]; STEPS takes a comma-separated list "
                                           r"of probe, tests, sanitizer, bench, look-back, routed, models, profile, upstream"):
        run_session(["probe", "benchmark"], out, 60, steps(out, "python", "make", "", ""))
    assert not out.exists()


def test_the_real_steps_write_under_out_and_pass_the_sets_and_variants(tmp_path):
    real = steps(tmp_path, "/gpu/python3", "make", "MobileNetV2,Mamba conv1d", "ours,ours-without-row",
                 configs="coverage", models="ConvNeXt-T")
    assert list(real) == ["probe", "tests", "sanitizer", "bench", "look-back", "routed", "models", "profile",
                          "upstream"]
    make_gpu = ["make", "test-gpu", "--no-print-directory", "GPU_PYTHON=/gpu/python3"]
    assert real["tests"].commands == [[*make_gpu, "GPU_TESTS=tests/gpu --ignore=tests/gpu/test_sanitizer.py",
                                       f"PYTEST_ARGS=--junitxml={tmp_path / 'tests.xml'} --timeout=300 "
                                       "--timeout-method=thread"]]
    assert real["sanitizer"].commands == [[*make_gpu, "GPU_TESTS=tests/gpu/test_sanitizer.py",
                                           f"PYTEST_ARGS=--junitxml={tmp_path / 'sanitizer.xml'}"]]
    assert (REPO_ROOT / "tests/gpu/test_sanitizer.py").is_file()
    without_timeout = steps(tmp_path, "/gpu/python3", "make", "", "", stop_hung_tests=False)["tests"].commands[0]
    assert without_timeout[-1] == f"PYTEST_ARGS=--junitxml={tmp_path / 'tests.xml'}"
    bench = real["bench"].commands[0]
    assert f"RESULTS={tmp_path / 'results'}" in bench and "SETS=MobileNetV2,Mamba conv1d" in bench
    assert "VARIANTS=ours,ours-without-row" in bench
    assert "VARIANTS=look-back" in real["look-back"].commands[0]
    assert real["models"].commands == [["make", "bench-models", "--no-print-directory", "GPU_PYTHON=/gpu/python3",
                                        f"RESULTS={tmp_path / 'results'}", "MODELS=ConvNeXt-T", "CONFIGS=coverage"]]
    profile = real["profile"].commands[0]
    assert profile[:2] == ["make", "profile"] and f"OUT={tmp_path}" in profile and "SETS=MobileNetV2,Mamba conv1d" in profile
    assert real["probe"].commands[-1] == ["/gpu/python3", "docker/runtime/selftest.py", "--overlay"]
    assert (REPO_ROOT / "docker/runtime/selftest.py").is_file()


def test_tests_narrows_the_tests_step_to_the_kernels_or_named_files(tmp_path):
    def gpu_tests(tests):
        return steps(tmp_path, "/gpu/python3", "make", "", "", tests=tests)["tests"].commands[0][4]

    assert gpu_tests("kernels") == "GPU_TESTS=" + " ".join(KERNEL_TESTS)
    assert all((REPO_ROOT / path).is_file() for path in KERNEL_TESTS)
    assert not set(KERNEL_TESTS) & {"tests/gpu/test_compile.py", "tests/gpu/test_sanitizer.py"}
    assert gpu_tests("tests/gpu/test_compile.py, tests/gpu/test_routing.py::TestRouting") == (
        "GPU_TESTS=tests/gpu/test_compile.py tests/gpu/test_routing.py::TestRouting")
    assert gpu_test_targets("") == "tests/gpu --ignore=tests/gpu/test_sanitizer.py"


@pytest.mark.parametrize("tests", ["kernel", "tests/gpu/test_compiled.py", "tests/test_gpu_session.py",
                                   "tests/gpu/kernel_cases.py", "kernels tests/gpu/test_compile.py"])
def test_tests_naming_no_gpu_test_file_is_refused_before_any_step(tmp_path, tests):
    env = dict(os.environ, OUT=str(tmp_path / "out"), STEPS="probe,tests", TESTS=tests)
    result = subprocess.run([sys.executable, "-m", "build_scripts.gpu_session"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout
    assert "which are not test files of tests/gpu" in result.stderr and repr(tests.split()[0]) in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_make_verb_asks_for_out():
    result = subprocess.run([sys.executable, "-m", "build_scripts.gpu_session", "--steps", "probe"], cwd=REPO_ROOT,
                            env={k: v for k, v in os.environ.items() if k != "OUT"}, capture_output=True, text=True)
    assert result.returncode == 2
    assert "say where the logs and results go: OUT=<folder>" in result.stderr


def test_bench_reports_come_up_to_where_the_device_gives_them_back(tmp_path, quick_limits):
    """The device returns files at most two folders below OUT: results/<device>/<date>/bench.json
    would be lost, so the step's JSON reports move up into OUT and the deep folder goes."""
    writes = ("from pathlib import Path; d = Path('results/NVIDIA-H100/2026-11-22'); d.mkdir(parents=True); "
              "(d / 'bench-Tiny.json').write_text('{}'); (d / 'bench.md').write_text('# md')")
    program = f"import os; os.chdir({str(tmp_path)!r}); {writes}"
    step = Step("bench", [[sys.executable, "-c", program]], ANY_LINE, reports_under="results")
    [outcome] = run_session(["bench"], tmp_path, 60, {"bench": step}, env=dict(os.environ))
    assert outcome.status == "passed"
    assert (tmp_path / "bench-Tiny.json").read_text() == "{}"
    assert not (tmp_path / "results").exists()
    assert f"given back: {tmp_path / 'bench-Tiny.json'}" in (tmp_path / "bench.log").read_text()
    assert all(s.reports_under == "results" for name, s in steps(tmp_path, "py", "make", "", "").items()
               if name in ("bench", "look-back", "routed", "models"))


# Stands in for make: says what it was asked and which table it would route by.
FAKE_MAKE = """import os, sys
table = os.environ.get("DWCONV_ROUTING_TABLE", "")
print("make", *sys.argv[1:])
print("table", table, open(table).readline().strip() if table else "")
print("kernel paths off:", os.environ.get("DWCONV_DISABLE_KERNELS", "none"))
"""


def bf16_steps_with_a_stand_in_make(tmp_path):
    """The steps of a bf16 channels_last MobileNetV2 session whose make is FAKE_MAKE, which prints what it is
    given and the table DWCONV_ROUTING_TABLE names."""
    fake_make = tmp_path / "make"
    fake_make.write_text(f"#!{sys.executable}\n" + FAKE_MAKE)
    fake_make.chmod(0o755)
    return steps(tmp_path, sys.executable, str(fake_make), "MobileNetV2", "stock,cudnn,ours",
                 configs="bfloat16/channels_last")


@pytest.mark.skipif(shutil.which("g++") is None, reason="the routing table's held-out check compiles with g++")
def test_the_routed_step_times_routed_by_the_table_of_this_calls_bench(tmp_path, quick_limits):
    """STEPS=bench,routed: the table is made on the device from the reports the bench step gave back
    (no rebuild), and the routed bench runs with DWCONV_ROUTING_TABLE naming it."""
    from build_scripts.routing_table import RUNTIME_FORMAT
    from tests.test_routing_rule import report, row
    bench_report = tmp_path / "bench-Synthetic-stock-cudnn-ours.json"
    bench_report.write_text(json.dumps(report([row("144@56", "bfloat16", "channels_last", p, ours=1.0, stock=2.0)
                                               for p in ("forward", "backward_input", "backward_weight")])))
    real = bf16_steps_with_a_stand_in_make(tmp_path)
    [no_report] = run_session(["routed"], tmp_path, 60, real, env=dict(os.environ))
    assert no_report.status == "failed (no command)"
    assert "the bench step gave back no report in this call" in (tmp_path / "routed.log").read_text()
    assert not (tmp_path / "routing-table.tsv").exists()

    (tmp_path / "bench.log").write_text(f"given back: {bench_report}\n")  # as the bench step leaves it
    [routed] = run_session(["routed"], tmp_path, 120, real, env=dict(os.environ))
    assert routed.status == "passed", (tmp_path / "routed.log").read_text()
    table = tmp_path / "routing-table.tsv"
    assert table.read_text().startswith(RUNTIME_FORMAT + "\n")
    log = (tmp_path / "routed.log").read_text()
    assert f"table {table} {RUNTIME_FORMAT}" in log
    assert "VARIANTS=stock,cudnn,routed" in log and "SETS=MobileNetV2" in log and "CONFIGS=bfloat16/channels_last" in log
    assert any(line.endswith("ours 1, cuDNN 0, upstream 0") for line in routed.lines)  # the table's routes
    assert any(line.startswith("wrote ") and line.endswith("with no rebuild") for line in routed.lines)


def test_a_session_with_kernel_paths_off_routes_by_a_table_made_for_them(tmp_path, quick_limits):
    """DWCONV_DISABLE_KERNELS=<path> on a session (a path that proved wrong): its bench timed ours without the
    path, and the routed step's table is made for that setting and timed with it; a table for a torch with
    every path on is not made from such a bench."""
    from tests.test_routing_rule import report, row
    bench = report([row("144@56", "bfloat16", "channels_last", p, ours=1.0, stock=2.0)
                    for p in ("forward", "backward_input", "backward_weight")])
    bench_report = tmp_path / "bench-Synthetic-stock-cudnn-ours.json"
    bench_report.write_text(json.dumps({**bench, "kernel_paths_off": ["channels_last_mma"]}))
    (tmp_path / "bench.log").write_text(f"given back: {bench_report}\n")
    real = bf16_steps_with_a_stand_in_make(tmp_path)
    [refused] = run_session(["routed"], tmp_path, 60, real, env={k: v for k, v in os.environ.items()
                                                                  if k != "DWCONV_DISABLE_KERNELS"})
    assert refused.status != "passed" and not (tmp_path / "routing-table.tsv").exists()
    assert "timed ours with kernel paths channels_last_mma off" in (tmp_path / "routed.log").read_text()
    [routed] = run_session(["routed"], tmp_path, 120, real,
                           env=dict(os.environ, DWCONV_DISABLE_KERNELS="channels_last_mma"))
    log = (tmp_path / "routed.log").read_text()
    assert routed.status == "passed", log
    assert "kernel paths off: channels_last_mma" in log  # the routed bench runs without the path too
    assert ", kernel paths channels_last_mma off\n" in (tmp_path / "routing-table.tsv").read_text()


def test_a_session_names_the_kernel_paths_it_runs_without_and_refuses_an_unknown_one(tmp_path):
    def session(paths_off, steps="probe", variants=""):
        env = dict(os.environ, OUT=str(tmp_path / "out"), STEPS=steps, BUDGET="60", DWCONV_DISABLE_KERNELS=paths_off,
                   VARIANTS=variants, SETS="", CONFIGS="", MATCH="")
        return subprocess.run([sys.executable, "-m", "build_scripts.gpu_session"], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
    result = session("pixel,pixels")
    assert result.returncode == 2, result.stdout
    assert "gpu-session: DWCONV_DISABLE_KERNELS: no depthwise kernel path is called 'pixels'" in result.stderr
    assert not (tmp_path / "out").exists()
    result = session("pixel", steps="bench", variants="stock,ours-without-row+pixel")
    assert result.returncode == 2 and ("gpu-session: variant 'ours-without-row+pixel': pixel is already off in this "
                                       "process") in result.stderr, result.stderr
    result = session("pixel", steps="probe,tests,sanitizer")
    assert result.returncode == 2 and ("DWCONV_DISABLE_KERNELS=pixel with the tests and sanitizer steps: the GPU tests "
                                       "expect every kernel path on") in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
    session(" pixel, row")  # the probe fails here, with no GPU; session.md is written all the same
    assert (tmp_path / "out" / "session.md").read_text().startswith(
        "# GPU session: probe (kernel paths off, DWCONV_DISABLE_KERNELS: row, pixel)\n")


@pytest.mark.skipif(shutil.which("g++") is None, reason="the routing table's held-out check compiles with g++")
def test_a_kernel_that_failed_its_check_costs_the_routed_step_only_its_own_passes(tmp_path, quick_limits):
    """Where ours failed its float64 check on a pass of this call's bench (a kernel never run on a GPU
    before), the routed step's table routes that pass elsewhere and names it, and the routed bench runs:
    make routing-table would refuse the report, and the routed timing of every other layer would be lost."""
    from tests.test_routing_rule import report, row
    passes = ("forward", "backward_input", "backward_weight")
    rows = [row(layer, "bfloat16", "channels_last", p, ours=1.0, stock=2.0, size=size)
            for layer, size in (("144@56", 56), ("96@28", 28), ("48@14", 14)) for p in passes]
    wrong_weight_gradient = {"error": {"forward": 1e-3, "backward_input": 1e-3, "backward_weight": 0.5}, "ok": False}
    for r in rows[:3]:  # one check covers a problem's passes, as the bench records it
        r["check"] = {"ours": wrong_weight_gradient}
    for r in rows[3:6]:  # ours raised before any time
        r["ms"]["ours"] = None
        r["check"] = {"ours": {"failed": "RuntimeError: an illegal memory access was encountered", "ok": False}}
    bench = report(rows)
    bench["settings"] = {"tolerance": {"bfloat16": 3e-2}}
    bench_report = tmp_path / "bench-Synthetic-stock-cudnn-ours.json"
    bench_report.write_text(json.dumps(bench))
    (tmp_path / "bench.log").write_text(f"given back: {bench_report}\n")
    real = bf16_steps_with_a_stand_in_make(tmp_path)
    [routed] = run_session(["routed"], tmp_path, 120, real, env=dict(os.environ))
    assert routed.status == "passed", (tmp_path / "routed.log").read_text()
    assert "ours failed its float64 check at 4 points, routed elsewhere where it can be:" in routed.lines
    table = (tmp_path / "routing-table.tsv").read_text().splitlines()
    failed = [line.split("\t") for line in table if "(failed its" in line]
    assert sorted((f[1], f[-1].split()[1]) for f in failed) == sorted(
        [("backward_weight", "144@56")] + [(p, "96@28") for p in passes]), failed
    assert all(f[10] == "upstream" for f in failed)  # stock runs cuDNN on these
    assert sum("\tours\t" in line for line in table) == 5  # 144@56's other two passes and 48@14's three
    log = (tmp_path / "routed.log").read_text()
    assert "4 where ours failed its check not judged" in log and "inf" not in log.split("held out")[1]
    assert "VARIANTS=stock,cudnn,routed" in log


@pytest.mark.parametrize("named", ["routed", "routed,bench", "probe,routed"])
def test_a_routed_step_without_a_bench_before_it_is_refused_before_any_step(tmp_path, named):
    env = dict(os.environ, OUT=str(tmp_path / "out"), STEPS=named)
    result = subprocess.run([sys.executable, "-m", "build_scripts.gpu_session"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout
    assert "the routed step routes by the table of this call's bench: name bench before it" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("steps, sets, match, message", [
    ("probe,bench", "ConvNeXt-T", "(", "MATCH='(' is not a regular expression"),
    ("probe,bench", "ConvNeXt-T", "k31", "no problem of the chosen sets and configurations matches MATCH='k31' "
                                         "(a label: 'ConvNeXt-T 96@56 b64 float32 contiguous')"),
    ("probe,look-back", "ConvNext-T", "", "unknown layer set(s) ['ConvNext-T']"),
    # batch 1 times the forward only: the profile step's default pass (the weight gradient) has none
    ("probe,bench,profile", "ConvNeXt-T", " b1 ",
     "no bench problem of ['ConvNeXt-T'] matches MATCH=' b1 ' with a pass among ['backward_weight']"),
])
def test_a_bench_problem_choice_that_names_nothing_is_refused_before_any_step(tmp_path, steps, sets, match, message):
    """MATCH, which bench, look-back and profile all read, SETS, and a profile's PASSES: refused
    before the probe and the tests spend the call's minutes, not when the step reaches them."""
    env = dict(os.environ, OUT=str(tmp_path / "out"), STEPS=steps, SETS=sets, MATCH=match, PASSES="")
    result = subprocess.run([sys.executable, "-m", "build_scripts.gpu_session"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
