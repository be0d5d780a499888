"""The next GPU session's plan, at the top of notes/performance.md, names only what the harness
takes. A GPU is lent to few sessions here and for 15 minutes: a step, layer set, variant, MATCH or TESTS
that `make gpu-session` refuses would cost one of its device calls."""

import re
import shlex
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT, plan_report
from build_scripts.bench.layers import problems
from build_scripts.bench.profile import DEFAULT_PASSES, targets
from build_scripts.bench.schema import parse_configs, parse_models, parse_variants
from build_scripts.errors import HarnessError
from build_scripts.gpu_session import check_problem_choice, gpu_test_targets, steps

NOTES = REPO_ROOT / "notes" / "performance.md"
PLAN_START = "The next GPU session, in this order"
PLAN_END = "The earlier plan"
KNOWN_SETTINGS = {"STEPS", "SETS", "CONFIGS", "VARIANTS", "MATCH", "PASSES", "BUDGET", "OUT", "MODELS", "TESTS",
                  "CUDNN_BENCHMARK", "LAUNCHES", "REPEATS", "DWCONV_OVERLAY_DIR"}


def planned_calls(notes: str) -> list[str]:
    """The `STEPS=...` code spans of the plan, each a device call's make variables."""
    start = notes.index(PLAN_START)
    plan = notes[start:notes.index(PLAN_END, start)]
    return [span for span in re.findall(r"`([^`]*)`", " ".join(plan.split())) if "STEPS=" in span]


def call_problems(call: str) -> list[str]:
    """What `make gpu-session` would refuse in a call: unknown settings, steps, sets, configurations,
    variants, or a MATCH that picks no bench problem."""
    settings = dict(word.split("=", 1) for word in shlex.split(call) if "=" in word)
    found = [f"unknown setting {key}" for key in settings.keys() - KNOWN_SETTINGS]
    step_names = steps(Path("out"), "python3", "make", "", "")
    found += [f"unknown step {name!r}" for name in settings["STEPS"].split(",") if name not in step_names]
    sets = [name for name in settings.get("SETS", "").split(",") if name] or None
    chosen = True  # whether SETS and CONFIGS name problems, for MATCH to choose among
    try:
        configs = parse_configs(settings.get("CONFIGS", ""))
    except ValueError as err:
        found.append(str(err))
        configs, chosen = None, False
    try:
        problems(sets, configs)
    except ValueError as err:
        found.append(str(err))
        sets, chosen = None, False
    try:
        parse_variants(settings.get("VARIANTS", ""), plan_report.kernel_path_names())
    except ValueError as err:
        found.append(str(err))
    try:
        parse_models(settings.get("MODELS", ""))
    except ValueError as err:
        found.append(str(err))
    try:
        gpu_test_targets(settings.get("TESTS", ""))
    except HarnessError as err:
        found.append(str(err))
    if "MATCH" in settings and chosen:
        named = settings["STEPS"].split(",")
        try:
            if "profile" in named:
                targets(sets, settings.get("PASSES", DEFAULT_PASSES).split(","), settings["MATCH"], configs)
            if {"bench", "look-back", "routed"} & set(named):
                check_problem_choice(settings.get("SETS", ""), settings.get("CONFIGS", ""), settings["MATCH"])
        except HarnessError as err:
            found.append(str(err))
    return found


def test_the_plan_for_the_next_gpu_session_names_only_what_the_harness_takes():
    calls = planned_calls(NOTES.read_text())
    assert len(calls) >= 5, calls  # probe/tests/sanitizer, two benches, a routed run, the look-back and profile
    assert {name for call in calls for name in shlex.split(call)[0].removeprefix("STEPS=").split(",")} >= {
        "probe", "tests", "sanitizer", "bench"}
    assert {call: call_problems(call) for call in calls} == {call: [] for call in calls}


@pytest.mark.parametrize("call, problem", [
    ("STEPS=probe,test", "unknown step 'test'"),
    ("STEPS=bench SETS=MobileNetV2,ResNet-50", "unknown layer set(s) ['ResNet-50']"),
    ("STEPS=bench VARIANTS=stock,ours-without-channels_last_streams", "unknown variant 'ours-without-channels_last_streams'"),
    ('STEPS=profile SETS="Mamba conv1d" MATCH="L=4096 b8"', "no bench problem of ['Mamba conv1d'] matches"),
    ("STEPS=bench VARIANT=ours", "unknown setting VARIANT"),
    ("STEPS=bench CONFIGS=float32/nhwc", "unknown configuration 'float32/nhwc'"),
    ("STEPS=models MODELS=MobileNetV3", "unknown model(s) ['MobileNetV3']"),
    ("STEPS=tests TESTS=kernel", "TESTS names ['kernel']"),
    ('STEPS=profile SETS=ConvNeXt-T CONFIGS=coverage MATCH="bfloat16 channels_last"', "no bench problem of ['ConvNeXt-T'] matches"),
    ('STEPS=bench SETS=ConvNeXt-T MATCH="b2 "', "no problem of the chosen sets and configurations matches MATCH='b2 '"),
])
def test_a_plan_with_a_typo_is_refused_here(call, problem):
    found = call_problems(call)
    assert len(found) == 1 and problem in found[0], found


def test_the_plan_is_found_in_the_notes():
    notes = f"x\n{PLAN_START} (each a call):\n1. `STEPS=probe`\n2. `STEPS=bench\n   SETS=MobileNetV2`\n{PLAN_END}: `STEPS=tests`"
    assert planned_calls(notes) == ["STEPS=probe", "STEPS=bench SETS=MobileNetV2"]
