"""`make bench-models` on the CPU: the networks (parameter counts, depthwise layers), the float64
check with a correct variant and a planted bug, the steps, the depthwise floor (in the pinned torch,
tests/run_models_on_cpu.py); the settings, the report and the CLI (here)."""

import json
import math
import subprocess
import sys

import pytest

from build_scripts import REPO_ROOT
from build_scripts.__main__ import main
from build_scripts.bench.layers import CONVNEXT_T, EFFICIENTNET_B0, MOBILENET_V2
from build_scripts.bench.model_report import failed_checks, markdown, write_model_report
from build_scripts.bench.schema import (
    MODEL_NAMES, MODEL_VARIANTS, MODELS_SCHEMA, parse_model_variants, parse_models, report_file_name,
)

# torchvision's builds of the same models (their weights' meta["num_params"]).
TORCHVISION_PARAMETERS = {"MobileNetV2": 3_504_872, "EfficientNet-B0": 5_288_548, "ConvNeXt-T": 28_589_128}


@pytest.fixture(scope="module")
def found():
    from build_scripts.pin import load_pin
    from build_scripts.runtime_env import ensure_runtime_env
    from build_scripts.wheel_cache import cache_dir
    python = ensure_runtime_env(load_pin(), cache_dir())
    proc = subprocess.run([str(python), str(REPO_ROOT / "tests" / "run_models_on_cpu.py")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _layer_keys(layers):
    return {(layer.channels, layer.length, layer.kernel, layer.stride, layer.bias) for layer in layers}


@pytest.mark.l0
def test_the_networks_are_torchvisions_by_their_parameter_counts(found):
    assert found["parameters"] == TORCHVISION_PARAMETERS
    assert tuple(found["parameters"]) == MODEL_NAMES


@pytest.mark.l0
def test_their_depthwise_layers_are_those_the_bench_times(found):
    census = {name: [tuple(layer) for layer in layers] for name, layers in found["census"].items()}
    assert {name: len(layers) for name, layers in census.items()} == {
        "MobileNetV2": 17, "EfficientNet-B0": 16, "ConvNeXt-T": 18}
    assert set(census["MobileNetV2"]) == _layer_keys(MOBILENET_V2)
    assert set(census["ConvNeXt-T"]) == _layer_keys(CONVNEXT_T)
    # the issue's EfficientNet-B0 set leaves out three the model has: 144@56 k3 (MobileNetV2's 144@56),
    # 480@14 k5 and 1152@7 k3
    assert set(census["EfficientNet-B0"]) - _layer_keys(EFFICIENTNET_B0) == {
        (144, 56, 3, 1, False), (480, 14, 5, 1, False), (1152, 7, 3, 1, False)}
    assert _layer_keys(EFFICIENTNET_B0) <= set(census["EfficientNet-B0"])


@pytest.mark.l0
def test_the_depthwise_floor_counts_every_depthwise_layer_of_the_model(found):
    # ConvNeXt-T's inference, fp32 NCHW, batch 1, at 1 byte/ms: 3, 3, 9 and 3 blocks of 96@56, 192@28,
    # 384@14 and 768@7, each reading its input, 7x7 weights and bias, and writing its output
    blocks = ((3, 96, 56), (3, 192, 28), (9, 384, 14), (3, 768, 7))
    expected = sum(n * 4 * (2 * c * h * h + c * 49 + c) for n, c, h in blocks)
    assert found["floor"]["ConvNeXt-T"] == expected


@pytest.mark.l0
@pytest.mark.parametrize("model", MODEL_NAMES)
@pytest.mark.parametrize("config", ["float32 contiguous", "bfloat16 channels_last"])
def test_the_check_passes_a_correct_variant_and_catches_a_flipped_filter(found, model, config):
    correct, flipped = (found["check"][f"{model} {config} {bug}"] for bug in ("correct", "flipped"))
    assert correct["stock"]["ok"] and correct["ours"]["ok"], correct
    assert correct["ours"]["error"] == correct["stock"]["error"]  # the same convolutions, on the CPU
    assert flipped["stock"]["ok"] and not flipped["ours"]["ok"], flipped
    # bf16's own error through the whole model leaves little room (MobileNetV2: 2.2x to 2.6x by the CPU's
    # threads); the layer check below is the sharp one
    assert flipped["ours"]["of_bound"] > 1.5, flipped


@pytest.mark.l0
@pytest.mark.parametrize("model", MODEL_NAMES)
@pytest.mark.parametrize("config", ["float32 contiguous", "bfloat16 channels_last"])
def test_the_layer_check_passes_a_correct_variant_and_catches_each_planted_bug(found, model, config):
    layers = {"MobileNetV2": 17, "EfficientNet-B0": 16, "ConvNeXt-T": 18}[model]
    tensors_a_layer = 4 if model == "ConvNeXt-T" else 3  # output, grad_input, grad_weight[, grad_bias]
    verdicts = {key.removeprefix(f"{model} {config} "): v for key, v in found["layers"].items()
                if key.startswith(f"{model} {config} ")}
    for mode, tensors in (("training", layers * tensors_a_layer), ("inference", layers)):
        correct = verdicts[f"{mode} correct"]
        assert correct["ok"] and correct["tensors"] == tensors and correct["error"] < correct["tolerance"] / 3, correct
        assert correct["zero_references"] == [], correct
        flipped = verdicts[f"{mode} flipped"]
        assert not flipped["ok"] and flipped["error"] > 10 * flipped["tolerance"], flipped
    # the backward-only bugs, which a forward pass cannot see and bf16's whole-model bound let through
    weight = verdicts["training weight-gradient"]
    assert not weight["ok"] and weight["worst"].endswith(" grad_weight") and weight["error"] > 10 * weight["tolerance"]
    grad_input = verdicts["training input-gradient"]
    assert not grad_input["ok"] and grad_input["worst"].endswith(" grad_input"), grad_input
    assert grad_input["error"] == pytest.approx(0.1, abs=0.01)  # 10 % off, as planted
    assert verdicts["inference weight-gradient"]["ok"] and verdicts["inference input-gradient"]["ok"]


@pytest.mark.l0
def test_a_nan_or_an_infinity_the_reference_lacks_never_matches(found):
    """max() in Python drops a NaN: a kernel writing NaNs passed every float64 check until 2026-11-26."""
    inf = float("inf")
    assert found["relative_error"] == {"equal": 0.0, "off by 0.4": pytest.approx(0.1, abs=0.005), "NaN": inf,
                                       "finite for inf": inf, "-inf for inf": inf, "extra inf": inf,
                                       "NaN in both": 0.5}


@pytest.mark.l0
def test_where_stock_s_own_step_is_not_finite_the_whole_model_check_judges_no_variant(found):
    for variant, verdict in found["overflow"].items():
        assert not verdict["ok"], (variant, verdict)
        assert verdict["failed"].startswith("stock's own step, the yardstick, is not finite on ['grad "), verdict


@pytest.mark.l0
def test_fp16_gradients_are_checked_under_a_loss_scale_where_they_would_underflow(found):
    """ConvNeXt-T's 1e-6 layer scale puts its blocks' gradients below fp16's range: unscaled, every
    variant computes zeros there, and a wrong weight gradient passes."""
    fp16 = found["fp16"]
    assert fp16["correct unscaled"]["ok"] and fp16["weight-gradient unscaled"]["ok"]  # the blind spot
    assert len(fp16["correct unscaled"]["zero_references"]) > 36, fp16["correct unscaled"]
    scale = fp16["correct"]["scale"]
    assert scale == 2 ** round(math.log2(scale)) and 2 ** 8 <= scale <= 2 ** 24
    assert fp16["correct"]["ok"] and fp16["correct"]["zero_references"] == [], fp16["correct"]
    caught = fp16["weight-gradient"]
    assert not caught["ok"] and caught["worst"].endswith(" grad_weight") and caught["error"] > 10 * caught["tolerance"]


@pytest.mark.l0
@pytest.mark.parametrize("model", MODEL_NAMES)
def test_the_steps_train_and_infer(found, model):
    step = found["steps"][model]
    assert 5 < step["loss"] < 9 and not step["loss_requires_grad"]  # cross-entropy of 1000 classes at random
    assert step["all_gradients"]
    assert step["logits"] == [2, 1000] and step["logits_dtype"] == "torch.bfloat16"  # autocast's
    assert not step["logits_requires_grad"]


@pytest.mark.l0
def test_a_run_checks_profiles_and_times_every_variant_in_each_mode_and_writes_as_it_goes(found):
    run = found["run"]  # MobileNetV2 at 32x32 on the CPU, the timing and profiling stood in for
    assert run["schema"] == MODELS_SCHEMA and run["variants"] == list(MODEL_VARIANTS)
    assert run["written_equals_returned"] and run["failed"] == [] and run["kernel_paths_off"] == ["row"]
    rows = run["rows"]
    assert [(r["dtype"], r["layout"], r["mode"], r["batch"]) for r in rows] == [
        ("float32", "contiguous", "training", 2), ("float32", "contiguous", "inference", 1),
        ("bfloat16", "channels_last", "training", 2), ("bfloat16", "channels_last", "inference", 1)]
    for row in rows:
        # the variant each time was taken under: the overlay off for stock, routing cudnn, ours, auto
        assert row["ms"] == {"stock": 2.0, "cudnn": 2.0, "ours": 1.0, "routed": 1.0}, row
        assert {v: k["ours"] for v, k in row["kernels"].items()} == {"stock": 0, "cudnn": 0, "ours": 7, "routed": 7}
        assert row["errors"] == {} and row["checked"] == sorted(MODEL_VARIANTS) and all(row["graph"].values())
        # each variant's timed step checked layer by layer first, in the row's mode
        assert sorted(row["layer_check"]) == sorted(MODEL_VARIANTS) and all(v["ok"] for v in row["layer_check"].values())
        assert {v["tensors"] for v in row["layer_check"].values()} == {17 * 3 if row["mode"] == "training" else 17}
        assert set(row["seconds"]) == {"whole-model check", "mode"} and all(t > 0 for t in row["seconds"].values())
    # the depthwise floor counts the passes of the mode, in the dtype's bytes, at the mode's batch
    assert rows[0]["floor"] == pytest.approx(2 * rows[2]["floor"])  # fp32 against bf16
    assert rows[0]["floor"] > 2 * 2 * rows[1]["floor"]  # three passes at batch 2 against one at batch 1
    assert "| MobileNetV2 | bf16 channels_last (autocast) | 2.000 | 2.000 | 1.000 | 1.000 | 2.00× | 2.00× | 12 % |" \
        in run["markdown"]
    assert " s over 2 model configurations: whole-model checks " in run["markdown"]
    assert run["cut"] == {"problems_done": 0, "problems": 2, "stop_after_s": 0.0, "next": "ConvNeXt-T float32 contiguous"}
    assert run["cut_rows"] == 0


def test_models_and_variants_are_checked_by_name():
    assert parse_models("") is None and parse_models("ConvNeXt-T, MobileNetV2") == ["ConvNeXt-T", "MobileNetV2"]
    with pytest.raises(ValueError, match=r"unknown model\(s\) \['ResNet-50'\]; the models are MobileNetV2, "
                                         r"EfficientNet-B0, ConvNeXt-T"):
        parse_models("MobileNetV2,ResNet-50")
    assert parse_model_variants("") == MODEL_VARIANTS and parse_model_variants("routed,stock") == ("routed", "stock")
    assert parse_model_variants("ours,routed") == ("stock", "ours", "routed")  # every figure is over stock
    with pytest.raises(ValueError, match=r"unknown variant\(s\) \['native'\] for bench-models"):
        parse_model_variants("stock,native")
    assert report_file_name(["ConvNeXt-T"], [], [], kind="models") == "models-ConvNeXt-T.json"


def _row(model, dtype, layout, mode, ms, checks=None, kernels=None):
    return {"model": model, "dtype": dtype, "layout": layout, "mode": mode, "batch": 64 if mode == "training" else 1,
            "depthwise_floor_ms": 0.5, "ms": ms, "graph": {v: True for v in ms}, "errors": {},
            "kernels": kernels or {v: {"ours": 0 if v in ("stock", "cudnn") else 34, "ours_ms": 0.0 if v in (
                "stock", "cudnn") else 2.0, "all_ms": 10.0} for v in ms},
            "check": checks or {v: {"ok": True, "worst": "logits", "error": 1e-4, "stock_error": 1e-4,
                                    "of_bound": 0.1} for v in ms}}


def _report(rows, **extra):
    return {"schema": MODELS_SCHEMA, "command": "python -m build_scripts bench models", "date": "2026-11-25",
            "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900,
            "overlay_patchset": "abc123", "routing_measured_on": "H100", "copy_bandwidth_GBps": 3000.0,
            "settings": {"repeats": 30, "warmup": 3, "check_batch": 4, "slack": 3.0, "tolerance": {"float32": 1e-3},
                         "modes": {"training": 64, "inference": 1}, "image_size": 224, "variants": list(MODEL_VARIANTS),
                         "models": list(MODEL_NAMES), "cudnn_benchmark": False, "cudnn_allow_tf32": True,
                         "configs": ["float32/contiguous"]},
            "rows": rows, **extra}


def test_the_markdown_gives_each_variants_time_the_speedups_and_the_failed_checks():
    ms = {"stock": 40.0, "cudnn": 41.0, "ours": 25.0, "routed": 20.0}
    failed = {"stock": {"ok": True, "worst": "logits", "error": 1e-4, "stock_error": 1e-4, "of_bound": 0.1},
              "cudnn": {"ok": True, "worst": "logits", "error": 1e-4, "stock_error": 1e-4, "of_bound": 0.1},
              "ours": {"ok": False, "worst": "grad 3.weight", "error": 2.0, "stock_error": 1e-5, "of_bound": 1900.0},
              "routed": {"failed": "RuntimeError: boom", "ok": False}}
    text = markdown(_report([
        _row("MobileNetV2", "float32", "contiguous", "training", ms),
        _row("ConvNeXt-T", "bfloat16", "channels_last", "training", {"stock": 10.0, "cudnn": 10.0, "ours": 8.0,
                                                                       "routed": 5.0}, checks=failed),
        _row("MobileNetV2", "float32", "contiguous", "inference", {"stock": 2.0, "cudnn": 2.0, "ours": 1.0,
                                                                     "routed": 1.0}),
    ], cut_short={"stop_after_s": 500.0, "problems_done": 2, "problems": 9, "next": "EfficientNet-B0 float32 contiguous"}))
    assert "## training step (forward, loss, backward), batch 64" in text
    assert "## inference (forward, no_grad), batch 1" in text
    assert ("| MobileNetV2 | fp32 NCHW | 40.000 | 41.000 | 25.000 | 20.000 | 2.00× | 1.60× | 20 % | 0.500 | 34, 34 "
            "| all ok |") in text
    # a variant that failed its check has no speedup: its time proves nothing
    assert "| ConvNeXt-T | bf16 channels_last (autocast) | 10.000 | 10.000 | 8.000 | 5.000 | –× | –× |" in text
    assert ("ours: whole model FAILED (grad 3.weight at 190000 % of bound); "
            "routed: whole model failed: RuntimeError: boom |") in text
    assert "- fp32 NCHW: routed / stock, geomean over the models: 2.00×" in text
    assert "- bf16 channels_last (autocast): routed / stock, geomean over the models: –×" in text
    assert "**Cut short** at 500 s: 2 of 9 model configurations measured; not measured from EfficientNet-B0" in text
    assert " s over " not in text  # rows from before 2026-11-26 carry no seconds
    assert "Kernel paths off" not in text


def test_the_markdown_names_the_kernel_paths_the_run_went_without():
    report = {**_report([_row("MobileNetV2", "float32", "contiguous", "training", {"stock": 2.0, "ours": 1.0})]),
              "kernel_paths_off": ["plane_stream"]}
    assert ("- **Kernel paths off** (DWCONV_DISABLE_KERNELS): plane_stream; ours and routed ran without them"
            in markdown(report))


def test_a_variant_failing_the_layer_check_or_its_timing_has_no_speedup_and_fails_the_run():
    ms = {"stock": 40.0, "cudnn": 41.0, "ours": 25.0, "routed": 20.0}
    row = _row("MobileNetV2", "bfloat16", "channels_last", "training", dict(ms, ours=None))
    row["layer_check"] = {v: {"ok": True, "worst": "3.body.1.0 output", "error": 4e-3, "tolerance": 3e-2,
                              "tensors": 51, "zero_references": []} for v in ms}
    row["layer_check"]["ours"] = {"ok": False, "worst": "5.body.1.0 grad_weight", "error": 1.7, "tolerance": 3e-2,
                                  "tensors": 51, "zero_references": []}
    row["errors"] = {"routed": "timing: RuntimeError: capture failed"}
    report = _report([row])
    text = markdown(report)
    assert "| 40.000 | 41.000 | – | 20.000 | –× | –× |" in text  # routed's time stands, its speedup does not
    assert ("ours: layers FAILED (5.body.1.0 grad_weight: error 1.7, tolerance 0.03); "
            "routed: timing: RuntimeError: capture failed |") in text
    assert failed_checks(report) == [
        "MobileNetV2 bfloat16 channels_last training: ours (depthwise layers: {'ok': False, 'worst': "
        "'5.body.1.0 grad_weight', 'error': 1.7, 'tolerance': 0.03, 'tensors': 51, 'zero_references': []})",
        "MobileNetV2 bfloat16 channels_last training: routed: timing: RuntimeError: capture failed"]


def test_bench_report_draws_a_models_report_and_refuses_it_beside_a_bench_one(tmp_path, capsys):
    report = tmp_path / "models-MobileNetV2.json"
    report.write_text(json.dumps(_report([_row("MobileNetV2", "float32", "contiguous", "training",
                                               {"stock": 4.0, "cudnn": 4.0, "ours": 2.0, "routed": 2.0})])))
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"schema": "dwconv-bench/1", "rows": []}))
    assert main(["bench", "report", str(report), "--out", str(tmp_path / "out")]) == 0
    assert "| MobileNetV2 | fp32 NCHW | 4.000 |" in (tmp_path / "out" / "models.md").read_text()
    assert (tmp_path / "out" / "models.png").stat().st_size > 10_000
    assert main(["bench", "report", str(bench), str(report)]) == 1
    assert f"{report} is a bench-models report: give it alone" in capsys.readouterr().err


def test_write_model_report_writes_markdown_without_matplotlib(tmp_path):
    report = tmp_path / "models.json"
    report.write_text(json.dumps(_report([_row("ConvNeXt-T", "float32", "contiguous", "inference",
                                               {"stock": 1.0, "cudnn": 1.0, "ours": 0.5, "routed": 0.5})])))
    assert write_model_report(report, tmp_path, with_plot=False) == [tmp_path / "models.md"]


def test_bench_models_refuses_an_unknown_model_before_it_looks_for_a_gpu(capsys):
    assert main(["bench", "models", "--models", "MobileNetV2,ResNet-50"]) == 1
    assert "bench-models: unknown model(s) ['ResNet-50']" in capsys.readouterr().err


def test_bench_models_needs_a_gpu_python():
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "bench", "models"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "make bench-models runs in a Python with torch 2.11.0+cu130 and a GPU" in proc.stderr
