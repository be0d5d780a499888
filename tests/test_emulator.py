"""The 2D depthwise kernels run on the CPU through tests/emulator (no GPU needed): every kernel,
both layouts, 32/64-bit indexing, float/double/half, against float64 loops; and, built with
ThreadSanitizer, every kernel checked for accesses of a block's threads that no barrier orders. Then
proof that the emulator fails when the kernels are wrong, a missing __syncthreads() included."""

import functools
import math
import os
import re
import signal
import subprocess
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.output_cache import cached_output, placeless, sources_digest
from build_scripts.pin import load_pin
from build_scripts.toolchain import compiler_version
from build_scripts.wheel_cache import cache_dir, ensure_pinned_torch

pytestmark = pytest.mark.l0

EMULATOR = Path(__file__).parent / "emulator"
OURS = REPO_ROOT / "patches" / "files" / "aten" / "src"
# The kernels, their launch plans, the choice and the launch code: every .cuh the emulator includes.
KERNEL_HEADERS = tuple(sorted(str(path.relative_to(OURS))
                             for path in (OURS / "ATen/native/cuda").glob("DepthwiseConv2d*.cuh")))


# ThreadSanitizer's build: the race check of cuda_emulation.h, its reports with source lines; and
# its runs' settings (every report made, a race's exit status 66).
RACE_CHECKED = ("-fsanitize=thread", "-g")
RACE_REPORTED = 66  # the exit status of a race-checked run that found a race
RACE_CHECK_ENV = {**os.environ, "TSAN_OPTIONS": f"halt_on_error=0 exitcode={RACE_REPORTED}"}


PRELUDE = EMULATOR / "emulate_depthwise2d_prelude.h"
PLANTED_BUG_OPTIMIZATION = "-O0"  # the build is most of a planted bug's time, and its runs are short


def compile_flags(optimization: str, include_roots: list[Path]) -> list[str]:
    """The emulator's compiler flags but the build's own choices: its headers looked up in
    include_roots in order, then the emulator's and torch's."""
    torch = ensure_pinned_torch(load_pin(), cache_dir())
    # Paths as the binary names them (__FILE__, debug lines): the repository's relative to it, any
    # other root (a planted bug's) by its place, so that a build kept by build() serves any checkout.
    path_maps = [f"-ffile-prefix-map={REPO_ROOT}/="] + [f"-ffile-prefix-map={root}=include-root-{i}"
                                                       for i, root in enumerate(include_roots)
                                                       if not root.is_relative_to(REPO_ROOT)]
    return ["-std=c++20", optimization, "-pthread", *path_maps, *[f"-I{root}" for root in include_roots],
            f"-I{EMULATOR}", *[f"-I{d}" for d in torch.include_dirs]]


def precompiled_prelude(folder: Path) -> Path:
    """PRELUDE compiled once, as the planted-bug builds compile, into folder: the path to give them
    (`-include`; GCC reads the .gch beside it), whose include guard then skips the emulator's own
    #include of it. A second of each build's five."""
    folder.mkdir(parents=True, exist_ok=True)
    header = folder / PRELUDE.name
    header.write_text(PRELUDE.read_text())
    subprocess.run(["g++", *compile_flags(PLANTED_BUG_OPTIMIZATION, [OURS]), "-x", "c++-header", str(header), "-o",
                    f"{header}.gch"], check=True, capture_output=True, text=True)
    return header


@functools.cache
def gxx_version() -> str:
    return compiler_version("g++")


def build(tmp_path: Path, include_roots: list[Path], optimization: str = "-O1", float32_only: bool = False,
          race_checked: bool = False, only_header: str | None = None, prelude: Path | None = None) -> Path:
    """The emulator, its headers looked up in include_roots in order; float32_only: the kernels
    checked in float with 32-bit indices only (DWCONV_EMULATE_FLOAT32_ONLY); race_checked: built
    with ThreadSanitizer; only_header: only the kernels that header defines, called directly
    (DWCONV_EMULATE_ONLY, HEADER_BUILDS); prelude: precompiled_prelude's, for an -O0 build.
    Kept in $DWCONV_CACHE/emulator-builds by its command and what it reads (output_cache.py), for
    any checkout: the paths of a run's own are not in the key, as they are not in the binary
    (compile_flags)."""
    torch = ensure_pinned_torch(load_pin(), cache_dir())
    binary = tmp_path / ("emulate_depthwise2d" + ("_float32" if float32_only else "") + ("_tsan" if race_checked else "")
                         + (f"_{HEADER_BUILDS[only_header]}" if only_header else ""))
    options = [*(["-DDWCONV_EMULATE_FLOAT32_ONLY"] if float32_only else []), *(RACE_CHECKED if race_checked else ()),
               *([f"-DDWCONV_EMULATE_ONLY={HEADER_BUILDS[only_header]}"] if only_header else ())]

    def command(output: Path) -> list[str]:
        return ["g++", *compile_flags(optimization, include_roots), *(["-include", str(prelude)] if prelude else ()),
                *options, str(EMULATOR / "emulate_depthwise2d.cpp"), "-o", str(output),
                f"-L{torch.lib_dir}", "-lc10", f"-Wl,-rpath,{torch.lib_dir}"]

    def compile_to(output: Path) -> None:
        subprocess.run(command(output), check=True, capture_output=True, text=True)

    # The key: the command with this run's own paths named by what they are, and the files it compiles:
    # the emulator's source and what it includes from the roots and the emulator's folder (not the rest of
    # either: the routing table, the .cu, the kernel-choice driver).
    named = placeless(command(binary), {
        str(binary): "<binary>", **({str(prelude): "<prelude>"} if prelude else {}), str(REPO_ROOT): "<repo>",
        **{str(root): f"<include root {i}>" for i, root in enumerate(include_roots)}})
    key = "\0".join([gxx_version(), *named, sources_digest([EMULATOR / "emulate_depthwise2d.cpp"],
                                                            [*include_roots, EMULATOR])])
    return cached_output(cache_dir() / "emulator-builds", key, binary, compile_to)


# A run's bound on the CPU time it takes (a kernel looping for ever), not on the wall clock: the
# runs started early go at nice 19 beside the other tests, and the time they are given varies.
# `make race-check`, whose one run is the whole sweep under ThreadSanitizer, raises it.
RUN_CPU_SECONDS = int(os.environ.get("DWCONV_RUN_CPU_SECONDS", "1200"))


def run(binary: Path, *args: str):
    proc = subprocess.run(["prlimit", f"--cpu={RUN_CPU_SECONDS}:{RUN_CPU_SECONDS + 10}", str(binary), *args],
                          capture_output=True, text=True, env=RACE_CHECK_ENV)
    assert proc.returncode not in (-signal.SIGXCPU, -signal.SIGKILL), \
        f"{binary.name} {' '.join(args)}: stopped past {RUN_CPU_SECONDS} s of CPU"
    match = re.search(r"^(\d+) passed, (\d+) failed$", proc.stdout, re.M)
    assert match, proc.stdout + proc.stderr
    return proc, int(match.group(1)), int(match.group(2))


KERNELS_CHECKED = [
    f"{pass_} {kernel}" for pass_ in ("forward", "backward-input")
    for kernel in ("tiled NCHW", "row NCHW", "column NHWC", "register-tiled NCHW", "register-tiled NCHW row stores", "tiled NHWC",
                   "register-tiled NHWC", "streamed NHWC", "tensor-core NHWC",
                   "large-filter NCHW", "large-filter NCHW row stores", "large-filter NHWC", "pixel NCHW",
                   "pixel NHWC", "plane-streamed NCHW", "plane-streamed NCHW vector rows", "direct NCHW", "direct NHWC")
] + [f"backward-input stride-2 {layout}" for layout in ("NCHW", "NCHW row stores", "NCHW pair stores", "NHWC")] + [
    "forward register-tiled NCHW stride 2", "forward register-tiled NCHW stride 2 row stores",
    "forward register-tiled NHWC stride 2", "forward streamed NHWC stride 2", "forward tensor-core NHWC stride 2",
    "forward pixel NCHW stride 2",
    "forward pixel NHWC stride 2", "forward plane-streamed NCHW stride 2",
    "forward plane-streamed NCHW stride 2 vector rows"] + [
    # every weight-gradient kernel's grad_weight and the grad_bias it sums on the way
    f"grad-weight {kernel}{bias}" for bias in ("", " bias")
    for kernel in ("NCHW", "row NCHW", "column NHWC", "register-tiled NCHW", "register-tiled NCHW row loads",
                   "register-tiled NCHW staged grad_output", "register-tiled NCHW stride 2",
                   "register-tiled NCHW stride 2 row loads", "register-tiled NCHW stride 2 staged grad_output",
                   "register NHWC",
                   "large-filter NCHW", "large-filter NHWC", "strided NHWC", "ring NHWC", "window NHWC", "walk NHWC",
                   "tensor-core NHWC", "plane-streamed NCHW", "plane-streamed NCHW vector rows",
                   "plane-streamed NCHW stride 2", "plane-streamed NCHW stride 2 vector rows",
                   "column-backward NHWC")] + [
    f"dispatched {pass_} {layout}" for pass_ in ("forward", "backward-input", "grad-weight", "grad-bias")
    for layout in ("NCHW", "NHWC")] + [
    # both conv1d gradients from one kernel, in each layout
    *(f"backward {kernel} grad-{gradient}" for kernel in ("row NCHW", "column NHWC")
      for gradient in ("input", "weight", "weight bias")),
    *(f"dispatched backward {gradient} {layout}" for gradient in ("grad-input", "grad-weight", "grad-bias")
      for layout in ("NCHW", "NHWC"))]


def test_the_emulated_gpu_runs_blocks_and_barriers_as_a_gpu_does(tmp_path):
    binary = tmp_path / "emulation_selftest"
    subprocess.run(["g++", "-std=c++20", "-O1", f"-I{EMULATOR}", str(EMULATOR / "emulation_selftest.cpp"), "-o",
                    str(binary)], check=True, capture_output=True, text=True)
    proc, passed, failed = run(binary)
    assert failed == 0 and passed == 56 and proc.returncode == 0, proc.stdout


def test_every_kernel_shares_the_launch_bound_the_emulator_enforces():
    """The emulator refuses blocks of more than kThreads threads (a GPU refuses a launch past a
    kernel's __launch_bounds__); that is every kernel's bound only if each names kThreads."""
    bounds = [m.group(1) for header in KERNEL_HEADERS
              for m in re.finditer(r"__launch_bounds__\(\s*([^,)]+)", (OURS / header).read_text())]
    assert len(bounds) >= 15 and set(bounds) == {"kThreads"}, bounds


def test_the_float32_build_holds_no_other_types_kernels(tmp_path):
    """The planted-bug runs build the emulator float-only first because it compiles in under half
    the time; that holds only while no other type's kernel is instantiated there (the --layer mode
    once instantiated all four types in every build, and the float build took as long as the whole).
    Float's 64-bit-index kernels stay: the dispatch check launches them."""
    symbols = subprocess.run(["nm", "-C", str(build(tmp_path, [OURS], "-O0", float32_only=True))],
                             check=True, capture_output=True, text=True).stdout
    kernels = [line for line in symbols.splitlines() if "at::native::dwconv::" in line and "_kernel<" in line]
    assert any("_kernel<float, int," in line for line in kernels)
    others = [line for line in kernels if re.search(r"_kernel<(double|c10::Half|c10::BFloat16)\b", line)]
    assert not others, others[:5]


