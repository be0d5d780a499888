#pragma once
// What every 2D depthwise kernel family shares: the geometry of a pass, the grid walk, 16-byte
// vectors and their loads and stores, staging with loads in flight, the block reductions of the
// weight gradients and the kernel that adds their slices, and the launch arithmetic they all use.
// Device code and plain host arithmetic, no ATen tensors and no CUDA runtime calls, so that
// tests/emulator can also run it on a CPU; the family headers beside it are written the same way.

#include <ATen/AccumulateType.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

// The dynamic shared memory of a launch (a macro so that the CPU emulator can supply its own),
// aligned for 16-byte vectors.
#ifndef DWCONV_SHARED_BYTES
#define DWCONV_SHARED_BYTES(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace at::native::dwconv {

// ---------------------------------------------------------------------------
// Geometry of one pass: dst[n, c] = sum over a group of src planes of a 2D
// correlation. Forward: src = input, dst = output, one src plane (c / multiplier).
// Backward-input: src = grad_output, dst = grad_input, `multiplier` src planes.

struct PassGeometry {
  int64_t batch;
  int64_t src_channels, src_h, src_w;
  int64_t dst_channels, dst_h, dst_w;
  int kernel_h, kernel_w;
  int stride_h, stride_w;
  int pad_h, pad_w;
  int dilation_h, dilation_w;
  int multiplier;
};

struct Strides4 {
  int64_t n, c, h, w;
};

template <typename T>
__host__ __device__ inline T smaller(T a, T b) {
  return b < a ? b : a;
}

// 0 <= i < extent (extent >= 0) in one compare: a negative i, as unsigned, is past every extent.
template <typename T>
__host__ __device__ __forceinline__ bool within(T i, T extent) {
  using Unsigned = std::make_unsigned_t<T>;
  return static_cast<Unsigned>(i) < static_cast<Unsigned>(extent);
}

