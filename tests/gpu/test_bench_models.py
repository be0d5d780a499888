"""`make bench-models` end to end on MobileNetV2: every variant passes the float64 checks (the whole
model, and each depthwise layer of the timed steps), each runs
the kernels it claims (stock and the cuDNN routing none of ours, `ours` one or more for each of the
model's 17 depthwise convolutions and their gradients), training steps and inference are timed by
graph replay, and the report and markdown are written. Speed is not asserted here."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch 2.11.0+cu130, which is not installed here")
if not torch.cuda.is_available():
    pytest.skip("the GPU tests need a CUDA device; there is none here", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from build_scripts.bench.model_report import failed_checks, markdown  # noqa: E402
from build_scripts.bench.model_run import run_models  # noqa: E402
from build_scripts.bench.schema import MODEL_VARIANTS  # noqa: E402

DEPTHWISE_LAYERS = 17  # MobileNetV2's (tests/test_bench_models.py)
CONFIGS = (("float32", "contiguous"), ("bfloat16", "channels_last"))


def test_a_small_model_run(tmp_path):
    out = tmp_path / "models.json"
    report = run_models(out, ["MobileNetV2"], repeats=3, warmup=1, command="test", configs=CONFIGS)
    assert out.is_file()
    assert failed_checks(report) == []
    rows = report["rows"]
    assert [(r["dtype"], r["mode"]) for r in rows] == [
        ("float32", "training"), ("float32", "inference"), ("bfloat16", "training"), ("bfloat16", "inference")]
    for row in rows:
        label = (row["dtype"], row["mode"])
        assert set(row["ms"]) == set(MODEL_VARIANTS)
        layers = row["layer_check"]
        assert all(v["ok"] and not v["zero_references"] for v in layers.values()), (label, layers)
        assert {v["tensors"] for v in layers.values()} == {DEPTHWISE_LAYERS * (3 if row["mode"] == "training" else 1)}
        assert all(t is not None and 0 < t < 1000 for t in row["ms"].values()), (label, row["errors"])
        assert all(row["graph"].values()), (label, row["graph"])  # the training step too: one graph
        ours = {variant: kernels["ours"] for variant, kernels in row["kernels"].items()}
        passes = DEPTHWISE_LAYERS * (2 if row["mode"] == "training" else 1)  # forward, and one backward call
        assert ours["stock"] == 0 and ours["cudnn"] == 0, (label, ours)
        assert ours["ours"] >= passes, (label, ours)
        assert 0 <= ours["routed"] <= ours["ours"], (label, ours)
        kernels = row["kernels"]["ours"]
        assert 0 < kernels["ours_ms"] < kernels["all_ms"], (label, kernels)
        assert row["depthwise_floor_ms"] > 0
    assert rows[0]["depthwise_floor_ms"] == pytest.approx(2 * rows[2]["depthwise_floor_ms"])  # fp32's bytes: bf16's x2
    text = markdown(report)
    assert "## training step (forward, loss, backward), batch 64" in text and "| MobileNetV2 | bf16 channels_last" in text


def test_a_model_run_past_its_time_limit_stops_and_says_where(tmp_path):
    report = run_models(tmp_path / "models.json", ["ConvNeXt-T"], "stock,ours", repeats=3, warmup=1, command="test",
                        stop_after_s=0.0, configs=CONFIGS)
    assert report["rows"] == []  # measuring the copy bandwidth alone took longer than no time
    assert report["cut_short"] == {"problems_done": 0, "problems": 2, "stop_after_s": 0.0,
                                   "next": "ConvNeXt-T float32 contiguous"}
