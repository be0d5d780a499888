"""The compiler's view of our kernels, before any GPU time is spent (issue 6's method).

L0 compiles each CUDA source with `-Xptxas=-v --keep`; `keep_compiler_report` keeps what
ptxas said and the PTX per arch beside the object (`<object>.report/`). From those,
`kernel_resources` reads, per kernel and arch: registers, stack frame, spill stores and
loads, static shared memory (ptxas), the 16-byte global and shared loads and stores
in the kernel's PTX (what the vectorised paths must keep), and the integer divisions and
remainders inside the PTX's innermost loops (each costs some twenty instructions on the GPU). Given cuobjdump, also the
machine code's hot loop: its instructions and the share of them that are multiply-adds
(build_scripts/sass_mix.py), and for a kernel without a loop one warp's latency chain through it
(build_scripts/sass_chain.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from .bench.launches import KERNEL_NAMESPACE
from .errors import HarnessError
from .sass_chain import GLOBAL_LOAD_CYCLES
from .sass_mix import SassMix, object_sass_mix
from .wheel_cache import cache_dir

PTXAS_LOG = "ptxas.txt"

_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for 'sm_(?P<sm>\d+a?)'")
_FRAME = re.compile(r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, "
                    r"(?P<loads>\d+) bytes spill loads")
_USAGE = re.compile(r"Used (?P<registers>\d+) registers(?:, used \d+ barriers)?(?:, (?P<smem>\d+) bytes smem)?")
_PTX_ENTRY = re.compile(r"^\.(?:visible|weak) \.entry (?P<name>[\w$]+)\(", re.M)
# A 16-byte access: four 32-bit or two 64-bit lanes (ld.global.nc.v4.u32, st.shared.v2.f64, ...).
_WIDE_ACCESS = re.compile(r"\b(?P<op>ld|st)\.(?P<space>global|shared)(?:\.[\w:]+)*?\.(?:v4\.[bfsu]32|v2\.[bfsu]64)\b")
_LABEL = re.compile(r"^(?P<label>\$[\w$]+):", re.M)
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(?P<label>\$[\w$]+);")
_INT_DIVISION = re.compile(r"\b(?:div|rem)\.[su](?:32|64)\b")


@dataclass(frozen=True)
class KernelResources:
    arch: str  # "sm_90"
    mangled: str
    registers: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    static_shared_bytes: int
    wide_global_loads: int = 0
    wide_global_stores: int = 0
    wide_shared_loads: int = 0
    wide_shared_stores: int = 0
    loop_divisions: int = 0
    name: str = ""  # demangled, without namespace and parameters
    sass: SassMix | None = None


def report_dir(obj: Path) -> Path:
    return obj.with_name(obj.name + ".report")


def keep_compiler_report(directory: Path, ptxas_output: str) -> None:
    """After an nvcc run with --keep-dir=directory: keep ptxas's report and the PTX, drop the rest."""
    for path in directory.iterdir():
        if path.suffix != ".ptx":
            path.unlink() if path.is_file() else shutil.rmtree(path)
    (directory / PTXAS_LOG).write_text(ptxas_output)


def parse_ptxas(text: str) -> list[KernelResources]:
    kernels, entry, frame = [], None, None
    for line in text.splitlines():
        if match := _ENTRY.search(line):
            entry, frame = match, None
        elif entry and (match := _FRAME.search(line)):
            frame = match
        elif entry and frame and (match := _USAGE.search(line)):
            kernels.append(KernelResources(
                arch=f"sm_{entry['sm']}", mangled=entry["name"], registers=int(match["registers"]),
                stack_bytes=int(frame["stack"]), spill_stores=int(frame["stores"]), spill_loads=int(frame["loads"]),
                static_shared_bytes=int(match["smem"] or 0),
            ))
            entry = frame = None
    return kernels


def wide_accesses(ptx: str) -> dict[str, dict[tuple[str, str], int]]:
    """Per kernel of a PTX file, the count of 16-byte accesses by (ld|st, global|shared)."""
    counts: dict[str, dict[tuple[str, str], int]] = {}
    entries = list(_PTX_ENTRY.finditer(ptx))
    for entry, following in zip(entries, entries[1:] + [None]):
        body = ptx[entry.end():following.start() if following else len(ptx)]
        per_kind: dict[tuple[str, str], int] = {}
        for access in _WIDE_ACCESS.finditer(body):
            key = (access["op"], access["space"])
            per_kind[key] = per_kind.get(key, 0) + 1
        counts[entry["name"]] = per_kind
    return counts


