"""How long one warp takes through a kernel without a loop, from its machine code (SASS).

Where the GPU holds every thread of a pass at once (batch-1 inference: the pixel kernels of
DepthwiseConv2dPixel.cuh), an SM has a warp or two and nothing hides a warp's own latencies: the
pass takes about the chain of one warp, its loads' waits included, not its bytes over bandwidth.

The model: a warp issues one instruction a cycle in the listing's order, each once the registers
it reads (and the ones it overwrites) are ready; a global load's registers are ready
GLOBAL_LOAD_CYCLES after it issues, a shared, constant or local (spilled) load's
SHARED_LOAD_CYCLES, any other result OTHER_CYCLES. Nothing else: no pipe limits, no cache, no other warps. It ranks schedules of
one kernel (which rounds of loads ptxas serves best, v31 in notes/performance.md); it does not time
a GPU. A kernel with a loop has none: its chain depends on trip counts.
"""

from __future__ import annotations

import re

GLOBAL_LOAD_CYCLES = 600  # about an H100's DRAM latency
SHARED_LOAD_CYCLES = 30
OTHER_CYCLES = 4

_NO_DESTINATION = ("ST", "RED", "BRA", "EXIT", "BAR", "RET", "NOP", "MEMBAR", "DEPBAR", "CALL", "WARPSYNC",
                   "YIELD", "BSYNC", "BSSY", "BMOV", "ERRBAR", "CCTL")
_PAIR_OPCODES = ("DFMA", "DADD", "DMUL")  # read and write register pairs whatever their modifiers say
_CONVERSIONS = ("F2F", "I2F", "F2I")  # .<destination type>.<source type>
_WIDE_TYPES = (".F64", ".S64", ".U64")
_REGISTER = re.compile(r"\bR(\d+)(\.64)?\b")
_MODIFIERS = re.compile(r"^((?:\.[A-Z0-9_]+)*)\s*(.*)$")


def _registers(operand: str, width: int = 1) -> list[int]:
    """The registers an operand names: `R4` is one (or `width` from R4 on), `R2.64` two; an address
    (`desc[UR4][R2.64]`, `[R1+0x10]`) its own."""
    found = []
    for match in _REGISTER.finditer(operand):
        first = int(match[1])
        found += range(first, first + (2 if match[2] else 1 if "[" in operand else width))
    return found


def _widths(opcode: str, modifiers: str) -> tuple[int, int]:
    """How many registers a value the instruction writes, and one it reads, spans."""
    if ".128" in modifiers:  # a 16-byte load's destination, a 16-byte store's data
        return 4, 4
    if opcode in _CONVERSIONS:
        types = re.findall(r"\.[FSU](?:8|16|32|64)\b", modifiers)
        destination, source = (types + types)[:2] if types else (".F32", ".F32")
        return 2 if destination in _WIDE_TYPES else 1, 2 if source in _WIDE_TYPES else 1
    if ".64" in modifiers or opcode in _PAIR_OPCODES:
        return 2, 2
    if ".WIDE" in modifiers or opcode == "CS2R":
        return 2, 1
    return 1, 1


def _latency(opcode: str) -> int:
    if opcode == "LDG" or opcode == "LD":
        return GLOBAL_LOAD_CYCLES
    if opcode in ("LDS", "LDC", "LDSM", "ULDC", "LDL"):
        return SHARED_LOAD_CYCLES
    return OTHER_CYCLES


def one_warp_cycles(instructions: list[tuple[str, str]]) -> int:
    """The cycle at which one warp issues the last of `instructions`, each (opcode, the rest of its
    line: modifiers and operands), in order and without a loop."""
    ready: dict[int, int] = {}
    cycle = 0
    for opcode, rest in instructions:
        modifiers, operands_text = _MODIFIERS.match(rest.strip()).groups()
        operands = [operand.strip() for operand in operands_text.split(",")] if operands_text else []
        writes = bool(operands) and not opcode.startswith(_NO_DESTINATION) and _REGISTER.fullmatch(operands[0])
        written, read = _widths(opcode, modifiers)
        destination = _registers(operands[0], written) if writes else []
        sources = [r for operand in (operands[1:] if writes else operands) for r in _registers(operand, read)]
        cycle = max([cycle] + [ready.get(r, 0) for r in sources + destination])
        for register in destination:
            ready[register] = cycle + _latency(opcode)
        cycle += 1
    return cycle
