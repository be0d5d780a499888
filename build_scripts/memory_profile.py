"""The memory traffic of the kernels on the bench's layers, from the CPU emulator: for each pass, the
shared-memory wavefronts (bank conflicts) and global-memory sectors its warps' accesses take, against
the fewest they could, per place in the kernels' source. What Nsight Compute's memory tables would
say of those accesses, before any GPU time.

tests/emulator/emulate_depthwise2d.cpp is built with -fsanitize=thread -DDWCONV_MEMORY_PROFILE and
linked with tests/emulator/memory_profile_runtime.cpp, which counts the accesses (its header says
how). Each pass runs once as DepthwiseConv2d.cu runs it, at a small batch on a GPU of as many SMs
as keep the plan the H100 makes at the bench's batch (132 x batch / bench batch), and at larger
batches where the kernel, block or shared memory still differ from the H100's (LARGER_BATCHES): the
tile and ring shapes, which set the bank pattern, are the bench's. A pass whose plan never matched
says so. The emulator compiles the kernels for the CPU, so an
access it counts is the CPU compiler's: a lane's contiguous accesses within 16 bytes are taken as
one vector, which nvcc may leave as several.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import REPO_ROOT
from .bench.floor import pass_bytes
from .errors import HarnessError
from .plan_report import DRIVER_DTYPES

EMULATOR = REPO_ROOT / "tests" / "emulator"
KERNEL_SOURCES = REPO_ROOT / "patches" / "files" / "aten" / "src"
KERNEL_SOURCES_IN_BINARY = f"{KERNEL_SOURCES.relative_to(REPO_ROOT)}/"  # build(): paths relative to the repository
H100_SMS = 132
PASSES = ("forward", "backward-input", "backward-weight")
DEFAULT_BATCH = 2
# The profiled build: the instrumentation's calls at every access, function entry and exit and basic
# block, with blocks in source order (so that only loops jump back), for memory_profile_runtime.cpp.
PROFILED = ("-fsanitize=thread", "-fsanitize-coverage=trace-pc", "-fno-reorder-blocks", "-DDWCONV_MEMORY_PROFILE")
# A place worth a look: this many times the fewest wavefronts or sectors, and this share of its pass's.
EXCESS_RATIO = 1.25
EXCESS_SHARE = 0.02
# An H100 SXM SM's rates, to set a pass's counted work beside the time its bytes take through DRAM:
# shared memory serves a wavefront a clock and L1 4 sectors (128 bytes) a clock (the architecture's
# figures), DRAM 3.0 TB/s (11-22's measured copy bandwidth) over 132 SMs at 1.98 GHz. Estimates:
# Nsight Compute's calibration is owed (notes/performance.md).
SHARED_WAVEFRONTS_PER_CLOCK = 1.0
L1_SECTORS_PER_CLOCK = 4.0
DRAM_BYTES_PER_CLOCK = 3.0e12 / (H100_SMS * 1.98e9)


def build(directory: Path) -> Path:
    """The profiled emulator, compiled into `directory` (g++ and the pinned torch's c10), or copied
    from $DWCONV_CACHE/emulator-builds where one was built from the same files (output_cache.py)."""
    from .output_cache import cached_output, placeless, sources_digest
    from .pin import load_pin
    from .toolchain import compiler_version
    from .wheel_cache import cache_dir, ensure_pinned_torch

    for tool in ("g++", "addr2line"):
        if shutil.which(tool) is None:
            raise HarnessError(f"{tool} is not on PATH: the memory profile needs it (apt-get install g++ binutils)")
    torch = ensure_pinned_torch(load_pin(), cache_dir())
    directory.mkdir(parents=True, exist_ok=True)
    driver, runtime = directory / "emulate_depthwise2d.o", directory / "memory_profile_runtime.o"
    # Source paths relative to the repository in the binary (its debug lines, which name the places),
    # so that one build serves every checkout.
    relative_paths = f"-ffile-prefix-map={REPO_ROOT}/="

    def steps(binary: Path) -> list[list[str]]:
        return [
            ["g++", "-std=c++20", "-O1", "-g", "-pthread", *PROFILED, relative_paths,
             f"-I{KERNEL_SOURCES}", f"-I{EMULATOR}", *[f"-I{d}" for d in torch.include_dirs], "-c",
             str(EMULATOR / "emulate_depthwise2d.cpp"), "-o", str(driver)],
            ["g++", "-std=c++20", "-O2", "-c", str(EMULATOR / "memory_profile_runtime.cpp"), "-o", str(runtime)],
            # Linked without -fsanitize=thread: the runtime above answers the instrumentation's calls.
            ["g++", str(driver), str(runtime), "-o", str(binary), "-pthread", f"-L{torch.lib_dir}", "-lc10",
             f"-Wl,-rpath,{torch.lib_dir}"],
        ]

    def compile_to(binary: Path) -> None:
        for command in steps(binary):
            proc = subprocess.run(command, capture_output=True, text=True)
            if proc.returncode != 0:
                raise HarnessError(f"the profiled emulator does not build:\n{' '.join(command)}\n{proc.stderr[-3000:]}")

    commands = (" ".join(placeless(step, {str(directory): "<build>", str(REPO_ROOT): "<repo>"}))
                for step in steps(directory / "binary"))
    sources = [EMULATOR / "emulate_depthwise2d.cpp", EMULATOR / "memory_profile_runtime.cpp"]
    key = "\0".join([compiler_version("g++"), *commands, sources_digest(sources, [KERNEL_SOURCES, EMULATOR])])
    return cached_output(cache_dir() / "emulator-builds", key, directory / "emulate_depthwise2d_profiled", compile_to)


@dataclass(frozen=True)
class Job:
    """One pass of one 2D bench problem, as the emulator runs it."""
    label: str        # the bench problem's label
    pass_: str        # forward, backward-input or backward-weight
    channels: int
    size: int
    kernel: int
    stride: int
    dtype: str        # the driver's name
    layout: str       # nchw or nhwc
    batch: int        # emulated
    sms: int          # the emulated GPU's
    bench_batch: int  # whose H100 plan the run stands for
    floor_bytes: int = 0  # what the pass moves at the least at the bench's batch (bench.floor.pass_bytes)

    def at_batch(self, batch: int) -> "Job":
        """The same pass emulated at `batch`, on an H100 of as many SMs as keep its plan."""
        return replace(self, batch=batch, sms=max(1, round(H100_SMS * batch / self.bench_batch)))

    def arguments(self) -> list[str]:
        shape = f"{self.batch},{self.channels},{self.size},{self.kernel},{self.stride},{self.sms},{self.bench_batch}"
        return ["--layer", shape, self.dtype, self.layout, self.pass_]


def jobs_for(problems, passes=PASSES, batch: int = DEFAULT_BATCH) -> list[Job]:
    """The emulator's runs for bench problems (conv1d ones have none: the driver takes square 2D layers)."""
    pass_names = {"forward": "forward", "backward_input": "backward-input", "backward_weight": "backward-weight"}
    out = []
    for problem in problems:
        layer = problem.layer
        if layer.conv1d:
            continue
        for name in problem.passes:
            pass_ = pass_names.get(name)
            if pass_ in passes:
                job = Job(problem.label, pass_, layer.channels, layer.length, layer.kernel, layer.stride,
                          DRIVER_DTYPES[problem.dtype], "nhwc" if problem.layout == "channels_last" else "nchw",
                          problem.batch, H100_SMS, problem.batch, pass_bytes(problem, name))
                out.append(job.at_batch(min(batch, problem.batch)))
    return out


@dataclass
class Site:
    """One place in the kernels' source and one kind of access there, summed over a pass."""
    place: str
    space: str
    op: str
    bytes: int
    requests: int = 0
    cost: int = 0
    ideal: int = 0

    @property
    def ratio(self) -> float:
        return self.cost / self.ideal if self.ideal else 1.0


@dataclass
class PassProfile:
    job: Job
    kernel: str = ""       # the kernel that ran, with its block and dynamic shared memory
    h100_kernel: str = ""  # the H100's at the bench's batch, the same way
    checked: bool = False
    sites: list[Site] = field(default_factory=list)

    @property
    def kernel_name(self) -> str:
        return self.kernel.split(" ")[0]

    @property
    def stands_for_h100(self) -> bool:
        """Whether the H100's pass runs the same kernel with the same block and shared memory."""
        return self.kernel == self.h100_kernel

    def totals(self, space: str, ops: tuple[str, ...]) -> tuple[int, int]:
        chosen = [s for s in self.sites if s.space == space and s.op in ops]
        return sum(s.cost for s in chosen), sum(s.ideal for s in chosen)

    def space_cost(self, space: str) -> int:
        """The pass's wavefronts (shared) or sectors (global), every access of that memory."""
        return sum(s.cost for s in self.sites if s.space == space)

    def clocks(self, space: str, count: float) -> float:
        """The clocks an SM of the emulated GPU takes to serve `count` wavefronts (shared) or sectors (global)."""
        rate = SHARED_WAVEFRONTS_PER_CLOCK if space == "shared" else L1_SECTORS_PER_CLOCK
        return count / self.job.sms / rate

    def floor_clocks(self) -> float:
        """The clocks an SM takes to move its share of the pass's floor bytes through DRAM (0: unknown)."""
        job = self.job
        return job.floor_bytes * job.batch / job.bench_batch / job.sms / DRAM_BYTES_PER_CLOCK

    def on_chip_per_floor(self) -> float | None:
        """The busier of shared memory and L1 over the DRAM floor, in an SM's clocks: below 1, the
        pass's counted work fits in the time its bytes take through DRAM; None without a floor."""
        floor = self.floor_clocks()
        if not floor:
            return None
        return max(self.clocks(space, self.space_cost(space)) for space in ("shared", "global")) / floor

    def excess_per_floor(self, site: Site) -> float | None:
        """The clocks `site`'s wavefronts or sectors over its fewest take, over the DRAM floor's."""
        floor = self.floor_clocks()
        return self.clocks(site.space, site.cost - site.ideal) / floor if floor else None

    def worth_a_look(self) -> list[Site]:
        out = []
        for space in ("shared", "global"):
            total = self.space_cost(space) or 1
            out += [s for s in self.sites
                    if s.space == space and s.ratio >= EXCESS_RATIO and s.cost >= EXCESS_SHARE * total]
        return sorted(out, key=lambda s: -(s.cost - s.ideal))


def _short(path: str) -> str:
    return re.sub(r".*/ATen/native/cuda/", "", path)


def place_of(frames: list[tuple[str, str]]) -> str:
    """A place from an access's inlined frames, innermost first ((function, file:line) pairs): the
    innermost in the kernel sources, and where it is a helper of DepthwiseConv2dCommon.cuh, the
    kernel's line that called it."""
    ours = [_short(location.split(" (")[0]) for _, location in frames if KERNEL_SOURCES_IN_BINARY in location]
    if not ours:
        return "(outside the kernels)"
    caller = next((p for p in ours if not p.startswith("DepthwiseConv2dCommon.cuh")), None)
    return ours[0] if caller is None or caller == ours[0] else f"{ours[0]} < {caller}"


def symbolize(binary: Path, addresses: list[str]) -> dict[str, str]:
    if not addresses:
        return {}
    proc = subprocess.run(["addr2line", "-e", str(binary), "-f", "-i", "-a", *addresses],
                          capture_output=True, text=True, check=True)
    # Each address's line (as addr2line -a prints it), then its inlined frames as (function, file:line).
    asked = {f"0x{int(address, 16):016x}": address for address in addresses}
    places, frames, current = {}, [], None
    lines = proc.stdout.splitlines()
    i = 0
    while i < len(lines):
        if lines[i] in asked:
            if current is not None:
                places[current] = place_of(frames)
            current, frames = asked[lines[i]], []
            i += 1
            continue
        frames.append((lines[i], lines[i + 1] if i + 1 < len(lines) else "??:0"))
        i += 2
    if current is not None:
        places[current] = place_of(frames)
    return {address: places.get(address, "?") for address in addresses}


def parse_table(text: str, binary: Path) -> list[Site]:
    rows = [line.split("\t") for line in text.splitlines()[1:] if line]
    addresses = sorted({row[0][3:] for row in rows if row[0].startswith("pc:")})
    places = symbolize(binary, addresses)
    merged: dict[tuple, Site] = {}
    for site, space, op, size, requests, cost, ideal in rows:
        place = places[site[3:]] if site.startswith("pc:") else _short(site)
        key = (place, space, op, int(size))
        s = merged.setdefault(key, Site(place, space, op, int(size)))
        s.requests += int(requests)
        s.cost += int(cost)
        s.ideal += int(ideal)
    return sorted(merged.values(), key=lambda s: (s.space, -s.cost))


def run_job(binary: Path, job: Job, timeout: float = 900) -> PassProfile:
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "profile.tsv"
        try:
            proc = subprocess.run([str(binary), *job.arguments()], capture_output=True, text=True, timeout=timeout,
                                  env={**os.environ, "DWCONV_MEMORY_PROFILE_OUT": str(table)})
        except subprocess.TimeoutExpired as err:
            raise HarnessError(f"the profiled emulator ran past {timeout:.0f} s on {job.label} {job.pass_}") from err
        if proc.returncode not in (0, 1) or not table.exists():
            raise HarnessError(f"the profiled emulator failed on {job.label} {job.pass_}:\n"
                               f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        profile = PassProfile(job, sites=parse_table(table.read_text(), binary))
    profile.kernel = _field(proc.stdout, r"^kernel (.+)$")
    profile.h100_kernel = _field(proc.stdout, r"^h100 batch \d+ kernel (.+)$")
    profile.checked = re.search(r"^1 passed, 0 failed$", proc.stdout, re.M) is not None
    return profile


def _field(text: str, pattern: str) -> str:
    match = re.search(pattern, text, re.M)
    return match.group(1) if match else "?"


# Batches a pass is emulated at in turn until its plan is the H100's at the bench's batch (the
# register-tiled weight gradient holds batch entries in a block: up to 64 at 7x7).
LARGER_BATCHES = (8, 16, 64)


def run_as_h100(binary: Path, job: Job) -> PassProfile:
    """The pass at its batch, else at the first larger one where it runs the H100's kernel, block and
    shared memory (else at the bench's batch, the mismatch shown)."""
    profile = run_job(binary, job)
    for batch in LARGER_BATCHES:
        if profile.stands_for_h100 or batch <= profile.job.batch or batch > job.bench_batch:
            continue
        profile = run_job(binary, job.at_batch(batch))
    return profile


def profile_all(binary: Path, jobs: list[Job], workers: int | None = None) -> list[PassProfile]:
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda job: run_as_h100(binary, job), jobs))


