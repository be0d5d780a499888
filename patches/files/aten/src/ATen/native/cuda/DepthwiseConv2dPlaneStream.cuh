#pragma once
// The plane-streamed NCHW kernel for small planes (32x32 floats or fewer: MobileNetV2's, EfficientNet's
// and ConvNeXt's 28x28, 14x14 and 7x7 layers; since v54, 3x3 and 5x5 planes up to 64x64 at stride 1,
// a plane a chunk, where the batch gives a block two chunks or more): float, the register-tiled filters (square 3x3, 5x5, 7x7
// at stride 1; 3x3 and 5x5 at stride 2; dilation 1), multiplier 1, the forward and the stride-1
// backward-input. Device code and plain host arithmetic, as in DepthwiseConv2dCommon.cuh, so that
// tests/emulator can run it on a CPU.
//
// register_tiled_nchw_kernel takes these planes a block of them at a time: it stages its planes,
// waits at a barrier, computes, stores and exits, so that its loads and its arithmetic take turns and
// only the other blocks on the SM overlap them. On the H200 (2026-11-27) its fp32 forwards and
// backward-inputs of 14x14 and 7x7 planes ran at 17-30 % of the DRAM floor, and 28x28 at 24-33 %.
//
// In NCHW the planes of consecutive (n, c) pairs are consecutive in memory, and a pass maps plane p of
// src to plane p of dst (multiplier 1). So a chunk of `planes` planes is one contiguous run of each
// tensor, and moves as whole 16-byte vectors: the plan makes every chunk a whole number of them. A
// block walks chunks blockIdx.x, blockIdx.x + gridDim.x, ... : the next chunk's src is in flight as
// asynchronous copies (copy_async_or_zero, cp.async: no registers) into one of two buffers while the
// block computes the current chunk from the other into an output buffer, and then stores that buffer
// as 16-byte vectors. A thread computes one kBlockRows x kBlockCols register tile of one plane of
// every chunk (the plan gives a chunk as many planes as a block has tiles for, up to kThreads),
// with the padding as zeros.
//
// Vector rows (v50): read value by value from flat planes, a warp's window reads fell on 8 of the 32
// banks at 14x14 and 28x28 (tiles 4 columns apart, rows of tiles 56 or 112 values apart: 3.1-5.8
// wavefronts a load in the CPU memory profile). Where rows have an even width and the padding across
// is K / 2 (the bench's layers but the 7x7 planes), the copies put each row at a pitch of whole
// 16-byte vectors (8-byte copies where a row is not whole vectors, with its last vector's tail
// zeroed once), and a thread reads a window row as the 16-byte vectors from the boundary before it;
// the plan pads the pitch to the one whose window reads take the fewest wavefronts.

#include <ATen/native/cuda/DepthwiseConv2dRegisterTiled.cuh>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <type_traits>

namespace at::native::dwconv {

// Blocks of kThreads an SM an instance's __launch_bounds__ ask for, and its planner counts on: three
// (80 registers) for 3x3 and 5x5 at stride 1; two (128) for 7x7 and stride 2, which nvcc 13.0 made spill
// at 80 (12-24 bytes).
constexpr int plane_stream_min_blocks(int kernel, int stride) {
  return kernel <= 5 && stride == 1 ? 3 : 2;
}
// The largest src plane the kernel takes: 32x32 floats; with large planes (below), a chunk's bytes.
// Larger planes are the register tiles', whose blocks hold a few rows of a plane.
constexpr int64_t kPlaneStreamMaxPlaneBytes = 4096;
// A chunk's src bytes at most: two chunks of src and one of dst in shared memory stay within the
// 48 KB a block may take without opting in.
constexpr int64_t kPlaneStreamChunkBytes = 16 * 1024;

struct PlaneStream {
  int planes;        // planes a chunk (the last chunk's may be fewer)
  int tiles_w;       // register tiles across a dst plane
  int tiles;         // register tiles of a dst plane: thread t of a block computes tile t % tiles of plane t / tiles
  int64_t chunks;    // chunks of the pass
  int pitch;         // values a src row takes in shared memory: src_w (flat planes), or whole vectors
  bool vector_rows;  // rows at the pitch read as 16-byte vectors (plane_stream_vector_rows), else flat planes
};

struct PlaneStreamLaunch {
  dim3 grid, block;  // grid: (blocks); block: (a thread a tile of the chunk's planes, whole warps)
  PlaneStream stream;
  size_t shared_bytes;
};

inline int64_t plane_stream_src_plane_bytes(const PassGeometry& g, int64_t element_size) {
  return g.src_h * g.src_w * element_size;
}

// A src plane past kPlaneStreamMaxPlaneBytes. Such planes are streamed only where a block walks two
// chunks or more (the batch, not single entries), so that a chunk's copies overlap the sums of the one
// before: a grid of one chunk a block is the register tiles' one-shot blocks less their direct stores.
inline bool is_large_plane(const PassGeometry& g, int64_t element_size) {
  return plane_stream_src_plane_bytes(g, element_size) > kPlaneStreamMaxPlaneBytes;
}

// The passes the kernel is compiled for: float, the register-tiled filters, multiplier 1, and a src
// plane of kPlaneStreamMaxPlaneBytes or less; with `large_planes` (v54, the path
// plane_stream_large_planes), also src planes up to kPlaneStreamChunkBytes (64x64 floats: MobileNetV2's
// 56x56, one plane a chunk) at 3x3 and 5x5 stride 1, whose instances hold three blocks an SM as the
// register tiles' do (7x7 and stride 2 hold two: those planes stay the register tiles').
inline bool has_plane_stream(const PassGeometry& g, int element_size, bool large_planes) {
  if (element_size != 4 || !has_register_tiled_filter(g) || g.multiplier != 1 || g.src_channels != g.dst_channels) {
    return false;
  }
  return !is_large_plane(g, element_size) ||
         (large_planes && plane_stream_src_plane_bytes(g, element_size) <= kPlaneStreamChunkBytes &&
          plane_stream_min_blocks(g.kernel_h, g.stride_h) == 3);
}

// Src rows that vector rows can hold: an even width (a row is whole 8-byte pairs) and the padding across
// K / 2, so that a window's first column lies K / 2 after the vector boundary before it. The weight
// gradient reads only src as vector rows.
inline bool plane_stream_vector_src_rows(const PassGeometry& g) {
  return g.src_w % 2 == 0 && g.pad_w == g.kernel_w / 2;
}

// Vector rows (PlaneStream::vector_rows) for a forward or backward-input pass has_plane_stream takes:
// src rows as above, and dst rows of an even width (a tile row is stored in one or two stores).
inline bool plane_stream_vector_rows(const PassGeometry& g) {
  return plane_stream_vector_src_rows(g) && g.dst_w % 2 == 0;
}

// The vectors of `values` values a thread reads of each window row from vector rows: from the vector
// boundary `values` columns before its tile's first column at the stride through the window's last.
constexpr int plane_stream_window_vectors(int kernel, int stride, int values) {
  return (values - kernel / 2 + (kBlockCols - 1) * stride + kernel + values - 1) / values;
}

// The narrowest pitch of vector rows: a src row rounded up to whole 16-byte vectors.
inline int64_t plane_stream_whole_pitch(const PassGeometry& g, int64_t element_size) {
  const int64_t values = 16 / element_size;
  return (g.src_w + values - 1) / values * values;
}

// A thread's window in its plane: the rows and columns of src that its kBlockRows x kBlockCols tile of
// dst meets through a K x K filter at kStride, read from flat planes a value at a time or from vector
// rows a 16-byte vector at a time. The forward and backward-input (plane_stream_kernel) and the weight
// gradient (plane_stream_grad_weight_kernel) walk the same windows.
template <typename scalar_t, int K, int kStride, bool kVectorRows>
struct PlaneWindow {
  using acc_t = at::acc_type<scalar_t, true>;
  static constexpr int V = kVector16<scalar_t>;
  static constexpr int kRows = (kBlockRows - 1) * kStride + K;
  static constexpr int kCols = (kBlockCols - 1) * kStride + K;
  // Vector rows read a window row from the vector boundary V columns before the tile's first at the
  // stride: its first column is value kLead of the kVectors vectors read.
  static constexpr int kLead = kVectorRows ? V - K / 2 : 0;
  static constexpr int kVectors = plane_stream_window_vectors(K, kStride, V);
  static constexpr int kRowValues = kVectorRows ? kVectors * V : kCols;
  static_assert(kCols <= 32, "the window's columns are a 32-bit mask");
  static_assert(!kVectorRows || (std::is_same_v<scalar_t, acc_t> && K / 2 < V), "vector rows: float, padding below V");

