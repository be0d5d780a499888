#pragma once
// The pixel kernels: one thread an output pixel and channel group, every load issued before the
// first multiply-add, for the passes whose threads the GPU holds at once (batch-1 inference, small
// layers). There a pass takes the time of one thread's chain of loads, and the tiled kernels'
// staging (a round of loads, a barrier, the compute, the stores) is a longer chain for the few
// blocks they make: on the H100 (2026-11-22) stock's one-thread-an-output kernel beat our tiles on
// the fp32 NCHW batch-1 forwards of 14x14 and smaller planes and at stride 2, and cuDNN beat them on
// every bf16 channels_last batch-1 forward of MobileNetV2 and EfficientNet-B0. Square 3x3 and 5x5
// at stride 1 or 2, and 7x7 in channels_last at stride 1 (ConvNeXt's batch-1 inference, where our
// tiles ran one warp an SM), dilation 1, multiplier 1: the forward, and backward-input as the
// stride-1 correlation with the flipped filter. Device code and plain host arithmetic, no ATen
// tensors.

#include <ATen/native/cuda/DepthwiseConv2dRegisterTiled.cuh>

namespace at::native::dwconv {

// A thread's channels: a 16-byte vector of them in channels_last, one in NCHW.
template <typename scalar_t, bool kChannelsLast>
constexpr int kPixelChannels = kChannelsLast ? kVector16<scalar_t> : 1;

// Blocks of kThreads threads an SM that the kernel's __launch_bounds__ asks for, so that its
// registers allow them. A channels_last thread holds its group's kernel^2 weight vectors and its
// window's kernel^2 input vectors (16-byte units: 4 registers each in every dtype), 90 to 120
// registers at 3x3 and 190 to 250 at 5x5, and at 7x7 as many of its 98 as the compiler's schedule
// keeps in 255 (kPixelRoundRows); an NCHW thread holds kernel^2 values of each, 32
// registers at 3x3 (a full SM of threads) and 64 at 5x5, twice that in double.
template <typename scalar_t>
constexpr int pixel_min_blocks(int kernel, bool channels_last) {
  if (channels_last) return kernel == 3 ? 2 : 1;
  const int blocks = kernel == 3 ? 8 : 4;
  return sizeof(scalar_t) > 4 ? blocks / 2 : blocks;
}

// Window rows a channels_last thread loads before it multiplies them, a round: all of them at 3x3
// and 5x5. At 7x7 a thread's 49 input and 49 weight vectors would be 392 registers, and ptxas
// issues the later rounds' loads ahead of a round's multiply-adds as far as 255 registers allow.
// The rounds are those whose schedule (sm_80 and sm_90) had no spill and the shortest chain in a
// one-warp model of the machine code (a load's registers ready 300 or 600 cycles after its
// issue): a row in the half types, three in float and double (one spilled in float).
template <typename scalar_t, int kKernel>
constexpr int kPixelRoundRows = kKernel <= 5 ? kKernel : sizeof(scalar_t) == 2 ? 1 : 3;

// Whether a channels_last thread multiplies, in round `round` of kRoundRows window rows, a value
// of its 16-byte weight vector `vector` (of the group's [channel][tap] run of V x kKernel^2
// values; backward-input walks the taps flipped).
template <int kKernel, int kRoundRows, int V, bool kBackward>
__host__ __device__ constexpr bool pixel_round_uses_weights(int vector, int round) {
  constexpr int kTaps = kKernel * kKernel;
  for (int j = 0; j < V; ++j) {
    const int tap = (vector * V + j) % kTaps;
    const int step = kBackward ? kTaps - 1 - tap : tap;  // where the walk meets the tap
    if (step / kKernel / kRoundRows == round) return true;
  }
  return false;
}

// Whether round `round` loads weight vector `vector`: where it uses the vector and the round before
// did not (a vector the previous round used is still held). A vector that ends one channel's
// taps and starts the next is used in the last round and the first, and loaded in both, so that
// it need not be held through every round (ptxas may still merge the loads and hold it: it does in
// bfloat16, where it loads the 16 bytes once; in half it loads each round's part).
template <int kKernel, int kRoundRows, int V, bool kBackward>
__host__ __device__ constexpr bool pixel_round_loads_weights(int vector, int round) {
  return pixel_round_uses_weights<kKernel, kRoundRows, V, kBackward>(vector, round) &&
         !(round > 0 && pixel_round_uses_weights<kKernel, kRoundRows, V, kBackward>(vector, round - 1));
}

// The window of kKernel x kKernel taps whose first row and column are (top, left): load(t, inside,
// pixel) for each tap t, row by row, with whether it lies in the src_h x src_w plane and its pixel's
// offset from the plane's first (outside: a place no load may read).
template <int kKernel, typename Load>
__device__ __forceinline__ void load_window(int top, int left, int src_h, int src_w, Load&& load) {
#pragma unroll
  for (int kh = 0; kh < kKernel; ++kh) {
    const int sy = top + kh;
#pragma unroll
    for (int kw = 0; kw < kKernel; ++kw) {
      const int sx = left + kw;
      load(kh * kKernel + kw, within(sy, src_h) && within(sx, src_w), sy * src_w + sx);
    }
  }
}

// dst[n, c0 + k, y, x] for the thread's channel group, k < kPixelChannels: the window's kernel^2
// inputs (zero on the padding, nothing read there) and the group's weights are loaded first, all
// independent, then multiplied in acc_t (in channels_last a round of rows at a time,
// kPixelRoundRows); backward-input reads the filter flipped in both directions. channels_last:
// the group's weights are the contiguous [channel][tap] run of kPixelChannels x kernel^2 values at
// weight + c0 * kernel^2, kernel^2 whole 16-byte vectors (16-byte aligned where weight is, which
// the choice checks), each value converted where used.
template <typename scalar_t, bool kBackward, int kKernel, int kStride, bool kChannelsLast>
__global__ void __launch_bounds__(kThreads, pixel_min_blocks<scalar_t>(kKernel, kChannelsLast)) pixel_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const int items) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kPixelChannels<scalar_t, kChannelsLast>;
  constexpr int kTaps = kKernel * kKernel;
  static_assert(!kBackward || kStride == 1, "backward-input is a stride-1 correlation");
  const int item = static_cast<int>(blockIdx.x) * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
  if (item >= items) return;
  const int channels = static_cast<int>(g.dst_channels);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);
  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  // The thread's output pixel (n, y, x) and its group's first channel c0. channels_last items are
  // numbered (n, y, x, group), the group fastest, so that a warp's loads of a tap are consecutive
  // 16-byte vectors of a pixel row; NCHW items (n, c, y, x), x fastest: consecutive values of a row.
  const int extents[4] = {0, kChannelsLast ? dst_h : channels, kChannelsLast ? dst_w : dst_h,
                          kChannelsLast ? channels / V : dst_w};
  const GridWalk<int, 4> walk(item, 0, extents);
  const int n = walk.at[0];
  const int c0 = (kChannelsLast ? walk.at[3] : walk.at[1]) * V;
  const int y = kChannelsLast ? walk.at[1] : walk.at[2];
  const int x = kChannelsLast ? walk.at[2] : walk.at[3];
  const int top = y * kStride - g.pad_h;
  const int left = x * kStride - g.pad_w;

  acc_t acc[V];
  if constexpr (kChannelsLast) {
    const scalar_t* const plane = src + n * src_h * src_w * channels + c0;
    const uint32_t* const filters = reinterpret_cast<const uint32_t*>(weight + c0 * kTaps);
    constexpr int kRoundRows = kPixelRoundRows<scalar_t, kKernel>;
    Vector16<uint32_t> in[kTaps];  // as loaded: 32-bit words, each value widened where it is used
    Vector16<uint32_t> w[kTaps];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      acc[k] = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[c0 + k]) : acc_t(0);
    }
