"""`make gpu-plan` (build_scripts/gpu_plan.py): a plan file's legs parsed and checked before anything
runs, then run in order within one call's budget, with plan.md and legs.tar.gz written after every leg.
A stand-in `make` here plays gpu-session; the real legs need a GPU."""

import datetime
import os
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT, gpu_plan
from build_scripts.errors import HarnessError
from build_scripts.bench.sizing import History
from build_scripts.gpu_plan import Leg, chosen_legs, estimate_text, parse_plan, refuse_bad_legs, run_plan

PLAN = """# a comment
first: STEPS=probe BUDGET=60
second: STEPS=bench SETS="Mamba conv1d"
    MATCH="b8|b1"
    # a comment line among a leg's lines
    VARIANTS=stock,ours PASSES=a#b

third: STEPS=tests TESTS=kernels
"""


def test_a_plan_file_gives_its_legs_in_order_with_their_make_variables():
    legs = parse_plan(PLAN)
    assert [leg.name for leg in legs] == ["first", "second", "third"]
    assert legs[0].budget_s == 60 and legs[0].make_variables() == ["STEPS=probe"]
    assert legs[1].settings == {"STEPS": "bench", "SETS": "Mamba conv1d", "MATCH": "b8|b1", "VARIANTS": "stock,ours",
                                "PASSES": "a#b"}  # a # past a line's start is part of a value
    assert legs[2].budget_s == gpu_plan.DEFAULT_BUDGET_S


@pytest.mark.parametrize("text, message", [
    ("  STEPS=probe", "line 1: an indented line with no leg above it"),
    ("first STEPS=probe", "line 1: expected '<name>: STEPS=... '"),
    ("a/b: STEPS=probe", "line 1: expected '<name>: STEPS=... '"),
    ("first: STEPS=probe\nfirst: STEPS=tests", "legs named twice: first"),
    ("first: SETS=ConvNeXt-T", "line 1: leg 'first' names no STEPS"),
    ("first: STEPS=probe\n  stray", "line 1: 'stray' is no KEY=value"),
    ('first: STEPS=bench MATCH="b8', "line 1: No closing quotation"),
    ("# nothing", "no leg in the plan"),
])
def test_a_malformed_plan_is_refused_naming_its_line(text, message):
    with pytest.raises(HarnessError, match="gpu-plan: ") as err:
        parse_plan(text)
    assert message in str(err.value)


def test_legs_chooses_among_the_plans_legs_and_refuses_a_name_it_lacks():
    legs = parse_plan(PLAN)
    assert [leg.name for leg in chosen_legs(legs, "third,first")] == ["first", "third"]  # the plan's order
    assert chosen_legs(legs, "") == legs
    with pytest.raises(HarnessError, match="LEGS names no leg of the plan: fourth; its legs are first, second, third"):
        chosen_legs(legs, "first,fourth")


def test_a_leg_the_harness_would_refuse_stops_the_plan_before_anything_runs():
    legs = parse_plan("good: STEPS=probe\nbad: STEPS=bench,test VARIANTS=ours-without-no_such_path BUDGET=soon\n"
                      "late: STEPS=routed,bench REPEATS=many\nodd: STEPS=profile PASSES=sideways\n"
                      "spaced: STEPS=bench MATCH=' b1 '\n")
    with pytest.raises(HarnessError) as err:
        refuse_bad_legs(legs)
    text = str(err.value)
    assert "nothing was run" in text and "good:" not in text
    assert "bad: unknown step 'test'" in text and "bad: unknown variant 'ours-without-no_such_path'" in text
    assert "bad: BUDGET='soon' is no number of seconds" in text
    # what gpu-session itself refuses before its first step, checked by the same function
    assert "late: gpu-session: the routed step routes by the table of this call's bench" in text
    assert "late: REPEATS='many' is no count of runs" in text
    assert "odd: gpu-session: " in text and "sideways" in text
    assert "spaced: MATCH=' b1 ': make would drop its leading spaces" in text


def test_a_dollar_reaches_gpu_session_as_written():
    assert Leg("x", {"STEPS": "bench", "MATCH": "contiguous$|b8", "BUDGET": "60"}).make_variables() == [
        "STEPS=bench", "MATCH=contiguous$$|b8"]  # make turns $$ into $


STAND_IN_MAKE = """#!{python}
import os, sys, time
from pathlib import Path
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
assert sys.argv[1:3] == ["--no-print-directory", "gpu-session"], sys.argv
out = Path(args["OUT"])
(out / "bench.log").write_text(" ".join(sys.argv[3:]) + "\\n")
(out / "env.log").write_text(" ".join(f"{{k}}={{os.environ[k]}}" for k in ("MATCH", "MAKEFLAGS", "DWCONV_OVERLAY_DIR",
                                                                       "DWCONV_DISABLE_KERNELS")
                                      if k in os.environ))
step = args["STEPS"]
if step == "flood":
    (out / "sanitizer.log").write_text("x" * 4000)
    (out / "bench-report.json").write_text("{{}}")
if step == "hang":
    Path(os.environ["HUNG_PID"]).write_text(str(os.getpid()))
    time.sleep(600)
if step == "tests":
    print("gpu-session: unknown step(s) ...", file=sys.stderr)
    sys.exit(2)  # refused: no session.md
status = "passed" if step == "probe" else "failed (exit 1)"
(out / "session.md").write_text(f"# GPU session: {{step}}\\n\\n| step | status | seconds |\\n| --- | --- | ---: |\\n"
                                f"| {{step}} | {{status}} | 3 |\\n")
print("the leg's own output")
sys.exit(0 if step == "probe" else 2)  # make's status for a failed recipe
"""


