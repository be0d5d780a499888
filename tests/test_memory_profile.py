"""The memory profile (`make memory-profile`): the emulator's count of shared-memory wavefronts and
global sectors a warp's accesses take, checked on launches whose counts are known, then on the
kernels the bench's layers run, where the designs say which accesses are free of bank conflicts."""

import subprocess
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.bench.layers import problems
from build_scripts.memory_profile import (DRAM_BYTES_PER_CLOCK, EMULATOR, H100_SMS, PROFILED, Job, PassProfile, Site,
                                          build, jobs_for, markdown, place_of, run_as_h100, run_job)

pytestmark = pytest.mark.l0


# Scenario: its table, (memory, operation, bytes a lane) -> (warp instructions, wavefronts or
# sectors, the fewest). Banks: 32 of 4 bytes; 16-byte accesses and ldmatrix matrices go in phases
# of 8 lanes, so the fewest wavefronts for a warp's 16-byte access is 4.
SCENARIOS = {
    "consecutive shared words": {("shared", "store", 4): (1, 1, 1), ("shared", "load", 4): (1, 1, 1),
                                 ("global", "store", 4): (1, 4, 4)},
    "shared words two apart": {("shared", "store", 4): (1, 2, 1), ("shared", "load", 4): (1, 2, 1),
                               ("global", "store", 4): (1, 4, 4)},
    "one shared word for every lane": {("shared", "load", 4): (1, 1, 1), ("global", "store", 4): (1, 4, 4)},
    "consecutive shared vectors": {("shared", "store", 16): (1, 4, 4)},
    "shared vectors two apart": {("shared", "store", 16): (1, 8, 4)},
    # four 4-byte loads of one lane within one 16-byte chunk: one vector, as nvcc's LDS.128
    "a shared vector read as four floats": {("shared", "load", 16): (1, 4, 4), ("global", "store", 4): (1, 4, 4)},
    "a shared vector read as four floats, last first": {("shared", "load", 16): (1, 4, 4),
                                                        ("global", "store", 4): (1, 4, 4)},
    # ... but two floats of a lane are two loads (words 3l and 3l + 1: 32 banks each)
    "two neighbouring floats a lane": {("shared", "load", 4): (2, 2, 2), ("global", "store", 4): (1, 4, 4)},
    # the loop: 32 lanes, then 8; the store after it is one instruction whatever the lanes' loops ran
    "a loop some lanes run twice, then a store": {("shared", "store", 4): (3, 3, 3)},
    "an unlikely branch, then a store": {("shared", "store", 4): (2, 2, 2)},
    # 40 copies (32 + 8 lanes: 4 + 1 wavefronts, 16 + 4 sectors), then 64 (2 x (4, 16))
    "two loops of copies": {("shared", "cp.async-write", 16): (4, 13, 13), ("global", "cp.async-read", 16): (4, 52, 52)},
    "a static shared column": {("shared", "store", 4): (1, 32, 1), ("shared", "load", 4): (1, 32, 1),
                               ("global", "store", 4): (1, 4, 4)},
    # an iteration's 21 or 22 lanes of 32 consecutive floats: 4 sectors, 3 sectors' bytes
    "loads that some lanes skip": {("global", "load", 4): (4, 16, 12), ("global", "store", 4): (1, 4, 4)},
    "consecutive global vectors": {("global", "store", 16): (1, 16, 16)},
    "global vectors two apart": {("global", "store", 16): (1, 32, 16)},
    "ldmatrix rows one vector apart": {("shared", "ldmatrix", 16): (1, 4, 4), ("global", "store", 4): (1, 4, 4)},
    "ldmatrix rows two vectors apart": {("shared", "ldmatrix", 16): (1, 8, 4), ("global", "store", 4): (1, 4, 4)},
    "copies into columns of 8 vectors, pitch 9": {("shared", "cp.async-write", 16): (1, 4, 4),
                                                  ("global", "cp.async-read", 16): (1, 16, 16)},
    "copies into columns of 4 vectors, pitch 5": {("shared", "cp.async-write", 16): (1, 8, 4),
                                                  ("global", "cp.async-read", 16): (1, 16, 16)},
}


