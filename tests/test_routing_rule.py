"""The routing rule (DepthwiseConvRouting.h) and its generated table, on a CPU.

The header is plain C++: tests/routing/route_query.cpp compiles it with g++ against a
table that build_scripts/routing_table.py generates from a report, and answers calls.
The reports here are synthetic test inputs, not measurements.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.errors import HarnessError
from build_scripts.routing_table import TABLE, points_of, render, write_table

PINNED = "2.11.0+cu130"
KERNEL_INCLUDE = REPO_ROOT / "patches" / "files" / "aten" / "src"
DRIVER = Path(__file__).parent / "routing" / "route_query.cpp"
DTYPES = {"float64": 0, "float32": 1, "float16": 2, "bfloat16": 3, "complex64": 4}
LAYOUTS = {"contiguous": 0, "channels_last": 1}
MODES = ("auto", "ours", "cudnn", "upstream")

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the routing rule")


def row(layer, dtype, layout, passname, ours, stock, *, batch=64, channels=144, size=56, kernel=3, stride=1,
        cudnn=None, stock_backend="Cudnn"):
    """A bench row; cuDNN forced takes stock's time unless given (stock ran cuDNN, by default)."""
    return {"set": "Synthetic", "layer": layer, "batch": batch, "channels": channels, "height": size, "width": size,
            "kernel": [kernel, kernel], "stride": [stride, stride], "padding": [kernel // 2] * 2, "dtype": dtype,
            "layout": layout, "pass": passname,
            "ms": {"stock": stock, "cudnn": stock if cudnn is None else cudnn, "native": None, "ours": ours},
            "backends": {"stock_forward": stock_backend, "cudnn_gradients": "CudnnTranspose"}}


def report(rows, torch=PINNED, arch="sm_90"):
    return {"schema": "dwconv-bench/1", "device": "Synthetic GPU", "arch": arch, "torch": torch, "date": "2026-01-01",
            "rows": rows}


class Router:
    """route_query built against a table generated from `rows` (None: the committed table), routing
    by that or, given `table_file`, by the table file it names, as DWCONV_ROUTING_TABLE does."""

    def __init__(self, tmp_path: Path, rows=None, table_file: Path | None = None):
        self.table_args = [] if table_file is None else ["--table", str(table_file)]
        include = [f"-I{KERNEL_INCLUDE}"]
        if rows is not None:
            table_dir = tmp_path / "table" / "ATen" / "native" / "cuda"
            table_dir.mkdir(parents=True)
            source = tmp_path / "bench.json"
            source.write_text(json.dumps(report(rows)))
            write_table([source], PINNED, table_dir / TABLE.name)
            include.insert(0, f"-I{tmp_path / 'table'}")
        self.binary = tmp_path / "route_query"
        subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", *include, str(DRIVER), "-o", str(self.binary)],
                       check=True)

    def ask(self, *calls: dict) -> list[dict]:
        lines = [self._line(c) for c in calls]
        out = subprocess.run([str(self.binary), *self.table_args], input="\n".join(lines) + "\n",
                             capture_output=True, text=True, check=True).stdout.splitlines()
        return [self._parse(line) for line in out]

    def explain(self, call: dict) -> dict[str, str]:
        """explain_route's words for each pass of one eligible call."""
        out = subprocess.run([str(self.binary), "--explain", *self.table_args], input=self._line(call) + "\n",
                             capture_output=True, text=True, check=True).stdout.splitlines()
        return dict(line.split(" ", 2)[1:] for line in out if line.startswith("explain "))

    @staticmethod
    def _line(c: dict) -> str:
        ints = lambda xs, n: [*xs, *[0] * (n - len(xs))]  # noqa: E731
        fields = [c.get("mode", "auto"), c.get("gpu_arch", 90), len(c["input"]), *ints(c["input"], 5), len(c["weight"]), *ints(c["weight"], 5),
                  *(len(c.get(name, [0] * len(c["stride"]))) for name in ("stride", "padding", "dilation",
                                                                           "output_padding")),
                  *ints(c["stride"], 3), *ints(c["padding"], 3), *ints(c["dilation"], 3),
                  *ints(c.get("output_padding", [0] * len(c["stride"])), 3),
                  int(c.get("transposed", False)), c["groups"], int(c.get("one_device", True)),
                  int(c.get("one_dtype", True)), DTYPES[c.get("dtype", "float32")],
                  int("bias" in c), 1 if "bias" in c else 0, c.get("bias", 0),
                  LAYOUTS[c.get("layout", "contiguous")], LAYOUTS[c.get("weight_layout", "contiguous")],
                  int(c.get("cudnn", True))]
        return " ".join(str(f) for f in fields)

    @staticmethod
    def _parse(line: str) -> dict:
        head, _, reason = line.partition(" | ")
        words = head.split()
        routes = {"forward": words[3], "backward_input": words[5], "backward_weight": words[7]}
        # each pass: taken by our kernels or not; "routes": who computes it (ours, cudnn, upstream)
        answer = {"eligible": words[1] == "1", **{k: r == "ours" for k, r in routes.items()}, "routes": routes,
                  "reason": reason}
        if answer["eligible"]:
            names = ["batch", "channels", "multiplier", "height", "width", "out_height", "out_width", "kernel_h",
                     "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w", "layout",
                     "conv1d"]
            answer.update(zip(names, map(int, words[8:])))
        return answer