// f(std::true_type{}) for a tile that crosses the output's last row or column, else
// f(std::false_type{}): the weight gradients' loops over a tile's outputs, compiled twice, so that
// whole tiles test none of their outputs and the edge's meet the input only with real ones (the
// zeros standing past the edge are no outputs: 0 x inf would be NaN).
template <typename F>
__device__ __forceinline__ void whole_or_edge(bool crosses_edge, F&& f) {
  if (crosses_edge) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// The coordinates of one position of a row-major grid, outermost first (the outermost extent
// is unbounded), moved on by a fixed number of positions with carries: the divisions are paid
// once, when the walk is made, not at every step of a loop.
template <typename index_t, int kDims>
struct GridWalk {
  index_t at[kDims];
  index_t step[kDims];
  index_t extent[kDims];

  __host__ __device__ GridWalk(index_t first, index_t stride, const index_t (&extents)[kDims]) {
#pragma unroll
    for (int d = kDims - 1; d > 0; --d) {
      extent[d] = extents[d];
      at[d] = first % extents[d];
      first /= extents[d];
      step[d] = stride % extents[d];
      stride /= extents[d];
    }
    extent[0] = extents[0];
    at[0] = first;
    step[0] = stride;
  }

  __host__ __device__ void advance() {
    index_t carry = 0;
#pragma unroll
    for (int d = kDims - 1; d > 0; --d) {
      at[d] += step[d] + carry;  // below 2 * extent[d]: at most one carry out
      carry = at[d] >= extent[d] ? 1 : 0;
      if (carry) at[d] -= extent[d];
    }
    at[0] += step[0] + carry;
  }
};

constexpr int kThreads = 256;
constexpr int kMaxColsPerThread = 4;
constexpr int kTapsPerPass = 16;  // weight gradient: taps kept in registers per pass (a 3x3 kernel in one pass)
constexpr size_t kMaxSharedBytes = 48 * 1024;  // without opting in to more

// The registers a thread of `kernel` (a __global__ function's address) takes in the code the
// device runs, or 0 where the caller cannot tell.
using CompiledRegisters = int (*)(const void* kernel);

// What the GPU holds at once, which the planners size their grids by: its SMs, and what one SM
// holds (threads, blocks, registers, shared memory, and the shared memory the runtime reserves a
// block). DepthwiseConv2d.cu reads them from the device: an H100's SM holds 2048 threads and 228 KB,
// an A100's 2048 and 164 KB, an sm_86 or sm_89 SM (RTX 30 and 40, L4, A10) 1536 and 100 KB; and
// its compute capability (major x 10 + minor), which says whether the tensor-core kernels run;
// and, for the planners that count the blocks an SM by a kernel's own registers, where to ask for
// them (DepthwiseConv2d.cu asks the runtime, cudaFuncGetAttributes).
struct GpuLimits {
  int64_t sm_count;
  int threads_per_sm;
  int blocks_per_sm;
  int registers_per_sm;
  int64_t shared_bytes_per_sm;
  int64_t reserved_shared_bytes;  // a block
  // The compute capability (major x 10 + minor) of the code the kernels run as: the device's (90 for
  // an H100), or the older arch whose PTX the runtime compiles for it where the build holds no code
  // of the device's own (TORCH_CUDA_ARCH_LIST="7.5+PTX" on an H100: 75), whichever is lower.
  int compute_capability;
  CompiledRegisters compiled_registers = nullptr;  // null: unknown
};

// The registers a thread of `kernel` takes: what the GPU's code holds where the caller can tell,
// else `bound`, the most its launch bounds allow.
template <typename Kernel>
int kernel_registers(const GpuLimits& gpu, Kernel kernel, int bound) {
  static_assert(std::is_pointer_v<Kernel>, "a kernel is asked for by its address");
  const int compiled = gpu.compiled_registers != nullptr && kernel != nullptr
                           ? gpu.compiled_registers(reinterpret_cast<const void*>(kernel))
                           : 0;
  return compiled > 0 ? std::min(compiled, bound) : bound;
}

// The compute capability of the warp matrix products (mma.sync m16n8k8 in bfloat16 and half).
constexpr int kWarpMatrixCapability = 80;

// Blocks of `threads` threads, `shared_bytes` and `registers` a thread that one SM holds at once
// (at least 1), for the planners that trade threads a block against blocks an SM. Registers are
// allocated to a warp 256 at a time.
inline int64_t resident_blocks_per_sm(const GpuLimits& gpu, int threads, size_t shared_bytes, int registers) {
  const int64_t warps = (threads + 31) / 32;
  const int64_t warp_registers = (int64_t(registers) * 32 + 255) / 256 * 256;
  return std::max<int64_t>(
      1, std::min({int64_t(gpu.blocks_per_sm), gpu.threads_per_sm / (warps * 32),
                   gpu.registers_per_sm / (warps * warp_registers),
                   gpu.shared_bytes_per_sm / (int64_t(shared_bytes) + gpu.reserved_shared_bytes)}));
}

// A cut of each of `groups` runs of `items` work items into slices of `items_per_slice` (a block
// a slice, the last one short), run `resident` blocks at once: `steps` is the time it takes, waves
// x the time a block takes, items a slice x `item_steps` + `block_steps` (what a block costs beyond
// its items: its start and its final sums).
struct SliceCut {
  int64_t items_per_slice, slices, steps;
};

// The cut with the fewest steps, and of those the fewest slices (fewer partial sums to add), of
// slices of at most `most_items_per_slice` items and no more than 65535 of them (a grid's y); only
// the fewest slices that hold each number of items a slice are tried, 2 sqrt(items) cuts or fewer.
// Nothing where more than 65535 slices would be needed.
inline std::optional<SliceCut> fewest_steps_cut(int64_t items, int64_t groups, int64_t resident,
                                                int64_t most_items_per_slice, int64_t item_steps,
                                                int64_t block_steps) {
  items = std::max<int64_t>(items, 1);
  resident = std::max<int64_t>(resident, 1);
  const int64_t most_slices = std::min<int64_t>(items, 65535);
  const int64_t longest = std::clamp<int64_t>(most_items_per_slice, 1, items);
  const int64_t fewest_slices = (items + longest - 1) / longest;
  std::optional<SliceCut> best;
  for (int64_t wanted = fewest_slices; wanted <= most_slices;) {
    const int64_t per_slice = (items + wanted - 1) / wanted;
    const int64_t slices = (items + per_slice - 1) / per_slice;  // <= wanted
    const int64_t waves = (groups * slices + resident - 1) / resident;
    const int64_t steps = waves * (per_slice * item_steps + block_steps);
    if (!best || steps < best->steps || (steps == best->steps && slices < best->slices)) {
      best = SliceCut{per_slice, slices, steps};
    }
    if (per_slice == 1) break;
    wanted = (items + per_slice - 2) / (per_slice - 1);  // the fewest slices of per_slice - 1 items
  }
  return best;
}

// The dynamic shared memory a block may take, opting in past kMaxSharedBytes, while an SM still
// holds as many such blocks as it holds blocks of kMaxSharedBytes: the share of the SM that 48 KB
// blocks leave unused. 56 KB on an sm_90 SM (4 blocks of 228 KB), 53.7 KB on an A100's (3 of 164
// KB), 49 KB on an sm_86 or sm_89 one (2 of 100 KB); never more than the SM less a block's reserve,
// the most a block may opt in to. A kernel launched with more than kMaxSharedBytes must be allowed
// it first (DWCONV_OPT_IN_SHARED_BYTES, DepthwiseConv2dLaunch.cuh).
inline size_t opt_in_shared_bytes(const GpuLimits& gpu) {
  const int64_t per_block = int64_t(kMaxSharedBytes) + gpu.reserved_shared_bytes;
  const int64_t blocks = gpu.shared_bytes_per_sm / per_block;
  if (blocks < 1) return kMaxSharedBytes;
  return static_cast<size_t>(gpu.shared_bytes_per_sm / blocks - gpu.reserved_shared_bytes) / 16 * 16;
}

// The registers a thread may take in a kernel of kThreads-thread blocks bounded to `min_blocks`
// blocks an SM (what ptxas allows under __launch_bounds__(kThreads, min_blocks)).
constexpr int registers_within_bounds(int min_blocks) {
  return 65536 / (kThreads * min_blocks) / 8 * 8;
}

// The bound of the kernel instances compiled for three blocks an SM (registers_within_bounds: 80),
// where their code fits it (the *_three_blocks kernel paths).
constexpr int kThreeBlocksPerSm = 3;

// 16 bytes of T: the unit of the tiled kernels' wide global and shared memory accesses.
template <typename T>
constexpr int kVector16 = 16 / static_cast<int>(sizeof(T));

template <typename T>
struct alignas(16) Vector16 {
  T v[kVector16<T>];
};

// Where a 16-byte access must be 16-byte aligned: nothing on the GPU (a misaligned one faults
// there); the CPU emulator defines it to count the accesses that are not.
#ifndef DWCONV_EXPECT_ALIGNED
#define DWCONV_EXPECT_ALIGNED(address)
#endif
// The same for an access of `bytes` (8: column_backward_kernel's).
#ifndef DWCONV_EXPECT_ALIGNED_TO
#define DWCONV_EXPECT_ALIGNED_TO(address, bytes)
#endif

template <typename scalar_t>
__device__ __forceinline__ Vector16<scalar_t> load_vector(const scalar_t* address) {
  DWCONV_EXPECT_ALIGNED(address);
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const Vector16<scalar_t>*>(address);
#else  // the emulator: copied, so that a misaligned address fails its check rather than faulting
  Vector16<scalar_t> value;
  memcpy(&value, address, sizeof(value));
  return value;
#endif
}

// The 16-byte vector at `address` where `inside`, else zeros, with nothing read (padding, and the
// channels past the last of a part-filled group).
template <typename scalar_t>
__device__ __forceinline__ Vector16<scalar_t> load_vector_or_zero(bool inside, const scalar_t* address) {
  if (inside) return load_vector(address);
  Vector16<scalar_t> zero;
#pragma unroll
  for (int k = 0; k < kVector16<scalar_t>; ++k) zero.v[k] = scalar_t(0);
  return zero;
}

// The same as four 32-bit words, for a value that is converted later (to acc_t): chosen value by
// value, nvcc 13 unpacked BFloat16 vectors into a register a value as each load arrived, which
// held up the loads issued after it.
template <typename scalar_t>
__device__ __forceinline__ Vector16<uint32_t> load_words_or_zero(bool inside, const scalar_t* address) {
  Vector16<uint32_t> words{};
  if (inside) words = load_vector(reinterpret_cast<const uint32_t*>(address));
  return words;
}

// A thread's channels as one access of `Words` (32-bit words aligned to their size, 4 to 16 bytes:
// WalkWords, ColumnWords) at `address`, kept as loaded until widened (widen_value).
template <typename Words>
__device__ __forceinline__ Words load_words(const void* address) {
  DWCONV_EXPECT_ALIGNED_TO(address, sizeof(Words));
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const Words*>(address);
#else  // the emulator: copied, as load_vector
  Words words;
  memcpy(&words, address, sizeof(words));
  return words;
#endif
}

__host__ __device__ __forceinline__ float float_from_bits(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float value;
  memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

// The values of a 16-byte vector as acc_t. A bfloat16 is the top half of a float, so each 32-bit
// word of the vector widens to its two values with one instruction each: the low half shifted up,
// the high half masked. Converted value by value, nvcc 13 first moves every high half down (PRMT,
// then the shift): 12 instructions a vector where 8 do, in loops where the multiply-adds want the
// issue slots. The same bits either way.
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void widen_vector(const Vector16<scalar_t> vector, acc_t (&values)[kVector16<scalar_t>]) {
  if constexpr (std::is_same_v<scalar_t, c10::BFloat16> && std::is_same_v<acc_t, float>) {
    uint32_t words[4];
    memcpy(words, &vector, sizeof(words));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      values[2 * i] = float_from_bits(words[i] << 16);  // little-endian: the lower-addressed value
      values[2 * i + 1] = float_from_bits(words[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kVector16<scalar_t>; ++k) values[k] = static_cast<acc_t>(vector.v[k]);
  }
}

// Value j of scalar_t values held as 32-bit words (`words.v`: a 16-byte vector from
// load_words_or_zero, or the pair of WalkWords), as acc_t, for a kernel that uses each value once:
// a bfloat16 in widen_vector's one instruction (converted through c10::BFloat16, two: PRMT, then the
// shift), the others by their conversion.
template <typename scalar_t, typename acc_t, typename Words>
__device__ __forceinline__ acc_t widen_value(const Words& words, int j) {
  if constexpr (std::is_same_v<scalar_t, c10::BFloat16> && std::is_same_v<acc_t, float>) {
    const uint32_t word = words.v[j / 2];
    return float_from_bits(j % 2 == 0 ? word << 16 : word & 0xffff0000u);
  } else {
    scalar_t value;
    memcpy(&value, reinterpret_cast<const unsigned char*>(words.v) + j * sizeof(scalar_t), sizeof(value));
    return static_cast<acc_t>(value);
  }
}

// A 16-byte vector of scalar_t stored in shared memory as its values in acc_t (widen_vector), in
// 16-byte pieces: `to` 16-byte aligned, kVector16<scalar_t> values long.
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void store_widened(acc_t* to, const Vector16<scalar_t>& vector) {
  constexpr int V = kVector16<scalar_t>, kPiece = kVector16<acc_t>;
  acc_t values[V];
  widen_vector(vector, values);
#pragma unroll
  for (int h = 0; h < V / kPiece; ++h) {
    Vector16<acc_t> piece;
#pragma unroll
    for (int k = 0; k < kPiece; ++k) piece.v[k] = values[h * kPiece + k];
    reinterpret_cast<Vector16<acc_t>*>(to)[h] = piece;
  }
}

// Staging loops with several loads in flight a thread. A loop that loads a value and stores it to
// shared memory in the same iteration waits out a global load's latency once per value (nvcc
// keeps one 16-byte load in flight a thread there): a block staging 256 x 16 bytes a round trip
// reaches a fraction of the bandwidth. Item i of `count`, i = first + k * step, is loaded by
// `load(walk, in_range)` (walk: i's coordinates; in_range false past `count`, where nothing may be
// read) and stored by `store(i, item)`; kBatch items are loaded before any of them is stored.
constexpr int kStageVectors = 4;  // 16-byte loads a thread has in flight; twice as many narrower ones

template <int kBatch, typename Walk, typename Load, typename Store>
__device__ __forceinline__ void stage_in_batches(int count, int first, int step, Walk& walk, Load&& load,
                                                 Store&& store) {
  using Item = decltype(load(walk, true));
  for (int i0 = first; i0 < count; i0 += kBatch * step) {
    Item items[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      items[b] = load(walk, i0 + b * step < count);
      walk.advance();
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (i0 + b * step < count) store(i0 + b * step, items[b]);
    }
  }
}

// ---------------------------------------------------------------------------
// Stores and staged weights of 16-byte channel vectors.

// One 16-byte store, cached in L2 only (the block never reads its output back). Written
// as a plain copy, nvcc 13 splits it into four 4-byte stores on the 64-bit index path.
template <typename scalar_t>
__device__ __forceinline__ void store_vector(scalar_t* address, const Vector16<scalar_t>& value) {
  DWCONV_EXPECT_ALIGNED(address);
#ifdef __CUDA_ARCH__
  unsigned int words[4];
  memcpy(words, &value, sizeof(words));
  __stcg(reinterpret_cast<uint4*>(address), make_uint4(words[0], words[1], words[2], words[3]));
#else
  memcpy(address, &value, sizeof(value));
#endif
}

// Copies from global to shared memory that stay in flight while the thread computes (cp.async,
// sm_80 and later): a thread issues 16-byte copies, closes them into a group with
// commit_async_copies(), and wait_async_copies<kPending>() returns once all but its kPending
// newest groups have landed. They take no registers while in flight, so a kernel can have the
// next step's input on its way during a whole step. A copy lands where only this thread's wait
// makes it visible to this thread; other threads see it after the wait and a barrier (copy_async_8:
// the same for 8 bytes). Earlier GPUs copy at once. The CPU emulator supplies its own
// (DWCONV_EMULATED_ASYNC_COPIES), which lands the copies at the wait in some blocks and at the copy
// in others, so that a missing wait or a slot overwritten while others read it shows.
#ifdef DWCONV_EMULATED_ASYNC_COPIES
template <typename T>
__device__ __forceinline__ void copy_async_or_zero(Vector16<T>* shared_dst, const T* src, bool inside,
                                                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  dwconv_emu::copy_async_16(shared_dst, src, inside, file, line);
}
template <typename T>
__device__ __forceinline__ void copy_async_8(T* shared_dst, const T* src, const char* file = __builtin_FILE(),
                                             int line = __builtin_LINE()) {
  dwconv_emu::copy_async(shared_dst, src, 8, true, file, line);
}
__device__ __forceinline__ void commit_async_copies() {
  dwconv_emu::commit_async_copies();
}
template <int kPending>
__device__ __forceinline__ void wait_async_copies() {
  dwconv_emu::wait_async_copies(kPending);
}
#else
// The 16-byte vector at `src` into `shared_dst` where `inside`, else zeros, with nothing read.
template <typename T>
__device__ __forceinline__ void copy_async_or_zero(Vector16<T>* shared_dst, const T* src, bool inside) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  // The source size 0 makes the copy write 16 zero bytes and read nothing.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(inside ? 16 : 0)
               : "memory");
#else
  *shared_dst = load_vector_or_zero(inside, src);
#endif
}
// The 8 bytes at `src` into `shared_dst` (both 8-byte aligned): rows that are whole pairs of floats
// but not whole 16-byte vectors (cp.async.ca: the .cg form takes 16-byte copies only).
template <typename T>
__device__ __forceinline__ void copy_async_8(T* shared_dst, const T* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
#else
  memcpy(shared_dst, src, 8);
#endif
}
__device__ __forceinline__ void commit_async_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wait_async_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}
#endif

