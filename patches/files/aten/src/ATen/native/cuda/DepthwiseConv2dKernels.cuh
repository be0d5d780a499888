#pragma once
// The kernels of DepthwiseConv2d.cu and the arithmetic that plans their launches:
// device code and plain host arithmetic, no ATen tensors and no CUDA runtime calls,
// so that tests/emulator can also run them on a CPU.

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

// Blocks of `threads` threads, `shared_bytes` and `registers` a thread that an SM holds at once
// (at least 1), for the planners that trade threads a block against blocks an SM: an sm_90 SM
// (2048 threads, 32 blocks, 64K registers allocated 256 a warp at a time, 228 KB of shared memory
// with 1 KB of it reserved a block).
inline int64_t sm90_blocks_per_sm(int threads, size_t shared_bytes, int registers) {
  const int64_t warps = (threads + 31) / 32;
  const int64_t warp_registers = (int64_t(registers) * 32 + 255) / 256 * 256;
  return std::max<int64_t>(1, std::min({int64_t(32), int64_t(2048 / threads), 65536 / (warps * warp_registers),
                                        int64_t(228 * 1024 / (shared_bytes + 1024))}));
}

// The registers a thread may take in a kernel of kThreads-thread blocks bounded to `min_blocks`
// blocks an SM (what ptxas allows under __launch_bounds__(kThreads, min_blocks)).
constexpr int registers_within_bounds(int min_blocks) {
  return 65536 / (kThreads * min_blocks) / 8 * 8;
}

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
// Tiled kernel (NCHW). Block: (bx, kThreads / bx) threads; a thread computes
// output (y0 + ty, x0 + tx + j * bx) for j < cols_per_thread.

template <typename scalar_t, typename index_t, bool kBackward>
__global__ void __launch_bounds__(kThreads) tiled_nchw_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const int cols_per_thread,
    const int tile_in_h,
    const int tile_in_w) {
  using acc_t = at::acc_type<scalar_t, true>;
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* tile = reinterpret_cast<acc_t*>(shared_bytes);
  acc_t* taps = tile + tile_in_h * tile_in_w;

  const int bx = blockDim.x;
  const int tid = threadIdx.y * bx + threadIdx.x;
  const int taps_count = g.kernel_h * g.kernel_w;
  const index_t plane = blockIdx.x;
  const index_t dst_channels = g.dst_channels, src_channels = g.src_channels;
  const index_t n = plane / dst_channels;
  const index_t c = plane % dst_channels;
  const int y0 = blockIdx.y * blockDim.y;
  const int x0 = blockIdx.z * bx * cols_per_thread;
  const int src_y0 = y0 * g.stride_h - g.pad_h;
  const int src_x0 = x0 * g.stride_w - g.pad_w;
  const index_t src_h = g.src_h, src_w = g.src_w;  // index_t math: PassGeometry's are 64-bit
  const index_t src_plane_size = src_h * src_w;

  acc_t acc[kMaxColsPerThread];
  const acc_t start = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[c]) : acc_t(0);
#pragma unroll
  for (int j = 0; j < kMaxColsPerThread; ++j) {
    acc[j] = start;
  }

  const int group = kBackward ? g.multiplier : 1;
  for (int member = 0; member < group; ++member) {
    const index_t src_c = kBackward ? c * g.multiplier + member : c / g.multiplier;
    const index_t weight_row = kBackward ? src_c : c;
    const scalar_t* src_plane = src + (n * src_channels + src_c) * src_plane_size;

    __syncthreads();  // the previous member's tile is no longer read
    for (int i = tid; i < tile_in_h * tile_in_w; i += kThreads) {
      const index_t sy = src_y0 + i / tile_in_w;
      const index_t sx = src_x0 + i % tile_in_w;
      const bool inside = sy >= 0 && sy < src_h && sx >= 0 && sx < src_w;
      tile[i] = inside ? static_cast<acc_t>(src_plane[sy * src_w + sx]) : acc_t(0);
    }
    for (int i = tid; i < taps_count; i += kThreads) {
      // Backward-input correlates with the kernel flipped in both directions.
      const int tap = kBackward ? taps_count - 1 - i : i;
      taps[i] = static_cast<acc_t>(weight[weight_row * taps_count + tap]);
    }
    __syncthreads();

    for (int kh = 0; kh < g.kernel_h; ++kh) {
      const acc_t* row = tile + (threadIdx.y * g.stride_h + kh * g.dilation_h) * tile_in_w;
      for (int kw = 0; kw < g.kernel_w; ++kw) {
        const acc_t w = taps[kh * g.kernel_w + kw];
        const acc_t* col = row + threadIdx.x * g.stride_w + kw * g.dilation_w;
#pragma unroll
        for (int j = 0; j < kMaxColsPerThread; ++j) {
          if (j < cols_per_thread) {
            acc[j] += col[j * bx * g.stride_w] * w;
          }
        }
      }
    }
  }

  const int y = y0 + threadIdx.y;
  if (y < g.dst_h) {
    scalar_t* dst_row = dst + (plane * static_cast<index_t>(g.dst_h) + y) * static_cast<index_t>(g.dst_w);
#pragma unroll
    for (int j = 0; j < kMaxColsPerThread; ++j) {
      const int x = x0 + threadIdx.x + j * bx;
      if (j < cols_per_thread && x < g.dst_w) {
        dst_row[x] = static_cast<scalar_t>(acc[j]);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Register-blocked tiled kernel (NCHW) for square kKernel x kKernel filters at dilation 1:
// forward at stride kStride (1, or 2 for 3x3 and 5x5), and backward-input (stride 1) as a
// correlation with the flipped kernel. A thread computes kBlockRows x kBlockCols outputs. It
// reads each input row its outputs need once, as 16-byte shared loads, and applies it to every
// one of its output rows that uses it, with the plane's weights in registers: for 7x7 in float,
// 43 16-byte shared loads per 16 outputs (30 for the window, 13 for the weights) where the
// general tiled kernel makes 980 4-byte ones. At stride 2 a thread's window is twice as wide
// and tall (3x3 in float: 9 rows of 3 vectors for 16 outputs).
// Block: (planes, bx, by) threads, planes fastest, so that blocks on small planes (7x7,
// 14x14) hold many planes and still read shared memory without bank conflicts; (planes, bx,
// by x groups) where a grid that fits on the GPU at once gets helper groups that only stage
// (register_tile_groups). A plane's shared region: its kKernel^2 weights, then its input tile
// (row pitch `pitch`).

constexpr int kBlockRows = 4;
constexpr int kBlockCols = 4;

constexpr bool is_register_tiled_kernel_size(int kernel) {
  return kernel == 3 || kernel == 5 || kernel == 7;
}

// Stride 2 is compiled for the filters of the stride-2 layers of mobile networks only.
constexpr bool is_register_tiled_stride(int kernel, int stride) {
  return stride == 1 || (stride == 2 && (kernel == 3 || kernel == 5));
}

template <typename acc_t>
constexpr int register_tile_weight_slots(int kernel) {
  return (kernel * kernel + kVector16<acc_t> - 1) / kVector16<acc_t> * kVector16<acc_t>;
}

// 16-byte vectors a thread loads for one input row of its window ((kBlockCols - 1) * stride + kernel values).
template <typename acc_t>
constexpr int register_tile_window_vectors(int kernel, int stride) {
  return ((kBlockCols - 1) * stride + kernel + kVector16<acc_t> - 1) / kVector16<acc_t>;
}

struct RegisterTile {
  int pitch;         // acc_t values between tile rows
  int plane_stride;  // acc_t values between the planes of a block
  int tile_in_h, tile_in_w;
  bool row_access;   // a thread moves its kBlockCols values of a dst row as one access
  bool vector_loads;  // the tile is staged from 16-byte vectors of src (register_tile_vector_loads)
  // Thread groups a block holds along z, each blockDim.z / groups rows of threads covering the
  // whole tile: all stage the tile; in the register-tiled kernel group 0 computes and the others
  // only stage (grids too small to fill the GPU), in the large-filter kernel the groups share out
  // the window's rows and add their sums (register_tile_groups, large_filter_groups).
  int groups = 1;
};

// A thread's kBlockCols values of one dst row, moved as one access (16 bytes for float).
template <typename scalar_t>
struct alignas(kBlockCols * sizeof(scalar_t)) BlockRow {
  scalar_t v[kBlockCols];
};

// Row access needs every thread's first column aligned: dst rows a whole number of
// kBlockCols values and `dst` (the tensor of dst's shape at hand) aligned to a BlockRow.
inline bool register_tile_row_access(const PassGeometry& g, const void* dst, size_t element_size) {
  return g.dst_w % kBlockCols == 0 && reinterpret_cast<uintptr_t>(dst) % (kBlockCols * element_size) == 0;
}

// Vector loads need every src row to start on a 16-byte boundary: rows a whole number of
// vectors and `src` (the tensor the tile is staged from) aligned.
inline bool register_tile_vector_loads(const PassGeometry& g, const void* src, size_t element_size) {
  return g.src_w % (16 / static_cast<int64_t>(element_size)) == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
}

// The input tiles of a block's first `planes` planes in shared memory, plane p's at
// `tiles + p * t.plane_stride` (rows of t.pitch acc_t values), zero outside its plane; plane p's
// src plane at `src0 + p * plane_step`. Staged by all `threads` threads together, plane after
// plane and row after row, so that consecutive threads read consecutive values of a row (with
// t.vector_loads, the 16-byte vectors of src that hold it: a vector lies wholly inside the plane
// or wholly outside, and only its values inside the tile are stored): on small planes a block
// holds many, and when each plane's threads staged their own, a warp's load touched a line of 16
// to 32 planes. kVectors vectors (twice as many values) in flight a thread.
template <typename scalar_t, typename index_t, int kVectors = kStageVectors>
__device__ __forceinline__ void stage_register_tiles(at::acc_type<scalar_t, true>* tiles, const scalar_t* src0,
                                                     index_t plane_step, int planes, const PassGeometry& g,
                                                     const RegisterTile& t, int src_y0, int src_x0, int tid,
                                                     int threads) {
  using acc_t = at::acc_type<scalar_t, true>;
  const index_t src_h = g.src_h, src_w = g.src_w;  // index_t math: PassGeometry's are 64-bit
  if (t.vector_loads) {
    constexpr int V = kVector16<scalar_t>;
    const int lead = ((src_x0 % V) + V) % V;  // the first vector's values before the tile
    const int row_vectors = (lead + t.tile_in_w + V - 1) / V;
    struct Loaded {
      Vector16<scalar_t> v;
      int slot, first_col;  // where the vector's first value goes (plane and row), its tile column
    };
    GridWalk<int, 3> at(tid, threads, {0, t.tile_in_h, row_vectors});  // (plane, row, vector)
    stage_in_batches<kVectors>(
        planes * t.tile_in_h * row_vectors, tid, threads, at,
        [&](const GridWalk<int, 3>& pos, bool in_range) {
          const int row = pos.at[1];
          const int first_col = pos.at[2] * V - lead;
          const index_t sy = src_y0 + row;
          const index_t sx = src_x0 + first_col;
          return Loaded{load_vector_or_zero(in_range && sy >= 0 && sy < src_h && sx >= 0 && sx < src_w,
                                            src0 + pos.at[0] * plane_step + sy * src_w + sx),
                        pos.at[0] * t.plane_stride + row * t.pitch, first_col};
        },
        [&](int, const Loaded& loaded) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const int col = loaded.first_col + k;
            if (col >= 0 && col < t.tile_in_w) tiles[loaded.slot + col] = static_cast<acc_t>(loaded.v.v[k]);
          }
        });
    return;
  }
  struct Loaded {
    acc_t value;
    int slot;  // plane * plane_stride + row * pitch + col
  };
  GridWalk<int, 3> at(tid, threads, {0, t.tile_in_h, t.tile_in_w});  // (plane, row, col), stepped with carries
  stage_in_batches<2 * kVectors>(
      planes * t.tile_in_h * t.tile_in_w, tid, threads, at,
      [&](const GridWalk<int, 3>& pos, bool in_range) {
        const index_t sy = src_y0 + pos.at[1];
        const index_t sx = src_x0 + pos.at[2];
        const bool inside = in_range && sy >= 0 && sy < src_h && sx >= 0 && sx < src_w;
        return Loaded{inside ? static_cast<acc_t>(src0[pos.at[0] * plane_step + sy * src_w + sx]) : acc_t(0),
                      pos.at[0] * t.plane_stride + pos.at[1] * t.pitch + pos.at[2]};
      },
      [&](int, const Loaded& loaded) { tiles[loaded.slot] = loaded.value; });
}

// A thread's kBlockCols results of one dst row, the first at `out`, `cols_left` columns before
// the plane's edge, consecutive values `col_stride` apart. With row_access (then col_stride is
// 1 and cols_left >= kBlockCols) they go as one access.
template <typename scalar_t, typename index_t, typename acc_t>
__device__ __forceinline__ void store_block_row(scalar_t* out, const acc_t (&values)[kBlockCols], int cols_left,
                                                index_t col_stride, bool row_access) {
  if (row_access) {
    BlockRow<scalar_t> row;
#pragma unroll
    for (int j = 0; j < kBlockCols; ++j) row.v[j] = static_cast<scalar_t>(values[j]);
    *reinterpret_cast<BlockRow<scalar_t>*>(out) = row;
  } else {
#pragma unroll
    for (int j = 0; j < kBlockCols; ++j) {
      if (j < cols_left) out[j * col_stride] = static_cast<scalar_t>(values[j]);
    }
  }
}

// kVectors 16-byte vectors from shared memory into registers (a window row, a plane's weights).
template <typename acc_t, int kVectors>
__device__ __forceinline__ void load_shared_vectors(const acc_t* from, acc_t (&values)[kVectors * kVector16<acc_t>]) {
#pragma unroll
  for (int q = 0; q < kVectors; ++q) {
    const Vector16<acc_t> v = reinterpret_cast<const Vector16<acc_t>*>(from)[q];
#pragma unroll
    for (int k = 0; k < kVector16<acc_t>; ++k) values[q * kVector16<acc_t> + k] = v.v[k];
  }
}

// A thread's window for a kKernel x kKernel filter at stride kStride: each of its
// (kBlockRows - 1) * kStride + kKernel input rows is loaded once (16-byte shared loads) and
// handed to visit(i, kh, row) for every output row i it feeds, through kernel row
// kh = r - i * kStride. Each (i, kh) pair comes once, in row order. Output column j reads
// row[j * kStride + kw].
template <typename acc_t, int kKernel, int kStride, typename Visit>
__device__ __forceinline__ void walk_register_window(const acc_t* window, int pitch, Visit&& visit) {
  constexpr int kWindowVectors = register_tile_window_vectors<acc_t>(kKernel, kStride);
#pragma unroll
  for (int r = 0; r < (kBlockRows - 1) * kStride + kKernel; ++r) {
    acc_t x[kWindowVectors * kVector16<acc_t>];
    load_shared_vectors<acc_t, kWindowVectors>(window + r * pitch, x);
#pragma unroll
    for (int i = 0; i < kBlockRows; ++i) {
      const int kh = r - i * kStride;
      if (kh >= 0 && kh < kKernel) visit(i, kh, x);
    }
  }
}

// Where a thread of a register-tile block (planes, bx, by x groups) sits: its plane slot's plane
// (planes are consecutive (n, c) pairs, the block's slots fastest), whether that plane exists (the
// last block's spare slots do not), its place among its plane's threads (all groups), its group
// and its row of threads within the group's by rows, and the block's first output row and column.
template <typename index_t>
struct RegisterTileThread {
  int plane_tid, plane_threads;
  int group, rows, row;
  index_t plane_count, first_plane, plane, n, c;
  bool live;
  int y0, x0;
};

template <typename index_t>
__device__ __forceinline__ RegisterTileThread<index_t> register_tile_thread(const PassGeometry& g, int groups) {
  RegisterTileThread<index_t> place;
  place.plane_tid = threadIdx.z * blockDim.y + threadIdx.y;
  place.plane_threads = blockDim.y * blockDim.z;
  place.rows = blockDim.z / groups;
  place.group = threadIdx.z / place.rows;
  place.row = threadIdx.z - place.group * place.rows;
  const index_t dst_channels = g.dst_channels;
  place.plane_count = static_cast<index_t>(g.batch) * dst_channels;
  place.first_plane = static_cast<index_t>(blockIdx.x) * blockDim.x;
  place.plane = place.first_plane + threadIdx.x;
  place.n = place.plane / dst_channels;
  place.c = place.plane % dst_channels;
  place.live = place.plane < place.plane_count;
  place.y0 = blockIdx.y * place.rows * kBlockRows;
  place.x0 = blockIdx.z * blockDim.y * kBlockCols;
  return place;
}

// A thread's block of outputs before the first tap: the channel's bias (forward, when given) or zero.
template <bool kBackward, typename acc_t, typename scalar_t, typename index_t>
__device__ __forceinline__ void start_block(acc_t (&acc)[kBlockRows][kBlockCols], const scalar_t* bias,
                                            const RegisterTileThread<index_t>& place) {
  const acc_t start = (!kBackward && bias != nullptr && place.live) ? static_cast<acc_t>(bias[place.c]) : acc_t(0);
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
#pragma unroll
    for (int j = 0; j < kBlockCols; ++j) acc[i][j] = start;
  }
}

// The blocks an SM the register-tiled and large-filter kernels ask of __launch_bounds__, and
// their planners count on when they give a block kThreads threads (register_tile_groups,
// large_filter_groups): three in float and the half types (80 registers), two in double (128).
template <typename scalar_t>
constexpr int tile_min_blocks() {
  return sizeof(at::acc_type<scalar_t, true>) == 4 ? 3 : 2;
}

// Two blocks an SM at least: with the thread count alone as its bound, ptxas holds the kernel
// to 64 registers and the 7x7 backward spills; here it takes 56-80 (sm_90, float), no spills.
// Three blocks an SM in float and the half types (80 registers): staging and storing small
// planes with the whole block took them to 72-89 registers left to themselves (two blocks at 7x7),
// and at four blocks (64) the forward spilled. Before either it had 55-80 registers, 3-4 blocks.