  int first_row, first_column;  // of src: the window's, less kLead columns
  // Flat planes: bit q, the window's column q lies in the plane. Vector rows: bit j, vector j starts in
  // it (a vector starting inside and ending past it reads the row's zeroed tail).
  uint32_t columns_inside = 0;

  // The window of the tile whose first dst row and column are y0 and x0.
  __device__ __forceinline__ PlaneWindow(const PassGeometry& g, int y0, int x0)
      : first_row(y0 * kStride - g.pad_h), first_column(x0 * kStride - g.pad_w - kLead) {
    const int src_w = static_cast<int>(g.src_w);
    if constexpr (kVectorRows) {
#pragma unroll
      for (int j = 0; j < kVectors; ++j) columns_inside |= uint32_t(within(first_column + j * V, src_w)) << j;
    } else {
#pragma unroll
      for (int q = 0; q < kCols; ++q) columns_inside |= uint32_t(within(first_column + q, src_w)) << q;
    }
  }

  // visit(i, kh, x) for each row of the window and each tile row i that filter row kh pairs it with, in
  // row order: x holds the row's values from kLead columns before the window's first, zeros in the
  // padding, so that tile column j meets filter column kw at x[kLead + j * kStride + kw]. `plane` holds
  // src_h rows `pitch` values apart.
  template <typename Visit>
  __device__ __forceinline__ void walk(const scalar_t* plane, int pitch, int src_h, Visit&& visit) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int y = first_row + r;
      const bool row_inside = within(y, src_h);
      const int row = y * pitch + first_column;  // read only where the row and the column lie in the plane
      acc_t x[kRowValues];
      if constexpr (kVectorRows) {
#pragma unroll
        for (int j = 0; j < kVectors; ++j) {
          const auto vector = load_vector_or_zero(row_inside && (columns_inside >> j & 1u), plane + row + j * V);
#pragma unroll
          for (int e = 0; e < V; ++e) x[j * V + e] = vector.v[e];
        }
      } else {
#pragma unroll
        for (int q = 0; q < kCols; ++q) {
          x[q] = row_inside && (columns_inside >> q & 1u) ? static_cast<acc_t>(plane[row + q]) : acc_t(0);
        }
      }
#pragma unroll
      for (int i = 0; i < kBlockRows; ++i) {
        const int filter_row = r - i * kStride;  // known at compile time: the loops are unrolled
        if (filter_row >= 0 && filter_row < K) visit(i, filter_row, x);
      }
    }
  }
};

// This thread's copies of a run of whole src rows (of planes in NCHW: one run of memory) into shared
// memory as rows `pitch` values apart: as 16-byte vectors from flat planes (pitch src_w), and for vector
// rows in units of 16 bytes where a row is whole vectors, else 8. Unit e of a run is unit e % row_units
// of its row e / row_units; a thread's units are blockDim.x apart, the same in every run, so that it
// steps their rows and columns instead of dividing.
template <typename scalar_t, bool kVectorRows>
struct PlaneRowCopies {
  static constexpr int V = kVector16<scalar_t>;
  int src_w, pitch, unit, row_units;
  int first_row, first_column, step_rows, step_columns;