#pragma unroll
    for (int round = 0; round * kRoundRows < kKernel; ++round) {
      load_window<kKernel>(top, left, src_h, src_w, [&](int t, bool inside, int pixel) {
        if (t / kKernel / kRoundRows == round) in[t] = load_words_or_zero(inside, plane + pixel * channels);
      });
#pragma unroll
      for (int i = 0; i < kTaps; ++i) {
        if (pixel_round_loads_weights<kKernel, kRoundRows, V, kBackward>(i, round)) {
          w[i] = load_vector(filters + i * kVector16<uint32_t>);
        }
      }
#pragma unroll
      for (int t = round * kRoundRows * kKernel; t < smaller((round + 1) * kRoundRows, kKernel) * kKernel; ++t) {
        const int tap = kBackward ? kTaps - 1 - t : t;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const int flat = k * kTaps + tap;  // channel k's tap in the group's [channel][tap] run
          acc[k] += widen_value<scalar_t, acc_t>(in[t], k) * widen_value<scalar_t, acc_t>(w[flat / V], flat % V);
        }
      }
    }
    Vector16<scalar_t> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = static_cast<scalar_t>(acc[k]);
    store_vector(dst + ((n * dst_h + y) * dst_w + x) * channels + c0, out);
  } else {
    const scalar_t* const plane = src + (n * channels + c0) * src_h * src_w;
    const scalar_t* const filter = weight + c0 * kTaps;
    scalar_t in[kTaps];
    scalar_t w[kTaps];
    load_window<kKernel>(top, left, src_h, src_w, [&](int t, bool inside, int pixel) {
      in[t] = inside ? plane[pixel] : scalar_t(0);
    });
#pragma unroll
    for (int t = 0; t < kTaps; ++t) w[t] = filter[kBackward ? kTaps - 1 - t : t];
    acc[0] = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[c0]) : acc_t(0);
