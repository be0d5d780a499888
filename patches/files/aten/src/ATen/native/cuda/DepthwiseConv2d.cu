// Depthwise 2D convolution on CUDA: forward, backward-input and backward-weight.
//
// Project-owned replacement of upstream's file of the same path (patches/series).
// It implements the interfaces upstream's file did: at::native::conv_depthwise2d_cuda,
// conv_depthwise2d_cuda_out (ATen/ops/_conv_depthwise2d_native.h) and the CUDA
// kernel of conv_depthwise2d_backward_stub (ATen/native/ConvUtils.h).
//
// - Layouts: NCHW and channels_last are both computed in place, with no copy;
//   the output (and grad_input) takes the input's suggested memory format.
//   Other strided tensors are copied once into the nearer of the two.
// - dtypes: double, float, half, bfloat16; half types accumulate in float.
// - Index math is 32-bit unless a tensor needs 64 bits (2^31 elements or more).
// - No atomics: every value, the weight gradient included, is summed in a fixed
//   order, so results are bitwise reproducible from run to run.
//
// Kernels:
// - tiled_nchw_kernel: a block computes a tile of one output plane from an input
//   tile (with halo) staged in shared memory; each thread keeps a row of up to
//   kMaxColsPerThread outputs in registers. Serves the forward pass and the
//   stride-1 backward-input pass (a correlation with the flipped kernel).
// - direct_kernel: one output element per thread, any strides, threads ordered
//   as the output is laid out (channels fastest for channels_last, so loads are
//   coalesced across channels). Serves channels_last, small planes, and the
//   strided backward-input pass.
// - grad_weight_*_kernel: each block reduces one slice of the batch x output
//   positions for its channels, taps in registers, then across the block in a
//   fixed tree; grad_weight_finish_kernel adds the slices in slice order.

#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/AccumulateType.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/native/CanUse32BitIndexMath.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/cuda/DepthwiseConv2d.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#ifndef AT_PER_OPERATOR_HEADERS
#include <ATen/Functions.h>
#include <ATen/NativeFunctions.h>
#else
#include <ATen/ops/_conv_depthwise2d_native.h>
#include <ATen/ops/empty.h>
#endif

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