@pytest.fixture(scope="module")
def profile_selftest(tmp_path_factory):
    directory = tmp_path_factory.mktemp("memory-profile")
    objects = [directory / "selftest.o", directory / "runtime.o"]
    subprocess.run(["g++", "-std=c++20", "-O1", "-g", *PROFILED, f"-I{EMULATOR}", "-c",
                    str(EMULATOR / "memory_profile_selftest.cpp"), "-o", str(objects[0])],
                   check=True, capture_output=True, text=True)
    subprocess.run(["g++", "-std=c++20", "-O2", "-c", str(EMULATOR / "memory_profile_runtime.cpp"), "-o",
                    str(objects[1])], check=True, capture_output=True, text=True)
    binary = directory / "memory_profile_selftest"
    subprocess.run(["g++", *map(str, objects), "-o", str(binary)], check=True, capture_output=True, text=True)
    return binary


def read_table(path: Path) -> dict[tuple[str, str, int], tuple[int, int, int]]:
    table = {}
    for line in path.read_text().splitlines()[1:]:
        _, space, op, size, requests, cost, ideal = line.split("\t")
        key = (space, op, int(size))
        before = table.get(key, (0, 0, 0))
        table[key] = tuple(a + int(b) for a, b in zip(before, (requests, cost, ideal)))
    return table


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_profile_counts_wavefronts_and_sectors_as_a_gpu_takes_them(profile_selftest, tmp_path, scenario):
    out = tmp_path / "profile.tsv"
    proc = subprocess.run([str(profile_selftest), scenario], capture_output=True, text=True, timeout=60,
                          env={"DWCONV_MEMORY_PROFILE_OUT": str(out)})
    assert proc.returncode == 0 and proc.stdout == f"ran {scenario}\n", proc.stdout + proc.stderr
    assert read_table(out) == SCENARIOS[scenario]


def test_a_place_is_the_kernels_line_and_the_helper_it_calls():
    cuda = f"{REPO_ROOT}/patches/files/aten/src/ATen/native/cuda"
    frames = [("memcpy", "/usr/include/x86_64-linux-gnu/bits/string_fortified.h:29"),
              ("load_vector<float>", f"{cuda}/DepthwiseConv2dCommon.cuh:172"),
              ("operator()", f"{cuda}/DepthwiseConv2dRegisterTiled.cuh:110 (discriminator 2)"),
              ("launch", f"{REPO_ROOT}/tests/emulator/cuda_emulation.h:700")]
    assert place_of(frames) == "DepthwiseConv2dCommon.cuh:172 < DepthwiseConv2dRegisterTiled.cuh:110"
    assert place_of(frames[2:]) == "DepthwiseConv2dRegisterTiled.cuh:110"
    assert place_of(frames[3:]) == "(outside the kernels)"


def test_a_bench_problem_runs_at_a_small_batch_on_a_gpu_scaled_to_its_plan():
    chosen = problems(["ConvNeXt-T", "Mamba conv1d"], (("bfloat16", "channels_last"),))
    jobs = jobs_for(chosen, passes=("forward", "backward-weight"), batch=2)
    b64 = [j for j in jobs if j.bench_batch == 64]
    b1 = [j for j in jobs if j.bench_batch == 1]
    assert {j.pass_ for j in b64} == {"forward", "backward-weight"} and {j.pass_ for j in b1} == {"forward"}
    assert all(j.batch == 2 and j.sms == round(H100_SMS * 2 / 64) for j in b64)
    assert all(j.batch == 1 and j.sms == H100_SMS for j in b1)
    assert all(j.dtype == "bfloat16" and j.layout == "nhwc" for j in jobs)
    assert len(b64) == 2 * 4 and not any("L=" in j.label for j in jobs)  # conv1d has none
    assert jobs[0].arguments() == ["--layer", "2,96,56,7,1,4,64", "bfloat16", "nhwc", "forward"]
    # its floor at batch 64, in bf16: input and output 64 x 96 x 56 x 56 each, 96 x 49 weights, 96 biases
    assert jobs[0].floor_bytes == 2 * (2 * 64 * 96 * 56 * 56 + 96 * 49 + 96)