def innermost_loop_divisions(ptx: str) -> dict[str, int]:
    """Per kernel of a PTX file, the integer div/rem instructions inside its innermost loops: the
    spans from a label to a later branch back to it that hold no other such span."""
    counts: dict[str, int] = {}
    entries = list(_PTX_ENTRY.finditer(ptx))
    for entry, following in zip(entries, entries[1:] + [None]):
        body = ptx[entry.end():following.start() if following else len(ptx)]
        labels = {m["label"]: m.start() for m in _LABEL.finditer(body)}
        loops = [(labels[m["label"]], m.end()) for m in _BRANCH.finditer(body)
                 if m["label"] in labels and labels[m["label"]] < m.start()]
        innermost = [(a, b) for a, b in loops if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in loops)]
        counts[entry["name"]] = sum(len(_INT_DIVISION.findall(body, a, b)) for a, b in innermost)
    return counts


def demangle(names: list[str]) -> list[str]:
    proc = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    if proc.returncode != 0:
        raise HarnessError(f"c++filt could not demangle the kernel names: {proc.stderr.strip()}")
    return proc.stdout.splitlines()


def short_name(demangled: str) -> str:
    """`void at::native::dwconv::k<c10::Half, int, true>(...)` -> `k<Half, int, true>`."""
    name = demangled.removeprefix("void ")
    depth = 0
    for i, char in enumerate(name):
        depth += char == "<"
        depth -= char == ">"
        if char == "(" and depth == 0:
            name = name[:i]
            break
    return name.replace(KERNEL_NAMESPACE, "").replace("c10::", "")


def kernel_resources(directory: Path, cuobjdump: Path | None = None) -> list[KernelResources]:
    """Our kernels (namespace at::native::dwconv) in one object's report, with their PTX counts,
    and with cuobjdump, their machine code's instruction mix (read from the object beside it)."""
    log = directory / PTXAS_LOG
    if not log.is_file():
        raise HarnessError(f"{log} is missing: run `make check` (L0 keeps the compiler's report)")
    kernels = parse_ptxas(log.read_text())
    demangled = demangle([k.mangled for k in kernels])
    ptx_counts: dict[str, dict[str, dict[tuple[str, str], int]]] = {}
    ptx_divisions: dict[str, dict[str, int]] = {}
    for ptx in directory.glob("*.ptx"):
        arch = re.search(r"compute_(\d+a?)", ptx.name)
        if arch:
            text = ptx.read_text()
            ptx_counts[f"sm_{arch.group(1)}"] = wide_accesses(text)
            ptx_divisions[f"sm_{arch.group(1)}"] = innermost_loop_divisions(text)
    sass: dict[str, dict[str, SassMix]] = {}
    if cuobjdump:
        obj = directory.with_name(directory.name.removesuffix(".report"))
        kept = cache_dir() / "sass-mix"
        sass = {arch: object_sass_mix(cuobjdump, obj, arch, kept) for arch in sorted({k.arch for k in kernels})}
    rows = []
    for kernel, full_name in zip(kernels, demangled):
        if KERNEL_NAMESPACE not in full_name:
            continue
        counts = ptx_counts.get(kernel.arch, {}).get(kernel.mangled, {})
        rows.append(replace(
            kernel, name=short_name(full_name),
            wide_global_loads=counts.get(("ld", "global"), 0), wide_global_stores=counts.get(("st", "global"), 0),
            wide_shared_loads=counts.get(("ld", "shared"), 0), wide_shared_stores=counts.get(("st", "shared"), 0),
            loop_divisions=ptx_divisions.get(kernel.arch, {}).get(kernel.mangled, 0),
            sass=sass.get(kernel.arch, {}).get(kernel.mangled)))
    return sorted(rows, key=lambda r: (r.arch, r.name))


def markdown(rows: list[KernelResources], source: str) -> str:
    lines = [
        f"Compiler resource report of {source} (ptxas -v; 16-byte accesses and integer divisions in "
        "innermost loops counted in the PTX; the hot loop's instructions and their FMA share in the "
        "SASS, - where cuobjdump did not read it; for a kernel without a loop, one warp's chain through "
        f"it in cycles, a global load's registers ready {GLOBAL_LOAD_CYCLES} cycles after it issues "
        "(build_scripts/sass_chain.py: a model that ranks schedules, not a time)):",
        "",
        "| arch | kernel | registers | stack bytes | spill stores/loads bytes | static shared bytes "
        "| 16-byte global ld/st | 16-byte shared ld/st | loop divisions | hot loop instructions | FMA share "
        "| one-warp chain cycles |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        hot = f"{r.sass.hot_instructions} | {r.sass.hot_fma_share:.0%}" if r.sass else "- | -"
        chain = r.sass.chain_cycles if r.sass and r.sass.chain_cycles is not None else "-"
        lines.append(f"| {r.arch} | `{r.name}` | {r.registers} | {r.stack_bytes} | {r.spill_stores}/{r.spill_loads} "
                     f"| {r.static_shared_bytes} | {r.wide_global_loads}/{r.wide_global_stores} "
                     f"| {r.wide_shared_loads}/{r.wide_shared_stores} | {r.loop_divisions} | {hot} | {chain} |")
    return "\n".join(lines)