template <typename scalar_t, typename index_t, bool kBackward, int kKernel, int kStride>
__global__ void __launch_bounds__(kThreads, tile_min_blocks<scalar_t>())
    register_tiled_nchw_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const RegisterTile t) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<acc_t>;
  constexpr int kTaps = kKernel * kKernel;
  constexpr int kTapVectors = register_tile_weight_slots<acc_t>(kKernel) / V;
  static_assert(kBlockCols % V == 0, "a thread's window must start on a 16-byte boundary");
  static_assert(!kBackward || kStride == 1, "backward-input is a stride-1 correlation");
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const tiles = reinterpret_cast<acc_t*>(shared_bytes) + kTapVectors * V;  // plane slot 0's tile
  acc_t* taps = reinterpret_cast<acc_t*>(shared_bytes) + threadIdx.x * t.plane_stride;
  acc_t* tile = taps + kTapVectors * V;

  const auto place = register_tile_thread<index_t>(g, t.groups);
  const bool computes = place.group == 0;  // the other groups only stage
  const index_t src_channels = g.src_channels;
  const index_t src_plane_size = static_cast<index_t>(g.src_h) * g.src_w;
  const int threads = blockDim.x * place.plane_threads;
  const int tid = place.plane_tid * blockDim.x + threadIdx.x;
  const int live_planes = static_cast<int>(smaller<index_t>(blockDim.x, place.plane_count - place.first_plane));
  // The block's src planes are evenly spaced (and staged by the whole block) but for a forward
  // pass with a multiplier: backward-input's plane (n, c) reads grad_output plane
  // (n * C + c) * multiplier + member, the forward's plane (n, c) input plane n * C + c at multiplier 1.
  const bool block_staged = kBackward || g.multiplier == 1;

  acc_t acc[kBlockRows][kBlockCols];  // started after the first staging, so that it is not live there

  const int group = kBackward ? g.multiplier : 1;
  for (int member = 0; member < group; ++member) {
    const index_t src_c = kBackward ? place.c * g.multiplier + member : place.c / g.multiplier;
    const index_t weight_row = kBackward ? src_c : place.c;
    __syncthreads();  // no thread still reads the previous member's tile or weights
    // Backward-input stages with its sums live (a member at a time): fewer loads in flight,
    // so that its registers still allow the blocks an SM they did with one (3 for float).
    constexpr int kVectors = !kBackward ? kStageVectors : kKernel == 7 ? 1 : kStageVectors / 2;
    const int src_y0 = place.y0 * kStride - g.pad_h, src_x0 = place.x0 * kStride - g.pad_w;
    {  // the block's planes by the whole block, or each plane by its own threads
      const index_t step = kBackward ? g.multiplier : 1;
      const index_t first_src = block_staged ? place.first_plane * step + member : place.n * src_channels + src_c;
      stage_register_tiles<scalar_t, index_t, kVectors>(
          block_staged ? tiles : tile, src + first_src * src_plane_size, step * src_plane_size,
          block_staged ? live_planes : int(place.live), g, t, src_y0, src_x0, block_staged ? tid : place.plane_tid,
          block_staged ? threads : place.plane_threads);
    }
    if (place.live) {
      for (int i = place.plane_tid; i < kTaps; i += place.plane_threads) {
        // Backward-input correlates with the kernel flipped in both directions.
        const int tap = kBackward ? kTaps - 1 - i : i;
        taps[i] = static_cast<acc_t>(weight[weight_row * kTaps + tap]);
      }
    }
    __syncthreads();

    if (member == 0) start_block<kBackward>(acc, bias, place);
    if (computes) {
      acc_t w[kTapVectors * V];
      load_shared_vectors<acc_t, kTapVectors>(taps, w);
      const acc_t* window = tile + (place.row * kBlockRows * t.pitch + threadIdx.y * kBlockCols) * kStride;
      walk_register_window<acc_t, kKernel, kStride>(window, t.pitch, [&](int i, int kh, const auto& x) {
#pragma unroll
        for (int kw = 0; kw < kKernel; ++kw) {
#pragma unroll
          for (int j = 0; j < kBlockCols; ++j) acc[i][j] += x[j * kStride + kw] * w[kh * kKernel + kw];
        }
      });
    }
  }

  const index_t dst_h = g.dst_h, dst_w = g.dst_w;
  if (blockDim.x > 1) {
    // Many planes a block: the outputs go through shared memory (each plane's tile, read no more),
    // then the whole block writes them row by row, so that a warp's stores fill a plane's rows
    // rather than touching a line of each of 16 to 32 planes.
    __syncthreads();  // every thread is done with the tiles
    if (computes) {
#pragma unroll
      for (int i = 0; i < kBlockRows; ++i) {
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) {
          tile[(place.row * kBlockRows + i) * t.pitch + threadIdx.y * kBlockCols + j] = acc[i][j];
        }
      }
    }
    __syncthreads();
    const int rows = static_cast<int>(smaller<index_t>(place.rows * kBlockRows, dst_h - place.y0));
    const int cols = static_cast<int>(smaller<index_t>(blockDim.y * kBlockCols, dst_w - place.x0));
    scalar_t* const dst0 = dst + (place.first_plane * dst_h + place.y0) * dst_w + place.x0;
    GridWalk<int, 3> at(tid, threads, {0, rows, cols});  // (plane, row, col)
    for (int e = tid; e < live_planes * rows * cols; e += threads, at.advance()) {
      dst0[(at.at[0] * dst_h + at.at[1]) * dst_w + at.at[2]] =
          static_cast<scalar_t>(tiles[at.at[0] * t.plane_stride + at.at[1] * t.pitch + at.at[2]]);
    }
    return;
  }
  if (!place.live || !computes) return;
  const int x = place.x0 + threadIdx.y * kBlockCols;
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    const int y = place.y0 + place.row * kBlockRows + i;
    if (y >= g.dst_h || x >= g.dst_w) continue;
    store_block_row<scalar_t, index_t>(dst + (place.plane * dst_h + y) * dst_w + x, acc[i], g.dst_w - x, 1, t.row_access);
  }
}

// ---------------------------------------------------------------------------
// Large-filter kernel (NCHW or channels_last) for filters of any size at stride 1 and
// dilation 1 that the compiled sizes do not cover (RepLKNet's 13x13 to 31x31, 9x9, 5x51...).
// These are bound by their multiply-adds, not by memory: a 31x31 filter makes 961 per output.
// It keeps the register tile of the kernel above (a thread computes kBlockRows x kBlockCols
// outputs from its window in shared memory, each input row of the window read once and applied
// to every output row it feeds), but the filter size is a runtime value: the plane's weights
// stay in shared memory, kernel_h rows of large_filter_weight_pitch values, and a window row is
// walked kBlockCols taps at a time. Each step loads the next kBlockCols input columns (one
// 16-byte load in float) and, for each output row the input row feeds, kBlockCols weights (one
// load, the same address across a plane's threads), then makes 16 multiply-adds per output row.
// Source and destination are addressed through their strides; a block's planes are
// consecutive channels of one image with planes fastest, so channels_last tiles are loaded and
// results stored across channels. Where a block has thread groups (large_filter_groups), each
// group takes every groups-th input row of the windows and adds its sums into the first group's
// at the end (add_group_sums): more warps for the same tile in shared memory.

constexpr int kLargeFilterMinTaps = 16;

__host__ __device__ inline int large_filter_weight_pitch(int kernel_w) {
  return (kernel_w + kBlockCols - 1) / kBlockCols * kBlockCols;
}

// A thread's window row in 16-byte vectors: kBlockCols columns past the weight pitch, since
// each step loads the kBlockCols columns after the step's first tap.
template <typename acc_t>
int large_filter_window_vectors(int kernel_w) {
  return (large_filter_weight_pitch(kernel_w) + kBlockCols) / kVector16<acc_t>;
}

// Stages a region of `rows` x `cols` values of each of a block's planes into shared memory
// (rows `pitch` values apart, planes `plane_stride` apart), zero outside the plane: value
// (row, col) of plane slot p comes from (row0 + row, col0 + col) of the plane that
// plane_base(p) points to (null for a slot with no plane, whose values are not written), of
// height x width and strides s. Consecutive threads load consecutive columns of a plane, or
// consecutive slots (channels) of a pixel when `channels_fastest`. A thread has 2 * kStageVectors
// loads in flight (stage_in_batches; one, waited out value by value, made the staging of 7x7 and
// 14x14 planes under a large filter 100 round trips a thread), walks its positions with carries,
// and calls plane_base again only when its slot changes (with channels fastest, never: a block's
// threads are a whole number of slots).
template <typename scalar_t, typename index_t, typename PlaneBase>
__device__ __forceinline__ void stage_planes(at::acc_type<scalar_t, true>* dst, int plane_stride, int pitch, int rows,
                                             int cols, int row0, int col0, index_t height, index_t width,
                                             const Strides4& s, bool channels_fastest, PlaneBase plane_base) {
  using acc_t = at::acc_type<scalar_t, true>;
  const int planes = blockDim.x;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const index_t row_stride = s.h, col_stride = s.w;
  int cached_slot = -1;
  const scalar_t* cached_base = nullptr;
  struct Loaded {
    acc_t value;
    int at;  // p * plane_stride + row * pitch + col; negative for a slot with no plane
  };
  const auto load = [&](int p, int row, int col, bool in_range) {
    if (in_range && p != cached_slot) {
      cached_slot = p;
      cached_base = plane_base(p);
    }
    const scalar_t* base = in_range ? cached_base : nullptr;
    const index_t sy = row0 + row, sx = col0 + col;
    const bool inside = base != nullptr && sy >= 0 && sy < height && sx >= 0 && sx < width;
    return Loaded{inside ? static_cast<acc_t>(base[sy * row_stride + sx * col_stride]) : acc_t(0),
                  base != nullptr ? p * plane_stride + row * pitch + col : -1};
  };
  const auto store = [&](int, const Loaded& loaded) {
    if (loaded.at >= 0) dst[loaded.at] = loaded.value;
  };
  if (channels_fastest) {
    GridWalk<int, 3> at(tid, threads, {0, cols, planes});  // (row, col, slot)
    stage_in_batches<2 * kStageVectors>(
        rows * cols * planes, tid, threads, at,
        [&](const GridWalk<int, 3>& pos, bool in_range) { return load(pos.at[2], pos.at[0], pos.at[1], in_range); },
        store);
  } else {
    GridWalk<int, 3> at(tid, threads, {0, rows, cols});  // (slot, row, col)
    stage_in_batches<2 * kStageVectors>(
        planes * rows * cols, tid, threads, at,
        [&](const GridWalk<int, 3>& pos, bool in_range) { return load(pos.at[0], pos.at[1], pos.at[2], in_range); },
        store);
  }
}

// One step along a window row: the taps step * kBlockCols + [0, taps) of the output rows
// first_row to last_row (every row when kEveryRow), from input columns step * kBlockCols +
// [0, 2 * kBlockCols) in `head` and `next`. Output row i takes its weights at `taps - i * weight_pitch`.
template <typename acc_t, bool kEveryRow, bool kWholeStep>
__device__ __forceinline__ void accumulate_large_filter_step(acc_t (&acc)[kBlockRows][kBlockCols],
                                                             const acc_t (&head)[kBlockCols],
                                                             const acc_t (&next)[kBlockCols], const acc_t* taps,
                                                             int weight_pitch, int step_taps, int first_row,
                                                             int last_row) {
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    if (kEveryRow || (i >= first_row && i <= last_row)) {
      acc_t w[kBlockCols];
      load_shared_vectors<acc_t, kBlockCols / kVector16<acc_t>>(taps - i * weight_pitch, w);
#pragma unroll
      for (int k = 0; k < kBlockCols; ++k) {
        if (kWholeStep || k < step_taps) {
#pragma unroll
          for (int j = 0; j < kBlockCols; ++j) {
            acc[i][j] += (j + k < kBlockCols ? head[j + k] : next[j + k - kBlockCols]) * w[k];
          }
        }
      }
    }
  }
}

// Adds one input row of a thread's window (`input`: its first column) into the output rows it
// feeds, first_row to last_row (every row when kEveryRow): output row i through kernel row
// (input row - i), whose weights start at `taps - i * weight_pitch`.
template <typename acc_t, bool kEveryRow>
__device__ __forceinline__ void accumulate_large_filter_row(acc_t (&acc)[kBlockRows][kBlockCols], const acc_t* input,
                                                            const acc_t* taps, int weight_pitch, int kernel_w,
                                                            int first_row, int last_row) {
  constexpr int kStepVectors = kBlockCols / kVector16<acc_t>;
  const int whole_steps = kernel_w / kBlockCols;
  acc_t head[kBlockCols], next[kBlockCols];
  load_shared_vectors<acc_t, kStepVectors>(input, head);
  for (int step = 0; step < whole_steps; ++step) {
    load_shared_vectors<acc_t, kStepVectors>(input + (step + 1) * kBlockCols, next);
    accumulate_large_filter_step<acc_t, kEveryRow, true>(acc, head, next, taps + step * kBlockCols, weight_pitch,
                                                         kBlockCols, first_row, last_row);
#pragma unroll
    for (int j = 0; j < kBlockCols; ++j) head[j] = next[j];
  }
  const int rest = kernel_w - whole_steps * kBlockCols;
  if (rest > 0) {
    load_shared_vectors<acc_t, kStepVectors>(input + (whole_steps + 1) * kBlockCols, next);
    accumulate_large_filter_step<acc_t, kEveryRow, false>(acc, head, next, taps + whole_steps * kBlockCols,
                                                          weight_pitch, rest, first_row, last_row);
  }
}

// A thread's share of its window, the input rows first_input_row, first_input_row + input_row_step,
// ...: input row r (`window + r * pitch`) feeds output row i through kernel row r - i, for the
// kernel_h x kernel_w filter at `taps` (rows weight_pitch apart).
template <typename acc_t>
__device__ __forceinline__ void accumulate_large_filter_window(acc_t (&acc)[kBlockRows][kBlockCols], const acc_t* window,
                                                               int pitch, const acc_t* taps, int weight_pitch,
                                                               int kernel_h, int kernel_w, int first_input_row,
                                                               int input_row_step) {
  for (int r = first_input_row; r < kBlockRows + kernel_h - 1; r += input_row_step) {
    const int first_row = r < kernel_h ? 0 : r - kernel_h + 1;  // the output rows input row r feeds
    const int last_row = smaller(kBlockRows - 1, r);
    const acc_t* row_taps = taps + r * weight_pitch;
    if (first_row == 0 && last_row == kBlockRows - 1) {
      accumulate_large_filter_row<acc_t, true>(acc, window + r * pitch, row_taps, weight_pitch, kernel_w, 0,
                                               kBlockRows - 1);
    } else {
      accumulate_large_filter_row<acc_t, false>(acc, window + r * pitch, row_taps, weight_pitch, kernel_w, first_row,
                                                last_row);
    }
  }
}

// The shared memory of a large-filter block of `groups` thread groups of `threads` threads each:
// its tile (`tile_bytes`), which add_group_sums then reuses for the sums of every group but the first.
template <typename acc_t>
size_t large_filter_shared_bytes(size_t tile_bytes, int groups, int threads) {
  return std::max(tile_bytes, size_t(groups - 1) * kBlockRows * kBlockCols * threads * sizeof(acc_t));
}

// Adds the sums of groups 1.. into group 0's, in group order (the same sums on every run), through
// shared memory at `sums` (large_filter_shared_bytes), which no thread may still be reading.
template <typename acc_t, typename index_t>
__device__ __forceinline__ void add_group_sums(acc_t (&acc)[kBlockRows][kBlockCols], acc_t* sums,
                                               const RegisterTileThread<index_t>& place, int groups) {
  const int group_threads = blockDim.x * blockDim.y * place.rows;
  const int slot = (place.row * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  constexpr int kValues = kBlockRows * kBlockCols;
  __syncthreads();  // every group is done with the tiles
  if (place.group > 0) {
    acc_t* mine = sums + (place.group - 1) * kValues * group_threads + slot;
#pragma unroll
    for (int v = 0; v < kValues; ++v) mine[v * group_threads] = acc[v / kBlockCols][v % kBlockCols];
  }
  __syncthreads();
  if (place.group > 0) return;
  for (int other = 1; other < groups; ++other) {
    const acc_t* theirs = sums + (other - 1) * kValues * group_threads + slot;
#pragma unroll
    for (int v = 0; v < kValues; ++v) acc[v / kBlockCols][v % kBlockCols] += theirs[v * group_threads];
  }
}

// Three blocks an SM in float and the half types (tile_min_blocks): it takes 72-80 registers, sm_90.
template <typename scalar_t, typename index_t, bool kBackward>
__global__ void __launch_bounds__(kThreads, tile_min_blocks<scalar_t>()) large_filter_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const RegisterTile t,
    const Strides4 src_strides,
    const Strides4 dst_strides) {
  using acc_t = at::acc_type<scalar_t, true>;
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const tiles = reinterpret_cast<acc_t*>(shared_bytes);
  const int weight_pitch = large_filter_weight_pitch(g.kernel_w);
  const int weight_values = g.kernel_h * weight_pitch;
  acc_t* const taps = tiles + threadIdx.x * t.plane_stride;
  const acc_t* const tile = taps + weight_values;

  const auto place = register_tile_thread<index_t>(g, t.groups);
  const index_t dst_channels = g.dst_channels;
  const int filter_taps = g.kernel_h * g.kernel_w;

  acc_t acc[kBlockRows][kBlockCols];  // started after the first staging, so that it is not live there

  const int group = kBackward ? g.multiplier : 1;
  for (int member = 0; member < group; ++member) {
    __syncthreads();  // no thread still reads the previous member's tiles or weights
    stage_planes<scalar_t, index_t>(
        tiles + weight_values, t.plane_stride, t.pitch, t.tile_in_h, t.tile_in_w, place.y0 - g.pad_h, place.x0 - g.pad_w, g.src_h,
        g.src_w, src_strides, src_strides.c == 1, [&](int p) -> const scalar_t* {
          const index_t slot_plane = place.first_plane + p;
          if (slot_plane >= place.plane_count) return nullptr;  // the last block's spare planes
          const index_t slot_c = slot_plane % dst_channels;
          const index_t src_c = kBackward ? slot_c * g.multiplier + member : slot_c / g.multiplier;
          return src + slot_plane / dst_channels * static_cast<index_t>(src_strides.n) +
                 src_c * static_cast<index_t>(src_strides.c);
        });
    if (place.live) {
      const index_t weight_row = kBackward ? place.c * g.multiplier + member : place.c;
      for (int i = place.plane_tid; i < filter_taps; i += place.plane_threads) {
        // Backward-input correlates with the kernel flipped in both directions.
        const int tap = kBackward ? filter_taps - 1 - i : i;
        taps[i / g.kernel_w * weight_pitch + i % g.kernel_w] =
            static_cast<acc_t>(weight[weight_row * filter_taps + tap]);
      }
    }
    __syncthreads();

    if (member == 0) start_block<kBackward>(acc, place.group == 0 ? bias : nullptr, place);  // groups' sums are added
    accumulate_large_filter_window(acc, tile + place.row * kBlockRows * t.pitch + threadIdx.y * kBlockCols, t.pitch,
                                   taps, weight_pitch, g.kernel_h, g.kernel_w, place.group, t.groups);
  }
  if (t.groups > 1) add_group_sums(acc, tiles, place, t.groups);

  if (!place.live || place.group != 0) return;
  const int x = place.x0 + threadIdx.y * kBlockCols;
  const index_t dst_col_stride = dst_strides.w;
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    const int y = place.y0 + place.row * kBlockRows + i;
    if (y >= g.dst_h || x >= g.dst_w) continue;
    scalar_t* out = dst + place.n * static_cast<index_t>(dst_strides.n) + place.c * static_cast<index_t>(dst_strides.c) +
                    y * static_cast<index_t>(dst_strides.h) + x * dst_col_stride;
    store_block_row<scalar_t, index_t>(out, acc[i], g.dst_w - x, dst_col_stride, t.row_access);
  }
}

// ---------------------------------------------------------------------------
// Large-filter weight gradient (NCHW or channels_last): the large-filter kernel with the roles
// exchanged. For one image and channel, grad_weight[a][b] = sum over (y, x) of
// grad_output[y][x] * padded input[y + a][x + b]: a correlation whose output is the filter's
// taps, whose filter is the grad_output plane and whose window is the input. A thread computes
// a kBlockRows x kBlockCols block of taps; a block's plane slots are consecutive channels, each
// summing its own channel's taps over the items of its slice (an item: a band of grad_output
// rows of one batch entry, the whole plane where it fits), so no sums cross slots. Each slice
// writes its sums to `partial`; grad_weight_finish_kernel adds the slices in order. A slot's
// threads also share out the sum of its staged grad_output bands, the bias gradient's, which
// goes to `partial_bias` unless that is null.

struct LargeFilterGradWeightWork {
  int band_rows;            // grad_output rows an item covers (the last band of a plane may have fewer)
  int64_t bands;            // items of one batch entry
  int64_t items_per_slice;  // items are (batch entry, band), batch entry major
};