def conv2d(n=64, c=144, h=56, w=56, k=3, s=1, p=None, d=1, **extra) -> dict:
    p = k // 2 if p is None else p
    return {"input": [n, c, h, w], "weight": [c, 1, k, k], "stride": [s, s], "padding": [p, p],
            "dilation": [d, d], "groups": c, **extra}


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    return Router(tmp_path_factory.mktemp("committed"))


def test_a_depthwise_conv2d_becomes_our_problem(committed):
    [a] = committed.ask(conv2d(n=8, c=96, h=112, w=110, k=3, s=2, p=1, dtype="bfloat16", layout="channels_last"))
    assert a["eligible"], a["reason"]
    assert (a["batch"], a["channels"], a["multiplier"], a["height"], a["width"]) == (8, 96, 1, 112, 110)
    assert (a["out_height"], a["out_width"]) == (56, 55)
    assert (a["kernel_h"], a["kernel_w"], a["stride_h"], a["stride_w"], a["pad_h"], a["pad_w"]) == (3, 3, 2, 2, 1, 1)
    assert a["layout"] == LAYOUTS["channels_last"] and a["conv1d"] == 0


def test_conv1d_is_the_2d_problem_with_height_one(committed):
    mamba = {"input": [8, 1536, 2048], "weight": [1536, 1, 4], "stride": [1], "padding": [3], "dilation": [1],
             "groups": 1536, "bias": 1536, "dtype": "bfloat16"}
    [a] = committed.ask(mamba)
    assert a["eligible"], a["reason"]
    assert (a["height"], a["width"], a["kernel_h"], a["kernel_w"]) == (1, 2048, 1, 4)
    assert (a["pad_h"], a["pad_w"], a["out_height"], a["out_width"], a["conv1d"]) == (0, 3, 1, 2051, 1)


def test_one_element_parameter_lists_broadcast_like_upstream(committed):
    call = conv2d(k=5, s=2, p=2)
    call.update(stride=[2], padding=[2], dilation=[1])
    [a] = committed.ask(call)
    assert a["eligible"], a["reason"]
    assert (a["stride_h"], a["stride_w"], a["pad_h"], a["pad_w"], a["out_height"]) == (2, 2, 2, 2, 28)


def test_depth_multiplier_and_asymmetric_kernels(committed):
    call = conv2d(c=32)
    call.update(weight=[64, 1, 1, 11], padding=[0, 5])
    [a] = committed.ask(call)
    assert a["eligible"], a["reason"]
    assert (a["multiplier"], a["kernel_h"], a["kernel_w"], a["out_height"], a["out_width"]) == (2, 1, 11, 56, 56)