// Warp matrix products on the tensor cores (sm_80 and later), for 16-bit values with float sums.
// load_matrices<kCount> (ldmatrix .x1/.x2/.x4): kCount 8x8 matrices of 16-bit values from shared
// memory, lanes 8i to 8i + 7 giving the addresses of matrix i's rows (16 bytes each, 16-byte
// aligned, any such addresses); lane l receives in word i elements 2(l % 4) and 2(l % 4) + 1 of
// row l / 4 of matrix i, the lower column in the low half. The lanes past 8 kCount give valid
// addresses too (sm_75 and earlier read them). multiply_add_16x8x8 (mma.sync m16n8k8, row x
// col): d += A B, A 16x8, B 8x8, d 16x8 in float; with g = lane / 4 and q = lane % 4, a lane holds
// A's rows g (a[0]) and g + 8 (a[1]) at columns 2q, 2q + 1, B's column g at rows 2q, 2q + 1 (b), and
// d's rows g (d[0], d[1]) and g + 8 (d[2], d[3]) at columns 2q, 2q + 1: load_matrices<2> over A's
// rows 0-7 then 8-15 gives a lane its a[]. Whole warps, at the same call. The PTX ISA leaves the
// order and rounding of the float sums to the GPU. The CPU emulator supplies its own
// (DWCONV_EMULATED_WARP_MATRICES), from that description, told each call's place so that lanes
// meeting at different calls fail. Code compiled for an arch before sm_80 traps here: the host code
// chooses no kernel that uses them where the code runs as such (GpuLimits::compute_capability).
template <typename scalar_t>
__host__ __device__ inline float widen_16bit(std::uint16_t bits) {
  return static_cast<float>(scalar_t(bits, scalar_t::from_bits()));
}
template <int kCount>
constexpr bool kLoadableMatrices = kCount == 1 || kCount == 2 || kCount == 4;
template <typename scalar_t>
constexpr bool kWarpMatrixType = std::is_same_v<scalar_t, c10::BFloat16> || std::is_same_v<scalar_t, c10::Half>;
#ifdef DWCONV_EMULATED_WARP_MATRICES
template <int kCount>
__device__ __forceinline__ void load_matrices(std::uint32_t (&words)[kCount], const void* row,
                                              int call = __builtin_LINE(), const char* file = __builtin_FILE()) {
  static_assert(kLoadableMatrices<kCount>, "ldmatrix loads 1, 2 or 4 matrices");
  dwconv_emu::load_matrices(words, kCount, row, call, file);
}
template <typename scalar_t>
__device__ __forceinline__ void multiply_add_16x8x8(float (&d)[4], const std::uint32_t (&a)[2], std::uint32_t b,
                                                    int call = __builtin_LINE()) {
  static_assert(kWarpMatrixType<scalar_t>, "the warp matrix products take bfloat16 or half");
  dwconv_emu::multiply_add_16x8x8(d, a, b, &widen_16bit<scalar_t>, call);
}
#else
template <int kCount>
__device__ __forceinline__ void load_matrices(std::uint32_t (&words)[kCount], const void* row) {
  static_assert(kLoadableMatrices<kCount>, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kCount == 4) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(words[0]), "=r"(words[1]), "=r"(words[2]), "=r"(words[3])
                 : "r"(address));
  } else if constexpr (kCount == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(words[0]), "=r"(words[1])
                 : "r"(address));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(words[0]) : "r"(address));
  }
