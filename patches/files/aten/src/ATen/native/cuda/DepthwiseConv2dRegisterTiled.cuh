#pragma once
// The register-tiled 2D depthwise kernels for square 3x3, 5x5 and 7x7 filters at stride 1 (3x3
// and 5x5 at stride 2), dilation 1: a thread holds a kBlockRows x kBlockCols block of outputs in
// registers over a tile staged in shared memory. Forward and backward-input (NCHW and
// channels_last), the weight gradients built on the same blocks, and their launch plans.

#include <ATen/native/cuda/DepthwiseConv2dGeneral.cuh>

namespace at::native::dwconv {

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

// Values a thread's store of a dst row moves at once: kBlockCols with row access, else 2 where
// rows are a whole number of pairs of 8 bytes or less and `dst` is aligned to one (14x14 planes),
// else 1. A warp whose lanes hold a row's blocks of 4 touched each sector of the row once a value
// (5.3x the fewest sectors at 14x14); a pair about halves that.
inline int register_tile_access_values(const PassGeometry& g, const void* dst, size_t element_size) {
  if (register_tile_row_access(g, dst, element_size)) return kBlockCols;
  const bool pairs = element_size <= 4 && g.dst_w % 2 == 0;
  return pairs && reinterpret_cast<uintptr_t>(dst) % (2 * element_size) == 0 ? 2 : 1;
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
          return Loaded{load_vector_or_zero(in_range && within(sy, src_h) && within(sx, src_w),
                                            src0 + pos.at[0] * plane_step + sy * src_w + sx),
                        pos.at[0] * t.plane_stride + row * t.pitch, first_col};
        },
        [&](int, const Loaded& loaded) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const int col = loaded.first_col + k;
            if (within(col, t.tile_in_w)) tiles[loaded.slot + col] = static_cast<acc_t>(loaded.v.v[k]);
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
        const bool inside = in_range && within(sy, src_h) && within(sx, src_w);
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

// store_block_row for dst rows of a whole number of pairs (register_tile_access_values 2): the
// values two at a time, as far as the plane's edge (cols_left is even), each pair one store of its
// bits (so that the CPU build, which the memory profile counts, makes one access of it too).
// (register_tile_access_values gives no pairs of doubles; they go a value at a time here.)
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void store_block_row_pairs(scalar_t* out, const acc_t (&values)[kBlockCols], int cols_left) {
  using PairBits = std::conditional_t<sizeof(scalar_t) == 4, uint64_t, uint32_t>;
#pragma unroll
  for (int j = 0; j < kBlockCols; j += 2) {
    if (j < cols_left) {
      const scalar_t pair[2] = {static_cast<scalar_t>(values[j]), static_cast<scalar_t>(values[j + 1])};
      if constexpr (sizeof(scalar_t) > 4) {
        out[j] = pair[0];
        out[j + 1] = pair[1];
      } else {
        PairBits bits;
        memcpy(&bits, pair, sizeof(bits));
        *reinterpret_cast<PairBits*>(out + j) = bits;
      }
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
// A thread's work in the register-tiled channels_last kernels: kBlockRows output rows of one
// column for one channel vector (V channels), its sums in acc[row][channel].

// The sums before the first tap: the channels' bias (forward, when given) or zero; `c` the vector's first channel.
template <bool kBackward, typename acc_t, int V, typename scalar_t, typename index_t>
__device__ __forceinline__ void start_channels_last_column(acc_t (&acc)[kBlockRows][V], const scalar_t* bias,
                                                           index_t c) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const acc_t start = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[c + k]) : acc_t(0);
#pragma unroll
    for (int i = 0; i < kBlockRows; ++i) acc[i][k] = start;
  }
}

// Adds the column's (kBlockRows - 1) * kStride + kKernel input rows times the filter: window row
// r's first pixel (tap kw = 0) at row_at(r), its pixels `vectors` vectors apart; the weights of
// channel vector `vec` staged in acc_t at `taps` (stage_weight_vectors). It walks the window a
// column at a time: the column's kKernel weights in registers, each input vector of the column read
// from shared memory and converted once and applied to every output row it feeds.
template <typename scalar_t, int kKernel, int kStride, typename acc_t, int V, typename RowAt>
__device__ __forceinline__ void accumulate_channels_last_column(acc_t (&acc)[kBlockRows][V], RowAt&& row_at,
                                                                const acc_t* taps, int vec, int vectors) {
  constexpr int kWindowRows = (kBlockRows - 1) * kStride + kKernel;
#pragma unroll
  for (int kw = 0; kw < kKernel; ++kw) {
    acc_t w[kKernel][V];
#pragma unroll
    for (int kh = 0; kh < kKernel; ++kh) {
      load_staged_weights<scalar_t>(taps, kh * kKernel + kw, vec, vectors, w[kh]);
    }
#pragma unroll
    for (int r = 0; r < kWindowRows; ++r) {
      const Vector16<scalar_t> loaded = row_at(r)[kw * vectors];
      acc_t in[V];
      widen_vector(loaded, in);
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
}

// Stores the column's rows that lie in the plane (`rows_left` from its first), its first at
// `out`, the next `row_step` values on.
template <typename scalar_t, typename acc_t, int V, typename index_t>
__device__ __forceinline__ void store_channels_last_column(const acc_t (&acc)[kBlockRows][V], scalar_t* out,
                                                           int rows_left, index_t row_step) {
  static_assert(V == kVector16<scalar_t>, "a column stores whole channel vectors");
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    if (i < rows_left) {
      Vector16<scalar_t> values;
#pragma unroll
      for (int k = 0; k < V; ++k) values.v[k] = static_cast<scalar_t>(acc[i][k]);
      store_vector(out + i * row_step, values);
    }
  }
}

// The channels_last register-tiled instances compiled for three blocks an SM as well, switched by the
// channels_last_register_tiled_three_blocks path: bfloat16 and half, 3x3 and 5x5 at stride 1. nvcc 13.0
// fits them in 80 registers with 2-5 % more instructions (sm_90 bf16 forward: 1,152 -> 1,176 at 3x3,
// 1,944 -> 2,048 at 5x5), where they took 89-108, and no spill but sm_80's 5x5: 6-8 words, each
// stored and loaded once a thread (the kernel is straight-line code). 7x7 spills 80 bytes at 80
// (v48); float and double take 72-96 and are left at two.
constexpr bool register_tiled_three_blocks_serve(int element_size, int kernel, int stride) {
  return element_size == 2 && (kernel == 3 || kernel == 5) && stride == 1;
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
// kThreeBlocks: bounded for kThreeBlocksPerSm blocks of kThreads an SM (80 registers: 6 of the
// 112-thread blocks 7x7 planes take, where 89-108 registers allowed 4-5), for the instances
// register_tiled_three_blocks_serve names; else for 2. The code is the same.
template <typename scalar_t, typename index_t, bool kBackward, int kKernel, int kStride, bool kThreeBlocks>
__global__ void __launch_bounds__(kThreads, kThreeBlocks ? kThreeBlocksPerSm : 2) channels_last_register_tiled_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const ChannelsLastTile t) {
  using acc_t = at::acc_type<scalar_t, true>;
  using Vec = Vector16<scalar_t>;
  constexpr int V = kVector16<scalar_t>;
  static_assert(!kBackward || kStride == 1, "backward-input is a stride-1 correlation");
  static_assert(!kThreeBlocks || register_tiled_three_blocks_serve(sizeof(scalar_t), kKernel, kStride),
                "only the half types' 3x3 and 5x5 at stride 1 fit 80 registers");
  DWCONV_SHARED_BYTES(shared_bytes);
  const int vectors = blockDim.x;
  const int threads = vectors * blockDim.y;
  Vec* tile = reinterpret_cast<Vec*>(shared_bytes);                                 // [tile pixel][vector]
  acc_t* taps = reinterpret_cast<acc_t*>(tile + t.tile_in_h * t.tile_in_w * vectors);  // stage_weight_vectors

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
  stage_weight_vectors(taps, weight, c0, channels, kKernel * kKernel, vectors,
                       staged_tap_pitch<acc_t, scalar_t>(vectors), tid, threads, kBackward);
  __syncthreads();  // the tile and the weights staged by every thread

  const int vec = threadIdx.x;
  const int ty = threadIdx.y / t.lanes_w;
  const int tx = threadIdx.y % t.lanes_w;
  const int y = y0 + ty * kBlockRows;
  const int x = x0 + tx;
  // Idle vectors of a part-filled group and lanes past the plane's edge: no barrier follows.
  if (vec >= live_vectors || y >= g.dst_h || x >= g.dst_w) return;

  acc_t acc[kBlockRows][V];
  start_channels_last_column<kBackward>(acc, bias, c0 + vec * V);
  const int row_step = t.tile_in_w * vectors;  // between tile rows, in vectors
  const Vec* window = tile + (ty * kBlockRows * kStride * t.tile_in_w + tx * kStride) * vectors + vec;
  accumulate_channels_last_column<scalar_t, kKernel, kStride>(
      acc, [&](int r) { return window + r * row_step; }, taps, vec, vectors);
  const index_t dst_h = g.dst_h, dst_w = g.dst_w;
  store_channels_last_column(acc, dst + ((n * dst_h + y) * dst_w + x) * channels + c0 + vec * V,
                             static_cast<int>(g.dst_h) - y, dst_w * channels);
}

// ---------------------------------------------------------------------------
// Register-blocked weight gradient (NCHW) for the register-tiled filters and strides: the
// blocks and shared input tiles of register_tiled_nchw_kernel with the roles exchanged. A thread holds
// its kBlockRows x kBlockCols block of grad_output and the kKernel^2 tap sums in registers;
// each input row of its window, read once as 16-byte shared loads, adds to the taps of every
// kernel row that pairs it with one of the thread's output rows. For 7x7 in float: 16 x 49
// FMAs per 30 16-byte shared loads and 4 row loads of grad_output, where grad_weight_nchw_kernel
// makes a global load and its index arithmetic for each of 49 x 16 FMAs.
// The planes of a block are batch entries of one channel (blockIdx.x), and blockIdx.y is a
// slice of that channel's work items (plane group, tile row, tile column). At the end the
// block's threads add up their sums in a fixed tree through shared memory, so every run gives
// the same bits.
// A warp's lanes sit on different batch entries (planes fastest, for the tile reads), so each of
// its grad_output loads reads as many planes. With row access a lane's row is one 16-byte load.
// Without it, a lane's scalar loads touch a sector each. Where one tile covers the plane (rows of
// 14 or 7) and a block holds many planes, the block first copies its planes' grad_output whole into
// shared memory, consecutive threads on consecutive values (a plane is one run of memory), and the
// threads read their blocks there (plan_register_grad_weight). Otherwise they load their rows directly.

// How the blocks of grad_weight_register_tiled_kernel share a channel's work: items are
// numbered with the tile column fastest, then the tile row, then the group of blockDim.x batch
// entries; slice s takes items [s * items_per_slice, (s + 1) * items_per_slice).
struct RegisterGradWeightWork {
  int tiles_h, tiles_w;
  int64_t items, items_per_slice;
  int reduce_taps;  // taps summed across the block at a time (shared memory holds that many per thread)
  // acc_t values between the block's grad_output planes in shared memory, ahead of its input
  // tiles (register_grad_weight_staged_stride); 0 where grad_output is read from global memory.
  int go_stride = 0;
};

// The acc_t values a block's staged grad_output planes take in grad_weight_register_tiled_kernel's
// shared memory, ahead of its input tiles (which start on a 16-byte boundary).
template <typename acc_t>
__host__ __device__ inline int staged_grad_output_values(int planes, int go_stride) {
  constexpr int V = kVector16<acc_t>;
  return (planes * go_stride + V - 1) / V * V;
}

// The block's first `planes` grad_output planes of plane_size values each, from src0 + p * plane_step
// into dst + p * stride: warp w copies planes w, w + warps, ..., its lanes on consecutive values,
// kStageVectors loads in flight a lane. A plane is one run of memory, so in a whole warp a value
// costs a load and a store at fixed offsets from the batch's first (a walk over (plane, value)
// with its carries and 64-bit address arithmetic took about 25 instructions a value); a last warp
// of fewer lanes (a block of fewer than 32 threads a plane group) steps by its lane count.
template <typename scalar_t, typename index_t>
__device__ __forceinline__ void stage_whole_planes(at::acc_type<scalar_t, true>* dst, int stride,
                                                   const scalar_t* src0, index_t plane_step, int planes,
                                                   int plane_size, int tid, int threads) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int kBatch = kStageVectors;
  const int warp = tid / 32, lane = tid % 32;
  const int warps = (threads + 31) / 32;
  const auto copy = [&](auto lanes) {  // 32 as a constant, or the last warp's count
    for (int p = warp; p < planes; p += warps) {
      const scalar_t* const src = src0 + p * plane_step;
      acc_t* const plane = dst + p * stride;
      for (int v0 = lane; v0 < plane_size; v0 += kBatch * lanes) {
        const scalar_t* const from = src + v0;
        acc_t* const to = plane + v0;
        acc_t values[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          values[b] = v0 + b * lanes < plane_size ? static_cast<acc_t>(from[b * lanes]) : acc_t(0);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          if (v0 + b * lanes < plane_size) to[b * lanes] = values[b];
        }
      }
    }
  };
  if (threads - warp * 32 >= 32) {
    copy(std::integral_constant<int, 32>{});
  } else {
    copy(threads - warp * 32);
  }
}

// The blocks an SM grad_weight_register_tiled_kernel is bounded for (its registers: at most 128 a
// thread in float and the half types, what the compiler needs of 255 in double).
template <typename acc_t>
constexpr int kRegisterGradWeightMinBlocks = sizeof(acc_t) == 8 ? 1 : 2;

// kStagedGradOutput: the instance for work.go_stride > 0, apart so that the copy's registers do not
// cost the layers that do not stage a block an SM (notes/performance.md, v34).
template <typename scalar_t, typename index_t, int kKernel, int kStride, bool kStagedGradOutput>
__global__ void __launch_bounds__(kThreads, kRegisterGradWeightMinBlocks<at::acc_type<scalar_t, true>>)
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
  // The staged grad_output planes, then the input tiles from a 16-byte boundary.
  const int go_values = kStagedGradOutput ? staged_grad_output_values<acc_t>(blockDim.x, work.go_stride) : 0;
  acc_t* const tiles = shared + go_values;
  acc_t* const tile = tiles + threadIdx.x * t.plane_stride;

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
        tiles, input + (n0 * src_channels + src_c) * src_plane_size, src_channels * src_plane_size, live_planes, g,
        t, src_y0, src_x0, tid, threads);
    if constexpr (kStagedGradOutput) {
      stage_whole_planes(shared, work.go_stride, grad_output + (n0 * dst_channels + c) * dst_plane_size,
                         dst_channels * dst_plane_size, live_planes, static_cast<int>(dst_plane_size), tid, threads);
    }
    __syncthreads();

    const int y = y0 + threadIdx.z * kBlockRows;
    const int x = x0 + threadIdx.y * kBlockCols;
    if (!live || y >= g.dst_h || x >= g.dst_w) continue;
    const scalar_t* go_plane = grad_output + (n * dst_channels + c) * dst_plane_size;
    acc_t go[kBlockRows][kBlockCols];