namespace at::native {
namespace {

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

Strides4 strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

constexpr int kThreads = 256;
constexpr int kMaxColsPerThread = 4;
constexpr int kTapsPerPass = 8;
constexpr size_t kMaxSharedBytes = 48 * 1024;  // without opting in to more

int sm_count() {
  return at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
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
  extern __shared__ __align__(sizeof(double)) unsigned char shared_bytes[];
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
  const index_t src_plane_size = static_cast<index_t>(g.src_h) * g.src_w;

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
      const int sy = src_y0 + i / tile_in_w;
      const int sx = src_x0 + i % tile_in_w;
      const bool inside = sy >= 0 && sy < g.src_h && sx >= 0 && sx < g.src_w;
      tile[i] = inside ? static_cast<acc_t>(src_plane[static_cast<index_t>(sy) * g.src_w + sx]) : acc_t(0);
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
// Direct kernel: one dst element per thread, any strides.

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
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    index_t rest = i;
    index_t n, c, y, x;
    if (channels_fastest) {
      c = rest % dst_c; rest /= dst_c;
      x = rest % dst_w; rest /= dst_w;
      y = rest % dst_h; n = rest / dst_h;
    } else {
      x = rest % dst_w; rest /= dst_w;
      y = rest % dst_h; rest /= dst_h;
      c = rest % dst_c; n = rest / dst_c;
    }
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
      // grad_input[y, x] gathers grad_output[sy, sx] where y = sy * stride - pad + kh * dilation.
      for (int member = 0; member < g.multiplier; ++member) {
        const index_t src_c = c * g.multiplier + member;
        const scalar_t* src_plane = src + n * sn + src_c * sc;
        const scalar_t* w = weight + src_c * taps_count;
        for (int kh = 0; kh < g.kernel_h; ++kh) {
          const index_t ty = y + g.pad_h - kh * g.dilation_h;
          if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= src_h) continue;
          const index_t sy = ty / g.stride_h;
          for (int kw = 0; kw < g.kernel_w; ++kw) {
            const index_t tx = x + g.pad_w - kw * g.dilation_w;
            if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= src_w) continue;
            acc += static_cast<acc_t>(src_plane[sy * sh + (tx / g.stride_w) * sw]) *
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

template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads) grad_weight_nchw_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    const PassGeometry g,
    const int64_t rows_per_slice) {
  using acc_t = at::acc_type<scalar_t, true>;
  __shared__ acc_t sums[kTapsPerPass][kThreads];
  const int tid = threadIdx.x;
  const index_t c = blockIdx.x;
  const index_t slice = blockIdx.y;
  const index_t src_c = c / g.multiplier;
  const int taps_count = g.kernel_h * g.kernel_w;
  const index_t rows = static_cast<index_t>(g.batch) * g.dst_h;  // (n, y) pairs
  const index_t row_begin = slice * rows_per_slice;
  const index_t row_end = min(rows, row_begin + static_cast<index_t>(rows_per_slice));
  const index_t positions = row_begin < row_end ? (row_end - row_begin) * g.dst_w : 0;
  const index_t src_h = g.src_h, src_w = g.src_w, dst_h = g.dst_h, dst_w = g.dst_w;
  const index_t src_channels = g.src_channels, dst_channels = g.dst_channels;
  const index_t src_plane_size = src_h * src_w;
  const index_t dst_plane_size = dst_h * dst_w;

  for (int tap0 = 0; tap0 < taps_count; tap0 += kTapsPerPass) {
    acc_t acc[kTapsPerPass];
#pragma unroll
    for (int t = 0; t < kTapsPerPass; ++t) acc[t] = acc_t(0);
    for (index_t p = tid; p < positions; p += kThreads) {
      const index_t row = row_begin + p / dst_w;
      const index_t x = p % dst_w;
      const index_t n = row / dst_h;
      const index_t y = row % dst_h;
      const acc_t go = static_cast<acc_t>(grad_output[(n * dst_channels + c) * dst_plane_size + y * dst_w + x]);
      const scalar_t* src_plane = input + (n * src_channels + src_c) * src_plane_size;
#pragma unroll
      for (int t = 0; t < kTapsPerPass; ++t) {
        const int tap = tap0 + t;
        if (tap < taps_count) {
          const index_t sy = y * g.stride_h - g.pad_h + (tap / g.kernel_w) * g.dilation_h;
          const index_t sx = x * g.stride_w - g.pad_w + (tap % g.kernel_w) * g.dilation_w;
          if (sy >= 0 && sy < src_h && sx >= 0 && sx < src_w) {
            acc[t] += go * static_cast<acc_t>(src_plane[sy * src_w + sx]);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTapsPerPass; ++t) sums[t][tid] = acc[t];
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (tid < half) {
#pragma unroll
        for (int t = 0; t < kTapsPerPass; ++t) sums[t][tid] += sums[t][tid + half];
      }
      __syncthreads();
    }
    if (tid < kTapsPerPass && tap0 + tid < taps_count) {
      partial[(slice * dst_channels + c) * taps_count + tap0 + tid] = sums[tid][0];
    }
    __syncthreads();
  }
}

// channels_last: threadIdx.x walks 32 channels (coalesced), threadIdx.y walks positions.
constexpr int kChannelLanes = 32;
constexpr int kPositionLanes = kThreads / kChannelLanes;
static_assert(kPositionLanes >= kTapsPerPass, "one position lane per tap finishes the reduction");

template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads) grad_weight_channels_last_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    const PassGeometry g,
    const Strides4 go_strides,
    const Strides4 in_strides,
    const int64_t rows_per_slice) {
  using acc_t = at::acc_type<scalar_t, true>;
  __shared__ acc_t sums[kTapsPerPass][kPositionLanes][kChannelLanes];
  const index_t dst_channels = g.dst_channels, dst_h = g.dst_h, dst_w = g.dst_w;
  const index_t src_h = g.src_h, src_w = g.src_w;
  const index_t gn = go_strides.n, gc = go_strides.c, gh = go_strides.h, gw = go_strides.w;
  const index_t in_n = in_strides.n, in_c = in_strides.c, in_h = in_strides.h, in_w = in_strides.w;
  const index_t c = static_cast<index_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  const bool active = c < dst_channels;
  const index_t src_c = c / g.multiplier;
  const index_t slice = blockIdx.y;
  const int taps_count = g.kernel_h * g.kernel_w;
  const index_t rows = static_cast<index_t>(g.batch) * g.dst_h;
  const index_t row_begin = slice * rows_per_slice;
  const index_t row_end = min(rows, row_begin + static_cast<index_t>(rows_per_slice));
  const index_t positions = row_begin < row_end ? (row_end - row_begin) * g.dst_w : 0;

  for (int tap0 = 0; tap0 < taps_count; tap0 += kTapsPerPass) {
    acc_t acc[kTapsPerPass];
#pragma unroll
    for (int t = 0; t < kTapsPerPass; ++t) acc[t] = acc_t(0);
    if (active) {
      for (index_t p = threadIdx.y; p < positions; p += kPositionLanes) {
        const index_t row = row_begin + p / dst_w;
        const index_t x = p % dst_w;
        const index_t n = row / dst_h;
        const index_t y = row % dst_h;
        const acc_t go = static_cast<acc_t>(grad_output[n * gn + c * gc + y * gh + x * gw]);
        const scalar_t* src_pixel_base = input + n * in_n + src_c * in_c;
#pragma unroll
        for (int t = 0; t < kTapsPerPass; ++t) {
          const int tap = tap0 + t;
          if (tap < taps_count) {
            const index_t sy = y * g.stride_h - g.pad_h + (tap / g.kernel_w) * g.dilation_h;
            const index_t sx = x * g.stride_w - g.pad_w + (tap % g.kernel_w) * g.dilation_w;
            if (sy >= 0 && sy < src_h && sx >= 0 && sx < src_w) {
              acc[t] += go * static_cast<acc_t>(src_pixel_base[sy * in_h + sx * in_w]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTapsPerPass; ++t) sums[t][threadIdx.y][threadIdx.x] = acc[t];
    __syncthreads();
    if (threadIdx.y < kTapsPerPass && active && tap0 + threadIdx.y < taps_count) {
      const int t = threadIdx.y;
      acc_t total = acc_t(0);
      for (int lane = 0; lane < kPositionLanes; ++lane) total += sums[t][lane][threadIdx.x];
      partial[(slice * dst_channels + c) * taps_count + tap0 + t] = total;
    }
    __syncthreads();
  }
}

template <typename scalar_t>
__global__ void grad_weight_finish_kernel(
    const at::acc_type<scalar_t, true>* __restrict__ partial,
    scalar_t* __restrict__ grad_weight,
    const int64_t slices,
    const int64_t values) {
  using acc_t = at::acc_type<scalar_t, true>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < values;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    acc_t total = acc_t(0);
    for (int64_t s = 0; s < slices; ++s) total += partial[s * values + i];
    grad_weight[i] = static_cast<scalar_t>(total);
  }
}

// ---------------------------------------------------------------------------
// Host side.

bool needs_64bit_indexing(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && !canUse32BitIndexMath(*t)) return true;
  }
  return false;
}

dim3 grid_for(int64_t total) {
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(sm_count()) * 32);
  return dim3(static_cast<unsigned>(std::max<int64_t>(blocks, 1)));
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
    const int tile_in_h = (rows - 1) * g.stride_h + (g.kernel_h - 1) * g.dilation_h + 1;
    const int tile_in_w = (tile_w - 1) * g.stride_w + (g.kernel_w - 1) * g.dilation_w + 1;
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

// Runs one pass (forward, or backward-input when kBackward) from src into dst.
// `tiled` says the pass may use the tiled kernel: NCHW-contiguous src and dst,
// and for backward a geometry already rewritten as a stride-1 correlation.
template <typename scalar_t, typename index_t, bool kBackward>
void launch_pass(const Tensor& src, const Tensor& weight, const Tensor& bias, const Tensor& dst,
                 const PassGeometry& direct_geometry, const PassGeometry* tiled_geometry) {
  using acc_t = at::acc_type<scalar_t, true>;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const scalar_t* bias_ptr = bias.defined() ? bias.const_data_ptr<scalar_t>() : nullptr;
  if (tiled_geometry != nullptr) {
    if (const auto plan = plan_tiled<acc_t>(*tiled_geometry)) {
      tiled_nchw_kernel<scalar_t, index_t, kBackward>
          <<<plan->grid, plan->block, plan->shared_bytes, stream>>>(
              src.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(), bias_ptr,
              dst.mutable_data_ptr<scalar_t>(), *tiled_geometry, plan->cols_per_thread,
              plan->tile_in_h, plan->tile_in_w);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
  }
  const int64_t total = dst.numel();
  const bool channels_fastest = dst.stride(1) == 1 && dst.size(1) > 1;
  direct_kernel<scalar_t, index_t, kBackward><<<grid_for(total), kThreads, 0, stream>>>(
      src.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(), bias_ptr,
      dst.mutable_data_ptr<scalar_t>(), direct_geometry, strides_of(src), strides_of(dst),
      channels_fastest, static_cast<index_t>(total));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

MemoryFormat layout_of(const Tensor& t) {
  return t.suggest_memory_format() == MemoryFormat::ChannelsLast ? MemoryFormat::ChannelsLast
                                                                 : MemoryFormat::Contiguous;
}

struct Conv2dArgs {
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};

Conv2dArgs check_conv2d_args(IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                             IntArrayRef dilation, const Tensor& weight) {
  TORCH_CHECK(kernel_size.size() == 2, "conv_depthwise2d: kernel_size must have 2 elements, got ", kernel_size.size());
  TORCH_CHECK(stride.size() == 2, "conv_depthwise2d: stride must have 2 elements, got ", stride.size());
  TORCH_CHECK(padding.size() == 2, "conv_depthwise2d: padding must have 2 elements, got ", padding.size());
  TORCH_CHECK(dilation.size() == 2, "conv_depthwise2d: dilation must have 2 elements, got ", dilation.size());
  TORCH_CHECK(weight.dim() == 4 && weight.size(1) == 1,
              "conv_depthwise2d: weight must have shape (out_channels, 1, kH, kW), got ", weight.sizes());
  TORCH_CHECK(weight.size(2) == kernel_size[0] && weight.size(3) == kernel_size[1],
              "conv_depthwise2d: kernel_size ", kernel_size, " does not match the weight's ", weight.sizes());
  TORCH_CHECK(stride[0] > 0 && stride[1] > 0, "conv_depthwise2d: stride must be positive, got ", stride);
  TORCH_CHECK(dilation[0] > 0 && dilation[1] > 0, "conv_depthwise2d: dilation must be positive, got ", dilation);
  TORCH_CHECK(padding[0] >= 0 && padding[1] >= 0, "conv_depthwise2d: padding must be non-negative, got ", padding);
  return {static_cast<int>(kernel_size[0]), static_cast<int>(kernel_size[1]),
          static_cast<int>(stride[0]), static_cast<int>(stride[1]),
          static_cast<int>(padding[0]), static_cast<int>(padding[1]),
          static_cast<int>(dilation[0]), static_cast<int>(dilation[1])};
}

PassGeometry forward_geometry(const Tensor& input, const Tensor& weight, const Conv2dArgs& a,
                              IntArrayRef out_sizes) {
  return PassGeometry{input.size(0),
                      input.size(1), input.size(2), input.size(3),
                      weight.size(0), out_sizes[2], out_sizes[3],
                      a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_h, a.pad_w,
                      a.dilation_h, a.dilation_w,
                      static_cast<int>(weight.size(0) / input.size(1))};
}

// Backward-input as a stride-1 correlation of grad_output with the flipped kernel:
// grad_input[y] = sum_k grad_output[y - ((K-1)*d - p) + k*d] * w[K-1-k]. Only for stride 1
// and p <= (K-1)*d (no negative padding).
std::optional<PassGeometry> backward_input_as_correlation(const PassGeometry& fwd) {
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
PassGeometry backward_input_direct(const PassGeometry& fwd) {
  PassGeometry g = fwd;
  std::swap(g.src_channels, g.dst_channels);
  std::swap(g.src_h, g.dst_h);
  std::swap(g.src_w, g.dst_w);
  return g;
}

void forward_into(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& output,
                  const PassGeometry& g) {
  const bool nchw = input.is_contiguous() && output.is_contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, input.scalar_type(), "conv_depthwise2d_forward_cuda", [&] {
    if (needs_64bit_indexing({&input, &output})) {
      launch_pass<scalar_t, int64_t, false>(input, weight, bias, output, g, nchw ? &g : nullptr);
    } else {
      launch_pass<scalar_t, int32_t, false>(input, weight, bias, output, g, nchw ? &g : nullptr);
    }
  });
}

void backward_input_into(const Tensor& grad_output, const Tensor& weight, const Tensor& grad_input,
                         const PassGeometry& fwd) {
  const auto direct = backward_input_direct(fwd);
  const auto correlation = backward_input_as_correlation(fwd);
  const bool nchw = grad_output.is_contiguous() && grad_input.is_contiguous();
  const PassGeometry* tiled = (nchw && correlation) ? &*correlation : nullptr;
  AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, grad_output.scalar_type(), "conv_depthwise2d_backward_cuda", [&] {
    if (needs_64bit_indexing({&grad_output, &grad_input})) {
      launch_pass<scalar_t, int64_t, true>(grad_output, weight, Tensor(), grad_input, direct, tiled);
    } else {
      launch_pass<scalar_t, int32_t, true>(grad_output, weight, Tensor(), grad_input, direct, tiled);
    }
  });
}

void grad_weight_into(const Tensor& grad_output, const Tensor& input, const Tensor& grad_weight,
                      const PassGeometry& g) {
  const int64_t taps = int64_t(g.kernel_h) * g.kernel_w;
  const int64_t rows = g.batch * g.dst_h;
  // The NCHW kernel needs both tensors NCHW-contiguous; the other one takes any strides.
  const bool channels_last = !(grad_output.is_contiguous() && input.is_contiguous());
  const int64_t channel_blocks = channels_last ? (g.dst_channels + kChannelLanes - 1) / kChannelLanes : g.dst_channels;
  // Enough slices to fill the GPU about four times over, each of at least a few thousand positions.
  const int64_t min_positions_per_slice = 4 * kThreads;
  const int64_t wanted = std::max<int64_t>(1, (4 * sm_count() + channel_blocks - 1) / channel_blocks);
  const int64_t useful = std::max<int64_t>(1, rows * g.dst_w / min_positions_per_slice);
  const int64_t slices = std::min<int64_t>({wanted, useful, rows, 65535});
  const int64_t rows_per_slice = (rows + slices - 1) / slices;
  const auto stream = at::cuda::getCurrentCUDAStream();

  AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, grad_output.scalar_type(), "conv_depthwise2d_grad_weight_cuda", [&] {
    using acc_t = at::acc_type<scalar_t, true>;
    auto partial = at::empty({slices, g.dst_channels, taps},
                             grad_output.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    const dim3 grid(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(slices));
    auto run = [&](auto index_tag) {
      using index_t = decltype(index_tag);
      if (channels_last) {
        grad_weight_channels_last_kernel<scalar_t, index_t><<<grid, dim3(kChannelLanes, kPositionLanes), 0, stream>>>(
            grad_output.const_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(),
            partial.mutable_data_ptr<acc_t>(), g, strides_of(grad_output), strides_of(input), rows_per_slice);
      } else {
        grad_weight_nchw_kernel<scalar_t, index_t><<<grid, kThreads, 0, stream>>>(
            grad_output.const_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(),
            partial.mutable_data_ptr<acc_t>(), g, rows_per_slice);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (needs_64bit_indexing({&grad_output, &input})) {
      run(int64_t{});
    } else {
      run(int32_t{});
    }
    const int64_t values = g.dst_channels * taps;
    grad_weight_finish_kernel<scalar_t><<<grid_for(values), kThreads, 0, stream>>>(
        partial.const_data_ptr<acc_t>(), grad_weight.mutable_data_ptr<scalar_t>(), slices, values);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void check_input_and_weight(const Tensor& input, const Tensor& weight) {
  TORCH_CHECK(input.dim() == 4, "conv_depthwise2d: expected a 4-D input (N, C, H, W), got ", input.dim(), "-D");
  TORCH_CHECK(input.size(1) > 0 && weight.size(0) % input.size(1) == 0,
              "conv_depthwise2d: out_channels (", weight.size(0), ") must be a multiple of in_channels (",
              input.size(1), ")");
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), "conv_depthwise2d: input is ", input.scalar_type(),
              " but weight is ", weight.scalar_type());
  TORCH_CHECK(input.size(2) > 0 && input.size(3) > 0, "conv_depthwise2d: empty spatial input ", input.sizes());
  TORCH_CHECK(input.is_cuda() && weight.is_cuda() && input.device() == weight.device(),
              "conv_depthwise2d: input and weight must be on the same CUDA device");
}

// The output's shape; refuses shapes that leave no output element.
std::vector<int64_t> output_sizes(const Tensor& input, const Tensor& weight, IntArrayRef kernel_size,
                                  IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation) {
  auto sizes = conv_output_size(input.sizes(), weight.sizes(), padding, stride, dilation);
  TORCH_CHECK(sizes[2] > 0 && sizes[3] > 0, "conv_depthwise2d: the output would be empty: input ",
              input.sizes(), ", kernel ", kernel_size, ", stride ", stride, ", padding ", padding, ", dilation ",
              dilation, " give ", IntArrayRef(sizes));
  return sizes;
}

}  // namespace

Tensor& conv_depthwise2d_cuda_out(
    const Tensor& input_,
    const Tensor& weight_,
    IntArrayRef kernel_size,
    const std::optional<Tensor>& bias_opt,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    Tensor& out) {
  const auto args = check_conv2d_args(kernel_size, stride, padding, dilation, weight_);
  check_input_and_weight(input_, weight_);
  const c10::cuda::CUDAGuard device_guard(input_.device());
  const Tensor bias = (bias_opt.has_value() && bias_opt->defined()) ? bias_opt->contiguous() : Tensor();
  TORCH_CHECK(!bias.defined() || (bias.dim() <= 1 && bias.numel() == weight_.size(0)),
              "conv_depthwise2d: bias must have out_channels (", weight_.size(0), ") elements, got ",
              bias.defined() ? bias.sizes() : IntArrayRef{});
  TORCH_CHECK(!bias.defined() || bias.scalar_type() == input_.scalar_type(), "conv_depthwise2d: input is ",
              input_.scalar_type(), " but bias is ", bias.defined() ? bias.scalar_type() : input_.scalar_type());

  const auto layout = layout_of(input_);
  const Tensor input = input_.contiguous(layout);
  const Tensor weight = weight_.contiguous();
  const auto out_sizes = output_sizes(input, weight, kernel_size, stride, padding, dilation);
  resize_output(out, out_sizes);
  if (out.numel() == 0) return out;  // an empty batch
  const auto g = forward_geometry(input, weight, args, out_sizes);
  if (out.is_contiguous(layout)) {
    forward_into(input, weight, bias, out, g);
  } else {
    const Tensor result = at::empty(out_sizes, input.options().memory_format(layout));
    forward_into(input, weight, bias, result, g);
    out.copy_(result);
  }
  return out;
}

Tensor conv_depthwise2d_cuda(
    const Tensor& input,
    const Tensor& weight,
    IntArrayRef kernel_size,
    const std::optional<Tensor>& bias,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation) {
  check_conv2d_args(kernel_size, stride, padding, dilation, weight);
  check_input_and_weight(input, weight);
  // The output takes the input's layout: channels_last in, channels_last out.
  Tensor out = at::empty(output_sizes(input, weight, kernel_size, stride, padding, dilation),
                         input.options().memory_format(layout_of(input)));
  return conv_depthwise2d_cuda_out(input, weight, kernel_size, bias, stride, padding, dilation, out);
}

namespace dwconv {

std::tuple<Tensor, Tensor> depthwise2d_backward_cuda(
    const Tensor& grad_output_,
    const Tensor& self_,
    const Tensor& weight_,
    IntArrayRef kernel_size,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    std::array<bool, 2> output_mask) {
  const auto args = check_conv2d_args(kernel_size, stride, padding, dilation, weight_);
  check_input_and_weight(self_, weight_);
  const c10::cuda::CUDAGuard device_guard(self_.device());
  const auto out_sizes = output_sizes(self_, weight_, kernel_size, stride, padding, dilation);
  TORCH_CHECK(grad_output_.scalar_type() == self_.scalar_type(), "conv_depthwise2d_backward: input is ",
              self_.scalar_type(), " but grad_output is ", grad_output_.scalar_type());
  TORCH_CHECK(grad_output_.sizes() == IntArrayRef(out_sizes),
              "conv_depthwise2d_backward: grad_output has shape ", grad_output_.sizes(),
              " but the convolution's output has shape ", IntArrayRef(out_sizes));

  const auto layout = layout_of(self_);
  const Tensor grad_output = grad_output_.contiguous(layout);
  const auto g = forward_geometry(self_, weight_, args, out_sizes);

  Tensor grad_input;
  if (output_mask[0]) {
    grad_input = at::empty(self_.sizes(), grad_output.options().memory_format(layout));
    if (grad_input.numel() > 0) {
      backward_input_into(grad_output, weight_.contiguous(), grad_input, g);
    }
  }
  Tensor grad_weight;
  if (output_mask[1]) {
    grad_weight = at::empty(weight_.sizes(), grad_output.options());
    if (grad_output.numel() == 0) {
      grad_weight.zero_();  // an empty batch contributes nothing
    } else {
      grad_weight_into(grad_output, self_.contiguous(layout), grad_weight, g);
    }
  }
  return std::make_tuple(std::move(grad_input), std::move(grad_weight));
}

}  // namespace dwconv

REGISTER_CUDA_DISPATCH(conv_depthwise2d_backward_stub, &dwconv::depthwise2d_backward_cuda)

}  // namespace at::native