#else
  __trap();
#endif
}
template <typename scalar_t>
__device__ __forceinline__ void multiply_add_16x8x8(float (&d)[4], const std::uint32_t (&a)[2], std::uint32_t b) {
  static_assert(kWarpMatrixType<scalar_t>, "the warp matrix products take bfloat16 or half");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
  } else {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
  }
#else
  __trap();
#endif
}
#endif

// The filters of a block's `vectors` channel vectors from channel c0, in shared memory as values
// of staged_t (scalar_t, or acc_t where each is used once a thread and converting it there would
// cost as much as its multiply-add), in 16-byte pieces: a vector's kVector16<scalar_t> channels
// take kStagedPieces pieces (2 for half types staged in float), and tap t's pieces of all vectors
// are a row [piece][vector] from piece t * tap_pitch. A warp whose lanes read one piece of
// consecutive vectors reads consecutive 16 bytes (at [vector][piece] it read every other 16 bytes:
// twice the fewest wavefronts). Loaded by the block's `threads` threads together, consecutive
// threads taking consecutive taps of a vector, so that a warp's loads read runs of each channel's
// taps (weight is [channel][tap]; by vectors, a load touched a sector a lane). Their stores then
// go a row apart: staged_tap_pitch's odd pitch spreads them over the banks; a pitch of the row's
// pieces (tiled_channels_last_kernel, whose large filters must take the least room) lets them meet.
// The taps in reverse order when `flip`, and zero for channels past the last. load_staged_weights
// reads a vector's taps back.
template <typename staged_t, typename scalar_t>
constexpr int kStagedPieces = kVector16<scalar_t> / kVector16<staged_t>;

