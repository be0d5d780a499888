"""The overlay's run-time switches, in the real overlay loaded into the pinned torch on the CPU:
the routing (dwconv_overlay.set_routing / routing, DWCONV_ROUTING at start), its table
(dwconv_overlay.load_routing_table, DWCONV_ROUTING_TABLE at start) and the kernel paths
(dwconv_overlay.disable_kernels / disabled_kernels / kernel_paths, DWCONV_DISABLE_KERNELS at
start). A bad value is an error that names it. CPU convolutions are untouched by the overlay's
CUDA kernels."""

import re

import pytest

from build_scripts import REPO_ROOT
from build_scripts.routing_table import RUNTIME_FORMAT, TABLE

pytestmark = pytest.mark.l0

ROUTING = """
try:
    print("start", dwconv_overlay.routing())
except RuntimeError as err:
    print("error", str(err).splitlines()[0])
    sys.exit(0)
for mode in ("ours", "cudnn", "upstream", "auto"):
    dwconv_overlay.set_routing(mode)
    print("set", dwconv_overlay.routing())
try:
    dwconv_overlay.set_routing("fastest")
except RuntimeError as err:
    print("refused", str(err).splitlines()[0])
print("measured", dwconv_overlay.routing_measured_on())
x, w = torch.randn(2, 6, 9, 9, dtype=torch.float64), torch.randn(6, 1, 3, 3, dtype=torch.float64)
dwconv_overlay.set_routing("ours")
ours = torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 6)
dwconv_overlay.disable()
print("cpu", torch.equal(ours, torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 6)))
"""


KERNEL_PATHS = """
try:
    print("start", ",".join(dwconv_overlay.disabled_kernels()))
except RuntimeError as err:
    print("error", str(err).splitlines()[0])
    sys.exit(0)
print("paths", ",".join(dwconv_overlay.kernel_paths()))
dwconv_overlay.disable_kernels(["register_tiled", "row"])
print("set", ",".join(dwconv_overlay.disabled_kernels()))
try:
    dwconv_overlay.disable_kernels(["large_filter", "fastest"])
except RuntimeError as err:
    print("refused", str(err).splitlines()[0])
print("kept", ",".join(dwconv_overlay.disabled_kernels()))
dwconv_overlay.disable_kernels("column")
print("one", ",".join(dwconv_overlay.disabled_kernels()))
dwconv_overlay.disable_kernels([])
print("none", ",".join(dwconv_overlay.disabled_kernels()))
"""

# The bench's variants (build_scripts/bench/variants.py) set the switches around each timing.
BENCH_VARIANTS = """
sys.path.insert(0, {repo!r})
from build_scripts.bench.variants import Overlay
overlay = Overlay(dwconv_overlay)
def state():
    cudnn = torch.backends.cudnn
    return (dwconv_overlay.enabled(), dwconv_overlay.disabled_kernels(), dwconv_overlay.routing(),
            "cudnn" + "".join(f" {{flag}}={{int(getattr(cudnn, flag))}}" for flag in ("enabled", "benchmark",
                                                                                   "allow_tf32", "deterministic")))
dwconv_overlay.set_routing("upstream")
torch.backends.cudnn.benchmark = True  # not torch's defaults: a variant must leave what it does not set
torch.backends.cudnn.allow_tf32 = False
for name in ("stock", "ours", "ours-without-row", "routed", "native", "cudnn"):
    with overlay.variant(name):
        print(name, *state())
print("after", *state())
dwconv_overlay.disable()  # a caller's overlay off, a path of its own off: both come back
dwconv_overlay.disable_kernels(["column"])
with overlay.variant("ours-without-row"):
    print("within", *state())
print("restored", *state())
"""


def test_routing_modes_switch_and_a_bad_one_is_refused(overlay_probe):
    lines = overlay_probe(ROUTING)
    assert lines[:5] == ["start auto", "set ours", "set cudnn", "set upstream", "set auto"]
    assert lines[5] == "refused dwconv routing must be auto, ours, cudnn or upstream, got 'fastest'"
    assert lines[6].startswith("measured ")
    assert lines[7] == "cpu True"


RECOVER = """
for _ in range(2):  # asked again, it says so again
    try:
        dwconv_overlay.routing()
    except RuntimeError as err:
        print("error", str(err).splitlines()[0])
dwconv_overlay.set_routing("ours")
print("set", dwconv_overlay.routing())
"""


