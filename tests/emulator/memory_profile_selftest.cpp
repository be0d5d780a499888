// Checks the memory profile (cuda_emulation.h built with -fsanitize=thread -DDWCONV_MEMORY_PROFILE,
// linked with memory_profile_runtime.cpp): each scenario, named on the command line, is one warp's
// launch whose accesses take a known number of shared-memory wavefronts and global sectors, which
// tests/test_memory_profile.py compares with the profile's table. Prints "ran <scenario>".

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda_emulation.h"

namespace {

struct alignas(16) Vector {
  float values[4];
};

// Every lane writes shared word `stride` x lane, and after the barrier writes it to out[lane].
__global__ void shared_words(float* out, int stride) {
  DWCONV_SHARED_BYTES(raw);
  float* words = reinterpret_cast<float*>(raw);
  words[stride * threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = words[stride * threadIdx.x];
}

// Every lane reads shared word 0 (one word, many lanes: a broadcast).
__global__ void shared_broadcast(float* out) {
  DWCONV_SHARED_BYTES(raw);
  const float* words = reinterpret_cast<const float*>(raw);
  out[threadIdx.x] = words[0];
}

// Every lane writes the 16-byte vector `stride` x lane of shared memory.
__global__ void shared_vectors(int stride) {
  DWCONV_SHARED_BYTES(raw);
  Vector* vectors = reinterpret_cast<Vector*>(raw);
  vectors[stride * threadIdx.x] = Vector{{1.0f, 2.0f, 3.0f, 4.0f}};
}

// Every lane reads its shared vector one float at a time, as the CPU compiler may split a vector,
// first to last or last to first.
__global__ void shared_vector_by_floats(float* out, bool last_first) {
  DWCONV_SHARED_BYTES(raw);
  const volatile float* words = reinterpret_cast<const float*>(raw);
  const unsigned first = 4 * threadIdx.x;
  out[threadIdx.x] = last_first ? words[first + 3] + words[first + 2] + words[first + 1] + words[first]
                                : words[first] + words[first + 1] + words[first + 2] + words[first + 3];
}

// Two neighbouring floats a lane, the lanes' pairs 12 bytes apart: two loads (a pair is no vector).
__global__ void neighbouring_floats(float* out) {
  DWCONV_SHARED_BYTES(raw);
  const volatile float* words = reinterpret_cast<const float*>(raw);
  out[threadIdx.x] = words[3 * threadIdx.x] + words[3 * threadIdx.x + 1];
}

// A loop that lanes 0-7 run twice and the rest once, then a store every lane makes once.
__global__ void uneven_loop_then_store() {
  DWCONV_SHARED_BYTES(raw);
  float* words = reinterpret_cast<float*>(raw);
  for (unsigned i = threadIdx.x; i < 40; i += 32) words[i] = 0.0f;
  words[256 + threadIdx.x] = 1.0f;
}

// A store half the lanes make behind an unlikely branch (the compiler may lay it out after the
// rest), then a store every lane makes.
__global__ void unlikely_branch_then_store() {
  DWCONV_SHARED_BYTES(raw);
  float* words = reinterpret_cast<float*>(raw);
  if (__builtin_expect(threadIdx.x % 2 == 1, 0)) words[100 + threadIdx.x] = 2.0f;
  words[256 + threadIdx.x] = 3.0f;
}

// A static __shared__ array, every lane writing a word 32 words after the last lane's.
__global__ void static_shared_column(float* out) {
  __shared__ float columns[32 * 32];
  columns[32 * threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = columns[32 * threadIdx.x];
}

// Four loads a lane in a loop, each predicated off in some lanes (a third of them, different ones in
// each iteration): one warp instruction an iteration, whatever lanes sit it out.
__global__ void loads_some_lanes_skip(const float* src, float* out) {
  float sum = 0.0f;
  for (unsigned i = 0; i < 4; ++i) {
    if ((i + threadIdx.x) % 3 != 0) sum += src[32 * i + threadIdx.x];
  }
  out[threadIdx.x] = sum;
}

// Every lane writes a 16-byte vector of global memory, `stride` vectors after the last lane's.
__global__ void global_vectors(Vector* out, int stride) {
  out[stride * threadIdx.x] = Vector{{1.0f, 2.0f, 3.0f, 4.0f}};
}

// ldmatrix .x4: lane l gives the row 16 x `row_stride` x l bytes into shared memory.
__global__ void load_matrix_rows(std::uint32_t* out, int row_stride) {
  DWCONV_SHARED_BYTES(raw);
  std::uint32_t words[4];
  dwconv_emu::load_matrices(words, 4, raw + 16 * row_stride * threadIdx.x, __LINE__, __FILE__);
  out[threadIdx.x] = words[0];
}

// Asynchronous 16-byte copies from consecutive global vectors into shared vector
// (lane / vectors) x pitch + lane % vectors: a ring of columns of `vectors` vectors, `pitch` apart.
__global__ void copy_into_columns(const Vector* src, int vectors, int pitch) {
  DWCONV_SHARED_BYTES(raw);
  Vector* ring = reinterpret_cast<Vector*>(raw);
  const unsigned lane = threadIdx.x;
  dwconv_emu::copy_async_16(ring + lane / vectors * pitch + lane % vectors, src + lane, true, __FILE__, __LINE__);
  dwconv_emu::commit_async_copies();
  dwconv_emu::wait_async_copies(0);
}

// Two loops of copies, as a kernel's prologue: 40 vectors (lanes 0-7 copy two), then 64 (every lane two).
__global__ void two_copy_loops(const Vector* src) {
  DWCONV_SHARED_BYTES(raw);
  Vector* ring = reinterpret_cast<Vector*>(raw);
  for (unsigned i = threadIdx.x; i < 40; i += 32) {
    dwconv_emu::copy_async_16(ring + 128 + i, src + i, true, __FILE__, __LINE__);
  }
  for (unsigned i = threadIdx.x; i < 64; i += 32) dwconv_emu::copy_async_16(ring + i, src + i, true, __FILE__, __LINE__);
  dwconv_emu::commit_async_copies();
  dwconv_emu::wait_async_copies(0);
}

// Device memory (256-byte aligned, as the CUDA allocator's), counted as global by the profile while it lives.
template <typename T>
struct DeviceBuffer {
  T* data;
  explicit DeviceBuffer(std::size_t n) : data(static_cast<T*>(std::aligned_alloc(256, n * sizeof(T)))) {
    std::memset(data, 0, n * sizeof(T));
    dwconv_emu::memory_profile::global_region(data, n * sizeof(T), true);
  }
  ~DeviceBuffer() {
    dwconv_emu::memory_profile::global_region(data, 0, false);
    std::free(data);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: memory_profile_selftest SCENARIO\n");
    return 2;
  }
  const std::string scenario = argv[1];
  const dim3 one(1), warp(32);
  const std::size_t bytes = 32 * 32 * 4 * sizeof(float);
  DeviceBuffer<float> out(64 * 4);
  DeviceBuffer<Vector> vectors(64);
  DeviceBuffer<std::uint32_t> words(32);
  if (scenario == "consecutive shared words") {
    dwconv_emu::launch(one, warp, bytes, shared_words, out.data, 1);
  } else if (scenario == "shared words two apart") {
    dwconv_emu::launch(one, warp, bytes, shared_words, out.data, 2);
  } else if (scenario == "one shared word for every lane") {
    dwconv_emu::launch(one, warp, bytes, shared_broadcast, out.data);
  } else if (scenario == "consecutive shared vectors") {
    dwconv_emu::launch(one, warp, bytes, shared_vectors, 1);
  } else if (scenario == "shared vectors two apart") {
    dwconv_emu::launch(one, warp, bytes, shared_vectors, 2);
  } else if (scenario == "a shared vector read as four floats") {
    dwconv_emu::launch(one, warp, bytes, shared_vector_by_floats, out.data, false);
  } else if (scenario == "a shared vector read as four floats, last first") {
    dwconv_emu::launch(one, warp, bytes, shared_vector_by_floats, out.data, true);
  } else if (scenario == "two neighbouring floats a lane") {
    dwconv_emu::launch(one, warp, bytes, neighbouring_floats, out.data);
  } else if (scenario == "a loop some lanes run twice, then a store") {
    dwconv_emu::launch(one, warp, bytes, uneven_loop_then_store);
  } else if (scenario == "an unlikely branch, then a store") {
    dwconv_emu::launch(one, warp, bytes, unlikely_branch_then_store);
  } else if (scenario == "two loops of copies") {
    dwconv_emu::launch(one, warp, bytes, two_copy_loops, vectors.data);
  } else if (scenario == "a static shared column") {
    dwconv_emu::launch(one, warp, 0, static_shared_column, out.data);
  } else if (scenario == "loads that some lanes skip") {
    dwconv_emu::launch(one, warp, bytes, loads_some_lanes_skip, out.data, out.data + 128);
  } else if (scenario == "consecutive global vectors") {
    dwconv_emu::launch(one, warp, bytes, global_vectors, vectors.data, 1);
  } else if (scenario == "global vectors two apart") {
    dwconv_emu::launch(one, warp, bytes, global_vectors, vectors.data, 2);
  } else if (scenario == "ldmatrix rows one vector apart") {
    dwconv_emu::launch(one, warp, bytes, load_matrix_rows, words.data, 1);
  } else if (scenario == "ldmatrix rows two vectors apart") {
    dwconv_emu::launch(one, warp, bytes, load_matrix_rows, words.data, 2);
  } else if (scenario == "copies into columns of 8 vectors, pitch 9") {
    dwconv_emu::launch(one, warp, bytes, copy_into_columns, vectors.data, 8, 9);
  } else if (scenario == "copies into columns of 4 vectors, pitch 5") {
    dwconv_emu::launch(one, warp, bytes, copy_into_columns, vectors.data, 4, 5);
  } else {
    std::fprintf(stderr, "no scenario %s\n", scenario.c_str());
    return 2;
  }
  std::printf("ran %s\n", scenario.c_str());
  return 0;
}