// The pitch of the staged taps' rows, in 16-byte pieces: the row's pieces, made odd.
template <typename staged_t, typename scalar_t>
__host__ __device__ constexpr int staged_tap_pitch(int vectors) {
  return kStagedPieces<staged_t, scalar_t> * vectors | 1;
}

// The shared memory the staged taps take.
template <typename staged_t, typename scalar_t>
constexpr size_t staged_weight_bytes(int64_t taps, int vectors) {
  return size_t(taps) * staged_tap_pitch<staged_t, scalar_t>(vectors) * 16;
}

template <typename staged_t, typename scalar_t, typename index_t>
__device__ __forceinline__ void stage_weight_vectors(staged_t* taps, const scalar_t* weight, index_t c0,
                                                     index_t channels, int taps_count, int vectors, int tap_pitch,
                                                     int tid, int threads, bool flip) {
  constexpr int V = kVector16<scalar_t>;
  constexpr int kPiece = kVector16<staged_t>;  // staged values in 16 bytes
  constexpr int kPieces = kStagedPieces<staged_t, scalar_t>;
  GridWalk<int, 2> tap_at(tid, threads, {0, taps_count});  // (vector, tap)
  for (int i = tid; i < taps_count * vectors; i += threads, tap_at.advance()) {
    const int vec = tap_at.at[0];
    const int tap_slot = tap_at.at[1];
    const int weight_tap = flip ? taps_count - 1 - tap_slot : tap_slot;
#pragma unroll
    for (int piece = 0; piece < kPieces; ++piece) {
      Vector16<staged_t> w;
#pragma unroll
      for (int k = 0; k < kPiece; ++k) {
        const index_t c = c0 + vec * V + piece * kPiece + k;
        w.v[k] = c < channels ? static_cast<staged_t>(weight[c * taps_count + weight_tap]) : staged_t(0);
      }
      reinterpret_cast<Vector16<staged_t>*>(taps)[tap_slot * tap_pitch + piece * vectors + vec] = w;
    }
  }
}

