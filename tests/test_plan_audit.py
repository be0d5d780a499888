"""`make bench LAUNCHES=1` records the kernels each pass of ours launches (build_scripts/bench/launches.py)
and `make plan-audit` sets them beside the host code's plans for that GPU (build_scripts/plan_audit.py).
Here on the CPU: the profiler's trace read as Kineto writes it, and the audit run with the real
kernel-choice driver over reports whose launches agree with the plans or differ from them in one way
each. The recording itself needs a GPU (tests/gpu/test_bench_pipeline.py)."""

import json

import pytest

from build_scripts import plan_audit, plan_report
from build_scripts.__main__ import main
from build_scripts.bench import launches
from build_scripts.bench.launches import kernel_launches
from build_scripts.errors import HarnessError

pytestmark = pytest.mark.l0  # the driver: the pinned torch's c10 headers and library

WEIGHT_GRADIENT = "grad_weight_register_tiled_kernel"
# Kineto's demangled names: the return type, the namespace, c10's types and the parameters.
INSTANCE = "void at::native::dwconv::grad_weight_register_tiled_kernel<float, int, 3, 2, false>"
PARAMETERS = ("(float const*, float const*, float*, float*, at::native::dwconv::PassGeometry, "
              "at::native::dwconv::RegisterTile, at::native::dwconv::RegisterGradWeightWork)")
FINISH = "void at::native::dwconv::grad_weight_finish_kernel<float, float>(float const*, float*, long, long)"
FORWARD_INSTANCE = ("void at::native::dwconv::channels_last_mma_kernel<c10::BFloat16, int, 3, 1, false, 1>"
                    "(c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16*)")


def trace_event(name: str, ts: int, grid, block, registers: int, shared: int, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": 5,
            "args": {"registers per thread": registers, "shared memory": shared, "grid": list(grid),
                     "block": list(block), "stream": 7}}


def test_the_trace_gives_each_kernels_launch_in_the_order_they_ran():
    trace = {"traceEvents": [
        trace_event(FINISH, 30, (3, 1, 1), (32, 8, 1), 40, 1024),
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 1, "args": {}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 2, "args": {}},
        trace_event(INSTANCE + PARAMETERS, 10, (96, 19, 1), (1, 16, 7), 72, 30096, cat="Kernel"),
    ]}
    assert kernel_launches(trace) == [
        {"kernel": INSTANCE + PARAMETERS, "grid": [96, 19, 1], "block": [1, 16, 7], "registers": 72,
         "shared_bytes": 30096},
        {"kernel": FINISH, "grid": [3, 1, 1], "block": [32, 8, 1], "registers": 40, "shared_bytes": 1024}]


def test_a_kernel_event_without_its_launch_is_refused_by_name():
    event = trace_event(FINISH, 1, (1, 1, 1), (32, 1, 1), 40, 0)
    del event["args"]["registers per thread"]
    with pytest.raises(ValueError, match="grad_weight_finish_kernel.*registers per thread"):
        kernel_launches({"traceEvents": [event]})


def test_recorded_kernels_are_named_as_the_driver_and_the_compilers_report_name_them():
    assert launches.function_name(INSTANCE + PARAMETERS) == WEIGHT_GRADIENT
    assert launches.function_name(FORWARD_INSTANCE) == "channels_last_mma_kernel"
    report = {"rows": [{"launches": {"ours": [launch(FORWARD_INSTANCE, (1, 1, 1), (1, 1, 1), 0, 90)],
                                     "ours-without-x": {"error": "CUPTI is not usable"}}},
                       {"launches": {"ours": [launch("void at::native::vectorized_elementwise_kernel<4>()",
                                                     (1, 1, 1), (1, 1, 1), 0, 16)]}}]}
    assert plan_audit.registers_lines(report) == [
        "registers channels_last_mma_kernel<BFloat16, int, 3, 1, false, 1> 90"]


def launch(kernel: str, grid, block, shared: int, registers: int) -> dict:
    return {"kernel": kernel, "grid": list(grid), "block": list(block), "registers": registers,
            "shared_bytes": shared}


def weight_gradient_row(launches: dict) -> dict:
    """MobileNetV2 96@112 s2's fp32 NCHW weight gradient at batch 64, the layer v55 cut anew."""
    return {"set": "MobileNetV2", "layer": "96@112 s2", "conv": "2d", "batch": 64, "channels": 96, "height": 112,
            "width": 112, "kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "bias": False,
            "dtype": "float32", "layout": "contiguous", "pass": "backward_weight", "launches": launches}