#pragma unroll
    for (int i = 0; i < kBlockRows; ++i) {
      const scalar_t* go_row = go_plane + static_cast<index_t>(y + i) * g.dst_w + x;
      if constexpr (kStagedGradOutput) {  // the same rows, zero past the plane's edges
        const acc_t* const staged_row =
            shared + threadIdx.x * work.go_stride + (y + i) * static_cast<int>(g.dst_w) + x;
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) go[i][j] = y + i < g.dst_h && x + j < g.dst_w ? staged_row[j] : acc_t(0);
      } else if (y + i >= g.dst_h) {
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
    whole_or_edge(y + kBlockRows > g.dst_h || x + kBlockCols > g.dst_w, [&](auto partial_block) {
      constexpr bool kPartial = decltype(partial_block)::value;
      walk_register_window<acc_t, kKernel, kStride>(window, t.pitch, [&](int i, int kh, const auto& in) {
        if (kPartial && y + i >= g.dst_h) return;
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) {
          if (kPartial && x + j >= g.dst_w) break;
#pragma unroll
          for (int kw = 0; kw < kKernel; ++kw) sums[kh * kKernel + kw] += go[i][j] * in[j * kStride + kw];
        }
      });
    });
  }

  // The block's sums, reduce_taps taps at a time: each thread's value of a tap at
  // shared[tap * threads + tid], then halves folded onto the lower lanes: through shared memory down
  // to 32 lanes, then by shuffles, a whole warp a tap, in the same order of additions. (Folded through
  // shared memory below 32, a warp's lanes spanned rows `threads` apart whose banks overlap, up to
  // twice the fewest wavefronts, and each step took a barrier.) Blocks of fewer than 32 threads fold
  // through shared memory to the end.
  int span = 1;
  while (span < threads) span *= 2;
  const int whole_warps = threads / kWarpLanes;
  const int warp = tid / kWarpLanes, lane = tid % kWarpLanes;
  for (int tap0 = 0; tap0 < block_sums; tap0 += work.reduce_taps) {
    const int chunk = smaller(work.reduce_taps, block_sums - tap0);
    const auto store_total = [&](int i, acc_t total) {
      if (tap0 + i < kTaps) {
        partial[(static_cast<int64_t>(blockIdx.y) * g.dst_channels + c) * kTaps + tap0 + i] = total;
      } else {
        partial_bias[static_cast<int64_t>(blockIdx.y) * g.dst_channels + c] = total;
      }
    };
    __syncthreads();  // no thread still reads the tile or the previous chunk
#pragma unroll
    for (int tap = 0; tap <= kTaps; ++tap) {
      if (tap >= tap0 && tap < tap0 + chunk) shared[(tap - tap0) * threads + tid] = sums[tap];
    }
    for (int half = span / 2; half >= (whole_warps > 0 ? kWarpLanes : 1); half /= 2) {
      __syncthreads();
      for (int i = tid; i < chunk * half; i += threads) {
        const int fold_lane = i % half;
        acc_t* values = shared + (i / half) * threads;
        if (fold_lane + half < threads) values[fold_lane] += values[fold_lane + half];
      }
    }
    __syncthreads();
    if (whole_warps == 0) {
      for (int i = tid; i < chunk; i += threads) store_total(i, shared[i * threads]);
      continue;
    }
    for (int i = warp; warp < whole_warps && i < chunk; i += whole_warps) {  // a warp's lanes together
      const acc_t total = add_down_warp(shared[i * threads + lane]);
      if (lane == 0) store_total(i, total);
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
    whole_or_edge(x0 + kBlockCols > dst_w, [&](auto partial_strip) {
      constexpr bool kPartial = decltype(partial_strip)::value;
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
        for (int j = 0; j < kBlockCols; ++j) {
          if (kPartial && x0 + j >= dst_w) break;
#pragma unroll
          for (int kw = 0; kw < kKernel; ++kw) {
#pragma unroll
            for (int k = 0; k < kChannels; ++k) sums[kh * kKernel + kw][k] += go[j][k] * in[j * kStride + kw][k];
          }
        }
      }
    });
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

// ---------------------------------------------------------------------------
// The register-tiled kernels' launches.

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

// The most accesses of one phase of a register-tile block's threads (planes fastest, then tx,
// then ty) that fall in one bank group: a wavefront serves phase_lanes threads (32 for 4-byte
// accesses, 16 for 8-byte, 8 for 16-byte), whose accesses conflict where their addresses, in
// units of the access, agree modulo phase_lanes. address_of(plane, tx, ty): distinct addresses,
// negative for a thread that makes no access.
template <typename AddressOf>
int most_accesses_on_a_bank(dim3 block, int phase_lanes, AddressOf address_of) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  int worst = 0;
  for (int first = 0; first < threads; first += phase_lanes) {
    int uses[32] = {};
    for (int t = first; t < std::min(first + phase_lanes, threads); ++t) {
      const int plane = t % block.x, tx = t / block.x % block.y, ty = t / (block.x * block.y);
      const int address = address_of(plane, tx, ty);
      if (address >= 0) worst = std::max(worst, ++uses[address % phase_lanes]);
    }
  }
  return worst;
}

