"""What the GPU would issue: the machine code (SASS) of our kernels, counted per kernel.

A kernel that does the multiply-adds of a 7x7 filter in bfloat16 can be bound by issue slots
rather than by bytes: an SM sub-partition issues one warp instruction a clock, and the FP32
pipe takes one FFMA a clock, so every other instruction in the loop that does the work (the
conversions, shared loads and address arithmetic beside the multiply-adds) takes a slot an FMA
could have had. The share of FMAs among the instructions of that loop is the most of the FMA
rate the kernel can reach there (`ours % of roofline` in bench.md is measured against it).

The loop counted is the hot one: of the spans from a branch target to a later branch back to it,
the one holding the most FMAs (FFMA, DFMA; for the tensor-core kernel its warp matrix products,
HMMA, whose share is then that of the issue slots the products take, not of an FMA rate), the
shortest of those on a tie; a kernel whose FMAs
lie in no loop (one unrolled tile a block) is counted whole. Static counts: what the loop holds,
not how often it runs. A kernel with no loop at all also gets one warp's latency chain through it
(build_scripts/sass_chain.py).

cuobjdump reads the SASS out of L0's objects. The CUDA toolkit ships it beside nvcc; where that
one has none (the pip-installed nvcc of these machines), NVIDIA's wheel is fetched once into the
download cache.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import HarnessError
from .output_cache import cached_output
from .sass_chain import one_warp_cycles
from .wheel_cache import cache_dir, pip_download, unpack_wheels

# The oldest CUDA 13 binary tools on PyPI (13.0's are not there); they read what nvcc 13.0 writes.
CUDA_BINARY_TOOLS_VERSION = "13.2.51"
CUDA_BINARY_TOOL_PACKAGES = {"cuobjdump": "nvidia-cuda-cuobjdump", "nvdisasm": "nvidia-cuda-nvdisasm"}
FMA_OPCODES = ("FFMA", "DFMA", "HMMA")

_FUNCTION = re.compile(r"^\s*Function : (?P<name>\S+)\s*$", re.M)
# `/*01a0*/  @!P0 FFMA.FTZ R1, R2, R3, R4 ;`: the address and the opcode, without predicate or modifiers.
_INSTRUCTION = re.compile(r"^\s*/\*(?P<address>[0-9a-f]{4,})\*/\s+(?:@!?U?P[T\d]\s+)?(?P<opcode>[A-Z][A-Z0-9_]*)"
                          r"(?P<rest>[^;]*);", re.M)
_BRANCH = re.compile(r"^(?:\.[A-Z0-9_.]+)?\s+0x(?P<target>[0-9a-f]+)")  # `BRA 0x1740`, `BRA.U 0x80`


@dataclass(frozen=True)
class SassMix:
    instructions: int  # the whole kernel
    fma: int
    hot_instructions: int  # the hot loop (or the kernel, where no loop holds an FMA)
    hot_fma: int
    chain_cycles: int | None = None  # one warp through a kernel without a loop (sass_chain), else None

    @property
    def hot_fma_share(self) -> float:
        return self.hot_fma / self.hot_instructions if self.hot_instructions else 0.0


def _mix(body: str) -> SassMix:
    instructions = [(int(m["address"], 16), m["opcode"], m["rest"]) for m in _INSTRUCTION.finditer(body)]
    is_fma = [opcode in FMA_OPCODES for _, opcode, _ in instructions]
    position = {address: i for i, (address, _, _) in enumerate(instructions)}
    loops = []
    for i, (_, opcode, rest) in enumerate(instructions):
        branch = _BRANCH.match(rest) if opcode == "BRA" else None
        if branch and int(branch["target"], 16) in position:
            start = position[int(branch["target"], 16)]
            if start <= i:  # a branch back: [start, i] is a loop
                loops.append((sum(is_fma[start:i + 1]), -(i + 1 - start), start, i))
    total_fma = sum(is_fma)
    # The branch to itself that ends every kernel, after its EXIT, is no loop.
    straight = all(start == end for _, _, start, end in loops)
    chain = one_warp_cycles([(opcode, rest) for _, opcode, rest in instructions]) if straight else None
    best = max(loops, default=None)
    if best is None or best[0] == 0:
        return SassMix(len(instructions), total_fma, len(instructions), total_fma, chain)
    fma, negative_length, _, _ = best
    return SassMix(len(instructions), total_fma, -negative_length, fma, chain)


def parse_sass(text: str) -> dict[str, SassMix]:
    """Per kernel (mangled name) of one arch's `cuobjdump -sass`, its instruction mix."""
    functions = list(_FUNCTION.finditer(text))
    return {match["name"]: _mix(text[match.end():following.start() if following else len(text)])
            for match, following in zip(functions, functions[1:] + [None])}


