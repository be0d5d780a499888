#pragma once
// The weight gradient of channels_last depthwise convolutions with 3x3 filters at stride 1 and 2
// (dilation 1, multiplier 1), in float and the half types, walked in registers: no shared memory
// and no barrier until a block's sums meet at its end.
//
// grad_weight_window_kernel (DepthwiseConv2dWindowGradWeight.cuh) stages each input row and
// grad_output row in shared memory, widened to acc_t, and waits for them at a barrier a row: a
// block has one row of loads in flight at a time, and at 3x3 a row is 72 multiply-adds a thread.
// On the H200 (2026-11-27) its 3x3 bf16 passes ran at 19-37 % of the DRAM floor, 0.64-0.84x of
// cuDNN, though they hold few instructions a byte: they wait out latency, with shared memory too
// full (the widened rows, 40 KB a block) for more blocks or more rows in flight.
//
// Here thread (vector, lane) owns two channels of one output column of an item (a strip of columns
// of a band of rows of one image, the ring kernel's items) and walks down the band, a grad_output
// row a step. A step's loads, straight from global memory, are the S input rows it adds to its
// window (three columns each, zero on the padding) and its grad_output value; the loads of the
// next walk_prefetch(S) steps are in flight in registers while it multiplies. The window's other
// K - S rows are the previous step's, kept in registers as acc_t, so each value is widened once.
// The left and right columns of a lane's window are its neighbours' middle ones, loaded by the
// same warp instruction: L1 serves them, and each input value comes from DRAM once. A thread
// keeps its 18 tap sums and 2 bias sums; at the end the block's lanes add theirs in lane order
// through shared memory and store the block's run of `partial`, which grad_weight_finish_kernel
// adds in a fixed order: bitwise reproducible, as the other weight-gradient kernels.

#include <ATen/native/cuda/DepthwiseConv2dRingGradWeight.cuh>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>

