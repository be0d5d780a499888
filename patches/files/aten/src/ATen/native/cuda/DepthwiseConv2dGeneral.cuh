#pragma once
// The general 2D depthwise kernels, for any filter, stride, dilation and multiplier: the tiled
// kernels (NCHW, and channels_last in 16-byte channel vectors), the direct kernel (any strides,
// no tile), the weight gradients that hold a pass of taps in registers, and their launch plans.
// They serve whatever the specialised families (register-tiled, large-filter, conv1d) do not.

#include <ATen/native/cuda/DepthwiseConv2dCommon.cuh>

namespace at::native::dwconv {

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
// Tiled kernel (channels_last, multiplier 1). Channels move as 16-byte vectors of
// kVector16<scalar_t> values. Block: (vectors, kThreads / vectors) threads;
// threadIdx.x picks the block's channel vector, threadIdx.y a pixel lane, and lane p
// computes output row y0 + p / lanes_w, columns x0 + p % lanes_w + j * lanes_w for
// j < cols_per_thread. The input tile (with halo) and the block's weights are staged in
// shared memory as whole vectors, so every global load and store is 16 bytes wide.

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
        const bool inside = in_range && vec < live_vectors && within<index_t>(sy, src_h) && within<index_t>(sx, src_w);
        return load_vector_or_zero(inside, src_image + (sy * src_w + sx) * channels + vec * V);
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
  // Unpadded rows (tap_pitch = vectors): a large filter's taps take most of the block's shared memory.
  stage_weight_vectors(reinterpret_cast<scalar_t*>(taps), weight, c0, channels, taps_count, vectors, vectors, tid,
                       kThreads, kBackward);
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
  __shared__ acc_t warp_sums[kWarps][kSlots + 1];
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
    const acc_t total = sum_over_block(warp_sums, acc, tid);
    const int64_t row = static_cast<int64_t>(slice) * dst_channels + c;  // of partial: slices x channels, 64-bit
    if (tid < taps.count) partial[row * taps_count + tap0 + tid] = total;
    if (tid == kSlots && tap0 == 0 && partial_bias != nullptr) partial_bias[row] = total;
    __syncthreads();  // no thread still reads warp_sums
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
      const int64_t row = static_cast<int64_t>(slice) * dst_channels + c;  // of partial: slices x channels, 64-bit
      if (t < taps.count) partial[row * taps_count + tap0 + t] = total;
      if (t == kSlots && tap0 == 0 && partial_bias != nullptr) partial_bias[row] = total;
    });
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------
// The general kernels' launches.

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

struct ChannelsLastLaunch {
  dim3 grid, block;
  ChannelsLastTile tile;
  size_t shared_bytes;
  bool three_blocks = false;  // the register-tiled kernel: its instance bounded for kThreeBlocksPerSm blocks an SM
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

struct GradWeightPlan {
  bool channels_last;  // the strided kernel; else the NCHW one
  int64_t channel_blocks, slices, rows_per_slice;
};

// Enough batch slices to fill the GPU about four times over, each of at least a few
// thousand output positions; the NCHW kernel needs both tensors NCHW-contiguous.
inline GradWeightPlan plan_grad_weight(const PassGeometry& g, bool both_nchw_contiguous, const GpuLimits& gpu) {
  const bool channels_last = !both_nchw_contiguous;
  const int64_t rows = g.batch * g.dst_h;
  const int64_t channel_blocks =
      channels_last ? (g.dst_channels + kChannelLanes - 1) / kChannelLanes : g.dst_channels;
  const int64_t min_positions_per_slice = 4 * kThreads;
  const int64_t wanted = std::max<int64_t>(1, (4 * gpu.sm_count + channel_blocks - 1) / channel_blocks);
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

}  // namespace at::native::dwconv