// Tap `tap`'s weights of channel vector `vec` of the block's `vectors`, as stage_weight_vectors
// staged them at `taps` (scalar_t channels staged as staged_t, at staged_tap_pitch).
template <typename scalar_t, typename staged_t>
__device__ __forceinline__ void load_staged_weights(const staged_t* taps, int tap, int vec, int vectors,
                                                    staged_t (&values)[kVector16<scalar_t>]) {
  constexpr int kPieces = kStagedPieces<staged_t, scalar_t>;
  const Vector16<staged_t>* pieces = reinterpret_cast<const Vector16<staged_t>*>(taps) +
                                     tap * staged_tap_pitch<staged_t, scalar_t>(vectors) + vec;
#pragma unroll
  for (int piece = 0; piece < kPieces; ++piece) {
    const Vector16<staged_t> v = pieces[piece * vectors];
#pragma unroll
    for (int k = 0; k < kVector16<staged_t>; ++k) values[piece * kVector16<staged_t> + k] = v.v[k];
  }
}

// ---------------------------------------------------------------------------
// The weight gradients' reductions: across a block, then over slices in slice order.

constexpr int kWarpLanes = 32;
constexpr int kWarps = kThreads / kWarpLanes;

// A whole warp's `value`s added into lane 0's, in a fixed order: lane l adds lane l + 16's, then
// l + 8's, and so on (a tree's order). Every lane of the warp calls it.
template <typename acc_t>
__device__ __forceinline__ acc_t add_down_warp(acc_t value) {
#pragma unroll
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

// The block's kThreads per-thread values of each slot (thread tid's in acc, tid the thread's
// linear index), added in a fixed order: down each warp by shuffles, then the warps' sums in warp
// order through `warp_sums`, so one barrier where a tree through shared memory took nine. Thread
// t < kSlots gets slot t's total. Every thread of the block calls it; the caller syncs before
// `warp_sums` is written again.
template <typename acc_t, int kSlots>
__device__ __forceinline__ acc_t sum_over_block(acc_t (&warp_sums)[kWarps][kSlots], acc_t (&acc)[kSlots], int tid) {
  static_assert(kSlots <= kThreads, "a thread for every slot's total");
#pragma unroll
  for (int t = 0; t < kSlots; ++t) acc[t] = add_down_warp(acc[t]);
  if (tid % kWarpLanes == 0) {
#pragma unroll
    for (int t = 0; t < kSlots; ++t) warp_sums[tid / kWarpLanes][t] = acc[t];
  }
  __syncthreads();
  acc_t total = acc_t(0);
  if (tid < kSlots) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w][tid];
  }
  return total;
}