@pytest.mark.parametrize("change, reason", [
    ({"cudnn": False}, "cuDNN is disabled"),
    ({"transposed": True}, "transposed"),
    ({"groups": 1}, "not depthwise"),
    ({"groups": 72}, "not depthwise"),
    ({"weight": [144, 2, 3, 3]}, "not depthwise"),
    ({"weight": [200, 1, 3, 3]}, "not depthwise"),
    ({"weight": [0, 1, 3, 3]}, "with m >= 1"),  # upstream refuses it: "expected weight to be at least 144 ..."
    ({"input": [0, 144, 56, 56]}, "empty input"),
    ({"input": [64, 144, 56, 56, 4], "weight": [144, 1, 3, 3, 3]}, "neither conv1d nor conv2d"),
    ({"weight": [144, 1, 3]}, "rank"),
    ({"one_device": False}, "one CUDA device"),
    ({"one_dtype": False}, "differ in dtype"),
    ({"dtype": "complex64"}, "dtype our kernels do not have"),
    ({"input": [64, 144, 2, 2], "padding": [0, 0]}, "larger than the padded input"),
    ({"output_padding": [1, 0]}, "output_padding"),
    ({"bias": 143}, "bias"),
    ({"stride": [1, 1, 1], "padding": [1, 1, 1], "dilation": [1, 1, 1]}, "parameter list"),
    ({"output_padding": []}, "parameter list"),  # upstream raises "expected output_padding to be a single integer"
    ({"padding": [1, 1, 1]}, "parameter list"),
    # conv1d whose weight's 4-D view suggests channels_last: stock runs cuDNN in channels_last
    ({"input": [8, 64, 100], "weight": [64, 1, 4], "stride": [1], "padding": [3], "dilation": [1], "groups": 64,
      "weight_layout": "channels_last"}, "conv1d weight"),
    ({"stride": [0, 1]}, "out of range"),
    ({"padding": [-1, 1]}, "out of range"),
])
def test_what_stays_with_upstream_and_why(committed, change, reason):
    [a] = committed.ask({**conv2d(), **change, "mode": "ours"})
    assert not a["eligible"]
    assert reason in a["reason"]
    assert not (a["forward"] or a["backward_input"] or a["backward_weight"])


def test_each_parameter_list_is_expanded_on_its_own_as_upstream_does(committed):
    """F.conv2d(padding="valid") reaches aten::convolution with stride [s, s] and padding [0]."""
    [a] = committed.ask(conv2d(k=3, s=2, p=0, mode="ours", padding=[0], output_padding=[0]))
    assert a["eligible"], a["reason"]
    assert (a["stride_h"], a["stride_w"], a["pad_h"], a["pad_w"], a["out_height"]) == (2, 2, 0, 0, 27)


def test_a_float64_conv1d_stays_contiguous_whatever_its_weight_suggests(committed):
    [a] = committed.ask({"input": [8, 64, 100], "weight": [64, 1, 4], "stride": [1], "padding": [3], "dilation": [1],
                         "groups": 64, "dtype": "float64", "weight_layout": "channels_last", "mode": "ours"})
    assert a["eligible"], a["reason"]
    assert a["layout"] == LAYOUTS["contiguous"]


def test_channels_last_input_with_channels_last_weight_is_ours_to_take(committed):
    [a] = committed.ask(conv2d(layout="channels_last", weight_layout="channels_last", mode="ours"))
    assert a["eligible"] and a["forward"] and a["backward_weight"]
    assert a["layout"] == LAYOUTS["channels_last"]


@pytest.mark.parametrize("call, layout", [
    # cuDNN's rule: channels_last when the input or the weight suggests it
    (conv2d(weight_layout="channels_last"), "channels_last"),
    (conv2d(layout="channels_last"), "channels_last"),
    (conv2d(dtype="bfloat16"), "contiguous"),
    # float64 never goes channels_last upstream: its output stays contiguous
    (conv2d(dtype="float64", layout="channels_last", weight_layout="channels_last"), "contiguous"),
    # conv1d's input is made contiguous before its 4-D view: a transposed (N, L, C) input too
    ({"input": [8, 64, 100], "weight": [64, 1, 4], "stride": [1], "padding": [3], "dilation": [1], "groups": 64,
      "dtype": "bfloat16", "layout": "channels_last"}, "contiguous"),
])
def test_ours_computes_in_the_layout_upstream_returns(committed, call, layout):
    [a] = committed.ask({**call, "mode": "ours"})
    assert a["eligible"], a["reason"]
    assert a["layout"] == LAYOUTS[layout]