def _ratio(cost: int, ideal: int) -> str:
    return f"{cost / ideal:.2f}" if ideal else "-"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(profiles: list[PassProfile]) -> str:
    lines = [
        "Per pass: shared-memory wavefronts and global sectors a warp's accesses take over the fewest they "
        "could (1.00: no bank conflict, every sector's bytes used). Emulated at batch b on a GPU of s SMs "
        "for the H100's plan at the bench's batch (its kernel, block and shared memory; where they differ, "
        "both are shown). On-chip / floor: the clocks an SM's shared memory or L1 (the busier) takes for "
        "the counted work, over those its share of the pass's floor bytes takes through DRAM, at H100 "
        "rates (a wavefront and 4 sectors a clock, 3.0 TB/s): below 1 the counted work fits in the "
        "floor's time; an estimate, uncalibrated.",
        "",
        "| problem | pass | kernel | b, s | shared | global loads | global stores | on-chip / floor | checked |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for p in profiles:
        kernel = p.kernel_name if p.stands_for_h100 else f"{p.kernel} (H100: {p.h100_kernel})"
        shared = _ratio(*p.totals("shared", ("load", "store", "cp.async-write", "ldmatrix")))
        loads = _ratio(*p.totals("global", ("load", "cp.async-read")))
        stores = _ratio(*p.totals("global", ("store",)))
        lines.append(f"| {p.job.label} | {p.job.pass_} | {kernel} | {p.job.batch}, {p.job.sms} | {shared} | "
                     f"{loads} | {stores} | {_share(p.on_chip_per_floor())} | {'yes' if p.checked else 'FAILED'} |")
    flagged = sorted(((p, s) for p in profiles for s in p.worth_a_look()),
                     key=lambda ps: -(ps[0].excess_per_floor(ps[1]) or 0))
    lines += ["", f"Places at {EXCESS_RATIO}x the fewest or more, with {EXCESS_SHARE:.0%} or more of their pass's "
              "wavefronts or sectors, by the time their excess takes (excess / floor: its clocks over the "
              "DRAM floor's, as above):", ""]
    if not flagged:
        lines.append("(none)")
    else:
        lines += ["| problem | pass | place | memory | operation | bytes a lane | requests | x fewest | "
                  "excess / floor |",
                  "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {p.job.label} | {p.job.pass_} | {s.place} | {s.space} | {s.op} | {s.bytes} | {s.requests} | "
                  f"{s.ratio:.2f} | {_share(p.excess_per_floor(s))} |" for p, s in flagged]
    return "\n".join(lines) + "\n"


def write_json(profiles: list[PassProfile], path: Path) -> None:
    path.write_text(json.dumps([{**asdict(p), "job": asdict(p.job)} for p in profiles], indent=1) + "\n")
