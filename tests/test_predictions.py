"""The versions' predictions (notes/predictions.toml) and their grading in bench.md: the file held to the
harness (its rows are bench rows, its switches reach them, the next GPU session's plan times them), and
the grade read from a report. The times in these reports are synthetic test inputs, not measurements."""

from __future__ import annotations

import dataclasses

import pytest

from build_scripts import REPO_ROOT, plan_report
from build_scripts.bench import predictions
from build_scripts.bench.predictions import Prediction, grade, markdown_lines, parse
from build_scripts.bench.report import markdown, write_report
from build_scripts.gpu_plan import Leg, estimate_text, leg_bench_rows, leg_predictions, parse_plan
from tests.test_bench import synthetic_report

PATHS = plan_report.kernel_path_names()
PLAN = REPO_ROOT / "notes" / "next-gpu-session.plan"
# The entries no leg of the plan times (version, the start of the claim), and why.
NOT_IN_THE_PLAN = {
    ("v42", "ConvNeXt-T 96@56"): "window_shared_opt_in: of the bench's passes only the half types' 7x7 weight "
                                 "gradients reach it, and the tensor cores take those since v43 (the README's table)",
    ("v42", "ConvNeXt-T 192@28"): "the same",
    ("v42", "EfficientNet-B0 144@56 k5 s2"): "fp32 channels_last, a configuration of CONFIGS=coverage",
    ("v41", "fp32 channels_last alike: 3x3 weight gradients of 112x112"): "fp32 channels_last, likewise",
    ("v41", "fp32 channels_last alike: 3x3 weight gradients of 28x28"): "fp32 channels_last, likewise",
    ("v49", "the fp32 NCHW training steps"): "two variants of its own for one claim; v49's passes are graded",
}


def planned_elsewhere(p: Prediction) -> bool:
    return any(p.version == version and p.claim.startswith(start) for version, start in NOT_IN_THE_PLAN)

ENTRY = """
[[prediction]]
version = "v57"
claim = "the stride-2 backward-inputs in whole waves"
path = "stride2_grad_input_waves"
layers = ["MobileNetV2 192@28 s2", "EfficientNet-B0 240@28 k3 s2"]
configs = ["bfloat16/channels_last"]
passes = ["backward_input"]
batch = 64
gain = [1.15, 1.5]
"""


def entry(**changes) -> str:
    """ENTRY with fields replaced (a value of None drops the field), as TOML."""
    lines = []
    for line in ENTRY.strip().splitlines():
        key = line.split(" = ")[0]
        if key in changes:
            if changes[key] is not None:
                lines.append(f"{key} = {changes.pop(key)}")
            else:
                changes.pop(key)
            continue
        lines.append(line)
    return "\n".join(lines + [f"{key} = {value}" for key, value in changes.items()]) + "\n"


def test_an_entry_names_its_rows_and_its_measure():
    p, = parse(ENTRY, PATHS)
    assert (p.version, p.measure, p.low, p.high, p.variant) == ("v57", "gain", 1.15, 1.5, "ours")
    assert p.baseline == "ours-without-stride2_grad_input_waves"
    assert p.rows == (("MobileNetV2", "192@28 s2", 64, "bfloat16", "channels_last", "backward_input"),
                      ("EfficientNet-B0", "240@28 k3 s2", 64, "bfloat16", "channels_last", "backward_input"))
    assert p.measured_as() == "ours without stride2_grad_input_waves / ours" and p.range_text() == "1.15–1.5×"
    floor, = parse(entry(gain=None, floor_multiple="[1.1, 1.25]", variant='"ours-without-plane_stream_vector_rows"'),
                   PATHS)
    assert floor.baseline is None and floor.measured_as() == "ours without plane_stream_vector_rows / floor"
    two, = parse(entry(variant='"ours-without-channels_last_mma_grad_weight"',
                       baseline='"ours-without-channels_last_mma_grad_weight+window_shared_opt_in"'), PATHS)
    assert two.measured_as() == ("ours without channels_last_mma_grad_weight + window_shared_opt_in / "
                                 "ours without channels_last_mma_grad_weight")