  __device__ __forceinline__ PlaneRowCopies(int src_w_, int pitch_)
      : src_w(src_w_),
        pitch(pitch_),
        unit(kVectorRows && src_w_ % V != 0 ? 2 : V),
        row_units(kVectorRows ? src_w_ / unit : 1),
        first_row(static_cast<int>(threadIdx.x) / row_units),
        first_column(static_cast<int>(threadIdx.x) % row_units),
        step_rows(static_cast<int>(blockDim.x) / row_units),
        step_columns(static_cast<int>(blockDim.x) % row_units) {}

  // The tail of each of `rows` rows' last vector, past the row: zeros that the copies never write.
  __device__ __forceinline__ void zero_row_tails(scalar_t* rows_at, int rows) const {
    if (kVectorRows && src_w % V != 0) {
      for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        for (int q = src_w; q % V != 0; ++q) rows_at[r * pitch + q] = scalar_t(0);
      }
    }
  }

  // `rows` rows from `from` into `to`, as cp.async copies (the caller commits them as a group).
  __device__ __forceinline__ void copy(const scalar_t* from, scalar_t* to, int rows) const {
    if constexpr (kVectorRows) {
      int row = first_row, column = first_column;
      for (int e = threadIdx.x; e < rows * row_units; e += blockDim.x) {
        scalar_t* const at = to + row * pitch + column * unit;
        if (unit == V) {
          copy_async_or_zero(reinterpret_cast<Vector16<scalar_t>*>(at), from + e * V, true);
        } else {
          copy_async_8(at, from + e * 2);
        }
        row += step_rows;
        column += step_columns;
        if (column >= row_units) {  // at most one wrap: step_columns < row_units
          column -= row_units;
          ++row;
        }
      }
    } else {
      copy_vectors_async(from, to, rows * src_w / V);
    }
  }

  // `vectors` 16-byte vectors from `from` to `to`, both one run, this thread's share as cp.async copies.
  __device__ __forceinline__ static void copy_vectors_async(const scalar_t* from, scalar_t* to, int vectors) {
    auto* const to_vectors = reinterpret_cast<Vector16<scalar_t>*>(to);
    for (int v = threadIdx.x; v < vectors; v += blockDim.x) copy_async_or_zero(to_vectors + v, from + v * V, true);
  }
};

template <typename scalar_t, bool kBackward, int kKernel, int kStride, bool kVectorRows>
__global__ void __launch_bounds__(kThreads, plane_stream_min_blocks(kKernel, kStride)) plane_stream_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const PlaneStream s) {
  using Window = PlaneWindow<scalar_t, kKernel, kStride, kVectorRows>;
  using acc_t = typename Window::acc_t;
  constexpr int V = Window::V;
  constexpr int K = kKernel;
  constexpr int kTaps = K * K;
  static_assert(!kBackward || kStride == 1, "backward-input is a stride-1 correlation");
  DWCONV_SHARED_BYTES(shared_bytes);

  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);
  const int channels = static_cast<int>(g.dst_channels);
  const int src_plane = src_h * src_w, dst_plane = dst_h * dst_w;
  const int total_planes = static_cast<int>(g.batch) * channels;
  const int chunk_src = s.planes * src_h * s.pitch;  // values of a full chunk's rows: whole vectors
  scalar_t* const in_buffers = reinterpret_cast<scalar_t*>(shared_bytes);  // [2][chunk_src]
  scalar_t* const out_buffer = in_buffers + 2 * chunk_src;                  // [planes * dst_plane]

  // The thread's tile: the same plane slot and place in every chunk.
  const int slot = static_cast<int>(threadIdx.x) / s.tiles;
  const int tile = static_cast<int>(threadIdx.x) - slot * s.tiles;
  const int y0 = tile / s.tiles_w * kBlockRows, x0 = tile % s.tiles_w * kBlockCols;
  const Window window(g, y0, x0);
  const PlaneRowCopies<scalar_t, kVectorRows> copies(src_w, s.pitch);
  copies.zero_row_tails(in_buffers, 2 * s.planes * src_h);

  // Chunk `chunk`'s src into buffer `buffer`, as one group of copies (an empty one past the last chunk).
  const auto copy_chunk = [&](int64_t chunk, int buffer) {
    if (chunk < s.chunks) {
      const int first = static_cast<int>(chunk) * s.planes;
      const int chunk_planes = smaller(s.planes, total_planes - first);
      copies.copy(src + static_cast<int64_t>(first) * src_plane, in_buffers + buffer * chunk_src, chunk_planes * src_h);
    }
    commit_async_copies();
  };

  int buffer = 0;
  copy_chunk(blockIdx.x, buffer);
  for (int64_t chunk = blockIdx.x; chunk < s.chunks; chunk += gridDim.x, buffer ^= 1) {
    copy_chunk(chunk + gridDim.x, buffer ^ 1);  // its buffer's last reader was the chunk before's, done
    const int first = static_cast<int>(chunk) * s.planes;
    const int planes = smaller(s.planes, total_planes - first);
    const bool computes = slot < planes;

    // The tile's filter and bias before the wait, so that their loads overlap it.
    acc_t w[kTaps];
    acc_t start = acc_t(0);
    if (computes) {
      const int c = (first + slot) % channels;
#pragma unroll
      for (int i = 0; i < kTaps; ++i) {
        // Backward-input correlates with the kernel flipped in both directions.
        w[i] = static_cast<acc_t>(weight[c * kTaps + (kBackward ? kTaps - 1 - i : i)]);
      }
      if (!kBackward && bias != nullptr) start = static_cast<acc_t>(bias[c]);
    }
    wait_async_copies<1>();
    __syncthreads();  // every thread's copies of the chunk have landed; the chunk before's stores are done

    if (computes) {
      acc_t acc[kBlockRows][kBlockCols];
#pragma unroll
      for (int i = 0; i < kBlockRows; ++i) {
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) acc[i][j] = start;
      }
      const scalar_t* const plane = in_buffers + buffer * chunk_src + slot * src_h * s.pitch;
      window.walk(plane, s.pitch, src_h, [&](int i, int kh, const acc_t (&x)[Window::kRowValues]) {
#pragma unroll
        for (int kw = 0; kw < K; ++kw) {
#pragma unroll
          for (int j = 0; j < kBlockCols; ++j) acc[i][j] += x[Window::kLead + j * kStride + kw] * w[kh * K + kw];
        }
      });
      scalar_t* const out = out_buffer + slot * dst_plane;
#pragma unroll
      for (int i = 0; i < kBlockRows; ++i) {
        if constexpr (kVectorRows) {
          // A tile row as one 16-byte store where dst rows are whole vectors, else in 8-byte pairs.
          if (y0 + i >= dst_h) continue;
          scalar_t* const out_row = out + (y0 + i) * dst_w + x0;
          if (dst_w % kBlockCols == 0) {
            store_block_row(out_row, acc[i], kBlockCols, 1, true);
          } else {
            store_block_row_pairs(out_row, acc[i], dst_w - x0);
          }
        } else {
#pragma unroll
          for (int j = 0; j < kBlockCols; ++j) {
            if (y0 + i < dst_h && x0 + j < dst_w) out[(y0 + i) * dst_w + x0 + j] = static_cast<scalar_t>(acc[i][j]);
          }
        }
      }
    }
    __syncthreads();  // the chunk's outputs are all in out_buffer, and no thread reads its src buffer any more

    const int vectors = planes * dst_plane / V;
    scalar_t* const to = dst + static_cast<int64_t>(first) * dst_plane;
    const auto* const from = reinterpret_cast<const Vector16<scalar_t>*>(out_buffer);
    for (int v = threadIdx.x; v < vectors; v += blockDim.x) store_vector(to + v * V, from[v]);
  }
  wait_async_copies<0>();  // the last group, past the last chunk, is empty: nothing is left in flight
}