def report_of(rows: list[dict], launches_recorded: bool = True) -> dict:
    return {"device": "NVIDIA H100 80GB HBM3", "date": "2026-12-03", "overlay_patchset": "0" * 64, "sm_count": 132,
            "arch": "sm_90", "settings": {"launches": launches_recorded}, "rows": rows}


# The launch v55 plans for that pass on an H100 at the 72 registers ptxas gives the instance: 19 slices
# (11 at the launch bound's registers, and with register_tiled_grad_weight_waves off).
AS_PLANNED = launch(INSTANCE + PARAMETERS, (96, 19, 1), (1, 16, 7), 30096, 72)
FINISHED = launch(FINISH, (3, 1, 1), (32, 8, 1), 1024, 40)


def audited(report: dict, driver) -> dict[str, plan_audit.Audited]:
    return {a.variant: a for a in plan_audit.audit(report, driver)}


def test_a_launch_as_planned_at_the_registers_the_gpu_gave_passes(kernel_choice_driver):
    result = audited(report_of([weight_gradient_row({"ours": [AS_PLANNED, FINISHED]})]), kernel_choice_driver)
    ours = result["ours"]
    assert ours.differences == () and ours.planned.grid == (96, 19, 1) and ours.ran == AS_PLANNED
    text = plan_audit.markdown(list(result.values()), report_of([]), "bench.json")
    assert "**1 of 1 passes launched as planned.**" in text
    # 112 threads, 72 registers, 30,096 B: 7 blocks an SM, 1,824 blocks over 132 SMs
    assert f"| {WEIGHT_GRADIENT} | 96x19x1 | 1x16x7 | 29.4 | 72 | 7 | 1.97 | yes |" in text


def test_the_registers_the_gpu_gave_decide_the_plan_it_is_held_to(kernel_choice_driver):
    """At 128 registers (the launch bound) the same instance would be planned 11 slices: the audit
    asks the driver with the registers the profiler recorded, so a GPU at 128 is held to 11."""
    at_bound = launch(INSTANCE + PARAMETERS, (96, 19, 1), (1, 16, 7), 30096, 128)
    ours = audited(report_of([weight_gradient_row({"ours": [at_bound, FINISHED]})]), kernel_choice_driver)["ours"]
    assert ours.planned.grid == (96, 11, 1)
    assert ours.differences == ("grid 96x19x1, planned 96x11x1",)


def test_a_variant_is_planned_with_its_paths_switched_off(kernel_choice_driver):
    old_cut = launch(INSTANCE + PARAMETERS, (96, 11, 1), (1, 16, 7), 30096, 72)
    result = audited(report_of([weight_gradient_row({
        "ours": [old_cut, FINISHED], "ours-without-register_tiled_grad_weight_waves": [old_cut, FINISHED]})]),
        kernel_choice_driver)
    assert result["ours"].differences == ("grid 96x11x1, planned 96x19x1",)
    assert result["ours-without-register_tiled_grad_weight_waves"].differences == ()


def test_a_run_with_kernel_paths_off_is_planned_without_them(kernel_choice_driver):
    """A LAUNCHES=1 bench under DWCONV_DISABLE_KERNELS: ours ran without the paths, and is held to that plan."""
    old_cut = launch(INSTANCE + PARAMETERS, (96, 11, 1), (1, 16, 7), 30096, 72)
    report = {**report_of([weight_gradient_row({"ours": [old_cut, FINISHED]})]),
              "kernel_paths_off": ["register_tiled_grad_weight_waves"]}
    result = audited(report, kernel_choice_driver)
    assert result["ours"].differences == () and result["ours"].planned.grid == (96, 11, 1)
    text = plan_audit.markdown(list(result.values()), report, "bench.json")
    assert ("The run's process had kernel paths register_tiled_grad_weight_waves off (DWCONV_DISABLE_KERNELS): every "
            "pass is planned without them.") in text
    assert "kernel paths" not in plan_audit.markdown(list(result.values()), report_of([]), "bench.json")