namespace at::native::dwconv {

constexpr int kWalkKernel = 3;
constexpr int kWalkChannels = 2;  // a thread's: one 32-bit word of a half type, 8 bytes of float
constexpr int kWalkTaps = kWalkKernel * kWalkKernel;
constexpr int kWalkValues = (kWalkTaps + 1) * kWalkChannels;  // a thread's sums: the taps, then the bias
constexpr int kWalkMaxVectors = 64;  // a block's channel pairs at most, so that it has 4 lanes or more

// Steps whose loads are in flight while a step multiplies: a step's new loads are 4 words a thread
// at stride 1 and 7 at stride 2 (half types; twice that in float).
constexpr int walk_prefetch(int stride) {
  return stride == 1 ? 3 : 2;
}

// Blocks an SM the __launch_bounds__ ask for (80 registers), and the planner counts on.
constexpr int kWalkMinBlocks = 3;

constexpr bool is_walk_grad_weight_filter(int kernel, int stride) {
  return kernel == kWalkKernel && (stride == 1 || stride == 2);
}

// A thread's two channels of a pixel as loaded: kept as words until they are widened, as
// load_words_or_zero keeps a 16-byte vector.
template <typename scalar_t>
struct alignas(kWalkChannels * sizeof(scalar_t)) WalkWords {
  uint32_t v[kWalkChannels * sizeof(scalar_t) / 4];
};

template <typename scalar_t>
__device__ __forceinline__ WalkWords<scalar_t> load_walk_words_or_zero(bool inside, const scalar_t* address) {
  WalkWords<scalar_t> words{};
  if (inside) {
#ifdef __CUDA_ARCH__
    words = *reinterpret_cast<const WalkWords<scalar_t>*>(address);
#else
    memcpy(&words, address, sizeof(words));
#endif
  }
  return words;
}

// Shared memory of a block of `threads`: each thread's kWalkValues sums, where the lanes meet.
template <typename acc_t>
size_t walk_shared_bytes(int threads) {
  return size_t(threads) * kWalkValues * sizeof(acc_t);
}

// Blocks of (vectors, lanes) threads: threadIdx.x a pair of channels, threadIdx.y an output column
// of the item's strip (w.tile_w columns). grid: (channel blocks, slices).
template <typename scalar_t, int kStride>
__global__ void __launch_bounds__(kThreads, kWalkMinBlocks) grad_weight_walk_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const RingGradWeightWork w) {
  using acc_t = at::acc_type<scalar_t, true>;
  using Words = WalkWords<scalar_t>;
  constexpr int K = kWalkKernel;
  constexpr int C = kWalkChannels;
  constexpr int kKept = K - kStride;          // window rows a step keeps from the one before
  constexpr int kPrefetch = walk_prefetch(kStride);
  constexpr int kStepLoads = kStride * K + 1;  // the new rows' columns, then grad_output
  static_assert(sizeof(acc_t) == 4, "float and the half types only");
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const scratch = reinterpret_cast<acc_t*>(shared_bytes);  // [lane][value][vector]

  const int vector = threadIdx.x;
  const int lane = threadIdx.y;
  const int vectors = blockDim.x;
  const int lanes = blockDim.y;
  const int channels = static_cast<int>(g.dst_channels);
  const int c0 = static_cast<int>(blockIdx.x) * vectors * C;
  const int channel = c0 + vector * C;  // the thread's first
  const bool live = channel < channels;  // channels are whole pairs
  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);
  const int in_row_pitch = src_w * channels;

  acc_t sums[K][K][C];
  acc_t bias[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    bias[c] = acc_t(0);
#pragma unroll
    for (int kh = 0; kh < K; ++kh) {
#pragma unroll
      for (int kw = 0; kw < K; ++kw) sums[kh][kw][c] = acc_t(0);
    }
  }

  const auto widen = [](const Words& words, acc_t (&values)[C]) {
#pragma unroll
    for (int c = 0; c < C; ++c) values[c] = widen_value<scalar_t, acc_t>(words, c);
  };

  const int64_t item_begin = static_cast<int64_t>(blockIdx.y) * w.items_per_slice;
  const int64_t item_end = smaller(w.items, item_begin + w.items_per_slice);
  for (int64_t item = item_begin; item < item_end; ++item) {
    const int chunk = static_cast<int>(item % w.chunks_w);
    const int band = static_cast<int>(item / w.chunks_w % w.bands);
    const int n = static_cast<int>(item / w.chunks_w / w.bands);
    const int x = chunk * w.tile_w + lane;
    const int y0 = band * w.band_rows;
    const int rows = smaller(w.band_rows, dst_h - y0);
    const bool walks = live && x < dst_w;  // else every load is off and the sums stay as they are
    // Nothing is read where a load is off; its address stays inside the tensor all the same.
    const scalar_t* const in_image = input + static_cast<int64_t>(n) * src_h * in_row_pitch + (live ? channel : 0);
    const scalar_t* const go_image =
        grad_output + static_cast<int64_t>(n) * dst_h * dst_w * channels + (live ? channel : 0);
    const int sx = x * kStride - g.pad_w;  // the window's first column
    bool column_inside[K];
    int column_offset[K];
#pragma unroll
    for (int kw = 0; kw < K; ++kw) {
      column_inside[kw] = walks && within(sx + kw, src_w);
      column_offset[kw] = column_inside[kw] ? (sx + kw) * channels : 0;
    }
    const int first_row = y0 * kStride - g.pad_h;  // step 0's window's first input row

    // Window row kh of step s is input row first_row + s * kStride + kh.
    const auto load_row = [&](int s, int kh, Words* to) {
      const int iy = first_row + s * kStride + kh;
      const bool row_inside = s < rows && within(iy, src_h);
      const int row_offset = row_inside ? iy * in_row_pitch : 0;
#pragma unroll
      for (int kw = 0; kw < K; ++kw) {
        const bool inside = row_inside && column_inside[kw];
        to[kw] = load_walk_words_or_zero(inside, in_image + (inside ? row_offset + column_offset[kw] : 0));
      }
    };
    // Step s's loads: window rows kKept.. (the rows it adds), then its grad_output value.
    const auto load_step = [&](int s, Words (&to)[kStepLoads]) {
#pragma unroll
      for (int r = 0; r < kStride; ++r) load_row(s, kKept + r, to + r * K);
      const bool inside = walks && s < rows;
      to[kStride * K] = load_walk_words_or_zero(inside, go_image + (inside ? ((y0 + s) * dst_w + x) * channels : 0));
    };

    acc_t window[K][K][C];
    {
      Words kept[kKept][K];
#pragma unroll
      for (int kh = 0; kh < kKept; ++kh) load_row(0, kh, kept[kh]);
#pragma unroll
      for (int kh = 0; kh < kKept; ++kh) {
#pragma unroll
        for (int kw = 0; kw < K; ++kw) widen(kept[kh][kw], window[kh][kw]);
      }
    }
    Words in_flight[kPrefetch][kStepLoads];
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u) load_step(u, in_flight[u]);

    // Unrolled by kPrefetch, so that the step's loads sit in registers known at compile time.
    for (int s0 = 0; s0 < rows; s0 += kPrefetch) {
#pragma unroll
      for (int u = 0; u < kPrefetch; ++u) {
        const int s = s0 + u;
        if (s >= rows) break;
#pragma unroll
        for (int r = 0; r < kStride; ++r) {
#pragma unroll
          for (int kw = 0; kw < K; ++kw) widen(in_flight[u][r * K + kw], window[kKept + r][kw]);
        }
        acc_t go[C];
        widen(in_flight[u][kStride * K], go);
        load_step(s + kPrefetch, in_flight[u]);  // in flight from here, into the words just widened
#pragma unroll
        for (int c = 0; c < C; ++c) {
          bias[c] += go[c];
#pragma unroll
          for (int kh = 0; kh < K; ++kh) {
#pragma unroll
            for (int kw = 0; kw < K; ++kw) sums[kh][kw][c] += go[c] * window[kh][kw][c];
          }
        }
        // Down a step: the window's last kKept rows are the next step's first.
#pragma unroll
        for (int kh = 0; kh < kKept; ++kh) {
#pragma unroll
          for (int kw = 0; kw < K; ++kw) {
#pragma unroll
            for (int c = 0; c < C; ++c) window[kh][kw][c] = window[kh + kStride][kw][c];
          }
        }
      }
    }
  }

  // The lanes' sums meet in shared memory; lane 0 of each pair adds them in lane order.
  acc_t values[kWalkValues];  // [tap][channel], then the bias's [channel]
