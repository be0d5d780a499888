"""Which kernel each pass `make bench` times runs, and the launch it gets, before any GPU time.

The host code's choice (DepthwiseConv2dKernelChoice.cuh) and launch shapes
(DepthwiseConv2dLaunch.cuh's launch_shape) are plain C++: tests/emulator/kernel_choice.cpp
compiles them with g++ against the pinned torch's c10 and answers one call a line. The report
gives, per bench problem and pass, the kernel, its grid, block and dynamic shared memory, how
many of its blocks an SM can hold, and so the waves the grid takes: what a bench figure far below
the byte floor is first checked against. Blocks an SM are counted by threads and shared memory,
and with REGISTERS=1 by registers too: the compiler's report of the kernel's instance for the
pass's dtype, filter and stride (L0 keeps it; `make resource-report` shows it), which is where
a kernel holding K^2 sums a thread lost to one block an SM while this report still said four.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError

DRIVER = REPO_ROOT / "tests" / "emulator" / "kernel_choice.cpp"
KERNEL_SOURCES = REPO_ROOT / "patches" / "files" / "aten" / "src"
DRIVER_DTYPES = {"float64": "double", "float32": "float", "float16": "half", "bfloat16": "bfloat16"}
PASSES = ("forward", "backward-input", "grad-weight")
BOTH_GRADIENTS = "backward"  # the driver's pass for grad_input and grad_weight asked for together
KERNEL_PATHS_HEADER = KERNEL_SOURCES / "ATen" / "native" / "cuda" / "DepthwiseConv2dKernelPaths.h"


def kernel_path_names() -> list[str]:
    """The kernel paths DWCONV_DISABLE_KERNELS and the bench's ours-without-<path> take, in the
    header's order (kKernelPathNames)."""
    names = re.search(r"kKernelPathNames = \{(.*?)\};", KERNEL_PATHS_HEADER.read_text(), re.S)
    if names is None:
        raise HarnessError(f"{KERNEL_PATHS_HEADER}: no kKernelPathNames list")
    return re.findall(r'"(\w+)"', names.group(1))


@dataclass(frozen=True)
class SmLimits:
    """What one SM holds: threads, blocks, shared memory and the part of it the runtime reserves
    a block, and registers (the CUDA programming guide's table of compute capabilities)."""
    threads: int
    blocks: int
    shared_bytes: int
    reserved_per_block: int = 1024
    registers: int = 64 * 1024
    register_unit: int = 256  # registers are allocated to a warp in units of this many


SM_LIMITS = {
    "sm_80": SmLimits(threads=2048, blocks=32, shared_bytes=164 * 1024),  # A100
    "sm_86": SmLimits(threads=1536, blocks=16, shared_bytes=100 * 1024),  # RTX 30, A10, A40
    "sm_89": SmLimits(threads=1536, blocks=24, shared_bytes=100 * 1024),  # RTX 40, L4, L40
    "sm_90": SmLimits(threads=2048, blocks=32, shared_bytes=228 * 1024),  # H100, H200
}


@dataclass(frozen=True)
class Gpu:
    """A GPU as the host code plans for it (DepthwiseConv2dCommon.cuh's GpuLimits): its SMs, and
    what one holds."""
    sm_count: int
    arch: str = "sm_90"  # a key of SM_LIMITS

    def __post_init__(self):
        if self.sm_count < 1:
            raise HarnessError(f"a GPU has at least one SM, not {self.sm_count} "
                               f"(132 for an H100 SXM, 114 for a PCIe one, 108 for an A100)")
        if self.arch not in SM_LIMITS:
            raise HarnessError(f"no SM limits for {self.arch!r}: one of {', '.join(SM_LIMITS)}")

    @property
    def sm(self) -> SmLimits:
        return SM_LIMITS[self.arch]

    @property
    def code_arch(self) -> str:
        """The arch of the machine code it runs: the pin builds sm_80 and sm_90, and an sm_8x GPU
        runs sm_80's."""
        return "sm_80" if self.arch.startswith("sm_8") else self.arch

    @property
    def compute_capability(self) -> int:
        """major x 10 + minor: 90 for sm_90."""
        return int(self.arch.removeprefix("sm_"))

    def driver_field(self) -> str:
        """The driver's gpu field: SMs, then an SM's threads, blocks, registers, shared bytes and the
        shared bytes reserved a block, then the compute capability."""
        sm = self.sm
        return (f"{self.sm_count}:{sm.threads}:{sm.blocks}:{sm.registers}:{sm.shared_bytes}:{sm.reserved_per_block}"
                f":{self.compute_capability}")

    def __str__(self) -> str:
        return f"{self.sm_count} SMs of {self.arch}"


