"""`make resource-report`: ptxas's report and the PTX's 16-byte accesses, per kernel.

The parsing is tested on a real nvcc compile of a tiny source (nvcc is on every machine
that runs L0), then the report of our own kernels guards what their design relies on.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.resource_report import kernel_resources, keep_compiler_report, markdown, short_name

TINY = r"""
namespace at::native::dwconv {
template <typename T>
__global__ void copy_wide(float4* out, const float4* in) {
  __shared__ T staged[64];
  staged[threadIdx.x] = T(in[threadIdx.x].x);
  __syncthreads();
  out[threadIdx.x] = in[threadIdx.x + 1];
  out[0].y += float(staged[63 - threadIdx.x]);
}
template __global__ void copy_wide<double>(float4*, const float4*);
__global__ void divide_in_loop(int* out, int divisor, int count) {
  out[threadIdx.x] = threadIdx.x / divisor;  // once, outside any loop
  for (int i = 0; i < count; ++i) out[i] += (i * 7 + 3) % divisor;
}
}  // namespace at::native::dwconv
__global__ void not_ours(float* out) { out[threadIdx.x] = 1.0f; }
"""


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("nvcc is not installed here")
    work = tmp_path_factory.mktemp("tiny")
    (work / "tiny.cu").write_text(TINY)
    report = work / "tiny.o.report"
    report.mkdir()
    proc = subprocess.run(
        [nvcc, "-c", str(work / "tiny.cu"), "-o", str(work / "tiny.o"), "-O3",
         "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
         "-Xptxas=-v", "--keep", f"--keep-dir={report}"],
        capture_output=True, text=True, check=True,
    )
    keep_compiler_report(report, proc.stderr)
    return report


def test_report_keeps_only_ptxas_output_and_ptx(tiny_report):
    assert sorted(p.name for p in tiny_report.iterdir()) == ["ptxas.txt", "tiny.compute_80.ptx", "tiny.compute_90.ptx"]


def test_each_of_our_kernels_gets_its_resources_and_wide_accesses_per_arch(tiny_report):
    rows = [r for r in kernel_resources(tiny_report) if r.name != "divide_in_loop"]
    assert [(r.arch, r.name) for r in rows] == [("sm_80", "copy_wide<double>"), ("sm_90", "copy_wide<double>")]
    for row in rows:
        assert row.static_shared_bytes == 64 * 8
        assert 0 < row.registers < 64 and row.spill_stores == row.spill_loads == 0
        assert (row.wide_global_loads, row.wide_global_stores) == (1, 1)  # the float4 copy, one each way
        assert (row.wide_shared_loads, row.wide_shared_stores) == (0, 0)  # 8-byte doubles only
    table = markdown(rows, "tiny.cu")
    assert "| sm_90 | `copy_wide<double>` |" in table and "not_ours" not in table


def test_integer_divisions_are_counted_inside_innermost_loops_only(tiny_report):
    rows = {(r.arch, r.name): r for r in kernel_resources(tiny_report)}
    ptx = (tiny_report / "tiny.compute_90.ptx").read_text()
    all_divisions = len(re.findall(r"\b(?:div|rem)\.[su]32\b", ptx))
    # The loop's remainders (however nvcc unrolls the loop), not the division before it.
    assert rows["sm_90", "divide_in_loop"].loop_divisions == all_divisions - 1 >= 1
    assert rows["sm_90", "copy_wide<double>"].loop_divisions == 0


def test_short_names_drop_namespaces_return_type_and_parameters():
    assert short_name("void at::native::dwconv::k<c10::Half, int, true>(c10::Half const*, int)") == \
        "k<Half, int, true>"


def test_missing_report_says_how_to_make_it(tmp_path):
    from build_scripts.errors import HarnessError
    with pytest.raises(HarnessError, match="run `make check`"):
        kernel_resources(tmp_path)


@pytest.mark.l0
def test_our_kernels_keep_their_16_byte_paths_and_do_not_spill():
    """`make resource-report` as a user runs it; the channels_last tiled kernels must move every
    channel vector as one 16-byte access (nvcc 13 once split its 64-bit-index stores in four),
    the register-tiled kernels (forward and backward-input, weight gradient) must stage their tiles
    from 16-byte global loads and read each input row of a thread's window with 16-byte shared
    loads, the large-filter kernels their window steps
    and weights, and no 32-bit-index kernel may spill."""
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "resource-report"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| sm_")]
    rows = [dict(arch=a.strip(), kernel=k.strip(" `"), registers=int(registers), stack=int(stack), spills=s.strip(),
                 wide_global=g.strip(), wide_shared=sh.strip(), loop_divisions=int(d), hot_instructions=int(hot),
                 fma_share=share.strip(), chain=chain.strip())
            for a, k, registers, stack, s, _, g, sh, d, hot, share, chain in rows]
    assert {r["arch"] for r in rows} == {"sm_80", "sm_90"}
    tiled = [r for r in rows if r["kernel"].startswith("tiled_channels_last_kernel<")]
    assert len(tiled) == 2 * 4 * 2 * 2  # archs x dtypes x index types x passes
    for row in tiled:
        loads, stores = map(int, row["wide_global"].split("/"))
        assert loads >= 1 and stores >= 1, row
    # The register-tiled channels_last kernel: 16-byte vectors everywhere, and in shared memory one
    # load per input vector of a thread's window and per 16 bytes of a column's weights (acc_t).
    # Bounded for three blocks an SM (v48: the half types' 3x3 and 5x5 at stride 1), 80 registers at most
    # and no spill, but sm_80's 5x5: up to 8 words, in straight-line code (the whole kernel is its hot
    # loop), so each is stored and loaded once a thread beside some 2,000 instructions.
    channels_last_register = [r for r in rows if r["kernel"].startswith("channels_last_register_tiled_kernel<")]
    # archs x (dtypes x (passes x sizes + stride-2 forward) + half types x passes x 3x3 and 5x5 for three blocks)
    assert len(channels_last_register) == 2 * (4 * (2 * 3 + 2) + 2 * 2 * 2)
    straight_line_spills = []
    for row in channels_last_register:
        kernel_size, stride = map(int, row["kernel"].rstrip(">").split(",")[-3:-1])
        if row["kernel"].endswith("true>"):
            assert kernel_size in (3, 5) and stride == 1 and row["registers"] <= 80, row
            if row["arch"] == "sm_80" and kernel_size == 5:
                stores, spill_loads = map(int, row["spills"].split("/"))
                assert stores <= 32 and spill_loads <= 32 and row["stack"] <= 32 and row["chain"] == "-", row
                straight_line_spills.append(row)
        weight_loads = 2 if "Half" in row["kernel"] or "BFloat16" in row["kernel"] else 1
        loads, _ = map(int, row["wide_shared"].split("/"))
        assert loads == kernel_size * (3 * stride + kernel_size) + kernel_size ** 2 * weight_loads, row
        global_loads, stores = map(int, row["wide_global"].split("/"))
        assert global_loads >= 1 and stores >= 4, row  # the tile staged, a thread's 4 rows stored
    register_tiled = [r for r in rows if r["kernel"].startswith("register_tiled_nchw_kernel<")]
    assert all(r["chain"] == "-" for r in register_tiled)  # a kernel with loops has no one-warp chain
    # archs x dtypes x (2 passes x 3 kernel sizes at stride 1 + the forward's 2 sizes at stride 2)
    assert len(register_tiled) == 2 * 4 * (2 * 3 + 2)
    register_grad_weight = [r for r in rows if r["kernel"].startswith("grad_weight_register_tiled_kernel<")]
    # archs x dtypes x (3 kernel sizes at stride 1, 2 at stride 2) x grad_output staged or not
    assert len(register_grad_weight) == 2 * 4 * (3 + 2) * 2
    channels_last_grad_weight = [r for r in rows if r["kernel"].startswith("grad_weight_register_channels_last_kernel<")]
    assert len(channels_last_grad_weight) == 2 * 4 * 3 * 2  # archs x dtypes x kernel sizes x strides
    # The ring weight gradient (float and the half types): its first rows and each step's next rows
    # staged from 16-byte loads several in flight, 32-bit indexing throughout, and no spill at its
    # bound of 80 registers.
    ring = [r for r in rows if r["kernel"].startswith("grad_weight_ring_kernel<")]
    assert len(ring) == 2 * 3 * 3 * 2  # archs x dtypes x kernel sizes x strides
    for row in ring:
        loads, _ = map(int, row["wide_global"].split("/"))
        assert loads >= 2 * 4 and row["spills"] == "0/0" and row["loop_divisions"] == 0, row
    # The window weight gradient (float and the half types): its K^2 tap sums and a window in
    # registers without a spill, its rows copied in flight (cp.async, no 16-byte global load).
    window = [r for r in rows if r["kernel"].startswith("grad_weight_window_kernel<")]
    assert len(window) == 2 * 3 * 5  # archs x dtypes x (3 kernel sizes at stride 1, 2 at stride 2)
    for row in window:
        assert row["spills"] == "0/0" and row["loop_divisions"] == 0, row
    # The pixel kernels: no spill at the register bounds their __launch_bounds__ set (a channels_last
    # thread holds 2 x K^2 16-byte vectors, at 7x7 as many as its schedule keeps in 255 registers),
    # and in channels_last every value moved as a 16-byte vector: the window's and the weights' K^2
    # loads each, and one store. At 7x7, a round a window row in the half types, a weight vector
    # that ends one channel's taps and starts the next (7 of them) serves the last round and the
    # first, and may be loaded as two narrower parts.
    pixel = [r for r in rows if r["kernel"].startswith("pixel_kernel<")]
    # archs x dtypes x (both layouts: the forward's 2 sizes x 2 strides, backward-input's 2 sizes;
    # channels_last 7x7, both passes)
    assert len(pixel) == 2 * 4 * (2 * (4 + 2) + 2)
    for row in pixel:
        kernel_size = int(row["kernel"].split(",")[2])
        loads, stores = map(int, row["wide_global"].split("/"))
        assert row["spills"] == "0/0" and row["loop_divisions"] == 0, row
        # Straight-line code (a thread a pixel): one warp's chain, at least a load's wait and its FMAs.
        assert int(row["chain"]) > 600 + kernel_size ** 2, row
        if row["kernel"].endswith("true>") and kernel_size == 7:
            assert 2 * 49 - 2 * 7 <= loads <= 2 * 49 and stores == 1, row
        elif row["kernel"].endswith("true>"):
            assert loads == 2 * kernel_size ** 2 and stores == 1, row
        else:
            assert loads == stores == 0, row
    # The plane stream (float): no spill at its bounds (three blocks an SM, 80 registers, at 3x3 and 5x5
    # stride 1; two, 128, at 7x7 and stride 2, which spilled at 80), no division in its loop, and each
    # chunk's outputs stored as 16-byte vectors; its hot loop is a chunk's: a thread's K^2 x 16
    # multiply-adds and the window's reads beside the rest (the copies, the filter's loads, the stores).
    # Flat planes: up to four instructions a value of the window (the padding's test, the zero, the shared
    # load) and 200 for the rest. Vector rows (v50): a 16-byte shared load a vector of each window row
    # and no other, up to six instructions a vector (the test, the load, four zeros) and 300 for the rest
    # (its copies in 16 and in 8 bytes and its stores in 16 and in 8 are all in the loop's code; a pass
    # runs one of each).
    plane_stream = [r for r in rows if r["kernel"].startswith("plane_stream_kernel<")]
    # archs x (forward: 3 sizes at stride 1, 2 at stride 2; backward-input: 3) x (flat planes, vector rows)
    assert len(plane_stream) == 2 * (5 + 3) * 2
    for row in plane_stream:
        kernel_size, stride = map(int, row["kernel"].rstrip(">").split(",")[-3:-1])
        vector_rows = row["kernel"].endswith("true>")
        bound = 80 if kernel_size <= 5 and stride == 1 else 128
        _, stores = map(int, row["wide_global"].split("/"))
        wide_loads, wide_stores = map(int, row["wide_shared"].split("/"))
        assert row["registers"] <= bound and row["spills"] == "0/0" and row["stack"] == 0, row
        assert row["loop_divisions"] == 0 and stores == 1, row
        window_rows = window_cols = (4 - 1) * stride + kernel_size
        multiply_adds = 16 * kernel_size ** 2
        if vector_rows:
            vectors = -(-(4 - kernel_size // 2 + window_cols) // 4)
            assert wide_loads == window_rows * vectors, row
            assert multiply_adds < row["hot_instructions"] < multiply_adds + 6 * window_rows * vectors + 300, row
        else:
            assert wide_loads == 0, row
            assert multiply_adds < row["hot_instructions"] < multiply_adds + 4 * window_rows * window_cols + 200, row
    # The plane-streamed weight gradient (float, v51): its bounds (three blocks an SM at 3x3 stride 1 and
    # at 5x5 stride 1 from vector rows, else two), no division in its loops, vector rows read as one
    # 16-byte shared load a vector of each window row and a 16-byte load a row of grad_output's tile (where
    # dst rows are whole vectors: 4, in the code of both), and a hot loop that is an entry's: the walk is
    # compiled twice (the tile's code for the plane's edge, which meets only real outputs, and for the
    # rest), each a thread's K^2 x 16 multiply-adds and its window's reads, and up to 800 instructions
    # beside (the two tensors' copies, the grad_output tile read both ways: a pass runs one). Flat planes at 7x7 and at 5x5 stride 2 may
    # keep up to three words past their bound of 128 (7x7: two, stored before the entries' loop and
    # reloaded once or twice an entry, after its barrier); every other instance none.
    grad_weight = [r for r in rows if r["kernel"].startswith("plane_stream_grad_weight_kernel<")]
    assert len(grad_weight) == 2 * 5 * 2  # archs x (3 sizes at stride 1, 2 at stride 2) x (flat planes, vector rows)
    for row in grad_weight:
        kernel_size, stride = map(int, row["kernel"].rstrip(">").split(",")[-3:-1])
        vector_rows = row["kernel"].endswith("true>")
        bound = 80 if stride == 1 and (kernel_size == 3 or (kernel_size == 5 and vector_rows)) else 128
        wide_loads, _ = map(int, row["wide_shared"].split("/"))
        assert row["registers"] <= bound and row["loop_divisions"] == 0, row
        if not vector_rows and (kernel_size == 7 or (kernel_size == 5 and stride == 2)):
            stored, loaded = map(int, row["spills"].split("/"))
            assert stored <= 12 and loaded <= 12 and row["stack"] <= 8, row
        else:
            assert row["spills"] == "0/0" and row["stack"] == 0, row
        window_rows = window_cols = (4 - 1) * stride + kernel_size
        multiply_adds = 16 * kernel_size ** 2
        if vector_rows:  # up to six instructions a vector, five a value of flat planes (the mask's test too)
            vectors = -(-(4 - kernel_size // 2 + window_cols) // 4)
            assert wide_loads == 2 * window_rows * vectors + 4, row  # the edge's code and the rest's
            reads = 6 * window_rows * vectors
        else:
            assert wide_loads == 4, row
            reads = 5 * window_rows * window_cols
        assert 2 * multiply_adds < row["hot_instructions"] < 2 * (multiply_adds + reads) + 800, row
    # The tensor-core kernels (bfloat16 and half): no spill and no stack at their bound of 128
    # registers (a task's sums and the filter's 9 weight words stay in registers), but at 7x7 (49 weight
    # words) one word, stored once and reloaded once a step, outside the tasks' loop (v44: bounded by one
    # block an SM it took 163-165 registers instead); bounded for three blocks (80 registers, v47), the
    # 3x3 one-tile instances none either, but the sm_90 backward-input's three words, stored in the
    # prologue and reloaded once a step. No division in their loops, and a hot
    # loop that is the task's: 4 K^2 products a tile (kTiles tiles), the forward's bias products and
    # the NaN path's one FFMA, in fewer than twice the products and 450 instructions beside (its
    # loads, their addresses, the NaN test, the stores, and the NaN path, rolled: unrolled, it made
    # the 3x3 loop 3,000; 526 at 3x3 in two-tile tasks, 342-457 in one-tile ones).
    mma = [r for r in rows if r["kernel"].startswith("channels_last_mma_kernel<")]
    # archs x half types x (forward: 3x3 in tasks of 1 and 2 tiles, 5x5, 7x7, 3x3 and 5x5 at stride 2, and
    # 3x3 of one tile bounded for three blocks at stride 1 and 2; backward-input: 3x3 in tasks of 1 and 2
    # tiles, 5x5, 7x7, and 3x3 of one tile bounded for three blocks)
    assert len(mma) == 2 * 2 * (6 + 2 + 4 + 1)
    for row in mma:
        kernel_size, stride, tiles = map(int, row["kernel"].rstrip(">").split(",")[-4:-1])
        three_blocks = row["kernel"].endswith("true>")
        if three_blocks:
            assert kernel_size == 3 and tiles == 1 and row["registers"] <= 80, row
        hot_products = row["hot_instructions"] * float(row["fma_share"].rstrip("%")) / 100  # the share is rounded
        spilled_words = 1 if kernel_size == 7 else 3 if three_blocks and ", true, " in row["kernel"] else 0
        assert row["spills"] in {"0/0", f"{4 * spilled_words}/{4 * spilled_words}"}, row
        assert row["stack"] <= 8 * spilled_words and row["loop_divisions"] == 0, row
        slack = 0.005 * row["hot_instructions"]  # the forward's bias: 4 products a tile, or as few as ptxas shares
        products = 4 * kernel_size ** 2 * tiles
        assert products - slack <= hot_products <= products + 4 * tiles + 1 + slack, row
        assert row["hot_instructions"] < 2 * products + 450, row
    large_filter = [r for r in rows if r["kernel"].startswith("large_filter_kernel<")]
    assert len(large_filter) == 2 * 4 * 2  # archs x dtypes x passes
    large_filter_grad_weight = [r for r in rows if r["kernel"].startswith("grad_weight_large_filter_kernel<")]
    assert len(large_filter_grad_weight) == 2 * 4  # archs x dtypes
    for row in large_filter + large_filter_grad_weight:
        loads, _ = map(int, row["wide_shared"].split("/"))
        assert loads >= 2 * (1 + 4), row  # each step's next input columns and a weight vector per output row,
        #                                   in the ramp and the steady row loops
    for row in register_tiled + register_grad_weight:
        kernel_size, stride = [int(a) for a in row["kernel"].rstrip(">").split(",") if a.strip().isdigit()][-2:]
        loads, _ = map(int, row["wide_shared"].split("/"))
        assert loads >= 3 * stride + kernel_size, row  # at least one per input row of a thread's window
        global_loads, _ = map(int, row["wide_global"].split("/"))
        assert global_loads >= 1, row  # the tile staged from 16-byte vectors (the forward kernels load nothing else so)
    # conv1d's row (NCHW) and column (channels_last) kernels move every global value as a 16-byte
    # vector but at a row's ends.
    conv1d_kernels, conv1d_grad_weight_kernels = [], []
    for name in ("row_kernel<", "column_kernel<"):
        kernels = [r for r in rows if r["kernel"].startswith(name)]
        assert len(kernels) == 2 * 4 * 2 * 3, name  # archs x dtypes x passes x filter widths
        grad_weight_kernels = [r for r in rows if r["kernel"].startswith("grad_weight_" + name)]
        assert len(grad_weight_kernels) == 2 * 4 * 3, name  # archs x dtypes x filter widths
        conv1d_kernels += kernels
        conv1d_grad_weight_kernels += grad_weight_kernels
    # row_backward_kernel, both gradients at once, moves grad_input as row_kernel's backward-input does.
    conv1d_both_kernels = [r for r in rows if r["kernel"].startswith("row_backward_kernel<")]
    assert len(conv1d_both_kernels) == 2 * 4 * 3  # archs x dtypes x filter widths
    conv1d_kernels += conv1d_both_kernels
    # column_backward_kernel moves 8 bytes of channels a thread (two 32-bit lanes, not a 16-byte access), with
    # grad_input and without.
    column_backward_kernels = [r for r in rows if r["kernel"].startswith("column_backward_kernel<")]
    assert len(column_backward_kernels) == 2 * 4 * 3 * 2  # archs x dtypes x filter widths x with grad_input or not
    assert all(r["wide_global"] == "0/0" and r["loop_divisions"] == 0 for r in column_backward_kernels)
    for r in conv1d_kernels + conv1d_grad_weight_kernels:
        loads, stores = map(int, r["wide_global"].split("/"))
        assert loads >= 2 and stores >= (1 if r in conv1d_kernels else 0), r  # inputs (and grad_output); outputs
    # The stride-2 backward-input kernels: every channels_last value moves as a 16-byte vector.
    stride2 = [r for r in rows if r["kernel"].startswith("stride2_grad_input_")]
    assert len(stride2) == 2 * 4 * 2 * 2 * 2  # archs x dtypes x layouts x filter sizes x padding parities
    for r in stride2:
        if "channels_last" in r["kernel"]:
            loads, stores = map(int, r["wide_global"].split("/"))
            assert loads >= 4 and stores >= 4, r  # the 2 x 2 window (3 x 3 for 5x5) and the 2 x 2 pixels
    # The general kernels serve what no special kernel takes (odd backward-inputs, dilation, odd
    # shapes, the NCHW weight gradient of 7x7 at stride 2), and the row, column and stride-2
    # kernels theirs: their loops over positions, chunks, segments, blocks and taps divide nothing.
    general = [r for r in rows if r["kernel"].startswith(("direct_kernel<", "grad_weight_nchw_kernel<",
                                                          "grad_weight_channels_last_kernel<"))]
    # The tiles the register-tiled and channels_last tiled kernels stage are walked with carries too.
    staged = [r for r in rows if r["kernel"].startswith(("register_tiled_nchw_kernel<", "tiled_channels_last_kernel<",
                                                         "channels_last_register_tiled_kernel<"))]
    assert len(general) == 2 * 4 * 2 * 2 + 2 * 4 * (3 + 2) * 2  # direct; weight gradient in 3 (int) or 2 (long) slot sizes
    for r in general + staged + conv1d_kernels + conv1d_grad_weight_kernels + stride2:
        assert r["loop_divisions"] == 0, r
    for row in rows:
        if row in straight_line_spills:
            continue
        if ", int" in row["kernel"] or "finish" in row["kernel"]:
            assert row["spills"] == "0/0", row
    # bfloat16 widens to float with an instruction a value, as half does (widen_vector): the
    # channels_last register kernels' hot loops, where the conversions compete with the FMAs for issue
    # slots, are within 2 % of half's in bfloat16 (c10's conversion, value by value, made them 6-10 % longer).
    by_name = {(r["arch"], r["kernel"]): r for r in rows}
    register_column_kernels = [r for r in channels_last_register + [
        r for r in rows if r["kernel"].startswith("channels_last_stream_kernel<")] if "BFloat16" in r["kernel"]]
    # archs x (the register tile's kernels, 4 of them bounded for three blocks, + the stream's)
    assert len(register_column_kernels) == 2 * (8 + 4 + 8)
    for row in register_column_kernels:
        half = by_name[row["arch"], row["kernel"].replace("BFloat16", "Half")]
        assert row["hot_instructions"] <= 1.02 * half["hot_instructions"], (row, half)