def test_modes_override_the_measurements(tmp_path):
    router = Router(tmp_path, [row("a", "bfloat16", "channels_last", p, ours=2.0, stock=1.0)
                               for p in ("forward", "backward_input", "backward_weight")])
    call = conv2d(dtype="bfloat16", layout="channels_last")
    auto, ours, cudnn, upstream = router.ask(*({**call, "mode": m} for m in MODES))
    assert set(auto["routes"].values()) == {"upstream"}
    assert set(ours["routes"].values()) == {"ours"}
    assert set(cudnn["routes"].values()) == {"cudnn"}
    assert set(upstream["routes"].values()) == {"upstream"}


def test_on_a_gpu_of_another_kind_auto_keeps_upstreams_choice(tmp_path):
    """Measured on sm_90: on an A100 (sm_80) the points say nothing, so auto routes as stock does;
    a mode the user sets still holds there."""
    router = Router(tmp_path, [row("a", "bfloat16", "channels_last", p, ours=1.0, stock=2.0)
                               for p in ("forward", "backward_input", "backward_weight")])
    call = conv2d(dtype="bfloat16", layout="channels_last")
    h100, a100, a100_ours = router.ask(call, {**call, "gpu_arch": 80}, {**call, "gpu_arch": 80, "mode": "ours"})
    assert set(h100["routes"].values()) == {"ours"}
    assert set(a100["routes"].values()) == {"upstream"}
    assert set(a100_ours["routes"].values()) == {"ours"}
    assert set(router.explain({**call, "gpu_arch": 80}).values()) == {
        "upstream: the table was measured on sm_90 GPUs, this one is sm_80 (stock's choice)"}
    assert set(router.explain({**call, "gpu_arch": 80, "mode": "ours"}).values()) == {"ours: routing mode ours"}


def test_every_measured_layer_gets_its_measured_winner(tmp_path):
    layers = [  # name, channels, size, kernel, stride, batch
        ("144@56", 144, 56, 3, 1, 64), ("144@56 s2", 144, 56, 3, 2, 64), ("672@14 k5", 672, 14, 5, 1, 64),
        ("96@56 k7", 96, 56, 7, 1, 64), ("960@7", 960, 7, 3, 1, 64), ("960@7 b1", 960, 7, 3, 1, 1),
    ]
    rows, expected = [], []
    for i, (name, c, size, k, s, n) in enumerate(layers):
        for j, passname in enumerate(("forward", "backward_input", "backward_weight")):
            ours_wins = (i + j) % 2 == 0
            rows.append(row(name, "float16", "channels_last", passname, ours=1.0 if ours_wins else 3.0, stock=2.0,
                            batch=n, channels=c, size=size, kernel=k, stride=s))
        expected.append(tuple((i + j) % 2 == 0 for j in range(3)))
    router = Router(tmp_path, rows)
    answers = router.ask(*(conv2d(n=n, c=c, h=size, w=size, k=k, s=s, dtype="float16", layout="channels_last")
                           for _, c, size, k, s, n in layers))
    assert [(a["forward"], a["backward_input"], a["backward_weight"]) for a in answers] == expected


