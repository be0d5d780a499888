#pragma once
// The plane-streamed NCHW kernel for small planes (32x32 floats or fewer: MobileNetV2's, EfficientNet's
// and ConvNeXt's 28x28, 14x14 and 7x7 layers): float, the register-tiled filters (square 3x3, 5x5, 7x7
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
// The largest src plane the kernel takes: 32x32 floats. Larger planes are the register tiles', whose
// blocks hold a few rows of a plane.
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

// The passes the kernel is compiled for: float, the register-tiled filters, multiplier 1, and a src
// plane of kPlaneStreamMaxPlaneBytes or less.
inline bool has_plane_stream(const PassGeometry& g, int element_size) {
  return element_size == 4 && has_register_tiled_filter(g) && g.multiplier == 1 &&
         g.src_channels == g.dst_channels && g.src_h * g.src_w * element_size <= kPlaneStreamMaxPlaneBytes;
}

// Vector rows (PlaneStream::vector_rows) for a pass has_plane_stream takes: src and dst rows of an even
// width (a src row is whole 8-byte pairs; a tile row is stored in one or two stores) and the padding
// across K / 2, so that a window's first column lies K / 2 after the vector boundary before it.
inline bool plane_stream_vector_rows(const PassGeometry& g) {
  return g.src_w % 2 == 0 && g.dst_w % 2 == 0 && g.pad_w == g.kernel_w / 2;
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

template <typename scalar_t, bool kBackward, int kKernel, int kStride, bool kVectorRows>
__global__ void __launch_bounds__(kThreads, plane_stream_min_blocks(kKernel, kStride)) plane_stream_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const PlaneStream s) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<scalar_t>;
  constexpr int K = kKernel;
  constexpr int kTaps = K * K;
  constexpr int kWindowRows = (kBlockRows - 1) * kStride + K;
  constexpr int kWindowCols = (kBlockCols - 1) * kStride + K;
  // Vector rows read a window row from the vector boundary V columns before the tile's first at the
  // stride: its first column is value kLead of the kWindowVectors vectors read.
  constexpr int kLead = kVectorRows ? V - K / 2 : 0;
  constexpr int kWindowVectors = plane_stream_window_vectors(K, kStride, V);
  constexpr int kRowValues = kVectorRows ? kWindowVectors * V : kWindowCols;
  static_assert(kWindowCols <= 32, "the window's columns are a 32-bit mask");
  static_assert(!kVectorRows || (std::is_same_v<scalar_t, acc_t> && K / 2 < V), "vector rows: float, padding below V");
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
  const int window_y0 = y0 * kStride - g.pad_h, window_x0 = x0 * kStride - g.pad_w - kLead;
  // Flat planes: bit q, the window's column q lies in the plane. Vector rows: bit j, vector j starts in
  // it (a vector starting inside and ending past it reads the row's zeroed tail).
  uint32_t columns_inside = 0;
  if constexpr (kVectorRows) {
#pragma unroll
    for (int j = 0; j < kWindowVectors; ++j) columns_inside |= uint32_t(within(window_x0 + j * V, src_w)) << j;
  } else {
#pragma unroll
    for (int q = 0; q < kWindowCols; ++q) columns_inside |= uint32_t(within(window_x0 + q, src_w)) << q;
  }

  // Vector rows: a row moves in units of 16 bytes where it is whole vectors, else 8. Unit e of a chunk
  // is unit e % row_units of its row e / row_units; a thread's units are blockDim.x apart, the same in
  // every chunk, so that it steps their rows and columns instead of dividing.
  const int unit = kVectorRows && src_w % V != 0 ? 2 : V;
  const int row_units = kVectorRows ? src_w / unit : 1;
  const int first_row = static_cast<int>(threadIdx.x) / row_units, first_column = static_cast<int>(threadIdx.x) % row_units;
  const int step_rows = static_cast<int>(blockDim.x) / row_units, step_columns = static_cast<int>(blockDim.x) % row_units;
  if (kVectorRows && src_w % V != 0) {
    // The tail of each row's last vector, past the row: zeros that the copies never write.
    for (int r = threadIdx.x; r < 2 * s.planes * src_h; r += blockDim.x) {
      for (int q = src_w; q % V != 0; ++q) in_buffers[r * s.pitch + q] = scalar_t(0);
    }
  }

  // Chunk `chunk`'s src into buffer `buffer`, as one group of copies (an empty one past the last chunk).
  const auto copy_chunk = [&](int64_t chunk, int buffer) {
    if (chunk < s.chunks) {
      const int first = static_cast<int>(chunk) * s.planes;
      const int chunk_planes = smaller(s.planes, total_planes - first);
      const scalar_t* const from = src + static_cast<int64_t>(first) * src_plane;
      scalar_t* const to = in_buffers + buffer * chunk_src;
      if constexpr (kVectorRows) {
        int row = first_row, column = first_column;
        for (int e = threadIdx.x; e < chunk_planes * src_h * row_units; e += blockDim.x) {
          scalar_t* const at = to + row * s.pitch + column * unit;
          if (unit == V) {
            copy_async_or_zero(reinterpret_cast<Vector16<scalar_t>*>(at), from + e * V, true);
          } else {
            copy_async_8(at, from + e * 2);
          }
          row += step_rows;
          column += step_columns;
          if (column >= row_units) {
            column -= row_units;
            ++row;
          }
        }
      } else {
        const int vectors = chunk_planes * src_plane / V;
        auto* const to_vectors = reinterpret_cast<Vector16<scalar_t>*>(to);
        for (int v = threadIdx.x; v < vectors; v += blockDim.x) copy_async_or_zero(to_vectors + v, from + v * V, true);
      }
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
#pragma unroll
      for (int r = 0; r < kWindowRows; ++r) {
        const int y = window_y0 + r;
        const bool row_inside = within(y, src_h);
        const int row = y * s.pitch + window_x0;  // read only where the row and the column lie in the plane
        acc_t x[kRowValues];
        if constexpr (kVectorRows) {
#pragma unroll
          for (int j = 0; j < kWindowVectors; ++j) {
            const auto vector = load_vector_or_zero(row_inside && (columns_inside >> j & 1u), plane + row + j * V);
#pragma unroll
            for (int e = 0; e < V; ++e) x[j * V + e] = vector.v[e];
          }
        } else {
#pragma unroll
          for (int q = 0; q < kWindowCols; ++q) {
            x[q] = row_inside && (columns_inside >> q & 1u) ? static_cast<acc_t>(plane[row + q]) : acc_t(0);
          }
        }
#pragma unroll
        for (int i = 0; i < kBlockRows; ++i) {
          const int filter_row = r - i * kStride;  // known at compile time: the loops are unrolled
          if (filter_row < 0 || filter_row >= K) continue;
#pragma unroll
          for (int kw = 0; kw < K; ++kw) {
#pragma unroll
            for (int j = 0; j < kBlockCols; ++j) acc[i][j] += x[kLead + j * kStride + kw] * w[filter_row * K + kw];
          }
        }
      }
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

// The plan: as many planes a chunk as a block of kThreads has tiles for, no more than
// kPlaneStreamChunkBytes of src, and a whole number of 16-byte vectors of src and of dst; a block
// for each chunk, up to what the GPU holds at once. Null where the kernel does not take the pass,
// where the tensors are not a whole number of vectors, and where the pass has fewer chunks than the GPU
// has SMs (small grids: the pixel kernel's or the register tiles'). Flat planes only without
// `vector_rows` (the plane_stream_vector_rows path off).
template <typename scalar_t>
std::optional<PlaneStreamLaunch> plan_plane_stream(const PassGeometry& g, const GpuLimits& gpu, bool vector_rows = true) {
  constexpr int64_t kBytes = sizeof(scalar_t);
  if (!has_plane_stream(g, kBytes)) return std::nullopt;
  const int64_t src_plane_bytes = g.src_h * g.src_w * kBytes, dst_plane_bytes = g.dst_h * g.dst_w * kBytes;
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
  const int threads = static_cast<int>((planes * tiles + 31) / 32 * 32);
  PlaneStream stream{static_cast<int>(planes), tiles_w, tiles, chunks, static_cast<int>(g.src_w), false};
  const int registers = registers_within_bounds(plane_stream_min_blocks(g.kernel_h, g.stride_h));
  const auto blocks_per_sm = [&](int64_t pitch) {
    return resident_blocks_per_sm(gpu, threads, plane_stream_shared_bytes(g, planes, pitch, kBytes), registers);
  };
  if (vector_rows && plane_stream_vector_rows(g)) {
    // Vector rows at the pitch of whole vectors, up to three past the row's, whose window rows take the
    // fewest wavefronts (the first of equals), within the 48 KB a block may take and keeping the blocks
    // an SM holds with flat planes (on SMs of 100 KB, a 6x14 plane's padded rows would cost one); flat
    // planes where they take fewer still.
    constexpr int64_t V = kVector16<scalar_t>;
    const int64_t whole = plane_stream_whole_pitch(g, kBytes);
    const int64_t most_blocks = blocks_per_sm(g.src_w);
    int64_t fewest = plane_stream_row_wavefronts(g, stream, g.src_w, false, kBytes);
    for (int64_t pitch = whole; pitch <= whole + 3 * V; pitch += V) {
      if (plane_stream_shared_bytes(g, planes, pitch, kBytes) > kMaxSharedBytes) break;
      if (blocks_per_sm(pitch) < most_blocks) break;
      const int64_t wavefronts = plane_stream_row_wavefronts(g, stream, pitch, true, kBytes);
      if (wavefronts < fewest) {
        fewest = wavefronts;
        stream.pitch = static_cast<int>(pitch);
        stream.vector_rows = true;
      }
    }
  }
  const size_t shared_bytes = plane_stream_shared_bytes(g, planes, stream.pitch, kBytes);
  const int64_t per_sm = blocks_per_sm(stream.pitch);
  const int64_t blocks = smaller(chunks, per_sm * gpu.sm_count);
  PlaneStreamLaunch launch;
  launch.grid = dim3(static_cast<unsigned>(blocks));
  launch.block = dim3(static_cast<unsigned>(threads));
  launch.stream = stream;
  launch.shared_bytes = shared_bytes;
  return launch;
}

}  // namespace at::native::dwconv
