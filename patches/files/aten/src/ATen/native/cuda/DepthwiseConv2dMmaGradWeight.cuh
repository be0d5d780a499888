#pragma once
// The weight gradient of channels_last depthwise convolutions with square 5x5 and 7x7 filters at
// stride 1 (dilation 1, multiplier 1), in bfloat16 and half, on the tensor cores (sm_80 and later).
//
// grad_weight_window_kernel (DepthwiseConv2dWindowGradWeight.cuh) issues a multiply-add a lane for
// each of the K^2 products of a grad_output value: 49 at 7x7, where an H100 at the DRAM floor has
// about 14 instructions a value to spend. On the H200 (2026-11-27) its 7x7 bf16 passes ran at 8-13 %
// of the floor, level with cuDNN at best. Here a warp's multiply-adds are warp matrix products
// (multiply_add_16x8x8), and of each product's 1,024 about 780 are wanted (the forward's diagonal
// trick, DepthwiseConv2dChannelsLastMma.cuh, wants 128).
//
// For one channel, output columns x0 .. x0 + 7 and input rows r and r + 1, a product D += A B with
//   A[m][j] = input(r + m / 8, x0 + j + m % 8 - pad_w)   (m: kw = m % 8 of input row r + m / 8),
//   B[j][n] = grad_output(r + 1 - n + pad_h, x0 + j)    (n: 8 grad_output rows),
// gives D[kw][n] += sum_j input(r, ...) grad_output(...) for the tap kh = n - 1 (rows 0-7) and
// D[8 + kw][n] for kh = n (rows 8-15, input row r + 1): each input row of a two-row step meets every
// grad_output row its taps reach, kw < K and kh < K of the 16 x 8 sums kept; K = 7 keeps 98 of 128.
// A warp takes one 16-byte channel vector (8 channels: 8 products a step, one a channel) and walks
// down a band of an item (the ring kernel's items, 8 output columns wide), two input rows a step.
// A lane's fragments are the 16-bit values of two adjacent pixels' vectors: a step loads 6 vectors a
// lane (A's two pixels in rows r and r + 1, B's two pixels of one grad_output row) straight from
// global memory, the next step's in flight while this one multiplies, and packs each channel's pairs
// into the products' words. A's unused row 7 (of rows 0-7) is all ones, so that D[7][0] + D[7][1],
// the grad_output rows r + 1 + pad_h and r + pad_h summed, is the bias gradient: every grad_output
// row of the band once over the walk.
//
// A product cannot leave out a term: a zero of B (a grad_output row past the band, a column past the
// plane) times an infinite input makes a NaN that the sum it lands in does not have. Columns past the
// plane are zeroed in A as well; where a warp's kept sums still hold a NaN, it adds them again one
// by one, as the other weight-gradient kernels do (a true NaN stays NaN). At the end the lanes' sums
// meet in shared memory in a fixed order and the block stores its run of `partial`, which
// grad_weight_finish_kernel adds in a fixed order: bitwise reproducible.

#include <ATen/native/cuda/DepthwiseConv2dChannelsLastMma.cuh>
#include <ATen/native/cuda/DepthwiseConv2dRingGradWeight.cuh>

#include <algorithm>
#include <cstdint>
#include <optional>