@pytest.mark.parametrize("changes, message", [
    ({"colour": '"red"'}, "unknown field(s) colour"),
    ({"version": '"57"'}, "version must be v<number>"),
    ({"claim": '" "'}, "claim must say the prediction in words"),
    ({"path": '"stride2_waves"'}, "no kernel path is called 'stride2_waves'"),
    ({"floor_multiple": "[1.0, 1.2]"}, "give one measure of gain, floor_multiple, not 2"),
    ({"gain": None}, "give one measure of gain, floor_multiple, not 0"),
    ({"gain": "[1.5, 1.15]"}, "must have 0 < low <= high"),
    ({"gain": "[0, 1.15]"}, "must have 0 < low <= high"),
    ({"gain": "[1.2]"}, "a range is [low, high]"),
    ({"gain": "[true, 2]"}, "a range is [low, high]"),
    ({"path": None}, "a gain needs a baseline"),
    ({"gain": None, "floor_multiple": "[1, 2]", "baseline": '"ours"'}, "it takes no baseline"),
    ({"variant": '"cudnn"'}, "a prediction compares ours, or ours without kernel paths"),
    ({"baseline": '"look-back"'}, "a prediction compares ours"),
    ({"baseline": '"ours-without-nothing"'}, "unknown variant 'ours-without-nothing'"),
    ({"baseline": '"ours"'}, "the variant and the baseline are both 'ours'"),
    ({"layers": '["MobileNetV2 192@29 s2"]'}, "no bench layer is called 'MobileNetV2 192@29 s2'"),
    ({"layers": '["192@28 s2"]'}, "no bench layer is called '192@28 s2'"),
    ({"layers": "[]"}, "layers must list"),
    ({"batch": "8"}, "the bench does not time MobileNetV2 192@28 s2 at batch 8 in bfloat16/channels_last"),
    ({"batch": "1"}, "MobileNetV2 192@28 s2 b1 bfloat16 channels_last is timed in forward only, not backward_input"),
    ({"passes": '["backward"]'}, "passes must list some of forward, backward_input, backward_weight, step"),
    ({"configs": '["bfloat16/nhwc"]'}, "unknown configuration 'bfloat16/nhwc'"),
    ({"layers": '["MobileNetV2 192@28 s2", "MobileNetV2 192@28 s2"]'}, "a row is named twice"),
])
def test_a_malformed_entry_is_refused_with_its_number_and_what_is_wrong(changes, message):
    with pytest.raises(ValueError) as refused:
        parse(ENTRY + entry(**changes), PATHS, "p.toml")
    assert str(refused.value).startswith("p.toml: prediction 2 (")
    assert message in str(refused.value)


def test_a_file_that_is_no_toml_is_refused_with_its_name():
    with pytest.raises(ValueError, match=r"^p\.toml: "):
        parse("[[prediction]\nversion = 1", PATHS, "p.toml")
    with pytest.raises(ValueError, match="array of tables"):
        parse("prediction = 3", PATHS, "p.toml")


def test_the_committed_predictions_load():
    loaded = predictions.load()
    assert len({p.version for p in loaded}) == 16 and all(p.rows for p in loaded)


def rows_timed(ms_by_variant: dict[str, list[float]], prediction: Prediction) -> list[dict]:
    """Report rows of the prediction's problems with the given times, a list a variant (a row each)."""
    report = synthetic_report()
    wanted = list(prediction.rows)
    rows = [r for r in report["rows"] if (r["set"], r["layer"], r["batch"], r["dtype"], r["layout"], r["pass"])
            in wanted]
    assert len(rows) == len(wanted)
    for i, row in enumerate(rows):
        row["ms"] = {variant: times[i] for variant, times in ms_by_variant.items()}
        row["check"] = {variant: {"ok": True} for variant in ms_by_variant}
    return rows


