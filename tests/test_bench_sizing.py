"""The bench's run time estimated from recorded reports (build_scripts/bench/sizing.py), which sizes the
device calls: a synthetic report's arithmetic, then the H200 runs of 2026-11-27 against the seconds
their device calls took."""

import json
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.bench.layers import matching, problems
from build_scripts.bench.schema import SCHEMA, parse_configs, problem_row
from build_scripts.bench.floor import allocation_bytes, buffer_sets_needed, pass_bytes, rotation_bytes
from build_scripts.bench.sizing import MEMORY_BUDGET, RUN_START_S, History, estimate

H200_RESULTS = REPO_ROOT / "results" / "NVIDIA-H200" / "2026-11-27"


def write_report(folder: Path, name: str, problem, variants, ms, check_s, timing_s, buffer_sets=4, repeats=30):
    rows = []
    for passname in problem.passes:
        row = problem_row(problem, passname, 3.0e9)
        row.update(ms={v: ms[v] for v in variants}, buffer_sets=buffer_sets,
                   problem_seconds={"check": check_s, "buffers": 0.01, "timing": timing_s})
        rows.append(row)
    report = {"schema": SCHEMA, "l2_bytes": 50 << 20, "settings": {"repeats": repeats, "warmup": 3, "variants": variants},
              "rows": rows}
    (folder / name).write_text(json.dumps(report))


@pytest.fixture
def mobilenet_first():
    return matching(problems(["MobileNetV2"], parse_configs("bfloat16/channels_last")), "32@112 b64")[0]


def test_a_recorded_problem_takes_its_check_its_runs_and_each_passs_overhead(tmp_path, mobilenet_first):
    # 4 passes x 2 variants, 4 sets x (1 + 3 + 30) runs of 0.1 and 0.05 ms: 0.0816 s of runs; timing 0.1616 s,
    # so 10 ms a timed pass beyond its runs
    write_report(tmp_path, "a.json", mobilenet_first, ["stock", "ours"], {"stock": 0.1, "ours": 0.05},
                 check_s=0.4, timing_s=0.1616)
    history = History.load(tmp_path)
    assert history.pass_overhead_s() == pytest.approx(0.010)
    assert estimate([mobilenet_first], ("stock", "ours"), history).seconds == pytest.approx(RUN_START_S + 0.4 + 0.1616)
    # ours without a path runs as ours did; routed as the faster recorded; 5 repeats make fewer runs
    look_back = estimate([mobilenet_first], ("ours", "ours-without-stream_band_waves", "routed"), history, repeats=5)
    runs = 4 * (1 + 3 + 5) * 4 * 0.05 / 1000  # a variant's runs over its four passes
    assert look_back.seconds == pytest.approx(RUN_START_S + 0.4 + 3 * (runs + 4 * 0.010))
    assert look_back.text() == f"{look_back.seconds:.0f} s for 1 problems"


def test_the_check_is_the_one_of_a_run_that_met_cudnn_as_this_one_will(tmp_path, mobilenet_first):
    write_report(tmp_path, "baselines.json", mobilenet_first, ["stock", "ours"], {"stock": 0.1, "ours": 0.05},
                 check_s=0.4, timing_s=0.1616)
    write_report(tmp_path, "ours-alone.json", mobilenet_first, ["ours"], {"ours": 0.05}, check_s=0.01, timing_s=0.1)
    history = History.load(tmp_path)
    with_cudnn = estimate([mobilenet_first], ("cudnn",), history).seconds
    without = estimate([mobilenet_first], ("ours",), history).seconds
    # cudnn, never recorded, is sized as the slowest variant recorded (stock)
    assert with_cudnn - without == pytest.approx(0.39 + 4 * 34 * 4 * (0.1 - 0.05) / 1000)


def test_a_problem_never_recorded_is_scaled_by_its_bytes_from_others_of_its_kind(tmp_path, mobilenet_first):
    write_report(tmp_path, "a.json", mobilenet_first, ["ours"], {"ours": 0.05}, check_s=0.01, timing_s=0.05)
    history = History.load(tmp_path)
    other = matching(problems(["MobileNetV2"], parse_configs("bfloat16/channels_last")), "144@56 b64")[0]
    found = estimate([other], ("ours",), history)
    assert found.looked_up == 0 and "1 not recorded before" in found.text()
    # its runs at the recorded time a byte (0.05 ms a pass for 32@112's step bytes), over the sets its
    # size needs, and the kind's check
    per_run = 0.05 * pass_bytes(other, "step") / pass_bytes(mobilenet_first, "step")
    runs = buffer_sets_needed(rotation_bytes(other), allocation_bytes(other), 50 << 20, MEMORY_BUDGET) * (1 + 3 + 30)
    assert found.seconds == pytest.approx(RUN_START_S + 0.01 + 4 * (runs * per_run / 1000 + history.pass_overhead_s()))
    assert estimate([mobilenet_first, other], ("ours",), history).looked_up == 1


def recorded_step_seconds(session: str) -> float:
    row = next(line for line in (H200_RESULTS / session).read_text().splitlines() if line.startswith("| bench |"))
    return float(row.split("|")[3])


def three_sets(configs: str, match: str = ""):
    return matching(problems(["ConvNeXt-T", "MobileNetV2", "EfficientNet-B0"], parse_configs(configs)), match)


def test_the_h200_runs_are_estimated_within_a_sixth_of_what_their_device_calls_took():
    """In-sample (the estimate reads these runs' own records): the model's parts, start, checks and
    runs, add up to what the device calls took; the test below leaves a configuration out."""
    history = History.load(REPO_ROOT / "results")
    both = estimate(three_sets("float32/contiguous,bfloat16/channels_last"), ("stock", "cudnn", "ours"), history)
    assert both.seconds == pytest.approx(recorded_step_seconds("session-probe-tests-sanitizer-bench.md"), rel=1 / 6)
    fp16 = estimate(three_sets("float16/channels_last"), ("stock", "cudnn", "ours"), history)
    assert fp16.seconds == pytest.approx(recorded_step_seconds("session-fp16.md"), rel=1 / 6)


def test_a_run_of_a_configuration_never_recorded_is_estimated_within_a_third():
    """fp16's records left out: the fp16 run is sized from the bf16 and fp32 problems of its layers."""
    history = History.load(REPO_ROOT / "results")
    history.records = {label: records for label, records in history.records.items() if " float16 " not in label}
    fp16 = estimate(three_sets("float16/channels_last"), ("stock", "cudnn", "ours"), history)
    assert fp16.looked_up == 0
    assert fp16.seconds == pytest.approx(recorded_step_seconds("session-fp16.md"), rel=1 / 3)