// The channels_last weight gradients' blocks: threadIdx.x walks 32 channels (coalesced), threadIdx.y
// walks positions.
constexpr int kChannelLanes = 32;
constexpr int kPositionLanes = kThreads / kChannelLanes;

// The block's kPositionLanes values of each of kValues slots a channel lane (value_of(t): this
// thread's of slot t), added in lane order through `shared`; finish(t, total) gets each slot's
// total once, from one of the lanes. The caller syncs before `shared` is written again.
template <typename acc_t, int kValues, typename ValueOf, typename Finish>
__device__ __forceinline__ void sum_position_lanes(acc_t (&shared)[kValues][kPositionLanes][kChannelLanes],
                                                   ValueOf value_of, Finish finish) {
#pragma unroll
  for (int t = 0; t < kValues; ++t) shared[t][threadIdx.y][threadIdx.x] = value_of(t);
  __syncthreads();
  for (int t = threadIdx.y; t < kValues; t += kPositionLanes) {
    acc_t total = acc_t(0);
    for (int lane = 0; lane < kPositionLanes; ++lane) total += shared[t][lane][threadIdx.x];
    finish(t, total);
  }
}

// grad_weight_finish_kernel's block: kFinishColumns consecutive values (a warp's row of loads is
// one run of a slice, 128 bytes in float), each summed by kFinishLanes lanes. A slot's sums are
// slices apart in `partial`, and the weight-gradient kernels make up to a few hundred slices: a
// thread a value, adding them one after another, waited out each load in turn (2026-11-27, H200:
// ConvNeXt-T 96@56 bf16, 192 slices in 19 blocks, 40 us under ncu, more than a quarter of the pass).
constexpr int kFinishColumns = 32;
constexpr int kFinishLanes = 8;

// The slices' sums added in a fixed order: partial ([slices][values]) into grad_weight, and, when
// grad_bias is not null, partial_bias ([slices][channels]) into grad_bias. Lane l of a value adds
// slices l, l + kFinishLanes, ... in order, then the lanes' totals are added in lane order: the
// same bits every run, whatever the grid. Launched with block (kFinishColumns, kFinishLanes).
template <typename scalar_t>
__global__ void grad_weight_finish_kernel(
    const at::acc_type<scalar_t, true>* __restrict__ partial,
    scalar_t* __restrict__ grad_weight,
    const int64_t slices,
    const int64_t values,
    const at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    scalar_t* __restrict__ grad_bias,
    const int64_t channels) {
  using acc_t = at::acc_type<scalar_t, true>;
  __shared__ acc_t lane_totals[kFinishLanes][kFinishColumns];
  const int64_t total_values = values + (grad_bias != nullptr ? channels : 0);
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kFinishColumns; first < total_values;
       first += static_cast<int64_t>(gridDim.x) * kFinishColumns) {
    const int64_t i = first + threadIdx.x;
    const bool is_bias = i >= values;
    acc_t total = acc_t(0);
    if (i < total_values) {
      const acc_t* sums = is_bias ? partial_bias + (i - values) : partial + i;
      const int64_t slice_stride = is_bias ? channels : values;
#pragma unroll 4
      for (int64_t s = threadIdx.y; s < slices; s += kFinishLanes) total += sums[s * slice_stride];
    }
    lane_totals[threadIdx.y][threadIdx.x] = total;
    __syncthreads();
    if (threadIdx.y == 0 && i < total_values) {
      total = lane_totals[0][threadIdx.x];
#pragma unroll
      for (int lane = 1; lane < kFinishLanes; ++lane) total += lane_totals[lane][threadIdx.x];
      if (is_bias) {
        grad_bias[i - values] = static_cast<scalar_t>(total);
      } else {
        grad_weight[i] = static_cast<scalar_t>(total);
      }
    }
    __syncthreads();  // lane_totals is written again next round
  }
}

