#pragma once
// Just enough of CUDA's execution model to run the project's kernels on a CPU,
// so that their index math is tested where there is no GPU:
// - a block's threads are fibers (ucontext) on the launching thread, blocks run one after
//   another: a thread runs until it reaches __syncthreads() or its end, then the next one runs;
// - __syncthreads() waits for every thread of the block. Between two barriers a block's threads
//   run in order 0..N-1 or N-1..0, the order alternating from block to block and from launch to
//   launch, so a barrier missing between a write and a read shows whichever thread reads first.
//   A barrier some threads reach and others pass by ending fails the launch (a GPU would hang), and
//   so do threads waiting at different __syncthreads() calls (the CUDA guide leaves that undefined);
// - __shfl_down_sync() and __shfl_up_sync() are meetings of the warp's 32 lanes, as a barrier is of the block's threads:
//   each lane runs to it, then all read. Whole warps only, as the kernels use it (a full mask, in a
//   warp of 32 threads: not a block's part-filled last warp); a shuffle some of a warp's lanes reach
//   fails the launch;
// - the warp matrix operations (ldmatrix .x1/.x2/.x4 and mma.sync m16n8k8: DWCONV_EMULATED_WARP_MATRICES)
//   are such meetings too, computed from the fragment layouts DepthwiseConv2dCommon.cuh describes
//   (the products in float, summed in k order; each lane reads its ldmatrix row as it arrives); a row address off 16 bytes or outside the launch's
//   shared memory, or a warp whose lanes meet at different operations or different calls of one
//   (PTX's .aligned: every lane at the same instruction), fails the launch;
// - __shared__ arrays become function statics (one block runs at a time), and the
//   dynamic shared memory of a launch is one buffer, poisoned before every block, with a guard
//   zone past its end that a block writing there fails the launch by;
// - threadIdx and blockIdx are those of the running fiber, blockDim and gridDim per launch;
// - a 16-byte vector access off a 16-byte boundary, or an 8-byte one off 8 (a fault on a GPU), fails the launch;
// - asynchronous copies to shared memory (cp.async: DWCONV_EMULATED_ASYNC_COPIES) read their
//   source when issued and land, by groups, when the thread waits for them in every other pair of
//   blocks, and at once in the rest: a read that no wait covers shows stale data in the first, a
//   copy issued into a slot that other threads still read shows in the second. A copy outside the
//   launch's shared memory, or a thread that ends with copies it has not waited for, fails the launch;
// - built with -fsanitize=thread, ThreadSanitizer checks every memory access of the kernels against
//   the orderings a GPU guarantees and no others (as compute-sanitizer's racecheck does, and past it
//   for global memory within a block): each thread is a fiber of its own, __syncthreads() orders the
//   block's threads, the launch orders its blocks one after another (blocks never share shared
//   memory on a GPU, but here they share the buffer), and shuffles and matrix operations order
//   nothing. An asynchronous copy, which a GPU may land
//   at any time up to its wait, writes its slot as the thread that issued it at the copy, again after
//   each barrier the thread passes with it in flight, and at its wait, in both kinds of block: a copy
//   into a slot another thread still reads, an access to it while in flight, or a read of it that no
//   barrier orders after the wait is reported. The emulator's own bookkeeping is hidden from it. A
//   race is a report, and the process exits 66 at its end. Blocks run one after another, so races
//   between the blocks of a launch in global memory are not seen;
// - built with -fsanitize=thread -DDWCONV_MEMORY_PROFILE and linked with memory_profile_runtime.cpp
//   (not ThreadSanitizer), each warp's accesses to shared and device memory are counted as a GPU's
//   load/store units would take them: shared-memory wavefronts (bank conflicts) and global sectors
//   a warp instruction, per place in the source. The emulator tells the profile which thread runs,
//   when a block's threads have all stopped (a warp's accesses since then are its instructions),
//   and the asynchronous copies and ldmatrix rows, which no compiled access of the kernel makes;
//   static __shared__ arrays are thread_local there, so that the profile finds them.
// Include it after every other header and before the kernels.