// Extra shared-memory wavefronts of a window load, in the worst quarter warp of the block: the
// 8 threads of a quarter warp read 16 bytes each, conflict-free when their addresses (in
// 16-byte units) fall in 8 different bank groups. Windows start col_step_units apart along a
// row of threads, row_step_units apart down the block and plane_units apart across planes.
inline int quarter_warp_conflicts(dim3 block, int col_step_units, int row_step_units, int plane_units) {
  return most_accesses_on_a_bank(block, 8, [&](int plane, int tx, int ty) {
           return plane * plane_units + ty * row_step_units + tx * col_step_units;
         }) - 1;
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
int register_tile_groups(int64_t blocks, dim3 block, size_t shared_bytes, const GpuLimits& gpu) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int groups = most_thread_groups(block);
  if (groups <= 1) return 1;
  const int registers = registers_within_bounds(tile_min_blocks<acc_t>());
  return blocks <= gpu.sm_count * resident_blocks_per_sm(gpu, threads * groups, shared_bytes, registers) ? groups : 1;
}

// A register-tiled launch for this pass, or nothing when its filter is not one of the
// compiled sizes or no tile fits. As many planes share a block as fill 256 threads. Then, while
// the grid has fewer blocks than the GPU has SMs (batch 1), blocks hold fewer planes,
// then fewer rows; and while the tile does not fit in shared memory (stride 2 reads four times
// the input), fewer planes, then fewer rows. Last, register_tile_groups. The caller sets
// tile.row_access (register_tile_row_access: it depends on dst's address).
template <typename acc_t>
std::optional<RegisterTiledLaunch> plan_register_tiled(const PassGeometry& g, const GpuLimits& gpu) {
  constexpr int V = kVector16<acc_t>;
  if (!has_register_tiled_filter(g)) return std::nullopt;
  const int kernel = g.kernel_h;
  const int64_t plane_count = g.batch * g.dst_channels;
  RegisterTileShape shape = register_tile_shape(g);
  int planes = 1;
  while (2 * planes * shape.bx * shape.by <= kThreads) planes *= 2;
  while ((plane_count + planes - 1) / planes * shape.tiles_h * shape.tiles_w < gpu.sm_count &&
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
      tile.groups = register_tile_groups<acc_t>(plane_groups * shape.tiles_h * shape.tiles_w, block, bytes, gpu);
      return RegisterTiledLaunch{dim3(static_cast<unsigned>(plane_groups), static_cast<unsigned>(shape.tiles_h),
                                      static_cast<unsigned>(shape.tiles_w)),
                                 dim3(block.x, block.y, block.z * tile.groups), tile, bytes};
    }
    if (!shrink_register_block(planes, shape)) return std::nullopt;
  }
}