def test_unmeasured_calls_follow_the_nearest_measured_layer(tmp_path):
    rows = [
        row("k3 s1 small", "float32", "contiguous", "forward", ours=1.0, stock=2.0, channels=32, size=14),
        row("k3 s1 large", "float32", "contiguous", "forward", ours=3.0, stock=2.0, channels=256, size=112),
        row("k7 s1", "float32", "contiguous", "forward", ours=3.0, stock=2.0, kernel=7),
        row("k3 s2", "float32", "contiguous", "forward", ours=1.0, stock=2.0, stride=2),
    ]
    router = Router(tmp_path, rows)
    small_k3, large_k3, k5, k9_s2, stride3, half, nchw_bwd = router.ask(
        conv2d(c=32, h=16, w=16), conv2d(c=256, h=100, w=100), conv2d(k=5, c=144, h=56, w=56),
        conv2d(k=9, s=2), conv2d(s=3), conv2d(dtype="float16"), conv2d())
    assert small_k3["forward"] and not large_k3["forward"]  # the nearest size decides
    assert not k5["forward"]  # 5x5 is nearer to the 7x7 point (log area) than to 3x3
    assert k9_s2["forward"]  # the same stride comes before the kernel size
    assert stride3["eligible"]  # no stride-3 point: the nearest kernel and size among all strides
    assert not half["forward"]  # nothing measured for float16: upstream's choice stands
    assert not nchw_bwd["backward_input"]  # nor for a pass without points


def test_a_coverage_configuration_routes_calls_of_its_own_dtype_and_layout(tmp_path):
    """`make bench CONFIGS=coverage` measures fp32 channels_last (where torch.compile's layout
    optimisation puts an fp32 model's depthwise convs) and bf16/fp16 NCHW (autocast): their points
    route those calls, and only those."""
    rows = [
        row("144@56", "float32", "channels_last", "forward", ours=1.0, stock=2.0),
        row("144@56", "bfloat16", "contiguous", "forward", ours=3.0, stock=3.0, cudnn=1.0,
            stock_backend="CudaDepthwise2d"),
    ]
    router = Router(tmp_path, rows)
    fp32_cl, bf16_nchw, fp32_nchw, bf16_cl = router.ask(
        conv2d(dtype="float32", layout="channels_last"), conv2d(dtype="bfloat16"), conv2d(dtype="float32"),
        conv2d(dtype="bfloat16", layout="channels_last"))
    assert fp32_cl["routes"]["forward"] == "ours"
    assert bf16_nchw["routes"]["forward"] == "cudnn"  # stock runs its native kernel there; cuDNN measured faster
    assert fp32_nchw["routes"]["forward"] == bf16_cl["routes"]["forward"] == "upstream"  # nothing measured


def test_a_layer_at_another_batch_follows_its_own_plane_before_a_nearer_size(tmp_path):
    """EfficientNet-B0's 5x5 stride-2 weight gradients (bf16 channels_last, H100 2026-11-22): ours lost
    on 144@56 and won on 672@14. 144@56 at batch 32 is nearer 672@14 at batch 64 in N*C*H*W (14.5M
    against 8.4M and 28.9M), but its plane is 144@56's: that layer decides."""
    rows = [row("144@56 k5 s2", "bfloat16", "channels_last", "backward_weight", ours=0.173, stock=0.060,
                channels=144, size=56, kernel=5, stride=2),
            row("672@14 k5 s2", "bfloat16", "channels_last", "backward_weight", ours=0.062, stock=0.305,
                channels=672, size=14, kernel=5, stride=2)]
    batch32, other_layer = Router(tmp_path, rows).ask(
        conv2d(n=32, c=144, h=56, w=56, k=5, s=2, dtype="bfloat16", layout="channels_last"),
        conv2d(n=16, c=672, h=14, w=14, k=5, s=2, dtype="bfloat16", layout="channels_last"))
    assert batch32["routes"]["backward_weight"] == "upstream"
    assert other_layer["routes"]["backward_weight"] == "ours"


def test_a_large_filter_follows_large_filters_before_a_nearer_area(tmp_path):
    """13x13 is nearer 7x7 than 27x27 on a log scale, but filters of more than 7x7's taps run the
    large-filter kernels: the measured large filter decides, and a 7x7 call keeps the 7x7 point."""
    rows = [row("k7", "bfloat16", "channels_last", "backward_weight", ours=3.0, stock=1.0, kernel=7),
            row("k27", "bfloat16", "channels_last", "backward_weight", ours=1.0, stock=3.0, kernel=27)]
    k13, k9, k7, k5 = Router(tmp_path, rows).ask(
        *(conv2d(k=k, dtype="bfloat16", layout="channels_last") for k in (13, 9, 7, 5)))
    assert k13["backward_weight"] and k9["backward_weight"]
    assert not k7["backward_weight"] and not k5["backward_weight"]