namespace at::native::dwconv {

constexpr int kMmaGradWeightColumns = 8;  // output columns of an item: a product's k
constexpr int kMmaGradWeightMaxWarps = kThreads / 32;
// Blocks an SM its __launch_bounds__ ask for (128 registers a thread).
constexpr int kMmaGradWeightMinBlocks = 2;

constexpr bool is_mma_grad_weight_filter(int kernel, int stride) {
  return stride == 1 && (kernel == 5 || kernel == 7);
}

// A block's shared memory: each warp's 8 channels' K^2 tap sums and bias sum, then a NaN flag a warp.
inline size_t mma_grad_weight_shared_bytes(int kernel, int warps) {
  return size_t(warps) * (kMmaChannels * (kernel * kernel + 1) + 1) * sizeof(float);
}

// The 16-bit values `channel` of two vectors' words, the first in the low half: a product's pair.
__device__ __forceinline__ std::uint32_t channel_pair(const Vector16<std::uint32_t>& low,
                                                     const Vector16<std::uint32_t>& high, int channel) {
  const std::uint32_t a = low.v[channel / 2], b = high.v[channel / 2];
  return channel % 2 == 0 ? (a & 0xffffu) | (b << 16) : (a >> 16) | (b & 0xffff0000u);
}

// Blocks of (32, warps) threads: threadIdx.y a channel vector. grid: (channel blocks, slices).
template <typename scalar_t, int kKernel>
__global__ void __launch_bounds__(kThreads, kMmaGradWeightMinBlocks) grad_weight_mma_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    float* __restrict__ partial,
    float* __restrict__ partial_bias,
    const PassGeometry g,
    const RingGradWeightWork w) {
  constexpr int K = kKernel;
  constexpr int kTaps = K * K;
  constexpr int kValues = kTaps + 1;  // a channel's taps, then its bias
  constexpr int C = kMmaChannels;
  static_assert(K <= 7, "A's rows 0-6 are the taps across, row 7 the bias's ones");
  DWCONV_SHARED_BYTES(shared_bytes);
  float* const sums = reinterpret_cast<float*>(shared_bytes);  // [warp][channel][value]
  float* const nan_flags = sums + blockDim.y * C * kValues;    // [warp]

  const int lane = threadIdx.x;
  const int warp = threadIdx.y;
  const int warps = blockDim.y;
  const int group = lane / 4;  // A's and D's row (kw), B's column (n)
  const int pair = lane % 4;   // A's and B's columns 2 pair and 2 pair + 1 (j); D's columns likewise
  const int channels = static_cast<int>(g.dst_channels);
  const int c0 = static_cast<int>(blockIdx.x) * warps * C;
  const int channel = c0 + warp * C;  // the warp's first
  const bool live = channel < channels;  // channels are whole vectors
  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);
  const bool tap_row = group < K;    // A's rows 0-6: kw = group
  const bool go_column = group <= K;  // B's columns n = 0 .. K: kh = n - 1 above, n below
  const std::uint32_t bias_row = group == 7 ? kPackedOnes<scalar_t> : 0u;

  float d[C][4];