#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__SANITIZE_THREAD__) && !defined(DWCONV_MEMORY_PROFILE)
#define DWCONV_RACE_CHECK
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_write_range(void* address, unsigned long size);
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace dwconv_emu {
inline dim3 thread_index;
inline dim3 block_index;
inline dim3 block_dim;
inline dim3 grid_dim;
constexpr std::size_t kSharedBytes = 1 << 20;
constexpr std::size_t kSharedGuardBytes = 4096;  // past a launch's dynamic shared memory
alignas(64) inline unsigned char shared_memory[kSharedBytes + kSharedGuardBytes];
inline long misaligned_vector_accesses = 0;
inline long nan_fallbacks = 0;  // the tensor-core weight gradient's warps that added their sums again
inline long stray_async_copies = 0;      // outside the launch's shared memory
inline long unwaited_async_copies = 0;   // still pending when their thread ended
inline bool async_copies_land_late = false;  // this block's: at the wait, else at the copy
inline std::size_t launch_shared_bytes = 0;
inline unsigned long blocks_run = 0;

// What the memory profile is told (memory_profile_runtime.cpp), where the emulator is built for it.
namespace memory_profile {
#if defined(DWCONV_MEMORY_PROFILE)
extern "C" {
void dwconv_profile_running_thread(int thread, unsigned threads);
void dwconv_profile_body_begins();
void dwconv_profile_quiet(int delta);
void dwconv_profile_launch_shared(const void* begin, unsigned long bytes);
void dwconv_profile_global_region(const void* begin, unsigned long bytes, int add);
void dwconv_profile_threads_stopped(unsigned threads);
void dwconv_profile_async_copy(const void* shared_dst, const void* src, unsigned long bytes, int inside,
                               const char* file, int line);
void dwconv_profile_load_matrices(const void* const* rows, int count, const char* file, int line);
}
inline void running_thread(int thread, unsigned threads) { dwconv_profile_running_thread(thread, threads); }
inline void body_begins() { dwconv_profile_body_begins(); }
inline void quiet(int delta) { dwconv_profile_quiet(delta); }
inline void launch_shared(const void* begin, std::size_t bytes) { dwconv_profile_launch_shared(begin, bytes); }
// A device buffer of the program's: its accesses count as global memory's.
inline void global_region(const void* begin, std::size_t bytes, bool add) {
  dwconv_profile_global_region(begin, bytes, add);
}
inline void threads_stopped(unsigned threads) { dwconv_profile_threads_stopped(threads); }
inline void async_copy(const void* dst, const void* src, std::size_t bytes, bool inside, const char* file, int line) {
  dwconv_profile_async_copy(dst, src, bytes, inside, file, line);
}
inline void load_matrices(const void* const* rows, int count, const char* file, int line) {
  dwconv_profile_load_matrices(rows, count, file, line);
}
#else
inline void running_thread(int, unsigned) {}
inline void body_begins() {}
inline void quiet(int) {}
inline void launch_shared(const void*, std::size_t) {}
inline void global_region(const void*, std::size_t, bool) {}
inline void threads_stopped(unsigned) {}
inline void async_copy(const void*, const void*, std::size_t, bool, const char*, int) {}
inline void load_matrices(const void* const*, int, const char*, int) {}
#endif
// A scope whose accesses the profile does not count: the emulator's own, or accesses it reports itself.
struct Hidden {
  Hidden() { quiet(1); }
  ~Hidden() { quiet(-1); }
  Hidden(const Hidden&) = delete;
  Hidden& operator=(const Hidden&) = delete;
};
}  // namespace memory_profile

// What ThreadSanitizer sees, where the emulator is built with it (else each is nothing): which
// fiber runs, which accesses are the emulator's own, and the orderings a GPU gives.
namespace race_check {
#if defined(DWCONV_RACE_CHECK)
constexpr bool kOn = true;
inline void* scheduler_fiber = nullptr;
inline void* new_fiber() { return __tsan_create_fiber(0); }
inline void delete_fiber(void* fiber) { __tsan_destroy_fiber(fiber); }
inline void switch_to(void* fiber) { __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync); }
inline void* current_fiber() { return __tsan_get_current_fiber(); }
inline void release(void* token) { __tsan_release(token); }
inline void acquire(void* token) { __tsan_acquire(token); }
// A write of `bytes` bytes at `address` by the running fiber, made by no instruction of it (a copy in flight).
inline void write(void* address, unsigned long bytes) { __tsan_write_range(address, bytes); }
// The emulator's bookkeeping (a fiber's state, its values at a warp meeting, the counts of
// faults), shared by the fibers and the scheduler: not the kernel's memory. The fiber switches
// order it, but are made without synchronisation so as not to order the kernel's threads, so
// ThreadSanitizer is told to look away while it is read and written.
struct Bookkeeping {
  Bookkeeping() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~Bookkeeping() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
  Bookkeeping(const Bookkeeping&) = delete;
  Bookkeeping& operator=(const Bookkeeping&) = delete;
};
#else
constexpr bool kOn = false;
inline void* scheduler_fiber = nullptr;
inline void* new_fiber() { return nullptr; }
inline void delete_fiber(void*) {}
inline void switch_to(void*) {}
inline void* current_fiber() { return nullptr; }
inline void release(void*) {}
inline void acquire(void*) {}
inline void write(void*, unsigned long) {}
using Bookkeeping = memory_profile::Hidden;  // hidden from the memory profile too
#endif
}  // namespace race_check

// An asynchronous copy not waited for: its 16 bytes, read when it was issued, and whether they have
// landed (at the copy, in the blocks where copies land at once).
struct PendingCopy {
  unsigned char* dst;
  unsigned char bytes[16];
  std::size_t size;  // 16, or 8 (copy_async_8)
  bool landed;
};
// The threads a block may have: the kernels' __launch_bounds__ (which the emulation cannot read
// off each kernel, so a program sets the bound its kernels share). A GPU refuses a launch of more.
inline unsigned launch_bound_threads = 1024;