def test_the_environment_sets_the_starting_mode(overlay_probe):
    assert overlay_probe(ROUTING, DWCONV_ROUTING="upstream")[0] == "start upstream"
    error = ("error DWCONV_ROUTING must be auto, ours, cudnn or upstream, got 'fastest' (torch.ops.dwconv.set_routing "
             "sets the mode in this process)")
    assert overlay_probe(ROUTING, DWCONV_ROUTING="fastest") == [error]
    # a mode set in the process takes over from the bad one
    assert overlay_probe(RECOVER, DWCONV_ROUTING="fastest") == [error, error, "set ours"]


ALL_PATHS = ("channels_last_tiled,register_tiled,register_tiled_grad_weight,channels_last_register_grad_weight,"
             "large_filter,large_filter_grad_weight,row,column,stride2_grad_input,register_tiled_stride2,"
             "tile_vector_loads,channels_last_register_tiled,channels_last_ring_grad_weight,channels_last_stream,"
             "channels_last_window_grad_weight,pixel,channels_last_mma,staged_grad_output,channels_last_walk_grad_weight,"
             "window_shared_opt_in,channels_last_mma_grad_weight,channels_last_mma_three_blocks,"
             "channels_last_register_tiled_three_blocks,plane_stream,plane_stream_vector_rows,plane_stream_grad_weight,"
             "row_backward,column_backward,plane_stream_large_planes,register_tiled_grad_weight_waves,stream_band_waves,"
             "stride2_grad_input_waves")
UNKNOWN_PATH = "no depthwise kernel path is called 'fastest'; the paths are " + ALL_PATHS.replace(",", ", ")


def test_kernel_paths_switch_off_and_on_and_an_unknown_one_is_refused(overlay_probe):
    assert overlay_probe(KERNEL_PATHS) == [
        "start ", "paths " + ALL_PATHS, "set register_tiled,row",
        "refused dwconv.disable_kernels: " + UNKNOWN_PATH,
        "kept register_tiled,row",  # a refused list changes nothing
        "one column", "none "]


def test_the_environment_sets_the_starting_kernel_paths(overlay_probe):
    assert overlay_probe(KERNEL_PATHS, DWCONV_DISABLE_KERNELS=" tile_vector_loads, large_filter ,")[0] == \
        "start large_filter,tile_vector_loads"
    assert overlay_probe(KERNEL_PATHS, DWCONV_DISABLE_KERNELS="row,fastest") == [
        "error DWCONV_DISABLE_KERNELS: " + UNKNOWN_PATH]


def test_each_bench_variant_sets_the_switches_and_puts_them_back(overlay_probe):
    before = "cudnn enabled=1 benchmark=1 allow_tf32=0 deterministic=0"
    assert overlay_probe(BENCH_VARIANTS.format(repo=str(REPO_ROOT))) == [
        f"stock False [] upstream {before}", f"ours True [] upstream {before}",
        f"ours-without-row True ['row'] upstream {before}", f"routed True [] auto {before}",
        "native False [] upstream cudnn enabled=0 benchmark=1 allow_tf32=0 deterministic=0",
        # cuDNN as the routing runs it where it stands in for the native kernel
        "cudnn False [] upstream cudnn enabled=1 benchmark=1 allow_tf32=0 deterministic=1",
        f"after True [] upstream {before}",
        # a path already off stays off: ours-without-<path> switches its own off on top
        f"within True ['row', 'column'] upstream {before}", f"restored False ['column'] upstream {before}"]


def test_the_bench_variants_keep_the_kernel_paths_the_process_started_without(overlay_probe):
    lines = overlay_probe(BENCH_VARIANTS.format(repo=str(REPO_ROOT)), DWCONV_DISABLE_KERNELS="column")
    switches = [line.split(" cudnn ")[0] for line in lines]
    assert switches == ["stock False ['column'] upstream", "ours True ['column'] upstream",
                        "ours-without-row True ['row', 'column'] upstream", "routed True ['column'] auto",
                        "native False ['column'] upstream", "cudnn False ['column'] upstream",
                        "after True ['column'] upstream",
                        "within True ['row', 'column'] upstream", "restored False ['column'] upstream"]