// The instance for a filter size and stride (has_plane_stream's) and a plan's vector rows, or null.
template <typename scalar_t, bool kBackward>
using PlaneStreamKernel = void (*)(const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*, PassGeometry,
                                   PlaneStream);

template <typename scalar_t, bool kBackward>
PlaneStreamKernel<scalar_t, kBackward> plane_stream_kernel_for(int kernel, int stride, bool vector_rows) {
  if (vector_rows) {
    return register_tiled_instance<!kBackward>(kernel, stride, [](auto k, auto s) {
      return &plane_stream_kernel<scalar_t, kBackward, decltype(k)::value, decltype(s)::value, true>;
    });
  }
  return register_tiled_instance<!kBackward>(kernel, stride, [](auto k, auto s) {
    return &plane_stream_kernel<scalar_t, kBackward, decltype(k)::value, decltype(s)::value, false>;
  });
}

// A block's threads for chunks of `planes` planes of `tiles` tiles: a thread a tile, in whole warps.
inline int plane_stream_threads(int64_t planes, int tiles) {
  return static_cast<int>((planes * tiles + 31) / 32 * 32);
}

// The fewest planes whose src and whose dst are whole 16-byte vectors: a chunk's planes are a multiple.
inline int64_t plane_stream_quantum(const PassGeometry& g, int64_t element_size) {
  const auto vectors_of = [](int64_t plane_bytes) { return 16 / std::gcd(plane_bytes, int64_t(16)); };
  return std::lcm(vectors_of(g.src_h * g.src_w * element_size), vectors_of(g.dst_h * g.dst_w * element_size));
}

// A block's shared memory for chunks of `planes` planes: two chunks of src in rows of `pitch` values and
// one of dst.
inline size_t plane_stream_shared_bytes(const PassGeometry& g, int64_t planes, int64_t pitch, int64_t element_size) {
  return static_cast<size_t>(planes * (2 * g.src_h * pitch + g.dst_h * g.dst_w) * element_size);
}

// Shared-memory wavefronts of one window row's loads by a chunk's threads, from src rows `pitch`
// values apart: as 16-byte vectors from vector rows (a quarter warp's 8 reads take as many wavefronts
// as the most that fall in one group of 4 banks; a row's vectors conflict alike), or value by value
// from flat planes (pitch src_w; a warp's 32 reads, as many as the most in one bank, a read a column
// of the window). A thread's tile starts kBlockCols x stride columns after its neighbour's, its row of
// tiles kBlockRows x stride rows after the one before, its plane src_h rows after the one before.
inline int64_t plane_stream_row_wavefronts(const PassGeometry& g, const PlaneStream& s, int64_t pitch,
                                           bool vector_rows, int64_t element_size) {
  const int64_t values = 16 / element_size;
  const int64_t window_cols = (kBlockCols - 1) * g.stride_w + g.kernel_w;
  const int64_t window_vectors = plane_stream_window_vectors(g.kernel_w, g.stride_w, values);
  const int lanes = vector_rows ? 8 : 32;
  const int threads = s.planes * s.tiles;
  int64_t wavefronts = 0;
  for (int first = 0; first < threads; first += lanes) {
    for (int64_t column = 0; column < (vector_rows ? 1 : window_cols); ++column) {
      int uses[32] = {};
      int most = 0;
      for (int t = first; t < std::min(first + lanes, threads); ++t) {
        const int slot = t / s.tiles, tile = t % s.tiles;
        const int64_t start = (slot * g.src_h + tile / s.tiles_w * kBlockRows * g.stride_h) * pitch +
                              tile % s.tiles_w * kBlockCols * g.stride_w;
        most = std::max(most, ++uses[vector_rows ? start / values % 8 : (start + column) % 32]);
      }
      wavefronts += most;
    }
  }
  return vector_rows ? wavefronts * window_vectors : wavefronts;
}