// The dynamic shared memory each kernel has been allowed past 48 KB (DWCONV_OPT_IN_SHARED_BYTES, as
// cudaFuncSetAttribute's cudaFuncAttributeMaxDynamicSharedMemorySize), by the kernel's address.
constexpr std::size_t kDefaultSharedBytes = 48 * 1024;
constexpr std::size_t kMostOptInSharedBytes = 227 * 1024;  // an sm_90 block's: its SM's 228 KB less 1 KB reserved
inline std::mutex shared_bytes_allowed_mutex;
inline std::map<const void*, std::size_t> shared_bytes_allowed;

template <typename Kernel>
void opt_in_shared_bytes(Kernel kernel, std::size_t shared_bytes) {
  static_assert(std::is_pointer_v<Kernel>, "a kernel opts in by its address, as cudaFuncSetAttribute takes it");
  if (shared_bytes > kMostOptInSharedBytes) {
    throw std::runtime_error("emulated kernel opts in to " + std::to_string(shared_bytes) +
                             " bytes of dynamic shared memory, more than any GPU's block may take (227 KB)");
  }
  std::lock_guard<std::mutex> lock(shared_bytes_allowed_mutex);
  shared_bytes_allowed[reinterpret_cast<const void*>(kernel)] = shared_bytes;
}

// Every kernel back to 48 KB, as in a process that has opted in to nothing: before the launch code
// runs, so that a launch past 48 KB it does not opt in to itself is refused.
inline void forget_opt_ins() {
  std::lock_guard<std::mutex> lock(shared_bytes_allowed_mutex);
  shared_bytes_allowed.clear();
}

// What a launch of `kernel` may ask for: 48 KB, or what it opted in to.
template <typename Kernel>
std::size_t allowed_shared_bytes(Kernel kernel) {
  if constexpr (std::is_pointer_v<Kernel>) {
    std::lock_guard<std::mutex> lock(shared_bytes_allowed_mutex);
    const auto found = shared_bytes_allowed.find(reinterpret_cast<const void*>(kernel));
    if (found != shared_bytes_allowed.end()) return std::max(found->second, kDefaultSharedBytes);
  }
  return kDefaultSharedBytes;
}

// One emulated GPU thread: a stack (below it a page that faults, so an overflow crashes
// instead of writing over its neighbour) and where it stopped.
struct Fiber {
  enum class State { kRunnable, kAtBarrier, kAtShuffle, kFinished };
  static constexpr std::size_t kGuardBytes = 4096;
  static constexpr std::size_t kStackBytes = 256 * 1024;

  ucontext_t context{};  // where it starts
  jmp_buf resume_point;  // where it stopped, once started
  bool started = false;
  void* race_fiber;      // its thread for ThreadSanitizer
  State state = State::kFinished;
  void* memory;
  // At a warp meeting: which operation; for a shuffle, the mask, the value this lane offers, the
  // lane it reads, and what it read; for ldmatrix, the row this lane addresses; for mma, its
  // fragments of A, B and C and how a 16-bit value widens; what a matrix operation gives it.
  enum class WarpOp { kShuffleDown, kShuffleUp, kLoadMatrices, kMultiplyAdd };
  WarpOp warp_op = WarpOp::kShuffleDown;
  const void* matrix_row = nullptr;
  unsigned char matrix_row_bytes[16] = {};  // read by this lane, as the GPU reads them
  int matrix_count = 0;
  int matrix_call = 0;  // the place of the call (its source line), which every lane must share
  const char* matrix_file = "";
  std::uint32_t fragment_a[2] = {}, fragment_b = 0;
  float fragment_c[4] = {};
  float (*widen)(std::uint16_t) = nullptr;
  std::uint32_t fragment_out[4] = {};
  unsigned shuffle_mask = 0;
  unsigned shuffle_source = 0;
  std::uint64_t shuffle_offered = 0;
  std::uint64_t shuffle_read = 0;
  // Its asynchronous copies not landed: those issued since the last commit, then the committed
  // groups, oldest first.
  std::vector<PendingCopy> open_copies;
  std::vector<std::vector<PendingCopy>> copy_groups;
  // At a barrier: which __syncthreads() call.
  const char* barrier_file = nullptr;
  int barrier_line = 0;

  explicit Fiber(void (*entry)()) {
    memory = mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED || mprotect(memory, kGuardBytes, PROT_NONE) != 0) {
      throw std::runtime_error("emulator: cannot map a fiber's stack");
    }
    getcontext(&context);
    context.uc_stack.ss_sp = static_cast<unsigned char*>(memory) + kGuardBytes;
    context.uc_stack.ss_size = kStackBytes;
    context.uc_link = nullptr;
    makecontext(&context, entry, 0);
    race_fiber = race_check::new_fiber();
  }
  ~Fiber() {
    race_check::delete_fiber(race_fiber);
    munmap(memory, kGuardBytes + kStackBytes);
  }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
};