H100 = Gpu(132, "sm_90")  # SXM; the bench's GPU


def build_driver(directory: Path) -> Path:
    """The choice driver, compiled into `directory` (g++ and the pinned torch's c10)."""
    from .pin import load_pin
    from .wheel_cache import cache_dir, ensure_pinned_torch

    if shutil.which("g++") is None:
        raise HarnessError("g++ is not on PATH: the kernel choice is compiled with it (apt-get install g++)")
    torch = ensure_pinned_torch(load_pin(), cache_dir())
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "kernel_choice"
    proc = subprocess.run(
        ["g++", "-std=c++20", "-O1", "-pthread", f"-I{KERNEL_SOURCES}", f"-I{DRIVER.parent}",
         *[f"-I{d}" for d in torch.include_dirs], str(DRIVER), "-o", str(binary), f"-L{torch.lib_dir}", "-lc10",
         f"-Wl,-rpath,{torch.lib_dir}"],
        capture_output=True, text=True)
    if proc.returncode != 0:
        raise HarnessError(f"the kernel choice does not compile with g++:\n{proc.stderr[-3000:]}")
    return binary


def call_line(dtype: str, pass_: str, layout: str, n: int, c: int, size, kernel, stride, padding, dilation,
              multiplier: int = 1, input_offset: int = 0, grad_output_offset: int = 0, gpu: Gpu = H100,
              disabled=()) -> str:
    """One call as the driver reads it (kernel_choice.cpp's header): dtype is the driver's name
    (double, float, half, bfloat16), layout nchw or cl, the 2D parameters as (h, w) pairs."""
    (h, w), (kh, kw), (sh, sw), (ph, pw), (dh, dw) = size, kernel, stride, padding, dilation
    fields = [dtype, pass_, layout, n, c, h, w, multiplier, kh, kw, sh, sw, ph, pw, dh, dw, input_offset,
              grad_output_offset, gpu.driver_field(), ",".join(disabled) or "-"]
    return " ".join(str(f) for f in fields)


def bench_call_line(problem, pass_: str, gpu: Gpu) -> str:
    """The driver's line for one pass of a bench problem (build_scripts/bench/layers.py); conv1d
    is the 2D problem on (N, C, 1, L)."""
    layer = problem.layer
    layout = "cl" if problem.layout == "channels_last" else "nchw"
    if layer.conv1d:
        geometry = ((1, layer.length), (1, layer.kernel), (1, layer.stride), (0, layer.pad))
    else:
        geometry = ((layer.length,) * 2, (layer.kernel,) * 2, (layer.stride,) * 2, (layer.pad,) * 2)
    return call_line(DRIVER_DTYPES[problem.dtype], pass_, layout, problem.batch, layer.channels, *geometry, (1, 1),
                     gpu=gpu)


def problem_passes(problem) -> tuple[str, ...]:
    """The passes of a bench problem the kernels run: all three, or the forward pass for inference."""
    return ("forward",) if problem.passes == ("forward",) else PASSES


def registers_line(instance: str, count: int) -> str:
    """The driver's line saying a kernel instance (`k<float, int, 3, 2, false>`) takes `count` registers a
    thread: what the planners that count an instance's own registers ask for (GpuLimits::compiled_registers)."""
    return f"registers {instance} {count}"