#pragma unroll
  for (int c = 0; c < C; ++c) {
#pragma unroll
    for (int i = 0; i < 4; ++i) d[c][i] = 0.f;
  }

  // A step's loads: A's two pixels in input rows r and r + 1, B's two pixels of one grad_output row.
  struct StepLoads {
    Vector16<std::uint32_t> above[2], below[2], go[2];
  };

  const int64_t item_begin = static_cast<int64_t>(blockIdx.y) * w.items_per_slice;
  const int64_t item_end = smaller(w.items, item_begin + w.items_per_slice);
  for (int64_t item = item_begin; item < item_end; ++item) {
    const int chunk = static_cast<int>(item % w.chunks_w);
    const int band = static_cast<int>(item / w.chunks_w % w.bands);
    const int n = static_cast<int>(item / w.chunks_w / w.bands);
    const int x0 = chunk * kMmaGradWeightColumns;
    const int y0 = band * w.band_rows;
    const int rows = smaller(w.band_rows, dst_h - y0);
    const scalar_t* const in_image =
        input + static_cast<int64_t>(n) * src_h * src_w * channels + (live ? channel : 0);
    const scalar_t* const go_image =
        grad_output + static_cast<int64_t>(n) * dst_h * dst_w * channels + (live ? channel : 0);
    bool go_inside[2], in_inside[2];
    int go_x[2], in_x[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int x = x0 + 2 * pair + e;
      const int sx = x + group - g.pad_w;
      go_inside[e] = live && go_column && x < dst_w;
      // A column whose grad_output lies past the plane is zero in A too (no 0 x inf there).
      in_inside[e] = live && tap_row && x < dst_w && within(sx, src_w);
      go_x[e] = smaller(x, dst_w - 1);
      in_x[e] = std::clamp(sx, 0, src_w - 1);
    }
    const int first_row = y0 - g.pad_h;          // step 0's input row r
    const int steps = (rows + K - 1 + 1) / 2;    // input rows first_row .. first_row + rows + K - 2

    const auto load_step = [&](int s, StepLoads& to) {
      const int r = first_row + 2 * s;
      const int y = r + 1 - group + g.pad_h;  // B's grad_output row
      const bool go_row = within(y - y0, rows);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        to.above[e] = load_words_or_zero(in_inside[e] && within(r, src_h),
                                         in_image + (static_cast<int64_t>(std::clamp(r, 0, src_h - 1)) * src_w + in_x[e]) * channels);
        to.below[e] = load_words_or_zero(in_inside[e] && within(r + 1, src_h),
                                         in_image + (static_cast<int64_t>(std::clamp(r + 1, 0, src_h - 1)) * src_w + in_x[e]) * channels);
        to.go[e] = load_words_or_zero(go_inside[e] && go_row,
                                      go_image + (static_cast<int64_t>(std::clamp(y, 0, dst_h - 1)) * dst_w + go_x[e]) * channels);
      }
    };

    StepLoads current;
    load_step(0, current);
    for (int s = 0; s < steps; ++s) {
      StepLoads next;
      if (s + 1 < steps) load_step(s + 1, next);  // in flight while this step multiplies
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const std::uint32_t a[2] = {tap_row ? channel_pair(current.above[0], current.above[1], c) : bias_row,
                                    channel_pair(current.below[0], current.below[1], c)};
        multiply_add_16x8x8<scalar_t>(d[c], a, channel_pair(current.go[0], current.go[1], c));
      }
      current = next;
    }
  }

  // Lane (group, pair) holds D[kw][2 pair], D[kw][2 pair + 1] (rows 0-7: kh = n - 1) and
  // D[8 + kw][2 pair], D[8 + kw][2 pair + 1] (rows 8-15: kh = n), kw = group. Tap (kh, kw)'s sum:
  // kh = 2 pair, d[1] + d[2]; kh = 2 pair + 1, this lane's d[3] then the next pair's d[0].
  float* const region = sums + warp * C * kValues;  // [channel][value]
  if (tap_row) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (2 * pair < K) region[c * kValues + 2 * pair * K + group] = d[c][1] + d[c][2];
      if (2 * pair + 1 < K) region[c * kValues + (2 * pair + 1) * K + group] = d[c][3];
    }
  }
  if (group == 7 && pair == 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) region[c * kValues + kTaps] = d[c][0] + d[c][1];
  }
  __syncthreads();  // the first halves of the odd rows are in
  if (tap_row && pair >= 1 && 2 * pair - 1 < K) {
#pragma unroll
    for (int c = 0; c < C; ++c) region[c * kValues + (2 * pair - 1) * K + group] += d[c][0];
  }
  __syncthreads();  // the warp's sums are whole

  // A NaN among them may be a product's 0 x inf: the warp adds its sums again one by one.
  float nans = 0.f;
  for (int v = lane; v < C * kValues; v += 32) nans += region[v] != region[v] ? 1.f : 0.f;
  nans = add_down_warp(nans);
  if (lane == 0) nan_flags[warp] = nans;
  __syncthreads();
  if (nan_flags[warp] > 0.f && live) {
    for (int v = lane; v < C * kValues; v += 32) {
      const int c = v / kValues, tap = v % kValues;
      const int kh = tap / K, kw = tap % K;
      float total = 0.f;
      for (int64_t item = item_begin; item < item_end; ++item) {
        const int chunk = static_cast<int>(item % w.chunks_w);
        const int band = static_cast<int>(item / w.chunks_w % w.bands);
        const int n = static_cast<int>(item / w.chunks_w / w.bands);
        const int y0 = band * w.band_rows;
        const int y_end = smaller(y0 + w.band_rows, dst_h);
        const int x_end = smaller((chunk + 1) * kMmaGradWeightColumns, dst_w);
        for (int y = y0; y < y_end; ++y) {
          for (int x = chunk * kMmaGradWeightColumns; x < x_end; ++x) {
            const float go = static_cast<float>(
                grad_output[((static_cast<int64_t>(n) * dst_h + y) * dst_w + x) * channels + channel + c]);
            if (tap == kTaps) {
              total += go;
              continue;
            }
            const int iy = y + kh - g.pad_h, ix = x + kw - g.pad_w;
            if (within(iy, src_h) && within(ix, src_w)) {
              total += go * static_cast<float>(
                                input[((static_cast<int64_t>(n) * src_h + iy) * src_w + ix) * channels + channel + c]);
            }
          }
        }
      }
      region[v] = total;
    }
  }
  __syncthreads();  // every warp's sums are final

  // The block's run of `partial` ([channel][tap] from channel c0 on), stored by the whole block in order.
  const int tid = warp * 32 + lane;
  const int run_channels = smaller(warps * C, channels - c0);
  float* const run = partial + (static_cast<int64_t>(blockIdx.y) * channels + c0) * kTaps;
  for (int i = tid; i < run_channels * kTaps; i += warps * 32) run[i] = sums[(i / kTaps) * kValues + i % kTaps];
  if (partial_bias != nullptr) {
    for (int i = tid; i < run_channels; i += warps * 32) {
      partial_bias[static_cast<int64_t>(blockIdx.y) * channels + c0 + i] = sums[i * kValues + kTaps];
    }
  }
}

