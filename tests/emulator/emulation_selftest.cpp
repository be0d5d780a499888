// Checks cuda_emulation.h itself: block and thread indices, barriers, a barrier missing or
// reached by only some threads or at different calls, warp shuffles and the ones it refuses, the
// warp matrix operations (ldmatrix's fragments, ldmatrix and mma.sync together giving a matrix
// product, lanes at different calls),
// asynchronous copies and the waits they need, shared memory poisoned per block and a write past
// it, and the launches a GPU refuses.
// Ends with "N passed, M failed", as the kernels' emulator does.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_emulation.h"

namespace {

int passed = 0, failed = 0;

void expect(bool ok, const std::string& what) {
  ++(ok ? passed : failed);
  std::printf("%s %s\n", ok ? "ok" : "FAIL", what.c_str());
}

// The launch's error message, or "" when it ran.
template <typename Kernel, typename... Args>
std::string launch_error(dim3 grid, dim3 block, std::size_t shared_bytes, Kernel kernel, Args... args) {
  try {
    dwconv_emu::launch(grid, block, shared_bytes, kernel, args...);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

unsigned linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
unsigned linear_block() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }

__global__ void record_indices(unsigned* out) {
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  out[linear_block() * threads + linear_thread()] = (((blockIdx.z * 8 + blockIdx.y) * 8 + blockIdx.x) * 8 +
                                                     threadIdx.z) * 8 * 8 * 8 + threadIdx.y * 8 + threadIdx.x;
}

// Each thread publishes its index in shared memory and reads the one `offset` threads away (its
// own where that is outside the block).
__global__ void exchange(int* out, int offset, bool barrier) {
  DWCONV_SHARED_BYTES(raw);
  int* published = reinterpret_cast<int*>(raw);
  const int threads = static_cast<int>(blockDim.x), t = static_cast<int>(threadIdx.x);
  published[t] = t;
  if (barrier) __syncthreads();
  const int from = t + offset;
  out[linear_block() * threads + t] = published[from >= 0 && from < threads ? from : t];
}

// Rounds of publishing and reading, each read followed by a barrier before the next write.
__global__ void rounds(int* out, int count) {
  DWCONV_SHARED_BYTES(raw);
  int* published = reinterpret_cast<int*>(raw);
  const int threads = static_cast<int>(blockDim.x), t = static_cast<int>(threadIdx.x);
  int sum = 0;
  for (int round = 0; round < count; ++round) {
    published[t] = round * threads + t;
    __syncthreads();
    sum += published[(t + 1) % threads];
    __syncthreads();
  }
  out[t] = sum;
}

__global__ void barrier_in_odd_threads() {
  if (threadIdx.x % 2 == 0) return;
  __syncthreads();
}

__global__ void first_byte_then_overwrite(unsigned char* seen) {
  DWCONV_SHARED_BYTES(raw);
  if (threadIdx.x == 0) {
    seen[blockIdx.x] = raw[5];
    raw[5] = 0;
  }
}

// Each lane's value `delta` lanes down, with `rounds` more shuffles after it adding the warp up:
// out[t] is the first shuffle's result, sums[t] the running sum's (the warp's total in lane 0).
__global__ void shuffle_down(int* out, int* sums, unsigned delta) {
  const int t = static_cast<int>(linear_thread());
  const unsigned at = linear_block() * blockDim.x * blockDim.y * blockDim.z + t;
  out[at] = __shfl_down_sync(0xffffffffu, t, delta);
  double sum = t;
  for (unsigned offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  sums[at] = static_cast<int>(sum);
}

// Warp 0 adds itself up while warp 1 waits at the barrier; then warp 1 reads warp 0's total.
__global__ void shuffle_then_barrier(int* out) {
  __shared__ int total;
  const int t = static_cast<int>(threadIdx.x);
  if (t < 32) {
    int sum = t;
    for (unsigned offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (t == 0) total = sum;
  }
  __syncthreads();
  out[t] = total;
}

// Each lane's value `delta` lanes up, its own before the warp's start.
__global__ void shuffle_up(int* out, unsigned delta) {
  const int t = static_cast<int>(threadIdx.x);
  out[t] = __shfl_up_sync(0xffffffffu, t, delta);
}

// A warp's even lanes at an up shuffle, its odd ones at a down one: two warp operations.
__global__ void shuffle_up_and_down() {
  if (threadIdx.x % 2 == 0) {
    __shfl_up_sync(0xffffffffu, 1, 1);
  } else {
    __shfl_down_sync(0xffffffffu, 1, 1);
  }
}

__global__ void shuffle_in_odd_lanes() {
  if (threadIdx.x % 2 == 0) return;
  __shfl_down_sync(0xffffffffu, 1, 1);
}

__global__ void shuffle_with_mask(unsigned mask) { __shfl_down_sync(mask, 1, 1); }

// The whole warps of a block whose last warp is part-filled shuffle; that warp does not.
__global__ void shuffle_in_whole_warps(int* out, unsigned whole_threads) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  out[threadIdx.x] = threadIdx.x < whole_threads ? __shfl_down_sync(0xffffffffu, lane, 1) : -1;
}

__global__ void vector_access(const float* address) { DWCONV_EXPECT_ALIGNED(address); }
__global__ void pair_access(const float* address) { DWCONV_EXPECT_ALIGNED_TO(address, 8); }

// A kernel of its own for the checks of the opt-in past 48 KB, so that its allowance reaches no
// other check's launch.
__global__ void opted_in_write(std::size_t at) {
  DWCONV_SHARED_BYTES(raw);
  raw[at] = 1;
}

// 16-bit values as bfloat16's top half of a float: small integers, exact.
float widen_bf16(std::uint16_t bits) {
  const std::uint32_t word = std::uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}
std::uint16_t narrow_bf16(float value) {
  std::uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  return static_cast<std::uint16_t>(word >> 16);
}

// Shared memory holds four 8x8 matrices of 16-bit values, matrix i's row r at i * 8 + r; each lane
// loads them (.x4, lane l addressing row l % 8 of matrix l / 8) and writes its four words.
__global__ void load_four_matrices(const std::uint16_t* values, std::uint32_t* words) {
  DWCONV_SHARED_BYTES(raw);
  auto* rows = reinterpret_cast<std::uint16_t*>(raw);
  const unsigned lane = threadIdx.x;
  for (unsigned i = lane; i < 4 * 8 * 8; i += 32) rows[i] = values[i];
  __syncthreads();
  std::uint32_t got[4];
  dwconv_emu::load_matrices(got, 4, rows + lane * 8, __LINE__);
  for (int i = 0; i < 4; ++i) words[lane * 4 + i] = got[i];
}

// d = A B for A 16x8 (row-major in shared memory, loaded .x2: lanes 0-15 address rows 0-15) and
// B 8x8 (row-major in global memory), through the fragments, written row-major into d (16x8).
// With `apart`, the odd lanes reach the product at another call.
__global__ void multiply_matrices(const std::uint16_t* a, const std::uint16_t* b, float* d, bool apart) {
  DWCONV_SHARED_BYTES(raw);
  auto* rows = reinterpret_cast<std::uint16_t*>(raw);
  const unsigned lane = threadIdx.x, g = lane / 4, q = lane % 4;
  for (unsigned i = lane; i < 16 * 8; i += 32) rows[i] = a[i];
  __syncthreads();
  std::uint32_t fragment[2];
  dwconv_emu::load_matrices(fragment, 2, rows + (lane % 16) * 8, __LINE__);
  const std::uint32_t column = std::uint32_t(b[(2 * q) * 8 + g]) | std::uint32_t(b[(2 * q + 1) * 8 + g]) << 16;
  float sums[4] = {0.f, 0.f, 0.f, 0.f};
  if (apart && lane % 2 == 1) {
    dwconv_emu::multiply_add_16x8x8(sums, fragment, column, widen_bf16, __LINE__);
  } else {
    dwconv_emu::multiply_add_16x8x8(sums, fragment, column, widen_bf16, __LINE__);
  }
  for (int i = 0; i < 4; ++i) d[(g + 8 * (i / 2)) * 8 + 2 * q + i % 2] = sums[i];
}

struct alignas(16) Quad {
  int v[4];
};

// Thread t copies src[t] (src[t + threads] in a second group) into shared slot t (t + threads)
// asynchronously, waits for all but `pending` groups (none: -1), crosses a barrier and reads
// slot t + 1's first value (out[t]) and slot t + 1 + threads's (out[t + threads]), the last
// thread its own; then waits for the rest, so that it ends with nothing in flight.
__global__ void copy_then_read(const Quad* src, int* out, bool inside, int pending) {
  DWCONV_SHARED_BYTES(raw);
  Quad* slots = reinterpret_cast<Quad*>(raw);
  const int threads = static_cast<int>(blockDim.x), t = static_cast<int>(threadIdx.x);
  dwconv_emu::copy_async_16(slots + t, src + t, inside);
  dwconv_emu::commit_async_copies();
  dwconv_emu::copy_async_16(slots + t + threads, src + t + threads, inside);
  dwconv_emu::commit_async_copies();
  if (pending >= 0) dwconv_emu::wait_async_copies(pending);
  __syncthreads();
  const int from = t + 1 < threads ? t + 1 : t;
  const int at = static_cast<int>(linear_block()) * 2 * threads + t;
  out[at] = slots[from].v[0];
  out[at + threads] = slots[from + threads].v[0];
  dwconv_emu::wait_async_copies(0);
}

// Slot t holds t; thread t reads slot t + offset (its own past the block), then, with no barrier
// between, copies src[t] into slot t: out[t] is what it read.
__global__ void read_then_copy_over(const Quad* src, int* out, int offset) {
  DWCONV_SHARED_BYTES(raw);
  Quad* slots = reinterpret_cast<Quad*>(raw);
  const int threads = static_cast<int>(blockDim.x), t = static_cast<int>(threadIdx.x);
  slots[t].v[0] = t;
  __syncthreads();
  const int from = t + offset >= 0 && t + offset < threads ? t + offset : t;
  out[static_cast<int>(linear_block()) * threads + t] = slots[from].v[0];
  dwconv_emu::copy_async_16(slots + t, src + t, true);
  dwconv_emu::commit_async_copies();
  dwconv_emu::wait_async_copies(0);
}

__global__ void copy_and_leave(const Quad* src, bool commit) {
  DWCONV_SHARED_BYTES(raw);
  dwconv_emu::copy_async_16(reinterpret_cast<Quad*>(raw) + threadIdx.x, src, true);
  if (commit) dwconv_emu::commit_async_copies();
}

__global__ void copy_to(Quad* dst, const Quad* src) {
  dwconv_emu::copy_async_16(dst, src, true);
  dwconv_emu::commit_async_copies();
  dwconv_emu::wait_async_copies(0);
}

bool all_equal_their_index(const std::vector<int>& values, int threads, int offset) {
  for (size_t i = 0; i < values.size(); ++i) {
    const int t = static_cast<int>(i) % threads, from = t + offset;
    if (values[i] != (from >= 0 && from < threads ? from : t)) return false;
  }
  return true;
}

}  // namespace

// Even threads wait at one barrier, odd ones at another (or all at the first, `one_place`).
__global__ void barriers_apart(bool one_place) {
  if (one_place || threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

// Thread 0 writes the byte at `offset` of the block's dynamic shared memory.
__global__ void write_shared_byte(std::size_t offset) {
  DWCONV_SHARED_BYTES(raw);
  if (threadIdx.x == 0) raw[offset] = 0;
}

int main() {
  {
    const dim3 grid(3, 2, 2), block(4, 3, 2);
    std::vector<unsigned> out(12 * 24, ~0u);
    expect(launch_error(grid, block, 0, record_indices, out.data()).empty(), "a 3D grid of 3D blocks launches");
    bool every_index = true;
    for (unsigned bz = 0; bz < 2; ++bz)
      for (unsigned by = 0; by < 2; ++by)
        for (unsigned bx = 0; bx < 3; ++bx)
          for (unsigned tz = 0; tz < 2; ++tz)
            for (unsigned ty = 0; ty < 3; ++ty)
              for (unsigned tx = 0; tx < 4; ++tx) {
                const unsigned at = ((bz * 2 + by) * 3 + bx) * 24 + (tz * 3 + ty) * 4 + tx;
                every_index &= out[at] == ((((bz * 8 + by) * 8 + bx) * 8 + tz) * 8 * 8 * 8 + ty * 8 + tx);
              }
    expect(every_index, "every thread of every block runs once, with its own threadIdx and blockIdx");
  }
  for (const int offset : {1, -1}) {
    const std::string reading = offset > 0 ? "the next thread's" : "the previous thread's";
    std::vector<int> out(2 * 64);
    launch_error(dim3(2), dim3(64), 64 * sizeof(int), exchange, out.data(), offset, true);
    expect(all_equal_their_index(out, 64, offset), "with a barrier, each thread reads " + reading + " value");
    launch_error(dim3(2), dim3(64), 64 * sizeof(int), exchange, out.data(), offset, false);
    expect(!all_equal_their_index(out, 64, offset), "without it, reading " + reading + " value fails");
    bool one_failed = false;
    for (int launch = 0; launch < 2; ++launch) {  // one block: the order turns from launch to launch
      std::vector<int> one_block(64);
      launch_error(dim3(1), dim3(64), 64 * sizeof(int), exchange, one_block.data(), offset, false);
      one_failed |= !all_equal_their_index(one_block, 64, offset);
    }
    expect(one_failed, "without it, one of two one-block launches reading " + reading + " value fails");
  }
  {
    std::vector<int> out(32);
    launch_error(dim3(1), dim3(32), 32 * sizeof(int), rounds, out.data(), 5);
    bool sums = true;
    for (int t = 0; t < 32; ++t) sums &= out[t] == (0 + 1 + 2 + 3 + 4) * 32 + 5 * ((t + 1) % 32);
    expect(sums, "five rounds between barriers each read the round's values");
  }
  {
    const std::string error = launch_error(dim3(2), dim3(8), 0, barrier_in_odd_threads);
    expect(error.find("__syncthreads() reached by some of a block's threads") != std::string::npos,
           "a barrier half the block reaches fails the launch: " + error);
    std::vector<int> out(2 * 64);
    launch_error(dim3(2), dim3(64), 64 * sizeof(int), exchange, out.data(), 1, true);
    expect(all_equal_their_index(out, 64, 1), "and the next launch runs as usual");
  }
  {
    std::vector<int> out(2 * 64), sums(2 * 64);
    expect(launch_error(dim3(2), dim3(64), 0, shuffle_down, out.data(), sums.data(), 3u).empty(),
           "warp shuffles run");
    bool down = true, totals = true;
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32, warp_first = t - lane;
      down &= out[t] == (lane + 3 < 32 ? t + 3 : t) && out[64 + t] == out[t];
      if (lane == 0) totals &= sums[t] == 32 * warp_first + 31 * 32 / 2 && sums[64 + t] == sums[t];
    }
    expect(down, "each lane reads the value 3 lanes down, its own past the warp's end");
    expect(totals, "five shuffles down add each warp up in its lane 0");
    std::vector<int> total(64, -1);
    launch_error(dim3(1), dim3(64), 0, shuffle_then_barrier, total.data());
    bool everyone = true;
    for (const int value : total) everyone &= value == 31 * 32 / 2;
    expect(everyone, "a warp shuffles while another waits at a barrier, then both read its total");
    std::string error = launch_error(dim3(1), dim3(64), 0, shuffle_in_odd_lanes);
    expect(error.find("reached by some of a warp's lanes") != std::string::npos,
           "a shuffle half the warp reaches fails the launch: " + error);
    error = launch_error(dim3(1), dim3(32), 0, shuffle_with_mask, 0xffffu);
    expect(error.find("mask other than the whole warp") != std::string::npos,
           "a shuffle of part of a warp is refused: " + error);
    error = launch_error(dim3(1), dim3(48), 0, shuffle_with_mask, 0xffffffffu);
    expect(error.find("part-filled last warp") != std::string::npos,
           "a shuffle in the last 16 lanes of a block of 48 threads is refused: " + error);
    std::vector<int> whole(48, 0);
    error = launch_error(dim3(1), dim3(48), 0, shuffle_in_whole_warps, whole.data(), 32u);
    expect(error.empty() && whole[0] == 1 && whole[30] == 31 && whole[31] == 31 && whole[32] == -1 && whole[47] == -1,
           "the whole first warp of a block of 48 threads shuffles, the part-filled one does not: " + error);
    std::vector<int> up(64, -1);
    error = launch_error(dim3(1), dim3(64), 0, shuffle_up, up.data(), 3u);
    bool ups = error.empty();
    for (int t = 0; t < 64; ++t) ups &= up[t] == (t % 32 >= 3 ? t - 3 : t);
    expect(ups, "each lane reads the value 3 lanes up, its own before the warp's start: " + error);
    error = launch_error(dim3(1), dim3(32), 0, shuffle_up_and_down);
    expect(error.find("different warp operations") != std::string::npos,
           "a warp's lanes at an up and a down shuffle fail the launch: " + error);
    launch_error(dim3(2), dim3(64), 0, shuffle_down, out.data(), sums.data(), 1u);
    expect(out[5] == 6 && out[31] == 31, "and the next launch shuffles as usual");
  }
  {
    std::vector<std::uint16_t> values(4 * 8 * 8);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint16_t>(i);
    std::vector<std::uint32_t> words(32 * 4);
    expect(launch_error(dim3(1), dim3(32), values.size() * 2, load_four_matrices, values.data(), words.data()).empty(),
           "ldmatrix .x4 runs");
    bool fragments = true;
    for (unsigned lane = 0; lane < 32; ++lane) {
      for (unsigned i = 0; i < 4; ++i) {  // row lane / 4 of matrix i, its columns 2 (lane % 4) and 2 (lane % 4) + 1
        const unsigned first = i * 64 + (lane / 4) * 8 + 2 * (lane % 4);
        fragments = fragments && words[lane * 4 + i] == (first | (first + 1) << 16);
      }
    }
    expect(fragments, "ldmatrix .x4: lane l's word i holds row l / 4 of matrix i at columns 2 (l % 4), + 1, low first");
    std::vector<std::uint16_t> a(16 * 8), b(8 * 8);
    for (int i = 0; i < 16 * 8; ++i) a[i] = narrow_bf16(float(i % 7 - 3));
    for (int i = 0; i < 8 * 8; ++i) b[i] = narrow_bf16(float(i % 5 - 2));
    std::vector<float> d(16 * 8);
    expect(launch_error(dim3(1), dim3(32), a.size() * 2, multiply_matrices, a.data(), b.data(), d.data(), false).empty(),
           "ldmatrix .x2 and mma.sync m16n8k8 run");
    bool product = true;
    for (int r = 0; r < 16; ++r) {
      for (int c = 0; c < 8; ++c) {
        float sum = 0.f;
        for (int k = 0; k < 8; ++k) sum += widen_bf16(a[r * 8 + k]) * widen_bf16(b[k * 8 + c]);
        product = product && d[r * 8 + c] == sum;
      }
    }
    expect(product, "the fragments ldmatrix gives and mma.sync takes make A B");
    const std::string error =
        launch_error(dim3(1), dim3(32), a.size() * 2, multiply_matrices, a.data(), b.data(), d.data(), true);
    expect(error.find("different ldmatrix or mma.sync calls") != std::string::npos,
           "lanes at two mma.sync calls fail the launch: " + error);
  }
  {
    constexpr int kThreadsHere = 32, kBlocks = 4;  // four blocks: each way of landing, each thread order
    std::vector<Quad> src(2 * kThreadsHere);
    for (int i = 0; i < 2 * kThreadsHere; ++i) src[i] = Quad{{100 + i, 0, 0, 0}};
    const auto copied = [&](const std::vector<int>& out, int group, int block, int t) {
      const int from = t + 1 < kThreadsHere ? t + 1 : t;
      return out[block * 2 * kThreadsHere + group * kThreadsHere + t] == 100 + group * kThreadsHere + from;
    };
    const auto count_copied = [&](const std::vector<int>& out, int group) {
      int n = 0;
      for (int b = 0; b < kBlocks; ++b)
        for (int t = 0; t < kThreadsHere; ++t) n += copied(out, group, b, t);
      return n;
    };
    std::vector<int> out(kBlocks * 2 * kThreadsHere);
    const std::size_t bytes = 2 * kThreadsHere * sizeof(Quad);
    expect(launch_error(dim3(kBlocks), dim3(kThreadsHere), bytes, copy_then_read, src.data(), out.data(), true, 0)
               .empty() && count_copied(out, 0) == kBlocks * kThreadsHere && count_copied(out, 1) == kBlocks * kThreadsHere,
           "asynchronous copies, waited for and then a barrier, are seen by every thread");
    launch_error(dim3(kBlocks), dim3(kThreadsHere), bytes, copy_then_read, src.data(), out.data(), true, 1);
    expect(count_copied(out, 0) == kBlocks * kThreadsHere && count_copied(out, 1) < kBlocks * kThreadsHere,
           "waiting for all but the newest group lands the older one only");
    launch_error(dim3(kBlocks), dim3(kThreadsHere), bytes, copy_then_read, src.data(), out.data(), true, -1);
    expect(count_copied(out, 0) < kBlocks * kThreadsHere, "without the wait, a read after the barrier finds stale data");
    launch_error(dim3(kBlocks), dim3(kThreadsHere), bytes, copy_then_read, src.data(), out.data(), false, 0);
    bool zeros = true;
    for (const int value : out) zeros &= value == 0;
    expect(zeros, "a copy from outside the tensor writes zeros");
    for (const int offset : {1, -1}) {
      std::vector<int> read(kBlocks * kThreadsHere);
      launch_error(dim3(kBlocks), dim3(kThreadsHere), kThreadsHere * sizeof(Quad), read_then_copy_over, src.data(),
                   read.data(), offset);
      bool stale_everywhere = true;
      for (int i = 0; i < kBlocks * kThreadsHere; ++i) {
        const int t = i % kThreadsHere, from = t + offset >= 0 && t + offset < kThreadsHere ? t + offset : t;
        stale_everywhere &= read[i] == from;
      }
      expect(!stale_everywhere, "a copy over a slot that " + std::string(offset > 0 ? "the previous" : "the next") +
                                    " thread reads, with no barrier between, shows");
    }
    std::string error = launch_error(dim3(1), dim3(32), bytes, copy_and_leave, src.data(), true);
    expect(error.find("not waited for") != std::string::npos, "a thread that ends with copies in flight fails the launch: " + error);
    error = launch_error(dim3(1), dim3(32), bytes, copy_and_leave, src.data(), false);
    expect(error.find("not waited for") != std::string::npos, "and one that ends with copies not committed: " + error);
    Quad global_dst{};
    error = launch_error(dim3(1), dim3(1), bytes, copy_to, &global_dst, src.data());
    expect(error.find("outside its shared memory") != std::string::npos, "a copy to global memory fails the launch: " + error);
    expect(launch_error(dim3(kBlocks), dim3(kThreadsHere), bytes, copy_then_read, src.data(), out.data(), true, 0).empty(),
           "and the next launch copies as usual");
  }
  {
    std::vector<unsigned char> seen(4, 0);
    launch_error(dim3(4), dim3(32), 64, first_byte_then_overwrite, seen.data());
    bool poisoned = true;
    for (const unsigned char byte : seen) poisoned &= byte == 0xff;
    expect(poisoned, "dynamic shared memory is poisoned before every block");
  }
  {
    alignas(16) float data[8] = {};
    expect(launch_error(dim3(1), dim3(1), 0, vector_access, data + 4).empty(), "a 16-byte access on a boundary runs");
    expect(launch_error(dim3(1), dim3(1), 0, vector_access, data + 1).find("off a 16-byte boundary") != std::string::npos,
           "one off a boundary fails the launch");
    expect(launch_error(dim3(1), dim3(1), 0, pair_access, data + 2).empty(), "an 8-byte access on its boundary runs");
    expect(launch_error(dim3(1), dim3(1), 0, pair_access, data + 1).find("off a 16-byte boundary (8-byte ones: 8)") !=
               std::string::npos,
           "an 8-byte access off its boundary fails the launch");
  }
  expect(launch_error(dim3(1), dim3(2048), 0, vector_access, nullptr).find("no GPU accepts") != std::string::npos,
         "a block of 2048 threads is refused");
  expect(launch_error(dim3(1, 70000), dim3(32), 0, vector_access, nullptr).find("no GPU accepts") != std::string::npos,
         "a grid 70000 blocks high is refused");
  expect(launch_error(dim3(1), dim3(32), 48 * 1024 + 16, vector_access, nullptr).find("48 KB") != std::string::npos,
         "more than 48 KB of dynamic shared memory is refused");
  {
    constexpr std::size_t kOptedIn = 56 * 1024;
    expect(launch_error(dim3(1), dim3(32), kOptedIn, opted_in_write, std::size_t{0}).find("opted in to (49152)") !=
               std::string::npos,
           "56 KB before the kernel opts in is refused");
    DWCONV_OPT_IN_SHARED_BYTES(opted_in_write, kOptedIn);
    expect(launch_error(dim3(2), dim3(32), kOptedIn, opted_in_write, kOptedIn - 1).empty(),
           "56 KB after it opts in to 56 KB runs, and its last byte is written");
    expect(launch_error(dim3(1), dim3(32), kOptedIn + 16, opted_in_write, std::size_t{0}).find("opted in to (57344)") !=
               std::string::npos,
           "16 bytes more than it opted in to are refused");
    expect(launch_error(dim3(1), dim3(32), kOptedIn, vector_access, nullptr).find("opted in to (49152)") !=
               std::string::npos,
           "another kernel is not allowed what one opted in to");
    bool refused = false;
    try {
      DWCONV_OPT_IN_SHARED_BYTES(opted_in_write, std::size_t{228} * 1024);
    } catch (const std::runtime_error& error) {
      refused = std::string(error.what()).find("227 KB") != std::string::npos;
    }
    expect(refused, "an opt-in past what any GPU's block may take (227 KB) is refused");
  }
  expect(launch_error(dim3(2), dim3(64), 0, barriers_apart, true).empty(), "threads at one barrier call run on");
  expect(launch_error(dim3(2), dim3(64), 0, barriers_apart, false).find("different __syncthreads() calls") !=
             std::string::npos,
         "threads at two barrier calls fail the launch");
  expect(launch_error(dim3(2), dim3(32), 64, write_shared_byte, std::size_t{63}).empty(),
         "a write to the last byte of dynamic shared memory runs");
  expect(launch_error(dim3(2), dim3(32), 64, write_shared_byte, std::size_t{64}).find("wrote past its dynamic shared") !=
             std::string::npos,
         "a write past it fails the launch");
  dwconv_emu::launch_bound_threads = 256;
  expect(launch_error(dim3(1), dim3(16, 16), 0, vector_access, nullptr).empty(), "a block at the launch bound runs");
  expect(launch_error(dim3(1), dim3(16, 17), 0, vector_access, nullptr).find("__launch_bounds__ (256)") !=
             std::string::npos,
         "a block past the launch bound is refused");
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
