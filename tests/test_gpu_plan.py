"""The next GPU session's plan, at the top of notes/performance.md and in notes/next-gpu-session.plan,
names only what the harness takes, and its first call fits its budget by the records' estimate. A GPU is
lent to few sessions here and for 15 minutes: a step, layer set, variant, MATCH or TESTS that
`make gpu-session` refuses would cost one of its device calls."""

import re
import shlex
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.bench.sizing import History
from build_scripts.gpu_plan import chosen_legs, estimate_text, leg_problems, parse_plan

NOTES = REPO_ROOT / "notes" / "performance.md"
PLAN_START = "The next GPU session, in this order"
PLAN_END = "\n## "  # the next section
PLAN_FILE = REPO_ROOT / "notes" / "next-gpu-session.plan"


def plan_spans(notes: str) -> list[str]:
    start = notes.index(PLAN_START)
    plan = notes[start:notes.index(PLAN_END, start)]
    return re.findall(r"`([^`]*)`", " ".join(plan.split()))


def planned_calls(notes: str) -> list[str]:
    """The `STEPS=...` code spans of the plan, each a device call's make variables."""
    return [span for span in plan_spans(notes) if "STEPS=" in span]


def planned_plan_calls(notes: str) -> list[dict[str, str]]:
    """The plan's `make gpu-plan ...` calls, as their make variables."""
    return [dict(word.split("=", 1) for word in shlex.split(span) if "=" in word)
            for span in plan_spans(notes) if span.startswith("make gpu-plan ")]


def call_problems(call: str) -> list[str]:
    return leg_problems(dict(word.split("=", 1) for word in shlex.split(call) if "=" in word))


def test_the_plan_for_the_next_gpu_session_names_only_what_the_harness_takes():
    legs = parse_plan(PLAN_FILE.read_text())
    assert {name for leg in legs for name in leg.settings["STEPS"].split(",")} >= {
        "probe", "tests", "sanitizer", "bench", "routed"}
    assert {leg.name: leg_problems(leg.settings) for leg in legs} == {leg.name: [] for leg in legs}
    calls = planned_calls(NOTES.read_text())
    assert {call: call_problems(call) for call in calls} == {call: [] for call in calls}


def test_the_notes_run_every_leg_once_and_the_first_call_fits_by_the_records():
    legs = parse_plan(PLAN_FILE.read_text())
    calls = planned_plan_calls(NOTES.read_text())
    assert len(calls) == 2 and all(call["PLAN"] == "notes/next-gpu-session.plan" for call in calls), calls
    named = [name for call in calls for name in call["LEGS"].split(",")]
    assert sorted(named) == sorted(leg.name for leg in legs)  # each leg in one call, none left out
    first = chosen_legs(legs, calls[0]["LEGS"])
    assert first[0].name == "correctness"  # nothing is read before it passes
    assert estimate_text(first, float(calls[0]["BUDGET"]), History.load(REPO_ROOT / "results")).count(": it fits.") == 1