def test_a_gain_is_held_in_its_range_better_past_it_and_short_below_it():
    p, = parse(ENTRY, PATHS)
    without = "ours-without-stride2_grad_input_waves"
    held = grade(p, rows_timed({"ours": [1.0, 1.0], without: [1.2, 1.4]}, p))
    assert held.values == pytest.approx((1.2, 1.4)) and held.median == pytest.approx(1.3)
    assert (held.in_range, held.verdict) == (2, "held")
    better = grade(p, rows_timed({"ours": [1.0, 1.0], without: [1.4, 1.8]}, p))
    assert (better.in_range, better.verdict) == (1, "better")
    short = grade(p, rows_timed({"ours": [1.0, 1.0], without: [1.0, 1.1]}, p))
    assert (short.in_range, short.verdict) == (0, "short")


def test_a_floor_multiple_is_better_below_its_range():
    p, = parse(entry(gain=None, floor_multiple="[1.1, 1.25]"), PATHS)
    floors = [r["floor_ms"] for r in rows_timed({"ours": [1, 1]}, p)]
    assert grade(p, rows_timed({"ours": [f * 1.2 for f in floors]}, p)).verdict == "held"
    assert grade(p, rows_timed({"ours": [f * 1.05 for f in floors]}, p)).verdict == "better"
    assert grade(p, rows_timed({"ours": [f * 1.5 for f in floors]}, p)).verdict == "short"


def test_a_row_without_both_times_or_with_a_failed_check_grades_nothing():
    p, = parse(ENTRY, PATHS)
    without = "ours-without-stride2_grad_input_waves"
    rows = rows_timed({"ours": [1.0, 1.0], without: [1.3, 3.0]}, p)
    rows[1]["check"][without] = {"ok": False, "failed": "backward_input"}
    assert grade(p, rows).values == pytest.approx((1.3,))
    rows[0]["ms"][without] = None
    nothing = grade(p, rows)
    assert (nothing.values, nothing.median, nothing.verdict) == ((), None, "–")
    rows[1]["check"][without] = {"ok": True}
    rows[1]["check"]["ours"] = {"ok": False, "error": "illegal memory access"}
    assert grade(p, rows).values == ()


def look_back_report(gain: float, paths_off=()) -> dict:
    """The synthetic report with ours without stride2_grad_input_waves `gain` times slower than ours."""
    report = synthetic_report()
    without = "ours-without-stride2_grad_input_waves"
    report["settings"]["variants"] = [*report["settings"]["variants"], without]
    for row in report["rows"]:
        row["ms"][without] = row["ms"]["ours"] * gain
        row["check"][without] = {"ok": True}
    if paths_off:
        report["kernel_paths_off"] = list(paths_off)
    return report


def test_bench_md_grades_the_predictions_whose_variants_the_run_timed():
    p, = parse(ENTRY, PATHS)
    text = markdown(look_back_report(1.3), [p])
    section = text.split("## Predictions (notes/predictions.toml)")[1].split("\n## ")[0]
    assert ("| v57 | the stride-2 backward-inputs in whole waves: 1.15–1.5× | ours without stride2_grad_input_waves "
            "/ ours | 2 of 2 | 1.30× | 1.30× – 1.30× | 2 | held |") in section
    assert "## Predictions" not in markdown(synthetic_report(), [p])  # no ours-without-...: nothing to grade
    assert "## Predictions" not in markdown(look_back_report(1.3))  # no predictions given
    off = markdown(look_back_report(1.3, ["pixel"]), [p])
    assert "Not graded: this run had kernel paths off (pixel)" in off and "| v57 |" not in off


