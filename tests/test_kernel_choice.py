"""Which kernel the host code chooses for each pass (DepthwiseConv2dKernelChoice.cuh, run on the
CPU through tests/emulator/kernel_choice.cpp), against what the GPU tests expect the profiler to
see (tests/gpu/kernel_cases.py): an expectation the choice no longer meets fails here, without a
GPU. Each is checked in every dtype and for GPUs of 108, 114 and 132 SMs (A100, H100 PCIe, H100
SXM and H200), so that no GPU test depends on the GPU it runs on."""

import re
import subprocess
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.pin import load_pin
from build_scripts.wheel_cache import cache_dir, ensure_pinned_torch
from tests.gpu import kernel_cases

pytestmark = pytest.mark.l0  # the pinned torch's c10 headers and library

EMULATOR = Path(__file__).parent / "emulator"
OURS = REPO_ROOT / "patches" / "files" / "aten" / "src"
KERNEL_SOURCES = [OURS / "ATen/native/cuda" / name for name in ("DepthwiseConv2dKernels.cuh", "DepthwiseConv2dStride2.cuh")]
DTYPES = {"double": 8, "float": 4, "half": 2, "bfloat16": 2}
SM_COUNTS = (108, 114, 132)


@pytest.fixture(scope="module")
def kernel_choice(tmp_path_factory) -> Path:
    torch = ensure_pinned_torch(load_pin(), cache_dir())
    binary = tmp_path_factory.mktemp("kernel_choice") / "kernel_choice"
    subprocess.run(
        ["g++", "-std=c++20", "-O1", "-pthread", f"-I{OURS}", f"-I{EMULATOR}", *[f"-I{d}" for d in torch.include_dirs],
         str(EMULATOR / "kernel_choice.cpp"), "-o", str(binary), f"-L{torch.lib_dir}", "-lc10",
         f"-Wl,-rpath,{torch.lib_dir}"],
        check=True, capture_output=True, text=True,
    )
    return binary