// Vector rows at the pitch of whole vectors, up to three past the row's, whose window rows take the
// fewest wavefronts a plane (the first of equals), with planes_at(pitch) planes a chunk (the forward's:
// flat planes' at every pitch; the weight gradient's: as many as fit, no fewer than three quarters of
// flat planes'), within `most_bytes` of shared memory a block (bytes_at(planes, pitch)) and keeping the
// blocks an SM holds with flat planes (blocks_at(planes, pitch, vector_rows): on SMs of 100 KB, a 6x14
// plane's padded rows would cost one); flat planes where those take fewer still. `stream` holds flat
// planes' plan, and is given the rows and planes chosen.
template <typename PlanesAt, typename BytesAt, typename BlocksAt>
void choose_plane_stream_rows(const PassGeometry& g, PlaneStream& stream, int64_t element_size, size_t most_bytes,
                              PlanesAt&& planes_at, BytesAt&& bytes_at, BlocksAt&& blocks_at) {
  const int64_t V = 16 / element_size;
  const int64_t whole = plane_stream_whole_pitch(g, element_size);
  const int64_t flat_planes = stream.planes;
  const int64_t most_blocks = blocks_at(flat_planes, g.src_w, false);
  // The fewest so far: `fewest` wavefronts for `fewest_planes` planes.
  int64_t fewest = plane_stream_row_wavefronts(g, stream, g.src_w, false, element_size), fewest_planes = flat_planes;
  for (int64_t pitch = whole; pitch <= whole + 3 * V; pitch += V) {
    const int64_t planes = planes_at(pitch);
    if (planes * 4 < flat_planes * 3 || bytes_at(planes, pitch) > most_bytes) break;
    if (blocks_at(planes, pitch, true) < most_blocks) break;
    PlaneStream rows = stream;
    rows.planes = static_cast<int>(planes);
    const int64_t wavefronts = plane_stream_row_wavefronts(g, rows, pitch, true, element_size);
    if (wavefronts * fewest_planes < fewest * planes) {
      fewest = wavefronts;
      fewest_planes = planes;
      stream.planes = static_cast<int>(planes);
      stream.pitch = static_cast<int>(pitch);
      stream.vector_rows = true;
    }
  }
}

// The plan: as many planes a chunk as a block of kThreads has tiles for, no more than
// kPlaneStreamChunkBytes of src, and a whole number of 16-byte vectors of src and of dst; a block
// for each chunk, up to what the GPU holds at once. Null where the kernel does not take the pass,
// where the tensors are not a whole number of vectors, and where the pass has fewer chunks than the GPU
// has SMs (small grids: the pixel kernel's or the register tiles'), for large planes fewer than two a
// block. Flat planes only without `vector_rows` (the plane_stream_vector_rows path off); planes of
// kPlaneStreamMaxPlaneBytes or less only without `large_planes` (plane_stream_large_planes off).
template <typename scalar_t>
std::optional<PlaneStreamLaunch> plan_plane_stream(const PassGeometry& g, const GpuLimits& gpu, bool vector_rows = true,
                                                   bool large_planes = true) {
  constexpr int64_t kBytes = sizeof(scalar_t);
  if (!has_plane_stream(g, kBytes, large_planes)) return std::nullopt;
  const int64_t src_plane_bytes = plane_stream_src_plane_bytes(g, kBytes);
  const int64_t dst_plane_bytes = g.dst_h * g.dst_w * kBytes;
  const int64_t total_planes = g.batch * g.dst_channels;
  if (total_planes * src_plane_bytes % 16 != 0 || total_planes * dst_plane_bytes % 16 != 0) return std::nullopt;
  const int tiles_w = static_cast<int>((g.dst_w + kBlockCols - 1) / kBlockCols);
  const int tiles = tiles_w * static_cast<int>((g.dst_h + kBlockRows - 1) / kBlockRows);
  const int64_t quantum = plane_stream_quantum(g, kBytes);
  const int64_t fitting = smaller<int64_t>(kThreads / tiles, kPlaneStreamChunkBytes / src_plane_bytes);
  // (A chunk of all the planes, fewer than the quantum, is whole vectors too: the tensors are.)
  const int64_t planes = smaller(fitting / quantum * quantum, total_planes);
  if (planes < 1) return std::nullopt;
  const int64_t chunks = (total_planes + planes - 1) / planes;
  if (chunks < gpu.sm_count) return std::nullopt;
  const int threads = plane_stream_threads(planes, tiles);
  PlaneStream stream{static_cast<int>(planes), tiles_w, tiles, chunks, static_cast<int>(g.src_w), false};
  const int registers = registers_within_bounds(plane_stream_min_blocks(g.kernel_h, g.stride_h));
  const auto blocks_per_sm = [&](int64_t pitch, bool /*vector_rows: the same bounds*/) {
    return resident_blocks_per_sm(gpu, threads, plane_stream_shared_bytes(g, planes, pitch, kBytes), registers);
  };
  if (vector_rows && plane_stream_vector_rows(g)) {
    choose_plane_stream_rows(
        g, stream, kBytes, kMaxSharedBytes, [&](int64_t) { return planes; },
        [&](int64_t, int64_t pitch) { return plane_stream_shared_bytes(g, planes, pitch, kBytes); },
        [&](int64_t, int64_t pitch, bool rows_of_vectors) { return blocks_per_sm(pitch, rows_of_vectors); });
  }
  const size_t shared_bytes = plane_stream_shared_bytes(g, planes, stream.pitch, kBytes);
  const int64_t per_sm = blocks_per_sm(stream.pitch, stream.vector_rows);
  if (is_large_plane(g, kBytes) && chunks < 2 * per_sm * gpu.sm_count) return std::nullopt;
  const int64_t blocks = smaller(chunks, per_sm * gpu.sm_count);
  PlaneStreamLaunch launch;
  launch.grid = dim3(static_cast<unsigned>(blocks));
  launch.block = dim3(static_cast<unsigned>(threads));
  launch.stream = stream;
  launch.shared_bytes = shared_bytes;
  return launch;
}

