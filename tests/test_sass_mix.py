"""The SASS instruction mix of `make resource-report`: which loop is the hot one, and what it holds.

The parsing is tested on hand-written listings in cuobjdump's format, then on the machine code of
a tiny kernel compiled here (nvcc, and cuobjdump fetched as the report fetches it).
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from build_scripts.sass_mix import SassMix, find_cuobjdump, object_sass_mix, parse_sass


def listing(name: str, *instructions: str) -> str:
    """A function of `cuobjdump -sass`, its instructions at addresses 0x00, 0x10, ..."""
    lines = [f"\t\tFunction : {name}", '\t.headerflags\t@"EF_CUDA_SM90"']
    for i, instruction in enumerate(instructions):
        lines.append(f"        /*{i * 16:04x}*/                   {instruction} ;   /* 0x0000000000000000 */")
        lines.append("                                                                 /* 0x000fe20000000000 */")
    return "\n".join(lines) + "\n"


def test_the_loop_with_the_most_multiply_adds_is_the_hot_one():
    text = listing(
        "two_loops",
        "S2R R0, SR_TID.X",  # 0x00
        "LDS R1, [R0]",  # 0x10: a loop of one FFMA (0x10-0x30)
        "FFMA R2, R1, R1, R2",
        "@P0 BRA 0x10",
        "LDS.128 R4, [R0]",  # 0x40: a loop of two FFMAs and a DFMA (0x40-0x90)
        "FFMA R2, R4, R5, R2",
        "@!P1 FFMA.FTZ R3, R6, R7, R3",
        "DFMA R8, R4, R6, R8",
        "IADD3 R0, R0, 0x10, RZ",
        "@!P2 BRA 0x40",
        "HFMA2.MMA R9, -RZ, RZ, 0, 0",  # nvcc's way of zeroing a register: no multiply-add
        "EXIT",
    )
    mix = parse_sass(text)["two_loops"]
    assert mix == SassMix(instructions=12, fma=4, hot_instructions=6, hot_fma=3)
    assert mix.hot_fma_share == pytest.approx(0.5)


def test_warp_matrix_products_make_the_tensor_core_kernels_hot_loop():
    """The tensor-core kernel's task loop (ldmatrix, HMMA) is its hot loop, not the rare path
    beside it that sums a NaN again with FFMAs."""
    mix = parse_sass(listing(
        "tensor_cores",
        "LDSM.16.M88.4 R4, [R0]",  # 0x00: the task loop, two products (0x00-0x30)
        "HMMA.1688.F32.BF16 R8, R4, R12, RZ",
        "HMMA.1688.F32.BF16 R8, R6, R13, R8",
        "@P0 BRA 0x0",
        "LDS.U16 R1, [R0]",  # 0x40: the NaN path's loop, one FFMA (0x40-0x60)
        "FFMA R2, R1, R3, R2",
        "@P1 BRA 0x40",
        "EXIT",
    ))["tensor_cores"]
    assert (mix.hot_instructions, mix.hot_fma) == (4, 2)


def test_on_a_tie_the_shortest_loop_and_without_a_loop_the_whole_kernel():
    tie = listing(
        "tie",
        "LDS R1, [R0]",  # 0x00: one FFMA in a loop of four instructions (0x00-0x30)
        "IADD3 R0, R0, 0x4, RZ",
        "FFMA R2, R1, R1, R2",
        "@P0 BRA 0x0",
        "LDS R1, [R0]",  # 0x40: one FFMA in a loop of three (0x40-0x60)
        "FFMA R2, R1, R1, R2",
        "@P1 BRA 0x40",
        "EXIT",
    )
    unrolled = listing("one_tile", "LDS R1, [R0]", "FFMA R2, R1, R1, R2", "FFMA R3, R1, R1, R3", "@P0 BRA 0x40",
                       "STG.E [R4], R2", "EXIT")
    mixes = parse_sass(tie + unrolled)
    assert mixes["tie"] == SassMix(instructions=8, fma=2, hot_instructions=3, hot_fma=1)
    assert mixes["tie"].chain_cycles is None  # a kernel with loops has no one-warp chain
    # Its only branch goes forward: no loop, so the whole kernel is the hot part, and it has a chain:
    # the shared load (30 cycles), the FMAs, the store waiting 4 cycles on the first one's result.
    assert mixes["one_tile"] == SassMix(instructions=6, fma=2, hot_instructions=6, hot_fma=2, chain_cycles=36)


def test_an_outer_loop_with_more_multiply_adds_than_its_inner_one_is_the_hot_one():
    mix = parse_sass(listing(
        "nested",
        "FFMA R3, R1, R1, R3",  # 0x00: the outer loop (0x00-0x40), two FFMAs
        "LDS R1, [R0]",  # 0x10: the inner loop (0x10-0x30), one
        "FFMA R2, R1, R1, R2",
        "@P0 BRA 0x10",
        "@P1 BRA 0x0",
        "EXIT",
    ))["nested"]
    assert mix == SassMix(instructions=6, fma=2, hot_instructions=5, hot_fma=2)


def test_a_kernel_without_multiply_adds_has_no_share():
    mix = parse_sass(listing("copy", "LDG.E.128 R4, desc[UR4][R2.64]", "STG.E.128 desc[UR4][R6.64], R4", "EXIT"))["copy"]
    assert mix == SassMix(instructions=3, fma=0, hot_instructions=3, hot_fma=0, chain_cycles=602)
    assert mix.hot_fma_share == 0.0


TINY = r"""
namespace at::native::dwconv {
__global__ void fma_loop(float* out, const float* in, int count) {
  float acc = 0.f;
  for (int i = 0; i < count; ++i) acc = fmaf(in[i], acc, 1.5f);
  out[threadIdx.x] = acc;
}
}  // namespace at::native::dwconv
"""


def test_the_machine_code_of_a_compiled_kernel_is_read(tmp_path):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("nvcc is not installed here")
    (tmp_path / "tiny.cu").write_text(TINY)
    subprocess.run([nvcc, "-c", str(tmp_path / "tiny.cu"), "-o", str(tmp_path / "tiny.o"), "-O3",
                    "-gencode=arch=compute_90,code=sm_90"], check=True, capture_output=True)
    cuobjdump = find_cuobjdump(None)  # the fetched one, whatever the toolkit has
    assert (cuobjdump.parent / "nvdisasm").is_file()
    (mix,) = object_sass_mix(cuobjdump, tmp_path / "tiny.o", "sm_90").values()
    # nvcc unrolls the loop: its FMAs are most of it, and the code around it holds the remainder's.
    assert 4 <= mix.hot_fma < mix.fma and mix.hot_instructions < mix.instructions
    assert 0.25 < mix.hot_fma_share < 1
    # Kept by the object's bytes: asked again, the answer comes from the folder, not from cuobjdump.
    kept = tmp_path / "kept"
    read = object_sass_mix(cuobjdump, tmp_path / "tiny.o", "sm_90")
    assert object_sass_mix(cuobjdump, tmp_path / "tiny.o", "sm_90", kept) == read
    (entry,) = kept.iterdir()
    entry.write_text(entry.read_text().replace(f'"fma": {mix.fma},', '"fma": 12345,'))
    assert next(iter(object_sass_mix(cuobjdump, tmp_path / "tiny.o", "sm_90", kept).values())).fma == 12345