def registers_lines(resources, arch: str) -> list[str]:
    """The driver's registers lines for the compiler's report rows of `arch`."""
    return [registers_line(row.name, row.registers) for row in resources if row.arch == arch and row.name]


def run_driver(binary: Path, lines: list[str], *args: str, preamble: list[str] = ()) -> list[str]:
    """The driver's answers to `lines`, a line each, after the `preamble` lines that answer nothing."""
    proc = subprocess.run([str(binary), *args], input="\n".join([*preamble, *lines]) + "\n", capture_output=True,
                          text=True, timeout=300)
    answers = proc.stdout.splitlines()
    if proc.returncode != 0 or len(answers) != len(lines):
        raise HarnessError(f"the kernel choice driver failed: {(proc.stdout + proc.stderr)[-2000:]}")
    return answers


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    bools: tuple[str, ...] | None = None  # the instance's bool template arguments, where the plan sets them
    args: tuple[str, ...] | None = None  # all its template arguments after the element type, where the plan sets them

    @classmethod
    def parse(cls, answer: str) -> "Launch":
        """A --plans answer: "<kernel> grid=X,Y,Z block=X,Y,Z shared=BYTES[ bools=B,...][ args=A,...]"."""
        kernel, *fields = answer.split()
        values = dict(field.split("=", 1) for field in fields)
        triple = lambda text: tuple(int(v) for v in text.split(","))  # noqa: E731
        listed = lambda key: tuple(values[key].split(",")) if key in values else None  # noqa: E731
        return cls(kernel, triple(values["grid"]), triple(values["block"]), int(values["shared"]), listed("bools"),
                   listed("args"))

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def blocks_per_sm(self, limits: SmLimits = H100.sm, registers: int | None = None) -> int:
        """How many of its blocks an SM holds by threads (whole warps) and shared memory, and by
        `registers` a thread where they are known."""
        warps = -(-self.threads // 32)
        by_shared = limits.shared_bytes // (self.shared_bytes + limits.reserved_per_block)
        held = min(limits.blocks, limits.threads // (warps * 32), by_shared)
        if registers is not None:
            warp_registers = -(-registers * 32 // limits.register_unit) * limits.register_unit
            held = min(held, limits.registers // (warps * warp_registers))
        return held

    def waves(self, gpu: Gpu = H100, registers: int | None = None) -> float:
        return self.blocks / (gpu.sm_count * max(1, self.blocks_per_sm(gpu.sm, registers)))


RESOURCE_DTYPES = {"float64": "double", "float32": "float", "float16": "Half", "bfloat16": "BFloat16"}


def template_arguments(instance: str) -> tuple[str, list[str]]:
    """`k<BFloat16, int, true, 3, 1>` -> ("k", ["BFloat16", "int", "true", "3", "1"])."""
    name, _, rest = instance.partition("<")
    return name, [a.strip() for a in rest.rstrip(">").split(",")] if rest else []


def instance_registers(resources, arch: str, problem, pass_: str, kernel: str,
                       bools: tuple[str, ...] | None = None, plan_args: tuple[str, ...] | None = None) -> int | None:
    """The registers of `kernel`'s instance for this pass of a bench problem, from the compiler's
    report (resource_report.KernelResources rows): the dtype's instance with the plan's template
    arguments after the element type (`plan_args`) where it gives them; else the dtype's 32-bit-index
    instances, with the plan's bool template arguments (`bools`) or else the pass's direction (and
    layout) where the kernel takes one, and among those the ones compiled for the layer's filter and stride (template
    integers drawn from its kernel size, stride, taps and padding parity); the most registers any
    of them takes. None where no instance matches."""
    layer = problem.layer
    # A kernel's bool template arguments: its direction, then (the pixel kernel's) its layout.
    wanted_bools = list(bools) if bools is not None else [
        "true" if pass_ == "backward-input" else "false", "true" if problem.layout == "channels_last" else "false"]
    plausible = {layer.kernel, layer.stride, layer.kernel * layer.kernel, layer.pad % 2}
    matching, compiled_for_layer = [], []
    for row in resources:
        name, args = template_arguments(row.name)
        if row.arch != arch or name != kernel or not args or args[0] != RESOURCE_DTYPES[problem.dtype]:
            continue
        if plan_args is not None:
            if tuple(args[1:]) == plan_args:
                return row.registers
            continue
        instance_bools = [a for a in args if a in ("true", "false")]
        if "long" in args or instance_bools != wanted_bools[:len(instance_bools)]:
            continue
        matching.append(row.registers)
        if all(int(a) in plausible for a in args if a.isdigit()):
            compiled_for_layer.append(row.registers)
    chosen = compiled_for_layer or matching
    return max(chosen) if chosen else None


def bench_launches(binary: Path, gpu: Gpu, set_names: list[str] | None = None,
                   configs_2d: tuple[tuple[str, str], ...] | None = None, resources=None):
    """(problem, pass, Launch) for every pass of every bench problem, planned for `gpu`; with
    `resources` (the compiler's report rows) the planners that count a kernel's own registers are
    given them, as the runtime gives them on the GPU."""
    from .bench.layers import problems

    preamble = [] if resources is None else registers_lines(resources, gpu.code_arch)
    keys = [(problem, pass_) for problem in problems(set_names, configs_2d) for pass_ in problem_passes(problem)]
    answers = run_driver(binary, [bench_call_line(p, pass_, gpu) for p, pass_ in keys], "--plans", preamble=preamble)
    launches = [(p, pass_, Launch.parse(answer)) for (p, pass_), answer in zip(keys, answers)]
    # A training step's backward asks for both gradients at once: where one kernel computes them, the
    # step runs it in place of the two gradients' passes ("<one>+<other>" where it runs those).
    steps = [p for p in problems(set_names, configs_2d) if problem_passes(p) == PASSES]
    both = run_driver(binary, [bench_call_line(p, BOTH_GRADIENTS, gpu) for p in steps], "--plans", preamble=preamble)
    launches += [(p, BOTH_GRADIENTS, Launch.parse(answer)) for p, answer in zip(steps, both) if "+" not in answer]
    return launches


def markdown(launches, gpu: Gpu, resources=None) -> str:
    """The report of launches planned for `gpu`; with `resources` (the compiler's report rows)
    blocks an SM count registers too, the kernel instance's for the arch of the code it runs."""
    sm = gpu.sm
    limits = (f"an {gpu.arch} SM: {sm.threads} threads, {sm.blocks} blocks, {sm.shared_bytes // 1024} KB, "
              f"{sm.reserved_per_block // 1024} KB reserved a block")
    if resources is None:
        held = (f"Blocks per SM: by threads and shared memory only ({limits}); registers may allow fewer "
                f"(`make plan-report REGISTERS=1`).")
    else:
        held = (f"Blocks per SM: by threads, shared memory and registers ({limits}, {sm.registers // 1024}K "
                f"registers; the kernel instance's registers for {gpu.code_arch} from the compiler's report, `-` "
                f"where none matched).")
    lines = [f"# Launch plans of the bench problems ({gpu})", "",
             held + " Waves: blocks / (SMs x blocks per SM).", "",
             "| set | layer | batch | dtype, layout | pass | kernel | grid | block | shared KB | registers | blocks/SM "
             "| waves |",
             "| --- | --- | ---: | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for problem, pass_, launch in launches:
        layer = problem.layer
        registers = (None if resources is None
                     else instance_registers(resources, gpu.code_arch, problem, pass_, launch.kernel, launch.bools,
                                             launch.args))
        lines.append(
            f"| {layer.set} | {layer.name} | {problem.batch} | {problem.dtype} {problem.layout} | {pass_} | "
            f"{launch.kernel} | {'x'.join(map(str, launch.grid))} | {'x'.join(map(str, launch.block))} | "
            f"{launch.shared_bytes / 1024:.1f} | {'-' if registers is None else registers} | "
            f"{launch.blocks_per_sm(sm, registers)} | {launch.waves(gpu, registers):.2f} |")
    return "\n".join(lines) + "\n"