def test_a_gain_in_a_merged_report_divides_times_of_one_run(tmp_path):
    """The launches leg times ours alone again: its ours is divided by no other run's baseline."""
    import json
    from build_scripts.bench.report import load
    p, = parse(ENTRY, PATHS)
    again = look_back_report(1.3)
    again["settings"]["variants"] = ["ours"]
    again["rows"] = [{**row, "ms": {"ours": row["ms"]["ours"] * 2}} for row in again["rows"]]
    paths = [tmp_path / "bench.json", tmp_path / "launches.json"]
    for path, report in zip(paths, (look_back_report(1.3), again)):
        path.write_text(json.dumps(report))
    assert grade(p, load(paths)["rows"]).values == pytest.approx((1.3, 1.3))


def test_a_run_whose_overlay_had_not_the_versions_path_grades_none_of_its_predictions(tmp_path):
    """A floor multiple needs only ours, which an overlay from before the version times with the kernels
    the version replaced (the H200's v38 reports, for v41-v54's): it is named, not graded. A merged
    report has the paths every one of its runs' overlays had."""
    import json
    from build_scripts.bench.report import load
    floor, = parse(entry(gain=None, floor_multiple="[1.1, 1.25]"), PATHS)
    other, = parse(entry(gain=None, floor_multiple="[1.1, 1.25]", path='"pixel"'), PATHS)
    report = synthetic_report()
    assert "| v57 |" in "\n".join(markdown_lines(report, [floor], []))
    report["kernel_paths"] = [path for path in report["kernel_paths"] if path != "stride2_grad_input_waves"]
    lines = markdown_lines(report, [floor, other], [])
    assert ("Not graded: 1 prediction of v57, whose kernel paths this run's overlay did not have (an overlay from "
            "before them times their rows with the kernels they replaced).") in lines
    assert sum(line.startswith("| v57 |") for line in lines) == 1  # the other entry, on pixel, is graded
    del report["kernel_paths"]  # a report from before the paths were recorded
    assert "Not graded: 2 predictions of v57" in "\n".join(markdown_lines(report, [floor, other], []))
    paths = [tmp_path / "new.json", tmp_path / "old.json"]
    paths[0].write_text(json.dumps(synthetic_report()))
    paths[1].write_text(json.dumps(report))
    assert load(paths)["kernel_paths"] == [] and load(paths[:1])["kernel_paths"] == PATHS


def test_a_gain_is_graded_whatever_overlay_a_merged_run_had(tmp_path):
    """A gain's two times come from the one run that timed ours without the path, which only a run whose
    overlay had it does: merged with a report from before the paths were recorded, it is still graded."""
    import json
    from build_scripts.bench.report import load
    gain, = parse(ENTRY, PATHS)
    old = synthetic_report()
    del old["kernel_paths"]
    paths = [tmp_path / "old.json", tmp_path / "new.json"]
    paths[0].write_text(json.dumps(old))
    paths[1].write_text(json.dumps(look_back_report(1.3)))
    merged = load(paths)
    assert merged["kernel_paths"] == []
    assert any(line.startswith("| v57 |") and "| held |" in line for line in markdown_lines(merged, [gain], []))


def test_bench_md_lists_the_predictions_by_version():
    v57, = parse(ENTRY, PATHS)
    v9 = dataclasses.replace(v57, version="v9", claim="an older one")
    v100 = dataclasses.replace(v57, version="v100", claim="a newer one")
    table = [line.split(" | ")[0] for line in markdown_lines(look_back_report(1.3), [v100, v57, v9], [])
             if line.startswith("| v") and not line.startswith("| version")]
    assert table == ["| v9", "| v57", "| v100"]


def test_a_prediction_none_of_whose_rows_the_run_timed_is_left_out():
    p, = parse(entry(layers='["ConvNeXt-T 96@56"]', passes='["forward"]'), PATHS)
    report = look_back_report(1.3)
    report["rows"] = [r for r in report["rows"] if r["set"] != "ConvNeXt-T"]
    assert markdown_lines(report, [p], []) == []