// The register-tiled channels_last kernel for a filter size and stride (those of
// has_register_tiled_filter; backward-input at stride 1 only) and bound (three_blocks, where
// register_tiled_three_blocks_serve), or null.
template <typename scalar_t, typename index_t, bool kBackward>
using ChannelsLastRegisterTiledKernel = void (*)(const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*,
                                                 PassGeometry, ChannelsLastTile);

template <typename scalar_t, typename index_t, bool kBackward>
ChannelsLastRegisterTiledKernel<scalar_t, index_t, kBackward> channels_last_register_tiled_kernel_for(
    int kernel, int stride, bool three_blocks) {
  return register_tiled_instance<!kBackward>(
      kernel, stride, [three_blocks](auto k, auto s) -> ChannelsLastRegisterTiledKernel<scalar_t, index_t, kBackward> {
        constexpr int kKernel = decltype(k)::value, kStride = decltype(s)::value;
        if constexpr (register_tiled_three_blocks_serve(sizeof(scalar_t), kKernel, kStride)) {
          if (three_blocks) {
            return &channels_last_register_tiled_kernel<scalar_t, index_t, kBackward, kKernel, kStride, true>;
          }
        }
        if (three_blocks) return nullptr;
        return &channels_last_register_tiled_kernel<scalar_t, index_t, kBackward, kKernel, kStride, false>;
      });
}

