#pragma once
// Just enough of CUDA's execution model to run the project's kernels on a CPU,
// so that their index math is tested where there is no GPU:
// - a block's threads are std::threads (made once per launch), blocks run one after another;
// - __syncthreads() is a std::barrier over the block's threads;
// - __shared__ arrays become function statics (one block runs at a time), and the
//   dynamic shared memory of a launch is one buffer, poisoned before every block;
// - threadIdx and blockIdx are thread_local, blockDim and gridDim per launch;
// - a 16-byte vector access off a 16-byte boundary (a fault on a GPU) fails the launch.
// Include it after every other header and before the kernels.

#include <atomic>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace dwconv_emu {
inline thread_local dim3 thread_index;
inline thread_local dim3 block_index;
inline dim3 block_dim;
inline dim3 grid_dim;
inline std::barrier<>* block_barrier = nullptr;
constexpr std::size_t kSharedBytes = 1 << 20;
alignas(64) inline unsigned char shared_memory[kSharedBytes];
inline std::atomic<long> misaligned_vector_accesses{0};

// Runs kernel(args...) over the grid. The block's threads are created once per launch and
// driven through the blocks in turn by a gate (a barrier with the launching thread).
template <typename Kernel, typename... Args>
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, Kernel kernel, Args... args) {
  if (shared_bytes > kSharedBytes) {
    throw std::runtime_error("emulated launch asks for more shared memory than the emulator has");
  }
  // The limits of a real launch (compute capability 7.0 and later; the kernels do not opt in
  // to more than 48 KB of dynamic shared memory).
  if (shared_bytes > 48 * 1024) {
    throw std::runtime_error("emulated launch asks for more than 48 KB of dynamic shared memory");
  }
  if (block.x > 1024 || block.y > 1024 || block.z > 64 || block.x * block.y * block.z > 1024 ||
      grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    throw std::runtime_error("emulated launch has a block or grid shape no GPU accepts");
  }
  grid_dim = grid;
  block_dim = block;
  const unsigned threads_per_block = block.x * block.y * block.z;
  std::barrier<> barrier(threads_per_block);
  block_barrier = &barrier;
  std::barrier<> gate(threads_per_block + 1);
  dim3 current;
  bool finished = false;
  std::vector<std::thread> threads;
  threads.reserve(threads_per_block);
  for (unsigned t = 0; t < threads_per_block; ++t) {
    threads.emplace_back([&, t] {
      thread_index = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
      for (;;) {
        gate.arrive_and_wait();  // a block is ready, or the launch is over
        if (finished) return;
        block_index = current;
        kernel(args...);
        gate.arrive_and_wait();  // the block is done
      }
    });
  }
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::memset(shared_memory, 0xff, shared_bytes);  // NaN for floats: unwritten reads show
        current = dim3(bx, by, bz);
        gate.arrive_and_wait();
        gate.arrive_and_wait();
      }
    }
  }
  finished = true;
  gate.arrive_and_wait();
  for (auto& thread : threads) {
    thread.join();
  }
  if (misaligned_vector_accesses.exchange(0) != 0) {
    throw std::runtime_error("emulated launch made 16-byte accesses off a 16-byte boundary");
  }
}
}  // namespace dwconv_emu

#define threadIdx dwconv_emu::thread_index
#define blockIdx dwconv_emu::block_index
#define blockDim dwconv_emu::block_dim
#define gridDim dwconv_emu::grid_dim
#define __syncthreads() dwconv_emu::block_barrier->arrive_and_wait()
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __shared__ static
#define DWCONV_EXPECT_ALIGNED(address) \
  (reinterpret_cast<std::uintptr_t>(address) % 16 == 0 ? void() : void(++dwconv_emu::misaligned_vector_accesses))
#define DWCONV_SHARED_BYTES(name) unsigned char* name = dwconv_emu::shared_memory