@pytest.mark.parametrize("call, problem", [
    ("STEPS=probe,test", "unknown step 'test'"),
    ("STEPS=bench SETS=MobileNetV2,ResNet-50", "unknown layer set(s) ['ResNet-50']"),
    ("STEPS=bench VARIANTS=stock,ours-without-channels_last_streams", "unknown variant 'ours-without-channels_last_streams'"),
    ('STEPS=profile SETS="Mamba conv1d" MATCH="L=4096 b8"', "gpu-session: no problem of the chosen sets and "
                                                            "configurations matches MATCH='L=4096 b8'"),
    ("STEPS=bench VARIANT=ours", "unknown setting VARIANT"),
    ("STEPS=bench CONFIGS=float32/nhwc", "unknown configuration 'float32/nhwc'"),
    ("STEPS=models MODELS=MobileNetV3", "unknown model(s) ['MobileNetV3']"),
    ("STEPS=tests TESTS=kernel", "TESTS names ['kernel']"),
    ('STEPS=profile SETS=ConvNeXt-T CONFIGS=coverage MATCH="bfloat16 channels_last"',
     "no problem of the chosen sets and configurations matches MATCH='bfloat16 channels_last'"),
    ('STEPS=profile SETS=ConvNeXt-T MATCH="b1 " PASSES=backward_weight', "gpu-session: "),
    ('STEPS=bench SETS=ConvNeXt-T MATCH="b2 "', "no problem of the chosen sets and configurations matches MATCH='b2 '"),
    ("STEPS=bench,routed DWCONV_DISABLE_KERNELS=pixel,pixels", "DWCONV_DISABLE_KERNELS: no depthwise kernel path is "
                                                               "called 'pixels'"),
    ("STEPS=bench DWCONV_DISABLE_KERNELS=pixel VARIANTS=ours,ours-without-pixel",
     "variant 'ours-without-pixel': pixel is already off in this process"),
    ("STEPS=probe,tests,bench DWCONV_DISABLE_KERNELS=pixel", "DWCONV_DISABLE_KERNELS=pixel with the tests step: the "
                                                            "GPU tests expect every kernel path on"),
])
def test_a_plan_with_a_typo_is_refused_here(call, problem):
    found = call_problems(call)
    assert len(found) == 1 and problem in found[0], found


def test_a_leg_runs_without_the_kernel_paths_it_names_and_its_look_back_leaves_them_out(monkeypatch):
    """The leg a GPU session adds where a path proved wrong on the device: ours and routed without it."""
    from build_scripts.bench import sizing
    from build_scripts.gpu_plan import Leg, leg_commands
    from build_scripts.plan_report import kernel_path_names
    leg = "STEPS=bench,routed SETS=ConvNeXt-T CONFIGS=bfloat16/channels_last DWCONV_DISABLE_KERNELS=pixel,row"
    assert call_problems(leg + " VARIANTS=stock,cudnn,ours") == []
    sized = []

    class Sized:
        seconds = 1.0

        def text(self):
            return "1 s"

    monkeypatch.setattr(sizing, "estimate", lambda chosen, variants, history, **kw: sized.append(variants) or Sized())
    settings = dict(word.split("=", 1) for word in shlex.split(leg.replace("bench,routed", "look-back")))
    [look_back] = leg_commands(Leg("wrong-path", settings), history=None)
    assert look_back.step == "look-back" and look_back.seconds == 1.0
    expected = ["ours", *(f"ours-without-{path}" for path in kernel_path_names() if path not in ("pixel", "row"))]
    assert list(sized[0]) == expected and len(expected) == len(kernel_path_names()) - 1


def test_the_plans_leg_for_a_path_gone_wrong_is_one_the_harness_takes_once_the_path_is_named():
    """The commented leg at the end of the plan, which a second call runs where the first found a path wrong."""
    from build_scripts.plan_report import kernel_path_names
    text = PLAN_FILE.read_text()
    template = text[text.index("a leg like this one"):].split("\n", 1)[1]
    lines = [line.removeprefix("#").removeprefix("   ") for line in template.splitlines() if line.startswith("#   ")]
    assert len(lines) == 2 and "DWCONV_DISABLE_KERNELS=<path>" in lines[1], lines
    for path in kernel_path_names():
        [leg] = parse_plan("\n".join(lines).replace("<path>", path))
        assert leg_problems(leg.settings) == [], path
        assert leg.settings["DWCONV_DISABLE_KERNELS"] == path


def test_the_plan_is_found_in_the_notes():
    notes = (f"x\n{PLAN_START} (each a call):\n1. `STEPS=probe`\n2. `STEPS=bench\n   SETS=MobileNetV2`\n"
             "3. `make gpu-plan PLAN=p LEGS=a,b`\n\n## Earlier: `STEPS=tests`")
    assert planned_calls(notes) == ["STEPS=probe", "STEPS=bench SETS=MobileNetV2"]
    assert planned_plan_calls(notes) == [{"PLAN": "p", "LEGS": "a,b"}]