template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads, 2) grad_weight_large_filter_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const RegisterTile t,
    const LargeFilterGradWeightWork work,
    const Strides4 go_strides,
    const Strides4 in_strides) {
  using acc_t = at::acc_type<scalar_t, true>;
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const regions = reinterpret_cast<acc_t*>(shared_bytes);
  const int go_pitch = large_filter_weight_pitch(static_cast<int>(g.dst_w));
  const int go_values = work.band_rows * go_pitch;
  const index_t dst_channels = g.dst_channels;
  const index_t first_c = static_cast<index_t>(blockIdx.x) * blockDim.x;
  const index_t c = first_c + threadIdx.x;
  const index_t items = static_cast<index_t>(g.batch) * work.bands;
  const index_t item_begin = static_cast<index_t>(blockIdx.y) * work.items_per_slice;
  const index_t item_end = smaller(items, item_begin + static_cast<index_t>(work.items_per_slice));
  auto channel_plane = [&](const scalar_t* data, const Strides4& s, index_t n, int p, bool input_channel) -> const scalar_t* {
    const index_t slot_c = first_c + p;
    if (slot_c >= dst_channels) return nullptr;  // the last block's spare slots
    const index_t plane_c = input_channel ? slot_c / g.multiplier : slot_c;
    return data + n * static_cast<index_t>(s.n) + plane_c * static_cast<index_t>(s.c);
  };

  acc_t acc[kBlockRows][kBlockCols] = {};
  const int slot_threads = blockDim.y * blockDim.z;
  const int slot_tid = threadIdx.z * blockDim.y + threadIdx.y;
  acc_t grad_output_sum = acc_t(0);  // of the staged values slot_tid, slot_tid + slot_threads, ...
  for (index_t item = item_begin; item < item_end; ++item) {
    const index_t n = item / work.bands;
    const int y0 = static_cast<int>(item % work.bands) * work.band_rows;
    const int rows = static_cast<int>(smaller(static_cast<index_t>(work.band_rows), static_cast<index_t>(g.dst_h) - y0));
    __syncthreads();  // no thread still reads the previous item's planes
    stage_planes<scalar_t, index_t>(regions, t.plane_stride, go_pitch, rows, static_cast<int>(g.dst_w), y0, 0, g.dst_h,
                                    g.dst_w, go_strides, go_strides.c == 1,
                                    [&](int p) { return channel_plane(grad_output, go_strides, n, p, false); });
    stage_planes<scalar_t, index_t>(regions + go_values, t.plane_stride, t.pitch, rows + t.tile_in_h - work.band_rows,
                                    t.tile_in_w, y0 - g.pad_h, -g.pad_w, g.src_h, g.src_w, in_strides,
                                    in_strides.c == 1,
                                    [&](int p) { return channel_plane(input, in_strides, n, p, true); });
    __syncthreads();
    const acc_t* plane = regions + threadIdx.x * t.plane_stride;
    accumulate_large_filter_window(acc, plane + go_values + threadIdx.z * kBlockRows * t.pitch + threadIdx.y * kBlockCols,
                                   t.pitch, plane, go_pitch, rows, static_cast<int>(g.dst_w), 0, 1);
    if (partial_bias != nullptr) {
      const int dst_w = static_cast<int>(g.dst_w);
      GridWalk<int, 2> at(slot_tid, slot_threads, {0, dst_w});  // (band row, column)
      for (int i = slot_tid; i < rows * dst_w; i += slot_threads, at.advance()) {
        grad_output_sum += plane[at.at[0] * go_pitch + at.at[1]];
      }
    }
  }

  if (partial_bias != nullptr) {  // a slot's threads' sums, added in thread order
    acc_t* const slot_sums = regions + threadIdx.x * t.plane_stride;
    __syncthreads();  // no thread still reads the planes
    slot_sums[slot_tid] = grad_output_sum;
    __syncthreads();
    if (slot_tid == 0 && c < dst_channels) {
      acc_t total = acc_t(0);
      for (int i = 0; i < slot_threads; ++i) total += slot_sums[i];
      partial_bias[static_cast<index_t>(blockIdx.y) * dst_channels + c] = total;
    }
  }
  if (c >= dst_channels) return;
  const int taps = g.kernel_h * g.kernel_w;
  acc_t* out = partial + (static_cast<index_t>(blockIdx.y) * dst_channels + c) * taps;
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    const int a = threadIdx.z * kBlockRows + i;
#pragma unroll
    for (int j = 0; j < kBlockCols; ++j) {
      const int b = threadIdx.y * kBlockCols + j;
      if (a < g.kernel_h && b < g.kernel_w) out[a * g.kernel_w + b] = acc[i][j];
    }
  }
}

// ---------------------------------------------------------------------------
// Tiled kernel (channels_last, multiplier 1). Channels move as 16-byte vectors of
// kVector16<scalar_t> values. Block: (vectors, kThreads / vectors) threads;
// threadIdx.x picks the block's channel vector, threadIdx.y a pixel lane, and lane p
// computes output row y0 + p / lanes_w, columns x0 + p % lanes_w + j * lanes_w for
// j < cols_per_thread. The input tile (with halo) and the block's weights are staged in
// shared memory as whole vectors, so every global load and store is 16 bytes wide.

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

// The filters of a block's `vectors` channel vectors from channel c0, in shared memory as
// [tap][vector][kVector16<scalar_t> channels] values of staged_t (scalar_t, or acc_t where each
// is used once a thread and converting it there would cost as much as its multiply-add), loaded
// by the block's `threads` threads together in 16-byte pieces; the taps in reverse order when
// `flip`, and zero for channels past the last.
template <typename staged_t, typename scalar_t, typename index_t>
__device__ __forceinline__ void stage_weight_vectors(staged_t* taps, const scalar_t* weight, index_t c0,
                                                     index_t channels, int taps_count, int vectors, int tid,
                                                     int threads, bool flip) {
  constexpr int V = kVector16<scalar_t>;
  constexpr int kPiece = kVector16<staged_t>;  // staged values in 16 bytes
  GridWalk<int, 2> tap_at(tid, threads, {0, vectors});  // (tap, vector)
  for (int i = tid; i < taps_count * vectors; i += threads, tap_at.advance()) {
    const int vec = tap_at.at[1];
    const int tap_slot = tap_at.at[0];
    const int weight_tap = flip ? taps_count - 1 - tap_slot : tap_slot;
#pragma unroll
    for (int piece = 0; piece < V / kPiece; ++piece) {
      Vector16<staged_t> w;
#pragma unroll
      for (int k = 0; k < kPiece; ++k) {
        const index_t c = c0 + vec * V + piece * kPiece + k;
        w.v[k] = c < channels ? static_cast<staged_t>(weight[c * taps_count + weight_tap]) : staged_t(0);
      }
      reinterpret_cast<Vector16<staged_t>*>(taps)[i * (V / kPiece) + piece] = w;
    }
  }
}

struct ChannelsLastTile {
  int lanes_w;          // pixel lanes along a tile row; blockDim.y / lanes_w rows of lanes
  int cols_per_thread;  // (tiled_channels_last_kernel; the register-tiled kernel's lanes have one)
  int tile_in_h, tile_in_w;
  int tiles_w;          // blockIdx.x = tile row * tiles_w + tile column
};

// A channels_last block's input tile, [tile row][tile column][vector] 16-byte vectors from
// src_image (its image at the block's first channel) starting at (src_y0, src_x0), zeros for
// padding and for the vectors past the last channel, staged by the block's `threads` threads:
// consecutive threads read consecutive vectors of one pixel, each pixel's channels in one piece.
template <typename scalar_t, typename index_t>
__device__ __forceinline__ void stage_channels_last_tile(Vector16<scalar_t>* tile, const scalar_t* src_image,
                                                         const ChannelsLastTile& t, int src_y0, int src_x0,
                                                         int live_vectors, index_t src_h, index_t src_w,
                                                         index_t channels, int tid, int threads) {
  constexpr int V = kVector16<scalar_t>;
  const int vectors = blockDim.x;
  GridWalk<int, 3> at(tid, threads, {0, t.tile_in_w, vectors});  // (tile row, tile column, vector)
  stage_in_batches<kStageVectors>(
      t.tile_in_h * t.tile_in_w * vectors, tid, threads, at,
      [&](const GridWalk<int, 3>& pos, bool in_range) {
        const int vec = pos.at[2];
        const int sy = src_y0 + pos.at[0];
        const int sx = src_x0 + pos.at[1];
        return load_vector_or_zero(in_range && vec < live_vectors && sy >= 0 && sy < src_h && sx >= 0 && sx < src_w,
                                   src_image + (sy * src_w + sx) * channels + vec * V);
      },
      [&](int i, const Vector16<scalar_t>& loaded) { tile[i] = loaded; });
}

// Bounded at 4 blocks an SM (64 registers), double at 2: left to itself, ptxas held the float and
// double kernels to 48 registers on sm_80 and spilled once the staging walks carried their
// coordinates, and double's forward still spilled at 64.
template <typename scalar_t, typename index_t, bool kBackward>
__global__ void __launch_bounds__(kThreads, sizeof(scalar_t) == 8 ? 2 : 4) tiled_channels_last_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const ChannelsLastTile t) {
  using acc_t = at::acc_type<scalar_t, true>;
  using Vec = Vector16<scalar_t>;
  constexpr int V = kVector16<scalar_t>;
  DWCONV_SHARED_BYTES(shared_bytes);
  const int vectors = blockDim.x;
  const int tile_pixels = t.tile_in_h * t.tile_in_w;
  Vec* tile = reinterpret_cast<Vec*>(shared_bytes);  // [tile pixel][vector]
  Vec* taps = tile + tile_pixels * vectors;          // [tap][vector]

  const int tid = threadIdx.y * vectors + threadIdx.x;
  const int taps_count = g.kernel_h * g.kernel_w;
  const index_t channels = g.dst_channels;
  const index_t c0 = static_cast<index_t>(blockIdx.y) * vectors * V;
  const int live_vectors = static_cast<int>(smaller<index_t>(vectors, (channels - c0) / V));
  const index_t n = blockIdx.z;
  const int rows = blockDim.y / t.lanes_w;
  const int y0 = (blockIdx.x / t.tiles_w) * rows;
  const int x0 = (blockIdx.x % t.tiles_w) * t.lanes_w * t.cols_per_thread;
  const int src_y0 = y0 * g.stride_h - g.pad_h;
  const int src_x0 = x0 * g.stride_w - g.pad_w;
  const index_t src_h = g.src_h, src_w = g.src_w;

  stage_channels_last_tile(tile, src + n * src_h * src_w * channels + c0, t, src_y0, src_x0, live_vectors, src_h, src_w,
                           channels, tid, kThreads);
  // Backward-input correlates with the kernel flipped in both directions.
  stage_weight_vectors(reinterpret_cast<scalar_t*>(taps), weight, c0, channels, taps_count, vectors, tid, kThreads,
                       kBackward);
  __syncthreads();

  const int vec = threadIdx.x;
  const int ty = threadIdx.y / t.lanes_w;
  const int tx = threadIdx.y % t.lanes_w;
  acc_t acc[kMaxColsPerThread][V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const index_t c = c0 + vec * V + k;
    const acc_t start = (!kBackward && bias != nullptr && c < channels) ? static_cast<acc_t>(bias[c]) : acc_t(0);
#pragma unroll
    for (int j = 0; j < kMaxColsPerThread; ++j) acc[j][k] = start;
  }
  const int col_step = t.lanes_w * g.stride_w * vectors;  // between a thread's columns, in tile vectors
  for (int kh = 0; kh < g.kernel_h; ++kh) {
    const Vec* row = tile + (ty * g.stride_h + kh * g.dilation_h) * t.tile_in_w * vectors + vec;
    for (int kw = 0; kw < g.kernel_w; ++kw) {
      const Vec w = taps[(kh * g.kernel_w + kw) * vectors + vec];
      acc_t wf[V];
#pragma unroll
      for (int k = 0; k < V; ++k) wf[k] = static_cast<acc_t>(w.v[k]);
      const Vec* col = row + (tx * g.stride_w + kw * g.dilation_w) * vectors;
#pragma unroll
      for (int j = 0; j < kMaxColsPerThread; ++j) {
        if (j < t.cols_per_thread) {
          const Vec x = col[j * col_step];
#pragma unroll
          for (int k = 0; k < V; ++k) acc[j][k] += static_cast<acc_t>(x.v[k]) * wf[k];
        }
      }
    }
  }

  const int y = y0 + ty;
  if (y < g.dst_h && vec < live_vectors) {
    const index_t dst_h = g.dst_h, dst_w = g.dst_w;
    scalar_t* dst_row = dst + ((n * dst_h + y) * dst_w) * channels + c0 + vec * V;
#pragma unroll
    for (int j = 0; j < kMaxColsPerThread; ++j) {
      const int x = x0 + tx + j * t.lanes_w;
      if (j < t.cols_per_thread && x < g.dst_w) {
        Vec out;
#pragma unroll
        for (int k = 0; k < V; ++k) out.v[k] = static_cast<scalar_t>(acc[j][k]);
        store_vector(dst_row + x * channels, out);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Register-tiled kernel (channels_last, multiplier 1) for the register-tiled filters (square 3x3,
// 5x5, 7x7 at stride 1; 3x3 and 5x5 at stride 2; dilation 1): the forward pass and the stride-1
// backward-input pass. The tile, its staging and the block's channel vectors are
// tiled_channels_last_kernel's; what changes is a thread's work. Lane p of the block's
// (blockDim.y / lanes_w) x lanes_w pixel lanes computes kBlockRows output rows of one column,
// y0 + (p / lanes_w) * kBlockRows + i for i < kBlockRows, column x0 + p % lanes_w, for its channel
// vector. It walks its window a column at a time: the column's kKernel weights (staged in acc_t,
// converted once a block) in registers, each input vector of the column read from shared memory
// and converted once and applied to every output row it feeds. For 7x7 in bf16 that is 17.5 input
// and 24.5 weight loads from shared memory a thread's output vector instead of 49 and 12, and 17.5
// conversions an output value instead of 61: the conversions and shared loads, not the
// multiply-adds, bounded tiled_channels_last_kernel at k >= 5 (notes/performance.md, v15).
template <typename scalar_t, typename index_t, bool kBackward, int kKernel, int kStride>
__global__ void __launch_bounds__(kThreads, 2) channels_last_register_tiled_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const ChannelsLastTile t) {
  using acc_t = at::acc_type<scalar_t, true>;
  using Vec = Vector16<scalar_t>;
  constexpr int V = kVector16<scalar_t>;
  constexpr int kWindowRows = (kBlockRows - 1) * kStride + kKernel;
  static_assert(!kBackward || kStride == 1, "backward-input is a stride-1 correlation");
  DWCONV_SHARED_BYTES(shared_bytes);
  const int vectors = blockDim.x;
  const int threads = vectors * blockDim.y;
  Vec* tile = reinterpret_cast<Vec*>(shared_bytes);                                 // [tile pixel][vector]
  acc_t* taps = reinterpret_cast<acc_t*>(tile + t.tile_in_h * t.tile_in_w * vectors);  // [tap][vector][V]

  const int tid = threadIdx.y * vectors + threadIdx.x;
  const index_t channels = g.dst_channels;
  const index_t c0 = static_cast<index_t>(blockIdx.y) * vectors * V;
  const int live_vectors = static_cast<int>(smaller<index_t>(vectors, (channels - c0) / V));
  const index_t n = blockIdx.z;
  const int lane_rows = blockDim.y / t.lanes_w;
  const int y0 = static_cast<int>(blockIdx.x / t.tiles_w) * lane_rows * kBlockRows;
  const int x0 = static_cast<int>(blockIdx.x % t.tiles_w) * t.lanes_w;
  const index_t src_h = g.src_h, src_w = g.src_w;
  stage_channels_last_tile(tile, src + n * src_h * src_w * channels + c0, t, y0 * kStride - g.pad_h,
                           x0 * kStride - g.pad_w, live_vectors, src_h, src_w, channels, tid, threads);
  // Backward-input correlates with the kernel flipped in both directions.
  stage_weight_vectors(taps, weight, c0, channels, kKernel * kKernel, vectors, tid, threads, kBackward);
  __syncthreads();  // the tile and the weights staged by every thread

  const int vec = threadIdx.x;
  const int ty = threadIdx.y / t.lanes_w;
  const int tx = threadIdx.y % t.lanes_w;
  const int y = y0 + ty * kBlockRows;
  const int x = x0 + tx;
  // Idle vectors of a part-filled group and lanes past the plane's edge: no barrier follows.
  if (vec >= live_vectors || y >= g.dst_h || x >= g.dst_w) return;

  acc_t acc[kBlockRows][V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const acc_t start = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[c0 + vec * V + k]) : acc_t(0);
#pragma unroll
    for (int i = 0; i < kBlockRows; ++i) acc[i][k] = start;
  }
  const int row_step = t.tile_in_w * vectors;  // between tile rows, in vectors
  const Vec* window = tile + (ty * kBlockRows * kStride * t.tile_in_w + tx * kStride) * vectors + vec;
#pragma unroll
  for (int kw = 0; kw < kKernel; ++kw) {
    acc_t w[kKernel][V];
#pragma unroll
    for (int kh = 0; kh < kKernel; ++kh) {
      load_shared_vectors<acc_t, V / kVector16<acc_t>>(taps + ((kh * kKernel + kw) * vectors + vec) * V, w[kh]);
    }
#pragma unroll
    for (int r = 0; r < kWindowRows; ++r) {
      const Vec loaded = window[r * row_step + kw * vectors];
      acc_t in[V];
#pragma unroll
      for (int k = 0; k < V; ++k) in[k] = static_cast<acc_t>(loaded.v[k]);
#pragma unroll
      for (int row = 0; row < kBlockRows; ++row) {
        const int kh = r - row * kStride;
        if (kh >= 0 && kh < kKernel) {
#pragma unroll
          for (int k = 0; k < V; ++k) acc[row][k] += in[k] * w[kh][k];
        }
      }
    }
  }

  const index_t dst_h = g.dst_h, dst_w = g.dst_w;
  scalar_t* dst_column = dst + ((n * dst_h + y) * dst_w + x) * channels + c0 + vec * V;
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    if (y + i < g.dst_h) {
      Vec out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = static_cast<scalar_t>(acc[i][k]);
      store_vector(dst_column + i * dst_w * channels, out);
    }
  }
}

// ---------------------------------------------------------------------------
// Direct kernel: one dst element per thread, any strides. Threads walk dst in memory order by
// the grid's stride with carries, and backward-input finds the taps that land on a stride
// point by stepping a quotient and remainder, so no loop divides.

// t = q * stride + r with 0 <= r < stride, stepped down by `step` = step_q * stride + step_r.
template <typename index_t>
struct StrideDivision {
  index_t q, r;
  __device__ __forceinline__ void step_down(index_t step_q, index_t step_r, index_t stride) {
    q -= step_q;
    r -= step_r;
    if (r < 0) {
      r += stride;
      --q;
    }
  }
};

template <typename scalar_t, typename index_t, bool kBackward>
__global__ void __launch_bounds__(kThreads) direct_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const Strides4 src_strides,
    const Strides4 dst_strides,
    const bool channels_fastest,
    const index_t total) {
  using acc_t = at::acc_type<scalar_t, true>;
  const int taps_count = g.kernel_h * g.kernel_w;
  // Geometry and strides in index_t, so the 32-bit path does 32-bit math only.
  const index_t dst_c = g.dst_channels, dst_h = g.dst_h, dst_w = g.dst_w;
  const index_t src_h = g.src_h, src_w = g.src_w;
  const index_t sn = src_strides.n, sc = src_strides.c, sh = src_strides.h, sw = src_strides.w;
  const index_t dn = dst_strides.n, dc = dst_strides.c, dh = dst_strides.h, dw = dst_strides.w;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const index_t grid_stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  // (n, y, x, c) when channels are fastest in memory, else (n, c, y, x).
  const index_t channels_fastest_extents[4] = {0, dst_h, dst_w, dst_c};
  const index_t planes_fastest_extents[4] = {0, dst_c, dst_h, dst_w};
  GridWalk<index_t, 4> at = channels_fastest ? GridWalk<index_t, 4>(first, grid_stride, channels_fastest_extents)
                                             : GridWalk<index_t, 4>(first, grid_stride, planes_fastest_extents);
  // Backward-input: a dilation step as a multiple of the stride and a remainder.
  const index_t stride_h = g.stride_h, stride_w = g.stride_w;
  const index_t dil_q_h = g.dilation_h / g.stride_h, dil_r_h = g.dilation_h % g.stride_h;
  const index_t dil_q_w = g.dilation_w / g.stride_w, dil_r_w = g.dilation_w % g.stride_w;
  for (index_t i = first; i < total; i += grid_stride, at.advance()) {
    const index_t n = at.at[0];
    const index_t c = channels_fastest ? at.at[3] : at.at[1];
    const index_t y = channels_fastest ? at.at[1] : at.at[2];
    const index_t x = channels_fastest ? at.at[2] : at.at[3];
    acc_t acc = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[c]) : acc_t(0);
    if (!kBackward) {
      const index_t src_c = c / g.multiplier;
      const scalar_t* src_plane = src + n * sn + src_c * sc;
      const scalar_t* w = weight + c * taps_count;
      for (int kh = 0; kh < g.kernel_h; ++kh) {
        const index_t sy = y * g.stride_h - g.pad_h + kh * g.dilation_h;
        if (sy < 0 || sy >= src_h) continue;
        for (int kw = 0; kw < g.kernel_w; ++kw) {
          const index_t sx = x * g.stride_w - g.pad_w + kw * g.dilation_w;
          if (sx < 0 || sx >= src_w) continue;
          acc += static_cast<acc_t>(src_plane[sy * sh + sx * sw]) *
                 static_cast<acc_t>(w[kh * g.kernel_w + kw]);
        }
      }
    } else {
      // grad_input[y, x] gathers grad_output[sy, sx] where y = sy * stride - pad + kh * dilation:
      // tap kh takes row (y + pad - kh * dilation) / stride where that divides exactly.
      const StrideDivision<index_t> row0{(y + g.pad_h) / stride_h, (y + g.pad_h) % stride_h};
      const StrideDivision<index_t> col0{(x + g.pad_w) / stride_w, (x + g.pad_w) % stride_w};
      for (int member = 0; member < g.multiplier; ++member) {
        const index_t src_c = c * g.multiplier + member;
        const scalar_t* src_plane = src + n * sn + src_c * sc;
        const scalar_t* w = weight + src_c * taps_count;
        StrideDivision<index_t> row = row0;
        for (int kh = 0; kh < g.kernel_h; ++kh, row.step_down(dil_q_h, dil_r_h, stride_h)) {
          if (row.r != 0 || row.q < 0 || row.q >= src_h) continue;
          StrideDivision<index_t> col = col0;
          for (int kw = 0; kw < g.kernel_w; ++kw, col.step_down(dil_q_w, dil_r_w, stride_w)) {
            if (col.r != 0 || col.q < 0 || col.q >= src_w) continue;
            acc += static_cast<acc_t>(src_plane[row.q * sh + col.q * sw]) *
                   static_cast<acc_t>(w[kh * g.kernel_w + kw]);
          }
        }
      }
    }
    dst[n * dn + c * dc + y * dh + x * dw] = static_cast<scalar_t>(acc);
  }
}