@pytest.mark.parametrize("header", KERNEL_HEADERS)
def test_each_kernel_header_compiles_on_its_own(tmp_path, header):
    """Each header includes what it uses, so that a kernel family can be read, and included, alone."""
    torch = ensure_pinned_torch(load_pin(), cache_dir())
    source = tmp_path / "one_header.cpp"
    source.write_text('#include "cuda_emulation.h"\n'
                      '#define DWCONV_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) '
                      'dwconv_emu::launch(grid, block, shared_bytes, kernel, __VA_ARGS__)\n'
                      f'#include <{header}>\n')
    proc = subprocess.run(["g++", "-std=c++20", "-fsyntax-only", f"-I{OURS}", f"-I{EMULATOR}",
                           *[f"-I{d}" for d in torch.include_dirs], str(source)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_emulator_plans_the_layers_the_bench_times():
    """The emulator checks that every 2D bench layer with a filter of 7x7 or less, in every set,
    gets the register-tiled plans; its list of those layers must be the bench's."""
    from build_scripts.bench.layers import SETS

    source = (EMULATOR / "emulate_depthwise2d.cpp").read_text()
    table = re.search(r"kTiledBenchLayers\[\] = \{(.*?)\n\};", source, re.S).group(1)
    emulated = [tuple(map(int, row)) for row in re.findall(r"\{(\d+), (\d+), (\d+), (\d+)\}", table)]
    benched = [(l.channels, l.length, l.kernel, l.stride) for layers in SETS.values() for l in layers
               if not l.conv1d and l.kernel <= 7]
    assert emulated == benched


def test_the_emulators_gpus_hold_what_the_plan_reports_sm_limits_say():
    """The emulator plans for an H100's and an RTX 3090's SMs (GpuLimits, the fields after the SM
    count); tests/gpu/test_gpu_limits.py checks the plan report's table against a real device."""
    from build_scripts.plan_report import SM_LIMITS, Gpu

    source = (EMULATOR / "emulate_depthwise2d.cpp").read_text()
    presets = dict(re.findall(r"GpuLimits (sm\d+)_gpu\(int64_t sms\) \{\s*return \{sms, ([^}]*)\};", source))
    assert sorted(presets) == ["sm86", "sm90"]
    for name, fields in presets.items():
        values = [math.prod(int(factor) for factor in field.split("*")) for field in fields.split(",")]
        sm = SM_LIMITS[f"sm_{name[2:]}"]
        assert values == [sm.threads, sm.blocks, sm.registers, sm.shared_bytes, sm.reserved_per_block,
                          Gpu(1, f"sm_{name[2:]}").compute_capability], name


def assert_every_kernel_reached(proc: subprocess.CompletedProcess, least: int) -> None:
    """The sweep's run checked every kernel, and every kernel the choice names, `least` times or more."""
    checked = dict(re.findall(r"^checked (.+): (\d+)$", proc.stdout, re.M))
    assert sorted(checked) == sorted(KERNELS_CHECKED), proc.stdout
    assert all(int(count) >= least for count in checked.values()), proc.stdout
    # Blocks with thread groups (grids the GPU holds at once) in both kernels that have them.
    grouped = dict(re.findall(r"^with thread groups, checked (.+): (\d+)$", proc.stdout, re.M))
    assert sorted(grouped) == ["large-filter", "register-tiled NCHW"], proc.stdout
    assert all(int(count) >= least for count in grouped.values()), proc.stdout
    # Run as DepthwiseConv2d.cu runs them (chosen, then launched), the sweep reaches every kernel.
    dispatched = dict(re.findall(r"^dispatched to (\w+): (\d+)$", proc.stdout, re.M))
    choice = (OURS / "ATen/native/cuda/DepthwiseConv2dKernelChoice.cuh").read_text()
    assert sorted(dispatched) == sorted(set(re.findall(r'return "(\w+_kernel)";', choice))), proc.stdout
    assert all(int(count) >= least // 2 for count in dispatched.values()), proc.stdout


def test_kernels_match_float64_on_the_emulated_gpu(tmp_path):
    proc, passed, failed = run(build(tmp_path, [OURS]))
    assert failed == 0 and proc.returncode == 0, proc.stdout
    assert passed >= 800
    assert_every_kernel_reached(proc, least=20)


# What a GPU leaves unordered, which the race check must report, and what it orders, which it must
# not (tests/emulator/race_selftest.cpp): several of the races give the same values in every order.
RACE_SCENARIOS = {
    "neighbour read after a barrier": False,
    "neighbour read without a barrier": True,
    "one thread writes a flag": False,
    "every thread writes the same flag": True,
    "rewrite after a barrier": False,
    "rewrite without a barrier": True,
    "ldmatrix after a barrier": False,
    "ldmatrix of rows other lanes wrote": True,
    "a shuffle between a write and a read": True,
    "an mma.sync between a write and a read": True,
    "blocks reuse shared memory": False,
    "threads write their own global elements": False,
    "threads write one global element": True,
} | {  # asynchronous copies, in the blocks where they land at the wait and in those where they land at once
    f"{scenario} (landing at the {landing})": races
    for scenario, races in {
        "copy read after its wait and a barrier": False,
        "copy read after its wait alone": True,
        "copy over a slot read before a barrier": False,
        "copy over a slot another thread still reads": True,
        "copy carried across a barrier": False,
        "copy read in flight after a barrier": True,
    }.items()
    for landing in ("wait", "copy")
}


@pytest.fixture(scope="module")
def race_selftest(tmp_path_factory):
    binary = tmp_path_factory.mktemp("race") / "race_selftest"
    subprocess.run(["g++", "-std=c++20", "-O1", *RACE_CHECKED, f"-I{EMULATOR}", str(EMULATOR / "race_selftest.cpp"),
                    "-o", str(binary)], check=True, capture_output=True, text=True)
    return binary


@pytest.mark.parametrize("scenario, races", RACE_SCENARIOS.items())
def test_the_race_check_reports_what_a_gpu_leaves_unordered(race_selftest, scenario, races):
    proc = subprocess.run([str(race_selftest), scenario], capture_output=True, text=True, timeout=120,
                          env=RACE_CHECK_ENV)
    assert proc.stdout == f"ran {scenario}\n", proc.stdout + proc.stderr
    if races:
        assert proc.returncode == RACE_REPORTED and "WARNING: ThreadSanitizer: data race" in proc.stderr, proc.stderr
        # Both accesses of every report are the kernel's: each stack passes through its line.
        accesses = re.findall(r"^ *(?:Previous )?(?:[Ww]rite|[Rr]ead) of size.*?\n\n", proc.stderr, re.M | re.S)
        assert len(accesses) >= 2 and all("race_selftest.cpp" in stack for stack in accesses), proc.stderr
    else:
        assert proc.returncode == 0 and "ThreadSanitizer" not in proc.stderr, proc.stderr


# Each mutation with the cases of the sweep that reach the code it breaks.
MUTATIONS = [
    # The weight gradients meet the input with real outputs only (case 7 holds inf in its input):
    (("if (kPartial && j >= chunk_cols) break;", "if (kPartial && j >= kWindowChunk) break;"), "7:8"),  # window
    (("if (!go_inside[j]) continue;", ""), "7:8"),  # walk: a column past the plane
    (("window[(u * kStride + kh) % K][j * kStride + kw][c]", "window[kh][j * kStride + kw][c]"), "12:13"),  # walk's slots
    (("__syncthreads();  // the run is in scratch, whoever put it", "// barrier removed"), "12:13"),  # walk's run
    (("if (kPartial && x + j >= cols) break;", "if (kPartial && j >= kRingChunk) break;"), "7:8"),  # ring
    (("if (kPartial && x0 + j >= dst_w) break;", "if (kPartial && j >= kBlockCols) break;"), "7:8"),  # NHWC register
    (("if (kPartial && x + j >= g.dst_w) break;", "if (kPartial && j >= kBlockCols) break;"), "7:8"),  # NCHW columns
    (("if (kPartial && y + i >= g.dst_h) return;", "if (kPartial && i >= kBlockRows) return;"), "7:8"),  # NCHW rows
    (("__syncthreads();  // the previous member's tile is no longer read", "// barrier removed"), ":12"),
    (("const int tap = kBackward ? taps_count - 1 - i : i;", "const int tap = i;"), "0:1"),
    # The block sums of the general NCHW and the row weight gradients (warp shuffles, then warps):
    (("for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);",
      "for (int offset = kWarpLanes / 4; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);"),
     "0:1"),  # half of each warp's lanes
    (("for (int w = 0; w < kWarps; ++w) total += warp_sums[w][tid];",
      "for (int w = 1; w < kWarps; ++w) total += warp_sums[w][tid];"), "36:37"),  # the first warp's sums
    (("  __syncthreads();\n  acc_t total = acc_t(0);", "  acc_t total = acc_t(0);"), "36:37"),  # barrier removed
    (("if (tid == kSlots && tap0 == 0 && partial_bias != nullptr)", "if (tid == 0 && tap0 == 0 && partial_bias != nullptr)"),
     "0:1"),  # the bias written from the first tap's total
    (("const int weight_tap = flip ? taps_count - 1 - tap_slot : tap_slot;", "const int weight_tap = tap_slot;"),
     "12:13"),
    # ... staged a tap a row of [piece][vector] at an odd pitch (v37): a vector's pieces where the loads look
    (("reinterpret_cast<Vector16<staged_t>*>(taps)[tap_slot * tap_pitch + piece * vectors + vec] = w;",
      "reinterpret_cast<Vector16<staged_t>*>(taps)[tap_slot * tap_pitch + vec * kPieces + piece] = w;"),
     "15:16"),  # staged [vector][piece], read [piece][vector]
    (("reinterpret_cast<Vector16<staged_t>*>(taps)[tap_slot * tap_pitch + piece * vectors + vec] = w;",
      "reinterpret_cast<Vector16<staged_t>*>(taps)[tap_slot * kPieces * vectors + piece * vectors + vec] = w;"),
     "15:16"),  # staged without the rows' padding, read with it
    (("const Vector16<staged_t> v = pieces[piece * vectors];", "const Vector16<staged_t> v = pieces[piece];"),
     "48:49"),  # the second piece read from the next vector (stride-2 channels_last)
    (("const int col_step = t.lanes_w * g.stride_w * vectors;", "const int col_step = t.lanes_w * vectors;"), "12:14"),
    # The register-tiled NCHW kernel, over the cases written for it:
    (("const int kh = r - i * kStride;", "const int kh = r + i * kStride;"), "18:19"),
    (("const int tap = kBackward ? kTaps - 1 - i : i;", "const int tap = i;"), "18:19"),
    (("__syncthreads();  // no thread still reads the previous member's tile or weights", "// barrier removed"),
     "19:20"),
    (("acc[i][j] += x[j * kStride + kw] * w[kh * kKernel + kw];",
      "acc[i][j] += x[j * kStride + kw] * w[kw * kKernel + kh];"), "18:19"),
    (("const int max_by = std::min(kThreads / bx, 64);", "const int max_by = kThreads / bx;"), "24:25"),  # blockDim.z > 64
    # The register-tiled weight gradient:
    (("__syncthreads();  // no thread still reads the previous item's tile", "// barrier removed"), "26:28"),
    (("sums[kh * kKernel + kw] += go[i][j] * in[j * kStride + kw];",
      "sums[kw * kKernel + kh] += go[i][j] * in[j * kStride + kw];"), "26:27"),
    (("const int tile_x = static_cast<int>(item % work.tiles_w);",
      "const int tile_x = static_cast<int>(item % work.tiles_h);"), "18:19"),
    (("if (y + i >= g.dst_h) {", "if (y + i > g.dst_h) {"), "27:28"),  # grad_output rows past the plane
    (("for (int half = span / 2; half >= (whole_warps > 0 ? kWarpLanes : 1); half /= 2) {",
      "for (int half = span / 4; half >= (whole_warps > 0 ? kWarpLanes : 1); half /= 2) {"), "26:27"),
    (("if (fold_lane + half < threads) values[fold_lane] += values[fold_lane + half];",
      "values[fold_lane] += values[fold_lane + half];"), "26:28"),  # lanes past a block of 152 threads
    # ... its last five folds by shuffles (v38): all five, in whole warps only, and blocks under a warp
    (("const acc_t total = add_down_warp(shared[i * threads + lane]);",
      "const acc_t total = shared[i * threads + lane];"), "26:27"),
    (("for (int i = warp; warp < whole_warps && i < chunk; i += whole_warps) {",
      "for (int i = warp; i < chunk; i += whole_warps + 1) {"), "27:28"),  # a 152-thread block's last warp shuffles
    (("for (int half = span / 2; half >= (whole_warps > 0 ? kWarpLanes : 1); half /= 2) {",
      "for (int half = span / 2; half >= kWarpLanes; half /= 2) {"), "7:8"),  # a block under 32 threads
    # The channels_last register-blocked weight gradient:
    (("sums[kh * kKernel + kw][k] += go[j][k] * in[j * kStride + kw][k];",
      "sums[kh * kKernel + kw][k] += go[j][k] * in[j + kw][k];"), "13:14"),  # stride 2
    (("for (int lane = 0; lane < static_cast<int>(blockDim.y); ++lane) {",
      "for (int lane = 0; lane + 1 < static_cast<int>(blockDim.y); ++lane) {"), "12:13"),
    (("__syncthreads();  // no thread still reads the previous chunk", "// barrier removed"), "26:27"),
    (("const index_t x0 = static_cast<index_t>(strip % work.strips_w) * kBlockCols;",
      "const index_t x0 = static_cast<index_t>(strip % work.strips_w);"), "12:13"),
    # The large-filter kernel:
    (("const int first_row = r < kernel_h ? 0 : r - kernel_h + 1;",
      "const int first_row = r < kernel_h ? 0 : r - kernel_h;"), "32:33"),  # a tile with no zero rows on top
    (("if (kWholeStep || k < step_taps) {", "if (kWholeStep || k <= step_taps) {"), "28:29"),  # a 3-tap rest
    (("const int tap = kBackward ? filter_taps - 1 - i : i;", "const int tap = i;"), "29:30"),
    (("__syncthreads();  // no thread still reads the previous member's tiles or weights", "// barrier removed"),
     "29:30"),
    (("[&](const GridWalk<int, 3>& pos, bool in_range) { return load(pos.at[2], pos.at[0], pos.at[1], in_range); },",
      "[&](const GridWalk<int, 3>& pos, bool in_range) { return load(pos.at[2], pos.at[1], pos.at[0], in_range); },"),
     "28:29"),  # channels_last tiles' rows and columns exchanged
    (("if (in_range && p != cached_slot) {", "if (in_range && cached_slot < 0) {"),
     "28:29"),  # every plane slot staged from the first one a thread stages
    (("load_shared_vectors<acc_t, kStepVectors>(input + (step + 1) * kBlockCols, next);",
      "load_shared_vectors<acc_t, kStepVectors>(input + step * kBlockCols, next);"), "32:33"),
    (("auto fits = [&](int planes, int by) { return layout_of(planes, by).bytes(planes, kUnit) <= kMaxSharedBytes; };",
      "auto fits = [&](int planes, int by) { return true; };"), "33:34"),  # over 48 KB: refused as a GPU would
    # ... the window's padding skipped (WindowSpan): rows and kBlockCols-tap steps that meet the plane kept
    (("for (int r = (span.row_begin > 0 ? span.row_begin : 0) + first_input_row;",
      "for (int r = (span.row_begin > 0 ? span.row_begin + 1 : 0) + first_input_row;"), "29:30"),  # a top row
    (("const int rows_end = smaller(kBlockRows + kernel_h - 1, span.row_end);",
      "const int rows_end = smaller(kBlockRows + kernel_h - 1, span.row_end - 1);"), "29:30"),  # a bottom row
    (("(col_begin - kBlockCols + 1) / kBlockCols;", "(col_begin + 1) / kBlockCols;"),
     "28:29"),  # a step that meets the plane's first columns
    (("smaller((col_end + kBlockCols - 1) / kBlockCols, whole_steps + (rest > 0 ? 1 : 0));",
      "smaller(col_end / kBlockCols, whole_steps + (rest > 0 ? 1 : 0));"), "28:29"),  # ... its last columns
    (("const WindowSpan span = window_span(place.y0 - g.pad_h + place.row * kBlockRows,",
      "const WindowSpan span = window_span(place.y0 + place.row * kBlockRows,"), "29:30"),  # the padding ignored
    # The large-filter weight gradient:
    (("__syncthreads();  // no thread still reads the previous item's planes", "// barrier removed"), "35:36"),
    (("const index_t plane_c = input_channel ? slot_c / g.multiplier : slot_c;", "const index_t plane_c = slot_c;"),
     "29:30"),  # multiplier 2
    (("if (a < g.kernel_h && b < g.kernel_w) out[a * g.kernel_w + b] = acc[i][j];",
      "if (a < g.kernel_h && b < g.kernel_w) out[b * g.kernel_h + a] = acc[i][j];"), "30:31"),  # 9x31
    (("const int y0 = static_cast<int>(item % work.bands) * work.band_rows;",
      "const int y0 = static_cast<int>(item % work.bands);"), "33:34"),  # double's plane in 5 bands
    (("static_cast<int>(threadIdx.y) * kBlockCols - g.pad_w, g.src_h, g.src_w);",
      "static_cast<int>(threadIdx.y) * kBlockCols, g.src_h, g.src_w);"), "29:30"),  # its window's padding misplaced
    # The general kernels' division-free walks:
    (("carry = at[d] >= extent[d] ? 1 : 0;", "carry = at[d] > extent[d] ? 1 : 0;"), "0:1"),  # GridWalk's carry
    (("if (inside[t]) acc[t] += go * static_cast<acc_t>(value[t]);", "acc[t] += go * static_cast<acc_t>(value[t]);"),
     "0:1"),  # a padded tap adds the clamped load
    (("const int tap = smaller(tap0 + t, taps_count - 1);", "const int tap = smaller(t, taps_count - 1);"), "1:2"),
    (("      r += stride;\n      --q;", "      r += stride;"), "1:2"),  # a borrow from the stride quotient
    (("const index_t y = channels_fastest ? at.at[1] : at.at[2];", "const index_t y = at.at[2];"), "19:20"),
    (("const index_t dil_q_h = g.dilation_h / g.stride_h, dil_r_h = g.dilation_h % g.stride_h;",
      "const index_t dil_q_h = 0, dil_r_h = g.dilation_h % g.stride_h;"), "6:7"),  # dilation 2 at stride 1
    # The staging walks of the register-tiled and channels_last tiled kernels:
    (("GridWalk<int, 3> at(tid, threads, {0, t.tile_in_h, t.tile_in_w});",
      "GridWalk<int, 3> at(tid, threads, {0, t.tile_in_h, t.tile_in_w + 1});"), "18:19"),
    (("GridWalk<int, 3> at(tid, threads, {0, t.tile_in_w, vectors});",
      "GridWalk<int, 3> at(tid, threads, {0, vectors, t.tile_in_w});"), "12:13"),
    (("GridWalk<int, 2> tap_at(tid, threads, {0, taps_count});",
      "GridWalk<int, 2> tap_at(tid, threads, {0, taps_count + 1});"), "12:13"),
    # The row kernels (conv1d), over the cases written for them:
    (("widen_window_at<scalar_t>(first - own_first, words, window,", "widen_window_at<scalar_t>(0, words, window,"),
     "36:37"),  # the window's offset
    (("return chunk * kChunk - (row_start & (kChunk - 1));", "return chunk * kChunk;"),
     "36:37"),  # chunks off dst's 16-byte boundaries
    (("taps[j] = static_cast<acc_t>(filters[u][kBackward ? kTaps - 1 - j : j]);",
      "taps[j] = static_cast<acc_t>(filters[u][j]);"), "36:37"),
    (("const int src_row = multiplier == 1 ? at.row : at.row / multiplier;", "const int src_row = at.row;"),
     "37:38"),  # multiplier 2: each dst row read from its own src row
    (("g.dst_w <= kRowMaxWidth && g.src_channels <= g.dst_channels;", "g.dst_w <= kRowMaxWidth;"),
     "37:38"),  # multiplier 2: a backward-input row summed from one row of grad_output
    (("if (!decltype(edge)::value || row_window_inside(c.first, k + j, src_w)) acc[k] += window[k + j] * taps[j];",
      "if (!decltype(edge)::value || row_window_inside(c.first + 1, k + j, src_w)) acc[k] += window[k + j] * taps[j];"),
     "36:37"),  # a row's ends
    (("words.v[kOwnWords + w] = __shfl_down_sync(0xffffffffu, own[w], 1);",
      "words.v[kOwnWords + w] = __shfl_down_sync(0xffffffffu, own[w], 2);"), "36:37"),  # the halo two chunks on
    (("outputs && (lane == kWarpLanes - 1 || at.chunk + 1 == chunks_per_row),", "outputs && lane == kWarpLanes - 1,"),
     "36:37"),  # a row's last chunk's halo taken from the next row's first
    (("if (load_tail) load_row_words<kHaloWords>(words.v + kOwnWords, src_row, own_first + kRowChunk<scalar_t>, src_w);",
      ""), "36:37"),  # a warp's last lane's halo left as its own inputs
    (("for (int k = 0; k < V; ++k) values.v[k] = x + k >= 0 && x + k < src_w ? src_row[x + k] : scalar_t(0);",
      "for (int k = 0; k < V; ++k) values.v[k] = scalar_t(0);"), "36:37"),  # a vector across a row's end left out
    (("                              acc[j] += go * window[k + j];", "                              acc[j] += go * window[k];"),
     "36:37"),  # the weight gradient's taps
    (("if (!decltype(edge)::value || row_window_inside(at.first, k + j, src_w)) {",
      "if (!decltype(edge)::value || row_window_inside(at.first + 1, k + j, src_w)) {"), "36:37"),  # its row ends
    (("if (decltype(edge)::value && (at.y0 + k < 0 || at.y0 + k >= dst_w)) continue;", ""),
     "40:41"),  # grad_output's zeros past its row's end met with the input's infinities
    (("sums && (lane == kWarpLanes - 1 || chunk + 1 == chunks_per_row || item + 1 == end),",
      "sums && (lane == kWarpLanes - 1 || chunk + 1 == chunks_per_row),"), "93:94"),  # a slice ending inside a row
    (("load_row_words<kOwnWords>(go_words[u].v, grad_output + at.dst_start, live ? at.y0 : dst_w, dst_w);",
      "load_row_words<kOwnWords>(go_words[u].v, grad_output + at.dst_start, live ? at.y0 + 1 : dst_w, dst_w);"),
     "36:37"),  # grad_output's chunk one value on
    # Both conv1d gradients from one kernel (row_backward_kernel), over the cases written for them:
    (("grad[k] += window[k + t] * taps[kTaps - 1 - t];", "grad[k] += window[k + t] * taps[t];"),
     "36:37"),  # grad_input from the unflipped filter
    (("inputs.v[w] = __shfl_up_sync(0xffffffffu, in_own[u][kOwnWords - kBeforeWords + w], 1);",
      "inputs.v[w] = __shfl_up_sync(0xffffffffu, in_own[u][kOwnWords - kBeforeWords + w], 2);"),
     "36:37"),  # the inputs before a chunk taken from two chunks back
    (("if (lane == 0 && works && chunk > 0) {", "if (lane == 0 && works && chunk > 1) {"),
     "40:41"),  # a warp's first lane not loading them for a row's second chunk
    (("acc[j] += go * widen_value<scalar_t, acc_t>(inputs, kBeforeSkip + k + j);",
      "acc[j] += go * widen_value<scalar_t, acc_t>(inputs, kBeforeSkip + k + j + 1);"),
     "36:37"),  # the weight gradient's inputs one value on
    (("  return row_chunks(g.src_w + g.pad_w, row_chunk_outputs(element_size));",
      "  return row_chunks(g.src_w + g.pad_w - 1, row_chunk_outputs(element_size));"),
     "108:109"),  # a row's chunks one short of its last grad_output value
    (("window, go_own[u], works && (lane == kWarpLanes - 1 || chunk + 1 == chunks_per_row || item + 1 == end),",
      "window, go_own[u], works && (lane == kWarpLanes - 1 || item + 1 == end),"),
     "109:110"),  # a row's last chunk's grad_output tail taken from the next row
    (("window, go_own[u], works && (lane == kWarpLanes - 1 || chunk + 1 == chunks_per_row || item + 1 == end),",
      "window, go_own[u], works && (lane == kWarpLanes - 1 || chunk + 1 == chunks_per_row),"),
     "93:94"),  # a slice ending inside a row
    (("            if (kEdge && !row_window_inside(at.first, k, dst_w)) continue;", ""),
     "106:107"),  # grad_output's zeros past its rows met with the input's infinities
    (("      const bool works = item < end && (x0 < src_w || at.first < dst_w);",
      "      const bool works = item < end && x0 < src_w;"), "2:3"),  # the chunks past grad_input's row skipped
    # The column kernels (conv1d in channels_last), over the cases written for them:
    (("for (int k = 0; k < V; ++k) values[j][k] = values[j + 1][k];",
      "for (int k = 0; k < V; ++k) values[j][k] = values[kTaps - 1][k];"), "42:43"),  # the window's step
    (("taps[kBackward ? kTaps - 1 - tap : tap][k] = loaded[e];", "taps[tap][k] = loaded[e];"), "42:43"),
    (("const int k = (q * V + e) / kTaps, tap = (q * V + e) % kTaps;",
      "const int k = (q * V + e) % V, tap = (q * V + e) / V;"), "42:43"),  # the weight vectors, [channel][tap]
    (("return first_input >= 0 && first_input + kColumnSegment + kTaps - 1 <= src_w;",
      "return first_input >= 0 && first_input + kColumnSegment + kTaps - 2 <= src_w;"), "42:43"),  # a row's end
    (("for (int lane = 0; lane < kPositionLanes; ++lane) total += shared[t][lane][threadIdx.x];",
      "for (int lane = 0; lane + 1 < kPositionLanes; ++lane) total += shared[t][lane][threadIdx.x];"),
     "42:43"),  # a position lane's sums dropped (the column and the general channels_last weight gradients)
    # Both channels_last conv1d gradients from one kernel (column_backward_kernel), and the weight's alone:
    (("for (int k = 0; k < V; ++k) tap[k] = kGradInput && active ? weight[(c0 + k) * kTaps + t] : scalar_t(0);",
      "for (int k = 0; k < V; ++k) tap[k] = kGradInput && active ? weight[(c0 + k) * kTaps + kTaps - 1 - t] : scalar_t(0);"),
     "42:43"),  # grad_input from the unflipped filter
    (("  return (src_w + pad + kColumnSegment - 1) / kColumnSegment;",
      "  return (src_w + pad + kColumnSegment - 2) / kColumnSegment;"), "110:111"),  # a row's segments one short
    (("const bool crosses_edge = go_first < 0 || go_first + kGoWindow > dst_w || in_first < 0 ||",
      "const bool crosses_edge = go_first < 0 || in_first < 0 ||"), "112:113"),  # grad_output's window past its row
    (("                                in_first + kWindow > src_w;", "                                false;"),
     "42:43"),  # the input's window past its row
    (("          if (kEdge && !within(go_first + s, dst_w)) continue;", ""),
     "115:116"),  # grad_output's zeros past its rows met with the input's infinities
    (("GridWalk<index_t, 2> at(begin + threadIdx.y, kPositionLanes, {0, segments});  // (n, segment)\n"
      "    for (index_t i = begin + threadIdx.y; i < end; i += kPositionLanes, at.advance()) {\n"
      "      const index_t n = at.at[0], x0 = at.at[1] * S;",
      "GridWalk<index_t, 2> at(begin + threadIdx.y, kPositionLanes, {0, segments + 1});  // (n, segment)\n"
      "    for (index_t i = begin + threadIdx.y; i < end; i += kPositionLanes, at.advance()) {\n"
      "      const index_t n = at.at[0], x0 = at.at[1] * S;"), "42:43"),  # the walk's rows a segment long
    (("            if (!kEdge || x0 + s < src_w) store_column_words(",
      "            if (!kEdge || x0 + s <= src_w) store_column_words("), "42:43"),  # a store past grad_input's row
    (("  const bool active = vector < channels / V;\n  const index_t c0 = vector * V;\n"
      "  const index_t segments = column_backward_segments(src_w, pad);",
      "  const bool active = vector <= channels / V;\n  const index_t c0 = vector * V;\n"
      "  const index_t segments = column_backward_segments(src_w, pad);"), "44:45"),  # a vector past the channels
    (("  const index_t end = smaller(static_cast<index_t>(g.batch) * segments, begin + static_cast<index_t>(items_per_slice));\n"
      "  // The thread's filters",
      "  const index_t end = begin + static_cast<index_t>(items_per_slice);\n  // The thread's filters"),
     "110:111"),  # the last slice past the batch
    (("  return has_column_kernel(g, 16 / element_size) && g.pad_w < g.kernel_w;",
      "  return has_column_kernel(g, 16 / element_size) && g.pad_w <= g.kernel_w;"), "114:115"),  # padding K taken
    # The stride-2 backward-input kernels, over the cases written for them:
    (("return pair + (pad - kParity) / 2 + kParity - (kKernel - 1) / 2;",
      "return pair + (pad - kParity) / 2 - (kKernel - 1) / 2;"), "45:46"),  # the window's first row at odd padding
    (("const bool odd = pad % 2 != 0;", "const bool odd = pad % 2 == 0;"), "45:46"),  # the other parity's kernel
    (("for (int pair = 0; pair < kPairs; ++pair) acc[py][2 * pair + px] += window[r][pair + q] * tap;",
      "for (int pair = 0; pair < kPairs; ++pair) acc[py][2 * pair + px] += window[r][q] * tap;"), "45:46"),
    (("for (int k = 0; k < V; ++k) acc[py][px][k] += row[q][k] * w[k];",
      "for (int k = 0; k < V; ++k) acc[py][px][k] += row[kWindow - 1 - q][k] * w[k];"),
     "45:46"),  # channels_last: a phase's columns mirrored
    (("const index_t go_c = c * multiplier + member;", "const index_t go_c = c + member;"), "47:48"),
    (("if (c0 + vec * V >= channels) return;", "if (c0 + vec * V > channels) return;"), "48:49"),  # idle vectors
    (("GridWalk<index_t, 3> at(first, grid_stride, {0, row_pairs, col_pairs});",
      "GridWalk<index_t, 3> at(first, grid_stride, {0, col_pairs, row_pairs});"), "49:50"),
    # The register-tiled kernels at stride 2, over the cases written for them:
    (("for (int r = 0; r < (kBlockRows - 1) * kStride + kKernel; ++r) {",
      "for (int r = 0; r < kBlockRows + kKernel - 1; ++r) {"), "52:53"),  # the window's last rows
    (("acc[i][j] += x[j * kStride + kw] * w[kh * kKernel + kw];", "acc[i][j] += x[j + kw] * w[kh * kKernel + kw];"),
     "52:53"),
    (("src_x0 = place.x0 * kStride - g.pad_w;", "src_x0 = place.x0 - g.pad_w;"), "53:54"),  # the second tile across
    (("const int src_y0 = y0 * kStride - g.pad_h;", "const int src_y0 = y0 - g.pad_h;"), "52:53"),  # tiles down
    (("const acc_t* window = tile + (threadIdx.z * kBlockRows * t.pitch + threadIdx.y * kBlockCols) * kStride;\n"
      "    // Input row r",
      "const acc_t* window = tile + threadIdx.z * kBlockRows * t.pitch + threadIdx.y * kBlockCols;\n"
      "    // Input row r"), "53:54"),  # the weight gradient's windows
    (("return input_extent(by * kBlockRows, g.stride_h, g.kernel_h, 1);",
      "return input_extent(by * kBlockRows, 1, g.kernel_h, 1);"), "52:53"),  # a tile's rows not staged
    (("const int col_step_units = kBlockCols * stride / V;", "const int col_step_units = kBlockCols / V;"),
     "52:53"),  # rows of the tile overlapping
    (("  } else if (shape.by > 1) {\n    split_tile_rows(shape);\n  } else {", "  } else {"),
     "52:53"),  # 56x56 left unplanned
    # The register-tiled channels_last kernel, over the cases written for it:
    (("const int kh = r - row * kStride;", "const int kh = r - row;"), "56:57"),  # stride 2
    (("const Vector16<scalar_t> loaded = row_at(r)[kw * vectors];", "const Vector16<scalar_t> loaded = row_at(r)[kw];"),
     "54:55"),  # the window's columns, a pixel's vectors apart
    (("const int y0 = static_cast<int>(blockIdx.x / t.tiles_w) * lane_rows * kBlockRows;",
      "const int y0 = static_cast<int>(blockIdx.x / t.tiles_w) * lane_rows;"), "54:55"),  # tiles down the plane
    (("__syncthreads();  // the tile and the weights staged by every thread", "// barrier removed"), "54:55"),
    (("if (vec >= live_vectors || y >= g.dst_h || x >= g.dst_w) return;", "if (y >= g.dst_h || x >= g.dst_w) return;"),
     "55:56"),  # idle vectors of a part-filled group write the next pixel's channels
    (("x0 * kStride - g.pad_w, live_vectors, src_h, src_w, channels, tid, threads);",
      "x0 * kStride - g.pad_w, live_vectors, src_h, src_w, channels, tid, kThreads);"), "54:55"),  # blocks under 256 threads
    # The ring weight gradient, over the cases written for it:
    (("__syncthreads();  // the next step's rows are staged; this step's are no longer read", "// barrier removed"),
     "59:61"),
    (("const acc_t* in_row = in_ring + ((t * kStride + kh) % kRing) * in_row_values + channel;",
      "const acc_t* in_row = in_ring + ((t + kh) % kRing) * in_row_values + channel;"), "60:61"),  # stride 2
    (("vec < live_vectors && px < cols};", "vec < live_vectors};"), "60:61"),  # the next chunk's columns summed twice
    # The lanes' sums added in order (add_lanes_in_order, the ring's and the window's):
    (("for (int other = 1; other < lanes; ++other) {", "for (int other = 1; other < 1; ++other) {"),
     "59:60"),  # the second lane's sums left out, in the ring
    (("for (int other = 1; other < lanes; ++other) {", "for (int other = 1; other < 1; ++other) {"),
     "62:63"),  # ... in the window
    (("if (i < count) scratch[(lane * slots + first + i)", "if (i + 1 < count) scratch[(lane * slots + first + i)"),
     "62:63"),  # a lane's last value (the window's bias) not handed on
    (("if (shape.shared_bytes > kMaxSharedBytes) DWCONV_OPT_IN_SHARED_BYTES(kernel, opt_in_shared_bytes(gpu));", ""),
     "54:55"),  # the window's 7x7 rows of 5 lanes (52 KB in float) launched without opting in past 48 KB
    # The tensor-core weight gradient (v43):
    (("if (chunk == 0 && nan_flags[vector] > 0.f && live) {", "if (false) {"), "25:26"),  # a product's 0 x inf kept
    (("const std::uint32_t bias_row = group == 7 ? kPackedOnes<scalar_t> : 0u;", "const std::uint32_t bias_row = 0u;"),
     "15:16"),  # A's row of ones left out: no bias sums
    (("const int steps = (rows + K - 1 + 1) / 2;", "const int steps = (rows + K - 1) / 2;"),
     "76:77"),  # a band's last input row left out where its rows + K - 1 is odd
    (("region[c * kValues + (2 * pair - 1) * K + group] += d[c][0];",
      "region[c * kValues + (2 * pair - 1) * K + group] += 0.f;"), "15:16"),  # odd rows' upper halves left out
    (("  __syncthreads();  // the first halves of the odd rows are in\n", ""), "15:16"),
    (("wait_async_copies<1>();  // all but step s + 2's group", "wait_async_copies<2>();"),
     "15:16"),  # the next step's rows read before they land
    (("int go_read = 9 - group;", "int go_read = 8 - group;"),
     "15:16"),  # B's grad_output rows one off
    (("for (int q = 1; q < chunks; ++q) total += sums", "for (int q = 1; q < 1; ++q) total += sums"),
     "15:16"),  # the second chunk's sums left out (13 columns: two chunks a block)
    (("for (int y = y0 - 6; y < y0; ++y) copy_go_row(y, y - y0 + 8);", ""),
     "15:16"),  # the rows above the band not zeroed: the previous item's rows read as them
    (("if (i < count) scratch[(lane * slots + first + i)", "if (i < count) scratch[(lane * slots + i)"),
     "59:60"),  # the ring's kernel rows over one another's slots
    (("kKernel * w.in_w * kVectors, tid, kBlockThreads, at,", "(kKernel - 1) * w.in_w * kVectors, tid, kBlockThreads, at,"),
     "59:60"),  # an item's first step without its last input row
    # The register tiles staged and stored by the whole block (16 and 32 planes a block; multiplier 2):
    (("const index_t first_src = block_staged ? place.first_plane * step + member : place.n * src_channels + src_c;",
      "const index_t first_src = block_staged ? place.first_plane + member : place.n * src_channels + src_c;"),
     "61:62"),  # backward-input's grad_output planes, multiplier apart
    (("dst0[(at.at[0] * dst_h + at.at[1]) * dst_w + at.at[2]] =", "dst0[at.at[1] * dst_w + at.at[2]] ="),
     "20:22"),  # every plane's outputs written over the first's
    (("tiles, input + (n0 * src_channels + src_c) * src_plane_size, src_channels * src_plane_size, live_planes, g,",
      "tiles, input + (n0 * src_channels + src_c) * src_plane_size, src_plane_size, live_planes, g,"),
     "26:27"),  # the weight gradient's batch entries, a channel count of planes apart
    # ... and its grad_output planes copied whole into shared memory (rows of 14, no row access, 8 planes a block):
    (("dst_channels * dst_plane_size, live_planes, static_cast<int>(dst_plane_size), tid, threads);",
      "dst_plane_size, live_planes, static_cast<int>(dst_plane_size), tid, threads);"),
     "87:88"),  # grad_output's batch entries, a plane apart
    (("const int go_values = kStagedGradOutput ? staged_grad_output_values<acc_t>(blockDim.x, work.go_stride) : 0;",
      "const int go_values = 0;"), "87:88"),  # the input tiles over the grad_output planes
    (("const size_t tile_bytes = go_bytes + layout.bytes(planes, sizeof(Vector16<acc_t>));",
      "const size_t tile_bytes = layout.bytes(planes, sizeof(Vector16<acc_t>));"),
     "87:88"),  # the planner not reserving them
    (("    copy(threads - warp * 32);\n", "    copy(std::integral_constant<int, 32>{});\n"),
     "90:91"),  # a block of 8 threads (8 3x3 planes) copying as if it had 32
    (("plan.work.go_stride > 0);", "true);"), "26:27"),  # the launch running the staging instance for any plan
    # Thread groups (blocks of grids that fit on the GPU at once): the register tiles' staging
    # helpers and the large filter's groups that share out the window's rows:
    (("place.y0 = blockIdx.y * place.rows * kBlockRows;", "place.y0 = blockIdx.y * blockDim.z * kBlockRows;"),
     "0:1"),  # tiles down the plane placed by the helpers' rows too
    (("if (!place.live || !computes) return;", "if (!place.live) return;"), "0:1"),  # helpers store their empty sums
    (("    if (computes) {\n#pragma unroll\n      for (int i = 0; i < kBlockRows; ++i) {",
      "    {\n#pragma unroll\n      for (int i = 0; i < kBlockRows; ++i) {"),
     "7:8"),  # ... through shared memory, where many planes share a block
    (("start_block<kBackward>(acc, place.group == 0 ? bias : nullptr, place);", "start_block<kBackward>(acc, bias, place);"),
     "28:29"),  # the bias added by every group
    (("for (int other = 1; other < groups; ++other) {", "for (int other = 1; other < groups - 1; ++other) {"),
     "8:9"),  # the last group's sums left out
    # The register tiles' 16-byte staging:
    (("const int lead = ((src_x0 % V) + V) % V;", "const int lead = 0;"), "0:1"),  # the tile's columns off by the padding
    (("const int row_vectors = (lead + t.tile_in_w + V - 1) / V;", "const int row_vectors = (t.tile_in_w + V - 1) / V;"),
     "18:19"),  # a row's last vector not staged (double: two tiles across)
    # The choice of kernel and the launch code, as DepthwiseConv2d.cu runs them:
    (("const PassGeometry direct = backward_input_direct(fwd);", "const PassGeometry direct = fwd;"),
     "1:2"),  # the stride-2 and direct backward-inputs read the forward's geometry
    (("plan->tile.row_access = register_tile_row_access(g, reinterpret_cast<const void*>(t.dst), t.element_size);",
      "plan->tile.row_access = true;"), "23:24"),  # 4-column stores into rows of 5
    (("return launch_shape(choice).grid.y;", "return launch_shape(choice).grid.x;"),
     "0:1"),  # the slices summed counted wrong
    (("plan.cols_per_thread, plan.tile_in_h, plan.tile_in_w);", "plan.cols_per_thread, plan.tile_in_w, plan.tile_in_h);"),
     "4:5"),  # the general tile's height and width exchanged
    (("plan_grad_weight(g, t.nchw, gpu)", "plan_grad_weight(g, true, gpu)"),
     "6:7"),  # channels_last data summed as NCHW
    # The bias gradient every weight-gradient kernel sums on the way, and the slices' sum of it:
    (("                          acc[kTaps] += go;\n", "\n"), "36:37"),  # the row weight gradient's bias
    (("    for (int k = 0; k < V; ++k) sums[kTaps][k] += go[k];",
      "    for (int k = 1; k < V; ++k) sums[kTaps][k] += go[k];"), "42:43"),  # a vector's first
    (("src_w, index_t(1), y, x);\n      acc[kSlots] += go;", "src_w, index_t(1), y, x);"), "0:1"),  # general NCHW
    (("in_h, in_w, y, x);\n        acc[kSlots] += go;", "in_h, in_w, y, x);"), "0:1"),  # general channels_last
    (("      for (int j = 0; j < kBlockCols; ++j) sums[kTaps] += go[i][j];",
      "      for (int j = 1; j < kBlockCols; ++j) sums[kTaps] += go[i][j];"), "26:28"),  # register tiles' 4x4 blocks
    (("        sums[kTaps][k] += go[j][k];\n", "\n"), "12:14"),  # channels_last register strips
    (("for (int i = slot_tid; i < rows * dst_w; i += slot_threads, at.advance()) {",
      "for (int i = slot_tid; i < rows * dst_w - 1; i += slot_threads, at.advance()) {"),
     "28:29"),  # a large-filter band's last value
    (("      for (int i = 0; i < slot_threads; ++i) total += slot_sums[i];",
      "      for (int i = 1; i < slot_threads; ++i) total += slot_sums[i];"), "28:29"),  # ... a slot thread's sum
    (("const int64_t slice_stride = is_bias ? channels : values;", "const int64_t slice_stride = values;"),
     "0:1"),  # the bias's slices read at the taps' stride
    # ... and its lanes (v39):
    (("for (int lane = 1; lane < kFinishLanes; ++lane) total += lane_totals[lane][threadIdx.x];",
      "for (int lane = 2; lane < kFinishLanes; ++lane) total += lane_totals[lane][threadIdx.x];"), "0:1"),  # lane 1's
    (("first += static_cast<int64_t>(gridDim.x) * kFinishColumns) {",
      "first += static_cast<int64_t>(gridDim.x) * kFinishColumns * 2) {"), "21:22"),  # every other round of the walk
    (("    lane_totals[threadIdx.y][threadIdx.x] = total;\n    __syncthreads();\n",
      "    lane_totals[threadIdx.y][threadIdx.x] = total;\n"), "0:1"),  # lane 0 adding before the lanes have put
    # ... in the ring, by a row of threads of its own:
    (("for (int j = 0; j < kRingChunk; ++j) chunk_sum +=", "for (int j = 1; j < kRingChunk; ++j) chunk_sum +="),
     "54:55"),  # a chunk's first column
    (("add_lanes_in_order(sums, bias_row ? 1 : kKernel,", "add_lanes_in_order(sums, bias_row ? 0 : kKernel,"),
     "59:60"),  # the bias row's other lanes left out
    (("partial_bias[static_cast<int64_t>(blockIdx.y) * channels + c0 + channel] = sums[0];",
      "partial_bias[c0 + channel] = sums[0];"), "60:61"),  # every slice's sums written over the first's
    (("          sums[0] += chunk_sum;", "          sums[0] = chunk_sum;"), "54:55"),  # only a step's last chunk
    # The streamed channels_last kernel: its copies in flight, the barriers around them, the ring:
    (("      wait_async_copies<1>();\n", "\n"), "62:63"),  # a step reads rows it did not wait for
    (("    __syncthreads();  // the step's rows have landed, whoever copied them", "// barrier removed"), "62:63"),
    (("    if (step + 1 < steps) __syncthreads();  // no thread still reads the slots the next step's copies fill",
      "// barrier removed"), "62:63"),  # the next step's copies over rows still read
    (("const int ring_rows = window_rows + step_rows * stride;",
      "const int ring_rows = window_rows + step_rows * stride - 1;"), "62:63"),  # copies in flight over the window
    (("return slot < ring_rows ? slot : slot - ring_rows;", "return slot < ring_rows ? slot : slot - ring_rows + 1;"),
     "62:63"),  # rows wrapped round the ring one slot off
    (("image_row0 + window_rows + step * new_rows, image_col0,",
      "image_row0 + window_rows + (step + 1) * new_rows, image_col0,"), "63:64"),  # the next rows a step late
    (("wrap_ring_slot(step_slot + window_rows, s.ring_rows), new_rows,",
      "wrap_ring_slot(step_slot + window_rows + 1, s.ring_rows), new_rows,"), "62:63"),  # the next rows' slots
    (("return wrap_ring_slot(step_slot + new_rows, s.ring_rows);",
      "return wrap_ring_slot(step_slot + new_rows - 1, s.ring_rows);"), "62:63"),  # a step's first slot
    (("const int lane_row_offset = ty * kBlockRows * kStride;", "const int lane_row_offset = ty * kBlockRows;"),
     "64:66"),  # stride 2's lane rows
    (("live && within(iy, src_h) && within(ix, src_w);", "live && within(iy, src_h) && within(ix, src_w + 1);"),
     "62:63"),  # the column past the right edge
    (("const Vec* const column = ring + tx * kStride * vectors + vec;",
      "const Vec* const column = ring + tx * vectors + vec;"), "64:65"),  # stride 2's columns
    # The stride-2 NCHW backward-input's pair stores (rows of an even width not a multiple of 4):
    (("  for (int j = 0; j < kBlockCols; j += 2) {\n    if (j < cols_left) {",
      "  for (int j = 0; j < kBlockCols; j += 2) {\n    if (j + 2 < cols_left) {"), "53:54"),  # a row's last pair
    (("const bool pairs = element_size <= 4 && g.dst_w % 2 == 0;", "const bool pairs = element_size <= 4;"),
     "50:51"),  # odd rows in pairs
    # The window weight gradient: its copies in flight, the barrier, the rings, the pairing of rows:
    (("        wait_async_copies<0>();\n        convert_step(s + 1, next_go_slot);",
      "        convert_step(s + 1, next_go_slot);"), "62:63"),  # the next rows used before they landed
    (("      __syncthreads();  // the next step's rows are in the ring; this step's are no longer read",
      "// barrier removed"), "62:63"),
    (("((s & 1) * kStride + r) * w.in_w", "(r)*w.in_w"), "62:63"),  # the next input rows over the step's
    (("const int next_go_slot = go_slot + 1 < kGoSlots ? go_slot + 1 : 0;",
      "const int next_go_slot = go_slot + 1 < kGoSlots - 1 ? go_slot + 1 : 0;"), "62:63"),  # a ring a row short
    (("const int slot = go_slot - m < 0 ? go_slot - m + kGoSlots : go_slot - m;",
      "const int slot = go_slot - m < 0 ? go_slot - m + kGoSlots - 1 : go_slot - m;"), "62:63"),  # wrapped one off
    (("if (kh >= kKernel || !within(s - m, rows)) continue;", "if (kh >= kKernel || s - m < 0) continue;"),
     "62:63"),  # grad_output rows past the band
    (("const int steps = rows + kReach;", "const int steps = rows + kReach - 1;"), "54:55"),  # an inner band's last rows
    (("sums[kh][kw] += go * window[j * kStride + kw];", "sums[kh][kw] += go * window[j + kw];"), "64:65"),  # stride 2
    (("if (kh == 0) bias_sum += go;", "if (kh == 0) bias_sum = go;"), "62:63"),  # the bias of a step's last column
    (("row_inside && (r == kStride ? px < cols : within(sx0 + px, src_w));",
      "row_inside && (r == kStride ? px <= cols : within(sx0 + px, src_w));"), "69:70"),  # a column past the item
    (("store_widened(to + px * kPitch, from[px * kVectors]);", "store_widened(to + px * kPitch, from[px]);"),
     "62:63"),  # half: converted
    (("store_widened(to + px * kPitch, from[px * kVectors]);", "store_widened(to + px * kRingChannels, from[px * kVectors]);"),
     "62:63"),  # ... at the pitch of float's rows
    (("for (int q = 0; q < kWindow; ++q) window[q] = in_row[q * kPitch];",
      "for (int q = 0; q < kWindow; ++q) window[q] = in_row[q * kRingChannels];"), "62:63"),  # ... and read so
    (("partial_bias[static_cast<int64_t>(blockIdx.y) * channels + c0 + channel] = totals[kTaps];",
      "partial_bias[c0 + channel] = totals[kTaps];"), "62:63"),  # every slice's bias sums over the first's
    # ... and both kernels' tap sums stored as one run a block (store_partial_run):
    (("  __syncthreads();\n  const int threads = blockDim.x * blockDim.y * blockDim.z;",
      "  const int threads = blockDim.x * blockDim.y * blockDim.z;"), "63:64"),  # the run stored before it is put
    (("acc_t* const run = partial + (static_cast<int64_t>(blockIdx.y) * channels + c0) * kTaps;",
      "acc_t* const run = partial + static_cast<int64_t>(c0) * kTaps;"), "62:63"),  # every slice's over the first's
    (("const int run_values = smaller(kRingChannels, channels - c0) * kTaps;",
      "const int run_values = kRingChannels * kTaps;"), "63:64"),  # a last block of 8 channels storing 32
    (("if (i < count) scratch[channel * kTaps + first + i] = values[i];",
      "if (i < count) scratch[channel * kTaps + i] = values[i];"), "59:60"),  # the ring's kernel rows on one
    (("store_partial_run<kTaps>(sums, kKernel, kh * kKernel, lane == 0 && !bias_row,",
      "store_partial_run<kTaps>(sums, kKernel, kh * kKernel, lane == 0,"), "60:61"),  # the ring's bias row as taps
    # ... its steps on the padding, skipped but for the bias:
    (("const bool meets_plane = step_row + kStride > 0 && step_row < src_h;",
      "const bool meets_plane = step_row > 0 && step_row < src_h;"), "68:70"),  # the plane's first row
    (("const bool meets_plane = step_row + kStride > 0 && step_row < src_h;",
      "const bool meets_plane = step_row + kStride > 0 && step_row + 1 < src_h;"), "68:70"),  # ... its last
    (("          if (s < rows) {\n            const acc_t* const go_row", "          if (s < 0) {\n            const acc_t* const go_row"),
     "68:70"),  # their grad_output rows' bias sums
    (("const acc_t* const go_row = go_ring + (go_slot * w.staged_w + x) * kPitch + channel;\n#pragma unroll\n            for",
      "const acc_t* const go_row = go_ring + go_slot * w.staged_w * kPitch + channel;\n#pragma unroll\n            for"),
     "68:70"),  # ... read at the first chunk
    # `within`, the bounds test of the staging and the copies, taking negative coordinates as outside:
    (("return static_cast<Unsigned>(i) < static_cast<Unsigned>(extent);", "return i < extent;"), "0:1"),
    # bfloat16 vectors widened a 32-bit word at a time (the full build: the float-only one has none):
    (("values[2 * i + 1] = float_from_bits(words[i] & 0xffff0000u);",
      "values[2 * i + 1] = float_from_bits(words[i] << 16);"), "62:63"),  # a word's high value
    (("values[2 * i] = float_from_bits(words[i] << 16);", "values[2 * i] = float_from_bits(words[i]);"),
     "62:63"),  # its low value with the high one's bits beneath
    # The pixel kernels (small grids: every case the launches of a very large GPU hold):
    (("const int tap = kBackward ? kTaps - 1 - t : t;", "const int tap = t;"), "12:13"),  # channels_last, unflipped
    (("w[t] = filter[kBackward ? kTaps - 1 - t : t];", "w[t] = filter[t];"), "0:1"),  # NCHW, unflipped
    (("const int flat = k * kTaps + tap;", "const int flat = tap * V + k;"), "12:13"),  # the weights read as [tap][channel]
    (("load(kh * kKernel + kw, within(sy, src_h) && within(sx, src_w), sy * src_w + sx);",
      "load(kh * kKernel + kw, within(sy, src_h), sy * src_w + sx);"), "12:13"),  # a column's padding read
    (("const int top = y * kStride - g.pad_h;", "const int top = y - g.pad_h;"), "13:14"),  # stride 2's rows
    (("const int c0 = (kChannelsLast ? walk.at[3] : walk.at[1]) * V;",
      "const int c0 = kChannelsLast ? walk.at[3] : walk.at[1];"), "12:13"),  # a group's first channel
    (("if (item >= items) return;", "if (item > items) return;"), "11:12"),  # a thread past the last pixel
    (("dim3(static_cast<unsigned>((items + threads - 1) / threads))", "dim3(static_cast<unsigned>(items / threads))"),
     "11:12"),  # the last block, part-filled, left out
    # ... at 7x7 in channels_last, a round a window row:
    (("!(round > 0 && pixel_round_uses_weights<kKernel, kRoundRows, V, kBackward>(vector, round - 1));",
      "!(round > 0);"),
     "15:16"),  # the weight vectors first used after the first round never loaded
    (("const int step = kBackward ? kTaps - 1 - tap : tap;  // where the walk meets the tap", "const int step = tap;"),
     "15:16"),  # backward-input's weights loaded in the rounds of the unflipped walk
    (("if (t / kKernel / kRoundRows == round) in[t]", "if (t / kKernel / kRoundRows == 0) in[t]"),
     "15:16"),  # the first round's input rows only
    # The tensor-core channels_last kernel (bfloat16 and half: the full build's):
    (("if (total != total) {", "if (false) {"), "70:74"),  # a neighbour's inf x 0 left as NaN (one tile, two)
    (("nan_values |= std::uint32_t(d[t][r][v] != d[t][r][v]) << ((t * kMmaTaskRows + r) * 4 + v);",
      "nan_values |= std::uint32_t(d[t][r][v] != d[t][r][v]) << (r * 4 + v);"), "73:74"),  # the second tile's NaNs unmarked
    (("vector_filters[(2 * quad + k) * kTaps + (kBackward ? kTaps - 1 - tap : tap)]",
      "vector_filters[(2 * quad + k) * kTaps + tap]"), "71:72"),  # backward-input's NaN sums unflipped (grad_output's inf)
    (("bits_of(vector_filters[group * kTaps + (kBackward ? kTaps - 1 - tap : tap)]) << (16 * (group % 2))",
      "bits_of(vector_filters[group * kTaps + (kBackward ? kTaps - 1 - tap : tap)]) << (16 * (1 - group % 2))"),
     "71:72"),  # B off its diagonal
    (("bits_of(vector_filters[group * kTaps + (kBackward ? kTaps - 1 - tap : tap)])",
      "bits_of(vector_filters[group * kTaps + tap])"), "71:72"),  # backward unflipped
    (("weight + (inside ? c0 * kTaps + i * kMmaChannels : 0)", "weight + (inside ? i * kMmaChannels : 0)"),
     "71:72"),  # every channel group's filters copied from the first's
    (("paths.on(KernelPath::ChannelsLastMma) && is_16_byte_aligned(t.weight)", "paths.on(KernelPath::ChannelsLastMma)"),
     "0"),  # its filters' vector copies from a misaligned weight tensor
    (("Vec* const filters = ring + s.ring_rows * s.in_w * m.pitch;",
      "Vec* const filters = ring + (s.ring_rows - 1) * s.in_w * m.pitch;"), "71:72"),  # filters over the ring's last row
    (("pair_at[t] = (column + next_shift * m.pitch) * kVecBytes;", "pair_at[t] = column * kVecBytes;"),
     "71:72"),  # lanes 16-31 at the same shift
    (("if (row >= ring_bytes) row -= ring_bytes;", ""), "12:13"),  # window rows past the ring's end
    (("if constexpr (!kBackward) multiply_add_16x8x8<scalar_t>(d[t][r], ones, b_bias);", ""), "70:71"),  # no bias
    (("const int column = smaller(x_task + t * kMmaTilePixels + tile_pixel", "const int column = smaller(x_task + tile_pixel"),
     "73:74"),  # a task's second tile reading the first one's columns (case 72's strips, since v33's filters took
                # their bytes from the ring's 48 KB, are one tile a task)
    (("last_at[t] = (column + (kKernel - 1) * m.pitch) * kVecBytes;", "last_at[t] = (column + 2 * m.pitch) * kVecBytes;"),
     "74:75"),  # 5x5's last shift read at 3x3's
    (("smaller(x_task + t * kMmaTilePixels + tile_pixel, s.lanes_w - 1) * kStride * m.pitch + vec;",
      "smaller(x_task + t * kMmaTilePixels + tile_pixel, s.lanes_w - 1) * m.pitch + vec;"),
     "65:66"),  # stride 2's pixels read at stride 1's columns
    (("if ((i - kh) % kStride != 0) continue;", ""), "65:66"),  # stride 2: a window row met by every filter row
    (("for (int kw = 0; kw + 1 < kKernel; kw += 2) {\n            std::uint32_t words[4];",
      "for (int kw = 0; kw + 1 < kKernel && kw < 4; kw += 2) {\n            std::uint32_t words[4];"),
     "54:55"),  # 7x7's third pair of shifts not loaded
    # The plane-streamed NCHW kernel (float planes of 32x32 or less, cases 94-98):
    (("weight[c * kTaps + (kBackward ? kTaps - 1 - i : i)]", "weight[c * kTaps + i]"), "94:95"),  # backward unflipped
    (("const int c = (first + slot) % channels;", "const int c = slot % channels;"), "94:95"),  # every chunk channel 0..
    (("if (!kBackward && bias != nullptr) start", "if (false) start"), "94:95"),  # no bias
    (("x[q] = row_inside && (columns_inside >> q & 1u) ?", "x[q] = row_inside ?"), "94:95"),  # a column's padding read
    (("const bool row_inside = within(y, src_h);", "const bool row_inside = y >= 0;"), "94:95"),  # rows past the plane read
    (("first_row(y0 * kStride - g.pad_h)", "first_row(y0 - g.pad_h)"), "96:97"),  # stride 2's rows
    (("copy_chunk(chunk + gridDim.x, buffer ^ 1);", "copy_chunk(chunk + gridDim.x, buffer);"),
     "94:95"),  # the next chunk copied over the one being read
    (("wait_async_copies<1>();\n    __syncthreads();  // every thread's copies of the chunk have landed",
      "wait_async_copies<2>();\n    __syncthreads();  // every thread's copies of the chunk have landed"),
     "94:95"),  # the chunk read before it has landed
    (("const int planes = smaller(s.planes, total_planes - first);", "const int planes = s.planes;"),
     "94:95"),  # the last chunk's missing planes computed and stored past the tensor
    (("scalar_t* const to = dst + static_cast<int64_t>(first) * dst_plane;",
      "scalar_t* const to = dst + static_cast<int64_t>(first) * src_plane;"), "96:97"),  # stride 2's chunks at src's places
    (("smaller(fitting / quantum * quantum, total_planes)", "smaller(fitting, total_planes)"),
     "96:97"),  # chunks that are not whole vectors
    (("__syncthreads();  // every thread's copies of the chunk have landed", "// barrier removed"),
     "94:95"),  # a chunk read as other threads' copies land
    (("__syncthreads();  // the chunk's outputs are all in out_buffer", "// barrier removed"),
     "94:95"),  # outputs stored before other threads have written them
    # Its vector rows (v50):
    (("for (int q = src_w; q % V != 0; ++q) rows_at[r * pitch + q] = scalar_t(0);", ""),
     "100:101"),  # rows' tails left unzeroed
    (("column -= row_units;\n          ++row;", "column -= row_units;"), "94:95"),  # a copy's row not stepped on a wrap
    (("load_vector_or_zero(row_inside && (columns_inside >> j & 1u),", "load_vector_or_zero(row_inside,"),
     "94:95"),  # the vector before a row's first read
    (("constexpr int kLead = kVectorRows ? V - K / 2 : 0;", "constexpr int kLead = kVectorRows ? V - 1 : 0;"),
     "97:98"),  # 5x5's window read from 3x3's place in its vectors
    (("in_buffers + buffer * chunk_src + slot * src_h * s.pitch;", "in_buffers + buffer * chunk_src + slot * src_plane;"),
     "94:95"),  # planes read at the flat planes' places
    (("const size_t shared_bytes = plane_stream_shared_bytes(g, planes, stream.pitch, kBytes);",
      "const size_t shared_bytes = plane_stream_shared_bytes(g, planes, g.src_w, kBytes);"),
     "94:95"),  # shared memory for flat planes given to padded rows
    (("copy_async_8(at, from + e * 2);", "copy_async_8(at, from + e * V);"), "94:95"),  # pairs copied from vectors' places
    # The plane-streamed weight gradient (v51; cases 94-105):
    (("copy_entry(n + 1, buffer ^ 1);", "copy_entry(n + 1, buffer);"), "94:95"),  # the next entry over the one summed
    (("__syncthreads();  // no thread reads entry n's buffers any more", "// barrier removed"),
     "94:95"),  # an entry's buffers refilled while other threads sum them
    (("const int64_t first_plane = n * channels + group_first;", "const int64_t first_plane = n * channels;"),
     "94:95"),  # every group reading the first group's planes
    (("if (kEdge && y0 + i >= dst_h) return;", ""), "103:104"),  # grad_output rows past the plane, 0 x inf
    (("if (kEdge && x0 + j >= dst_w) break;", ""), "100:101"),  # ... and columns
    (("for (int j = 0; j < kBlockCols; ++j) sums[kBiasSum] += go[i][j];", ""), "94:95"),  # no bias gradient
    (("const bool go_rows_of_vectors = dst_w % kBlockCols == 0;", "const bool go_rows_of_vectors = true;"),
     "94:95"),  # grad_output rows of 14 read as vectors (off 16-byte boundaries)
    (("load_vector_or_zero(y0 + i < dst_h, go_row);", "load_vector_or_zero(true, go_row);"),
     "103:104"),  # grad_output rows past the plane summed for the bias
    (("for (int t = 1; t < s.tiles; ++t) total += tile_sums[t];",
      "for (int t = 1; t + 1 < s.tiles; ++t) total += tile_sums[t];"), "94:95"),  # a channel's last tile left out
    (("const int64_t at = static_cast<int64_t>(blockIdx.y) * channels + group_first + channel;",
      "const int64_t at = static_cast<int64_t>(blockIdx.y) * channels + channel;"), "94:95"),  # sums at group 0's
    (("__syncthreads();  // the round before's totals have all been read", "// barrier removed"),
     "95:96"),  # a round's sums written over the round before's as they are read
    (("if (g.dst_channels % quantum != 0) return std::nullopt;", ""), "88:89"),  # groups off 16-byte boundaries
    (("for (; channel < group_planes; v += step_v, channel += step_channel) {",
      "for (; channel < s.planes; v += step_v, channel += step_channel) {"),
     "94:95"),  # the last group's sums of a full group's channels, written past the sums' end
]


# Headers whose kernels the float-only build compiles none of: their mutations go to the whole build.
HALF_TYPES_ONLY = {"ATen/native/cuda/DepthwiseConv2dChannelsLastMma.cuh", "ATen/native/cuda/DepthwiseConv2dMmaGradWeight.cuh"}

# The kernel headers whose kernels the emulator checks alone when built with DWCONV_EMULATE_ONLY (its
# KernelHeader names): a planted bug in one goes first to a build of that header's kernels, which
# takes half the time of the whole; the shared headers (Common, KernelChoice, Launch) reach every kernel.
HEADER_BUILDS = {f"ATen/native/cuda/DepthwiseConv2d{name}.cuh": name for name in (
    "General", "Conv1d", "RegisterTiled", "LargeFilter", "ChannelsLastStream", "ChannelsLastMma", "Pixel", "Stride2",
    "RingGradWeight", "WindowGradWeight", "WalkGradWeight", "MmaGradWeight", "PlaneStream")}


def builds_for(header: str) -> list[tuple[bool, str | None]]:
    """The builds, (float32_only, only_header), that a planted bug in `header` goes through in turn until
    one catches it: its header's own (float, then every type), then the whole emulator (the same), so
    that only a bug every build misses goes uncaught. Half-types-only kernels skip the float builds."""
    types = (False,) if header in HALF_TYPES_ONLY else (True, False)
    own = [(float32_only, header) for float32_only in types] if header in HEADER_BUILDS else []
    return own + [(float32_only, None) for float32_only in types]


def own_builds_with_cases() -> list[tuple[str, bool, str]]:
    """(header, float32_only, the cases of its planted bugs) of each header's own build."""
    cases = {}
    for (old, _), spec in MUTATIONS:
        cases.setdefault(header_holding(old), []).append(spec)
    return [(header, float32_only, ",".join(sorted(set(cases[header]))))
            for header in HEADER_BUILDS if header in cases
            for float32_only, only in builds_for(header) if only]


def header_holding(text: str) -> str:
    """The one kernel header that holds `text`, once."""
    holders = [header for header in KERNEL_HEADERS if text in (OURS / header).read_text()]
    assert len(holders) == 1 and (OURS / holders[0]).read_text().count(text) == 1, \
        f"the kernels changed: {text!r} is not once in {KERNEL_HEADERS}"
    return holders[0]


def mutated_header(tmp_path: Path, mutation: tuple[str, str]) -> tuple[Path, str]:
    """(an include root holding the one kernel header `mutation` changes, with the change made,
    that header's name), for the emulator's build ahead of OURS."""
    old, new = mutation
    header = header_holding(old)
    mutated = tmp_path / "src"
    (mutated / header).parent.mkdir(parents=True)
    (mutated / header).write_text((OURS / header).read_text().replace(old, new))
    return mutated, header


def run_mutated(tmp_path: Path, mutation: tuple[str, str], cases: str, prelude: Path | None = None):
    """The emulator built from the kernels with `mutation` made, run over `cases`, through
    builds_for(its header) until one fails."""
    mutated, header = mutated_header(tmp_path, mutation)
    for float32_only, only_header in builds_for(header):
        binary = build(tmp_path, [mutated, OURS], PLANTED_BUG_OPTIMIZATION, float32_only,  # the mutated header first
                       only_header=only_header, prelude=prelude)
        proc, _, failed = run(binary, cases)
        if failed > 0:
            break
    return proc, failed


def run_unmutated(tmp_path: Path, header: str, float32_only: bool, cases: str, prelude: Path | None = None):
    """A header's own build from the kernels as they are, run over the cases of its planted bugs."""
    return run(build(tmp_path, [OURS], PLANTED_BUG_OPTIMIZATION, float32_only, only_header=header, prelude=prelude),
               cases)


# Barriers whose removal no order of the emulator's shows (every case of the sweep passes without
# them: a warp meeting holds the writer back until the readers have read), each with a case that
# reaches it: the race check must report each.
RACE_MUTATIONS = [
    (("__syncthreads();  // no thread still reads warp_sums", "// barrier removed"), "1"),  # the next taps' sums
    (("__syncthreads();  // lane_totals is written again next round", "// barrier removed"), "21"),  # v39's finish
]


def run_race_mutated(tmp_path: Path, mutation: tuple[str, str], cases: str):
    """The emulator built with ThreadSanitizer from the kernels with `mutation` made, run over `cases`,
    through builds_for(its header) until one reports a race (a whole build takes 90 s, a header's
    float build a fraction of it)."""
    mutated, header = mutated_header(tmp_path, mutation)
    for float32_only, only_header in builds_for(header):
        binary = build(tmp_path, [mutated, OURS], float32_only=float32_only, race_checked=True, only_header=only_header)
        proc, _, failed = run(binary, cases)
        if proc.returncode == RACE_REPORTED:
            break
    return proc, failed


# The sweep's cases that `make test` runs under the race check: every kernel checked and dispatched,
# the streamed and tensor-core kernels at 3x3, 5x5 and 7x7 with inf and NaN, the ring and window
# weight gradients, channel multipliers (the backward-inputs' loops over a group's members), a
# thread group's blocks going on to a next item and the plane stream's blocks walking chunks, of
# flat planes and of vector rows at both strides (about
# 4 minutes of CPU, at nice 19 beside the other tests). `make race-check` runs the whole sweep
# (DWCONV_RACE_CASES=:, about 45 minutes).
RACE_CASES = os.environ.get(
    "DWCONV_RACE_CASES", "1,4,8,9,11,12,14,18,19,23,29,35,38,39,50,52,57,58,61,62,63,66,68,75,88,90,94,96,99,102,114")
RACE_SWEEP = "race-checked sweep"  # its key among the runs started early


def run_race_checked(tmp_path: Path, cases: str, include_roots: tuple[Path, ...] = (OURS,)):
    """The emulator built with ThreadSanitizer from the headers in include_roots, run over `cases`."""
    proc, _, failed = run(build(tmp_path, list(include_roots), race_checked=True), cases)
    return proc, failed


EARLY_RUNS = pytest.StashKey[dict]()


def early_key(mutation: tuple[str, str], cases: str, race_checked: bool) -> tuple:
    """A planted bug's key among the runs started early."""
    return (mutation, cases, race_checked)


def _lowest_priority() -> None:
    """Nice 19 for the calling thread and the processes it starts (Linux keeps a nice value a thread)."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def start_early(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Starts the race-checked sweep and the selected mutations' builds and runs on every core, at
    nice 19, as soon as the session is collected (tests/conftest.py): the other tests, which leave a
    core idle much of the time, keep the CPU first, and the tests of these runs, collected last, find
    most of them done."""
    planted = {"test_emulator_catches_broken_kernels": (run_mutated, False),
               "test_race_check_catches_what_no_order_shows": (run_race_mutated, True)}
    jobs = {}  # key: (function, its arguments after the work folder, whether it builds at -O0 on the prelude)
    if any(item.originalname == "test_kernels_leave_no_race_on_the_emulated_gpu" for item in items):
        jobs[RACE_SWEEP] = (run_race_checked, (RACE_CASES,), False)
    for item in items:
        if item.originalname in planted:
            function, race_checked = planted[item.originalname]
            mutation, cases = item.callspec.params["mutation"], item.callspec.params["cases"]
            jobs[early_key(mutation, cases, race_checked)] = (function, (mutation, cases), not race_checked)
        elif item.originalname == "test_a_header_s_own_build_passes_its_planted_bugs_cases_as_the_kernels_are":
            header, float32_only, cases = (item.callspec.params[name] for name in ("header", "float32_only", "cases"))
            jobs[unmutated_key(header, float32_only)] = (run_unmutated, (header, float32_only, cases), True)
    keys = list(jobs)
    work = tempfile.TemporaryDirectory(prefix="dwconv-mutations-")
    pool = None
    try:
        ensure_pinned_torch(load_pin(), cache_dir())  # unpacked here, once, before any build reads it
        on_prelude = any(with_prelude for _, _, with_prelude in jobs.values())
        prelude = precompiled_prelude(Path(work.name) / "prelude") if on_prelude else None
    except Exception as err:  # noqa: BLE001 - each mutation test reports it
        runs = {key: Future() for key in keys}
        for future in runs.values():
            future.set_exception(err)
    else:
        pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, initializer=_lowest_priority)
        runs = {key: pool.submit(function, Path(tempfile.mkdtemp(dir=work.name)), *args,
                                 **({"prelude": prelude} if with_prelude else {}))
                for key, (function, args, with_prelude) in jobs.items()}
    session.stash[EARLY_RUNS] = {"pool": pool, "work": work, "runs": runs}


def stop_early(session: pytest.Session) -> None:
    started = session.stash.get(EARLY_RUNS, None)
    if started:
        if started["pool"] is not None:
            started["pool"].shutdown(cancel_futures=True)  # after a failure under -x, the rest are not wanted
        started["work"].cleanup()


def unmutated_key(header: str, float32_only: bool) -> tuple:
    """A header's own build, unmutated, among the runs started early."""
    return ("unmutated", header, float32_only)


@pytest.fixture
def early_runs(request):
    """The race-checked sweep's run and each mutation's, started by start_early."""
    return request.session.stash[EARLY_RUNS]["runs"]


def test_mutation_builds_run_at_nice_19_and_their_tests_last(request):
    """What keeps the planted-bug builds out of the other tests' way: their processes run at nice 19
    (set a thread, inherited by what it starts), and their tests come after every other test."""
    own_nice = os.getpriority(os.PRIO_PROCESS, 0)
    with ThreadPoolExecutor(max_workers=1, initializer=_lowest_priority) as pool:
        child_nice = pool.submit(subprocess.run, ["nice"], capture_output=True, text=True, check=True).result().stdout
    assert child_nice.strip() == "19"
    assert os.getpriority(os.PRIO_PROCESS, 0) == own_nice  # the thread running the tests keeps its own
    items = request.session.items
    early = [i for i, item in enumerate(items) if item.get_closest_marker("started_early")]
    assert early == list(range(len(items) - len(early), len(items)))


@pytest.mark.started_early
def test_kernels_leave_no_race_on_the_emulated_gpu(early_runs):
    """Built with ThreadSanitizer, the kernels over RACE_CASES: no two accesses of a block's threads
    to one place, one a write, that no barrier orders, in shared or global memory."""
    proc, failed = early_runs[RACE_SWEEP].result()
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-20000:]
    assert failed == 0 and proc.returncode == 0, proc.stdout
    assert_every_kernel_reached(proc, least=1)


@pytest.mark.started_early
@pytest.mark.parametrize("mutation, cases", RACE_MUTATIONS)
def test_race_check_catches_what_no_order_shows(early_runs, mutation, cases):
    proc, failed = early_runs[early_key(mutation, cases, True)].result()
    assert failed == 0, proc.stdout  # every value right: no order of the emulator shows the bug
    # Every report is of the kernel the barrier was taken from (its stacks pass through that header).
    header = header_holding(mutation[0])
    reports = [text for text in proc.stderr.split("==================") if "WARNING: ThreadSanitizer" in text]
    assert proc.returncode == RACE_REPORTED and reports and all(Path(header).name in report for report in reports), \
        proc.stdout + proc.stderr


@pytest.mark.started_early
@pytest.mark.parametrize("mutation, cases", MUTATIONS)
def test_emulator_catches_broken_kernels(early_runs, mutation, cases):
    proc, failed = early_runs[early_key(mutation, cases, False)].result()
    assert failed > 0 and proc.returncode == 1, proc.stdout


def test_the_header_builds_are_the_emulators():
    """HEADER_BUILDS names the emulator's KernelHeader values, and every kernel header that defines a
    kernel has its own build, or is one every kernel includes."""
    source = (EMULATOR / "emulate_depthwise2d.cpp").read_text()
    values = re.search(r"enum class KernelHeader \{(.*?)\};", source, re.S).group(1)
    assert [value.strip()[1:] for value in values.split(",")] == ["All", *HEADER_BUILDS.values()]
    with_kernels = {header for header in KERNEL_HEADERS if "__global__ void" in (OURS / header).read_text()}
    assert with_kernels - set(HEADER_BUILDS) == {"ATen/native/cuda/DepthwiseConv2dCommon.cuh"}


@pytest.mark.started_early
@pytest.mark.parametrize("header, float32_only, cases", own_builds_with_cases())
def test_a_header_s_own_build_passes_its_planted_bugs_cases_as_the_kernels_are(early_runs, header, float32_only,
                                                                              cases):
    """What makes a planted bug's failures in its header's own build the bug's: the same build of the
    kernels as they are passes the same cases, having checked that header's kernels and dispatched none."""
    proc, passed, failed = early_runs[unmutated_key(header, float32_only)].result()
    assert failed == 0 and passed > 0 and proc.returncode == 0, proc.stdout
    assert re.search(r"^checked .+: \d+$", proc.stdout, re.M), proc.stdout
    assert "dispatched to" not in proc.stdout, proc.stdout


def test_the_planted_bug_builds_read_the_precompiled_prelude(tmp_path):
    """GCC falls back to the header's text, silently, where a precompiled header does not fit the
    build's flags: then every planted-bug build parses torch's headers again."""
    prelude = precompiled_prelude(tmp_path / "prelude")
    proc = subprocess.run(["g++", *compile_flags(PLANTED_BUG_OPTIMIZATION, [tmp_path / "mutated", OURS]), "-include",
                           str(prelude), "-DDWCONV_EMULATE_FLOAT32_ONLY", "-DDWCONV_EMULATE_ONLY=WalkGradWeight",
                           "-fsyntax-only", "-H", str(EMULATOR / "emulate_depthwise2d.cpp")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    included = proc.stderr.splitlines()
    assert included[0] == f"! {prelude}.gch", included[:3]
    assert not any(line.endswith(("c10/util/Half.h", "cuda_emulation.h")) for line in included), included