inline ucontext_t scheduler;
inline jmp_buf scheduler_point;
inline Fiber* running = nullptr;

// Switches between the scheduler and a fiber. swapcontext saves and restores the signal mask, a
// system call each way, which was half of the emulator's time; _setjmp/_longjmp save none, and
// setcontext only starts a fiber. Where _FORTIFY_SOURCE makes _longjmp refuse a jump to another
// stack (__longjmp_chk), and under ThreadSanitizer (whose fibers are made for swapcontext), the
// switches stay swapcontext.
#if defined(__USE_FORTIFY_LEVEL) && __USE_FORTIFY_LEVEL > 0
constexpr bool kJumpSwitches = false;
#else
constexpr bool kJumpSwitches = !race_check::kOn;
#endif

// From the scheduler: runs `fiber` until it next stops.
inline void resume(Fiber& fiber) {
  race_check::switch_to(fiber.race_fiber);
  if constexpr (kJumpSwitches) {
    if (_setjmp(scheduler_point) != 0) return;
    if (fiber.started) _longjmp(fiber.resume_point, 1);
    fiber.started = true;
    setcontext(&fiber.context);
  } else {
    swapcontext(&scheduler, &fiber.context);
  }
}

// From a fiber: back to the scheduler, to go on from here when resumed.
inline void suspend(Fiber& self) {
  race_check::switch_to(race_check::scheduler_fiber);
  if constexpr (kJumpSwitches) {
    if (_setjmp(self.resume_point) == 0) _longjmp(scheduler_point, 1);
  } else {
    swapcontext(&self.context, &scheduler);
  }
}
// The block's work, which every fiber runs: kernel(args...) of the current launch.
inline void (*block_body)(const void*) = nullptr;
inline const void* block_body_args = nullptr;
// Fibers outlive launches: made on first need, reused by every later block.
inline std::vector<std::unique_ptr<Fiber>> fibers;

// A block runs after the one before it: the scheduler acquires what every thread of a block
// released at its end (block_end_token), and each thread of the next acquires, as it starts, what
// the scheduler released before the block (block_start_token): the earlier blocks and the launching
// thread's writes, and nothing of its own block's threads that ran before it.
inline char block_start_token, block_end_token;
// A thread at a barrier releases into the token of the barrier's generation (its parity) and
// acquires from it once every thread has arrived: a thread already past barrier g cannot release
// into g + 2's token before every thread has acquired g's.
inline char barrier_tokens[2];
inline unsigned long barrier_generation = 0;

inline void fiber_main() {
  for (;;) {  // one pass a block; resumed by the scheduler for the next
    race_check::acquire(&block_start_token);
    memory_profile::body_begins();
    block_body(block_body_args);
    if (!running->open_copies.empty() || !running->copy_groups.empty()) {
      {
        race_check::Bookkeeping quiet;
        ++unwaited_async_copies;
      }
      running->open_copies.clear();
      running->copy_groups.clear();
    }
    race_check::release(&block_end_token);
    running->state = Fiber::State::kFinished;
    suspend(*running);
  }
}

// Whether `bytes` bytes at `address` lie inside the running launch's dynamic shared memory.
inline bool in_launch_shared(const void* address, std::size_t bytes) {
  const auto* first = static_cast<const unsigned char*>(address);
  return first >= shared_memory && first + bytes <= shared_memory + launch_shared_bytes;
}

// Counts a 16-byte access off a 16-byte boundary, from any thread.
inline void count_misaligned_vector_access() {
  race_check::Bookkeeping quiet;
  ++misaligned_vector_accesses;
}

// The emulator's count, not the kernel's memory: kept out of the race check, as the other counts are
// (a block's lanes 0 of several warps add to it between the same two barriers).
inline void count_nan_fallback() {
  race_check::Bookkeeping quiet;
  ++nan_fallbacks;
}

inline void sync_threads(const char* file, int line) {
  Fiber* self = running;
  self->state = Fiber::State::kAtBarrier;
  self->barrier_file = file;
  self->barrier_line = line;
  void* const token = &barrier_tokens[barrier_generation % 2];
  race_check::release(token);
  suspend(*self);
  race_check::acquire(token);
  if constexpr (race_check::kOn) {  // a copy in flight may land in this barrier interval too
    for (const PendingCopy& copy : self->open_copies) race_check::write(copy.dst, copy.size);
    for (const auto& group : self->copy_groups) {
      for (const PendingCopy& copy : group) race_check::write(copy.dst, copy.size);
    }
  }
}

constexpr unsigned kWarpLanes = 32;
constexpr unsigned kWholeWarp = 0xffffffffu;