// ---------------------------------------------------------------------------
// Weight gradient. grad_weight[c, kh, kw] = sum over n, y, x of
//   grad_output[n, c, y, x] * input[n, c / multiplier, y*s - p + kh*d, x*s - p + kw*d].
// g here is the forward geometry (src = input, dst = grad_output). Each block
// writes its slice's sums to `partial` [slices][channels][taps].
// A pass holds kSlots taps' sums in registers (kSlots: 4, 9 or 16, the fewest that hold the
// filter, or 16 a pass; 9 at most with 64-bit indices, whose 16-slot loop would spill). Its
// taps' input offsets are worked out once, and positions are walked with carries, so the loop
// over positions divides nothing; a tap's input is loaded whether or
// not it falls in the plane (from the plane's first element when not), which lets the loads of
// all slots be in flight together, and only the multiply-add is skipped for taps outside it.

template <int kSlots>
struct PassTaps {
  int count;  // taps in this pass; the slots past it repeat its last tap
  int dy[kSlots], dx[kSlots];  // input row and column offsets from an output position's (y*s, x*s)
};

inline int grad_weight_tap_slots(int taps_count, bool index64) {
  return taps_count <= 4 ? 4 : taps_count <= 9 || index64 ? 9 : kTapsPerPass;
}

template <int kSlots>
__host__ __device__ inline PassTaps<kSlots> pass_taps(const PassGeometry& g, int tap0) {
  const int taps_count = g.kernel_h * g.kernel_w;
  PassTaps<kSlots> taps;
  taps.count = smaller(kSlots, taps_count - tap0);
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    const int tap = smaller(tap0 + t, taps_count - 1);
    taps.dy[t] = tap / g.kernel_w * g.dilation_h - g.pad_h;
    taps.dx[t] = tap % g.kernel_w * g.dilation_w - g.pad_w;
  }
  return taps;
}

// Adds grad_output value `go` times each pass tap's input for output position (y, x) into
// acc[0, kSlots) (slots past them are the caller's); `pixel` is the input plane's element (0, 0)
// and (row_stride, col_stride) its strides.
template <typename scalar_t, typename index_t, typename acc_t, int kSlots, int kSums>
__device__ __forceinline__ void accumulate_pass_taps(acc_t (&acc)[kSums], const PassTaps<kSlots>& taps,
                                                     const PassGeometry& g, acc_t go, const scalar_t* pixel,
                                                     index_t row_stride, index_t col_stride, index_t y, index_t x) {
  const index_t src_h = g.src_h, src_w = g.src_w;  // compared in index_t: 32-bit math on the 32-bit path
  static_assert(kSums >= kSlots, "a sum for every slot");
  const index_t sy0 = y * g.stride_h, sx0 = x * g.stride_w;
  scalar_t value[kSlots];
  bool inside[kSlots];
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    const index_t sy = sy0 + taps.dy[t];
    const index_t sx = sx0 + taps.dx[t];
    inside[t] = t < taps.count && sy >= 0 && sy < src_h && sx >= 0 && sx < src_w;
    value[t] = pixel[inside[t] ? sy * row_stride + sx * col_stride : index_t(0)];
  }
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    if (inside[t]) acc[t] += go * static_cast<acc_t>(value[t]);
  }
}

// The block's kThreads per-thread values of each slot (thread tid's in acc), added in a fixed
// tree through `sums`: the totals end in sums[t][0], read after the block's last barrier here.
template <typename acc_t, int kSlots>
__device__ __forceinline__ void sum_over_block(acc_t (&sums)[kSlots][kThreads], const acc_t (&acc)[kSlots], int tid) {
#pragma unroll
  for (int t = 0; t < kSlots; ++t) sums[t][tid] = acc[t];
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (tid < half) {
#pragma unroll
      for (int t = 0; t < kSlots; ++t) sums[t][tid] += sums[t][tid + half];
    }
    __syncthreads();
  }
}

// Sum slot kSlots of the general weight-gradient kernels: grad_output's own sum, the bias
// gradient's share of the slice, taken in every pass over the taps and written after the first.
template <typename scalar_t, typename index_t, int kSlots>
__global__ void __launch_bounds__(kThreads, 2) grad_weight_nchw_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const int64_t rows_per_slice) {
  using acc_t = at::acc_type<scalar_t, true>;
  __shared__ acc_t sums[kSlots + 1][kThreads];
  const int tid = threadIdx.x;
  const index_t c = blockIdx.x;
  const index_t slice = blockIdx.y;
  const index_t src_c = c / g.multiplier;
  const int taps_count = g.kernel_h * g.kernel_w;
  const index_t rows = static_cast<index_t>(g.batch) * g.dst_h;  // (n, y) pairs
  const index_t row_begin = slice * rows_per_slice;
  const index_t row_end = smaller(rows, row_begin + static_cast<index_t>(rows_per_slice));
  const index_t positions = row_begin < row_end ? (row_end - row_begin) * g.dst_w : 0;
  const index_t src_h = g.src_h, src_w = g.src_w, dst_h = g.dst_h, dst_w = g.dst_w;
  const index_t src_channels = g.src_channels, dst_channels = g.dst_channels;
  const index_t src_plane_size = src_h * src_w;
  const index_t dst_plane_size = dst_h * dst_w;

  for (int tap0 = 0; tap0 < taps_count; tap0 += kSlots) {
    const auto taps = pass_taps<kSlots>(g, tap0);
    acc_t acc[kSlots + 1];
#pragma unroll
    for (int t = 0; t <= kSlots; ++t) acc[t] = acc_t(0);
    GridWalk<index_t, 3> at(row_begin * dst_w + tid, kThreads, {0, dst_h, dst_w});  // (n, y, x)
    for (index_t p = tid; p < positions; p += kThreads, at.advance()) {
      const index_t n = at.at[0], y = at.at[1], x = at.at[2];
      const acc_t go = static_cast<acc_t>(grad_output[(n * dst_channels + c) * dst_plane_size + y * dst_w + x]);
      accumulate_pass_taps<scalar_t, index_t>(acc, taps, g, go, input + (n * src_channels + src_c) * src_plane_size,
                                              src_w, index_t(1), y, x);
      acc[kSlots] += go;
    }
    sum_over_block(sums, acc, tid);
    if (tid < taps.count) {
      partial[(slice * dst_channels + c) * taps_count + tap0 + tid] = sums[tid][0];
    }
    if (tid == 0 && tap0 == 0 && partial_bias != nullptr) partial_bias[slice * dst_channels + c] = sums[kSlots][0];
    __syncthreads();
  }
}

// channels_last: threadIdx.x walks 32 channels (coalesced), threadIdx.y walks positions.
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

template <typename scalar_t, typename index_t, int kSlots>
__global__ void __launch_bounds__(kThreads, 2) grad_weight_channels_last_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const Strides4 go_strides,
    const Strides4 in_strides,
    const int64_t rows_per_slice) {
  using acc_t = at::acc_type<scalar_t, true>;
  __shared__ acc_t sums[kSlots + 1][kPositionLanes][kChannelLanes];  // slot kSlots: the bias (grad_weight_nchw_kernel)
  const index_t dst_channels = g.dst_channels, dst_h = g.dst_h, dst_w = g.dst_w;
  const index_t gn = go_strides.n, gc = go_strides.c, gh = go_strides.h, gw = go_strides.w;
  const index_t in_n = in_strides.n, in_c = in_strides.c, in_h = in_strides.h, in_w = in_strides.w;
  const index_t c = static_cast<index_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  const bool active = c < dst_channels;
  const index_t src_c = c / g.multiplier;
  const index_t slice = blockIdx.y;
  const int taps_count = g.kernel_h * g.kernel_w;
  const index_t rows = static_cast<index_t>(g.batch) * g.dst_h;
  const index_t row_begin = slice * rows_per_slice;
  const index_t row_end = smaller(rows, row_begin + static_cast<index_t>(rows_per_slice));
  const index_t positions = row_begin < row_end ? (row_end - row_begin) * g.dst_w : 0;

  for (int tap0 = 0; tap0 < taps_count; tap0 += kSlots) {
    const auto taps = pass_taps<kSlots>(g, tap0);
    acc_t acc[kSlots + 1];
#pragma unroll
    for (int t = 0; t <= kSlots; ++t) acc[t] = acc_t(0);
    if (active) {
      GridWalk<index_t, 3> at(row_begin * dst_w + threadIdx.y, kPositionLanes, {0, dst_h, dst_w});  // (n, y, x)
      for (index_t p = threadIdx.y; p < positions; p += kPositionLanes, at.advance()) {
        const index_t n = at.at[0], y = at.at[1], x = at.at[2];
        const acc_t go = static_cast<acc_t>(grad_output[n * gn + c * gc + y * gh + x * gw]);
        accumulate_pass_taps<scalar_t, index_t>(acc, taps, g, go, input + n * in_n + src_c * in_c, in_h, in_w, y, x);
        acc[kSlots] += go;
      }
    }
    sum_position_lanes(sums, [&](int t) { return acc[t]; }, [&](int t, acc_t total) {
      if (!active) return;
      if (t < taps.count) partial[(slice * dst_channels + c) * taps_count + tap0 + t] = total;
      if (t == kSlots && tap0 == 0 && partial_bias != nullptr) partial_bias[slice * dst_channels + c] = total;
    });
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------
// Row kernels: conv1d as torch runs it (NCHW-contiguous planes of one row, a 1 x K filter with
// K from kRowMinTaps to kRowMaxTaps, stride 1, dilation 1, 32-bit indexing, 16-byte aligned data).
// A thread takes chunks of kRowChunk consecutive outputs of a row, each starting on a kRowChunk
// boundary of dst in memory, and reads the chunk's window (kRowChunk + K - 1 inputs) as the
// aligned 16-byte vectors of src that hold it: every global access is 16 bytes wide, and the
// window stays in registers, each input loaded once for K multiply-adds. The window starts some
// elements into its first vector; a branch per possible offset makes it a constant there, so the
// window is never indexed at run time. Chunks at a row's ends, whose window vectors leave the
// row, load their window an element at a time, checked, so padding reads nothing and a
// neighbouring row is never read as data. (At stride 1 dst_w = src_w + 2 * pad - K + 1, so a
// window inside its row puts the chunk's outputs inside theirs.) Threads walk the chunks (a row's
// chunks in order, so a warp reads contiguous memory) by the grid's stride, with carries.
//
// A chunk is 32 bytes of output (8 outputs in double): two 16-byte vectors of bf16/fp16. With one
// vector a chunk a thread had 16 bytes of new data in flight a chunk (its window's other vectors
// are its neighbours' and hit L1): 16 KB an SM at 4 blocks of 256, what the H100 needs to stream
// at full bandwidth at best (3.0 TB/s x ~0.7 us over 132 SMs), short of it under load: the bf16
// conv1d forward and backward-input stood at 68-78 % of the floor (2026-11-22).

constexpr int row_chunk_outputs(int element_size) { return element_size >= 8 ? 8 : 32 / element_size; }
template <typename scalar_t>
constexpr int kRowChunk = row_chunk_outputs(sizeof(scalar_t));
constexpr int kRowMinTaps = 2;
constexpr int kRowMaxTaps = 4;
constexpr int kRowMinWidth = 64;  // narrower rows are mostly ends: the tiled kernel serves them

// The inputs of a chunk's window.
template <typename scalar_t, int kTaps>
constexpr int kRowWindow = kRowChunk<scalar_t> + kTaps - 1;

// The aligned vectors that hold a chunk's window wherever it starts in the first of them.
template <typename scalar_t, int kTaps>
constexpr int kRowWindowVectors =
    (kVector16<scalar_t> - 1 + kRowWindow<scalar_t, kTaps> + kVector16<scalar_t> - 1) / kVector16<scalar_t>;

// A row's chunks of `chunk` outputs: enough for the row wherever its first element falls in a chunk.
inline int row_chunks(int64_t width, int chunk) {
  return static_cast<int>((width + 2 * (chunk - 1)) / chunk);
}

// The first output of a row's chunk, in the row that starts at element `row_start` of dst:
// chunks start on kRowChunk boundaries of dst in memory, so the first may start before the row.
template <typename scalar_t, typename index_t>
__device__ __forceinline__ index_t row_chunk_first(index_t row_start, index_t chunk) {
  constexpr int kChunk = kRowChunk<scalar_t>;
  return chunk * kChunk - (row_start & (kChunk - 1));
}

template <int kOffset, typename scalar_t, typename acc_t, int kRaw, int kCount>
__device__ __forceinline__ void take_window(const scalar_t (&raw)[kRaw], acc_t (&window)[kCount]) {
  static_assert(kOffset + kCount <= kRaw, "the window must lie inside the loaded vectors");
#pragma unroll
  for (int i = 0; i < kCount; ++i) window[i] = static_cast<acc_t>(raw[kOffset + i]);
}

template <typename scalar_t, typename acc_t, int kRaw, int kCount, int... kOffsets>
__device__ __forceinline__ void take_window_at(int offset, const scalar_t (&raw)[kRaw], acc_t (&window)[kCount],
                                               std::integer_sequence<int, kOffsets...>) {
  ((offset == kOffsets ? take_window<kOffsets>(raw, window) : void()), ...);
}

// Whether element i of a window that starts at `first` of its row lies in the row.
template <typename index_t>
__device__ __forceinline__ bool row_window_inside(index_t first, int i, index_t row_length) {
  return first + i >= 0 && first + i < row_length;
}

// The kRowWindow elements of src from `first` in the row that starts at element `row_start`
// (`first` may be negative), converted to acc_t, when the aligned vectors holding them all lie
// inside the row's `row_length` elements; false, having loaded nothing, when not.
template <int kTaps, typename scalar_t, typename index_t, typename acc_t>
__device__ __forceinline__ bool load_row_window(acc_t (&window)[kRowWindow<scalar_t, kTaps>], const scalar_t* src,
                                                index_t row_start, index_t first, index_t row_length) {
  constexpr int V = kVector16<scalar_t>;
  constexpr int kVectors = kRowWindowVectors<scalar_t, kTaps>;
  const int offset = static_cast<int>((row_start + first) & (V - 1));
  const index_t vector_first = first - offset;  // in the row
  if (vector_first < 0 || vector_first + kVectors * V > row_length) return false;
  scalar_t raw[kVectors * V];
#pragma unroll
  for (int v = 0; v < kVectors; ++v) {
    const Vector16<scalar_t> loaded = load_vector(src + row_start + vector_first + v * V);
#pragma unroll
    for (int k = 0; k < V; ++k) raw[v * V + k] = loaded.v[k];
  }
  take_window_at(offset, raw, window, std::make_integer_sequence<int, V>{});
  return true;
}

// The same window at a row's end, an element at a time; elements outside the row are not read
// (zero), and the caller's sums skip them (row_window_inside) as the fast path's never meet them.
template <int kTaps, typename scalar_t, typename index_t, typename acc_t>
__device__ __forceinline__ void load_row_window_checked(acc_t (&window)[kRowWindow<scalar_t, kTaps>],
                                                        const scalar_t* src, index_t row_start, index_t first,
                                                        index_t row_length) {
#pragma unroll
  for (int i = 0; i < kRowWindow<scalar_t, kTaps>; ++i) {
    window[i] = row_window_inside(first, i, row_length) ? static_cast<acc_t>(src[row_start + first + i]) : acc_t(0);
  }
}

// A whole chunk: kRowChunk elements from `address`, which is kRowChunk-aligned.
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void load_row_chunk(acc_t (&values)[kRowChunk<scalar_t>], const scalar_t* address) {
  constexpr int V = kVector16<scalar_t>;
#pragma unroll
  for (int v = 0; v < kRowChunk<scalar_t> / V; ++v) {
    const Vector16<scalar_t> loaded = load_vector(address + v * V);
#pragma unroll
    for (int k = 0; k < V; ++k) values[v * V + k] = static_cast<acc_t>(loaded.v[k]);
  }
}

template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void store_row_chunk(scalar_t* address, const acc_t (&values)[kRowChunk<scalar_t>]) {
  constexpr int V = kVector16<scalar_t>;
#pragma unroll
  for (int v = 0; v < kRowChunk<scalar_t> / V; ++v) {
    Vector16<scalar_t> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = static_cast<scalar_t>(values[v * V + k]);
    store_vector(address + v * V, out);
  }
}

// Forward, or backward-input as the stride-1 correlation with the flipped filter (g is then
// backward_input_as_correlation's geometry and each dst row sums `multiplier` src rows). Rows are
// walked as (n, a, b, chunk): forward (n, src channel, member) with dst channel src * multiplier +
// member, backward (n, dst channel, 0), so no channel is found by a division.
template <typename scalar_t, typename index_t, bool kBackward, int kTaps>
__global__ void __launch_bounds__(kThreads, 3) row_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const int chunks_per_row) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int kChunk = kRowChunk<scalar_t>;
  constexpr int kWindow = kRowWindow<scalar_t, kTaps>;
  const index_t src_w = g.src_w, dst_w = g.dst_w, pad = g.pad_w;
  const index_t src_channels = g.src_channels, dst_channels = g.dst_channels, multiplier = g.multiplier;
  const index_t members = kBackward ? multiplier : 1;
  const index_t total = static_cast<index_t>(g.batch) * dst_channels * chunks_per_row;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const index_t grid_stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  const index_t extents[4] = {0, kBackward ? dst_channels : src_channels, kBackward ? 1 : multiplier, chunks_per_row};
  GridWalk<index_t, 4> at(first, grid_stride, extents);
  for (index_t i = first; i < total; i += grid_stride, at.advance()) {
    const index_t n = at.at[0];
    const index_t c = kBackward ? at.at[1] : at.at[1] * multiplier + at.at[2];
    const index_t dst_start = (n * dst_channels + c) * dst_w;
    const index_t y0 = row_chunk_first<scalar_t>(dst_start, at.at[3]);
    if (y0 >= dst_w) continue;  // a row that starts late in its first chunk needs one chunk fewer
    acc_t acc[kChunk];
    const acc_t start = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[c]) : acc_t(0);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) acc[k] = start;
