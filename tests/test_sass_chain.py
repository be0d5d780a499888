"""One warp's latency chain through a kernel without a loop (build_scripts/sass_chain.py), the
column of `make resource-report` that ranks the pixel kernels' schedules: loads in flight together
wait once, a load that needs another's result waits twice, and every register a load writes is
waited on."""

from build_scripts.sass_chain import GLOBAL_LOAD_CYCLES as G
from build_scripts.sass_chain import OTHER_CYCLES, SHARED_LOAD_CYCLES, one_warp_cycles


def instructions(*lines: str) -> list[tuple[str, str]]:
    """`LDG.E.128 R4, [R2.64]` -> ("LDG", ".E.128 R4, [R2.64]")"""
    out = []
    for line in lines:
        opcode, _, rest = line.partition(" ")
        opcode, dot, modifiers = opcode.partition(".")
        out.append((opcode, f"{dot}{modifiers} {rest}"))
    return out


def test_loads_in_flight_together_wait_once():
    together = instructions("LDG.E R4, desc[UR4][R2.64]", "LDG.E R5, desc[UR4][R2.64+0x4]",
                            "FFMA R6, R4, R5, RZ", "STG.E desc[UR4][R8.64], R6", "EXIT")
    # The second load's value is ready at 1 + G; the FMA issues then, the store 4 cycles later.
    assert one_warp_cycles(together) == 1 + G + OTHER_CYCLES + 2


def test_a_load_whose_address_another_load_gives_waits_twice():
    chained = instructions("LDG.E.64 R2, desc[UR4][R10.64]", "LDG.E R4, desc[UR4][R2.64]",
                           "STG.E desc[UR4][R8.64], R4", "EXIT")
    assert one_warp_cycles(chained) == 2 * G + 2


def test_every_register_of_a_wide_load_is_waited_on():
    # R7 is the last word of the 16-byte load into R4..R7; a shared load waits less.
    assert one_warp_cycles(instructions("LDG.E.128 R4, desc[UR4][R2.64]", "IADD3 R9, R7, 0x1, RZ")) == G + 1
    assert one_warp_cycles(instructions("LDS.128 R4, [R0]", "IADD3 R9, R7, 0x1, RZ")) == SHARED_LOAD_CYCLES + 1
    assert one_warp_cycles(instructions("LDG.E.128 R4, desc[UR4][R2.64]", "IADD3 R9, R8, 0x1, RZ")) == 2


def test_a_register_a_load_will_write_is_not_reused_before_it_lands():
    overwrite = instructions("LDG.E R4, desc[UR4][R2.64]", "MOV R4, 0x1")
    assert one_warp_cycles(overwrite) == G + 1


def test_a_predicate_writes_no_register_and_a_store_reads_its_data():
    # ISETP writes P0 and reads R4: R4 is no destination of it, so the IADD3 after it need not wait.
    assert one_warp_cycles(instructions("ISETP.GE.AND P0, PT, R4, 0x10, PT", "IADD3 R4, R4, 0x1, RZ")) == 2
    # A store has no destination: its address and data are read, all four registers of 16-byte data.
    store = instructions("LDG.E R11, desc[UR4][R2.64]", "STG.E.128 desc[UR4][R6.64], R8")
    assert one_warp_cycles(store) == G + 1
    assert one_warp_cycles(instructions("LDG.E R12, desc[UR4][R2.64]", "STG.E.128 desc[UR4][R6.64], R8")) == 2


def test_double_precision_reads_and_writes_register_pairs():
    # DADD reads R6:R7 and R8:R9; the load into R7 is waited on.
    assert one_warp_cycles(instructions("MOV R6, 0x1", "LDG.E R7, desc[UR4][R2.64]", "DADD R4, R6, R8")) == 2 + G
    # F2F.F64.F32 writes a pair (R4:R5) from one register; CS2R writes a pair too.
    widened = instructions("LDG.E R1, desc[UR4][R2.64]", "F2F.F64.F32 R4, R1", "IADD3 R9, R5, 0x1, RZ")
    assert one_warp_cycles(widened) == G + OTHER_CYCLES + 1
    assert one_warp_cycles(instructions("CS2R R4, SRZ", "IADD3 R9, R5, 0x1, RZ")) == OTHER_CYCLES + 1


def test_a_spilled_value_reloaded_costs_a_local_load():
    assert one_warp_cycles(instructions("LDL R4, [R1+0x10]", "IADD3 R9, R4, 0x1, RZ")) == SHARED_LOAD_CYCLES + 1