def test_write_report_grades_the_committed_predictions_and_survives_a_broken_file(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    path.write_text(__import__("json").dumps(look_back_report(1.3)))
    bench_md = write_report([path], tmp_path / "out", with_plots=False)[0]
    assert "| v57 | the latency-bound stride-2 backward-inputs in whole waves: 1.15–1.5×" in bench_md.read_text()
    broken = tmp_path / "predictions.toml"
    broken.write_text(ENTRY.replace('"v57"', '"57"'))
    monkeypatch.setattr(predictions, "PREDICTIONS_FILE", broken)
    text = write_report([path], tmp_path / "broken", with_plots=False)[0].read_text()
    assert f"## Predictions\n\nNot graded: {broken}: prediction 1 (57): version must be v<number>" in text
    assert "## MobileNetV2, bf16 channels_last, batch 64" in text  # the rest of the report is written


def test_a_legs_bench_rows_are_its_sets_configurations_and_match():
    rows = leg_bench_rows({"SETS": "ConvNeXt-T", "CONFIGS": "float32/contiguous", "MATCH": "b64"})
    assert len(rows) == 4 * 4 and {r[2] for r in rows} == {64}
    assert len(leg_bench_rows({"SETS": "Mamba conv1d", "MATCH": "b8"})) == 4 * 2 * 4


def test_a_leg_grades_the_predictions_its_bench_steps_time():
    p, = parse(ENTRY, PATHS)
    leg = "STEPS=bench SETS=MobileNetV2 CONFIGS=bfloat16/channels_last VARIANTS=ours,ours-without-stride2_grad_input_waves"
    assert leg_predictions(Leg("a", dict(w.split("=", 1) for w in leg.split())), [p]) == [p]
    for other in (leg.replace(",ours-without-stride2_grad_input_waves", ""),  # the baseline not timed
                  leg.replace("bfloat16", "float16"),  # no row of it
                  leg + " DWCONV_DISABLE_KERNELS=pixel",  # ours is not the kernels predicted for
                  "STEPS=probe,tests"):
        assert leg_predictions(Leg("a", dict(w.split("=", 1) for w in other.split())), [p]) == []
    look_back = Leg("b", {"STEPS": "look-back", "SETS": "EfficientNet-B0", "MATCH": "b64"})
    assert leg_predictions(look_back, [p]) == [p]


def test_the_next_gpu_sessions_plan_times_every_prediction_but_those_it_says_why_not():
    legs = parse_plan(PLAN.read_text())
    loaded = predictions.load()
    timed = [p for p in loaded if any(p in leg_predictions(leg, loaded) for leg in legs)]
    assert [p for p in loaded if p not in timed] == [p for p in loaded if planned_elsewhere(p)]
    assert len([p for p in loaded if planned_elsewhere(p)]) == len(NOT_IN_THE_PLAN)  # each key names one entry


def test_the_estimate_names_the_versions_each_leg_grades():
    from build_scripts.bench.sizing import History
    legs = parse_plan(PLAN.read_text())
    text = estimate_text(legs, 540, History.load(REPO_ROOT / "results"), predictions.load())
    bf16 = next(line for line in text.splitlines() if line.startswith("| bf16-routed |"))
    assert bf16.endswith("| v41, v43, v47, v48, v56, v57 |")
    assert next(line for line in text.splitlines() if line.startswith("| correctness |")).endswith("| – |")


# --- the predictions against the host code's plans (the kernel-choice driver, g++ and the pinned torch) ---

@pytest.fixture(scope="module")
def h100_registers() -> list[str]:
    """The driver's registers lines for sm_90 from L0's compiler report, so that the planners that count a
    kernel's own registers plan as they will on an H100."""
    from build_scripts.check import run_l0
    from build_scripts.patchset import PatchSet
    from build_scripts.pin import load_pin
    from build_scripts.resource_report import kernel_resources
    report = run_l0(load_pin(), PatchSet.load())
    resources = [row for directory in report.compiler_reports.values() for row in kernel_resources(directory)]
    return plan_report.registers_lines(resources, "sm_90")


@pytest.mark.l0
def test_each_prediction_is_on_rows_its_switch_reaches(kernel_choice_driver, h100_registers):
    """A gain on a row both its sides plan alike could only be noise (an "unchanged" one too: it says
    the version changes nothing there): the entry names a row its version does not reach. Likewise a
    floor multiple of a path's kernels."""
    unreached = {}
    for p in predictions.load():
        left = predictions.rows_the_switch_leaves(p, kernel_choice_driver, plan_report.H100, h100_registers)
        if left:
            unreached[f"{p.version}: {p.claim}"] = left
    assert unreached == {}


def path_versions() -> dict[str, int]:
    """Each kernel path and the version that added it: the README's tables' "since" (the earliest, where
    a later version's row names the path too)."""
    from tests.test_readme_kernels import paths_of, table_rows
    versions: dict[str, int] = {}
    for row in table_rows():
        for path in paths_of(row):
            versions[path] = min(versions.get(path, 10 ** 6), int(row["since"].lstrip("v")))
    return versions


@pytest.mark.l0
def test_no_later_version_reaches_either_side_of_a_prediction(kernel_choice_driver, h100_registers):
    """A prediction is of its version against the kernels before it: a path added since, which changes
    the launches of either side on one of its rows, would put that version's work into the gain (v47's
    bands, recut by v56 on both sides). Such an entry switches the later path off on both sides."""
    since = path_versions()
    reached = {}
    for p in predictions.load():
        later = [path for path, version in since.items() if version > int(p.version.lstrip("v"))]
        found = predictions.later_paths_reaching(p, later, kernel_choice_driver, plan_report.H100, h100_registers)
        if found:
            reached[f"{p.version}: {p.claim}"] = sorted(found)
    assert reached == {}


@pytest.mark.l0
def test_the_later_version_check_finds_v56_inside_v47(kernel_choice_driver, h100_registers):
    v47 = next(p for p in predictions.load() if p.version == "v47")
    plain = dataclasses.replace(v47, variant="ours", baseline="ours-without-channels_last_mma_three_blocks")
    found = predictions.later_paths_reaching(plain, ["stream_band_waves", "stride2_grad_input_waves"],
                                             kernel_choice_driver, plan_report.H100, h100_registers)
    assert list(found) == ["stream_band_waves"] and found["stream_band_waves"]
    assert predictions.later_paths_reaching(v47, ["stream_band_waves"], kernel_choice_driver, plan_report.H100,
                                            h100_registers) == {}


@pytest.mark.l0
def test_the_switch_check_finds_a_row_the_version_does_not_reach(kernel_choice_driver, h100_registers):
    p, = parse(ENTRY, PATHS)
    assert predictions.rows_the_switch_leaves(p, kernel_choice_driver, plan_report.H100, h100_registers) == []
    forward, = parse(entry(passes='["forward", "backward_input"]'), PATHS)  # v57 plans the backward-input alone
    left = predictions.rows_the_switch_leaves(forward, kernel_choice_driver, plan_report.H100, h100_registers)
    assert left == [("MobileNetV2", "192@28 s2", 64, "bfloat16", "channels_last", "forward"),
                    ("EfficientNet-B0", "240@28 k3 s2", 64, "bfloat16", "channels_last", "forward")]
    fp32, = parse(entry(configs='["float32/contiguous"]'), PATHS)  # its kernel is channels_last
    assert len(predictions.rows_the_switch_leaves(fp32, kernel_choice_driver, plan_report.H100, h100_registers)) == 2
    no_path = dataclasses.replace(fp32, path=None, baseline=None, measure="floor_multiple")
    assert predictions.rows_the_switch_leaves(no_path, kernel_choice_driver, plan_report.H100, h100_registers) == []
