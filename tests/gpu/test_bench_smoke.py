"""Smoke benchmark: our depthwise kernels against stock torch's on a handful of layers,
with the byte floor (bytes moved / measured copy bandwidth) beside each time.

Writes build/results/smoke-<gpu>.json and prints a table. It checks the measurement
(correctness first, then sane timings), not a speed target: issue 6 owns those.
"""

import json
import statistics
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU benchmark needs torch 2.11.0+cu130, which is not installed here")
if not torch.cuda.is_available():
    pytest.skip("the GPU benchmark needs a CUDA device; there is none here", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overlay_loader import REPO_ROOT, stock_kernels  # noqa: E402

LAYERS = [  # name, (n, c, h, w), kernel, stride, padding, dtype, channels_last
    ("MobileNetV2 144@56", (64, 144, 56, 56), (3, 3), 1, (1, 1), torch.float32, False),
    ("MobileNetV2 144@56 CL", (64, 144, 56, 56), (3, 3), 1, (1, 1), torch.bfloat16, True),
    ("MobileNetV2 96@112 s2", (64, 96, 112, 112), (3, 3), 2, (1, 1), torch.float32, False),
    ("ConvNeXt-T 96@56 k7", (64, 96, 56, 56), (7, 7), 1, (3, 3), torch.float32, False),
    ("EfficientNet-B0 672@14 k5", (64, 672, 14, 14), (5, 5), 1, (2, 2), torch.float32, False),
    ("ConvNeXt-T 96@56 k7 CL", (64, 96, 56, 56), (7, 7), 1, (3, 3), torch.bfloat16, True),
    ("RepLKNet 512@14 k27", (64, 512, 14, 14), (27, 27), 1, (13, 13), torch.float32, False),
    ("Mamba conv1d 2048 L=2048 k4", (8, 2048, 1, 2048), (1, 4), 1, (0, 3), torch.bfloat16, False),
]
BUFFERS = 3  # rotate inputs so that L2 does not hold them between runs
REPEATS = 30


def median_ms(fn, args_list):
    for args in args_list:  # warm-up
        fn(*args)
    times = []
    for i in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args_list[i % len(args_list)])
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth():
    """Bytes per ms of a device-to-device copy (read + write), 1 GiB."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), [()])
    return 2 * src.numel() / ms


def test_smoke_benchmark():
    bandwidth = copy_bandwidth()
    rows = []
    with torch.backends.cudnn.flags(enabled=False):  # stock = upstream's native depthwise kernels
        for name, shape, kernel, stride, padding, dtype, channels_last in LAYERS:
            n, c, h, w = shape
            layout = torch.channels_last if channels_last else torch.contiguous_format
            inputs = [(torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=layout),
                       torch.randn(c, 1, *kernel, device="cuda", dtype=dtype)) for _ in range(BUFFERS)]
            forward = lambda x, wt: F.conv2d(x, wt, None, stride, padding, 1, c)  # noqa: E731

            def step(x, wt):
                x, wt = x.detach().requires_grad_(), wt.detach().requires_grad_()
                out = forward(x, wt)
                out.backward(out)

            ours_out = forward(*inputs[0])
            with stock_kernels():
                stock_out = forward(*inputs[0])
            torch.testing.assert_close(ours_out, stock_out, atol=1e-2, rtol=1e-2)

            element = torch.finfo(dtype).bits // 8
            fwd_bytes = (inputs[0][0].numel() + inputs[0][1].numel() + ours_out.numel()) * element
            # a training step reads x, w, grad_out twice-ish and writes out, grad_x, grad_w
            step_bytes = fwd_bytes + (2 * ours_out.numel() + 2 * inputs[0][0].numel()) * element
            row = {"layer": name, "dtype": str(dtype), "channels_last": channels_last, "shape": shape,
                   "kernel": kernel, "stride": stride,
                   "forward_ms": {"ours": median_ms(forward, inputs)},
                   "step_ms": {"ours": median_ms(step, inputs)},
                   "forward_floor_ms": fwd_bytes / bandwidth, "step_floor_ms": step_bytes / bandwidth}
            with stock_kernels():
                row["forward_ms"]["stock"] = median_ms(forward, inputs)
                row["step_ms"]["stock"] = median_ms(step, inputs)
            rows.append(row)

    device = torch.cuda.get_device_name()
    report = {"device": device, "torch": torch.__version__, "copy_GBps": bandwidth / 1e6,
              "repeats": REPEATS, "buffers": BUFFERS, "layers": rows}
    out_dir = REPO_ROOT / "build" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"smoke-{device.replace(' ', '_')}.json").write_text(json.dumps(report, indent=2))
    print(f"\n{device}, torch {torch.__version__}, copy {bandwidth / 1e6:.0f} GB/s; median of {REPEATS}")
    print(f"{'layer':32} {'fwd ours':>9} {'fwd stock':>9} {'floor':>7} {'step ours':>9} {'step stock':>10} {'floor':>7}")
    for r in rows:
        print(f"{r['layer']:32} {r['forward_ms']['ours']:9.3f} {r['forward_ms']['stock']:9.3f} "
              f"{r['forward_floor_ms']:7.3f} {r['step_ms']['ours']:9.3f} {r['step_ms']['stock']:10.3f} "
              f"{r['step_floor_ms']:7.3f}")
    for r in rows:
        for times in (r["forward_ms"], r["step_ms"]):
            assert all(0 < t < 60_000 for t in times.values()), r