#pragma unroll 1
    for (index_t member = 0; member < members; ++member) {
      const index_t src_c = kBackward ? c * multiplier + member : at.at[1];
      const scalar_t* w = weight + (kBackward ? src_c : c) * kTaps;
      acc_t taps[kTaps];
#pragma unroll
      for (int j = 0; j < kTaps; ++j) taps[j] = static_cast<acc_t>(w[kBackward ? kTaps - 1 - j : j]);
      const index_t src_start = (n * src_channels + src_c) * src_w;
      acc_t window[kWindow];
      if (load_row_window<kTaps>(window, src, src_start, y0 - pad, src_w)) {
#pragma unroll
        for (int k = 0; k < kChunk; ++k) {
#pragma unroll
          for (int j = 0; j < kTaps; ++j) acc[k] += window[k + j] * taps[j];
        }
      } else {
        load_row_window_checked<kTaps>(window, src, src_start, y0 - pad, src_w);
#pragma unroll
        for (int k = 0; k < kChunk; ++k) {
#pragma unroll
          for (int j = 0; j < kTaps; ++j) {
            if (row_window_inside(y0 - pad, k + j, src_w)) acc[k] += window[k + j] * taps[j];
          }
        }
      }
    }
    if (y0 >= 0 && y0 + kChunk <= dst_w) {
      store_row_chunk(dst + dst_start + y0, acc);
    } else {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const index_t y = y0 + k;
        if (y >= 0 && y < dst_w) dst[dst_start + y] = static_cast<scalar_t>(acc[k]);
      }
    }
  }
}

// The weight gradient: blockIdx.x is a channel, blockIdx.y a slice of its batch x chunks of
// grad_output rows, [slice * chunks_per_slice, ...) in (n, chunk) order; g is the forward
// geometry (src = input, dst = grad_output). The block's sums go to `partial` as the other
// weight-gradient kernels' do, and its sum of grad_output (slot kTaps) to `partial_bias` unless
// that is null.
template <typename scalar_t, typename index_t, int kTaps>
__global__ void __launch_bounds__(kThreads, 4) grad_weight_row_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const int chunks_per_row,
    const int64_t chunks_per_slice) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int kChunk = kRowChunk<scalar_t>;
  constexpr int kWindow = kRowWindow<scalar_t, kTaps>;
  __shared__ acc_t sums[kTaps + 1][kThreads];
  const int tid = threadIdx.x;
  const index_t src_w = g.src_w, dst_w = g.dst_w, pad = g.pad_w;
  const index_t src_channels = g.src_channels, dst_channels = g.dst_channels;
  const index_t c = blockIdx.x;
  const index_t src_c = c / g.multiplier;
  const index_t slice = blockIdx.y;
  const index_t begin = slice * static_cast<index_t>(chunks_per_slice);
  const index_t end = smaller(static_cast<index_t>(g.batch) * chunks_per_row,
                              begin + static_cast<index_t>(chunks_per_slice));
  acc_t acc[kTaps + 1];
#pragma unroll
  for (int j = 0; j <= kTaps; ++j) acc[j] = acc_t(0);
  GridWalk<index_t, 2> at(begin + tid, kThreads, {0, chunks_per_row});  // (n, chunk)
  for (index_t i = begin + tid; i < end; i += kThreads, at.advance()) {
    const index_t n = at.at[0];
    const index_t go_start = (n * dst_channels + c) * dst_w;
    const index_t y0 = row_chunk_first<scalar_t>(go_start, at.at[1]);
    if (y0 >= dst_w) continue;
    const index_t in_start = (n * src_channels + src_c) * src_w;
    acc_t window[kWindow];
    if (load_row_window<kTaps>(window, input, in_start, y0 - pad, src_w)) {
      acc_t go[kChunk];
      load_row_chunk(go, grad_output + go_start + y0);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
#pragma unroll
        for (int j = 0; j < kTaps; ++j) acc[j] += go[k] * window[k + j];
        acc[kTaps] += go[k];
      }
    } else {
      load_row_window_checked<kTaps>(window, input, in_start, y0 - pad, src_w);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const index_t y = y0 + k;
        if (y < 0 || y >= dst_w) continue;
        const acc_t go = static_cast<acc_t>(grad_output[go_start + y]);
#pragma unroll
        for (int j = 0; j < kTaps; ++j) {
          if (row_window_inside(y0 - pad, k + j, src_w)) acc[j] += go * window[k + j];
        }
        acc[kTaps] += go;
      }
    }
  }
  sum_over_block(sums, acc, tid);
  if (tid < kTaps) partial[(slice * dst_channels + c) * kTaps + tid] = sums[tid][0];
  if (tid == kTaps && partial_bias != nullptr) partial_bias[slice * dst_channels + c] = sums[kTaps][0];
}

// ---------------------------------------------------------------------------
// Column kernels: conv1d in the transposed layout (channels_last planes of one row, as a (N, L, C)
// projection output is seen as (N, C, 1, L)), multiplier 1, the row kernels' filters, channels a
// whole number of 16-byte vectors, 16-byte aligned data and weight, 32-bit indexing. A thread owns one
// vector of channels and walks kColumnSegment consecutive outputs of a row with the last K input
// vectors in registers: a step loads one input vector (the weight gradient also one grad_output
// vector), so every global access is a whole channel vector, a warp's 32 lanes reading 32
// consecutive vectors of one pixel, and each input is loaded once a segment for K multiply-adds a
// channel. Segments whose window leaves the row take a checked instance of the same walk (padding
// reads nothing; the weight gradient adds nothing for it).

constexpr int kColumnSegment = 8;

// A row's segments of dst_w outputs.
template <typename index_t>
__host__ __device__ inline index_t column_segments(index_t dst_w) {
  return (dst_w + kColumnSegment - 1) / kColumnSegment;
}

// A segment's window: input vector j of the step's K, and whether it lies in the row.
template <typename acc_t, int kTaps, int V>
struct ColumnWindow {
  acc_t values[kTaps][V];
  bool inside[kTaps];

  // Moves the window one step on, to input x of the row whose pixel 0 is at `row` (x read only
  // when it lies in the row's src_w pixels, or whatever it is when not kChecked).
  template <bool kChecked, typename scalar_t, typename index_t>
  __device__ __forceinline__ void step(const scalar_t* row, index_t channels, index_t x, index_t src_w) {
    const bool in_row = x >= 0 && x < src_w;
#pragma unroll
    for (int j = 0; j + 1 < kTaps; ++j) {
      inside[j] = inside[j + 1];
#pragma unroll
      for (int k = 0; k < V; ++k) values[j][k] = values[j + 1][k];
    }
    inside[kTaps - 1] = !kChecked || in_row;
    const Vector16<scalar_t> loaded = load_vector_or_zero(inside[kTaps - 1], row + x * channels);
#pragma unroll
    for (int k = 0; k < V; ++k) values[kTaps - 1][k] = static_cast<acc_t>(loaded.v[k]);
  }

  // The first K - 1 inputs of a segment whose window starts at input `first`.
  template <bool kChecked, typename scalar_t, typename index_t>
  __device__ __forceinline__ void start(const scalar_t* row, index_t channels, index_t first, index_t src_w) {
#pragma unroll
    for (int j = 0; j + 1 < kTaps; ++j) step<kChecked>(row, channels, first + j, src_w);
  }
};

// Whether a segment's window (inputs from first_input, kColumnSegment + K - 1 of them) lies in the
// row. At stride 1 dst_w = src_w + 2 * pad - K + 1, so its outputs then lie in theirs.
template <int kTaps, typename index_t>
__device__ __forceinline__ bool column_segment_inside(index_t first_input, index_t src_w) {
  return first_input >= 0 && first_input + kColumnSegment + kTaps - 1 <= src_w;
}

// One thread's segment, forward or backward-input: outputs l0 .. l0 + kColumnSegment - 1 of the
// row at dst_row from the inputs at src_row (pixel x at src_row + x * channels).
template <bool kChecked, int kTaps, typename scalar_t, typename index_t, typename acc_t, int V>
__device__ __forceinline__ void column_segment(const acc_t (&taps)[kTaps][V], const acc_t (&start)[V],
                                               const scalar_t* src_row, scalar_t* dst_row, index_t channels,
                                               index_t l0, index_t first_input, index_t src_w, index_t dst_w) {
  ColumnWindow<acc_t, kTaps, V> window;
  window.template start<kChecked>(src_row, channels, first_input, src_w);
#pragma unroll
  for (int s = 0; s < kColumnSegment; ++s) {
    window.template step<kChecked>(src_row, channels, first_input + s + kTaps - 1, src_w);
    Vector16<scalar_t> out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      acc_t sum = start[k];
#pragma unroll
      for (int j = 0; j < kTaps; ++j) sum += window.values[j][k] * taps[j][k];
      out.v[k] = static_cast<scalar_t>(sum);
    }
    if (!kChecked || l0 + s < dst_w) store_vector(dst_row + (l0 + s) * channels, out);
  }
}

// Forward, or backward-input as the stride-1 correlation with the flipped filter (g then is
// backward_input_as_correlation's geometry). Threads walk (n, segment, channel vector), vectors
// fastest, by the grid's stride.
template <typename scalar_t, typename index_t, bool kBackward, int kTaps>
__global__ void __launch_bounds__(kThreads, 2) column_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<scalar_t>;
  const index_t channels = g.dst_channels, src_w = g.src_w, dst_w = g.dst_w, pad = g.pad_w;
  const index_t vectors = channels / V;
  const index_t segments = column_segments(dst_w);
  const index_t total = static_cast<index_t>(g.batch) * segments * vectors;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const index_t grid_stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  GridWalk<index_t, 3> at(first, grid_stride, {0, segments, vectors});
  for (index_t i = first; i < total; i += grid_stride, at.advance()) {
    const index_t n = at.at[0], l0 = at.at[1] * kColumnSegment, c0 = at.at[2] * V;
    // The vector's filters are kTaps whole vectors of weight, [channel][tap].
    acc_t taps[kTaps][V];
#pragma unroll
    for (int q = 0; q < kTaps; ++q) {
      const Vector16<scalar_t> loaded = load_vector(weight + c0 * kTaps + q * V);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int k = (q * V + e) / kTaps, tap = (q * V + e) % kTaps;
        taps[kBackward ? kTaps - 1 - tap : tap][k] = static_cast<acc_t>(loaded.v[e]);
      }
    }
    acc_t start[V];
#pragma unroll
    for (int k = 0; k < V; ++k) start[k] = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[c0 + k]) : acc_t(0);
    const scalar_t* src_row = src + n * src_w * channels + c0;
    scalar_t* dst_row = dst + n * dst_w * channels + c0;
    const index_t first_input = l0 - pad;
    if (column_segment_inside<kTaps>(first_input, src_w)) {
      column_segment<false>(taps, start, src_row, dst_row, channels, l0, first_input, src_w, dst_w);
    } else {
      column_segment<true>(taps, start, src_row, dst_row, channels, l0, first_input, src_w, dst_w);
    }
  }
}

// One position lane's segment of the weight gradient: adds grad_output's vectors at l0 .. times
// the window's inputs into sums[j][k].
template <bool kChecked, int kTaps, typename scalar_t, typename index_t, typename acc_t, int V>
__device__ __forceinline__ void column_grad_weight_segment(acc_t (&sums)[kTaps + 1][V], const scalar_t* go_row,
                                                           const scalar_t* in_row, index_t channels, index_t l0,
                                                           index_t first_input, index_t src_w, index_t dst_w) {
  ColumnWindow<acc_t, kTaps, V> window;
  window.template start<kChecked>(in_row, channels, first_input, src_w);
#pragma unroll
  for (int s = 0; s < kColumnSegment; ++s) {
    window.template step<kChecked>(in_row, channels, first_input + s + kTaps - 1, src_w);
    if (kChecked && l0 + s >= dst_w) continue;
    const Vector16<scalar_t> go = load_vector(go_row + (l0 + s) * channels);
#pragma unroll
    for (int j = 0; j < kTaps; ++j) {
      if (!window.inside[j]) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) sums[j][k] += static_cast<acc_t>(go.v[k]) * window.values[j][k];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) sums[kTaps][k] += static_cast<acc_t>(go.v[k]);
  }
}

// The weight gradient (g: the forward geometry). Block: (kChannelLanes channel vectors,
// kPositionLanes position lanes); blockIdx.x picks the block's vectors, blockIdx.y a slice
// of the (n, segment) items, [slice * items_per_slice, ...), which the position lanes take in
// turn. The lanes' sums then meet in shared memory, added in lane order, and go to `partial`.
template <typename scalar_t, typename index_t, int kTaps>
__global__ void __launch_bounds__(kThreads, 2) grad_weight_column_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const int64_t items_per_slice) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<scalar_t>;
  __shared__ acc_t lane_sums[(kTaps + 1) * V][kPositionLanes][kChannelLanes];
  const index_t channels = g.dst_channels, src_w = g.src_w, dst_w = g.dst_w, pad = g.pad_w;
  const index_t vector = static_cast<index_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  const bool active = vector < channels / V;
  const index_t c0 = vector * V;
  const index_t segments = column_segments(dst_w);
  const index_t slice = blockIdx.y;
  const index_t begin = slice * static_cast<index_t>(items_per_slice);
  const index_t end = smaller(static_cast<index_t>(g.batch) * segments, begin + static_cast<index_t>(items_per_slice));
  acc_t sums[kTaps + 1][V];  // row kTaps: grad_output's own sums, the bias gradient's
#pragma unroll
  for (int j = 0; j <= kTaps; ++j) {
#pragma unroll
    for (int k = 0; k < V; ++k) sums[j][k] = acc_t(0);
  }
  if (active) {
    GridWalk<index_t, 2> at(begin + threadIdx.y, kPositionLanes, {0, segments});  // (n, segment)
    for (index_t i = begin + threadIdx.y; i < end; i += kPositionLanes, at.advance()) {
      const index_t n = at.at[0], l0 = at.at[1] * kColumnSegment;
      const scalar_t* go_row = grad_output + n * dst_w * channels + c0;
      const scalar_t* in_row = input + n * src_w * channels + c0;
      const index_t first_input = l0 - pad;
      if (column_segment_inside<kTaps>(first_input, src_w)) {
        column_grad_weight_segment<false, kTaps>(sums, go_row, in_row, channels, l0, first_input, src_w, dst_w);
      } else {
        column_grad_weight_segment<true, kTaps>(sums, go_row, in_row, channels, l0, first_input, src_w, dst_w);
      }
    }
  }
  // Slot t holds tap t / V of channel c0 + t % V (tap kTaps: the bias).
  sum_position_lanes(lane_sums, [&](int t) { return sums[t / V][t % V]; }, [&](int t, acc_t total) {
    if (!active) return;
    if (t / V < kTaps) {
      partial[(slice * channels + c0 + t % V) * kTaps + t / V] = total;
    } else if (partial_bias != nullptr) {
      partial_bias[slice * channels + c0 + t % V] = total;
    }
  });
}

// Register-blocked weight gradient (NCHW) for the register-tiled filters and strides: the
// blocks and shared input tiles of register_tiled_nchw_kernel with the roles exchanged. A thread holds
// its kBlockRows x kBlockCols block of grad_output and the kKernel^2 tap sums in registers;
// each input row of its window, read once as 16-byte shared loads, adds to the taps of every
// kernel row that pairs it with one of the thread's output rows. For 7x7 in float: 16 x 49
// FMAs per 30 16-byte shared loads and 4 global row loads, where grad_weight_nchw_kernel makes
// a global load and its index arithmetic for each of 49 x 16 FMAs.
// The planes of a block are batch entries of one channel (blockIdx.x), and blockIdx.y is a
// slice of that channel's work items (plane group, tile row, tile column). At the end the
// block's threads add up their sums in a fixed tree through shared memory, so every run gives
// the same bits.

// How the blocks of grad_weight_register_tiled_kernel share a channel's work: items are
// numbered with the tile column fastest, then the tile row, then the group of blockDim.x batch
// entries; slice s takes items [s * items_per_slice, (s + 1) * items_per_slice).
struct RegisterGradWeightWork {
  int tiles_h, tiles_w;
  int64_t items, items_per_slice;
  int reduce_taps;  // taps summed across the block at a time (shared memory holds that many per thread)
};

template <typename scalar_t, typename index_t, int kKernel, int kStride>
__global__ void __launch_bounds__(kThreads, sizeof(at::acc_type<scalar_t, true>) == 8 ? 1 : 2)
grad_weight_register_tiled_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const RegisterTile t,
    const RegisterGradWeightWork work) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<acc_t>;
  constexpr int kTaps = kKernel * kKernel;
  static_assert(kBlockCols % V == 0, "a thread's window must start on a 16-byte boundary");
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const shared = reinterpret_cast<acc_t*>(shared_bytes);
  acc_t* const tile = shared + threadIdx.x * t.plane_stride;

  const int plane_threads = blockDim.y * blockDim.z;
  const int plane_tid = threadIdx.z * blockDim.y + threadIdx.y;
  const int threads = blockDim.x * plane_threads;
  const int tid = plane_tid * blockDim.x + threadIdx.x;
  const index_t c = blockIdx.x;
  const index_t src_c = c / g.multiplier;
  const index_t dst_channels = g.dst_channels, src_channels = g.src_channels;
  const index_t src_plane_size = static_cast<index_t>(g.src_h) * g.src_w;
  const index_t dst_plane_size = static_cast<index_t>(g.dst_h) * g.dst_w;
  const int64_t item_begin = blockIdx.y * work.items_per_slice;
  const int64_t item_end = smaller(work.items, item_begin + work.items_per_slice);

  // The tap sums, then grad_output's own sum (the bias gradient's; summed across the block only
  // when partial_bias is not null).
  acc_t sums[kTaps + 1];
#pragma unroll
  for (int tap = 0; tap <= kTaps; ++tap) sums[tap] = acc_t(0);
  const int block_sums = partial_bias != nullptr ? kTaps + 1 : kTaps;

  for (int64_t item = item_begin; item < item_end; ++item) {
    const int tile_x = static_cast<int>(item % work.tiles_w);
    const int tile_y = static_cast<int>(item / work.tiles_w % work.tiles_h);
    const index_t n = static_cast<index_t>(item / work.tiles_w / work.tiles_h) * blockDim.x + threadIdx.x;
    const bool live = n < g.batch;  // the last group's spare planes
    const int y0 = tile_y * blockDim.z * kBlockRows;
    const int x0 = tile_x * blockDim.y * kBlockCols;
    const int src_y0 = y0 * kStride - g.pad_h;
    const int src_x0 = x0 * kStride - g.pad_w;
    __syncthreads();  // no thread still reads the previous item's tile
    // The block's planes are batch entries n0.. of channel c, staged by the whole block; with the
    // tap sums live, fewer loads in flight, as in backward-input.
    const index_t n0 = n - threadIdx.x;
    const int live_planes = static_cast<int>(smaller<index_t>(blockDim.x, static_cast<index_t>(g.batch) - n0));
    stage_register_tiles<scalar_t, index_t, kStageVectors / 2>(
        shared, input + (n0 * src_channels + src_c) * src_plane_size, src_channels * src_plane_size, live_planes, g,
        t, src_y0, src_x0, tid, threads);
    __syncthreads();

    const int y = y0 + threadIdx.z * kBlockRows;
    const int x = x0 + threadIdx.y * kBlockCols;
    if (!live || y >= g.dst_h || x >= g.dst_w) continue;
    const scalar_t* go_plane = grad_output + (n * dst_channels + c) * dst_plane_size;
    acc_t go[kBlockRows][kBlockCols];
#pragma unroll
    for (int i = 0; i < kBlockRows; ++i) {
      const scalar_t* go_row = go_plane + static_cast<index_t>(y + i) * g.dst_w + x;
      if (y + i >= g.dst_h) {
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) go[i][j] = acc_t(0);
      } else if (t.row_access) {  // then x + kBlockCols <= dst_w
        const BlockRow<scalar_t> row = *reinterpret_cast<const BlockRow<scalar_t>*>(go_row);
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) go[i][j] = static_cast<acc_t>(row.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) go[i][j] = x + j < g.dst_w ? static_cast<acc_t>(go_row[j]) : acc_t(0);
      }