// ---------------------------------------------------------------------------
// The plane-streamed weight gradient (v51): float NCHW, the plane stream's filters, strides and planes.
//
// grad_weight_register_tiled_kernel takes these planes a block of one channel's batch entries at a
// time, staged, then summed, then the next: on the H200 (2026-11-27) its fp32 weight gradients of 14x14
// and 7x7 planes ran at 6-20 % of the DRAM floor, twice the time of their forwards. Here a block owns a
// group of `planes` consecutive channels and a slice of the batch: for each batch entry n of its slice,
// the group's planes of input and of grad_output are one contiguous run of each tensor (planes n x C +
// c0, ...), copied as cp.async into one of two buffers while the block sums the entry before from the
// other. A thread keeps one tile's K^2 tap sums and grad_output's sum (the bias gradient's) in registers
// over the whole slice: tile t % tiles of channel t / tiles, the plane stream's tiles and windows. At the
// end each channel's tile sums are added in tile order through shared memory into its slice's sums,
// which grad_weight_finish_kernel adds in slice order: the same bits every run.

struct PlaneStreamGradWeight {
  PlaneStream stream;   // planes: channels a group, the planes of a chunk (an entry's planes of a group)
  int batch_per_slice;  // slice blockIdx.y of group blockIdx.x walks entries [y x batch_per_slice, ...)
  int sums_per_round;   // tap sums the block adds across its threads at a time (its shared memory's rows)
};

struct PlaneStreamGradWeightLaunch {
  dim3 grid, block;  // grid: (channel groups, batch slices); block: a thread a tile of a group's planes
  PlaneStreamGradWeight work;
  size_t shared_bytes;
};

// Blocks of kThreads an SM the weight gradient's instances ask for, and its planner counts on: three (80
// registers) at 3x3 stride 1 and at 5x5 stride 1 from vector rows; two (128) elsewhere: its K^2 tap sums
// and a 4x4 tile of grad_output took nvcc 13.0 past 80 at 5x5 from flat planes (8-12 bytes spilled).
constexpr int plane_stream_grad_weight_min_blocks(int kernel, int stride, bool vector_rows) {
  return stride == 1 && (kernel == 3 || (kernel == 5 && vector_rows)) ? 3 : 2;
}

template <typename scalar_t, int kKernel, int kStride, bool kVectorRows>
__global__ void __launch_bounds__(kThreads, plane_stream_grad_weight_min_blocks(kKernel, kStride, kVectorRows))
plane_stream_grad_weight_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const PlaneStreamGradWeight work) {
  using Window = PlaneWindow<scalar_t, kKernel, kStride, kVectorRows>;
  using acc_t = typename Window::acc_t;
  using Copies = PlaneRowCopies<scalar_t, kVectorRows>;
  constexpr int K = kKernel;
  constexpr int kTaps = K * K;
  DWCONV_SHARED_BYTES(shared_bytes);
  const PlaneStream& s = work.stream;

  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);
  const int channels = static_cast<int>(g.dst_channels);
  const int src_plane = src_h * src_w, dst_plane = dst_h * dst_w;
  const int group_first = static_cast<int>(blockIdx.x) * s.planes;  // the group's first channel
  const int group_planes = smaller(s.planes, channels - group_first);
  const int entry_src = s.planes * src_h * s.pitch, entry_dst = s.planes * dst_plane;  // whole vectors each
  scalar_t* const input_buffers = reinterpret_cast<scalar_t*>(shared_bytes);  // [2][entry_src]
  scalar_t* const grad_output_buffers = input_buffers + 2 * entry_src;       // [2][entry_dst]

  const int slot = static_cast<int>(threadIdx.x) / s.tiles;  // the thread's channel in the group
  const int tile = static_cast<int>(threadIdx.x) - slot * s.tiles;
  const int y0 = tile / s.tiles_w * kBlockRows, x0 = tile % s.tiles_w * kBlockCols;
  const Window window(g, y0, x0);
  const Copies copies(src_w, s.pitch);
  copies.zero_row_tails(input_buffers, 2 * s.planes * src_h);
  const int64_t batch_begin = static_cast<int64_t>(blockIdx.y) * work.batch_per_slice;
  const int64_t batch_end = smaller<int64_t>(g.batch, batch_begin + work.batch_per_slice);

  // Entry n's planes of the group, input and grad_output, into buffer `buffer` as one group of copies
  // (an empty one past the slice's last entry).
  const auto copy_entry = [&](int64_t n, int buffer) {
    if (n < batch_end) {
      const int64_t first_plane = n * channels + group_first;
      copies.copy(input + first_plane * src_plane, input_buffers + buffer * entry_src, group_planes * src_h);
      Copies::copy_vectors_async(grad_output + first_plane * dst_plane, grad_output_buffers + buffer * entry_dst,
                                 group_planes * dst_plane / Window::V);
    }
    commit_async_copies();
  };

  const bool computes = slot < group_planes;
  const bool crosses_edge = y0 + kBlockRows > dst_h || x0 + kBlockCols > dst_w;
  static_assert(kBlockCols == Window::V, "a tile row of grad_output is one 16-byte vector");
  const bool go_rows_of_vectors = dst_w % kBlockCols == 0;
  constexpr int kBiasSum = kTaps;  // grad_output's own sum (the bias gradient's), after the taps'
  acc_t sums[kTaps + 1];