// The least share of a register-tiled channels_last launch's output slots (a lane's kBlockRows
// outputs, over whole warps) that must be outputs of the plane: below it (planes of fewer rows
// than kBlockRows, mostly) the idle slots would cost more than the kernel saves over
// tiled_channels_last_kernel, which then serves the pass.
constexpr double kMinRegisterTileUse = 2.0 / 3.0;

// Whether the channels_last register kernels (the one-tile kernel and the streamed band) serve
// the pass: a register-tiled filter, multiplier 1, whole 16-byte channel vectors, and a batch that
// gridDim.z holds.
template <typename scalar_t>
bool channels_last_register_kernels_serve(const PassGeometry& g) {
  return has_register_tiled_filter(g) && g.multiplier == 1 && g.dst_channels % kVector16<scalar_t> == 0 &&
         g.src_channels == g.dst_channels && g.batch <= 65535;
}

// The share of a channels_last register launch's lane slots that hold output: `tiles` tiles (or
// strip steps) a plane, of `threads` threads for `vectors` channel vectors, a lane kBlockRows rows
// of one column, counting the idle lanes of a part-filled last warp.
inline double channels_last_lane_use(const PassGeometry& g, int64_t tiles, int threads, int vectors) {
  const double warp_lanes = double((threads + 31) / 32 * 32) / vectors;
  return double(g.dst_h) * g.dst_w / (double(tiles) * warp_lanes * kBlockRows);
}

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
  if (!channels_last_register_kernels_serve<scalar_t>(g)) return std::nullopt;
  const int64_t channel_vectors = g.dst_channels / V;
  const int64_t block_rows = (g.dst_h + kBlockRows - 1) / kBlockRows;
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
      const size_t bytes = size_t(tile_in_h) * tile_in_w * vectors * sizeof(Vector16<scalar_t>) +
                           staged_weight_bytes<acc_t, scalar_t>(int64_t(g.kernel_h) * g.kernel_w, vectors);
      if (bytes > kMaxSharedBytes || tiles_h * tiles_w > std::numeric_limits<int32_t>::max()) continue;
      const int threads = vectors * lane_rows * lanes_w;
      const double use = channels_last_lane_use(g, tiles_h * tiles_w, threads, vectors);
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