inline unsigned linear_thread_index() {
  return thread_index.x + block_dim.x * (thread_index.y + block_dim.y * thread_index.z);
}

// A shuffle (`op`): this lane offers `value` and reads lane `source`'s.
template <typename T>
T shuffle_sync(Fiber::WarpOp op, unsigned mask, T value, unsigned source) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t));
  Fiber* self = running;
  self->shuffle_mask = mask;
  self->shuffle_source = source;
  self->shuffle_offered = 0;
  std::memcpy(&self->shuffle_offered, &value, sizeof(T));
  self->warp_op = op;
  self->state = Fiber::State::kAtShuffle;
  suspend(*self);
  T read;
  std::memcpy(&read, &self->shuffle_read, sizeof(T));
  return read;
}

// __shfl_down_sync: lane l reads lane l + delta's value, its own where that is past the warp.
template <typename T>
T shfl_down_sync(unsigned mask, T value, unsigned delta) {
  const unsigned lane = linear_thread_index() % kWarpLanes;
  return shuffle_sync(Fiber::WarpOp::kShuffleDown, mask, value, lane + delta < kWarpLanes ? lane + delta : lane);
}

// __shfl_up_sync: lane l reads lane l - delta's value, its own where that is before the warp.
template <typename T>
T shfl_up_sync(unsigned mask, T value, unsigned delta) {
  const unsigned lane = linear_thread_index() % kWarpLanes;
  return shuffle_sync(Fiber::WarpOp::kShuffleUp, mask, value, lane >= delta ? lane - delta : lane);
}

// ldmatrix .x{count}: this lane's row address in; its word of each of the `count` matrices out.
inline void load_matrices(std::uint32_t* words, int count, const void* row, int call, const char* file = "") {
  Fiber* self = running;
  self->warp_op = Fiber::WarpOp::kLoadMatrices;
  self->matrix_row = row;
  if (reinterpret_cast<std::uintptr_t>(row) % 16 == 0 && in_launch_shared(row, 16)) {
    const memory_profile::Hidden counted_in_resolve_load_matrices;  // the warp's rows together
    std::memcpy(self->matrix_row_bytes, row, 16);  // else resolve_load_matrices fails the launch
  }
  self->matrix_count = count;
  self->matrix_call = call;
  self->matrix_file = file;
  self->state = Fiber::State::kAtShuffle;
  suspend(*self);
  std::memcpy(words, self->fragment_out, sizeof(std::uint32_t) * count);
}

// mma.sync m16n8k8 with float sums: d += A B, from this lane's fragments.
inline void multiply_add_16x8x8(float (&d)[4], const std::uint32_t (&a)[2], std::uint32_t b,
                                float (*widen)(std::uint16_t), int call) {
  Fiber* self = running;
  self->warp_op = Fiber::WarpOp::kMultiplyAdd;
  self->matrix_call = call;
  std::memcpy(self->fragment_a, a, sizeof(a));
  self->fragment_b = b;
  std::memcpy(self->fragment_c, d, sizeof(d));
  self->widen = widen;
  self->state = Fiber::State::kAtShuffle;
  suspend(*self);
  std::memcpy(d, self->fragment_out, sizeof(d));
}

// At its wait: a copy lands where it has not yet, and writes its slot (for the race check) where it has.
inline void land(const std::vector<PendingCopy>& copies) {
  const memory_profile::Hidden counted_when_issued;
  for (const PendingCopy& copy : copies) {
    if (copy.landed) {
      race_check::write(copy.dst, copy.size);
    } else {
      std::memcpy(copy.dst, copy.bytes, copy.size);
    }
  }
}

// cp.async of `size` bytes (16 or 8): those at `src` where `inside`, else zeros (nothing read);
// `file` and `line`, the call's place, for the memory profile.
inline void copy_async(void* dst, const void* src, std::size_t size, bool inside, const char* file = "",
                       int line = 0) {
  auto* to = static_cast<unsigned char*>(dst);
  if (!in_launch_shared(to, size)) {
    race_check::Bookkeeping quiet;
    ++stray_async_copies;
    return;
  }
  if (reinterpret_cast<std::uintptr_t>(dst) % size != 0 || (inside && reinterpret_cast<std::uintptr_t>(src) % size != 0)) {
    count_misaligned_vector_access();
  }
  memory_profile::async_copy(dst, src, size, inside, file, line);
  PendingCopy copy{to, {}, size, !async_copies_land_late};
  {
    const memory_profile::Hidden counted_above;
    if (inside) std::memcpy(copy.bytes, src, size);
    if (copy.landed) std::memcpy(copy.dst, copy.bytes, size);
  }
  if (!copy.landed) race_check::write(copy.dst, size);
  running->open_copies.push_back(copy);
}

inline void copy_async_16(void* dst, const void* src, bool inside, const char* file = "", int line = 0) {
  copy_async(dst, src, 16, inside, file, line);
}

inline void commit_async_copies() {
  running->copy_groups.push_back(std::move(running->open_copies));
  running->open_copies.clear();
}

