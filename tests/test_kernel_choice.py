"""Which kernel the host code chooses for each pass (DepthwiseConv2dKernelChoice.cuh, run on the
CPU through tests/emulator/kernel_choice.cpp), against what the GPU tests expect the profiler to
see (tests/gpu/kernel_cases.py): an expectation the choice no longer meets fails here, without a
GPU. Each is checked in every dtype and for the GPUs of GPUS (A100, H100 PCIe, H100 SXM and H200,
RTX 3090, RTX 4090), so that no GPU test depends on the GPU it runs on."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT, plan_report, resource_report
from build_scripts.bench.floor import ELEMENT_BYTES
from tests.gpu import kernel_cases

pytestmark = pytest.mark.l0  # the pinned torch's c10 headers and library

OURS = REPO_ROOT / "patches" / "files" / "aten" / "src"
KERNEL_SOURCES = sorted((OURS / "ATen/native/cuda").glob("DepthwiseConv2d*.cuh"))  # the kernel family headers
DTYPES = {"double": 8, "float": 4, "half": 2, "bfloat16": 2}
Gpu = plan_report.Gpu
H100 = plan_report.H100  # SXM, 132 SMs
# Each SM kind the planners size grids by (threads, blocks and shared memory an SM), with its SMs.
GPUS = (Gpu(108, "sm_80"), Gpu(114, "sm_90"), H100, Gpu(82, "sm_86"), Gpu(128, "sm_89"))


@pytest.fixture(scope="module")
def kernel_choice(kernel_choice_driver) -> Path:
    return kernel_choice_driver


def query_line(dtype: str, pass_: str, call: kernel_cases.Call, gpu: plan_report.Gpu, disabled=()) -> str:
    return plan_report.call_line(dtype, pass_, call.layout, call.n, call.c, call.size, call.kernel, call.stride,
                                 call.padding, call.dilation, call.multiplier, call.input_offset,
                                 call.grad_output_offset, gpu, disabled)


def planned(binary: Path, dtype: str, pass_: str, call: kernel_cases.Call, gpu: plan_report.Gpu = H100,
            disabled=()) -> plan_report.Launch:
    """The launch the choice plans for one call's pass (the driver's --plans line, parsed)."""
    answer, = plan_report.run_driver(binary, [query_line(dtype, pass_, call, gpu, disabled)], "--plans")
    return plan_report.Launch.parse(answer)


@pytest.fixture(scope="module")
def kernel_names(kernel_choice) -> set[str]:
    """Every name the choice can give."""
    return set(subprocess.run([str(kernel_choice), "--names"], capture_output=True, text=True, check=True).stdout.split())


@pytest.fixture(scope="module")
def bench_launches(kernel_choice) -> dict[plan_report.Gpu, list]:
    """GPU -> (problem, pass, Launch) for every bench pass."""
    return {gpu: plan_report.bench_launches(kernel_choice, gpu) for gpu in GPUS}


def choose(binary: Path, lines: list[str]) -> list[str]:
    return plan_report.run_driver(binary, lines)


def unmet(binary: Path, expectations_of) -> list[str]:
    """Every (dtype, GPU, expectation, pass, kernel) whose expectation the choice does not meet."""
    checks, lines = [], []
    for dtype, element_size in DTYPES.items():
        for expectation in expectations_of(element_size):
            for pass_, kernels in expectation.launches.items():
                for gpu in GPUS:
                    lines.append(query_line(dtype, pass_, expectation.call, gpu, expectation.disabled))
                    checks.append((dtype, gpu, expectation, pass_, kernels))
    failures = []
    for (dtype, gpu, expectation, pass_, kernels), chosen in zip(checks, choose(binary, lines)):
        for kernel, expected in kernels.items():
            if (kernel in chosen.split("+")) != expected:  # both gradients from two kernels: "<one>+<other>"
                off = f" with {', '.join(expectation.disabled)} off" if expectation.disabled else ""
                failures.append(f"{dtype}, {gpu}, {expectation.call.label!r}{off}: {pass_} runs {chosen}, "
                                f"the GPU test expects {kernel} {'to' if expected else 'not to'} run")
    return failures


@pytest.mark.parametrize("test_name", sorted(kernel_cases.KERNEL_CHOICE_TABLES))
def test_the_gpu_tests_expect_the_kernels_the_host_code_chooses(kernel_choice, test_name):
    failures = unmet(kernel_choice, kernel_cases.KERNEL_CHOICE_TABLES[test_name])
    assert not failures, "\n".join(failures)


def test_the_routing_tests_biased_layers_take_the_weight_gradient_kernels_they_expect(kernel_choice):
    lines, expected = [], []
    for dtype, _, call, kernel in kernel_cases.BIASED_LAYER_CASES:
        for gpu in GPUS:
            lines.append(query_line(dtype, "grad-weight+bias", call, gpu))
            expected.append((call.label, kernel))
    chosen = choose(kernel_choice, lines)
    assert [(label, name) for (label, _), name in zip(expected, chosen)] == expected


def test_the_ring_with_the_bias_gradient_has_a_row_of_threads_for_it(kernel_choice):
    """A row of 32 x lanes threads more (blockDim.y one past the kernel rows), the same grid; at 7x7
    still three blocks an SM at the ring's 80 registers, as without. (The ring kernel with the tensor-core,
    window and walk kernels switched off: they take these filters before the ring.)"""
    for kernel, lanes in ((3, 2), (5, 1), (7, 1)):
        call = kernel_cases.Call("ring", 16, 96, 56, kernel, padding=kernel // 2, layout="cl")
        without, with_bias = (plan_report.Launch.parse(answer) for answer in plan_report.run_driver(
            kernel_choice, [query_line("bfloat16", pass_, call, H100,
                                       ["channels_last_walk_grad_weight", "channels_last_window_grad_weight",
                                        "channels_last_mma_grad_weight"])
                            for pass_ in ("grad-weight", "grad-weight+bias")],
            "--plans"))
        assert without.kernel == with_bias.kernel == kernel_cases.RING_GRAD_WEIGHT
        assert without.block == (32, kernel, lanes) and with_bias.block == (32, kernel + 1, lanes)
        if kernel == 7:
            assert without.blocks_per_sm(registers=80) == with_bias.blocks_per_sm(registers=80) == 3


@pytest.mark.parametrize("dtype", ["bfloat16", "half"])
def test_the_3x3_tensor_core_passes_take_the_instance_bounded_for_three_blocks_an_sm(kernel_choice, dtype):
    """v47: the tensor-core kernel's 3x3 one-tile instances, forward at stride 1 and 2 and backward-input,
    are bounded for three blocks an SM (80 registers) and their bands sized for as many; with
    channels_last_mma_three_blocks off, for two, as before (the bench's look-back: two-tile tasks at
    stride 1 where strips are wider than 16). 5x5 and 7x7 keep two, and so does a 3x3 pass whose
    three-block grid would not fill the GPU once or whose blocks the SM's shared memory holds two of."""
    def plans(call, pass_, disabled=(), gpu=H100):
        answer, = plan_report.run_driver(kernel_choice, [query_line(dtype, pass_, call, gpu, disabled)], "--plans")
        return plan_report.Launch.parse(answer)

    mobilenet = kernel_cases.Call("mobilenet", 64, 144, (56, 56), (3, 3), padding=(1, 1), layout="cl")
    mobilenet_s2 = kernel_cases.Call("mobilenet", 64, 144, (56, 56), (3, 3), (2, 2), (1, 1), layout="cl")
    for call, pass_ in ((mobilenet, "forward"), (mobilenet, "backward-input"), (mobilenet_s2, "forward")):
        three, two = plans(call, pass_), plans(call, pass_, ("channels_last_mma_three_blocks",))
        direction = "true" if pass_ == "backward-input" else "false"
        assert three.kernel == two.kernel == kernel_cases.CHANNELS_LAST_MMA, (call, pass_)
        stride = str(call.stride[0])
        two_tiles = "2" if stride == "1" else "1"  # 56 columns a strip
        assert (three.args, two.args) == ((direction, "3", stride, "1", "true"),
                                          (direction, "3", stride, two_tiles, "false")), (call, pass_)
        assert three.block == two.block and three.shared_bytes == two.shared_bytes
        # Bands for 3 x 132 blocks at once: at least four waves where two blocks an SM needed fewer bands
        # (the bands v47 cut; stream_band_waves cuts them for the fewest waves x steps since v56).
        three_bands = plans(call, pass_, ("stream_band_waves",))
        two_bands = plans(call, pass_, ("channels_last_mma_three_blocks", "stream_band_waves"))
        assert three_bands.blocks >= 4 * 3 * H100.sm_count > two_bands.blocks >= 4 * 2 * H100.sm_count, (call, pass_)
        assert three.blocks_per_sm(registers=80) == 3 and two.blocks_per_sm(registers=128) == 2
    for call in (kernel_cases.Call("efficientnet", 64, 240, (28, 28), (5, 5), padding=(2, 2), layout="cl"),
                 kernel_cases.Call("convnext", 64, 96, (56, 56), (7, 7), padding=(3, 3), layout="cl")):
        launch = plans(call, "forward")
        assert launch.kernel == kernel_cases.CHANNELS_LAST_MMA and launch.args[-1] == "false", call
    # 392 blocks in 7 bands where an H100 holds 396 at three an SM (264 at two): two blocks an SM
    small = plans(kernel_cases.Call("small", 2, 256, (112, 112), (3, 3), padding=(1, 1), layout="cl"), "forward")
    assert small.kernel == kernel_cases.CHANNELS_LAST_MMA and small.args == ("false", "3", "1", "1", "false")
    assert 2 * H100.sm_count <= small.blocks < 3 * H100.sm_count
    # an RTX 4090's 100 KB of shared memory an SM holds two of 144@56's 47 KB blocks
    ada = plans(mobilenet, "forward", gpu=Gpu(128, "sm_89"))
    assert ada.kernel == kernel_cases.CHANNELS_LAST_MMA and ada.args == ("false", "3", "1", "2", "false")


