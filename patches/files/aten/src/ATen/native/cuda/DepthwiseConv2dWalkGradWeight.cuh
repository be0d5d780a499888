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
// Here thread (vector, lane) owns two channels of walk_columns(S) output columns of an item (a
// strip of columns of a band of rows of one image, the ring kernel's items) and walks down the
// band, a grad_output row a step. A step's loads, straight from global memory, are the S input rows
// it adds to its window (each its columns: 4 at stride 1, 3 at stride 2) and its grad_output
// values; the loads of the next K steps are in flight in registers while it multiplies. The
// window's other K - S rows are the previous steps', kept in registers as acc_t. A lane's edge
// columns are its neighbours' too, loaded by the same warp instruction: L1 serves them, and each
// input value comes from DRAM once. Padding costs no branch around a load: every load reads a
// place inside the tensor, and its words count as zeros where they lie off the plane. A thread
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

// Blocks an SM the __launch_bounds__ ask for (128 registers), and the planner counts on: ptxas
// takes 93-114 (sm_90), and at 80 it spills (bfloat16 at stride 2, the least: 32 bytes).
constexpr int kWalkMinBlocks = 2;

constexpr bool is_walk_grad_weight_filter(int kernel, int stride) {
  return kernel == kWalkKernel && (stride == 1 || stride == 2);
}

// A thread's two channels of a pixel as loaded: kept as words until they are widened, as
// load_words_or_zero keeps a 16-byte vector.
template <typename scalar_t>
struct alignas(kWalkChannels * sizeof(scalar_t)) WalkWords {
  uint32_t v[kWalkChannels * sizeof(scalar_t) / 4];
};

// Output columns a thread walks side by side: at stride 1 two, whose windows share two of their
// four input columns (each input value then loaded and widened twice a row instead of three
// times), for the same 18 sums; at stride 2 one (two would hold 12 words a step in flight).
constexpr int walk_columns(int stride) {
  return stride == 1 ? 2 : 1;
}

// Shared memory of a block of `threads`: each thread's kWalkValues sums, where the lanes meet.
template <typename acc_t>
size_t walk_shared_bytes(int threads) {
  return size_t(threads) * kWalkValues * sizeof(acc_t);
}