@pytest.fixture
def stand_in_make(tmp_path, monkeypatch):
    make = tmp_path / "make"
    make.write_text(STAND_IN_MAKE.format(python=sys.executable))
    make.chmod(make.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(gpu_plan, "RESERVE_S", 0.5)
    monkeypatch.setattr(gpu_plan, "STOP_GRACE_S", 1.0)
    monkeypatch.setattr(gpu_plan, "MIN_STEP_S", 0.5)
    return str(make)


def legs_in(archive: Path) -> dict[str, str]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


def test_the_legs_run_in_order_and_out_holds_only_the_summary_and_the_archive(tmp_path, stand_in_make, capsys,
                                                                             monkeypatch):
    for key, value in (("MATCH", "b1"), ("MAKEFLAGS", " -- OUT=/elsewhere"), ("DWCONV_OVERLAY_DIR", "/overlay"),
                       ("DWCONV_DISABLE_KERNELS", "pixel")):
        monkeypatch.setenv(key, value)  # what `make gpu-plan MATCH=b1 ...` would leave in its environment
    out = tmp_path / "out"
    legs = [Leg("one", {"STEPS": "probe", "BUDGET": "30"}),
            Leg("two", {"STEPS": "bench", "SETS": "Mamba conv1d", "DWCONV_DISABLE_KERNELS": "row"}),
            Leg("three", {"STEPS": "tests"})]
    outcomes = run_plan(legs, out, 60, make=stand_in_make)
    assert [(o.name, o.status) for o in outcomes] == [
        ("one", "passed"), ("two", "not passed: bench failed (exit 1)"),
        ("three", "refused or failed before any step (exit 2; leg.log says why)")]
    assert sorted(p.name for p in out.iterdir()) == ["legs.tar.gz", "plan.md"]  # the device gives back 8 files
    files = legs_in(out / "legs.tar.gz")
    leg_out, budget, steps = files["one/bench.log"].split()
    assert Path(leg_out.removeprefix("OUT=")).name == "one" and not leg_out.startswith(f"OUT={out}")
    assert (budget, steps) == ("BUDGET=30", "STEPS=probe")
    assert files["one/env.log"] == "DWCONV_OVERLAY_DIR=/overlay"  # a leg is its own line, on the call's overlay
    budget = int(files["two/bench.log"].split()[1].removeprefix("BUDGET="))
    assert "SETS=Mamba conv1d" in files["two/bench.log"] and 57 <= budget <= 59  # what was left of the call's 60, less 0.5
    assert "DWCONV_DISABLE_KERNELS=row" in files["two/bench.log"]  # a leg's paths off are its own (make exports them)
    plan = (out / "plan.md").read_text()
    assert "gpu-session: unknown step(s)" in files["three/leg.log"] and "the leg's own output" in files["one/leg.log"]
    assert "| two | not passed: bench failed (exit 1) |" in plan
    assert "`STEPS=bench 'SETS=Mamba conv1d' DWCONV_DISABLE_KERNELS=row`" in plan
    assert "## one\n\n### GPU session: probe" in plan
    assert "Command: `make gpu-plan LEGS=one,two,three BUDGET=60`\n" in plan  # called with no command of its own
    assert capsys.readouterr().out.rstrip().endswith(plan.rstrip().splitlines()[-1])


def test_plan_md_says_first_the_command_the_card_and_when_the_call_started(tmp_path, stand_in_make, monkeypatch):
    """The command as `make gpu-plan` was given it (main passes it on), the card, the start in UTC."""
    given = {}
    monkeypatch.setattr(gpu_plan, "run_plan", lambda legs, out, budget, make, command: given.update(
        command=command, legs=[leg.name for leg in legs]) or [])
    plan = tmp_path / "two.plan"
    plan.write_text("one: STEPS=probe BUDGET=30\ntwo: STEPS=probe\n")
    assert gpu_plan.main(["run", "--plan", str(plan), "--legs", "one", "--out", str(tmp_path / "out"),
                          "--budget", "60"]) == 0
    assert given == {"command": f"make gpu-plan PLAN={plan} LEGS=one BUDGET=60", "legs": ["one"]}
    monkeypatch.setattr(gpu_plan, "card_name", lambda: "Stand-in GPU")
    run_plan([Leg("one", {"STEPS": "probe"})], tmp_path / "out", 60, make=stand_in_make, command="the command")
    text = (tmp_path / "out" / "plan.md").read_text()
    header = text.split("\n\n")[1].splitlines()
    assert header[:2] == ["Command: `the command`", "Device: Stand-in GPU"] and "| one | passed |" in text
    started = datetime.datetime.strptime(header[2], "Started: %Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    assert abs((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()) < 60


def test_the_card_is_the_first_nvidia_smi_names_and_none_without_it(tmp_path):
    smi = tmp_path / "nvidia-smi"
    assert gpu_plan.card_name(str(smi)) is None  # no nvidia-smi
    smi.write_text(f"#!{sys.executable}\nimport sys\nassert '--query-gpu=name' in sys.argv\n"
                   "print('NVIDIA H100 80GB HBM3')\nprint('NVIDIA H100 80GB HBM3')\n")
    smi.chmod(0o755)
    assert gpu_plan.card_name(str(smi)) == "NVIDIA H100 80GB HBM3"
    smi.write_text("#!/bin/sh\necho 'No devices were found'; exit 6\n")
    assert gpu_plan.card_name(str(smi)) is None


def test_a_hung_leg_is_stopped_past_its_budget_with_its_processes_and_the_rest_skipped(tmp_path, stand_in_make,
                                                                                       monkeypatch):
    monkeypatch.setenv("HUNG_PID", str(tmp_path / "pid"))
    out = tmp_path / "out"
    started = time.monotonic()
    outcomes = run_plan([Leg("hung", {"STEPS": "hang", "BUDGET": "2"}), Leg("after", {"STEPS": "probe"})], out, 4.5,
                        make=stand_in_make)
    assert time.monotonic() - started < 10
    assert [(o.name, o.status) for o in outcomes] == [
        ("hung", "stopped (past its budget)"), ("after", "skipped (the call's budget is spent)")]
    pid = int((tmp_path / "pid").read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
    assert "hung/bench.log" in legs_in(out / "legs.tar.gz")  # what it left before it was stopped
    assert "| after | skipped" in (out / "plan.md").read_text()


def test_the_make_verbs_refuse_a_missing_plan_or_out_and_estimate_here():
    env = dict(os.environ, PLAN="", OUT="", LEGS="")
    run = subprocess.run(["make", "--no-print-directory", "gpu-plan-estimate"], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True)
    assert run.returncode != 0 and "gpu-plan: name the plan file: PLAN=<file>" in run.stderr
    run = subprocess.run([sys.executable, "-m", "build_scripts.gpu_plan", "run", "--plan",
                          str(REPO_ROOT / "notes" / "next-gpu-session.plan")], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 2 and "OUT=<folder>" in run.stderr
    run = subprocess.run(["make", "--no-print-directory", "gpu-plan-estimate", "PLAN=notes/next-gpu-session.plan",
                          "LEGS=bf16-routed"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "| bf16-routed | " in run.stdout and "bench: " in run.stdout and "correctness" not in run.stdout


def test_an_archive_too_large_to_come_back_leaves_the_bulky_logs_out(tmp_path, stand_in_make, monkeypatch):
    monkeypatch.setattr(gpu_plan, "ARCHIVE_LIMIT", 100)
    monkeypatch.setattr(gpu_plan, "BULKY_LOG", 1000)
    out = tmp_path / "out"
    run_plan([Leg("flooded", {"STEPS": "flood"})], out, 30, make=stand_in_make)
    files = legs_in(out / "legs.tar.gz")
    assert "flooded/sanitizer.log" not in files and "flooded/bench-report.json" in files
    assert files["left-out.txt"] == "flooded/sanitizer.log: 4000 bytes\n"


def test_the_estimate_runs_each_leg_as_gpu_session_would_and_says_what_would_be_cut():
    history = History.load(REPO_ROOT / "results")
    leg = 'bf16: STEPS=bench,routed SETS=ConvNeXt-T,MobileNetV2,EfficientNet-B0 CONFIGS=bfloat16/channels_last MATCH=b64'
    roomy = estimate_text(parse_plan(leg + " BUDGET=200"), 540, history)
    assert "it fits" in roomy and "cut" not in roomy
    # its second bench has what is left less gpu-session's 15 s and the bench's 30 s for its report
    tight = estimate_text(parse_plan(leg + " BUDGET=120"), 540, history)
    assert "routed: " in tight and ": **cut** at about" in tight and "it does not fit" in tight
    two = estimate_text(parse_plan(f"{leg} BUDGET=200\nsecond: STEPS=probe"), 150, history)
    assert "| bf16 | " in two and "(given 130)" in two and "| second | – | 540 | **skipped**" in two


def test_the_estimate_refuses_a_results_folder_with_nothing_recorded(tmp_path):
    run = subprocess.run([sys.executable, "-m", "build_scripts.gpu_plan", "estimate", "--plan",
                          str(REPO_ROOT / "notes" / "next-gpu-session.plan"), "--results", str(tmp_path)],
                         cwd=REPO_ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and "records its problems' seconds: nothing to size the legs by" in run.stderr