def test_the_report_sets_each_pass_and_place_beside_the_time_its_floor_takes_through_dram():
    """On-chip / floor: the clocks an SM's shared memory (a wavefront a clock) or L1 (4 sectors a
    clock), the busier, takes for the pass's counted work over those its share of the floor bytes
    takes through DRAM; the places are ranked by their excess's clocks over the same."""
    shared_clocks = (4000 + 100) / 4  # an SM's, of the 4 the batch-2 run has
    floor_bytes = round(shared_clocks * 4 * DRAM_BYTES_PER_CLOCK * 64 / 2)  # the whole pass's, at batch 64
    job = Job("ConvNeXt-T 96@56 b64 bfloat16 channels_last", "forward", 96, 56, 7, 1, "bfloat16", "nhwc", 2, 4, 64,
              floor_bytes)
    kernel = "channels_last_mma_kernel block 8,32,1 shared 41472"
    ldmatrix = Site("Mma.cuh:209", "shared", "ldmatrix", 16, 100, 4000, 4000)
    copies = Site("Stream.cuh:74", "shared", "cp.async-write", 16, 10, 100, 50)
    stores = Site("Mma.cuh:262", "global", "store", 4, 10, 800, 400)  # 800 sectors: 50 clocks an SM
    profile = PassProfile(job, kernel, kernel, True, [ldmatrix, copies, stores])
    assert profile.on_chip_per_floor() == pytest.approx(1.0, rel=1e-3)
    assert profile.excess_per_floor(copies) == pytest.approx(50 / 4 / shared_clocks, rel=1e-3)
    assert profile.excess_per_floor(stores) == pytest.approx(400 / 4 / 4 / shared_clocks, rel=1e-3)
    text = markdown([profile])
    assert "| 1.01 | - | 2.00 | 1.00 | yes |" in text
    flagged = [line.split(" | ") for line in text.splitlines() if line.startswith("| ConvNeXt-T")][1:]
    assert [(row[2], row[-1]) for row in flagged] == [("Mma.cuh:262", "0.02 |"), ("Stream.cuh:74", "0.01 |")]


def test_the_report_names_the_places_worth_a_look():
    job = Job("ConvNeXt-T 96@56 b64 bfloat16 channels_last", "forward", 96, 56, 7, 1, "bfloat16", "nhwc", 2, 4, 64)
    kernel = "channels_last_mma_kernel block 8,32,1 shared 41472"
    profile = PassProfile(job, kernel, kernel, True, [
        Site("Mma.cuh:209", "shared", "ldmatrix", 16, 100, 4000, 4000),
        Site("Stream.cuh:74", "shared", "cp.async-write", 16, 10, 100, 50),  # 2x, 2.4 % of the wavefronts
        Site("Mma.cuh:144", "shared", "load", 4, 1, 20, 10),                 # 2x, too small a share
        Site("Mma.cuh:262", "global", "store", 4, 10, 80, 40)])
    text = markdown([profile])
    assert "| channels_last_mma_kernel | 2, 4 | 1.01 | - | 2.00 | - | yes |" in text  # no floor: no estimate
    flagged = [line for line in text.splitlines() if line.startswith("| ConvNeXt-T") and "x fewest" not in line][1:]
    assert [line.split(" | ")[2] for line in flagged] == ["Stream.cuh:74", "Mma.cuh:262"]
    elsewhere = PassProfile(job, kernel, "channels_last_stream_kernel block 8,32,1 shared 30720", True, profile.sites)
    assert f"| {kernel} (H100: channels_last_stream_kernel block 8,32,1 shared 30720) | 2, 4 |" in markdown([elsewhere])


@pytest.fixture(scope="module")
def profiled_emulator(tmp_path_factory):
    return build(tmp_path_factory.mktemp("memory-profile-build"))


def profile_of(binary, label: str, pass_: str) -> PassProfile:
    set_name = label.split()[0]
    layer_problems = [p for p in problems([set_name], (("float32", "contiguous"), ("bfloat16", "channels_last")))
                      if p.label == label]
    (job,) = [j for j in jobs_for(layer_problems) if j.pass_ == pass_]
    profile = run_job(binary, job)
    assert profile.checked and profile.stands_for_h100, profile
    return profile


def sites(profile: PassProfile, place: str, op: str) -> list[Site]:
    found = [s for s in profile.sites if s.place.startswith(place) and s.op == op]
    assert found, [(s.place, s.op) for s in profile.sites]
    return found


def test_the_register_tiled_kernels_read_their_tiles_without_bank_conflicts(profiled_emulator):
    """v4's design: row pitch and plane stride padded so that every quarter warp's 16-byte loads of
    the tile fall in 8 bank groups."""
    profile = profile_of(profiled_emulator, "MobileNetV2 32@112 b64 float32 contiguous", "forward")
    assert profile.kernel_name == "register_tiled_nchw_kernel"
    (tile_reads,) = [s for s in profile.sites if s.space == "shared" and s.op == "load"]
    assert tile_reads.bytes == 16 and tile_reads.cost == tile_reads.ideal