#pragma unroll
  for (int v = 0; v <= kTaps; ++v) sums[v] = acc_t(0);

  int buffer = 0;
  copy_entry(batch_begin, buffer);
  for (int64_t n = batch_begin; n < batch_end; ++n, buffer ^= 1) {
    copy_entry(n + 1, buffer ^ 1);  // its buffers' last readers were entry n - 1's, before the barrier ending it
    wait_async_copies<1>();
    __syncthreads();  // entry n's planes have landed, all of the block's copies

    if (computes) {
      const scalar_t* const go_plane = grad_output_buffers + buffer * entry_dst + slot * dst_plane;
      // The tile's grad_output: a row a 16-byte load where dst rows are whole vectors (every tile row then
      // starts on one), else value by value; zeros past the plane.
      acc_t go[kBlockRows][kBlockCols];
#pragma unroll
      for (int i = 0; i < kBlockRows; ++i) {
        const scalar_t* const go_row = go_plane + (y0 + i) * dst_w + x0;
        if (go_rows_of_vectors) {
          const auto vector = load_vector_or_zero(y0 + i < dst_h, go_row);
#pragma unroll
          for (int j = 0; j < kBlockCols; ++j) go[i][j] = vector.v[j];
        } else {
#pragma unroll
          for (int j = 0; j < kBlockCols; ++j) {
            go[i][j] = y0 + i < dst_h && x0 + j < dst_w ? static_cast<acc_t>(go_row[j]) : acc_t(0);
          }
        }
#pragma unroll
        for (int j = 0; j < kBlockCols; ++j) sums[kBiasSum] += go[i][j];
      }
      const scalar_t* const plane = input_buffers + buffer * entry_src + slot * src_h * s.pitch;
      whole_or_edge(crosses_edge, [&](auto edge) {
        constexpr bool kEdge = decltype(edge)::value;
        window.walk(plane, s.pitch, src_h, [&](int i, int kh, const acc_t (&x)[Window::kRowValues]) {
          if (kEdge && y0 + i >= dst_h) return;
#pragma unroll
          for (int j = 0; j < kBlockCols; ++j) {
            if (kEdge && x0 + j >= dst_w) break;
#pragma unroll
            for (int kw = 0; kw < K; ++kw) sums[kh * K + kw] += go[i][j] * x[Window::kLead + j * kStride + kw];
          }
        });
      });
    }
    __syncthreads();  // no thread reads entry n's buffers any more: entry n + 2's copies may fill them
  }
  wait_async_copies<0>();  // the last group, past the slice's last entry, is empty

  // Each channel's sums: its tiles' added in tile order, sums_per_round sums at a time in the buffers'
  // place, a row of blockDim.x + 1 values a sum (a thread's value at its index), so that the lanes
  // adding consecutive sums of a channel read consecutive banks.
  const int threads = static_cast<int>(blockDim.x);
  const int row = threads + 1;
  const int values = partial_bias != nullptr ? kTaps + 1 : kTaps;
  acc_t* const rows = reinterpret_cast<acc_t*>(shared_bytes);
  for (int v0 = 0; v0 < values; v0 += work.sums_per_round) {
    const int count = smaller(work.sums_per_round, values - v0);
    __syncthreads();  // the round before's totals have all been read
#pragma unroll
    for (int v = 0; v <= kTaps; ++v) {
      if (v >= v0 && v < v0 + count) rows[(v - v0) * row + threadIdx.x] = sums[v];
    }
    __syncthreads();
    // Total e: sum v = e % count of channel e / count, walked with carries (no division in the loop).
    const int step_v = threads % count, step_channel = threads / count;
    int v = static_cast<int>(threadIdx.x) % count, channel = static_cast<int>(threadIdx.x) / count;
    for (; channel < group_planes; v += step_v, channel += step_channel) {
      if (v >= count) {
        v -= count;
        ++channel;
        if (channel >= group_planes) break;
      }
      const acc_t* const tile_sums = rows + v * row + channel * s.tiles;
      acc_t total = tile_sums[0];
      for (int t = 1; t < s.tiles; ++t) total += tile_sums[t];
      const int64_t at = static_cast<int64_t>(blockIdx.y) * channels + group_first + channel;
      if (v0 + v < kTaps) {
        partial[at * kTaps + v0 + v] = total;
      } else {
        partial_bias[at] = total;
      }
    }
  }
}

template <typename scalar_t>
using PlaneStreamGradWeightKernel = void (*)(const scalar_t*, const scalar_t*, at::acc_type<scalar_t, true>*,
                                             at::acc_type<scalar_t, true>*, PassGeometry, PlaneStreamGradWeight);

// The instance for a filter size and stride (has_plane_stream's) and a plan's vector rows, or null.
template <typename scalar_t>
PlaneStreamGradWeightKernel<scalar_t> plane_stream_grad_weight_kernel_for(int kernel, int stride, bool vector_rows) {
  if (vector_rows) {
    return register_tiled_instance<true>(kernel, stride, [](auto k, auto s) {
      return &plane_stream_grad_weight_kernel<scalar_t, decltype(k)::value, decltype(s)::value, true>;
    });
  }
  return register_tiled_instance<true>(kernel, stride, [](auto k, auto s) {
    return &plane_stream_grad_weight_kernel<scalar_t, decltype(k)::value, decltype(s)::value, false>;
  });
}