// cp.async.wait_group: lands all but the `pending` newest committed groups.
inline void wait_async_copies(int pending) {
  auto& groups = running->copy_groups;
  const std::size_t keep = static_cast<std::size_t>(pending);
  if (groups.size() <= keep) return;
  const std::size_t done = groups.size() - keep;
  for (std::size_t i = 0; i < done; ++i) land(groups[i]);
  groups.erase(groups.begin(), groups.begin() + static_cast<std::ptrdiff_t>(done));
}

// Fails the launch: the threads stopped mid-kernel are never resumed, so they are made anew.
[[noreturn]] inline void fail_block(unsigned threads, const std::string& why) {
  for (unsigned t = 0; t < threads; ++t) {  // what they did comes before the host's next step, as at a block's end
    if (fibers[t]->state == Fiber::State::kFinished) continue;
    race_check::switch_to(fibers[t]->race_fiber);
    race_check::release(&block_end_token);
    race_check::switch_to(race_check::scheduler_fiber);
  }
  race_check::acquire(&block_end_token);
  for (unsigned t = 0; t < threads; ++t) {
    if (fibers[t]->state != Fiber::State::kFinished) fibers[t] = std::make_unique<Fiber>(fiber_main);
  }
  throw std::runtime_error("emulated launch: " + why);
}

// The 16-bit halves of a fragment word: the lower column (or row) in the low half.
inline std::uint16_t half_word(std::uint32_t word, int high) {
  return static_cast<std::uint16_t>(high ? word >> 16 : word & 0xffffu);
}

// ldmatrix .x{count} for a warp: lane l receives in word i the 32-bit word l % 4 of the row that
// lane 8i + l / 4 addresses. Every lane's address is checked, as sm_75 and earlier read them all.
inline void resolve_load_matrices(unsigned threads, Fiber* const* lanes) {
  const int count = lanes[0]->matrix_count;
  for (unsigned l = 0; l < kWarpLanes; ++l) {
    if (lanes[l]->matrix_count != count) fail_block(threads, "ldmatrix with lanes loading different counts");
    const void* row = lanes[l]->matrix_row;
    if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0) {
      fail_block(threads, "ldmatrix with a row address off a 16-byte boundary");
    }
    if (!in_launch_shared(row, 16)) {
      fail_block(threads, "ldmatrix with a row address outside the launch's shared memory");
    }
  }
  const void* rows[kWarpLanes];
  for (unsigned l = 0; l < kWarpLanes; ++l) rows[l] = lanes[l]->matrix_row;
  memory_profile::load_matrices(rows, count, lanes[0]->matrix_file, lanes[0]->matrix_call);
  for (unsigned l = 0; l < kWarpLanes; ++l) {
    for (unsigned i = 0; i < static_cast<unsigned>(count); ++i) {
      std::memcpy(&lanes[l]->fragment_out[i], lanes[8 * i + l / 4]->matrix_row_bytes + 4 * (l % 4), 4);
    }
  }
}

// mma.sync m16n8k8 (row x col, float sums) for a warp, from its lanes' fragments as
// DepthwiseConv2dCommon.cuh lays them out (g = lane / 4, q = lane % 4).
inline void resolve_multiply_add(unsigned threads, Fiber* const* lanes) {
  constexpr int kDepth = 8;
  float a[16][kDepth], b[kDepth][8], c[16][8];
  for (unsigned l = 0; l < kWarpLanes; ++l) {
    const Fiber& f = *lanes[l];
    if (f.widen != lanes[0]->widen) fail_block(threads, "mma.sync with lanes of different types");
    const unsigned g = l / 4, q = l % 4;
    for (int i = 0; i < 2; ++i) {
      a[g + 8 * i][2 * q] = f.widen(half_word(f.fragment_a[i], 0));
      a[g + 8 * i][2 * q + 1] = f.widen(half_word(f.fragment_a[i], 1));
    }
    b[2 * q][g] = f.widen(half_word(f.fragment_b, 0));
    b[2 * q + 1][g] = f.widen(half_word(f.fragment_b, 1));
    for (int i = 0; i < 4; ++i) c[g + 8 * (i / 2)][2 * q + i % 2] = f.fragment_c[i];
  }
  for (unsigned l = 0; l < kWarpLanes; ++l) {
    const unsigned g = l / 4, q = l % 4;
    for (int i = 0; i < 4; ++i) {
      const unsigned row = g + 8 * (i / 2), col = 2 * q + i % 2;
      float sum = c[row][col];
      for (int k = 0; k < kDepth; ++k) sum += a[row][k] * b[k][col];
      std::memcpy(&lanes[l]->fragment_out[i], &sum, sizeof(sum));
    }
  }
}

inline bool is_shuffle(Fiber::WarpOp op) {
  return op == Fiber::WarpOp::kShuffleDown || op == Fiber::WarpOp::kShuffleUp;
}