#pragma unroll
      for (int j = 0; j < kBlockCols; ++j) sums[kTaps] += go[i][j];
    }
    const acc_t* window = tile + (threadIdx.z * kBlockRows * t.pitch + threadIdx.y * kBlockCols) * kStride;
    // Input row r of the window adds to kernel row kh through output row i = (r - kh) / kStride.
    walk_register_window<acc_t, kKernel, kStride>(window, t.pitch, [&](int i, int kh, const auto& in) {
#pragma unroll
      for (int kw = 0; kw < kKernel; ++kw) {
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) sums[kh * kKernel + kw] += go[i][j] * in[j * kStride + kw];
      }
    });
  }

  // The block's sums, reduce_taps taps at a time: each thread's value of a tap at
  // shared[tap * threads + tid], then halves folded onto the lower lanes.
  int span = 1;
  while (span < threads) span *= 2;
  for (int tap0 = 0; tap0 < block_sums; tap0 += work.reduce_taps) {
    const int chunk = smaller(work.reduce_taps, block_sums - tap0);
    __syncthreads();  // no thread still reads the tile or the previous chunk
#pragma unroll
    for (int tap = 0; tap <= kTaps; ++tap) {
      if (tap >= tap0 && tap < tap0 + chunk) shared[(tap - tap0) * threads + tid] = sums[tap];
    }
    for (int half = span / 2; half > 0; half /= 2) {
      __syncthreads();
      for (int i = tid; i < chunk * half; i += threads) {
        const int lane = i % half;
        acc_t* values = shared + (i / half) * threads;
        if (lane + half < threads) values[lane] += values[lane + half];
      }
    }
    __syncthreads();
    for (int i = tid; i < chunk; i += threads) {
      if (tap0 + i < kTaps) {
        partial[(static_cast<int64_t>(blockIdx.y) * g.dst_channels + c) * kTaps + tap0 + i] = shared[i * threads];
      } else {
        partial_bias[static_cast<int64_t>(blockIdx.y) * g.dst_channels + c] = shared[i * threads];
      }
    }
  }
}

// Register-blocked weight gradient (channels_last, multiplier 1) for square 3x3, 5x5 and 7x7
// filters at stride 1 or 2 and dilation 1, both tensors channels_last-contiguous. A thread
// owns kGradWeightChannels<scalar_t> adjacent channels (two for the half types: one 4-byte
// load, so a warp's 32 lanes read 128 contiguous bytes) and all their tap sums; it walks strips
// of kBlockCols output columns of one row: the strip's grad_output in registers, then for each
// kernel row the input columns its window needs, each loaded once and used by every output
// column and kernel column that pairs with it. Block: (channel lanes, position lanes);
// blockIdx.x picks the block's channels, blockIdx.y a slice of the strips, taken by the
// position lanes in turn. The lanes' sums then meet in shared memory, added in lane order.

template <typename scalar_t>
constexpr int kGradWeightChannels = sizeof(scalar_t) == 2 ? 2 : 1;

template <typename scalar_t>
struct alignas(kGradWeightChannels<scalar_t> * sizeof(scalar_t)) ChannelGroup {
  scalar_t v[kGradWeightChannels<scalar_t>];
};

struct ChannelsLastGradWeightWork {
  int64_t strips_w;  // strips across an output row
  int64_t strips, strips_per_slice;
  int reduce_taps;   // taps summed across the block at a time (shared memory holds that many per thread)
};

template <typename scalar_t, typename index_t, int kKernel, int kStride>
__global__ void __launch_bounds__(kThreads, kKernel == 7 ? 1 : 2) grad_weight_register_channels_last_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const ChannelsLastGradWeightWork work) {
  using acc_t = at::acc_type<scalar_t, true>;
  using Group = ChannelGroup<scalar_t>;
  constexpr int kChannels = kGradWeightChannels<scalar_t>;
  constexpr int kTaps = kKernel * kKernel;
  constexpr int kWindow = (kBlockCols - 1) * kStride + kKernel;  // input columns of a strip
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const shared = reinterpret_cast<acc_t*>(shared_bytes);

  const index_t channels = g.dst_channels;
  const index_t c0 = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kChannels;
  const bool active = c0 < channels;
  const index_t src_h = g.src_h, src_w = g.src_w, dst_h = g.dst_h, dst_w = g.dst_w;
  const int64_t strip_begin = blockIdx.y * work.strips_per_slice;
  const int64_t strip_end = smaller(work.strips, strip_begin + work.strips_per_slice);

  // The tap sums, then grad_output's own sums (the bias gradient's, as in the NCHW kernel).
  acc_t sums[kTaps + 1][kChannels];
#pragma unroll
  for (int tap = 0; tap <= kTaps; ++tap) {
#pragma unroll
    for (int k = 0; k < kChannels; ++k) sums[tap][k] = acc_t(0);
  }
  const int block_sums = partial_bias != nullptr ? kTaps + 1 : kTaps;

  for (int64_t strip = strip_begin + threadIdx.y; active && strip < strip_end; strip += blockDim.y) {
    const index_t x0 = static_cast<index_t>(strip % work.strips_w) * kBlockCols;
    const index_t row = static_cast<index_t>(strip / work.strips_w);  // n * dst_h + y
    const index_t y = row % dst_h;
    const index_t n = row / dst_h;
    acc_t go[kBlockCols][kChannels];
#pragma unroll
    for (int j = 0; j < kBlockCols; ++j) {
      const bool inside = x0 + j < dst_w;
      const Group v = inside ? *reinterpret_cast<const Group*>(grad_output + (row * dst_w + x0 + j) * channels + c0)
                             : Group{};
#pragma unroll
      for (int k = 0; k < kChannels; ++k) {
        go[j][k] = inside ? static_cast<acc_t>(v.v[k]) : acc_t(0);
        sums[kTaps][k] += go[j][k];
      }
    }
    const index_t sx0 = x0 * kStride - g.pad_w;
#pragma unroll
    for (int kh = 0; kh < kKernel; ++kh) {
      const index_t sy = y * kStride - g.pad_h + kh;
      if (sy < 0 || sy >= src_h) continue;
      const scalar_t* src_row = input + ((n * src_h + sy) * src_w) * channels + c0;
      acc_t in[kWindow][kChannels];
#pragma unroll
      for (int q = 0; q < kWindow; ++q) {
        const index_t sx = sx0 + q;
        const bool inside = sx >= 0 && sx < src_w;
        const Group v = inside ? *reinterpret_cast<const Group*>(src_row + sx * channels) : Group{};
#pragma unroll
        for (int k = 0; k < kChannels; ++k) in[q][k] = inside ? static_cast<acc_t>(v.v[k]) : acc_t(0);
      }
#pragma unroll
      for (int kw = 0; kw < kKernel; ++kw) {
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) {
#pragma unroll
          for (int k = 0; k < kChannels; ++k) sums[kh * kKernel + kw][k] += go[j][k] * in[j * kStride + kw][k];
        }
      }
    }
  }

  // Lane (x, y)'s sum of a tap's channel k at shared[((tap - tap0) * blockDim.y + y) * row + x * kChannels + k].
  const int row_values = blockDim.x * kChannels;
  for (int tap0 = 0; tap0 < block_sums; tap0 += work.reduce_taps) {
    const int chunk = smaller(work.reduce_taps, block_sums - tap0);
    __syncthreads();  // no thread still reads the previous chunk
#pragma unroll
    for (int tap = 0; tap <= kTaps; ++tap) {
      if (tap >= tap0 && tap < tap0 + chunk) {
#pragma unroll
        for (int k = 0; k < kChannels; ++k) {
          shared[((tap - tap0) * blockDim.y + threadIdx.y) * row_values + threadIdx.x * kChannels + k] = sums[tap][k];
        }
      }
    }
    __syncthreads();
    for (int t = threadIdx.y; active && t < chunk; t += blockDim.y) {
#pragma unroll
      for (int k = 0; k < kChannels; ++k) {  // channels are a whole number of groups
        acc_t total = acc_t(0);
        for (int lane = 0; lane < static_cast<int>(blockDim.y); ++lane) {
          total += shared[(t * blockDim.y + lane) * row_values + threadIdx.x * kChannels + k];
        }
        if (tap0 + t < kTaps) {
          partial[(static_cast<int64_t>(blockIdx.y) * channels + c0 + k) * kTaps + tap0 + t] = total;
        } else {
          partial_bias[static_cast<int64_t>(blockIdx.y) * channels + c0 + k] = total;
        }
      }
    }
  }
}

// The slices' sums added in slice order: partial ([slices][values]) into grad_weight, and, when
// grad_bias is not null, partial_bias ([slices][channels]) into grad_bias.
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
  const int64_t total_values = values + (grad_bias != nullptr ? channels : 0);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total_values;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool is_bias = i >= values;
    const acc_t* sums = is_bias ? partial_bias + (i - values) : partial + i;
    const int64_t slice_stride = is_bias ? channels : values;
    acc_t total = acc_t(0);
    for (int64_t s = 0; s < slices; ++s) total += sums[s * slice_stride];
    if (is_bias) {
      grad_bias[i - values] = static_cast<scalar_t>(total);
    } else {
      grad_weight[i] = static_cast<scalar_t>(total);
    }
  }
}

// The input rows (or columns) that `outputs` consecutive output rows (or columns) read.
inline int input_extent(int outputs, int stride, int kernel, int dilation) {
  return (outputs - 1) * stride + (kernel - 1) * dilation + 1;
}

struct TiledLaunch {
  dim3 grid, block;
  int cols_per_thread, tile_in_h, tile_in_w;
  size_t shared_bytes;
};

// A tiled launch for this pass, or nothing when the plane is too narrow for tiles
// to pay off or the tile would not fit in shared memory.
template <typename acc_t>
std::optional<TiledLaunch> plan_tiled(const PassGeometry& g) {
  if (g.dst_w < 16) return std::nullopt;
  int rows = 8;
  while (rows > 1 && rows / 2 >= g.dst_h) rows /= 2;  // conv1d (H = 1) gets 256-wide rows
  const int bx = kThreads / rows;
  int cols = static_cast<int>(std::min<int64_t>((g.dst_w + bx - 1) / bx, kMaxColsPerThread));
  for (; cols >= 1; cols /= 2) {
    const int tile_w = bx * cols;
    const int tile_in_h = input_extent(rows, g.stride_h, g.kernel_h, g.dilation_h);
    const int tile_in_w = input_extent(tile_w, g.stride_w, g.kernel_w, g.dilation_w);
    const size_t bytes = (size_t(tile_in_h) * tile_in_w + size_t(g.kernel_h) * g.kernel_w) * sizeof(acc_t);
    if (bytes <= kMaxSharedBytes) {
      const int64_t planes = g.batch * g.dst_channels;
      const int64_t tiles_h = (g.dst_h + rows - 1) / rows;
      const int64_t tiles_w = (g.dst_w + tile_w - 1) / tile_w;
      if (planes > std::numeric_limits<int32_t>::max() || tiles_h > 65535 || tiles_w > 65535) return std::nullopt;
      const dim3 grid(static_cast<unsigned>(planes), static_cast<unsigned>(tiles_h), static_cast<unsigned>(tiles_w));
      return TiledLaunch{grid, dim3(bx, rows), cols, tile_in_h, tile_in_w, bytes};
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Row and column kernels' launches.

// Whether a pass (g: the forward geometry, or backward-input's correlation) is a conv1d the row
// and column kernels compute: planes of one row, a 1 x K filter with K in [kRowMinTaps,
// kRowMaxTaps], stride 1, dilation 1.
inline bool is_conv1d_pass(const PassGeometry& g) {
  return g.src_h == 1 && g.dst_h == 1 && g.kernel_h == 1 && g.pad_h == 0 && g.stride_w == 1 && g.dilation_w == 1 &&
         g.kernel_w >= kRowMinTaps && g.kernel_w <= kRowMaxTaps;
}

// Whether a pass has a row kernel. The caller checks the rest: both tensors NCHW-contiguous and
// 16-byte aligned, 32-bit indexing.
inline bool has_row_kernel(const PassGeometry& g) {
  return is_conv1d_pass(g) && g.dst_w >= kRowMinWidth;
}

// Whether a pass has a column kernel: multiplier 1 and whole channel vectors, enough of them for
// half a block's vector lanes (fewer leave the weight gradient's lanes idle; the general
// kernels' lanes are single channels). The caller checks the rest: both tensors channels_last-
// contiguous and 16-byte aligned, 32-bit indexing.
inline bool has_column_kernel(const PassGeometry& g, int vector_width) {
  return is_conv1d_pass(g) && g.multiplier == 1 && g.dst_channels % vector_width == 0 &&
         g.dst_channels / vector_width >= kChannelLanes / 2;
}

// The row or column kernel for a filter width: kernel_of(std::integral_constant<int, kTaps>), or
// null outside [kRowMinTaps, kRowMaxTaps].
template <typename KernelOf>
auto conv1d_kernel_for_taps(int taps, KernelOf kernel_of) {
  static_assert(kRowMinTaps == 2 && kRowMaxTaps == 4, "one case per compiled filter width");
  switch (taps) {
    case 2: return kernel_of(std::integral_constant<int, 2>{});
    case 3: return kernel_of(std::integral_constant<int, 3>{});
    case 4: return kernel_of(std::integral_constant<int, 4>{});
    default: return decltype(kernel_of(std::integral_constant<int, 2>{})){nullptr};
  }
}

template <typename scalar_t, typename index_t, bool kBackward>
auto row_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &row_kernel<scalar_t, index_t, kBackward, decltype(k)::value>; });
}

template <typename scalar_t, typename index_t>
auto grad_weight_row_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &grad_weight_row_kernel<scalar_t, index_t, decltype(k)::value>; });
}

template <typename scalar_t, typename index_t, bool kBackward>
auto column_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &column_kernel<scalar_t, index_t, kBackward, decltype(k)::value>; });
}

template <typename scalar_t, typename index_t>
auto grad_weight_column_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &grad_weight_column_kernel<scalar_t, index_t, decltype(k)::value>; });
}

// A thread walks kRowChunksPerThread chunks or so (its walk's divisions paid once for them), in
// a grid of several blocks an SM where the pass is that large.
constexpr int kRowChunksPerThread = 4;

struct RowLaunch {
  dim3 grid;
  int chunks_per_row;  // of row_chunk_outputs(element size) outputs: the kernel's kRowChunk
};

// Blocks of `threads` for a grid-stride walk over `items`: about `per_thread` items a thread, but
// never fewer blocks than 4 an SM (or one an item's thread) for a small walk.
inline int64_t walk_blocks(int64_t items, int threads, int per_thread, int sm_count) {
  const int64_t one_a_thread = (items + threads - 1) / threads;
  const int64_t blocks =
      std::max<int64_t>((one_a_thread + per_thread - 1) / per_thread, std::min<int64_t>(one_a_thread, 4 * int64_t(sm_count)));
  return std::clamp<int64_t>(blocks, 1, std::numeric_limits<int32_t>::max());
}

inline RowLaunch plan_row(const PassGeometry& g, int element_size, int sm_count) {
  const int chunks_per_row = row_chunks(g.dst_w, row_chunk_outputs(element_size));
  const int64_t chunks = g.batch * g.dst_channels * chunks_per_row;
  return {dim3(static_cast<unsigned>(walk_blocks(chunks, kThreads, kRowChunksPerThread, sm_count))), chunks_per_row};
}

struct RowGradWeightLaunch {
  dim3 grid;  // (channels, slices)
  int chunks_per_row;
  int64_t chunks_per_slice;
};

// Slices of a channel's batch x chunks: enough blocks for a few waves of the GPU, each thread
// of a slice walking 2 chunks or more.
inline RowGradWeightLaunch plan_row_grad_weight(const PassGeometry& g, int element_size, int sm_count) {
  const int chunks_per_row = row_chunks(g.dst_w, row_chunk_outputs(element_size));
  const int64_t chunks = g.batch * chunks_per_row;
  const int64_t wanted = (32 * int64_t(sm_count) + g.dst_channels - 1) / g.dst_channels;
  const int64_t useful = chunks / (2 * kThreads);
  const int64_t most = std::clamp<int64_t>(std::min(wanted, useful), 1, 65535);
  const int64_t chunks_per_slice = (chunks + most - 1) / most;
  const int64_t slices = (chunks + chunks_per_slice - 1) / chunks_per_slice;
  return {dim3(static_cast<unsigned>(g.dst_channels), static_cast<unsigned>(slices)), chunks_per_row,
          chunks_per_slice};
}

// A segment a thread, at most max_blocks blocks (the threads then walk the rest).
inline dim3 plan_column(const PassGeometry& g, int vector_width, int64_t max_blocks) {
  const int64_t items = g.batch * column_segments(g.dst_w) * (g.dst_channels / vector_width);
  const int64_t blocks = std::min((items + kThreads - 1) / kThreads, max_blocks);
  return dim3(static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, std::numeric_limits<int32_t>::max())));
}

struct ColumnGradWeightLaunch {
  dim3 grid, block;  // grid: (vector groups, slices)
  int64_t items_per_slice;
};

// Slices of the (n, segment) items: enough blocks for a few waves of the GPU, each position lane
// of a slice walking 2 segments or more.
inline ColumnGradWeightLaunch plan_column_grad_weight(const PassGeometry& g, int vector_width, int sm_count) {
  const int64_t vectors = g.dst_channels / vector_width;
  const int64_t vector_groups = (vectors + kChannelLanes - 1) / kChannelLanes;
  const int64_t items = g.batch * column_segments(g.dst_w);
  const int64_t wanted = (32 * int64_t(sm_count) + vector_groups - 1) / vector_groups;
  const int64_t useful = items / (2 * kPositionLanes);
  const int64_t most = std::clamp<int64_t>(std::min(wanted, useful), 1, 65535);
  const int64_t items_per_slice = (items + most - 1) / most;
  const int64_t slices = (items + items_per_slice - 1) / items_per_slice;
  return {dim3(static_cast<unsigned>(vector_groups), static_cast<unsigned>(slices)),
          dim3(kChannelLanes, kPositionLanes), items_per_slice};
}

// The register-tiled kernel compiled for a filter size, or null where there is none.
template <typename scalar_t, typename index_t, bool kBackward>
using RegisterTiledKernel = void (*)(const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*, PassGeometry,
                                     RegisterTile);

// A register-tiled kernel's instance for a filter size and stride (has_register_tiled_filter's:
// square 3, 5, 7 at stride 1; 3 and 5 at stride 2 where kStride2, false for backward-input, a
// stride-1 correlation), as kernel_of(size, stride) gives it from integral constants, or null.
template <bool kStride2, typename KernelOf>
auto register_tiled_instance(int kernel, int stride, KernelOf kernel_of) {
  using Kernel = decltype(kernel_of(std::integral_constant<int, 3>{}, std::integral_constant<int, 1>{}));
  if constexpr (kStride2) {
    if (stride == 2) {
      switch (kernel) {
        case 3: return kernel_of(std::integral_constant<int, 3>{}, std::integral_constant<int, 2>{});
        case 5: return kernel_of(std::integral_constant<int, 5>{}, std::integral_constant<int, 2>{});
        default: return Kernel{nullptr};
      }
    }
  }
  if (stride != 1) return Kernel{nullptr};
  switch (kernel) {
    case 3: return kernel_of(std::integral_constant<int, 3>{}, std::integral_constant<int, 1>{});
    case 5: return kernel_of(std::integral_constant<int, 5>{}, std::integral_constant<int, 1>{});
    case 7: return kernel_of(std::integral_constant<int, 7>{}, std::integral_constant<int, 1>{});
    default: return Kernel{nullptr};
  }
}

template <typename scalar_t, typename index_t, bool kBackward>
RegisterTiledKernel<scalar_t, index_t, kBackward> register_tiled_kernel_for(int kernel, int stride) {
  return register_tiled_instance<!kBackward>(kernel, stride, [](auto k, auto s) {
    return &register_tiled_nchw_kernel<scalar_t, index_t, kBackward, decltype(k)::value, decltype(s)::value>;
  });
}

struct RegisterTiledLaunch {
  dim3 grid, block;
  RegisterTile tile;
  size_t shared_bytes;
};