// A weight-gradient block's shared memory for groups of `planes` channels, src rows `pitch` values
// apart: two entries' input and grad_output planes, and at least one row of sums for the block's
// `threads` (tiny planes).
inline size_t plane_stream_grad_weight_shared_bytes(const PassGeometry& g, int64_t planes, int64_t pitch,
                                                     int threads, int64_t element_size) {
  const int64_t values = std::max(2 * planes * (g.src_h * pitch + g.dst_h * g.dst_w), int64_t(threads) + 1);
  return static_cast<size_t>(values * element_size);
}

// The tap sums (and the bias's) a weight-gradient block of `threads` adds across its threads at a time: as
// many rows of threads + 1 values as its shared memory holds.
inline int plane_stream_grad_weight_sums_per_round(const PassGeometry& g, size_t shared_bytes, int threads,
                                                   int64_t element_size) {
  return static_cast<int>(smaller<int64_t>(int64_t(g.kernel_h) * g.kernel_w + 1,
                                           static_cast<int64_t>(shared_bytes / element_size) / (threads + 1)));
}

// The weight gradient's plan: groups of as many channels as a block of kThreads has tiles for, fewer
// where two entries' planes of them would pass the shared memory a block may take (opt_in_shared_bytes,
// past 48 KB: these blocks are bound by registers to three an SM or fewer), a whole number of 16-byte
// vectors in every entry (the channels too, else null); vector rows where their window rows take fewer
// wavefronts a plane, in groups of as many planes as fit at their pitch (14x14: 15 at a pitch of 20,
// where flat planes take 16); a batch slice a block, as many as the GPU's resident blocks hold in one
// wave. Null where the kernel does not take the pass and where the pass has fewer chunks (entries x
// groups) than the GPU has SMs (batch 1: the register tiles'), and for large planes where a slice
// holds one entry. Flat planes only without `vector_rows` (the plane_stream_vector_rows path off); the
// small planes only without `large_planes` (plane_stream_large_planes off).
template <typename scalar_t>
std::optional<PlaneStreamGradWeightLaunch> plan_plane_stream_grad_weight(const PassGeometry& g, const GpuLimits& gpu,
                                                                         bool vector_rows = true,
                                                                         bool large_planes = true) {
  constexpr int64_t kBytes = sizeof(scalar_t);
  if (!has_plane_stream(g, kBytes, large_planes)) return std::nullopt;
  const int64_t quantum = plane_stream_quantum(g, kBytes);
  if (g.dst_channels % quantum != 0) return std::nullopt;  // an entry's group would not start on a vector
  const int tiles_w = static_cast<int>((g.dst_w + kBlockCols - 1) / kBlockCols);
  const int tiles = tiles_w * static_cast<int>((g.dst_h + kBlockRows - 1) / kBlockRows);
  const size_t most_bytes = opt_in_shared_bytes(gpu);
  const auto threads_for = [&](int64_t planes) { return plane_stream_threads(planes, tiles); };
  const auto bytes_for = [&](int64_t planes, int64_t pitch) {
    return plane_stream_grad_weight_shared_bytes(g, planes, pitch, threads_for(planes), kBytes);
  };
  // The most planes, a whole number of quanta, whose two entries fit at `pitch`.
  const auto planes_at = [&](int64_t pitch) {
    int64_t planes = smaller<int64_t>(kThreads / tiles / quantum * quantum, g.dst_channels);
    while (planes > 0 && bytes_for(planes, pitch) > most_bytes) planes -= quantum;
    return planes;
  };
  const int64_t flat_planes = planes_at(g.src_w);
  if (flat_planes < 1) return std::nullopt;
  const auto blocks_per_sm = [&](int64_t planes, int64_t pitch, bool rows_of_vectors) {
    const int registers =
        registers_within_bounds(plane_stream_grad_weight_min_blocks(g.kernel_h, g.stride_h, rows_of_vectors));
    return resident_blocks_per_sm(gpu, threads_for(planes), bytes_for(planes, pitch), registers);
  };
  PlaneStream stream{static_cast<int>(flat_planes), tiles_w, tiles, 0, static_cast<int>(g.src_w), false};
  if (vector_rows && plane_stream_vector_src_rows(g)) {
    choose_plane_stream_rows(g, stream, kBytes, most_bytes, planes_at, bytes_for, blocks_per_sm);
  }
  const int64_t groups = (g.dst_channels + stream.planes - 1) / stream.planes;
  stream.chunks = g.batch * groups;
  if (stream.chunks < gpu.sm_count) return std::nullopt;
  const int threads = threads_for(stream.planes);
  const size_t shared_bytes = bytes_for(stream.planes, stream.pitch);
  const int64_t resident = blocks_per_sm(stream.planes, stream.pitch, stream.vector_rows) * gpu.sm_count;
  // As many slices as the GPU holds at once beside the groups, no more: a second wave of a few blocks,
  // each walking a whole slice, would take as long as the first.
  const int64_t slices_wanted = std::clamp<int64_t>(resident / groups, 1, g.batch);
  const int64_t batch_per_slice = (g.batch + slices_wanted - 1) / slices_wanted;
  if (is_large_plane(g, kBytes) && batch_per_slice < 2) return std::nullopt;
  const int64_t slices = (g.batch + batch_per_slice - 1) / batch_per_slice;
  const int sums_per_round = plane_stream_grad_weight_sums_per_round(g, shared_bytes, threads, kBytes);
  PlaneStreamGradWeightLaunch launch;
  launch.grid = dim3(static_cast<unsigned>(groups), static_cast<unsigned>(slices));
  launch.block = dim3(static_cast<unsigned>(threads));
  launch.work = PlaneStreamGradWeight{stream, static_cast<int>(batch_per_slice), sums_per_round};
  launch.shared_bytes = shared_bytes;
  return launch;
}

}  // namespace at::native::dwconv