def test_each_route_is_explained_by_the_point_that_decided_it(tmp_path):
    rows = [row("k7", "float32", "contiguous", "forward", ours=1.0, stock=2.0, kernel=7),
            row("a", "float32", "contiguous", "backward_input", ours=1.0, stock=2.0),
            row("b", "float32", "contiguous", "backward_input", ours=3.0, stock=2.0)]
    router = Router(tmp_path, rows)
    words = router.explain(conv2d(k=5))
    assert words["forward"] == ("ours: as the nearest measured, Synthetic k7 batch 64 float32 contiguous forward: "
                                "ours 1 ms, stock 2 ms (Cudnn), cuDNN 2 ms")
    assert words["backward_input"].startswith("upstream: measured points as near disagree (stock's choice); one is "
                                              "Synthetic a batch 64")
    assert words["backward_weight"] == "upstream: nothing measured for this dtype, layout and pass (stock's choice)"
    assert set(router.explain({**conv2d(k=5), "mode": "cudnn"}).values()) == {"cudnn: routing mode cudnn"}


def test_the_committed_table_explains_a_measured_layer_by_itself(committed):
    words = committed.explain(conv2d(c=256, h=28, w=28, k=29, dtype="bfloat16", layout="channels_last"))
    assert words["forward"].startswith(
        "ours: as the nearest measured, RepLKNet-31B 256@28 k29 batch 64 bfloat16 channels_last forward: ours ")


def test_a_tie_between_measurements_goes_to_upstream(tmp_path):
    rows = [row("a", "float32", "contiguous", "forward", ours=1.0, stock=2.0),
            row("b", "float32", "contiguous", "forward", ours=3.0, stock=2.0)]
    [a] = Router(tmp_path, rows).ask(conv2d())
    assert not a["forward"]


def test_equal_times_count_as_ours():
    [p] = points_of(report([row("a", "float32", "contiguous", "forward", ours=2.0, stock=2.0)]), "r", PINNED)
    assert p.route == "Ours"


@pytest.mark.parametrize("stock_backend, ours, stock, cudnn, route", [
    # upstream runs its native kernel, ours once patched: ours or cuDNN, whichever is faster
    ("CudaDepthwise2d", 2.0, 1.0, 1.5, "Cudnn"),
    ("CudaDepthwise2d", 2.0, 1.0, 2.5, "Ours"),  # slower than upstream's old kernel, but the fastest left
    ("CudaDepthwise2d", 1.0, 3.0, 2.0, "Ours"),
    ("CudaDepthwise2d", 1.025, 3.0, 1.0, "Ours"),  # cuDNN faster by less than the bench's noise (CUDNN_MARGIN)
    # upstream runs cuDNN: ours or upstream's own choice, never cuDNN called by hand
    ("Cudnn", 2.0, 1.0, 0.9, "Upstream"),
    ("Cudnn", 1.0, 2.0, 2.0, "Ours"),
    # an older report without cuDNN's time or stock's backend: ours against stock
    (None, 2.0, 1.0, 0.5, "Upstream"),
])
def test_each_point_is_routed_to_the_fastest_the_patched_torch_can_run(stock_backend, ours, stock, cudnn, route):
    [p] = points_of(report([row("a", "float32", "contiguous", "forward", ours=ours, stock=stock, cudnn=cudnn,
                                stock_backend=stock_backend)]), "r", PINNED)
    assert p.route == route