// grad_weight_finish_kernel's grid over `total_values` (the weights, and the bias where it is
// summed): a block a kFinishColumns values, at most as many blocks as the SMs' threads hold at
// once (8 an SM where 2048 threads fit); the blocks walk the rest.
inline dim3 finish_grid(int64_t total_values, const GpuLimits& gpu) {
  const int64_t groups = (total_values + kFinishColumns - 1) / kFinishColumns;
  const int64_t resident = std::max<int64_t>(gpu.sm_count, 1) *
      std::max<int64_t>(gpu.threads_per_sm / (kFinishColumns * kFinishLanes), 1);
  return dim3(static_cast<unsigned>(std::clamp<int64_t>(std::min(groups, resident), 1, INT32_MAX)));
}

inline dim3 finish_block() {
  return dim3(kFinishColumns, kFinishLanes);
}

// ---------------------------------------------------------------------------
// Launch arithmetic.

// The input rows (or columns) that `outputs` consecutive output rows (or columns) read.
inline int input_extent(int outputs, int stride, int kernel, int dilation) {
  return (outputs - 1) * stride + (kernel - 1) * dilation + 1;
}

// Blocks of `threads` for a grid-stride walk over `items`: about `per_thread` items a thread, but
// never fewer blocks than 4 an SM (or one an item's thread) for a small walk.
inline int64_t walk_blocks(int64_t items, int threads, int per_thread, const GpuLimits& gpu) {
  const int64_t one_a_thread = (items + threads - 1) / threads;
  const int64_t blocks =
      std::max<int64_t>((one_a_thread + per_thread - 1) / per_thread, std::min<int64_t>(one_a_thread, 4 * gpu.sm_count));
  return std::clamp<int64_t>(blocks, 1, std::numeric_limits<int32_t>::max());
}

// The blocks a walk of `items` takes in each of `groups` (the grid's other dimension, blocks alike),
// `lanes` threads a block each walking the items by the grid's stride, `resident` blocks at once on the
// GPU: the fewest steps, waves x (the items a lane walks + `start_items`, what a block does before its
// first item). The blocks of one launch are alike, so a wave's start and end together, and a last wave
// only some blocks deep costs as long as a full one. Within a number of waves more blocks walk fewer
// items each, so only each number's most blocks are tried; fewer blocks on a tie.
inline int64_t walk_blocks_by_waves(int64_t items, int lanes, int64_t groups, int64_t resident, int64_t start_items) {
  const int64_t lane_items = std::max<int64_t>(1, (items + lanes - 1) / lanes);  // the most blocks: an item a lane
  groups = std::max<int64_t>(groups, 1);
  resident = std::max<int64_t>(resident, 1);
  int64_t best_blocks = 1, fewest = std::numeric_limits<int64_t>::max();
  for (int64_t waves = 1; waves * (1 + start_items) < fewest; ++waves) {  // no more waves can take fewer steps
    const int64_t blocks = std::clamp<int64_t>(waves * resident / groups, 1, lane_items);
    const int64_t steps = (blocks * groups + resident - 1) / resident * ((lane_items + blocks - 1) / blocks + start_items);
    if (steps < fewest) {
      fewest = steps;
      best_blocks = blocks;
    }
    if (blocks == lane_items) break;
  }
  return std::min<int64_t>(best_blocks, std::numeric_limits<int32_t>::max());
}

// Backward-input as a stride-1 correlation of grad_output with the flipped kernel:
// grad_input[y] = sum_k grad_output[y - ((K-1)*d - p) + k*d] * w[K-1-k]. Only for stride 1
// and p <= (K-1)*d (no negative padding).
inline std::optional<PassGeometry> backward_input_as_correlation(const PassGeometry& fwd) {
  const int pad_h = (fwd.kernel_h - 1) * fwd.dilation_h - fwd.pad_h;
  const int pad_w = (fwd.kernel_w - 1) * fwd.dilation_w - fwd.pad_w;
  if (fwd.stride_h != 1 || fwd.stride_w != 1 || pad_h < 0 || pad_w < 0) return std::nullopt;
  return PassGeometry{fwd.batch,
                      fwd.dst_channels, fwd.dst_h, fwd.dst_w,
                      fwd.src_channels, fwd.src_h, fwd.src_w,
                      fwd.kernel_h, fwd.kernel_w, 1, 1, pad_h, pad_w,
                      fwd.dilation_h, fwd.dilation_w, fwd.multiplier};
}

// The direct backward-input kernel reads the geometry with src = grad_output, dst = grad_input.
inline PassGeometry backward_input_direct(const PassGeometry& fwd) {
  PassGeometry g = fwd;
  std::swap(g.src_channels, g.dst_channels);
  std::swap(g.src_h, g.dst_h);
  std::swap(g.src_w, g.dst_w);
  return g;
}

}  // namespace at::native::dwconv