def _place_binary_tool(name: str) -> str | None:
    """nvidia/cu13/bin/cuobjdump -> cuobjdump"""
    directory, _, tool = name.rpartition("/")
    return tool if directory.endswith("/bin") and tool in CUDA_BINARY_TOOL_PACKAGES else None


def find_cuobjdump(cuda_home: Path | None, cache: Path | None = None) -> Path:
    """The toolkit's cuobjdump, else the pinned wheels' (fetched once into the download cache),
    with the nvdisasm beside it that `cuobjdump -sass` runs."""
    if cuda_home and all((cuda_home / "bin" / tool).is_file() for tool in CUDA_BINARY_TOOL_PACKAGES):
        return cuda_home / "bin" / "cuobjdump"
    root = (cache or cache_dir()) / "tools" / f"cuda-binary-tools-{CUDA_BINARY_TOOLS_VERSION}"
    if not (root / ".complete").is_file():
        downloads = root.with_name(root.name + ".download")
        shutil.rmtree(downloads, ignore_errors=True)
        downloads.mkdir(parents=True)
        requirements = [f"{package}=={CUDA_BINARY_TOOLS_VERSION}" for package in CUDA_BINARY_TOOL_PACKAGES.values()]
        pip_download(requirements, downloads)
        unpack_wheels(sorted(downloads.glob("*.whl")), root, _place_binary_tool)
        shutil.rmtree(downloads, ignore_errors=True)
        missing = [tool for tool in CUDA_BINARY_TOOL_PACKAGES if not (root / tool).is_file()]
        if missing:
            shutil.rmtree(root, ignore_errors=True)
            raise HarnessError(f"pip download {' '.join(requirements)} gave no bin/{' or bin/'.join(missing)}")
    for tool in CUDA_BINARY_TOOL_PACKAGES:  # wheels' members unpack without their mode
        (root / tool).chmod(0o755)
    return root / "cuobjdump"


def object_sass_mix(cuobjdump: Path, obj: Path, arch: str, kept: Path | None = None) -> dict[str, SassMix]:
    """The instruction mix of every kernel of `arch` ("sm_90") in a compiled object. With `kept` (a
    folder), an answer is kept there by the object's bytes, the arch, cuobjdump's path (its release)
    and this module's and sass_chain's source: the kernels' cuobjdump text is 174 MB an arch, 30 s
    to write and read."""
    def measure() -> dict[str, SassMix]:
        proc = subprocess.run([str(cuobjdump), "-sass", "-arch", arch, str(obj)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise HarnessError(f"cuobjdump could not read the {arch} code of {obj}: {proc.stderr.strip()[-500:]}")
        return parse_sass(proc.stdout)

    if kept is None:
        return measure()
    parsers = (Path(__file__), Path(__file__).with_name("sass_chain.py"))
    key = "\0".join([str(cuobjdump), arch, hashlib.sha256(obj.read_bytes()).hexdigest(),
                     *(hashlib.sha256(p.read_bytes()).hexdigest() for p in parsers)])
    with tempfile.TemporaryDirectory() as scratch:
        answer = cached_output(kept, key, Path(scratch) / "mix.json", lambda output: output.write_text(
            json.dumps({name: asdict(mix) for name, mix in measure().items()})))
        return {name: SassMix(**fields) for name, fields in json.loads(answer.read_text()).items()}