# A table measured elsewhere, loaded at run time; asked about with meta tensors.
LOADED_TABLE = """
def show():
    x = torch.empty(64, 144, 56, 56, device="meta", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.empty(144, 1, 3, 3, device="meta", dtype=torch.bfloat16)
    try:
        print("measured", dwconv_overlay.routing_measured_on())
        print(*dwconv_overlay.explain_routing(x, w, None, 1, 1, 1, 144).splitlines(), sep="\\n")
    except RuntimeError as err:
        print("error", str(err).splitlines()[0])
    x = torch.randn(2, 6, 9, 9, dtype=torch.float64)
    print("cpu", torch.nn.functional.conv2d(x, torch.randn(6, 1, 3, 3, dtype=torch.float64), None, 1, 1, 1, 6).shape)
show()
for path in {loads!r}:
    try:
        dwconv_overlay.load_routing_table(path)
        print("loaded", path)
    except RuntimeError as err:
        print("refused", str(err).splitlines()[0])
    show()
"""

SYNTHETIC_TABLE = (RUNTIME_FORMAT + "\n# by hand, for the test\nmeasured_on\tSynthetic A100, torch 2.11.0+cu130, 2026-01-01\n"
                   "measured_arch\t80\n"
                   "point\tforward\tbfloat16\tchannels_last\t3\t3\t1\t1\t28901376\t3136\tours\tA 144@56 forward\n"
                   "point\tbackward_weight\tbfloat16\tchannels_last\t3\t3\t1\t1\t28901376\t3136\tcudnn\tA 144@56 wgrad\n")


def test_a_routing_table_file_replaces_the_built_in_one_and_a_bad_one_is_refused(overlay_probe, tmp_path):
    good, bad = tmp_path / "a100.tsv", tmp_path / "bad.tsv"
    good.write_text(SYNTHETIC_TABLE)
    bad.write_text(SYNTHETIC_TABLE.replace("\tcudnn\t", "\tfastest\t"))
    built_in = re.search(r'kMeasuredOn = "([^"]*)"', TABLE.read_text()).group(1)
    arch = re.search(r"kMeasuredArch = (\d+);", TABLE.read_text()).group(1)
    loaded = [f"measured Synthetic A100, torch 2.11.0+cu130, 2026-01-01 (sm_80), loaded from {good}",
              "depthwise conv2d: batch 64, 144 channels, multiplier 1, 56x56, kernel 3x3, stride 1x1, bfloat16 "
              "channels_last; routing auto, table measured on Synthetic A100, torch 2.11.0+cu130, 2026-01-01 (sm_80), "
              f"loaded from {good}; no GPU here, routed as on sm_80",
              "forward: ours: as the nearest measured, A 144@56 forward",
              "backward_input: upstream: nothing measured for this dtype, layout and pass (stock's choice)",
              "backward_weight: cudnn: as the nearest measured, A 144@56 wgrad",
              "cpu torch.Size([2, 6, 9, 9])"]
    malformed = f"the routing table {bad} is malformed: line 6: route 'fastest': ours, cudnn or upstream"
    lines = overlay_probe(LOADED_TABLE.format(loads=[str(bad), None]), DWCONV_ROUTING_TABLE=str(good))
    assert lines[:6] == loaded
    assert lines[6] == f"refused dwconv.load_routing_table: {malformed}"
    assert lines[7:13] == loaded  # a refused file changes nothing
    assert lines[13] == "loaded None"
    assert lines[14] == f"measured {built_in} (sm_{arch})"
    assert lines[15].endswith(f"table measured on {built_in} (sm_{arch}); no GPU here, routed as on sm_{arch}")

    lines = overlay_probe(LOADED_TABLE.format(loads=[str(good)]), DWCONV_ROUTING_TABLE=str(bad))
    error = (f"error DWCONV_ROUTING_TABLE: {malformed} (torch.ops.dwconv.load_routing_table loads another in this "
             "process, \"\" the built-in one)")
    assert lines[:2] == [error, "cpu torch.Size([2, 6, 9, 9])"]  # routed calls fail; CPU ones never route
    assert lines[2:] == [f"loaded {good}", *loaded]
    missing = tmp_path / "missing.tsv"
    assert overlay_probe(LOADED_TABLE.format(loads=[]), DWCONV_ROUTING_TABLE=str(missing))[0] == \
        f"error DWCONV_ROUTING_TABLE: cannot open the routing table {missing} (torch.ops.dwconv.load_routing_table " \
        "loads another in this process, \"\" the built-in one)"
    binary = tmp_path / "table.tsv.gz"
    binary.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe")
    assert overlay_probe(LOADED_TABLE.format(loads=[str(tmp_path), str(binary)]))[6:14:7] == [
        f"refused dwconv.load_routing_table: the routing table {tmp_path} is a directory, not a file",
        f"refused dwconv.load_routing_table: the routing table {binary} is malformed: line 1: "
        "'\\x1f\\x8b\\x08\\x00\\xff\\xfe' where a routing table starts with 'dwconv-routing-table 1' "
        "(`make routing-table TABLE=<file>` writes one)"]