@pytest.mark.parametrize("dtype", ["bfloat16", "half", "float"])
def test_the_channels_last_register_tiles_take_the_instance_bounded_for_three_blocks_an_sm(kernel_choice, dtype):
    """v48: the channels_last register tiles of 7x7 planes (MobileNetV2 960@7, EfficientNet-B0 1152@7 k5),
    in the half types at 3x3 and 5x5, run the instance bounded for three blocks of 256 threads an SM
    (80 registers: six of their 112-thread blocks, where the two-block instance's 89-108 allowed four
    or five); with channels_last_register_tiled_three_blocks off, or in float, or at 7x7, the other."""
    def plan(call, pass_, disabled=()):
        return planned(kernel_choice, dtype, pass_, call, disabled=disabled)

    half = dtype != "float"
    for call in (kernel_cases.Call("mobilenet", 64, 960, (7, 7), (3, 3), padding=(1, 1), layout="cl"),
                 kernel_cases.Call("efficientnet", 64, 1152, (7, 7), (5, 5), padding=(2, 2), layout="cl")):
        for pass_ in ("forward", "backward-input"):
            on, off = plan(call, pass_), plan(call, pass_, ("channels_last_register_tiled_three_blocks",))
            direction = "true" if pass_ == "backward-input" else "false"
            filter_ = (str(call.kernel[0]), "1")
            assert on.kernel == off.kernel == kernel_cases.CHANNELS_LAST_REGISTER_TILED, (call, pass_)
            assert on.args == ("int", direction, *filter_, "true" if half else "false"), (call, pass_)
            assert off.args == ("int", direction, *filter_, "false"), (call, pass_)
            assert (on.grid, on.block, on.shared_bytes) == (off.grid, off.block, off.shared_bytes)
            if half:
                assert on.blocks_per_sm(registers=80) == 6 and off.blocks_per_sm(registers=89) <= 5
    convnext = plan(kernel_cases.Call("convnext", 64, 768, (7, 7), (7, 7), padding=(3, 3), layout="cl"), "forward")
    assert convnext.kernel == kernel_cases.CHANNELS_LAST_REGISTER_TILED and convnext.args[-1] == "false"