// Blocks of (vectors, lanes) threads: threadIdx.x a pair of channels, threadIdx.y walk_columns(S)
// output columns of the item's strip (w.tile_w columns). grid: (channel blocks, slices).
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
  constexpr int kColumns = walk_columns(kStride);
  constexpr int kWindowColumns = (kColumns - 1) * kStride + K;
  constexpr int kKept = K - kStride;  // window rows a step keeps from the one before
  constexpr int kStepLoads = kStride * kWindowColumns + kColumns;  // the new rows, then grad_output
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
  const unsigned pixel_bytes = static_cast<unsigned>(channels * sizeof(scalar_t));
  const unsigned in_row_bytes = src_w * pixel_bytes;

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
  // Loads at byte offsets from a thread's own base: one 64-bit add an address.
  const auto load_at = [](const char* base, unsigned offset) {
    return load_words<Words>(base + offset);
  };

  const int64_t item_begin = static_cast<int64_t>(blockIdx.y) * w.items_per_slice;
  const int64_t item_end = smaller(w.items, item_begin + w.items_per_slice);
  for (int64_t item = item_begin; item < item_end; ++item) {
    const RingItemPlace place = ring_item_place(w, item, dst_h, dst_w);
    const int n = place.n, y0 = place.y0, rows = place.rows;
    const int x = place.x0 + lane * kColumns;  // the thread's first output column
    // Every load is made, from a place inside the tensor (rows and columns clamped to the plane, an
    // idle pair's at the first channel), and its words taken as zeros where it lies on the padding
    // or past the plane: tested when the words are widened, so that nothing holds up the loads.
    const char* const in_image = reinterpret_cast<const char*>(
        input + static_cast<int64_t>(n) * src_h * src_w * channels + (live ? channel : 0));
    const char* const go_image = reinterpret_cast<const char*>(
        grad_output + static_cast<int64_t>(n) * dst_h * dst_w * channels + (live ? channel : 0));
    bool go_inside[kColumns];
    unsigned go_offset[kColumns];
#pragma unroll
    for (int j = 0; j < kColumns; ++j) {
      go_inside[j] = live && x + j < dst_w;
      go_offset[j] = smaller(x + j, dst_w - 1) * pixel_bytes;
    }
    const int sx = x * kStride - g.pad_w;  // the window's first column
    bool column_inside[kWindowColumns];
    unsigned column_offset[kWindowColumns];
#pragma unroll
    for (int q = 0; q < kWindowColumns; ++q) {
      column_inside[q] = live && within(sx + q, src_w);
      column_offset[q] = std::clamp(sx + q, 0, src_w - 1) * pixel_bytes;
    }
    const int first_row = y0 * kStride - g.pad_h;  // step 0's window's first input row

    // Window row kh of step s is input row first_row + a, a = s * kStride + kh, held in slot a % K:
    // the steps are unrolled by K (from a multiple of K), so every slot is known at compile time,
    // and moving down a step moves no value.
    const auto load_row = [&](int a, Words* to) {
      const unsigned row_offset = std::clamp(first_row + a, 0, src_h - 1) * in_row_bytes;
#pragma unroll
      for (int q = 0; q < kWindowColumns; ++q) to[q] = load_at(in_image, row_offset + column_offset[q]);
    };
    const auto widen_row = [&](int a, const Words* from, acc_t (&to)[kWindowColumns][C]) {
      const bool row_inside = within(first_row + a, src_h);
#pragma unroll
      for (int q = 0; q < kWindowColumns; ++q) widen(row_inside && column_inside[q] ? from[q] : Words{}, to[q]);
    };
    // Step s's loads: its window's new rows (kKept..), then its grad_output values; none past the band.
    const auto load_step = [&](int s, Words (&to)[kStepLoads]) {
      if (s >= rows) return;
#pragma unroll
      for (int r = 0; r < kStride; ++r) load_row(s * kStride + kKept + r, to + r * kWindowColumns);
      const unsigned row_offset = (y0 + s) * dst_w * pixel_bytes;
#pragma unroll
      for (int j = 0; j < kColumns; ++j) to[kStride * kWindowColumns + j] = load_at(go_image, row_offset + go_offset[j]);
    };

    acc_t window[K][kWindowColumns][C];  // [slot][column][channel]
    {
      Words kept[kKept][kWindowColumns];
#pragma unroll
      for (int a = 0; a < kKept; ++a) load_row(a, kept[a]);
#pragma unroll
      for (int a = 0; a < kKept; ++a) widen_row(a, kept[a], window[a]);
    }
    Words in_flight[K][kStepLoads];
#pragma unroll
    for (int u = 0; u < K; ++u) load_step(u, in_flight[u]);

    for (int s0 = 0; s0 < rows; s0 += K) {
#pragma unroll
      for (int u = 0; u < K; ++u) {
        const int s = s0 + u;
        // Skipped past the band (the same for the block), not left by a break: at a break every
        // value the loop carries is copied into the registers its exit expects.
        if (s >= rows) continue;
#pragma unroll
        for (int r = 0; r < kStride; ++r) {
          const int kh = kKept + r;
          widen_row(s * kStride + kh, in_flight[u] + r * kWindowColumns, window[(u * kStride + kh) % K]);
        }
        acc_t go[kColumns][C];
#pragma unroll
        for (int j = 0; j < kColumns; ++j) widen(go_inside[j] ? in_flight[u][kStride * kWindowColumns + j] : Words{}, go[j]);
        load_step(s + K, in_flight[u]);  // in flight from here, into the words just widened
#pragma unroll
        for (int j = 0; j < kColumns; ++j) {
          // A column past the plane multiplies nothing: its zeros times an inf of the window it
          // meets would make a NaN that no real column does.
          if (!go_inside[j]) continue;
#pragma unroll
          for (int c = 0; c < C; ++c) {
            bias[c] += go[j][c];
#pragma unroll
            for (int kh = 0; kh < K; ++kh) {
#pragma unroll
              for (int kw = 0; kw < K; ++kw) {
                sums[kh][kw][c] += go[j][c] * window[(u * kStride + kh) % K][j * kStride + kw][c];
              }
            }
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
  add_lanes_in_order(values, kWalkValues, scratch, 0, kWalkValues, lane, lanes);
  // The block's run of `partial` ([channel][tap] from channel c0 on), put in shared memory in the
  // run's order by lane 0, then stored by the whole block in order. The run takes the first
  // vectors x 18 values, inside lane 0's own vectors x 20, which no thread reads: no barrier first.
  if (lane == 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int tap = 0; tap < kWalkTaps; ++tap) scratch[(vector * C + c) * kWalkTaps + tap] = values[tap * C + c];
    }
  }
  __syncthreads();  // the run is in scratch, whoever put it
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
// columns L1 serves, too few); its lanes: as many as the rest of kThreads threads, each
// walk_columns(S) output columns, the row cut into the fewest strips of them, each as wide as it
// may be. Then the bands and slices of cut_ring_items.
template <typename scalar_t>
std::optional<RingGradWeightLaunch> plan_walk_grad_weight(const PassGeometry& g, const GpuLimits& gpu) {
  using acc_t = at::acc_type<scalar_t, true>;
  const int kernel = g.kernel_h, stride = g.stride_h;
  const int columns = walk_columns(stride);
  const int64_t pairs = g.dst_channels / kWalkChannels;
  const int64_t channel_blocks = (pairs + kWalkMaxVectors - 1) / kWalkMaxVectors;
  if (channel_blocks > 65535) return std::nullopt;
  const int vectors = static_cast<int>((pairs + channel_blocks - 1) / channel_blocks);
  const int64_t lane_columns = (g.dst_w + columns - 1) / columns;  // a row's columns, a lane's at a time
  const int most_lanes = static_cast<int>(std::min<int64_t>(kThreads / vectors, lane_columns));
  const int64_t strips = (lane_columns + most_lanes - 1) / most_lanes;
  const int lanes = static_cast<int>((lane_columns + strips - 1) / strips);
  const int threads = vectors * lanes;
  const size_t shared_bytes = walk_shared_bytes<acc_t>(threads);
  const int64_t resident =
      resident_blocks_per_sm(gpu, threads, shared_bytes, registers_within_bounds(kWalkMinBlocks)) *
      std::max<int64_t>(gpu.sm_count, 1);
  const auto cut = cut_ring_items(g, strips, channel_blocks, resident, (kernel - 1) / stride);
  if (!cut) return std::nullopt;
  const int tile_w = lanes * columns;
  const int in_w = (tile_w - 1) * stride + kernel;
  return RingGradWeightLaunch{
      dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(cut->slices)),
      dim3(static_cast<unsigned>(vectors), static_cast<unsigned>(lanes)),
      RingGradWeightWork{tile_w, tile_w, in_w, static_cast<int>(strips), static_cast<int>(cut->band_rows),
                         static_cast<int>(cut->bands), cut->items, cut->items_per_slice},
      shared_bytes};
}

}  // namespace at::native::dwconv