#pragma unroll
    for (int t = 0; t < kTaps; ++t) acc[0] += static_cast<acc_t>(in[t]) * static_cast<acc_t>(w[t]);
    dst[((n * channels + c0) * dst_h + y) * dst_w + x] = static_cast<scalar_t>(acc[0]);
  }
}

// The filters the pixel kernels are compiled for: square 3x3 and 5x5 at stride 1 or 2, and in
// channels_last 7x7 at stride 1 (in NCHW our tiles beat stock's one-thread-an-output kernel there
// at batch 1 on 11-22), dilation 1, multiplier 1.
inline bool has_pixel_kernel(const PassGeometry& g, bool channels_last) {
  return has_register_tiled_filter(g) && (g.kernel_h <= 5 || channels_last) && g.multiplier == 1 &&
         g.src_channels == g.dst_channels;
}

template <typename scalar_t, bool kBackward>
using PixelKernel = void (*)(const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*, PassGeometry, int);

// The pixel kernel's instance for a filter size, stride and layout (has_pixel_kernel's; backward-input
// at stride 1 only), or null.
template <typename scalar_t, bool kBackward, bool kChannelsLast>
PixelKernel<scalar_t, kBackward> pixel_instance(int kernel, int stride) {
  if (stride == 1) {
    if (kernel == 3) return &pixel_kernel<scalar_t, kBackward, 3, 1, kChannelsLast>;
    if (kernel == 5) return &pixel_kernel<scalar_t, kBackward, 5, 1, kChannelsLast>;
    if constexpr (kChannelsLast) {
      if (kernel == 7) return &pixel_kernel<scalar_t, kBackward, 7, 1, kChannelsLast>;
    }
  }
  if constexpr (!kBackward) {
    if (stride == 2) {
      if (kernel == 3) return &pixel_kernel<scalar_t, kBackward, 3, 2, kChannelsLast>;
      if (kernel == 5) return &pixel_kernel<scalar_t, kBackward, 5, 2, kChannelsLast>;
    }
  }
  return nullptr;
}

template <typename scalar_t, bool kBackward>
PixelKernel<scalar_t, kBackward> pixel_kernel_for(int kernel, int stride, bool channels_last) {
  return channels_last ? pixel_instance<scalar_t, kBackward, true>(kernel, stride)
                       : pixel_instance<scalar_t, kBackward, false>(kernel, stride);
}

struct PixelLaunch {
  dim3 grid, block;
  int items;
  bool channels_last;
};

// A pixel launch, where the kernel serves the pass (has_pixel_kernel, and in channels_last whole
// 16-byte channel vectors) and the GPU holds all its threads at once at the kernel's register
// bound (pixel_min_blocks blocks of kThreads an SM, fewer on an SM of 1536 threads): beyond that
// the tiled kernels, which read each input once from global memory, take it. Blocks are as small
// as puts a block on every SM (whole warps, kThreads at most), so that a small grid still spreads
// over all of them. The caller checks 32-bit indexing and, in channels_last, that src, dst and the
// weights are 16-byte aligned.
template <typename scalar_t>
std::optional<PixelLaunch> plan_pixel(const PassGeometry& g, bool channels_last, const GpuLimits& gpu) {
  const int V = channels_last ? kVector16<scalar_t> : 1;
  if (!has_pixel_kernel(g, channels_last) || g.dst_channels % V != 0) return std::nullopt;
  const int64_t items = g.batch * g.dst_h * g.dst_w * (g.dst_channels / V);
  const int bound = pixel_min_blocks<scalar_t>(g.kernel_h, channels_last);
  const int64_t held =
      gpu.sm_count * kThreads * resident_blocks_per_sm(gpu, kThreads, 0, registers_within_bounds(bound));
  if (items > held) return std::nullopt;
  const int64_t per_sm = (items + gpu.sm_count - 1) / gpu.sm_count;
  const int threads = static_cast<int>(std::clamp<int64_t>((per_sm + kWarpLanes - 1) / kWarpLanes * kWarpLanes,
                                                           kWarpLanes, kThreads));
  return PixelLaunch{dim3(static_cast<unsigned>((items + threads - 1) / threads)), dim3(threads),
                     static_cast<int>(items), channels_last};
}

}  // namespace at::native::dwconv