// The register-blocked weight-gradient kernel compiled for a filter size, or null where there is none.
template <typename scalar_t, typename index_t>
using RegisterGradWeightKernel = void (*)(const scalar_t*, const scalar_t*, at::acc_type<scalar_t, true>*,
                                          at::acc_type<scalar_t, true>*, PassGeometry, RegisterTile,
                                          RegisterGradWeightWork);

template <typename scalar_t, typename index_t>
RegisterGradWeightKernel<scalar_t, index_t> grad_weight_register_tiled_kernel_for(int kernel, int stride,
                                                                                 bool staged_grad_output) {
  return register_tiled_instance<true>(kernel, stride, [staged_grad_output](auto k, auto s) {
    return staged_grad_output
               ? &grad_weight_register_tiled_kernel<scalar_t, index_t, decltype(k)::value, decltype(s)::value, true>
               : &grad_weight_register_tiled_kernel<scalar_t, index_t, decltype(k)::value, decltype(s)::value, false>;
  });
}

struct RegisterGradWeightLaunch {
  dim3 grid, block;  // grid: (channels, slices)
  RegisterTile tile;
  RegisterGradWeightWork work;
  size_t shared_bytes;
};

// The stride between grad_weight_register_tiled_kernel's staged grad_output planes (acc_t values,
// at least a plane's): of plane_size to plane_size + 31, the one with the fewest bank conflicts
// among a warp's reads of one value of its threads' blocks (plane p's thread (tx, ty), if its block
// starts inside the plane, reads p * stride + (ty * kBlockRows + i) * dst_w + tx * kBlockCols + j:
// distinct addresses), then the smallest.
template <typename acc_t>
int register_grad_weight_staged_stride(dim3 block, int dst_h, int dst_w) {
  constexpr int kBanks = 32;
  constexpr int kPhaseLanes = kBanks / (sizeof(acc_t) / 4);  // lanes a shared-memory wavefront serves
  int best_stride = dst_h * dst_w, best_conflicts = std::numeric_limits<int>::max();
  for (int stride = dst_h * dst_w; stride < dst_h * dst_w + kBanks; ++stride) {
    const int worst = most_accesses_on_a_bank(block, kPhaseLanes, [&](int plane, int tx, int ty) {
      const bool inside = tx * kBlockCols < dst_w && ty * kBlockRows < dst_h;
      return inside ? plane * stride + ty * kBlockRows * dst_w + tx * kBlockCols : -1;
    });
    if (worst < best_conflicts) {
      best_conflicts = worst;
      best_stride = stride;
    }
  }
  return best_stride;
}