# Asked about with meta tensors: no GPU, no memory.
EXPLAIN = """
def ask(n, c, size, k, stride=1, padding=None, dtype=torch.bfloat16, layout=torch.channels_last, groups=None, bias=False):
    x = torch.empty(n, c, size, size, device="meta", dtype=dtype).to(memory_format=layout)
    w = torch.empty(c, 1, k, k, device="meta", dtype=dtype)
    b = torch.empty(c, device="meta", dtype=dtype) if bias else None
    return dwconv_overlay.explain_routing(x, w, b, stride, k // 2 if padding is None else padding, 1,
                                          c if groups is None else groups)
print(ask(64, 256, 28, 29))
print(ask(64, 256, 28, 29, padding="same").splitlines()[1])
print(ask(1, 6, 9, 3, dtype=torch.float64, layout=torch.contiguous_format).splitlines()[2])
print(ask(64, 64, 14, 3, groups=1))
dwconv_overlay.set_routing("upstream")
print(ask(64, 256, 28, 29).splitlines()[3])
try:
    ask(64, 256, 28, 4, padding="same")
except ValueError as err:
    print("refused", err)
"""


def test_explain_routing_names_who_runs_each_pass_and_why(overlay_probe):
    lines = overlay_probe(EXPLAIN)
    assert lines[0].startswith("depthwise conv2d: batch 64, 256 channels, multiplier 1, 28x28, kernel 29x29, stride 1x1, "
                               "bfloat16 channels_last; routing auto, table measured on ")
    assert lines[0].endswith(" (sm_90); no GPU here, routed as on sm_90")  # as on the GPUs measured
    assert lines[1].startswith("forward: ours: as the nearest measured, RepLKNet-31B 256@28 k29 batch 64 bfloat16 "
                               "channels_last forward: ours ")
    assert lines[2].startswith("backward_input: ours: as the nearest measured, RepLKNet-31B 256@28 k29 batch 64")
    assert lines[3].startswith("backward_weight: ours: as the nearest measured, RepLKNet-31B 256@28 k29 batch 64")
    assert lines[4] == lines[1]  # padding="same" is the numbers 14, 14
    assert lines[5] == "backward_input: upstream: nothing measured for this dtype, layout and pass (stock's choice)"
    assert lines[6] == "not taken, upstream decides every pass: not depthwise (groups != in_channels, or 1)"
    assert lines[7] == "backward_weight: upstream: routing mode upstream"
    assert lines[8].startswith("refused explain_routing: padding 'same' is not one aten::convolution receives")


# The backward the routing calls, with the bias gradient (DepthwiseConvBackwardOps.cpp).
BACKWARD_WITH_BIAS = """
op = torch.ops.dwconv.conv_depthwise2d_backward.default
print(op._schema)
print("CUDA", torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CUDA"))
print("CPU", torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CPU"))
"""


def test_the_backward_with_the_bias_gradient_is_a_cuda_operator(overlay_probe):
    assert overlay_probe(BACKWARD_WITH_BIAS) == [
        "dwconv::conv_depthwise2d_backward(Tensor grad_output, Tensor self, Tensor weight, int[2] kernel_size, "
        "int[2] stride, int[2] padding, int[2] dilation, bool[3] output_mask) -> (Tensor grad_input, "
        "Tensor grad_weight, Tensor grad_bias)",
        "CUDA True", "CPU False"]