def test_the_plane_stream_reads_vector_rows_where_their_reads_take_fewer_wavefronts(kernel_choice):
    """v50: the plane stream's fp32 passes of the bench's small planes read vector rows (src rows at a
    pitch of whole 16-byte vectors, read as vectors) where src and dst rows are even, the padding across is
    K // 2 and a window row's reads take fewer shared-memory wavefronts than from flat planes: 14x14
    (at a pitch of 20, conflict-free) and 28x28 at stride 1, 28x28 at stride 2. Flat planes at 7x7 (odd
    rows), at 14x14 stride 2 (odd dst rows, 7) and everywhere with plane_stream_vector_rows off, in the
    same grid and block."""
    def plan(call, pass_, disabled=()):
        return planned(kernel_choice, "float", pass_, call, disabled=disabled)

    def shared_bytes(planes, size, stride, pitch):
        return planes * (2 * size * pitch + (size // stride) ** 2) * 4

    rows = [  # (channels, size, kernel, stride, planes a chunk, the pitch of vector rows or None)
        (576, 14, 3, 1, 16, 20), (672, 14, 5, 1, 16, 20), (384, 14, 7, 1, 16, 20), (192, 28, 3, 1, 5, 28),
        (192, 28, 7, 1, 5, 28), (240, 28, 3, 2, 5, 28), (576, 14, 3, 2, 20, None), (672, 14, 5, 2, 20, None),
        (960, 7, 3, 1, 64, None), (768, 7, 7, 1, 64, None)]
    for channels, size, kernel, stride, planes, pitch in rows:
        call = kernel_cases.Call("bench", 64, channels, (size, size), (kernel, kernel), (stride, stride),
                                 (kernel // 2, kernel // 2))
        for pass_ in ("forward", "backward-input") if stride == 1 else ("forward",):
            on, off = plan(call, pass_), plan(call, pass_, ("plane_stream_vector_rows",))
            filter_ = (str(kernel), str(stride))
            direction = "true" if pass_ == "backward-input" else "false"
            assert on.kernel == off.kernel == kernel_cases.PLANE_STREAM, (call, pass_)
            assert on.args == (direction, *filter_, "true" if pitch else "false"), (call, pass_)
            assert off.args == (direction, *filter_, "false"), (call, pass_)
            assert (on.grid, on.block) == (off.grid, off.block), (call, pass_)
            assert on.shared_bytes == shared_bytes(planes, size, stride, pitch or size), (call, pass_)
            assert off.shared_bytes == shared_bytes(planes, size, stride, size), (call, pass_)


def test_the_plane_streamed_weight_gradient_groups_channels_and_fills_one_wave(kernel_choice):
    """v51: the fp32 NCHW weight gradients of the bench's small planes (batch 64) take the plane stream's
    weight gradient on every GPU the plans know: groups of as many channels as a block of 256 threads has
    tiles for, fewer where two entries' planes would pass the shared memory a block may take (past 48 KB:
    the opt-in share, 56 KB on an sm_90 SM), a whole number of 16-byte vectors of planes; vector rows where
    they take fewer wavefronts a plane (14x14 at a pitch of 20 in groups of 15, where flat planes take 16;
    28x28 at 28), flat planes at 7x7 (odd rows) and everywhere with plane_stream_vector_rows off; and no
    more batch slices than the GPU holds beside the groups in one wave (its registers' bound counted), and
    no fewer than half of them (slices of whole entries, each but the last as many)."""
    def plan(call, gpu, disabled=()):
        return planned(kernel_choice, "float", "grad-weight", call, gpu, disabled)

    def two_entries(planes, size, stride, pitch):  # bytes: input rows at the pitch, grad_output flat
        return 2 * planes * (size * pitch + (size // stride) ** 2) * 4

    rows = [  # (channels, size, kernel, stride; on an H100: channels a group, vector rows, their pitch; registers)
        (576, 14, 3, 1, 15, True, 20, 80), (672, 14, 5, 1, 15, True, 20, 80), (384, 14, 7, 1, 15, True, 20, 128),
        (192, 28, 3, 1, 4, True, 28, 80), (192, 28, 7, 1, 4, True, 28, 128), (960, 7, 3, 1, 64, False, 7, 80),
        (768, 7, 7, 1, 64, False, 7, 128)]
    for channels, size, kernel, stride, planes, vector_rows, pitch, registers in rows:
        call = kernel_cases.Call("bench", 64, channels, (size, size), (kernel, kernel), (stride, stride),
                                 (kernel // 2, kernel // 2))
        on, off = plan(call, H100), plan(call, H100, ("plane_stream_vector_rows",))
        assert on.kernel == off.kernel == kernel_cases.PLANE_STREAM_GRAD_WEIGHT, call
        assert on.args == (str(kernel), str(stride), "true" if vector_rows else "false"), call
        assert off.args == (str(kernel), str(stride), "false"), call
        tiles = (-(-size // 4)) ** 2
        assert on.block == (-(-planes * tiles // 32) * 32, 1, 1) and on.grid[0] == -(-channels // planes), call
        assert on.shared_bytes == max(two_entries(planes, size, stride, pitch), 4 * (on.block[0] + 1)), call
        flat_planes = 256 // tiles if two_entries(256 // tiles, size, stride, size) <= 56 * 1024 else planes
        assert off.grid[0] == -(-channels // flat_planes) and off.shared_bytes == two_entries(flat_planes, size, stride, size)
        for gpu in GPUS:
            launch = plan(call, gpu)
            assert launch.kernel == kernel_cases.PLANE_STREAM_GRAD_WEIGHT, (call, gpu)
            resident = launch.blocks_per_sm(gpu.sm, registers) * gpu.sm_count
            groups, slices = launch.grid[:2]
            fitting = min(64, resident // groups)  # the slices one wave holds beside the groups
            assert (launch.blocks <= resident or slices == 1) and 2 * slices >= fitting, (call, gpu, launch)


def test_the_plane_stream_takes_large_planes_where_each_block_walks_two_chunks(kernel_choice):
    """v54: fp32 NCHW planes past 32x32 up to 64x64 floats (16 KB, a chunk's bytes) at 3x3 and 5x5 stride 1
    take the plane stream in all three passes (MobileNetV2's 144@56 at batch 64 on an H100: a plane a chunk,
    224 threads, three blocks an SM by their 80 registers, 396 blocks walking 9,216 chunks; its weight
    gradient in groups of one channel, two entries of both tensors in 49 KB, two batch slices of 32) where
    every block walks two chunks or more (the weight gradient: two entries a slice); the register tiles for
    the forward at batch 5 (720 chunks, where 396 blocks would walk one or two), for every pass at batch 1,
    at 7x7 and stride 2 (whose plane-stream instances hold two blocks an SM), past 64x64, and with
    plane_stream_large_planes off. Planes of 32x32 or less keep the plane stream with the path off."""
    def plan(call, pass_, disabled=()):
        return planned(kernel_choice, "float", pass_, call, disabled=disabled)

    def bench(batch, channels, size, kernel, stride=1, width=None):
        return kernel_cases.Call("bench", batch, channels, (size, width or size), (kernel, kernel), (stride, stride),
                                 (kernel // 2, kernel // 2))

    k = kernel_cases
    mobilenet = bench(64, 144, 56, 3)
    for pass_ in ("forward", "backward-input"):
        launch = plan(mobilenet, pass_)
        assert launch.kernel == k.PLANE_STREAM and launch.grid == (396, 1, 1) and launch.block == (224, 1, 1), launch
        assert launch.shared_bytes == (2 * 56 * 56 + 56 * 56) * 4 and launch.blocks_per_sm(registers=80) == 3, launch
        assert plan(mobilenet, pass_, ("plane_stream_large_planes",)).kernel == k.REGISTER_TILED
    grad_weight = plan(mobilenet, "grad-weight")
    assert grad_weight.kernel == k.PLANE_STREAM_GRAD_WEIGHT, grad_weight
    assert grad_weight.grid == (144, 2, 1) and grad_weight.shared_bytes == 2 * (56 * 56 + 56 * 56) * 4, grad_weight
    assert plan(mobilenet, "grad-weight", ("plane_stream_large_planes",)).kernel == k.REGISTER_TILED_GRAD_WEIGHT
    assert plan(bench(64, 72, 56, 5), "forward").kernel == k.PLANE_STREAM
    assert plan(bench(64, 16, 64, 3), "forward").shared_bytes == 48 * 1024  # the largest plane: 256 tiles
    for call in (bench(6, 144, 56, 3), bench(64, 144, 40, 5, width=44)):
        assert plan(call, "forward").kernel == k.PLANE_STREAM, call
    # batch 5: the forward's 720 chunks leave some of its 396 blocks one; the weight gradient's 144 groups
    # in two slices walk 3 and 2 entries
    assert plan(bench(5, 144, 56, 3), "forward").kernel == k.REGISTER_TILED
    assert plan(bench(5, 144, 56, 3), "grad-weight").kernel == k.PLANE_STREAM_GRAD_WEIGHT
    for call in (bench(64, 96, 56, 7), bench(64, 144, 56, 3, stride=2), bench(64, 144, 64, 3, width=66),
                 bench(1, 144, 56, 3)):
        assert plan(call, "forward").kernel in (k.REGISTER_TILED, k.PIXEL), call
        assert plan(call, "grad-weight").kernel == k.REGISTER_TILED_GRAD_WEIGHT, call
    for call in (bench(64, 576, 14, 3), bench(64, 192, 28, 3)):
        assert plan(call, "forward", ("plane_stream_large_planes",)).kernel == k.PLANE_STREAM, call


def test_each_kernel_path_switched_off_hands_its_passes_to_another_kernel(kernel_choice):
    failures = unmet(kernel_choice, kernel_cases.kernel_path_expectations)
    assert not failures, "\n".join(failures)


def test_there_is_a_kernel_path_case_for_every_path():
    assert sorted(row[0] for row in kernel_cases.KERNEL_PATH_ROWS) == sorted(plan_report.kernel_path_names())


CPP_TYPES = {plan_report.DRIVER_DTYPES[dtype]: cpp for dtype, cpp in plan_report.RESOURCE_DTYPES.items()}


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_grid_path_row_plans_another_grid_with_its_path_off(kernel_choice, dtype):
    """A path that only cuts a launch differently is tested on the GPU by its row run with the path on
    and off: the row must reach another grid with it off on the GPUs the tests run on (132 SMs), at
    the launch bound's registers and at any the compiler might give the instance."""
    same = []
    for path, call, _ in kernel_cases.kernel_path_cases(DTYPES[dtype]):
        if path not in kernel_cases.GRID_PATHS:
            continue
        pass_, instance = kernel_cases.GRID_PATHS[path]
        for registers in (None, 32, 48, 64, 72, 96, 128, 168, 255):
            instances = [] if instance is None or registers is None else sorted(
                {instance.format(dtype=CPP_TYPES[dtype], staged=staged) for staged in ("false", "true")})
            preamble = [plan_report.registers_line(name, registers) for name in instances]
            on, off = (plan_report.Launch.parse(plan_report.run_driver(
                kernel_choice, [query_line(dtype, pass_, call, H100, disabled)], "--plans", preamble=preamble)[0])
                for disabled in ((), (path,)))
            assert on.kernel == off.kernel, (path, on.kernel, off.kernel)
            if on.grid == off.grid:
                same.append(f"{path} at {registers or 'the bound'} registers: {on.kernel} {on.grid} either way")
    assert not same, "\n".join(same)
    assert {path for path, _, _ in kernel_cases.kernel_path_cases(DTYPES[dtype])} >= set(kernel_cases.GRID_PATHS)


def test_the_tensor_core_test_call_runs_the_tensor_core_kernel(kernel_choice):
    """test_depthwise2d.py's inf and NaN test of the tensor-core kernel needs its call to reach that
    kernel in both half types and passes, on any GPU the plans know; in float, and on a GPU
    before sm_80, the streamed kernel takes it."""
    call = kernel_cases.TENSOR_CORE_CALL
    lines = [query_line(dtype, pass_, call, gpu) for dtype in ("half", "bfloat16", "float")
             for pass_ in ("forward", "backward-input") for gpu in GPUS]
    chosen = choose(kernel_choice, lines)
    assert chosen == [kernel_cases.CHANNELS_LAST_MMA] * (4 * len(GPUS)) + [kernel_cases.CHANNELS_LAST_STREAM] * (2 * len(GPUS))
    before_sm80 = query_line("bfloat16", "forward", call, H100).replace(":90 -", ":75 -")
    assert before_sm80 != query_line("bfloat16", "forward", call, H100)
    assert choose(kernel_choice, [before_sm80]) == [kernel_cases.CHANNELS_LAST_STREAM]


def test_the_names_the_choice_gives_are_the_kernels_and_the_gpu_tests_use_them(kernel_names):
    names = kernel_names
    sources = "\n".join(path.read_text() for path in KERNEL_SOURCES)
    bounds = r"__launch_bounds__\((?:[^()]|\([^()]*\))*\)"  # one level of parentheses inside, as in sizeof(...)
    defined = set(re.findall(rf"__global__\s+void\s+(?:{bounds}\s+)?(\w+)\s*\(", sources))
    assert len(names) == 28 and names <= defined, names - defined
    assert defined - names == {"grad_weight_finish_kernel"}  # it follows every weight-gradient kernel
    constants = {value for key, value in vars(kernel_cases).items()
                 if key.isupper() and isinstance(value, str) and key != "BACKWARD"}  # BACKWARD names a pass
    assert constants <= names, constants - names


def test_the_row_kernels_keep_a_chunk_s_first_output_within_32_bits(kernel_choice):
    """A row's chunks start up to a chunk (16 values) before it and end as far past it, and a chunk's first
    output is a 32-bit value: a conv1d row within 32 values of 2^31 leaves the row kernels (kRowMaxWidth)
    though its tensors still take 32-bit indices. Mamba's filter (k = 4, padding 3) on one row of width w:
    the forward's and weight gradient's chunks span w + 3 outputs, both gradients' w + 3 inputs and padding."""
    widest = 2**31 - 1 - 32 - 3  # the input width whose output is kRowMaxWidth wide

    def chosen(width, pass_):
        line = plan_report.call_line("float", pass_, "nchw", 1, 1, (1, width), (1, 4), (1, 1), (0, 3), (1, 1))
        return choose(kernel_choice, [line])[0]

    k = kernel_cases
    assert [chosen(widest, p) for p in ("forward", "grad-weight", "backward")] == [k.ROW, k.ROW_GRAD_WEIGHT,
                                                                                  k.ROW_BACKWARD]
    wider = [chosen(widest + 1, p) for p in ("forward", "grad-weight", "backward")]
    assert wider[0] != k.ROW and wider[1] != k.ROW_GRAD_WEIGHT, wider
    assert k.ROW_BACKWARD not in wider[2].split("+") and k.ROW_GRAD_WEIGHT not in wider[2].split("+"), wider


def test_the_gpu_tests_call_near_2_31_elements_takes_the_direct_kernel(kernel_choice):
    """test_a_grid_stride_walk_near_2_31_elements_stays_inside (tests/gpu/test_depthwise2d.py) is
    there for the direct kernel's grid-stride counter: its call must stay the direct kernel's."""
    line = plan_report.call_line("float", "forward", "cl", 1, 1023, (1024, 1025), (3, 3), (1, 1), (1, 1), (1, 1), 2,
                                 0, 0, H100, ())
    assert choose(kernel_choice, [line]) == [kernel_cases.DIRECT]


def test_a_weight_of_2_31_elements_takes_a_kernel_with_64_bit_indices(kernel_choice):
    """1 x 240M x 1 x 1 with 3x3 filters: input and output fit 32-bit indices, the weight (2.16e9
    elements) does not, so no specialised kernel (32-bit only) may take it, where one would take a
    call with 1M channels (tests/gpu/test_depthwise2d.py runs the large one)."""
    def line(channels, pass_):
        return plan_report.call_line("float", pass_, "nchw", 1, channels, (1, 1), (3, 3), (1, 1), (1, 1), (1, 1), 1,
                                     0, 0, H100, ())
    general = {kernel_cases.DIRECT, kernel_cases.TILED_NCHW, "grad_weight_nchw_kernel"}
    small = choose(kernel_choice, [line(1 << 20, p) for p in ("forward", "backward-input", "grad-weight")])
    large = choose(kernel_choice, [line(240_000_000, p) for p in ("forward", "backward-input", "grad-weight")])
    assert not set(small) <= general, small
    assert set(large) <= general, large


def test_the_choice_of_a_call_depends_on_what_the_call_says(kernel_choice):
    """The checks above would pass vacuously if the driver ignored its input: the same shape takes
    the pixel kernel, the plane stream, the register-tiled kernel, the general tiled one or the
    direct one as its layout, alignment, filter, switches and GPU say."""
    call = kernel_cases.Call("probe", 2, 64, (20, 33), 3, padding=1, layout="cl")
    moved = kernel_cases.Call("probe", 2, 64, (20, 33), 3, padding=1, layout="cl", input_offset=1)
    nchw = kernel_cases.Call("probe", 2, 64, (20, 33), 3, padding=1)
    lines = [query_line("float", "forward", call, H100), query_line("float", "forward", moved, H100),
             query_line("float", "forward", call, H100, ["pixel"]),
             query_line("float", "forward", call, H100, ["pixel", "channels_last_register_tiled"]),
             query_line("float", "forward", nchw, H100), query_line("float", "forward", nchw, Gpu(1)),
             query_line("float", "forward", nchw, Gpu(1), ["plane_stream"]),
             query_line("bfloat16", "forward", nchw, Gpu(1)),
             query_line("float", "grad-weight", call, H100), query_line("float", "grad-weight", moved, H100)]
    assert choose(kernel_choice, lines) == [
        kernel_cases.PIXEL, kernel_cases.DIRECT, kernel_cases.CHANNELS_LAST_REGISTER_TILED,
        kernel_cases.CHANNELS_LAST_TILED, kernel_cases.PIXEL, kernel_cases.PLANE_STREAM, kernel_cases.REGISTER_TILED,
        kernel_cases.REGISTER_TILED, kernel_cases.WALK_GRAD_WEIGHT, kernel_cases.CHANNELS_LAST_GRAD_WEIGHT]


def test_the_plans_follow_the_gpus_sm_limits(kernel_choice):
    """DepthwiseConv2d.cu plans for the device's own SM (GpuLimits from cudaDeviceProp), not an
    H100's: on GPUs of as many SMs of another kind the same call gets the plan that kind holds."""
    def plan(call, pass_, gpu, dtype="float", disabled=()):
        return planned(kernel_choice, dtype, pass_, call, gpu, disabled)

    # 200,704 threads of the pixel kernel (NCHW 3x3, 8 blocks of 256 an SM by its register bound):
    # 128 SMs of sm_90 hold 262,144 at once, 128 of sm_89 (1536 threads an SM) 196,608.
    pixel_sized = kernel_cases.Call("probe", 1, 64, 56, 3, padding=1)
    assert plan(pixel_sized, "forward", Gpu(128, "sm_90")).kernel == kernel_cases.PIXEL
    assert plan(pixel_sized, "forward", Gpu(128, "sm_89")).kernel == kernel_cases.REGISTER_TILED
    # The window weight gradient's 7x7 blocks of 51 KB (bf16, 4 lanes, opted in past 48 KB): four an
    # sm_90 SM holds (228 KB), three an sm_80 one (164 KB), so that on an A100 fewer slices fill the
    # SMs; an sm_86 SM (100 KB) would hold one, where it holds two of 48 KB: there the blocks keep to
    # 3 lanes (39 KB). (With the tensor-core weight gradient off, which takes these passes before it.)
    window = kernel_cases.Call("probe", 64, 96, 56, 7, padding=3, layout="cl")
    h100, a100, ampere = (plan(window, "grad-weight", Gpu(108, arch), "bfloat16", ["channels_last_mma_grad_weight"])
                          for arch in ("sm_90", "sm_80", "sm_86"))
    assert h100.kernel == a100.kernel == ampere.kernel == kernel_cases.WINDOW_GRAD_WEIGHT
    assert h100.block == a100.block == (32, 4, 1) and h100.shared_bytes == a100.shared_bytes > 48 * 1024
    assert ampere.block == (32, 3, 1) and ampere.shared_bytes <= 48 * 1024
    assert [launch.blocks_per_sm(plan_report.SM_LIMITS[arch])
            for launch, arch in ((h100, "sm_90"), (a100, "sm_80"), (ampere, "sm_86"))] == [4, 3, 2]
    assert a100.grid[1] < h100.grid[1]


def test_a_gpu_is_one_the_plans_know():
    assert Gpu(58, "sm_89").driver_field() == "58:1536:24:65536:102400:1024:89"
    assert Gpu(82, "sm_86").code_arch == "sm_80" and H100.code_arch == "sm_90"
    with pytest.raises(plan_report.HarnessError, match="no SM limits for 'sm_75'"):
        Gpu(40, "sm_75")
    with pytest.raises(plan_report.HarnessError, match="at least one SM, not 0"):
        Gpu(0)


def test_the_sanitizer_subset_runs_every_kernel(kernel_choice, kernel_names):
    """tests/gpu/sanitizer_subset.py's calls (float32 and bfloat16, both layouts, all three passes and
    both gradients together;
    SANITIZER_CASES with the pixel path off, PIXEL_SANITIZER_CASES with every path on) reach every
    kernel the choice can give, on each GPU size: none escapes memcheck and racecheck."""
    runs = ((kernel_cases.SANITIZER_CASES, kernel_cases.PIXEL_OFF), (kernel_cases.PIXEL_SANITIZER_CASES, ()))
    for gpu in GPUS:
        lines = [query_line(dtype, pass_, kernel_cases.Call("sanitizer", n, c, (h, w), kernel, stride, padding, dilation,
                                                             m, layout), gpu, disabled)
                 for dtype in ("float", "bfloat16") for cases, disabled in runs
                 for n, c, m, h, w, kernel, stride, padding, dilation in cases
                 for layout in ("nchw", "cl") for pass_ in (*kernel_cases.PASSES, kernel_cases.BACKWARD)]
        missed = kernel_names - set(choose(kernel_choice, lines))
        assert not missed, f"{gpu}: the sanitizer subset never runs {sorted(missed)}"


def test_the_sanitizer_subset_launches_past_48_kb_of_shared_memory(kernel_choice):
    """One of its calls runs a kernel that opts in past 48 KB of dynamic shared memory (the window
    weight gradient's 7x7 blocks of 5 lanes in float, v42), so that compute-sanitizer checks such a launch."""
    lines = [query_line("float", "grad-weight", kernel_cases.Call("sanitizer", n, c, (h, w), kernel, stride, padding,
                                                                      dilation, m, "cl"), H100, kernel_cases.PIXEL_OFF)
             for n, c, m, h, w, kernel, stride, padding, dilation in kernel_cases.SANITIZER_CASES]
    launches = [plan_report.Launch.parse(answer) for answer in plan_report.run_driver(kernel_choice, lines, "--plans")]
    assert any(launch.shared_bytes > 48 * 1024 and launch.kernel == kernel_cases.WINDOW_GRAD_WEIGHT
               for launch in launches)


def test_the_window_weight_gradient_keeps_within_48_kb_with_its_opt_in_off(kernel_choice):
    """window_shared_opt_in off: ConvNeXt-T 96@56's bf16 blocks of 3 lanes (39 KB) as before v42, for
    the bench's look-back (`VARIANTS=ours-without-channels_last_mma_grad_weight,ours-without-channels_last_mma_grad_weight+window_shared_opt_in`:
    the tensor-core weight gradient takes these passes before the window kernel)."""
    call = kernel_cases.Call("convnext", 64, 96, 56, 7, padding=3, layout="cl")
    opted_in, within = (plan_report.Launch.parse(answer) for answer in plan_report.run_driver(
        kernel_choice, [query_line("bfloat16", "grad-weight", call, H100, disabled)
                        for disabled in (("channels_last_mma_grad_weight",),
                                         ("channels_last_mma_grad_weight", "window_shared_opt_in"))], "--plans"))
    assert opted_in.kernel == within.kernel == kernel_cases.WINDOW_GRAD_WEIGHT
    assert (opted_in.block, within.block) == ((32, 4, 1), (32, 3, 1))
    assert within.shared_bytes <= 48 * 1024 < opted_in.shared_bytes


@pytest.mark.parametrize("line, message", [
    ("float forward cl 2 64 20 33", "malformed call line"),
    (f"float sideways cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 {H100.driver_field()} -", "pass must be forward, backward-input, grad-weight, grad-weight+bias or backward"),
    (f"float forward nhwc 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 {H100.driver_field()} -", "layout must be nchw or cl"),
    (f"int forward cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 {H100.driver_field()} -", "dtype must be double, float, half or bfloat16"),
    (f"float forward cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 {H100.driver_field()} rows", "no kernel path is named rows"),
    (f"float forward cl 2 64 2 2 1 3 3 1 1 0 0 1 1 0 0 {H100.driver_field()} -", "the output would be empty"),
    ("float forward cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 132 -", "gpu must be SMs:threads:blocks:registers:shared:reserved"),
    ("float forward cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 132:2048:32:65536:233472:1024 -", "gpu must be SMs:threads"),
    ("float forward cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 0:2048:32:65536:233472:1024:90 -", "gpu limits must be positive"),
    ("float forward cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 132:2048:32:65536:233472:1024:0 -", "gpu limits must be positive"),
])
def test_the_driver_refuses_a_bad_line_by_name(kernel_choice, line, message):
    proc = subprocess.run([str(kernel_choice)], input=line + "\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout.startswith("error: ") and message in proc.stdout, proc.stdout


def tensor_core_layer(problem) -> bool:
    """Whether the tensor-core channels_last kernel is written for the layer's forward and
    stride-1 backward-input: bf16 and fp16, 3x3 and 5x5 at stride 1 or 2, 7x7 at stride 1."""
    layer = problem.layer
    return ELEMENT_BYTES[problem.dtype] == 2 and (layer.kernel in (3, 5) or (layer.kernel == 7 and layer.stride == 1))


def intended_kernels(problem, pass_: str) -> tuple[str, ...]:
    """The kernels written for each bench layer's pass: the conv1d row (NCHW) and column
    (channels_last) kernels for Mamba (both gradients together from row_backward_kernel on NCHW and
    column_backward_kernel on channels_last, which also takes the channels_last weight gradient alone),
    the large-filter kernels for RepLKNet, and the register
    tiles (the stride-2 kernels for backward-input at stride 2, the walk kernel (3x3), the tensor-core
    one (bf16 and fp16 5x5 and 7x7 at stride 1) or the window kernel for the channels_last weight
    gradient, the streamed kernel or the register-tiled one for the other channels_last
    passes, and the tensor-core one for those of bf16 and fp16, the plane stream for the other fp32
    NCHW passes of planes of 32x32 or less, the weight gradient's too, and the plane stream or the register
    tiles for those of 3x3 and 5x5 planes up to 64x64 at stride 1, by the GPU's residency) for the rest, or
    at batch 1 the pixel kernel for 3x3 and 5x5, and for 7x7 in channels_last."""
    layer, cl = problem.layer, problem.layout == "channels_last"
    k = kernel_cases
    if pass_ == plan_report.BOTH_GRADIENTS:  # bench_launches lists it where one kernel takes both gradients
        return ((k.COLUMN_BACKWARD if cl else k.ROW_BACKWARD),) if layer.conv1d else ()
    if layer.conv1d:
        return ({"grad-weight": k.COLUMN_BACKWARD if cl else k.ROW_GRAD_WEIGHT}.get(pass_, k.COLUMN if cl else k.ROW),)
    if layer.kernel > 7:
        return (k.LARGE_FILTER_GRAD_WEIGHT if pass_ == "grad-weight" else k.LARGE_FILTER,)
    float_planes = not cl and ELEMENT_BYTES[problem.dtype] == 4 and problem.batch > 1
    small_float_planes = float_planes and layer.length <= 32
    large_float_planes = float_planes and 32 < layer.length <= 64 and layer.kernel <= 5 and layer.stride == 1
    if pass_ == "grad-weight":
        if not cl:
            if large_float_planes:
                return (k.PLANE_STREAM_GRAD_WEIGHT, k.REGISTER_TILED_GRAD_WEIGHT)
            return (k.PLANE_STREAM_GRAD_WEIGHT if small_float_planes else k.REGISTER_TILED_GRAD_WEIGHT,)
        if layer.kernel == 3:
            return (k.WALK_GRAD_WEIGHT,)
        tensor_cores = ELEMENT_BYTES[problem.dtype] == 2 and layer.stride == 1
        return (k.MMA_GRAD_WEIGHT if tensor_cores else k.WINDOW_GRAD_WEIGHT,)
    if pass_ == "backward-input" and layer.stride == 2:
        return (k.STRIDE2_CHANNELS_LAST if cl else k.STRIDE2_NCHW,)
    tiles = (k.CHANNELS_LAST_STREAM, k.CHANNELS_LAST_REGISTER_TILED) if cl else (k.REGISTER_TILED,)
    if small_float_planes:
        tiles = (k.PLANE_STREAM,)
    if large_float_planes:
        tiles = (k.PLANE_STREAM, k.REGISTER_TILED)
    if cl and tensor_core_layer(problem):
        tiles = (k.CHANNELS_LAST_MMA, *tiles)
    pixel = problem.batch == 1 and (layer.kernel <= 5 or cl)
    return (k.PIXEL, *tiles) if pixel else tiles


def test_every_bench_layer_runs_the_kernel_written_for_it(bench_launches):
    """Every pass `make bench` times, in every configuration and batch, is taken by a kernel
    written for its layer, never a general one: a planner change that sends a bench layer back to
    the general kernels (a tile outgrowing shared memory, a use threshold) fails here, before GPU
    time is spent timing it."""
    failures = [f"{p.layer.set} {p.layer.name} batch {p.batch} {p.dtype} {p.layout}, {gpu}: {pass_} runs "
                f"{launch.kernel}, not one of {intended_kernels(p, pass_)}"
                for gpu, launches in bench_launches.items() for p, pass_, launch in launches
                if launch.kernel not in intended_kernels(p, pass_)]
    assert sum(map(len, bench_launches.values())) > 1000
    assert not failures, "\n".join(failures)


def test_the_bench_steps_take_both_conv1d_gradients_from_one_kernel(kernel_choice):
    """The backward of every training step `make bench` times asks for both gradients at once: on
    Mamba's conv1d rows they come from one kernel on every GPU the plans know (row_backward_kernel in
    NCHW, column_backward_kernel in channels_last), and on every other layer from the two passes' own
    kernels (the 2D layers' tiles)."""
    from build_scripts.bench.layers import problems

    steps = [p for p in problems() if p.passes != ("forward",)]
    failures = []
    for gpu in GPUS:
        chosen = choose(kernel_choice, [plan_report.bench_call_line(p, kernel_cases.BACKWARD, gpu) for p in steps])
        for p, kernels in zip(steps, chosen):
            fused = (kernel_cases.COLUMN_BACKWARD if p.layout == "channels_last" else kernel_cases.ROW_BACKWARD
                     if p.layer.conv1d else None)
            if (kernels == fused) != p.layer.conv1d:
                failures.append(f"{p.layer.set} {p.layer.name} batch {p.batch} {p.dtype} {p.layout}, {gpu}: {kernels}")
    assert {p.layout for p in steps if p.layer.conv1d} == {"contiguous", "channels_last"}
    assert not failures, "\n".join(failures)


def test_the_streamed_kernels_take_the_large_channels_last_planes_at_batch_64(bench_launches):
    """At batch 64 the channels_last forward and stride-1 backward-input of every 3x3/5x5/7x7 bench
    layer with 28 output rows or more stream bands of rows (smaller planes: where the bands fill the
    GPU), through the tensor-core kernel in bf16 and fp16, else the streamed
    one. Batch 1's grids are too small to fill the GPU with bands: its 3x3 and 5x5 forwards take
    the pixel kernel, which an H100 SXM (132 SMs) holds at once for every such layer (a smaller GPU
    may leave the largest to the tiles), and its 7x7 ones the pixel kernel too where the GPU holds a
    thread a pixel and channel vector at its bound of one block of 256 an SM (ConvNeXt-T's 192@28 and
    smaller in bf16 and fp16 on an H100, 384@14 and smaller in float), else the register-tiled
    kernel's one-step blocks."""
    k = kernel_cases
    for gpu, launches in bench_launches.items():
        for p, pass_, launch in launches:
            layer = p.layer
            if (p.layout != "channels_last" or layer.conv1d or layer.kernel > 7 or pass_ == "grad-weight"
                    or (pass_ == "backward-input" and layer.stride == 2)):
                continue
            if p.batch == 1 and layer.kernel <= 5:
                allowed = (k.PIXEL,) if gpu == H100 else (k.PIXEL, k.CHANNELS_LAST_REGISTER_TILED)
                assert launch.kernel in allowed, (gpu, layer.name, p.dtype, pass_, launch)
            elif p.batch == 1:
                vector = 16 // ELEMENT_BYTES[p.dtype]
                held = layer.channels // vector * layer.output_length() ** 2 <= gpu.sm_count * 256
                assert launch.kernel == (k.PIXEL if held else k.CHANNELS_LAST_REGISTER_TILED), \
                    (gpu, layer.name, p.dtype, pass_, launch)
            elif layer.output_length() >= 28:
                streamed = k.CHANNELS_LAST_MMA if tensor_core_layer(p) else k.CHANNELS_LAST_STREAM
                assert launch.kernel == streamed, (gpu, layer.name, p.dtype, pass_, launch)


def test_every_bench_launch_is_one_a_gpu_accepts_and_fills(bench_launches):
    """The launch shapes the plan report shows (DepthwiseConv2dLaunch.cuh's, as the .cu launches
    them) for every bench pass on each GPU size: within the kernels' launch bound of 256 threads,
    48 KB of dynamic shared memory and the grid's limits, and at least one block an SM can hold.
    Past 48 KB only the window weight gradient and the plane-streamed one, which opt in, and only as far
    as an SM still holds as many of their blocks as of 48 KB ones."""
    def shared_memory_fits(launch, sm):
        if launch.shared_bytes <= 48 * 1024:
            return True
        blocks_of = lambda shared_bytes: sm.shared_bytes // (shared_bytes + sm.reserved_per_block)  # noqa: E731
        return (launch.kernel in (kernel_cases.WINDOW_GRAD_WEIGHT, kernel_cases.PLANE_STREAM_GRAD_WEIGHT)
                and blocks_of(launch.shared_bytes) >= blocks_of(48 * 1024) >= 1)

    for gpu, launches in bench_launches.items():
        # every pass, and the backward of Mamba's 16 steps, whose gradients come from one kernel
        assert len(launches) == 372 + 16
        assert sum(pass_ == plan_report.BOTH_GRADIENTS for _, pass_, _ in launches) == 16
        refused = [(p.layer.name, p.batch, p.dtype, pass_, launch) for p, pass_, launch in launches
                   if not (launch.threads <= 256 and shared_memory_fits(launch, gpu.sm) and launch.blocks_per_sm(gpu.sm) >= 1
                           and 1 <= launch.grid[0] < 2**31 and 1 <= launch.grid[1] <= 65535
                           and 1 <= launch.grid[2] <= 65535)]
        assert not refused, refused
        report = plan_report.markdown(launches, gpu)
        assert report.count("\n| ") == 372 + 16 + 2  # a row a pass, after the header and its rule


def test_grids_the_gpu_holds_at_once_get_thread_groups(bench_launches):
    """Blocks get thread groups along z (RegisterTile::groups) only where that adds no wave: the
    register tiles' helpers that stage (batch 1), the large filter's groups that share out the
    window's rows (small planes, where one group was a warp a block)."""
    def launch_of(layer_name, batch, dtype, pass_):
        return next(launch for p, pass__, launch in bench_launches[H100]
                    if (p.layer.name, p.batch, p.dtype, pass__) == (layer_name, batch, dtype, pass_))

    def grouped(p, launch):
        """Whether the tiles down the plane (grid.y) have more rows of threads than the plane has
        rows of kBlockRows = 4 outputs: by rows a tile, one tile's worth short at most, else
        groups x by."""
        plane_rows = -(-p.layer.output_length() // 4)
        return launch.block[2] * launch.grid[1] >= plane_rows + launch.grid[1]

    register_tiled = [(gpu, p, launch) for gpu, launches in bench_launches.items() for p, pass_, launch in launches
                      if launch.kernel == "register_tiled_nchw_kernel"]
    assert len(register_tiled) > 100
    for gpu, p, launch in register_tiled:
        if p.batch == 64:  # grids of several waves
            assert not grouped(p, launch), (gpu, p, launch)
        else:
            assert launch.threads >= 224 and launch.blocks <= 3 * gpu.sm_count, (gpu, p, launch)  # were 16 to 224 threads
    # (The batch-1 layers whose threads the GPU holds at once take the pixel kernel instead.)
    assert sum(grouped(p, launch) for _, p, launch in register_tiled) >= 25
    # EfficientNet-B0's 240@28 k5: a tile of 8 x 7 threads (28 x 28 outputs), staged by 4 groups;
    # at batch 64 one group.
    assert launch_of("240@28 k5", 1, "float32", "forward").block == (1, 8, 28)
    assert launch_of("240@28 k5", 64, "float32", "forward").block[2] <= 7
    # 512@14 k27 at batch 64: two 14x14 planes of 4 x 4 threads a block, ten blocks an SM by shared
    # memory; two groups (15 window rows each) make 20 warps an SM of the 10 at one (five would make 25:
    # not a quarter more than two's).
    large = launch_of("512@14 k27", 64, "float32", "forward")
    assert large.block == (2, 4, 8) and large.shared_bytes < 24 * 1024
    assert large.blocks_per_sm(registers=80) * large.threads // 32 == 20
    # 128@56 k31's blocks of 196 threads already hold 42 warps an SM: groups would add under a quarter.
    assert launch_of("128@56 k31", 64, "float32", "forward").block == (1, 14, 14)


def test_conv1d_row_chunks_are_32_bytes_of_output(kernel_choice):
    """The row kernels take 16 outputs a chunk in bf16/fp16 and 8 in float (v22: 32 new bytes a
    thread in flight), and the plans count chunks as the kernels do: Mamba's forward writes rows of
    2051 outputs, 130 chunks in bf16 (a row may start anywhere in its first chunk) and 258 in float,
    and its backward-input rows of 2048. The forward and backward-input kernel's warps stream spans
    of 32 x 4 chunks, two spans a warp (v45); the weight gradient slices a channel's chunks into the
    fewest slices whose threads take 4 chunks at most (v46)."""
    def launch(dtype, pass_):
        line = plan_report.call_line(dtype, pass_, "nchw", 8, 1536, (1, 2048), (1, 4), (1, 1), (0, 3), (1, 1))
        return plan_report.Launch.parse(plan_report.run_driver(kernel_choice, [line], "--plans")[0])

    def chunks(width, outputs):
        return (width + 2 * (outputs - 1)) // outputs

    def blocks(width, outputs):
        spans = -(-8 * 1536 * chunks(width, outputs) // (32 * 4))
        warps_of_two_spans = -(-spans // 2)
        return (-(-warps_of_two_spans // 8), 1, 1)  # more than 4 blocks an SM of 132: walk_blocks' 2 a thread

    for pass_, width in (("forward", 2051), ("backward-input", 2048)):
        assert launch("float", pass_).kernel == launch("bfloat16", pass_).kernel == "row_kernel"
        assert launch("float", pass_).grid == blocks(width, 8)
        assert launch("bfloat16", pass_).grid == launch("half", pass_).grid == blocks(width, 16)
    assert blocks(2051, 16) == (780, 1, 1) and blocks(2048, 8) == (1542, 1, 1)
    assert chunks(2051, 16) == 130 and chunks(2051, 8) == 258
    assert launch("float", "grad-weight").grid == (1536, 3, 1)  # 8 x 258 chunks: 4 a thread at most, 2.7
    assert launch("bfloat16", "grad-weight").grid == (1536, 2, 1)  # 8 x 130: 2 a thread (and a few 3)


def test_small_planes_stage_grad_output_for_the_register_tiled_weight_gradient(kernel_choice):
    """v34: in NCHW at batch 64, rows of 14 (no row access) take the instance that copies grad_output
    into shared memory, and its planes' room on top of the tiles; rows of 56 (row access), a 56x56
    plane 4 bytes off (no row access, one tile, but one plane a block), a 112x112 plane 4 bytes off
    (4 tiles down the plane), 14x14 at batch 4 (4 planes a block) and the path switched off do not. (The
    plane-streamed weight gradient, which takes the float passes of small planes first, switched off.)"""
    def launch(size, grad_output_offset=0, disabled=(), batch=64):
        line = plan_report.call_line("float", "grad-weight", "nchw", batch, 384, size, (3, 3), (1, 1), (1, 1), (1, 1),
                                     grad_output_offset=grad_output_offset,
                                     disabled=("plane_stream_grad_weight", *disabled))
        return plan_report.Launch.parse(plan_report.run_driver(kernel_choice, [line], "--plans")[0])

    staged, unstaged = launch((14, 14)), launch((14, 14), disabled=("staged_grad_output",))
    assert staged.kernel == unstaged.kernel == "grad_weight_register_tiled_kernel"
    assert staged.bools == ("true",) and unstaged.bools == ("false",)
    assert staged.block == unstaged.block == (16, 4, 4)
    # 16 planes of 196 values at a stride of at least 196: 12.25 KB or more on top of the tiles
    assert 16 * 196 * 4 <= staged.shared_bytes - unstaged.shared_bytes < 16 * (196 + 32) * 4
    assert launch((56, 56)).bools == launch((56, 56), grad_output_offset=1).bools == ("false",)
    assert launch((112, 112), grad_output_offset=1).bools == launch((14, 14), batch=4).bools == ("false",)
    assert launch((14, 14), batch=8).bools == ("true",)


def test_the_plan_report_counts_blocks_and_waves():
    launch = plan_report.Launch.parse("register_tiled_nchw_kernel grid=288,4,1 block=1,32,7 shared=15872")
    assert (launch.blocks, launch.threads) == (1152, 224)
    # 7 warps a block: 9 blocks in 64 warps; 228 KB / (15.5 + 1) KB: 13 by shared memory.
    assert launch.blocks_per_sm() == 9 and launch.waves(Gpu(128)) == 1.0
    assert plan_report.Launch.parse("k grid=1,1,1 block=256,1,1 shared=0").blocks_per_sm() == 8
    assert plan_report.Launch.parse("k grid=1,1,1 block=28,1,1 shared=0").blocks_per_sm() == 32
    assert plan_report.Launch.parse("k grid=1,1,1 block=112,1,1 shared=47744").blocks_per_sm() == 4
    # Registers, 256 a warp at a time: v6's 7x7 weight gradient (151 -> 152 a thread, 8 warps) held one
    # block an SM where threads and shared memory alone allow four; the ring's 7 warps at 80, three.
    v6 = plan_report.Launch.parse("k grid=3,351,1 block=16,16,1 shared=49152")
    assert (v6.blocks_per_sm(), v6.blocks_per_sm(registers=151)) == (4, 1)
    ring = plan_report.Launch.parse("k grid=3,128,1 block=32,7,1 shared=36864")
    assert ring.blocks_per_sm(registers=80) == 3 and ring.waves(Gpu(128), registers=80) == 1.0


def test_the_plan_report_takes_the_registers_of_the_passes_instance():
    """The compiler's report names instances (dtype, index type, direction, filter, stride); a
    pass takes its dtype's 32-bit instance of its direction compiled for its filter and stride."""
    from build_scripts.bench.layers import Layer, Problem
    from build_scripts.resource_report import KernelResources

    def row(name, registers, arch="sm_90"):
        return KernelResources(arch, "_Z" + name, registers, 0, 0, 0, 0, name=name)

    resources = [row("channels_last_register_tiled_kernel<BFloat16, int, false, 3, 1>", 90),
                 row("channels_last_register_tiled_kernel<BFloat16, int, true, 3, 1>", 89),
                 row("channels_last_register_tiled_kernel<BFloat16, int, false, 7, 1>", 107),
                 row("channels_last_register_tiled_kernel<BFloat16, long, false, 3, 1>", 120),
                 row("channels_last_register_tiled_kernel<float, int, false, 3, 1>", 72),
                 row("channels_last_register_tiled_kernel<BFloat16, int, false, 3, 1>", 85, "sm_80"),
                 row("stride2_grad_input_channels_last_kernel<BFloat16, int, 3, 0>", 65),
                 row("stride2_grad_input_channels_last_kernel<BFloat16, int, 3, 1>", 76),
                 row("pixel_kernel<BFloat16, false, 3, 1, false>", 30),
                 row("pixel_kernel<BFloat16, false, 3, 1, true>", 40),
                 row("pixel_kernel<BFloat16, true, 3, 1, true>", 41),
                 row("grad_weight_register_tiled_kernel<BFloat16, int, 3, 1, false>", 72),
                 row("grad_weight_register_tiled_kernel<BFloat16, int, 3, 1, true>", 80),
                 row("channels_last_mma_kernel<BFloat16, false, 3, 1, 1, false>", 91),
                 row("channels_last_mma_kernel<BFloat16, false, 3, 1, 2, false>", 115),
                 row("channels_last_mma_kernel<BFloat16, false, 3, 1, 1, true>", 80)]
    layer = Layer("MobileNetV2", "144@56", 144, 56, kernel=3)
    problem = Problem(layer, 64, "bfloat16", "channels_last", plan_report.PASSES)

    def registers(pass_, kernel, of=problem, bools=None, args=None):
        return plan_report.instance_registers(resources, "sm_90", of, pass_, kernel, bools, args)

    assert registers("forward", "channels_last_register_tiled_kernel") == 90
    assert registers("backward-input", "channels_last_register_tiled_kernel") == 89
    strided = Problem(Layer("MobileNetV2", "144@56 s2", 144, 56, kernel=3, stride=2), 64, "bfloat16", "channels_last",
                      plan_report.PASSES)
    assert registers("backward-input", "stride2_grad_input_channels_last_kernel", strided) == 76  # padding 1: parity 1
    assert registers("forward", "row_kernel") is None
    # the pixel kernel's second bool is its layout: a channels_last pass takes the channels_last instance
    assert registers("forward", "pixel_kernel") == 40 and registers("backward-input", "pixel_kernel") == 41
    nchw = Problem(layer, 1, "bfloat16", "contiguous", ("forward",))
    assert registers("forward", "pixel_kernel", nchw) == 30
    # the register-tiled weight gradient's bool is its plan's (grad_output staged), which the driver prints
    assert registers("grad-weight", "grad_weight_register_tiled_kernel", nchw, ("true",)) == 80
    assert registers("grad-weight", "grad_weight_register_tiled_kernel", nchw, ("false",)) == 72
    assert plan_report.Launch.parse("k grid=1,1,1 block=16,4,4 shared=0 bools=true").bools == ("true",)
    # the tensor-core kernel's tiles and bound are its plan's too, given as all its arguments after the dtype
    launch = plan_report.Launch.parse(
        "channels_last_mma_kernel grid=4,5,64 block=4,64,1 shared=0 args=false,3,1,2,false")
    assert launch.args == ("false", "3", "1", "2", "false") and launch.bools is None
    assert registers("forward", launch.kernel, args=launch.args) == 115
    assert registers("forward", launch.kernel, args=("false", "3", "1", "1", "true")) == 80
    assert registers("forward", launch.kernel, args=("true", "3", "1", "1", "true")) is None
    assert registers("forward", "channels_last_register_tiled_kernel", args=("int", "false", "3", "1", "false")) is None


@pytest.mark.parametrize("args, message", [
    (["--sms", "0"], "a GPU has at least one SM, not 0"),
    (["--sets", "Nope"], "unknown layer set(s) ['Nope']"),
    (["--arch", "sm_75"], "no SM limits for 'sm_75': one of sm_80, sm_86, sm_89, sm_90"),
])
def test_plan_report_refuses_a_bad_argument_by_name(args, message):
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "plan-report", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_problem_checked_at_a_smaller_batch_takes_the_kernels_of_its_own_batch(kernel_choice):
    """make bench checks the largest filters' batch-64 problems at a smaller batch (their float64
    reference is too long otherwise): the check must still reach the kernels the timing runs."""
    from build_scripts.bench.layers import SETS, checked_problem, problems
    from build_scripts.bench.schema import COVERAGE_CONFIGS_2D
    every = problems(list(SETS)) + problems(list(SETS), COVERAGE_CONFIGS_2D)
    smaller = [(problem, checked_problem(problem)) for problem in every if checked_problem(problem).batch < problem.batch]
    assert {problem.layer.name for problem, _ in smaller} == {"128@56 k31", "256@28 k29", "512@14 k27"}
    keys, lines = [], []
    for gpu in GPUS:
        for problem, checked in smaller:
            for pass_ in plan_report.problem_passes(problem):
                keys.append(f"{gpu} {problem.layer.name} b{problem.batch} (checked at b{checked.batch}) "
                            f"{problem.dtype} {problem.layout} {pass_}")
                lines += [plan_report.bench_call_line(problem, pass_, gpu), plan_report.bench_call_line(checked, pass_, gpu)]
    chosen = choose(kernel_choice, lines)
    timed, checked = chosen[0::2], chosen[1::2]
    assert [f"{k}: {t} timed, {c} checked" for k, t, c in zip(keys, timed, checked) if t != c] == []


def stream_steps(launch, row_steps: int, strips: int, resident: int) -> tuple[int, int]:
    """(waves, steps) of a streamed launch of `strips` blocks a band: its waves over `resident` blocks,
    and waves x (a band's steps + the band's start, kStreamBandStartSteps)."""
    bands = launch.blocks // strips
    waves = -(-launch.blocks // resident)
    return waves, waves * (-(-row_steps // bands) + 1)


@pytest.mark.parametrize("dtype", ["bfloat16", "half"])
def test_the_streamed_bands_are_cut_for_the_fewest_waves_times_steps(kernel_choice, dtype):
    """v56 (stream_band_waves): the tensor-core and streamed channels_last kernels cut a plane into the
    bands whose launch takes the fewest waves x (band steps + 1), among those that fill the GPU once.
    MobileNetV2 144@56 at batch 64 on an H100, 3 blocks an SM (396 resident), 14 steps of 4 rows and
    5 x 64 strips: 2 bands of 7 steps (640 blocks, 2 waves: 16 steps) where the kStreamWaves cut gave 5
    bands of 3 (1,600 blocks, 4.04 waves: 5 x 4 = 20). 672@14 k5 at 2 an SM (264 resident): one band of
    4 steps (704 blocks, 2.67 waves: 3 x 5 = 15) where 2 bands of 2 (1,408 blocks, 5.33 waves) gave
    6 x 3 = 18. At batch 8 144@56 has 40 strips: no three-block cut fills the GPU once (7 bands of 2
    steps are 280 blocks), and of the two-block ones only 7 bands of 2 do (264 resident)."""
    def plan(call, disabled=()):
        answer, = plan_report.run_driver(kernel_choice, [query_line(dtype, "forward", call, H100, disabled)], "--plans")
        return plan_report.Launch.parse(answer)

    mobilenet = kernel_cases.Call("mobilenet", 64, 144, (56, 56), (3, 3), padding=(1, 1), layout="cl")
    by_waves, by_four = plan(mobilenet), plan(mobilenet, ("stream_band_waves",))
    assert by_waves.kernel == by_four.kernel == kernel_cases.CHANNELS_LAST_MMA
    assert (by_waves.grid, by_four.grid) == ((2, 5, 64), (5, 5, 64))
    assert stream_steps(by_waves, 14, 5 * 64, 396) == (2, 16) and stream_steps(by_four, 14, 5 * 64, 396) == (5, 20)
    efficientnet = kernel_cases.Call("efficientnet", 64, 672, (14, 14), (5, 5), padding=(2, 2), layout="cl")
    by_waves, by_four = plan(efficientnet), plan(efficientnet, ("stream_band_waves",))
    assert (by_waves.grid, by_four.grid) == ((1, 11, 64), (2, 11, 64))
    assert stream_steps(by_waves, 4, 11 * 64, 264) == (3, 15) and stream_steps(by_four, 4, 11 * 64, 264) == (6, 18)
    small_batch = plan(kernel_cases.Call("mobilenet", 8, 144, (56, 56), (3, 3), padding=(1, 1), layout="cl"))
    assert small_batch.kernel == kernel_cases.CHANNELS_LAST_MMA and small_batch.args[-1] == "false"
    assert small_batch.grid == (7, 5, 8)


def test_the_channels_last_stride2_backward_input_walks_in_whole_waves(kernel_choice):
    """v57 (stride2_grad_input_waves): MobileNetV2 192@28 s2, bf16 channels_last batch 64 on an H100: 12,544
    2 x 2 blocks a channel group, 3 groups of 8 vectors x 32 lanes (392 lane items a group). At the 69
    registers ptxas gives the instance an SM holds 3 blocks (396 at once): 132 blocks a group, one wave of
    3 items a lane (4 steps with the block's start); the old count, 176 a group (4 blocks an SM at the
    least), was 1.33 waves, 2 x (3 + 1) = 8. Unknown registers are counted at the launch bound's (1 an SM)."""
    call = kernel_cases.Call("mobilenet", 64, 192, (28, 28), (3, 3), (2, 2), (1, 1), layout="cl")
    line = query_line("bfloat16", "backward-input", call, H100)
    registers = ["registers stride2_grad_input_channels_last_kernel<BFloat16, int, 3, 1> 69"]
    grid = lambda answers: plan_report.Launch.parse(answers[0]).grid  # noqa: E731
    assert grid(plan_report.run_driver(kernel_choice, [line], "--plans", preamble=registers)) == (132, 3, 1)
    off = query_line("bfloat16", "backward-input", call, H100, ("stride2_grad_input_waves",))
    assert grid(plan_report.run_driver(kernel_choice, [off], "--plans", preamble=registers)) == (176, 3, 1)
    assert grid(plan_report.run_driver(kernel_choice, [line], "--plans")) == (44, 3, 1)
    # 5x5 (92 registers: 2 an SM): EfficientNet-B0 144@56 k5 s2, 5 groups of 4 vectors x 64 lanes
    efficientnet = kernel_cases.Call("efficientnet", 64, 144, (56, 56), (5, 5), (2, 2), (2, 2), layout="cl")
    line = query_line("bfloat16", "backward-input", efficientnet, H100)
    registers = ["registers stride2_grad_input_channels_last_kernel<BFloat16, int, 5, 0> 92"]
    blocks, groups, _ = grid(plan_report.run_driver(kernel_choice, [line], "--plans", preamble=registers))
    assert (blocks, groups) == (52, 5) and blocks * groups <= 2 * H100.sm_count


def test_the_register_tiled_weight_gradient_cuts_its_slices_by_the_blocks_an_sm_holds(kernel_choice):
    # MobileNetV2 96@112 s2, fp32 NCHW batch 64 on an H100: 128 items a channel (64 entries x 2 tiles)
    # in blocks of 112 threads. At the 72 registers ptxas gives the instance an SM holds 7 of them
    # (924 resident): 19 slices of 7 items (2 waves of 7); the old cut, 11 slices of 12 (1,056
    # blocks: 2 waves of 12). Unknown registers are counted at the launch bound's 128 (4 an SM).
    call = kernel_cases.Call("mobilenet", 64, 96, (112, 112), (3, 3), (2, 2), (1, 1), layout="nchw")
    line = query_line("float", "grad-weight", call, H100)
    registers = [f"registers grad_weight_register_tiled_kernel<float, int, 3, 2, {staged}> 72"
                 for staged in ("false", "true")]
    slices = lambda answers: [plan_report.Launch.parse(a).grid[1] for a in answers]  # noqa: E731
    assert slices(plan_report.run_driver(kernel_choice, [line], "--plans", preamble=registers)) == [19]
    off = query_line("float", "grad-weight", call, H100, ("register_tiled_grad_weight_waves",))
    assert slices(plan_report.run_driver(kernel_choice, [off], "--plans", preamble=registers)) == [11]
    assert slices(plan_report.run_driver(kernel_choice, [line], "--plans")) == [11]  # 4 an SM: 2 waves of 12
    # Another instance's registers leave this one at its bound.
    other = ["registers grad_weight_register_tiled_kernel<float, int, 5, 2, false> 72"]
    assert slices(plan_report.run_driver(kernel_choice, [line], "--plans", preamble=other)) == [11]


@pytest.mark.parametrize("bad", ["registers 72", "registers grad_weight_register_tiled_kernel<float, int, 3, 2, false>",
                                 "registers grad_weight_register_tiled_kernel<float, int, 3, 2, false> 0",
                                 "registers grad_weight_register_tiled_kernel<float, int, 3, 2, false> 300"])
def test_a_malformed_registers_line_is_refused(kernel_choice, bad):
    proc = subprocess.run([str(kernel_choice)], input=bad + "\n", capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stdout.startswith("error: a registers line is")


def test_the_plan_report_gives_the_driver_the_compilers_registers_of_its_arch():
    rows = [resource_report.KernelResources("sm_90", "m1", 72, 0, 0, 0, 0, name="k<float, int, 3, 2, false>"),
            resource_report.KernelResources("sm_80", "m2", 64, 0, 0, 0, 0, name="k<float, int, 3, 2, false>")]
    assert plan_report.registers_lines(rows, "sm_90") == ["registers k<float, int, 3, 2, false> 72"]