def test_a_pass_measured_faster_in_cudnn_than_ours_is_routed_to_cudnn(tmp_path):
    """fp32 NCHW, where upstream's choice is its native kernel (ours once patched): a pass where
    cuDNN beat ours goes to cuDNN, the others to ours; a point that says cuDNN decides its
    neighbours too, and a tie between a cuDNN point and an ours point goes to upstream."""
    native = dict(stock_backend="CudaDepthwise2d")
    rows = [row("960@7", "float32", "contiguous", "forward", ours=0.065, stock=0.031, cudnn=0.029, channels=960,
                size=7, **native),
            row("960@7", "float32", "contiguous", "backward_input", ours=0.030, stock=0.053, cudnn=0.042,
                channels=960, size=7, **native),
            row("144@56", "float32", "contiguous", "forward", ours=0.1, stock=0.28, cudnn=0.15, **native)]
    router = Router(tmp_path, rows)
    small, near_small, large = router.ask(conv2d(c=960, h=7, w=7), conv2d(c=1024, h=7, w=7), conv2d())
    assert small["routes"] == {"forward": "cudnn", "backward_input": "ours", "backward_weight": "upstream"}
    assert near_small["routes"]["forward"] == "cudnn" and large["routes"]["forward"] == "ours"
    tie = Router(tmp_path / "tie", [rows[0], {**rows[2], "channels": 960, "height": 7, "width": 7, "layer": "b"}])
    [answer] = tie.ask(conv2d(c=960, h=7, w=7))
    assert answer["routes"]["forward"] == "upstream"


def test_the_committed_table_is_what_the_generator_makes_of_its_sources(tmp_path):
    text = TABLE.read_text()
    source = next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("// From: "))
    measured_on = next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("// Measured on: "))
    if source == "no report":
        assert text == render([], measured_on, source, 0)
    else:
        write_table([REPO_ROOT / s for s in source.split(" + ")], PINNED, tmp_path / TABLE.name)
        assert text == (tmp_path / TABLE.name).read_text()


@pytest.mark.parametrize("broken, message", [
    (lambda r: r.update(schema="something else"), "schema"),
    (lambda r: r.update(torch="2.10.0+cu128"), "not the pinned 2.11.0+cu130"),
    (lambda r: r["rows"][0]["ms"].update(ours=None), "lacks the time of ours or of stock"),
    (lambda r: r["rows"][0].update(dtype="int8"), "unknown dtype"),
    (lambda r: r.update(rows=[]), "no forward or backward rows"),
    (lambda r: r.update(arch="ampere"), "arch 'ampere' is not sm_<compute capability>"),
    (lambda r: r.pop("arch"), "names no arch (a bench from before 2026-11-25), and 'Synthetic GPU' is not a GPU"),
    (lambda r: r.setdefault("settings", {}).update(cudnn_benchmark=True),
     "was measured with torch.backends.cudnn.benchmark on (CUDNN_BENCHMARK=1); the table routes for torch's default"),
])
def test_the_generator_refuses_reports_it_cannot_route_by(tmp_path, broken, message):
    bad = report([row("a", "float32", "contiguous", "forward", ours=1.0, stock=2.0)])
    broken(bad)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(HarnessError, match=re.escape(message)):
        write_table([path], PINNED, tmp_path / "table.h")
    assert not (tmp_path / "table.h").exists()


def test_a_cut_bench_and_the_run_that_finished_it_make_one_table(tmp_path):
    """The later report's measurement of a layer stands; reports of two cards are refused."""
    cut = report([row("a", "float32", "contiguous", "forward", ours=1.0, stock=2.0),
                  row("b", "float32", "contiguous", "forward", ours=1.0, stock=2.0)])
    rest = report([row("b", "float32", "contiguous", "forward", ours=3.0, stock=2.0),
                   row("c", "bfloat16", "channels_last", "backward_weight", ours=1.0, stock=2.0)])
    rest["date"] = "2026-01-02"
    paths = [tmp_path / "cut.json", tmp_path / "rest.json"]
    for path, r in zip(paths, (cut, rest)):
        path.write_text(json.dumps(r))
    points = write_table(paths, PINNED, tmp_path / "table.h")
    assert {(p.label.split()[1], p.route) for p in points} == {("a", "Ours"), ("b", "Upstream"), ("c", "Ours")}
    text = (tmp_path / "table.h").read_text()
    assert "Synthetic GPU, torch 2.11.0+cu130, 2026-01-01, 2026-01-02" in text and "cut.json + " in text
    assert "inline constexpr int kMeasuredArch = 90;" in text
    rest["device"] = "Another GPU"
    paths[1].write_text(json.dumps(rest))
    with pytest.raises(HarnessError, match="not one run"):
        write_table(paths, PINNED, tmp_path / "other.h")
