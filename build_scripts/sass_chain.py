"""How long one warp takes through a kernel without a loop, from its machine code (SASS).

Where the GPU holds every thread of a pass at once (batch-1 inference: the pixel kernels of
DepthwiseConv2dPixel.cuh), an SM has a warp or two and nothing hides a warp's own latencies: the
pass takes about the chain of one warp, its loads' waits included, not its bytes over bandwidth.

The model: a warp issues one instruction a cycle in the listing's order, each once the registers
it reads (and, for a load, the ones it overwrites) are ready; a global load's registers are ready
GLOBAL_LOAD_CYCLES after it issues, a shared or constant load's SHARED_LOAD_CYCLES, any other
result OTHER_CYCLES. Nothing else: no pipe limits, no cache, no other warps. It ranks schedules of
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
_PAIR_OPCODES = ("DFMA", "DADD", "DMUL")  # write a register pair whatever their modifiers say
_REGISTER = re.compile(r"\bR(\d+)(\.64)?\b")
_MODIFIERS = re.compile(r"^((?:\.[A-Z0-9_]+)*)\s*(.*)$")


def _registers(operand: str, width: int = 1) -> list[int]:
    """The registers an operand names: `R4` is one (or `width` from R4 on), `R2.64` two."""
    found = []
    for match in _REGISTER.finditer(operand):
        first = int(match[1])
        found += range(first, first + (2 if match[2] else width))
    return found


def _destination_width(opcode: str, modifiers: str) -> int:
    if ".128" in modifiers:
        return 4
    if ".64" in modifiers or ".WIDE" in modifiers or opcode in _PAIR_OPCODES:
        return 2
    return 1


def _latency(opcode: str) -> int:
    if opcode == "LDG" or opcode == "LD":
        return GLOBAL_LOAD_CYCLES
    if opcode in ("LDS", "LDC", "LDSM", "ULDC"):
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
        destination = _registers(operands[0], _destination_width(opcode, modifiers)) if writes else []
        sources = [r for operand in (operands[1:] if writes else operands) for r in _registers(operand)]
        cycle = max([cycle] + [ready.get(r, 0) for r in sources + destination])
        for register in destination:
            ready[register] = cycle + _latency(opcode)
        cycle += 1
    return cycle