// Extra shared-memory wavefronts of a window load, in the worst quarter warp of the block: the
// 8 threads of a quarter warp read 16 bytes each, conflict-free when their addresses (in
// 16-byte units) fall in 8 different bank groups. Windows start col_step_units apart along a
// row of threads, row_step_units apart down the block and plane_units apart across planes.
inline int quarter_warp_conflicts(dim3 block, int col_step_units, int row_step_units, int plane_units) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  int worst = 0;
  for (int first = 0; first < threads; first += 8) {
    int uses[8] = {};
    for (int t = first; t < std::min(first + 8, threads); ++t) {
      const int plane = t % block.x, tx = t / block.x % block.y, ty = t / (block.x * block.y);
      const int address = plane * plane_units + ty * row_step_units + tx * col_step_units;
      worst = std::max(worst, ++uses[address % 8]);
    }
  }
  return worst - 1;
}

// The filters the register-tiled kernels are compiled for: square 3, 5 or 7 at stride 1, square 3
// or 5 at stride 2, dilation 1. (Backward-input reaches them as a stride-1 correlation only.)
inline bool has_register_tiled_filter(const PassGeometry& g) {
  return g.kernel_w == g.kernel_h && is_register_tiled_kernel_size(g.kernel_h) && g.stride_h == g.stride_w &&
         is_register_tiled_stride(g.kernel_h, g.stride_h) && g.dilation_h == 1 && g.dilation_w == 1;
}

// How a register tile covers a dst plane: bx x by threads (a power of two wide, up to 32, 128
// columns; as tall as the plane up to the block's threads and blockDim.z's limit of 64, the
// plane's rows of thread blocks shared evenly by the fewest tiles), tiles_h x tiles_w tiles.
struct RegisterTileShape {
  int bx, by;
  int64_t block_rows, tiles_h, tiles_w;
};

inline RegisterTileShape register_tile_shape(const PassGeometry& g) {
  int bx = 1;
  while (bx < 32 && bx * kBlockCols < g.dst_w) bx *= 2;
  const int64_t block_rows = (g.dst_h + kBlockRows - 1) / kBlockRows;
  const int max_by = std::min(kThreads / bx, 64);
  const int64_t tiles_h = (block_rows + max_by - 1) / max_by;
  const int by = static_cast<int>((block_rows + tiles_h - 1) / tiles_h);
  const int64_t tiles_w = (g.dst_w + bx * kBlockCols - 1) / (bx * kBlockCols);
  return {bx, by, block_rows, tiles_h, tiles_w};
}

// The shape with the plane's rows of thread blocks shared by about twice as many tiles
// (fewer rows of threads a tile, by > 1 before).
inline void split_tile_rows(RegisterTileShape& s) {
  s.tiles_h *= 2;
  s.by = static_cast<int>((s.block_rows + s.tiles_h - 1) / s.tiles_h);
  s.tiles_h = (s.block_rows + s.by - 1) / s.by;
}

// A smaller register-tile block (for more blocks, or a tile that fits): half the planes, else
// fewer rows of threads; false, changing nothing, where it is one plane of one row already.
inline bool shrink_register_block(int& planes, RegisterTileShape& shape) {
  if (planes > 1) {
    planes /= 2;
  } else if (shape.by > 1) {
    split_tile_rows(shape);
  } else {
    return false;
  }
  return true;
}

// A register tile's input rows and columns: those of by x bx thread blocks at the pass's stride.
inline int register_tile_in_h(const PassGeometry& g, int by) {
  return input_extent(by * kBlockRows, g.stride_h, g.kernel_h, 1);
}
inline int register_tile_in_w(const PassGeometry& g, int bx) {
  return input_extent(bx * kBlockCols, g.stride_w, g.kernel_w, 1);
}

// A block's shared memory, in 16-byte units: a plane holds `lead_units` (its weights, if any),
// then its input tile of tile_in_h rows of `pitch_units`. Pitch and plane stride are padded to
// the ones with the fewest bank conflicts for the block's window loads.
struct RegisterTileLayout {
  int pitch_units, plane_units;
  size_t bytes(int planes, size_t unit) const { return size_t(planes) * plane_units * unit; }
};

// `window_units`: the 16-byte vectors a thread reads of each window row; `stride`: the pass's
// (a thread's window starts kBlockCols * stride columns after its neighbour's).
template <typename acc_t>
RegisterTileLayout register_tile_layout(dim3 block, int window_units, int tile_in_h, int lead_units, int stride) {
  constexpr int V = kVector16<acc_t>;
  const int col_step_units = kBlockCols * stride / V;
  // Up to the end of the last thread's window.
  const int min_pitch_units = (static_cast<int>(block.y) - 1) * col_step_units + window_units;
  RegisterTileLayout best{0, 0};
  int best_conflicts = std::numeric_limits<int>::max();
  for (int pitch_pad = 0; pitch_pad < 8; ++pitch_pad) {
    for (int plane_pad = 0; plane_pad < (block.x > 1 ? 8 : 1); ++plane_pad) {
      const int pitch_units = min_pitch_units + pitch_pad;
      const int plane_units = lead_units + tile_in_h * pitch_units + plane_pad;
      const int conflicts =
          quarter_warp_conflicts(block, col_step_units, kBlockRows * stride * pitch_units, plane_units);
      if (conflicts < best_conflicts) {
        best_conflicts = conflicts;
        best = {pitch_units, plane_units};
      }
    }
  }
  return best;
}

// The most thread groups (RegisterTile::groups) a block of `block` can have: kThreads threads,
// and blockDim.z = block.z x groups at most 64.
inline int most_thread_groups(dim3 block) {
  return std::min(kThreads / static_cast<int>(block.x * block.y * block.z), 64 / static_cast<int>(block.z));
}

// Thread groups for a register-tiled launch of `blocks` blocks of `block` (RegisterTile::groups:
// the groups past the first only stage). Where the grid is on the GPU all at once even in blocks
// of kThreads threads (batch 1: a fraction of a wave, blocks of 16 to 224 threads each staging its
// tile in a chain of loads that nothing hides), as many as fill kThreads threads; one where the
// grid is larger, so that no wave is added.
template <typename acc_t>
int register_tile_groups(int64_t blocks, dim3 block, size_t shared_bytes, int64_t sm_count) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int groups = most_thread_groups(block);
  if (groups <= 1) return 1;
  const int registers = registers_within_bounds(tile_min_blocks<acc_t>());
  return blocks <= sm_count * sm90_blocks_per_sm(threads * groups, shared_bytes, registers) ? groups : 1;
}

// A register-tiled launch for this pass, or nothing when its filter is not one of the
// compiled sizes or no tile fits. As many planes share a block as fill 256 threads. Then, while
// the grid has fewer blocks than the GPU's `sm_count` SMs (batch 1), blocks hold fewer planes,
// then fewer rows; and while the tile does not fit in shared memory (stride 2 reads four times
// the input), fewer planes, then fewer rows. Last, register_tile_groups. The caller sets
// tile.row_access (register_tile_row_access: it depends on dst's address).
template <typename acc_t>
std::optional<RegisterTiledLaunch> plan_register_tiled(const PassGeometry& g, int64_t sm_count) {
  constexpr int V = kVector16<acc_t>;
  if (!has_register_tiled_filter(g)) return std::nullopt;
  const int kernel = g.kernel_h;
  const int64_t plane_count = g.batch * g.dst_channels;
  RegisterTileShape shape = register_tile_shape(g);
  int planes = 1;
  while (2 * planes * shape.bx * shape.by <= kThreads) planes *= 2;
  while ((plane_count + planes - 1) / planes * shape.tiles_h * shape.tiles_w < sm_count &&
         shrink_register_block(planes, shape)) {
  }

  const int weight_units = register_tile_weight_slots<acc_t>(kernel) / V;
  const int window_units = register_tile_window_vectors<acc_t>(kernel, g.stride_w);
  while (true) {
    const dim3 block(planes, shape.bx, shape.by);
    const int tile_in_h = register_tile_in_h(g, shape.by);
    const auto layout = register_tile_layout<acc_t>(block, window_units, tile_in_h, weight_units, g.stride_w);
    const size_t bytes = layout.bytes(planes, sizeof(Vector16<acc_t>));
    if (bytes <= kMaxSharedBytes) {
      const int64_t plane_groups = (plane_count + planes - 1) / planes;
      if (plane_groups > std::numeric_limits<int32_t>::max() || shape.tiles_h > 65535 || shape.tiles_w > 65535) {
        return std::nullopt;
      }
      RegisterTile tile{layout.pitch_units * V, layout.plane_units * V, tile_in_h, register_tile_in_w(g, shape.bx),
                        false};
      tile.groups = register_tile_groups<acc_t>(plane_groups * shape.tiles_h * shape.tiles_w, block, bytes, sm_count);
      return RegisterTiledLaunch{dim3(static_cast<unsigned>(plane_groups), static_cast<unsigned>(shape.tiles_h),
                                      static_cast<unsigned>(shape.tiles_w)),
                                 dim3(block.x, block.y, block.z * tile.groups), tile, bytes};
    }
    if (!shrink_register_block(planes, shape)) return std::nullopt;
  }
}

// How many planes of plane_threads threads a block holds (at most max_planes, as many as fit 256
// threads and fits(planes)): the fewest that fill the largest share of their warps' lanes.
template <typename Fits>
int planes_filling_warps(int plane_threads, int64_t max_planes, Fits fits) {
  int planes = 1;
  double best_share = 0.0;
  for (int p = 1; p * plane_threads <= kThreads && p <= max_planes && fits(p); ++p) {
    const int threads = p * plane_threads;
    const double share = double(threads) / double((threads + 31) / 32 * 32);
    if (share > best_share) {
      best_share = share;
      planes = p;
    }
  }
  return planes;
}

// The filters the large-filter kernel takes: stride 1 and dilation 1, at least
// kLargeFilterMinTaps taps, not a register-tiled size, on planes of 2 rows or more (a thread's
// kBlockRows rows waste at most half their work; conv1d, H = 1, keeps the tiled kernel's long rows).
inline bool has_large_filter(const PassGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1 &&
         g.kernel_h * g.kernel_w >= kLargeFilterMinTaps && !has_register_tiled_filter(g) && g.dst_h >= 2;
}

// Thread groups for a large-filter launch of `blocks` blocks of `block` (RegisterTile::groups: they
// share out the window's `window_rows` rows, two at least each, and add their sums through shared
// memory): the number with the most warps on the GPU at once (blocks an SM at the kernel's
// register bound, shared memory and threads, times the warps of a block, over the grid's first
// wave), a number more only where it brings a quarter more warps (each group adds its sums once).
// On 7x7 and 14x14 planes one group was a warp a block, ten blocks an SM by shared memory: ten
// warps to hide the latency of its shared loads.
template <typename acc_t>
int large_filter_groups(int64_t blocks, dim3 block, size_t tile_bytes, int window_rows, int64_t sm_count) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int registers = registers_within_bounds(tile_min_blocks<acc_t>());
  const int most = std::min(most_thread_groups(block), window_rows / 2);
  int best = 1;
  int64_t best_warps = 0;
  for (int groups = 1; groups == 1 || groups <= most; ++groups) {
    const size_t bytes = large_filter_shared_bytes<acc_t>(tile_bytes, groups, threads);
    if (bytes > kMaxSharedBytes) break;
    const int64_t per_sm = sm90_blocks_per_sm(threads * groups, bytes, registers);
    const int64_t warps = std::min(blocks, sm_count * per_sm) * ((threads * groups + 31) / 32);
    if (4 * warps > 5 * best_warps) {
      best = groups;
      best_warps = warps;
    }
  }
  return best;
}

// A large-filter launch for this pass, or nothing when the kernel does not take the filter or
// even one row of threads' tile does not fit in shared memory. A tile is as wide as the plane
// (up to 32 threads, 128 columns, in the fewest tiles), as tall as the threads and shared memory
// allow; planes share a block where that fills whole warps. While the grid has fewer blocks
// than the GPU's `sm_count` SMs (batch 1), blocks hold fewer planes, then fewer rows. Last,
// large_filter_groups. The caller sets tile.row_access (NCHW destinations only;
// register_tile_row_access).
template <typename acc_t>
std::optional<RegisterTiledLaunch> plan_large_filter(const PassGeometry& g, int64_t sm_count) {
  constexpr int V = kVector16<acc_t>;
  constexpr size_t kUnit = sizeof(Vector16<acc_t>);
  if (!has_large_filter(g)) return std::nullopt;
  const int64_t plane_count = g.batch * g.dst_channels;
  const int64_t block_cols = (g.dst_w + kBlockCols - 1) / kBlockCols;
  const int64_t tiles_w = (block_cols + 31) / 32;
  const int bx = static_cast<int>((block_cols + tiles_w - 1) / tiles_w);
  const int64_t block_rows = (g.dst_h + kBlockRows - 1) / kBlockRows;
  const int weight_units = g.kernel_h * large_filter_weight_pitch(g.kernel_w) / V;
  const int window_units = large_filter_window_vectors<acc_t>(g.kernel_w);
  auto layout_of = [&](int planes, int by) {
    return register_tile_layout<acc_t>(dim3(planes, bx, by), window_units, input_extent(by * kBlockRows, 1, g.kernel_h, 1),
                                       weight_units, 1);
  };
  auto fits = [&](int planes, int by) { return layout_of(planes, by).bytes(planes, kUnit) <= kMaxSharedBytes; };

  // Rows of threads: the fewest tiles down the plane whose rows fit the threads and shared memory.
  int64_t tiles_h = (block_rows + std::min(kThreads / bx, 64) - 1) / std::min(kThreads / bx, 64);
  int by = static_cast<int>((block_rows + tiles_h - 1) / tiles_h);
  while (!fits(1, by)) {
    if (by == 1) return std::nullopt;
    tiles_h = (block_rows + by - 2) / (by - 1);
    by = static_cast<int>((block_rows + tiles_h - 1) / tiles_h);
  }
  int planes = planes_filling_warps(bx * by, kThreads, [&](int p) { return fits(p, by); });
  auto blocks = [&] { return (plane_count + planes - 1) / planes * tiles_h * tiles_w; };
  while (blocks() < sm_count && planes > 1) --planes;
  while (blocks() < sm_count && by > 1) {
    tiles_h = (block_rows + by - 2) / (by - 1);
    by = static_cast<int>((block_rows + tiles_h - 1) / tiles_h);
  }

  const int64_t plane_groups = (plane_count + planes - 1) / planes;
  if (plane_groups > std::numeric_limits<int32_t>::max() || tiles_h > 65535 || tiles_w > 65535) return std::nullopt;
  const dim3 block(planes, bx, by);
  const auto layout = layout_of(planes, by);
  const int tile_in_h = input_extent(by * kBlockRows, 1, g.kernel_h, 1);
  const int tile_in_w = input_extent(bx * kBlockCols, 1, g.kernel_w, 1);
  RegisterTile tile{layout.pitch_units * V, layout.plane_units * V, tile_in_h, tile_in_w, false};
  const size_t tile_bytes = layout.bytes(planes, kUnit);
  tile.groups = large_filter_groups<acc_t>(plane_groups * tiles_h * tiles_w, block, tile_bytes,
                                           kBlockRows + g.kernel_h - 1, sm_count);
  return RegisterTiledLaunch{
      dim3(static_cast<unsigned>(plane_groups), static_cast<unsigned>(tiles_h), static_cast<unsigned>(tiles_w)),
      dim3(block.x, block.y, block.z * tile.groups), tile,
      large_filter_shared_bytes<acc_t>(tile_bytes, tile.groups, static_cast<int>(block.x * block.y * block.z))};
}

struct LargeFilterGradWeightLaunch {
  dim3 grid, block;
  RegisterTile tile;  // the input tile of a whole band; row_access unused
  LargeFilterGradWeightWork work;
  size_t shared_bytes;
};

// A large-filter weight-gradient launch, or nothing when the kernel does not take the filter
// (as the large-filter kernel, and at least 2 kernel rows), the taps need more than 256 threads,
// or even a one-row band does not fit. Threads cover the taps (bx x by blocks of 4x4); a band
// is as many grad_output rows as fit in 48 KB with the input rows it needs; slots take as many
// channels as fill the largest share of their warps' lanes; then small batches get fewer slots
// and narrower bands; slices give about 16 blocks an SM.
template <typename acc_t>
std::optional<LargeFilterGradWeightLaunch> plan_large_filter_grad_weight(const PassGeometry& g, int sm_count) {
  constexpr int V = kVector16<acc_t>;
  constexpr size_t kUnit = sizeof(Vector16<acc_t>);
  if (!has_large_filter(g) || g.kernel_h < kBlockRows / 2) return std::nullopt;
  const int bx = (g.kernel_w + kBlockCols - 1) / kBlockCols;
  const int by = (g.kernel_h + kBlockRows - 1) / kBlockRows;
  if (bx * by > kThreads || by > 64) return std::nullopt;
  const int dst_w = static_cast<int>(g.dst_w);
  const int go_units = large_filter_weight_pitch(dst_w) / V;  // a band row of grad_output
  const int window_units = large_filter_window_vectors<acc_t>(dst_w);
  auto layout_of = [&](int planes, int band_rows) {
    return register_tile_layout<acc_t>(dim3(planes, bx, by), window_units,
                                       input_extent(band_rows, 1, by * kBlockRows, 1), band_rows * go_units, 1);
  };
  auto fits = [&](int planes, int band_rows) {
    return layout_of(planes, band_rows).bytes(planes, kUnit) <= kMaxSharedBytes;
  };
  int64_t bands = 1;
  int band_rows = static_cast<int>(g.dst_h);
  auto split = [&](int64_t into) {  // grad_output rows in `into` bands, shared evenly
    bands = into;
    band_rows = static_cast<int>((g.dst_h + bands - 1) / bands);
    bands = (g.dst_h + band_rows - 1) / band_rows;
  };
  while (!fits(1, band_rows)) {
    if (band_rows == 1) return std::nullopt;
    split(bands * 2);
  }

  int planes = planes_filling_warps(bx * by, g.dst_channels, [&](int p) { return fits(p, band_rows); });
  // Small batches: fewer slots a block, then bands of down to 4 rows, until every SM has 4 blocks.
  const int64_t min_blocks = 4 * int64_t(sm_count);
  auto blocks = [&] { return (g.dst_channels + planes - 1) / planes * g.batch * bands; };
  while (blocks() < min_blocks && planes > 1) --planes;
  while (blocks() < min_blocks && band_rows > 4) split(bands * 2);

  const int64_t channel_groups = (g.dst_channels + planes - 1) / planes;
  const int64_t items = g.batch * bands;
  const int64_t wanted = (16 * int64_t(sm_count) + channel_groups - 1) / channel_groups;
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>({items, wanted, 65535}));
  const int64_t items_per_slice = (items + slices - 1) / slices;
  const int64_t used_slices = (items + items_per_slice - 1) / items_per_slice;
  if (channel_groups > std::numeric_limits<int32_t>::max()) return std::nullopt;
  const auto layout = layout_of(planes, band_rows);
  return LargeFilterGradWeightLaunch{
      dim3(static_cast<unsigned>(channel_groups), static_cast<unsigned>(used_slices)), dim3(planes, bx, by),
      RegisterTile{layout.pitch_units * V, layout.plane_units * V, input_extent(band_rows, 1, by * kBlockRows, 1),
                   input_extent(dst_w, 1, bx * kBlockCols, 1), false},
      LargeFilterGradWeightWork{band_rows, bands, items_per_slice}, layout.bytes(planes, kUnit)};
}

struct ChannelsLastLaunch {
  dim3 grid, block;
  ChannelsLastTile tile;
  size_t shared_bytes;
};

// Channel vectors per block: up to 8 (128 bytes of each pixel), fewer where 8 would
// leave more than a quarter of the block's vectors past the last channel.
inline int channel_vectors_per_block(int64_t channel_vectors) {
  int vectors = 8;
  while (vectors > 1 && (vectors > channel_vectors ||
                         4 * ((channel_vectors + vectors - 1) / vectors * vectors - channel_vectors) > channel_vectors)) {
    vectors /= 2;
  }
  return vectors;
}