// What an item of grad_weight_register_tiled_kernel (a tile of its batch entries, staged and summed)
// costs against the rest of a block (its start, and its K^2 sums folded across the block and
// stored): 8 to 1, an estimate (a tile's loads wait on memory; the fold is some 300 cycles).
constexpr int64_t kRegisterGradWeightItemSteps = 8;

// The fewest batch entries a block of grad_weight_register_tiled_kernel holds where it copies
// grad_output into shared memory: with fewer, a warp's lanes sit on 4 planes or fewer and their
// direct loads share sectors, while the copy (a warp a plane) would leave most warps waiting.
constexpr int kMinStagedGradOutputPlanes = 8;

// A register-tiled weight-gradient launch (g the forward geometry), or nothing where the
// filter is not a register-tiled one or no tile fits. Tiles are the forward kernel's; a
// block holds as many batch entries of its channel as fill 256 threads (no more than the
// batch has), fewer, then fewer rows of threads, while the tiles do not fit in shared memory;
// and each channel's items are cut into slices (fewest_steps_cut) for the fewest waves of the blocks
// an SM holds, counted by the kernel instance's registers as the GPU's code has them (GpuLimits::
// compiled_registers; its launch bound where unknown), or, without `wave_cut`, into enough slices for
// about eight blocks an SM, however many it holds (to v54: MobileNetV2 96@112 s2 on an H100, 128
// items a channel, took 11 slices, 1.14 waves at the 7 blocks an SM its 72 registers allow, so 2
// waves of 12 items, where 19 slices take 2 waves of 7). Shared
// memory holds the tiles, then as many taps of the block's sums as fit. The block's grad_output
// planes go ahead of the tiles where grad_output has no row access (register_tile_row_access,
// which the caller works out from grad_output's address), one tile covers a plane and
// `stage_grad_output` allows: with kMinStagedGradOutputPlanes or more a block, fewer while they do
// not fit; where none fits, the plan without them.
template <typename scalar_t>
std::optional<RegisterGradWeightLaunch> plan_register_grad_weight(const PassGeometry& g, const GpuLimits& gpu,
                                                                  bool row_access, bool stage_grad_output,
                                                                  bool wave_cut) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<acc_t>;
  if (!has_register_tiled_filter(g) || g.batch < 1) return std::nullopt;
  if (g.dst_channels > std::numeric_limits<int32_t>::max()) return std::nullopt;
  const int kernel = g.kernel_h;
  const int taps = kernel * kernel;
  const int window_units = register_tile_window_vectors<acc_t>(kernel, g.stride_w);
  const RegisterTileShape first_shape = register_tile_shape(g);
  int first_planes = 1;
  while (2 * first_planes * first_shape.bx * first_shape.by <= kThreads && first_planes < g.batch) first_planes *= 2;
  bool staged = stage_grad_output && !row_access && first_shape.tiles_h == 1 && first_shape.tiles_w == 1 &&
                first_planes >= kMinStagedGradOutputPlanes;
  RegisterTileShape shape = first_shape;
  int planes = first_planes;
  while (true) {
    const dim3 block(planes, shape.bx, shape.by);
    const int tile_in_h = register_tile_in_h(g, shape.by);
    const auto layout = register_tile_layout<acc_t>(block, window_units, tile_in_h, 0, g.stride_w);
    const int go_stride =
        staged ? register_grad_weight_staged_stride<acc_t>(block, static_cast<int>(g.dst_h), static_cast<int>(g.dst_w))
               : 0;
    const size_t go_bytes = size_t(staged_grad_output_values<acc_t>(planes, go_stride)) * sizeof(acc_t);
    const size_t tile_bytes = go_bytes + layout.bytes(planes, sizeof(Vector16<acc_t>));
    if (tile_bytes <= kMaxSharedBytes) {
      const int threads = planes * shape.bx * shape.by;
      const int reduce_taps = static_cast<int>(std::min<size_t>(taps, kMaxSharedBytes / (threads * sizeof(acc_t))));
      const size_t bytes = std::max(tile_bytes, size_t(reduce_taps) * threads * sizeof(acc_t));
      const int64_t items = (g.batch + planes - 1) / planes * shape.tiles_h * shape.tiles_w;
      int64_t items_per_slice, slices;
      if (wave_cut) {
        const int registers =
            kernel_registers(gpu, grad_weight_register_tiled_kernel_for<scalar_t, int32_t>(kernel, g.stride_h, staged),
                             registers_within_bounds(kRegisterGradWeightMinBlocks<acc_t>));
        const int64_t resident = gpu.sm_count * resident_blocks_per_sm(gpu, threads, bytes, registers);
        const auto cut = *fewest_steps_cut(items, g.dst_channels, resident, items,  // one slice always fits
                                           kRegisterGradWeightItemSteps, 1);
        items_per_slice = cut.items_per_slice;
        slices = cut.slices;
      } else {
        const int64_t wanted = (8 * gpu.sm_count + g.dst_channels - 1) / g.dst_channels;
        const int64_t most_slices = std::max<int64_t>(1, std::min<int64_t>({wanted, items, 65535}));
        items_per_slice = (items + most_slices - 1) / most_slices;
        slices = (items + items_per_slice - 1) / items_per_slice;
      }
      return RegisterGradWeightLaunch{
          dim3(static_cast<unsigned>(g.dst_channels), static_cast<unsigned>(slices)), block,
          RegisterTile{layout.pitch_units * V, layout.plane_units * V, tile_in_h, register_tile_in_w(g, shape.bx),
                       row_access},
          RegisterGradWeightWork{static_cast<int>(shape.tiles_h), static_cast<int>(shape.tiles_w), items,
                                 items_per_slice, reduce_taps, go_stride},
          bytes};
    }
    if (staged && planes / 2 < kMinStagedGradOutputPlanes) {
      staged = false;
      planes = first_planes;
      shape = first_shape;
    } else if (!shrink_register_block(planes, shape)) {
      return std::nullopt;
    }
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
ChannelsLastGradWeightLaunch plan_channels_last_register_grad_weight(const PassGeometry& g, const GpuLimits& gpu) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int kChannels = kGradWeightChannels<scalar_t>;
  const int64_t groups = (g.dst_channels + kChannels - 1) / kChannels;
  int lanes = 32;
  while (lanes > 8 && 8 * ((groups + lanes - 1) / lanes * lanes - groups) > groups) lanes /= 2;
  const int position_lanes = kThreads / lanes;
  const int64_t channel_blocks = (groups + lanes - 1) / lanes;
  const int64_t strips_w = (g.dst_w + kBlockCols - 1) / kBlockCols;
  const int64_t strips = g.batch * g.dst_h * strips_w;
  const int64_t wanted = (8 * gpu.sm_count + channel_blocks - 1) / channel_blocks;
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