def query_line(dtype: str, pass_: str, call: kernel_cases.Call, sm_count: int, disabled=()) -> str:
    n, c, (h, w), (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (
        call.n, call.c, call.size, call.kernel, call.stride, call.padding, call.dilation)
    fields = [dtype, pass_, call.layout, n, c, h, w, call.multiplier, kh, kw, sh, sw, ph, pw, dh, dw,
              call.input_offset, call.grad_output_offset, sm_count, ",".join(disabled) or "-"]
    return " ".join(str(f) for f in fields)


def choose(binary: Path, lines: list[str]) -> list[str]:
    proc = subprocess.run([str(binary)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    chosen = proc.stdout.splitlines()
    assert len(chosen) == len(lines), proc.stdout[-2000:]
    return chosen


def unmet(binary: Path, expectations_of) -> list[str]:
    """Every (dtype, SM count, expectation, pass, kernel) whose expectation the choice does not meet."""
    checks, lines = [], []
    for dtype, element_size in DTYPES.items():
        for expectation in expectations_of(element_size):
            for pass_, kernels in expectation.launches.items():
                for sm_count in SM_COUNTS:
                    lines.append(query_line(dtype, pass_, expectation.call, sm_count, expectation.disabled))
                    checks.append((dtype, sm_count, expectation, pass_, kernels))
    failures = []
    for (dtype, sm_count, expectation, pass_, kernels), chosen in zip(checks, choose(binary, lines)):
        for kernel, expected in kernels.items():
            if (chosen == kernel) != expected:
                off = f" with {', '.join(expectation.disabled)} off" if expectation.disabled else ""
                failures.append(f"{dtype}, {sm_count} SMs, {expectation.call.label!r}{off}: {pass_} runs {chosen}, "
                                f"the GPU test expects {kernel} {'to' if expected else 'not to'} run")
    return failures


@pytest.mark.parametrize("test_name", sorted(kernel_cases.KERNEL_CHOICE_TABLES))
def test_the_gpu_tests_expect_the_kernels_the_host_code_chooses(kernel_choice, test_name):
    failures = unmet(kernel_choice, kernel_cases.KERNEL_CHOICE_TABLES[test_name])
    assert not failures, "\n".join(failures)


def test_each_kernel_path_switched_off_hands_its_passes_to_another_kernel(kernel_choice):
    failures = unmet(kernel_choice, kernel_cases.kernel_path_expectations)
    assert not failures, "\n".join(failures)


def test_there_is_a_kernel_path_case_for_every_path():
    header = (OURS / "ATen/native/cuda/DepthwiseConv2dKernelPaths.h").read_text()
    names_block = re.search(r"kKernelPathNames = \{(.*?)\};", header, re.S).group(1)
    assert sorted(row[0] for row in kernel_cases.KERNEL_PATH_ROWS) == sorted(re.findall(r'"(\w+)"', names_block))


def test_the_names_the_choice_gives_are_the_kernels_and_the_gpu_tests_use_them(kernel_choice):
    names = subprocess.run([str(kernel_choice), "--names"], capture_output=True, text=True, check=True).stdout.split()
    sources = "\n".join(path.read_text() for path in KERNEL_SOURCES)
    bounds = r"__launch_bounds__\((?:[^()]|\([^()]*\))*\)"  # one level of parentheses inside, as in sizeof(...)
    defined = set(re.findall(rf"__global__\s+void\s+(?:{bounds}\s+)?(\w+)\s*\(", sources))
    assert len(names) == 17 and set(names) <= defined, set(names) - defined
    assert defined - set(names) == {"grad_weight_finish_kernel"}  # it follows every weight-gradient kernel
    constants = {value for key, value in vars(kernel_cases).items() if key.isupper() and isinstance(value, str)}
    assert constants <= set(names), constants - set(names)


def test_the_choice_of_a_call_depends_on_what_the_call_says(kernel_choice):
    """The checks above would pass vacuously if the driver ignored its input: the same shape takes
    the register-tiled kernel, the general tiled one or the direct one as its layout, alignment,
    filter and switches say."""
    call = kernel_cases.Call("probe", 2, 64, (20, 33), 3, padding=1, layout="cl")
    moved = kernel_cases.Call("probe", 2, 64, (20, 33), 3, padding=1, layout="cl", input_offset=1)
    lines = [query_line("float", "forward", call, 132), query_line("float", "forward", moved, 132),
             query_line("float", "forward", call, 132, ["channels_last_register_tiled"]),
             query_line("float", "forward", kernel_cases.Call("probe", 2, 64, (20, 33), 3, padding=1), 132),
             query_line("float", "grad-weight", call, 132)]
    assert choose(kernel_choice, lines) == [
        kernel_cases.CHANNELS_LAST_REGISTER_TILED, kernel_cases.DIRECT, kernel_cases.CHANNELS_LAST_TILED,
        kernel_cases.REGISTER_TILED, kernel_cases.CHANNELS_LAST_GRAD_WEIGHT]


def test_the_sanitizer_subset_runs_every_kernel(kernel_choice):
    """tests/gpu/sanitizer_subset.py's calls (float32 and bfloat16, both layouts, all three passes)
    reach every kernel the choice can give, on each GPU size: none escapes memcheck and racecheck."""
    names = set(subprocess.run([str(kernel_choice), "--names"], capture_output=True, text=True, check=True).stdout.split())
    for sm_count in SM_COUNTS:
        lines = [query_line(dtype, pass_, kernel_cases.Call("sanitizer", n, c, (h, w), kernel, stride, padding, dilation,
                                                             m, layout), sm_count)
                 for dtype in ("float", "bfloat16")
                 for n, c, m, h, w, kernel, stride, padding, dilation in kernel_cases.SANITIZER_CASES
                 for layout in ("nchw", "cl") for pass_ in kernel_cases.PASSES]
        missed = names - set(choose(kernel_choice, lines))
        assert not missed, f"{sm_count} SMs: the sanitizer subset never runs {sorted(missed)}"


@pytest.mark.parametrize("line, message", [
    ("float forward cl 2 64 20 33", "malformed call line"),
    ("float sideways cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 132 -", "pass must be forward, backward-input or grad-weight"),
    ("float forward nhwc 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 132 -", "layout must be nchw or cl"),
    ("int forward cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 132 -", "dtype must be double, float, half or bfloat16"),
    ("float forward cl 2 64 20 33 1 3 3 1 1 1 1 1 1 0 0 132 rows", "no kernel path is named rows"),
    ("float forward cl 2 64 2 2 1 3 3 1 1 0 0 1 1 0 0 132 -", "the output would be empty"),
])
def test_the_driver_refuses_a_bad_line_by_name(kernel_choice, line, message):
    proc = subprocess.run([str(kernel_choice)], input=line + "\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout.startswith("error: ") and message in proc.stdout, proc.stdout


def bench_query(problem, pass_: str, sm_count: int) -> str:
    """The driver's line for one pass of a `make bench` problem (build_scripts/bench/layers.py)."""
    layer = problem.layer
    dtype = {"float32": "float", "bfloat16": "bfloat16", "float16": "half"}[problem.dtype]
    layout = "cl" if problem.layout == "channels_last" else "nchw"
    if layer.conv1d:  # (N, C, L) as the (N, C, 1, L) the 2D kernels see
        size, kernel, stride, padding = (1, layer.length), (1, layer.kernel), (1, layer.stride), (0, layer.pad)
    else:
        size, kernel, stride, padding = (layer.length, layer.length), layer.kernel, layer.stride, layer.pad
    call = kernel_cases.Call(layer.name, problem.batch, layer.channels, size, kernel, stride, padding, 1, 1, layout)
    return query_line(dtype, pass_, call, sm_count)


def intended_kernel(problem, pass_: str) -> str:
    """The kernel written for each bench layer's pass: the conv1d row (NCHW) and column
    (channels_last) kernels for Mamba, the large-filter kernels for RepLKNet, and the register
    tiles (the stride-2 kernels for backward-input at stride 2) for the rest."""
    layer, cl = problem.layer, problem.layout == "channels_last"
    k = kernel_cases
    if layer.conv1d:
        return {"grad-weight": k.COLUMN_GRAD_WEIGHT if cl else k.ROW_GRAD_WEIGHT}.get(pass_, k.COLUMN if cl else k.ROW)
    if layer.kernel > 7:
        return k.LARGE_FILTER_GRAD_WEIGHT if pass_ == "grad-weight" else k.LARGE_FILTER
    if pass_ == "grad-weight":
        return k.CHANNELS_LAST_GRAD_WEIGHT if cl else k.REGISTER_TILED_GRAD_WEIGHT
    if pass_ == "backward-input" and layer.stride == 2:
        return k.STRIDE2_CHANNELS_LAST if cl else k.STRIDE2_NCHW
    return k.CHANNELS_LAST_REGISTER_TILED if cl else k.REGISTER_TILED


def test_every_bench_layer_runs_the_kernel_written_for_it(kernel_choice):
    """Every pass `make bench` times, in every configuration and batch, is taken by the kernel
    written for its layer, never a general one: a planner change that sends a bench layer back to
    the general kernels (a tile outgrowing shared memory, a use threshold) fails here, before GPU
    time is spent timing it."""
    from build_scripts.bench.layers import problems

    checks, lines = [], []
    for problem in problems():
        passes = ("forward",) if problem.passes == ("forward",) else kernel_cases.PASSES
        for pass_ in passes:
            for sm_count in SM_COUNTS:
                checks.append((problem, pass_, sm_count))
                lines.append(bench_query(problem, pass_, sm_count))
    assert len(checks) > 1000
    failures = [f"{p.layer.set} {p.layer.name} batch {p.batch} {p.dtype} {p.layout}, {sm} SMs: {pass_} runs {chosen}, "
                f"not {intended_kernel(p, pass_)}"
                for (p, pass_, sm), chosen in zip(checks, choose(kernel_choice, lines)) if chosen != intended_kernel(p, pass_)]
    assert not failures, "\n".join(failures)