// The kernel for a filter size (is_mma_grad_weight_filter at stride 1), or null; compiled for
// bfloat16 and half only.
template <typename scalar_t>
RingGradWeightKernel<scalar_t> grad_weight_mma_kernel_for(int kernel) {
  if constexpr (!kWarpMatrixType<scalar_t>) {
    return nullptr;
  } else {
    switch (kernel) {
      case 5: return grad_weight_mma_kernel<scalar_t, 5>;
      case 7: return grad_weight_mma_kernel<scalar_t, 7>;
      default: return nullptr;
    }
  }
}

// Whether the tensor-core kernel can take this pass: the ring kernel's conditions
// (has_ring_grad_weight, the caller checking the layout and the 16-byte alignment) in a half type, at
// 5x5 or 7x7 and stride 1, where the code runs as sm_80 or later.
inline bool has_mma_grad_weight(const PassGeometry& g, size_t element_size, int compute_capability) {
  return has_ring_grad_weight(g, element_size) && element_size == 2 &&
         is_mma_grad_weight_filter(g.kernel_h, g.stride_h) && compute_capability >= kWarpMatrixCapability;
}

// A block's warps: the channel vectors of the pass shared evenly by the fewest blocks of at most
// kMmaGradWeightMaxWarps; items 8 output columns wide; then the bands and slices of cut_ring_items.
template <typename scalar_t>
std::optional<RingGradWeightLaunch> plan_mma_grad_weight(const PassGeometry& g, const GpuLimits& gpu) {
  const int kernel = g.kernel_h;
  const int64_t vectors = g.dst_channels / kMmaChannels;
  const int64_t channel_blocks = (vectors + kMmaGradWeightMaxWarps - 1) / kMmaGradWeightMaxWarps;
  if (channel_blocks > 65535) return std::nullopt;
  const int warps = static_cast<int>((vectors + channel_blocks - 1) / channel_blocks);
  const size_t shared_bytes = mma_grad_weight_shared_bytes(kernel, warps);
  const int64_t resident =
      resident_blocks_per_sm(gpu, warps * 32, shared_bytes, registers_within_bounds(kMmaGradWeightMinBlocks)) *
      std::max<int64_t>(gpu.sm_count, 1);
  const int64_t chunks_w = (g.dst_w + kMmaGradWeightColumns - 1) / kMmaGradWeightColumns;
  const auto cut = cut_ring_items(g, chunks_w, channel_blocks, resident, kernel - 1);
  if (!cut) return std::nullopt;
  return RingGradWeightLaunch{
      dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(cut->slices)),
      dim3(32, static_cast<unsigned>(warps)),
      RingGradWeightWork{kMmaGradWeightColumns, kMmaGradWeightColumns, kMmaGradWeightColumns + kernel - 1,
                         static_cast<int>(chunks_w), static_cast<int>(cut->band_rows), static_cast<int>(cut->bands),
                         cut->items, cut->items_per_slice},
      shared_bytes};
}

}  // namespace at::native::dwconv