def test_the_tensor_core_kernel_reads_its_matrices_without_bank_conflicts(profiled_emulator):
    """v32's design: a ring column holds an odd number of vectors, so that at stride 1 the 8 rows of
    an ldmatrix matrix (8 columns) fall in 8 bank groups. Its outputs are stored as a warp holds them:
    a 4-byte pair of channels a lane, 16 bytes a pixel, half of each sector (two warps' halves meet in L2)."""
    profile = profile_of(profiled_emulator, "ConvNeXt-T 96@56 b64 bfloat16 channels_last", "forward")
    assert profile.kernel_name == "channels_last_mma_kernel"
    for site in sites(profile, "DepthwiseConv2dChannelsLastMma.cuh", "ldmatrix"):
        assert site.cost == site.ideal, site
    # v33: the filters come through shared memory (whole sectors copied), each tap's 8 weights 8 banks
    # apart; read from global memory a load a tap, they were 8 sectors of 7 lines each.
    assert not [s for s in profile.sites if s.space == "global" and s.op == "load"]
    (filter_reads,) = [s for s in profile.sites if s.space == "shared" and s.op == "load"]
    assert filter_reads.bytes == 2 and filter_reads.cost == filter_reads.ideal
    (stores,) = [s for s in profile.sites if s.space == "global" and s.op == "store"]
    assert stores.bytes == 4 and stores.cost == 2 * stores.ideal


def test_a_pass_whose_plan_differs_at_a_small_batch_runs_at_a_larger_one(profiled_emulator):
    """The register-tiled weight gradient holds batch entries in a block: at batch 2 its blocks hold 2
    planes of 192@28 where the H100's hold 4 at batch 64; batch 8 gives the H100's block. (In bfloat16:
    in float the plane-streamed weight gradient takes these planes, v51.)"""
    (problem,) = [p for p in problems(["MobileNetV2"], (("bfloat16", "contiguous"),))
                  if p.label == "MobileNetV2 192@28 b64 bfloat16 contiguous"]
    (job,) = [j for j in jobs_for([problem]) if j.pass_ == "backward-weight"]
    assert not run_job(profiled_emulator, job).stands_for_h100
    profile = run_as_h100(profiled_emulator, job)
    assert profile.stands_for_h100 and profile.checked and (profile.job.batch, profile.job.sms) == (8, 16)
    assert profile.kernel == "grad_weight_register_tiled_kernel block 4,8,7 shared 17280"


def test_the_weight_gradient_copies_small_planes_of_grad_output_through_shared_memory(profiled_emulator):
    """v34: at 14x14 (rows of 28 bytes: no 16-byte row access) the register-tiled weight gradient's blocks
    of 16 batch entries copy their grad_output planes into shared memory, consecutive lanes on
    consecutive values; read from global memory, a lane's loads each touched a sector of its own (6.3x
    the fewest sectors in float). In bfloat16: in float the plane-streamed weight gradient takes these
    planes (v51)."""
    (problem,) = [p for p in problems(["MobileNetV2"], (("bfloat16", "contiguous"),))
                  if p.label == "MobileNetV2 384@14 b64 bfloat16 contiguous"]
    (job,) = [j for j in jobs_for([problem]) if j.pass_ == "backward-weight"]
    profile = run_as_h100(profiled_emulator, job)
    assert profile.stands_for_h100 and profile.checked
    assert profile.kernel.startswith("grad_weight_register_tiled_kernel block 16,4,4 ")
    loads = [s for s in profile.sites if s.space == "global" and s.op == "load"]
    # the input tiles, grad_output and the finishing kernel's partial sums
    assert len(loads) == 3 and all(s.cost <= 1.4 * s.ideal for s in loads), loads