// A channels_last tiled launch, or nothing when the layout does not allow whole channel
// vectors (multiplier other than 1, channels not a multiple of the vector) or no tile fits
// in shared memory. The caller checks that src and dst are 16-byte aligned.
// Tiles are tried from the largest down (vectors, then rows, then columns). Of those that
// waste at most half their lanes past the plane's edge, the first with at least `min_blocks`
// blocks wins, so that small problems (batch 1) still fill the GPU, else the one with the
// most blocks; where every tile wastes more, the largest.
template <typename scalar_t>
std::optional<ChannelsLastLaunch> plan_tiled_channels_last(const PassGeometry& g, int64_t min_blocks) {
  constexpr int V = kVector16<scalar_t>;
  if (g.multiplier != 1 || g.dst_channels % V != 0 || g.src_channels != g.dst_channels) return std::nullopt;
  if (g.batch > 65535) return std::nullopt;
  const int64_t channel_vectors = g.dst_channels / V;
  const int64_t taps = int64_t(g.kernel_h) * g.kernel_w;
  std::optional<ChannelsLastLaunch> largest, fullest;
  int64_t fullest_blocks = 0;
  for (int vectors = channel_vectors_per_block(channel_vectors); vectors >= 1; vectors /= 2) {
    const int lanes = kThreads / vectors;
    const int64_t channel_blocks = (channel_vectors + vectors - 1) / vectors;
    if (channel_blocks > 65535) continue;
    int rows = std::min(8, lanes);
    while (rows > 1 && rows / 2 >= g.dst_h) rows /= 2;  // conv1d (H = 1) gets one long row
    for (; rows >= 1; rows /= 2) {
      const int lanes_w = lanes / rows;
      for (int cols = static_cast<int>(std::min<int64_t>((g.dst_w + lanes_w - 1) / lanes_w, kMaxColsPerThread));
           cols >= 1; cols /= 2) {
        const int tile_w = lanes_w * cols;
        const int tile_in_h = input_extent(rows, g.stride_h, g.kernel_h, g.dilation_h);
        const int tile_in_w = input_extent(tile_w, g.stride_w, g.kernel_w, g.dilation_w);
        const size_t bytes = (size_t(tile_in_h) * tile_in_w + taps) * vectors * sizeof(Vector16<scalar_t>);
        const int64_t tiles_h = (g.dst_h + rows - 1) / rows;
        const int64_t tiles_w = (g.dst_w + tile_w - 1) / tile_w;
        if (bytes > kMaxSharedBytes || tiles_h * tiles_w > std::numeric_limits<int32_t>::max()) continue;
        const ChannelsLastLaunch launch{
            dim3(static_cast<unsigned>(tiles_h * tiles_w), static_cast<unsigned>(channel_blocks),
                 static_cast<unsigned>(g.batch)),
            dim3(vectors, lanes), ChannelsLastTile{lanes_w, cols, tile_in_h, tile_in_w, static_cast<int>(tiles_w)},
            bytes};
        const int64_t blocks = tiles_h * tiles_w * channel_blocks * g.batch;
        const bool half_used = 2 * g.dst_h * g.dst_w >= tiles_h * rows * tiles_w * tile_w;
        if (half_used && blocks >= min_blocks) return launch;
        if (!largest) largest = launch;
        if (half_used && blocks > fullest_blocks) {
          fullest = launch;
          fullest_blocks = blocks;
        }
      }
    }
  }
  return fullest ? fullest : largest;
}

// The register-tiled channels_last kernel for a filter size and stride (those of
// has_register_tiled_filter; backward-input at stride 1 only), or null.
template <typename scalar_t, typename index_t, bool kBackward>
using ChannelsLastRegisterTiledKernel = void (*)(const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*,
                                                 PassGeometry, ChannelsLastTile);

template <typename scalar_t, typename index_t, bool kBackward>
ChannelsLastRegisterTiledKernel<scalar_t, index_t, kBackward> channels_last_register_tiled_kernel_for(int kernel,
                                                                                                      int stride) {
  return register_tiled_instance<!kBackward>(kernel, stride, [](auto k, auto s) {
    return &channels_last_register_tiled_kernel<scalar_t, index_t, kBackward, decltype(k)::value, decltype(s)::value>;
  });
}

// The least share of a register-tiled channels_last launch's output slots (a lane's kBlockRows
// outputs, over whole warps) that must be outputs of the plane: below it (planes of fewer rows
// than kBlockRows, mostly) the idle slots would cost more than the kernel saves over
// tiled_channels_last_kernel, which then serves the pass.
constexpr double kMinRegisterTileUse = 2.0 / 3.0;

// A register-tiled channels_last launch, or nothing where the kernel does not serve the pass (the
// filter, the multiplier, channels not a whole number of 16-byte vectors) or no tile uses
// kMinRegisterTileUse of its slots. The caller checks 32-bit indexing and 16-byte alignment.
// For each block of vectors (as many as channel_vectors_per_block allows, then fewer) and each
// most rows of lanes (8 down to 1), the plane's rows of thread blocks and its columns are shared
// evenly by the fewest tiles, so that few slots fall past the plane's edge (a 56x56 plane gets
// 28 x 8 tiles: 7 rows of 8 lanes). Of the tiles that fit in shared memory, those giving
// `min_blocks` blocks come first (else the most blocks), so that small problems (batch 1) still
// spread over the GPU; then the best use of slots (in steps of 1/16), the most vectors (the widest
// global accesses), and the fewest input vectors staged an output.
template <typename scalar_t>
std::optional<ChannelsLastLaunch> plan_channels_last_register_tiled(const PassGeometry& g, int64_t min_blocks) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<scalar_t>;
  if (!has_register_tiled_filter(g) || g.multiplier != 1 || g.dst_channels % V != 0 ||
      g.src_channels != g.dst_channels || g.batch > 65535) {
    return std::nullopt;
  }
  const int64_t channel_vectors = g.dst_channels / V;
  const int64_t block_rows = (g.dst_h + kBlockRows - 1) / kBlockRows;
  const size_t tap_bytes = size_t(g.kernel_h) * g.kernel_w * V * sizeof(acc_t);  // a vector's weights
  struct Candidate {
    ChannelsLastLaunch launch;
    int64_t blocks;
    int use_sixteenths;
    int vectors;
    double staged_per_output;
  };
  const auto better = [min_blocks](const Candidate& a, const Candidate& b) {
    const bool a_fills = a.blocks >= min_blocks, b_fills = b.blocks >= min_blocks;
    if (a_fills != b_fills) return a_fills;
    if (!a_fills && a.blocks != b.blocks) return a.blocks > b.blocks;
    if (a.use_sixteenths != b.use_sixteenths) return a.use_sixteenths > b.use_sixteenths;
    if (a.vectors != b.vectors) return a.vectors > b.vectors;
    return a.staged_per_output < b.staged_per_output;
  };
  std::optional<Candidate> best;
  for (int vectors = channel_vectors_per_block(channel_vectors); vectors >= 1; vectors /= 2) {
    const int lanes = kThreads / vectors;
    const int64_t channel_blocks = (channel_vectors + vectors - 1) / vectors;
    if (channel_blocks > 65535) continue;
    for (int most_rows = std::min(8, lanes); most_rows >= 1; --most_rows) {
      const int64_t tiles_h = (block_rows + most_rows - 1) / most_rows;
      const int lane_rows = static_cast<int>((block_rows + tiles_h - 1) / tiles_h);
      if (lane_rows != most_rows) continue;  // the shape of a smaller most_rows
      const int most_w = lanes / lane_rows;
      const int64_t tiles_w = (g.dst_w + most_w - 1) / most_w;
      const int lanes_w = static_cast<int>((g.dst_w + tiles_w - 1) / tiles_w);
      const int tile_in_h = input_extent(lane_rows * kBlockRows, g.stride_h, g.kernel_h, 1);
      const int tile_in_w = input_extent(lanes_w, g.stride_w, g.kernel_w, 1);
      const size_t bytes = size_t(tile_in_h) * tile_in_w * vectors * sizeof(Vector16<scalar_t>) + tap_bytes * vectors;
      if (bytes > kMaxSharedBytes || tiles_h * tiles_w > std::numeric_limits<int32_t>::max()) continue;
      const int threads = vectors * lane_rows * lanes_w;
      const double warp_lanes = double((threads + 31) / 32 * 32) / vectors;  // a tile's lanes, idle ones too
      const double use = double(g.dst_h) * g.dst_w / (double(tiles_h) * tiles_w * warp_lanes * kBlockRows);
      if (use < kMinRegisterTileUse) continue;
      const Candidate c{
          ChannelsLastLaunch{dim3(static_cast<unsigned>(tiles_h * tiles_w), static_cast<unsigned>(channel_blocks),
                                  static_cast<unsigned>(g.batch)),
                             dim3(vectors, lane_rows * lanes_w),
                             ChannelsLastTile{lanes_w, 1, tile_in_h, tile_in_w, static_cast<int>(tiles_w)}, bytes},
          tiles_h * tiles_w * channel_blocks * g.batch, static_cast<int>(use * 16), vectors,
          double(tile_in_h) * tile_in_w / (lane_rows * kBlockRows * lanes_w)};
      if (!best || better(c, *best)) best = c;
    }
  }
  if (!best) return std::nullopt;
  return best->launch;
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


struct GradWeightPlan {
  bool channels_last;  // the strided kernel; else the NCHW one
  int64_t channel_blocks, slices, rows_per_slice;
};

// Enough batch slices to fill the GPU about four times over, each of at least a few
// thousand output positions; the NCHW kernel needs both tensors NCHW-contiguous.
inline GradWeightPlan plan_grad_weight(const PassGeometry& g, bool both_nchw_contiguous, int sm_count) {
  const bool channels_last = !both_nchw_contiguous;
  const int64_t rows = g.batch * g.dst_h;
  const int64_t channel_blocks =
      channels_last ? (g.dst_channels + kChannelLanes - 1) / kChannelLanes : g.dst_channels;
  const int64_t min_positions_per_slice = 4 * kThreads;
  const int64_t wanted = std::max<int64_t>(1, (4 * int64_t(sm_count) + channel_blocks - 1) / channel_blocks);
  const int64_t useful = std::max<int64_t>(1, rows * g.dst_w / min_positions_per_slice);
  const int64_t slices = std::min<int64_t>({wanted, useful, std::max<int64_t>(rows, 1), 65535});
  return {channels_last, channel_blocks, slices, (rows + slices - 1) / slices};
}

// The general weight-gradient kernel for a filter: kernel_of(std::integral_constant<int, kSlots>)
// with the tap slots grad_weight_tap_slots picks (so no 16-slot kernel exists for 64-bit indices).
template <typename index_t, typename KernelOf>
auto grad_weight_kernel_for_slots(int taps_count, KernelOf kernel_of) {
  constexpr bool index64 = sizeof(index_t) == 8;
  const int slots = grad_weight_tap_slots(taps_count, index64);
  if constexpr (!index64) {
    if (slots == kTapsPerPass) return kernel_of(std::integral_constant<int, kTapsPerPass>{});
  }
  return slots == 4 ? kernel_of(std::integral_constant<int, 4>{}) : kernel_of(std::integral_constant<int, 9>{});
}

template <typename scalar_t, typename index_t>
auto grad_weight_nchw_kernel_for(int taps_count) {
  return grad_weight_kernel_for_slots<index_t>(
      taps_count, [](auto slots) { return &grad_weight_nchw_kernel<scalar_t, index_t, decltype(slots)::value>; });
}

template <typename scalar_t, typename index_t>
auto grad_weight_channels_last_kernel_for(int taps_count) {
  return grad_weight_kernel_for_slots<index_t>(
      taps_count, [](auto slots) { return &grad_weight_channels_last_kernel<scalar_t, index_t, decltype(slots)::value>; });
}

// The register-blocked weight-gradient kernel compiled for a filter size, or null where there is none.
template <typename scalar_t, typename index_t>
using RegisterGradWeightKernel = void (*)(const scalar_t*, const scalar_t*, at::acc_type<scalar_t, true>*,
                                          at::acc_type<scalar_t, true>*, PassGeometry, RegisterTile,
                                          RegisterGradWeightWork);

template <typename scalar_t, typename index_t>
RegisterGradWeightKernel<scalar_t, index_t> grad_weight_register_tiled_kernel_for(int kernel, int stride) {
  return register_tiled_instance<true>(kernel, stride, [](auto k, auto s) {
    return &grad_weight_register_tiled_kernel<scalar_t, index_t, decltype(k)::value, decltype(s)::value>;
  });
}

struct RegisterGradWeightLaunch {
  dim3 grid, block;  // grid: (channels, slices)
  RegisterTile tile;
  RegisterGradWeightWork work;
  size_t shared_bytes;
};

// A register-tiled weight-gradient launch (g the forward geometry), or nothing where the
// filter is not a register-tiled one or no tile fits. Tiles are the forward kernel's; a
// block holds as many batch entries of its channel as fill 256 threads (no more than the
// batch has), fewer, then fewer rows of threads, while the tiles do not fit in shared memory;
// and each channel's items are cut into enough slices for about eight blocks per SM. Shared
// memory holds the tiles, then as many taps of the block's sums as fit.
// The caller sets tile.row_access (register_tile_row_access of grad_output).
template <typename acc_t>
std::optional<RegisterGradWeightLaunch> plan_register_grad_weight(const PassGeometry& g, int sm_count) {
  constexpr int V = kVector16<acc_t>;
  if (!has_register_tiled_filter(g) || g.batch < 1) return std::nullopt;
  if (g.dst_channels > std::numeric_limits<int32_t>::max()) return std::nullopt;
  const int kernel = g.kernel_h;
  const int taps = kernel * kernel;
  const int window_units = register_tile_window_vectors<acc_t>(kernel, g.stride_w);
  RegisterTileShape shape = register_tile_shape(g);
  int planes = 1;
  while (2 * planes * shape.bx * shape.by <= kThreads && planes < g.batch) planes *= 2;
  while (true) {
    const dim3 block(planes, shape.bx, shape.by);
    const int tile_in_h = register_tile_in_h(g, shape.by);
    const auto layout = register_tile_layout<acc_t>(block, window_units, tile_in_h, 0, g.stride_w);
    const size_t tile_bytes = layout.bytes(planes, sizeof(Vector16<acc_t>));
    if (tile_bytes <= kMaxSharedBytes) {
      const int threads = planes * shape.bx * shape.by;
      const int reduce_taps = static_cast<int>(std::min<size_t>(taps, kMaxSharedBytes / (threads * sizeof(acc_t))));
      const size_t bytes = std::max(tile_bytes, size_t(reduce_taps) * threads * sizeof(acc_t));
      const int64_t items = (g.batch + planes - 1) / planes * shape.tiles_h * shape.tiles_w;
      const int64_t wanted = (8 * int64_t(sm_count) + g.dst_channels - 1) / g.dst_channels;
      const int64_t most_slices = std::max<int64_t>(1, std::min<int64_t>({wanted, items, 65535}));
      const int64_t items_per_slice = (items + most_slices - 1) / most_slices;
      const int64_t slices = (items + items_per_slice - 1) / items_per_slice;
      return RegisterGradWeightLaunch{
          dim3(static_cast<unsigned>(g.dst_channels), static_cast<unsigned>(slices)), block,
          RegisterTile{layout.pitch_units * V, layout.plane_units * V, tile_in_h, register_tile_in_w(g, shape.bx),
                       false},
          RegisterGradWeightWork{static_cast<int>(shape.tiles_h), static_cast<int>(shape.tiles_w), items,
                                 items_per_slice, reduce_taps},
          bytes};
    }
    if (!shrink_register_block(planes, shape)) return std::nullopt;
  }
}

// The channels_last register-blocked weight-gradient kernel for a filter size and stride, or null.
template <typename scalar_t, typename index_t>
using ChannelsLastGradWeightKernel = void (*)(const scalar_t*, const scalar_t*, at::acc_type<scalar_t, true>*,
                                              at::acc_type<scalar_t, true>*, PassGeometry,
                                              ChannelsLastGradWeightWork);

template <typename scalar_t, typename index_t, int kStride>
ChannelsLastGradWeightKernel<scalar_t, index_t> grad_weight_register_channels_last_kernel_for(int kernel) {
  switch (kernel) {
    case 3: return grad_weight_register_channels_last_kernel<scalar_t, index_t, 3, kStride>;
    case 5: return grad_weight_register_channels_last_kernel<scalar_t, index_t, 5, kStride>;
    case 7: return grad_weight_register_channels_last_kernel<scalar_t, index_t, 7, kStride>;
    default: return nullptr;
  }
}

template <typename scalar_t, typename index_t>
ChannelsLastGradWeightKernel<scalar_t, index_t> grad_weight_register_channels_last_kernel_for(int kernel, int stride) {
  return stride == 1 ? grad_weight_register_channels_last_kernel_for<scalar_t, index_t, 1>(kernel)
                     : grad_weight_register_channels_last_kernel_for<scalar_t, index_t, 2>(kernel);
}

struct ChannelsLastGradWeightLaunch {
  dim3 grid, block;  // grid: (channel blocks, slices); block: (channel lanes, position lanes)
  ChannelsLastGradWeightWork work;
  size_t shared_bytes;
};

// Whether the channels_last register-blocked weight gradient can take this pass (g the forward
// geometry): a square 3, 5 or 7 filter at stride 1 or 2 and dilation 1, multiplier 1, channels a
// whole number of a thread's group, and both tensors (channels_last-contiguous, which the caller
// checks) aligned to a group.
inline bool has_channels_last_register_grad_weight(const PassGeometry& g, const void* grad_output, const void* input,
                                                   size_t element_size) {
  const int group = element_size == 2 ? 2 : 1;  // kGradWeightChannels
  const size_t group_bytes = group * element_size;
  return g.kernel_w == g.kernel_h && is_register_tiled_kernel_size(g.kernel_h) && g.stride_h == g.stride_w &&
         (g.stride_h == 1 || g.stride_h == 2) && g.dilation_h == 1 && g.dilation_w == 1 && g.multiplier == 1 &&
         g.dst_channels % group == 0 && reinterpret_cast<uintptr_t>(grad_output) % group_bytes == 0 &&
         reinterpret_cast<uintptr_t>(input) % group_bytes == 0;
}

// Channel lanes: 32, or 16 or 8 where 32 would leave over an eighth of the lanes idle (so 144
// bf16 channels, 72 pairs, take 9 blocks of 8 lanes rather than 3 of 32 with 24 idle). The
// strips are cut into enough slices for about eight blocks per SM, each slice at least a few
// strips per position lane; shared memory holds as many taps of the block's sums as 48 KB allows.
template <typename scalar_t>
ChannelsLastGradWeightLaunch plan_channels_last_register_grad_weight(const PassGeometry& g, int sm_count) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int kChannels = kGradWeightChannels<scalar_t>;
  const int64_t groups = (g.dst_channels + kChannels - 1) / kChannels;
  int lanes = 32;
  while (lanes > 8 && 8 * ((groups + lanes - 1) / lanes * lanes - groups) > groups) lanes /= 2;
  const int position_lanes = kThreads / lanes;
  const int64_t channel_blocks = (groups + lanes - 1) / lanes;
  const int64_t strips_w = (g.dst_w + kBlockCols - 1) / kBlockCols;
  const int64_t strips = g.batch * g.dst_h * strips_w;
  const int64_t wanted = (8 * int64_t(sm_count) + channel_blocks - 1) / channel_blocks;
  const int64_t useful = strips / (4 * position_lanes);
  const int64_t most_slices = std::max<int64_t>(1, std::min<int64_t>({wanted, useful, 65535}));
  const int64_t strips_per_slice = (strips + most_slices - 1) / most_slices;
  const int64_t slices = std::max<int64_t>(1, (strips + strips_per_slice - 1) / strips_per_slice);
  const int taps = g.kernel_h * g.kernel_w;
  const int reduce_taps =
      static_cast<int>(std::min<size_t>(taps, kMaxSharedBytes / (size_t(kThreads) * kChannels * sizeof(acc_t))));
  return ChannelsLastGradWeightLaunch{
      dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(slices)), dim3(lanes, position_lanes),
      ChannelsLastGradWeightWork{strips_w, strips, strips_per_slice, reduce_taps},
      size_t(reduce_taps) * kThreads * kChannels * sizeof(acc_t)};
}

}  // namespace at::native::dwconv