#pragma unroll
  for (int c = 0; c < C; ++c) {
#pragma unroll
    for (int tap = 0; tap < kWalkTaps; ++tap) values[tap * C + c] = sums[tap / K][tap % K][c];
    values[kWalkTaps * C + c] = bias[c];
  }
  if (lanes > 1) {
#pragma unroll
    for (int i = 0; i < kWalkValues; ++i) scratch[(lane * kWalkValues + i) * vectors + vector] = values[i];
    __syncthreads();
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < kWalkValues; ++i) {
        for (int other = 1; other < lanes; ++other) values[i] += scratch[(other * kWalkValues + i) * vectors + vector];
      }
    }
    __syncthreads();  // every lane's sums read
  }
  // The block's run of `partial` ([channel][tap] from channel c0 on), put in shared memory in the
  // run's order by lane 0, then stored by the whole block in order.
  if (lane == 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int tap = 0; tap < kWalkTaps; ++tap) scratch[(vector * C + c) * kWalkTaps + tap] = values[tap * C + c];
    }
  }
  __syncthreads();
  const int threads = vectors * lanes;
  const int tid = lane * vectors + vector;
  const int run_values = smaller(vectors * C, channels - c0) * kWalkTaps;
  acc_t* const run = partial + (static_cast<int64_t>(blockIdx.y) * channels + c0) * kWalkTaps;
  for (int i = tid; i < run_values; i += threads) run[i] = scratch[i];
  if (partial_bias != nullptr && lane == 0 && live) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      partial_bias[static_cast<int64_t>(blockIdx.y) * channels + channel + c] = values[kWalkTaps * C + c];
    }
  }
}

// The kernel for a stride (is_walk_grad_weight_filter at 3x3), or null; compiled for float and the
// half types only.
template <typename scalar_t>
RingGradWeightKernel<scalar_t> grad_weight_walk_kernel_for(int stride) {
  if constexpr (sizeof(at::acc_type<scalar_t, true>) != 4) {
    return nullptr;
  } else {
    switch (stride) {
      case 1: return grad_weight_walk_kernel<scalar_t, 1>;
      case 2: return grad_weight_walk_kernel<scalar_t, 2>;
      default: return nullptr;
    }
  }
}

// Whether the walk kernel can take this pass: the ring kernel's conditions (has_ring_grad_weight,
// the caller checking the layout and the 16-byte alignment) at 3x3, stride 1 or 2.
inline bool has_walk_grad_weight(const PassGeometry& g, size_t element_size) {
  return has_ring_grad_weight(g, element_size) && is_walk_grad_weight_filter(g.kernel_h, g.stride_h);
}

// A block's channels: the pairs of the pass shared evenly by the fewest blocks of at most
// kWalkMaxVectors pairs (wider blocks would leave a block's lanes, whose loads of each other's
// columns L1 serves, too few); its lanes: as many columns as the rest of kThreads threads, the row
// cut into the fewest strips of them, each as wide as it may be. Then the bands and slices of
// cut_ring_items.
template <typename scalar_t>
std::optional<RingGradWeightLaunch> plan_walk_grad_weight(const PassGeometry& g, const GpuLimits& gpu) {
  using acc_t = at::acc_type<scalar_t, true>;
  const int kernel = g.kernel_h, stride = g.stride_h;
  const int64_t pairs = g.dst_channels / kWalkChannels;
  const int64_t channel_blocks = (pairs + kWalkMaxVectors - 1) / kWalkMaxVectors;
  if (channel_blocks > 65535) return std::nullopt;
  const int vectors = static_cast<int>((pairs + channel_blocks - 1) / channel_blocks);
  const int most_lanes = static_cast<int>(std::min<int64_t>(kThreads / vectors, g.dst_w));
  const int64_t strips = (g.dst_w + most_lanes - 1) / most_lanes;
  const int lanes = static_cast<int>((g.dst_w + strips - 1) / strips);
  const int threads = vectors * lanes;
  const size_t shared_bytes = walk_shared_bytes<acc_t>(threads);
  const int64_t resident = resident_blocks_per_sm(gpu, threads, shared_bytes, registers_within_bounds(kWalkMinBlocks)) *
                           std::max<int64_t>(gpu.sm_count, 1);
  const auto cut = cut_ring_items(g, strips, channel_blocks, resident, (kernel - 1) / stride);
  if (!cut) return std::nullopt;
  const int in_w = (lanes - 1) * stride + kernel;
  return RingGradWeightLaunch{
      dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(cut->slices)),
      dim3(static_cast<unsigned>(vectors), static_cast<unsigned>(lanes)),
      RingGradWeightWork{lanes, lanes, in_w, static_cast<int>(strips), static_cast<int>(cut->band_rows),
                         static_cast<int>(cut->bands), cut->items, cut->items_per_slice},
      shared_bytes};
}

}  // namespace at::native::dwconv