def test_every_access_of_the_window_weight_gradient_takes_the_fewest_wavefronts_and_sectors(profiled_emulator):
    """v35: a block's 32 channels' tap sums are one run of the partial sums ([channel][tap]); put in
    shared memory in that order and stored by the whole block, they are whole sectors. Stored by the
    thread of each channel, a warp's lanes were 49 x 4 bytes apart at 7x7: a sector a lane, 8x the
    fewest (41 % of this pass's counted work). And the half types' rows are 144 bytes a pixel, so
    that the widened vectors' 16-byte pieces (a store's 32 bytes apart from lane to lane) fill the banks: at 128
    bytes two neighbouring pixels' pieces shared them, twice the fewest wavefronts. (Profiled at 5x5
    stride 2, EfficientNet-B0 672@14 k5 s2: since v43 the tensor cores take the half types' 7x7.)"""
    profile = profile_of(profiled_emulator, "EfficientNet-B0 672@14 k5 s2 b64 bfloat16 channels_last", "backward-weight")
    assert profile.kernel_name == "grad_weight_window_kernel"
    (run,) = [s for s in sites(profile, "DepthwiseConv2dRingGradWeight.cuh", "store") if s.space == "global"]
    # store_widened's pieces, and the finishing kernel's lane totals (v39), the header's two shared stores
    widened, lane_totals = sorted((s for s in sites(profile, "DepthwiseConv2dCommon.cuh", "store")
                                   if s.space == "shared"), key=lambda s: -s.bytes)
    assert (widened.bytes, lane_totals.bytes) == (16, 4)
    assert run.cost == run.ideal and widened.cost == widened.ideal and lane_totals.cost == lane_totals.ideal
    # Every other access at its fewest too, but the rows' copies: at stride 2 they come to 3 % over (9,030
    # wavefronts for 8,736 here; at 7x7 stride 1, ConvNeXt-T 768@7, they took the fewest).
    assert all(s.cost == s.ideal or (s.op == "cp.async-write" and s.cost <= 1.05 * s.ideal) for s in profile.sites), \
        [s for s in profile.sites if s.cost != s.ideal]


def test_the_tensor_core_weight_gradient_reads_its_fragments_without_bank_conflicts(profiled_emulator):
    """v43: a vector's ring rows hold its pixels side by side at a pitch of 1 mod 8 pixels, so that a
    quarter warp's fragment loads (8 pixels of one row for A, 4 pixels of two rows for B) take the
    fewest wavefronts, and the block's copies from global memory are whole runs of the tensor."""
    profile = profile_of(profiled_emulator, "ConvNeXt-T 96@56 b64 bfloat16 channels_last", "backward-weight")
    assert profile.kernel_name == "grad_weight_mma_kernel"
    fragments = [s for s in sites(profile, "DepthwiseConv2dMmaGradWeight.cuh", "load")
                 if s.space == "shared" and s.bytes == 16]
    copies = [s for s in profile.sites
              if s.place.startswith("DepthwiseConv2dMmaGradWeight.cuh") and s.op.startswith("cp.async")]
    assert len(fragments) == 3 and len(copies) == 4  # A's two rows and B; each ring's reads and writes
    assert all(s.cost == s.ideal for s in fragments + copies), [s for s in fragments + copies if s.cost != s.ideal]


def test_the_stride2_backward_input_stores_rows_of_14_in_pairs(profiled_emulator):
    """v36: grad_input rows of 14 values (MobileNetV2 576@14 s2) have no 16-byte row access; a
    thread's 4 values went as 4 stores, each touching every sector of the warp's 8 rows (5.3x the
    fewest sectors, 70 % of the pass's counted work). In pairs of 8 bytes, 2.6x."""
    profile = profile_of(profiled_emulator, "MobileNetV2 576@14 s2 b64 float32 contiguous", "backward-input")
    assert profile.kernel_name == "stride2_grad_input_nchw_kernel"
    stores = [s for s in profile.sites if s.space == "global" and s.op == "store"]
    assert stores and all(s.bytes >= 8 for s in stores), stores
    assert sum(s.cost for s in stores) <= 2.6 * sum(s.ideal for s in stores), stores


def test_the_channels_last_register_tiled_kernel_stages_its_weights_in_runs_and_reads_them_without_conflicts(
        profiled_emulator):
    """v37: a block's filters are staged in float, a tap's 16-byte pieces a row [piece][vector], so
    that a warp's lanes reading one piece of consecutive vectors read consecutive 16 bytes (at
    [vector][piece], every other 16 bytes: 2x the fewest wavefronts). Consecutive threads stage
    consecutive taps of a vector, so a warp's loads read runs of each channel's taps (by vectors, a
    sector a lane: 5.2x the fewest sectors), and the rows' odd pitch keeps their stores apart."""
    profile = profile_of(profiled_emulator, "ConvNeXt-T 768@7 b64 bfloat16 channels_last", "forward")
    assert profile.kernel_name == "channels_last_register_tiled_kernel"
    shared = [s for s in profile.sites if s.space == "shared"]
    assert all(s.cost == s.ideal for s in shared), [s for s in shared if s.cost != s.ideal]
    (weight_loads,) = [s for s in sites(profile, "DepthwiseConv2dCommon.cuh", "load") if s.space == "global"
                       and s.bytes == 2]
    assert weight_loads.cost <= 2 * weight_loads.ideal, weight_loads