// Every warp whose lanes are at a meeting (a shuffle or a matrix operation) exchanges their
// values, and its lanes run on.
inline void resolve_shuffles(unsigned threads) {
  for (unsigned first = 0; first < threads; first += kWarpLanes) {
    unsigned at_shuffle = 0;
    for (unsigned t = first; t < first + kWarpLanes && t < threads; ++t) {
      at_shuffle += fibers[t]->state == Fiber::State::kAtShuffle;
    }
    if (at_shuffle == 0) continue;
    if (first + kWarpLanes > threads) {
      fail_block(threads, "a warp operation in the part-filled last warp of a block of " + std::to_string(threads) +
                              " threads (a whole warp's mask names lanes it lacks)");
    }
    if (at_shuffle < kWarpLanes) {
      fail_block(threads, "a warp operation (a shuffle, ldmatrix or mma.sync) reached by some of a warp's "
                          "lanes, not all (a GPU would hang)");
    }
    Fiber* lanes[kWarpLanes];
    for (unsigned l = 0; l < kWarpLanes; ++l) {
      lanes[l] = fibers[first + l].get();
      if (lanes[l]->warp_op != lanes[0]->warp_op) fail_block(threads, "a warp's lanes meet at different warp operations");
      if (!is_shuffle(lanes[l]->warp_op) && lanes[l]->matrix_call != lanes[0]->matrix_call) {
        fail_block(threads, "a warp's lanes meet at different ldmatrix or mma.sync calls (lines " +
                                std::to_string(lanes[0]->matrix_call) + " and " + std::to_string(lanes[l]->matrix_call) +
                                ")");
      }
    }
    if (!is_shuffle(lanes[0]->warp_op)) {
      if (lanes[0]->warp_op == Fiber::WarpOp::kLoadMatrices) {
        resolve_load_matrices(threads, lanes);
      } else {
        resolve_multiply_add(threads, lanes);
      }
      for (unsigned t = first; t < first + kWarpLanes; ++t) fibers[t]->state = Fiber::State::kRunnable;
      continue;
    }
    for (unsigned t = first; t < first + kWarpLanes; ++t) {
      Fiber& lane = *fibers[t];
      if (lane.shuffle_mask != kWholeWarp) {
        fail_block(threads, "a warp shuffle with a mask other than the whole warp (the emulation takes whole warps only)");
      }
      lane.shuffle_read = fibers[first + lane.shuffle_source]->shuffle_offered;
    }
    for (unsigned t = first; t < first + kWarpLanes; ++t) fibers[t]->state = Fiber::State::kRunnable;
  }
}

// The scheduler's own accesses (the fibers' states, the warp meetings) are bookkeeping, hidden
// from ThreadSanitizer; a block's threads are ordered after the launching thread and every earlier block.
inline void run_block(unsigned threads, bool ascending) {
  race_check::Bookkeeping quiet;
  race_check::release(&block_start_token);
  while (fibers.size() < threads) fibers.push_back(std::make_unique<Fiber>(fiber_main));
  for (unsigned t = 0; t < threads; ++t) fibers[t]->state = Fiber::State::kRunnable;
  for (;;) {
    for (unsigned i = 0; i < threads; ++i) {
      const unsigned t = ascending ? i : threads - 1 - i;
      if (fibers[t]->state != Fiber::State::kRunnable) continue;  // waits at a barrier for the rest
      thread_index = dim3(t % block_dim.x, (t / block_dim.x) % block_dim.y, t / (block_dim.x * block_dim.y));
      running = fibers[t].get();
      memory_profile::running_thread(static_cast<int>(t), threads);
      resume(*running);
      memory_profile::running_thread(-1, threads);
    }
    memory_profile::threads_stopped(threads);
    unsigned at_barrier = 0, at_shuffle = 0;
    for (unsigned t = 0; t < threads; ++t) {
      at_barrier += fibers[t]->state == Fiber::State::kAtBarrier;
      at_shuffle += fibers[t]->state == Fiber::State::kAtShuffle;
    }
    if (at_shuffle != 0) {
      resolve_shuffles(threads);
      continue;
    }
    if (at_barrier == 0) {
      race_check::acquire(&block_end_token);
      return;
    }
    if (at_barrier < threads) {
      fail_block(threads, "__syncthreads() reached by some of a block's threads, not all (a GPU would hang)");
    }
    for (unsigned t = 1; t < threads; ++t) {
      const Fiber& a = *fibers[0];
      const Fiber& b = *fibers[t];
      if (a.barrier_line != b.barrier_line || std::strcmp(a.barrier_file, b.barrier_file) != 0) {
        fail_block(threads, std::string("threads wait at different __syncthreads() calls, ") + a.barrier_file + ":" +
                                std::to_string(a.barrier_line) + " and " + b.barrier_file + ":" +
                                std::to_string(b.barrier_line) + " (undefined on a GPU)");
      }
    }
    ++barrier_generation;
    for (unsigned t = 0; t < threads; ++t) fibers[t]->state = Fiber::State::kRunnable;
  }
}

