// Checks the emulator's race check (cuda_emulation.h built with -fsanitize=thread): each scenario,
// named on the command line, is a launch that a GPU either orders (ThreadSanitizer must stay
// silent) or leaves racing (it must report, in the kernel below). Several races here give the
// same values in every order the emulator runs threads in, which only the race check can see. The
// asynchronous copies' scenarios run in each kind of block: copies landing at the wait, and at the copy.
// Prints "ran <scenario>"; ThreadSanitizer's reports go to stderr and make the exit status 66.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda_emulation.h"

namespace {

constexpr unsigned kWarp = 32;

// Every thread writes its index, then reads its neighbour's: ordered only by the barrier.
__global__ void neighbour_read(int* out, bool barrier) {
  DWCONV_SHARED_BYTES(raw);
  int* slots = reinterpret_cast<int*>(raw);
  const unsigned t = threadIdx.x;
  slots[t] = static_cast<int>(t);
  if (barrier) __syncthreads();
  out[t] = slots[(t + 1) % blockDim.x];
}

// Every thread writes the same value to one word: the result is the same in any order, and a
// race all the same (compute-sanitizer reports it too).
__global__ void same_value(int* out, bool first_thread_only) {
  DWCONV_SHARED_BYTES(raw);
  int* flag = reinterpret_cast<int*>(raw);
  if (!first_thread_only || threadIdx.x == 0) *flag = 1;
  __syncthreads();
  out[threadIdx.x] = *flag;
}

// A slot read, then written over by its owner for a second round: the write must wait for the
// neighbour's read behind a barrier.
__global__ void rewrite_after_read(int* out, bool barrier) {
  DWCONV_SHARED_BYTES(raw);
  int* slots = reinterpret_cast<int*>(raw);
  const unsigned t = threadIdx.x;
  slots[t] = 1;
  __syncthreads();
  const int seen = slots[(t + 1) % blockDim.x];
  if (barrier) __syncthreads();
  slots[t] = 1;  // the value it held: no order shows a difference
  __syncthreads();
  out[t] = seen + slots[t];
}

struct alignas(16) Vector {
  int values[4];
};

// Each thread copies its vector into its slot asynchronously and reads its neighbour's slot after
// its own wait: ordered only by a barrier after the waits.
__global__ void copy_then_neighbour_read(const Vector* src, int* out, bool barrier) {
  DWCONV_SHARED_BYTES(raw);
  auto* slots = reinterpret_cast<Vector*>(raw);
  const unsigned t = threadIdx.x;
  dwconv_emu::copy_async_16(&slots[t], &src[t], true);
  dwconv_emu::commit_async_copies();
  dwconv_emu::wait_async_copies(0);
  if (barrier) __syncthreads();
  out[t] = slots[(t + 1) % blockDim.x].values[0];
}

// A thread reads its neighbour's slot, then copies into its own for the next round: the copy must
// wait behind a barrier for the neighbour's read.
__global__ void copy_over_read_slot(const Vector* src, int* out, bool barrier) {
  DWCONV_SHARED_BYTES(raw);
  auto* slots = reinterpret_cast<Vector*>(raw);
  const unsigned t = threadIdx.x;
  slots[t] = src[t];
  __syncthreads();
  const int seen = slots[(t + 1) % blockDim.x].values[0];
  if (barrier) __syncthreads();
  dwconv_emu::copy_async_16(&slots[t], &src[t], true);  // the same values: no order shows
  dwconv_emu::commit_async_copies();
  dwconv_emu::wait_async_copies(0);
  out[t] = seen + slots[t].values[0];
}

// A thread copies into its slot and passes a barrier with the copy in flight before its wait; a GPU
// may land the copy in the interval after that barrier, where its neighbour reads the slot (or not).
__global__ void copy_across_a_barrier(const Vector* src, int* out, bool neighbour_reads_in_flight) {
  DWCONV_SHARED_BYTES(raw);
  auto* slots = reinterpret_cast<Vector*>(raw);
  const unsigned t = threadIdx.x;
  dwconv_emu::copy_async_16(&slots[t], &src[t], true);
  dwconv_emu::commit_async_copies();
  __syncthreads();
  const int early = neighbour_reads_in_flight ? slots[(t + 1) % blockDim.x].values[0] : 0;
  __syncthreads();
  dwconv_emu::wait_async_copies(0);
  __syncthreads();
  out[t] = early + slots[(t + 1) % blockDim.x].values[0];
}

// Lane l writes row l of a 32-row matrix; ldmatrix has lane l address row (l + 1) % 32, written by
// another lane: ordered only by the barrier (the warp operation orders nothing).
__global__ void rows_then_load_matrices(std::uint32_t* out, bool barrier) {
  DWCONV_SHARED_BYTES(raw);
  auto* rows = reinterpret_cast<Vector*>(raw);
  const unsigned lane = threadIdx.x;
  rows[lane] = Vector{{1, 2, 3, 4}};
  if (barrier) __syncthreads();
  std::uint32_t words[4];
  dwconv_emu::load_matrices(words, 4, &rows[(lane + 1) % kWarp], __LINE__);
  out[lane] = words[0] + words[1] + words[2] + words[3];
}

// A shuffle between a write and another lane's read orders nothing on a GPU.
__global__ void write_shuffle_read(int* out) {
  DWCONV_SHARED_BYTES(raw);
  int* slots = reinterpret_cast<int*>(raw);
  const unsigned lane = threadIdx.x;
  slots[lane] = 1;
  const int offered = __shfl_down_sync(0xffffffffu, static_cast<int>(lane), 1);
  out[lane] = offered + slots[(lane + 1) % kWarp];
}

float widen_half_bits(std::uint16_t bits) { return static_cast<float>(bits); }

// A warp matrix product between a write and another lane's read orders nothing either.
__global__ void write_multiply_read(int* out) {
  DWCONV_SHARED_BYTES(raw);
  int* slots = reinterpret_cast<int*>(raw);
  const unsigned lane = threadIdx.x;
  slots[lane] = 1;
  float d[4] = {};
  const std::uint32_t a[2] = {};
  dwconv_emu::multiply_add_16x8x8(d, a, 0u, &widen_half_bits, __LINE__);
  out[lane] = static_cast<int>(d[0]) + slots[(lane + 1) % kWarp];
}

// Every block writes and reads the same shared word as the block before it, with no barrier after
// the reads: blocks share no shared memory on a GPU, so nothing races.
__global__ void blocks_reuse_shared(int* out) {
  DWCONV_SHARED_BYTES(raw);
  int* word = reinterpret_cast<int*>(raw);
  if (threadIdx.x == 0) *word = static_cast<int>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = *word;
}

// Two threads of a block write one element of global memory.
__global__ void global_same_element(int* out, bool distinct) {
  out[distinct ? threadIdx.x : 0] = 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: race_selftest SCENARIO\n");
    return 2;
  }
  const std::string scenario = argv[1];
  int out[4 * kWarp] = {};
  Vector src[kWarp];
  for (unsigned t = 0; t < kWarp; ++t) src[t] = Vector{{static_cast<int>(t), 0, 0, 0}};
  std::uint32_t words[kWarp] = {};
  const dim3 one(1), warp(kWarp);
  const std::size_t bytes = kWarp * sizeof(Vector);
  // The copies' scenarios: two blocks whose copies land at the wait (blocks 0 and 1 of the
  // emulator's count), or at the copy (2 and 3).
  const std::string at_the_wait = " (landing at the wait)", at_the_copy = " (landing at the copy)";
  std::string copies = scenario;
  for (const std::string& kind : {at_the_wait, at_the_copy}) {
    if (copies.size() > kind.size() && copies.compare(copies.size() - kind.size(), kind.size(), kind) == 0) {
      copies.resize(copies.size() - kind.size());
      dwconv_emu::blocks_run = kind == at_the_wait ? 0 : 2;
    }
  }
  const dim3 two(2);
  if (copies == "copy read after its wait and a barrier") {
    dwconv_emu::launch(two, warp, bytes, copy_then_neighbour_read, src, out, true);
  } else if (copies == "copy read after its wait alone") {
    dwconv_emu::launch(two, warp, bytes, copy_then_neighbour_read, src, out, false);
  } else if (copies == "copy over a slot read before a barrier") {
    dwconv_emu::launch(two, warp, bytes, copy_over_read_slot, src, out, true);
  } else if (copies == "copy over a slot another thread still reads") {
    dwconv_emu::launch(two, warp, bytes, copy_over_read_slot, src, out, false);
  } else if (copies == "copy carried across a barrier") {
    dwconv_emu::launch(two, warp, bytes, copy_across_a_barrier, src, out, false);
  } else if (copies == "copy read in flight after a barrier") {
    dwconv_emu::launch(two, warp, bytes, copy_across_a_barrier, src, out, true);
  } else if (scenario == "neighbour read after a barrier") {
    dwconv_emu::launch(one, warp, bytes, neighbour_read, out, true);
  } else if (scenario == "neighbour read without a barrier") {
    dwconv_emu::launch(one, warp, bytes, neighbour_read, out, false);
  } else if (scenario == "one thread writes a flag") {
    dwconv_emu::launch(one, warp, bytes, same_value, out, true);
  } else if (scenario == "every thread writes the same flag") {
    dwconv_emu::launch(one, warp, bytes, same_value, out, false);
  } else if (scenario == "rewrite after a barrier") {
    dwconv_emu::launch(one, warp, bytes, rewrite_after_read, out, true);
  } else if (scenario == "rewrite without a barrier") {
    dwconv_emu::launch(one, warp, bytes, rewrite_after_read, out, false);
  } else if (scenario == "ldmatrix after a barrier") {
    dwconv_emu::launch(one, warp, bytes, rows_then_load_matrices, words, true);
  } else if (scenario == "ldmatrix of rows other lanes wrote") {
    dwconv_emu::launch(one, warp, bytes, rows_then_load_matrices, words, false);
  } else if (scenario == "a shuffle between a write and a read") {
    dwconv_emu::launch(one, warp, bytes, write_shuffle_read, out);
  } else if (scenario == "an mma.sync between a write and a read") {
    dwconv_emu::launch(one, warp, bytes, write_multiply_read, out);
  } else if (scenario == "blocks reuse shared memory") {
    dwconv_emu::launch(dim3(4), warp, bytes, blocks_reuse_shared, out);
  } else if (scenario == "threads write their own global elements") {
    dwconv_emu::launch(one, warp, bytes, global_same_element, out, true);
  } else if (scenario == "threads write one global element") {
    dwconv_emu::launch(one, warp, bytes, global_same_element, out, false);
  } else {
    std::fprintf(stderr, "race_selftest: no scenario '%s'\n", scenario.c_str());
    return 2;
  }
  std::printf("ran %s\n", scenario.c_str());
  return 0;
}