def test_another_kernel_block_or_too_little_shared_memory_is_a_difference(kernel_choice_driver):
    other = launch("void at::native::dwconv::grad_weight_nchw_kernel<float, int>(float const*)", (96, 4, 1),
                   (256, 1, 1), 0, 40)
    narrow = dict(AS_PLANNED, block=[1, 16, 8], shared_bytes=30000)
    more_shared = dict(AS_PLANNED, shared_bytes=30096 + 2048)  # static shared memory on top of the plan's
    for recorded, expected in (
            ([other, FINISHED], (f"planned {WEIGHT_GRADIENT}, ran grad_weight_nchw_kernel, grad_weight_finish_kernel",)),
            ([narrow], ("block 1x16x8, planned 1x16x7", "shared 30000 B, planned 30096 B")),
            ([more_shared], ())):
        ours = audited(report_of([weight_gradient_row({"ours": recorded})]), kernel_choice_driver)["ours"]
        assert ours.differences == expected


def mamba_step_row(launches: dict) -> dict:
    """Mamba's conv1d at batch 8, L=2048, 1536 channels, bf16 NCHW: a training step's row, whose backward
    one kernel computes (v52's row_backward_kernel)."""
    return {"set": "Mamba conv1d", "layer": "1536 L=2048", "conv": "1d", "batch": 8, "channels": 1536, "height": 1,
            "width": 2048, "kernel": [1, 4], "stride": [1, 1], "padding": [0, 3], "bias": True,
            "dtype": "bfloat16", "layout": "contiguous", "pass": "step", "launches": launches}


ROW_BACKWARD = ("void at::native::dwconv::row_backward_kernel<c10::BFloat16, int, 4, true, true>"
                "(c10::BFloat16 const*, c10::BFloat16 const*, float*, c10::BFloat16*)")


def test_a_step_is_held_to_its_fused_backward_and_a_failed_recording_is_a_difference(kernel_choice_driver):
    fused = launch(ROW_BACKWARD, (1536, 3, 1), (256, 1, 1), 8 * 5 * 4, 64)  # its static warp sums
    step_2d = dict(weight_gradient_row({"ours": [AS_PLANNED]}), **{"pass": "step"})  # two kernels: not here
    failed = weight_gradient_row({"ours": {"error": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"}})
    result = plan_audit.audit(report_of([mamba_step_row({"ours": [fused]}), step_2d, failed]), kernel_choice_driver)
    assert [(a.label, a.planned and a.planned.kernel, a.differences) for a in result] == [
        ("Mamba conv1d 1536 L=2048 b8 bfloat16 contiguous step, both gradients", "row_backward_kernel", ()),
        ("MobileNetV2 96@112 s2 b64 float32 contiguous backward_weight", None,
         ("not recorded: RuntimeError: CUPTI_ERROR_NOT_INITIALIZED",))]
    assert "**1 of 2 passes launched as planned.**" in plan_audit.markdown(result, report_of([]), "bench.json")
    two_blocks = dict(fused, grid=[1536, 2, 1])
    differs, = plan_audit.audit(report_of([mamba_step_row({"ours": [two_blocks]})]), kernel_choice_driver)
    assert differs.differences == ("grid 1536x2x1, planned 1536x3x1",)


def test_a_report_without_launches_is_refused_saying_how_to_record_them(tmp_path):
    with pytest.raises(HarnessError, match="LAUNCHES=1"):
        plan_audit.audit(report_of([], launches_recorded=False), tmp_path / "no-driver")
    stock_only = weight_gradient_row({})  # a run whose VARIANTS left ours out recorded nothing
    with pytest.raises(HarnessError, match="VARIANTS must name ours"):
        plan_audit.audit(report_of([stock_only]), tmp_path / "no-driver")


def test_make_plan_audit_fails_where_a_pass_did_not_launch_as_planned(tmp_path, capsys, monkeypatch,
                                                                       kernel_choice_driver):
    monkeypatch.setattr(plan_report, "build_driver", lambda directory: kernel_choice_driver)
    as_planned, differing = tmp_path / "as-planned.json", tmp_path / "differing.json"
    as_planned.write_text(json.dumps(report_of([weight_gradient_row({"ours": [AS_PLANNED, FINISHED]})])))
    differing.write_text(json.dumps(report_of([weight_gradient_row({"ours": [dict(AS_PLANNED, grid=[96, 11, 1])]})])))
    assert main(["plan-audit", str(as_planned)]) == 0
    assert "**1 of 1 passes launched as planned.**" in capsys.readouterr().out
    assert main(["plan-audit", str(differing)]) == 1
    captured = capsys.readouterr()
    assert "grid 96x11x1, planned 96x19x1" in captured.out
    assert "1 of 1 passes did not launch as the host code plans" in captured.err
    assert main(["plan-audit", str(tmp_path / "missing.json")]) == 1
    assert "cannot read the bench report" in capsys.readouterr().err