// Runs kernel(args...) over the grid, one block after another.
template <typename Kernel, typename... Args>
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, Kernel kernel, Args... args) {
  if (shared_bytes > kSharedBytes) {
    throw std::runtime_error("emulated launch asks for more shared memory than the emulator has");
  }
  // The limits of a real launch (compute capability 7.0 and later): past 48 KB of dynamic shared
  // memory only as much as the kernel opted in to.
  if (shared_bytes > allowed_shared_bytes(kernel)) {
    throw std::runtime_error("emulated launch asks for " + std::to_string(shared_bytes) +
                             " bytes of dynamic shared memory, more than 48 KB and more than its kernel opted in to (" +
                             std::to_string(allowed_shared_bytes(kernel)) + ")");
  }
  if (block.x > 1024 || block.y > 1024 || block.z > 64 || block.x * block.y * block.z > 1024 ||
      grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    throw std::runtime_error("emulated launch has a block or grid shape no GPU accepts");
  }
  if (block.x * block.y * block.z > launch_bound_threads) {
    throw std::runtime_error("emulated launch has more threads a block than the kernels' __launch_bounds__ (" +
                             std::to_string(launch_bound_threads) + "): a GPU refuses it");
  }
  const auto body = [&] { kernel(args...); };
  {
    race_check::Bookkeeping quiet;
    grid_dim = grid;
    block_dim = block;
    block_body = [](const void* b) { (*static_cast<decltype(body)*>(b))(); };
    block_body_args = &body;
    misaligned_vector_accesses = 0;
    stray_async_copies = 0;
    unwaited_async_copies = 0;
    launch_shared_bytes = shared_bytes;
    memory_profile::launch_shared(shared_memory, shared_bytes);
    race_check::scheduler_fiber = race_check::current_fiber();
  }
  static unsigned launches = 0;
  ++launches;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        // NaN for floats: unwritten reads show; the guard zone past the end shows writes there.
        {
          race_check::Bookkeeping quiet;
          std::memset(shared_memory, 0xff, shared_bytes + kSharedGuardBytes);
          block_index = dim3(bx, by, bz);
          async_copies_land_late = (blocks_run++ / 2) % 2 == 0;
        }
        run_block(block.x * block.y * block.z, (bx + by + bz + launches) % 2 == 0);
        const unsigned char* guard = shared_memory + shared_bytes;
        race_check::Bookkeeping quiet;
        if (std::any_of(guard, guard + kSharedGuardBytes, [](unsigned char byte) { return byte != 0xff; })) {
          throw std::runtime_error("emulated launch wrote past its dynamic shared memory (" +
                                   std::to_string(shared_bytes) + " bytes)");
        }
      }
    }
  }
  if (misaligned_vector_accesses != 0) {
    throw std::runtime_error("emulated launch made vector accesses or copies off a 16-byte boundary (8-byte ones: 8)");
  }
  if (stray_async_copies != 0) {
    throw std::runtime_error("emulated launch made asynchronous copies outside its shared memory");
  }
  if (unwaited_async_copies != 0) {
    throw std::runtime_error("emulated launch has threads that ended with asynchronous copies not waited for");
  }
}
}  // namespace dwconv_emu

#define threadIdx dwconv_emu::thread_index
#define blockIdx dwconv_emu::block_index
#define blockDim dwconv_emu::block_dim
#define gridDim dwconv_emu::grid_dim
#define __syncthreads() dwconv_emu::sync_threads(__FILE__, __LINE__)
#define __shfl_down_sync(mask, value, delta) dwconv_emu::shfl_down_sync(mask, value, delta)
#define __shfl_up_sync(mask, value, delta) dwconv_emu::shfl_up_sync(mask, value, delta)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#if defined(DWCONV_MEMORY_PROFILE)
#define __shared__ static thread_local
#else
#define __shared__ static
#endif
#define DWCONV_EXPECT_ALIGNED(address) \
  (reinterpret_cast<std::uintptr_t>(address) % 16 == 0 ? void() : dwconv_emu::count_misaligned_vector_access())
#define DWCONV_EXPECT_ALIGNED_TO(address, bytes) \
  (reinterpret_cast<std::uintptr_t>(address) % (bytes) == 0 ? void() : dwconv_emu::count_misaligned_vector_access())
#define DWCONV_SHARED_BYTES(name) unsigned char* name = dwconv_emu::shared_memory
#define DWCONV_OPT_IN_SHARED_BYTES(kernel, shared_bytes) dwconv_emu::opt_in_shared_bytes(kernel, shared_bytes)
#define DWCONV_COUNT_NAN_FALLBACK() dwconv_emu::count_nan_fallback()
#define DWCONV_EMULATED_ASYNC_COPIES
#define DWCONV_EMULATED_WARP_MATRICES
