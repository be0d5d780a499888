"""`make bench` end to end on one small layer: the checks pass for every variant, each
variant runs what it claims (the cuDNN variant's gradients on cuDNN), every pass is timed
by graph replay, and the report and markdown are written. Speed is not asserted here."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch 2.11.0+cu130, which is not installed here")
if not torch.cuda.is_available():
    pytest.skip("the GPU tests need a CUDA device; there is none here", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_cases  # noqa: E402
from build_scripts.bench import layers  # noqa: E402
from build_scripts.bench.report import failed_checks, markdown  # noqa: E402
from build_scripts.bench.run import import_overlay, run_bench  # noqa: E402
from build_scripts.bench.variants import VARIANTS  # noqa: E402
from build_scripts.plan_report import kernel_path_names  # noqa: E402


@pytest.fixture
def one_layer_set(monkeypatch):
    tiny = {"Tiny": [layers.Layer("Tiny", "64@28 s2", 64, 28, 3, stride=2, bias=True, batches=(8, 1)),
                     layers.Layer("Tiny", "64 L=512", 64, 512, 4, bias=True, conv1d=True, padding=3, batches=(2,))]}
    monkeypatch.setattr(layers, "SETS", tiny)
    return ["Tiny"]


def test_a_small_bench_run(tmp_path, one_layer_set):
    out = tmp_path / "bench.json"
    report = run_bench(out, one_layer_set, repeats=5, warmup=1, command="test")
    assert out.is_file()
    assert failed_checks(report) == []
    rows = report["rows"]
    assert len(rows) == 3 * (4 + 1) + 2 * 4  # 2d: 3 configs x (4 training passes + inference); 1d: 2 layouts x 4
    for row in rows:
        assert set(row["ms"]) == set(VARIANTS)
        assert all(t is not None and 0 < t < 1000 for t in row["ms"].values()), (row["layer"], row["errors"])
        assert set(row["problem_seconds"]) == {"check", "buffers", "timing"}, row["problem_seconds"]
        assert all(0 <= s < 600 for s in row["problem_seconds"].values()), row["problem_seconds"]
        assert all(row["graph"].values()), row["graph"]
        assert row["backends"]["cudnn_gradients"] == "CudnnTranspose"
        assert row["floor_ms"] > 0 and row["buffer_sets"] >= 2
        assert row["compute_floor_ms"] > 0 and row["macs"] > 0
    assert 1 < report["fp32_fma_TFLOPS"] < 1000, report["fp32_fma_TFLOPS"]  # measured, in TFLOPS
    assert report["kernel_paths"] == kernel_path_names()  # the overlay's, for grading the predictions by
    channels_last_2d = [r for r in rows if r["conv"] == "2d" and r["layout"] == "channels_last"]
    assert {r["backends"]["stock_forward"] for r in channels_last_2d} == {"Cudnn"}
    text = markdown({**report, "commands": [report["command"]]})
    assert "## Tiny, bf16 channels_last, batch 8" in text


def test_a_look_back_run_times_ours_without_a_kernel_path(tmp_path, one_layer_set):
    variants = ["ours", "ours-without-register_tiled_stride2"]
    report = run_bench(tmp_path / "bench.json", one_layer_set, ",".join(variants), repeats=5, warmup=1, command="test")
    assert failed_checks(report) == []  # the fallbacks checked against float64 too
    assert report["settings"]["variants"] == variants
    for row in report["rows"]:
        assert set(row["ms"]) == set(variants) and all(row["ms"].values()), (row["layer"], row["errors"])
    text = markdown({**report, "commands": [report["command"]]})
    assert "## Look-back: what each kernel path brings" in text and "| register_tiled_stride2 |" in text
    with pytest.raises(ValueError, match="unknown variant 'ours-without-fastest'"):
        run_bench(tmp_path / "refused.json", one_layer_set, "ours,ours-without-fastest")


def test_a_run_in_a_process_with_a_kernel_path_off_times_ours_without_it_and_says_so(tmp_path, one_layer_set):
    """DWCONV_DISABLE_KERNELS (here the same switch set in the process): ours runs without the path (its
    stride-2 weight gradient on the general kernel, where with every path on 132 SMs run it register-tiled:
    test_launches_record_the_kernels_of_ours_each_pass_ran), the report records it, an ours-without of it is
    refused, and the switch is as it was after the run."""
    overlay = import_overlay()
    overlay.disable_kernels(["register_tiled_stride2"])
    try:
        report = run_bench(tmp_path / "bench.json", one_layer_set, "stock,ours", repeats=3, warmup=1,
                           command="test", match=r"64@28 s2 b8 float32 ", launches=True)
        assert overlay.disabled_kernels() == ["register_tiled_stride2"]
        with pytest.raises(ValueError, match="register_tiled_stride2 is already off in this process"):
            run_bench(tmp_path / "refused.json", one_layer_set, "ours,ours-without-register_tiled_stride2")
    finally:
        overlay.disable_kernels([])
    assert failed_checks(report) == [] and report["kernel_paths_off"] == ["register_tiled_stride2"]
    assert all(row["ms"]["ours"] is not None for row in report["rows"]) and len(report["rows"]) == 4
    weight_gradient = [launch["kernel"] for launch in report["rows"][2]["launches"]["ours"]]
    assert report["rows"][2]["pass"] == "backward_weight"
    assert any("grad_weight_nchw_kernel" in kernel for kernel in weight_gradient), weight_gradient
    assert not any("grad_weight_register_tiled_kernel" in kernel for kernel in weight_gradient), weight_gradient
    assert "**Kernel paths off** (DWCONV_DISABLE_KERNELS): register_tiled_stride2" in markdown(
        {**report, "commands": [report["command"]]})


def test_a_run_past_its_time_limit_stops_between_problems_and_says_where(tmp_path, one_layer_set):
    out = tmp_path / "bench.json"
    report = run_bench(out, one_layer_set, "ours", repeats=5, warmup=1, command="test", stop_after_s=0.0)
    assert report["rows"] == []  # measuring the copy bandwidth alone took longer than no time
    assert report["cut_short"] == {"problems_done": 0, "problems": 8, "stop_after_s": 0.0,
                                   "next": "Tiny 64@28 s2 b8 float32 contiguous"}
    assert "cut_short" in out.read_text()
    whole = run_bench(out, one_layer_set, "look-back", repeats=3, warmup=1, command="test", stop_after_s=600.0)
    assert "cut_short" not in whole and len(whole["rows"]) == 3 * (4 + 1) + 2 * 4
    paths = import_overlay().kernel_paths()
    assert whole["settings"]["variants"] == ["ours", *(f"ours-without-{path}" for path in paths)]
    # every path the kernels have (the header's list, which tests/test_kernel_choice.py holds the rows to)
    assert sorted(paths) == sorted(row[0] for row in kernel_cases.KERNEL_PATH_ROWS)


def test_match_times_only_the_problems_it_finds(tmp_path, one_layer_set):
    report = run_bench(tmp_path / "bench.json", one_layer_set, "stock,ours", repeats=3, warmup=1, command="test",
                       match=r" b1 bfloat16 ")
    assert failed_checks(report) == [] and report["settings"]["match"] == " b1 bfloat16 "
    assert [(r["batch"], r["dtype"], r["layout"], r["pass"]) for r in report["rows"]] == [
        (1, "bfloat16", "channels_last", "forward")]
    with pytest.raises(ValueError, match="no problem of the chosen sets and configurations matches MATCH='b3 '"):
        run_bench(tmp_path / "refused.json", one_layer_set, "ours", match="b3 ")


def test_a_coverage_run_times_the_other_configurations_and_routes_by_them(tmp_path, one_layer_set):
    """CONFIGS=coverage: the 2D layer in fp32 channels_last and bf16/fp16 NCHW (stock's own choices
    there: cuDNN, its native kernel, and cuDNN or native by its workload table), conv1d as always;
    the routing table takes the rows."""
    from build_scripts.pin import load_pin
    from build_scripts.routing_table import write_table

    out = tmp_path / "bench.json"
    report = run_bench(out, one_layer_set, "stock,cudnn,ours", repeats=3, warmup=1, command="test",
                       configs_2d=layers.COVERAGE_CONFIGS_2D)
    assert failed_checks(report) == []
    rows = report["rows"]
    assert {(r["dtype"], r["layout"]) for r in rows if r["conv"] == "2d"} == set(layers.COVERAGE_CONFIGS_2D)
    assert len(rows) == 3 * (4 + 1) + 2 * 4
    assert report["settings"]["configs_2d"] == ["float32/channels_last", "bfloat16/contiguous", "float16/contiguous"]
    backends = {(r["dtype"], r["layout"]): r["backends"]["stock_forward"] for r in rows if r["conv"] == "2d"}
    assert backends[("float32", "channels_last")] == "Cudnn"
    assert backends[("bfloat16", "contiguous")] == "CudaDepthwise2d"
    text = markdown({**report, "commands": [report["command"]]})
    assert "## Tiny, fp32 channels_last, batch 8" in text and "## Tiny, bf16 NCHW, batch 1" in text
    table = tmp_path / "DepthwiseConvRoutingTable.h"
    write_table([out], load_pin().stock_version, table)
    assert "DType::Float32, Layout::ChannelsLast" in table.read_text()


def test_launches_record_the_kernels_of_ours_each_pass_ran(tmp_path, one_layer_set):
    """LAUNCHES=1: after the timing, each pass of ours keeps the kernels one run launched, with grids,
    blocks, shared memory and registers (for `make plan-audit` on a CPU); the other variants none."""
    report = run_bench(tmp_path / "bench.json", one_layer_set, "stock,ours", repeats=3, warmup=1, command="test",
                       match=r"64@28 s2 b8 float32 ", launches=True)
    assert failed_checks(report) == [] and report["settings"]["launches"] is True
    rows = report["rows"]
    assert [r["pass"] for r in rows] == ["forward", "backward_input", "backward_weight", "step"]
    for row in rows:
        assert set(row["launches"]) == {"ours"}, row["launches"]
        ours = [launch for launch in row["launches"]["ours"] if "at::native::dwconv::" in launch["kernel"]]
        assert ours, (row["pass"], row["launches"])
        for launch in ours:
            assert all(v >= 1 for v in launch["grid"] + launch["block"]) and 1 <= launch["registers"] <= 255
        assert row["ms"]["ours"] is not None and row["graph"]["ours"]  # timed as without the recording
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:  # an H100 SXM, an H200
        # the stride-2 weight gradient on the register tiles, as `make plan-report` plans it for 132 SMs
        assert any("grad_weight_register_tiled_kernel" in launch["kernel"] for launch in rows[2]["launches"]["ours"])
