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
// A's unused row 7 (of rows 0-7) is all ones, so that D[7][0] + D[7][1], grad_output rows
// r + 1 + pad_h and r + pad_h summed, is the bias gradient: every grad_output row of the band once
// over the walk.
//
// A block is V channel vectors (8 channels each) by Q chunks of 8 output columns, a warp a vector
// and a chunk, 8 products a step (one a channel). It walks down a band of an item (the ring
// kernel's items, 8 Q output columns wide) two input rows a step. Shared memory holds, for each
// vector, a ring of 6 input rows (the step's two and the next two steps') and of 12 grad_output
// rows (the step's eight and the next two steps' four), pixels contiguous a vector, so that a warp's fragment
// loads read consecutive 16-byte vectors (a lane's: two adjacent pixels, whose 16-bit values of one
// channel are its pair of a product's words): a quarter warp's 8 lanes read 8 pixels of one row
// (A), or 4 pixels of two rows a pitch of 1 mod 8 pixels apart (B), each a conflict-free
// wavefront. From global memory the block copies a row's pixels with their V vectors side by
// side (cp.async, the next two steps' rows in flight while this one multiplies: a step of a block
// is a few hundred cycles, a load from DRAM more), so that a warp's
// copies are whole runs of the tensor; read straight from global memory a warp's one vector of
// each of 15 pixels hit one L1 line a lane.
//
// A product cannot leave out a term: a zero of B (a grad_output row past the band, a column past the
// plane) times an infinite input makes a NaN that the sum it lands in does not have. Columns past the
// plane are zeroed in A as well; where a vector's kept sums still hold a NaN, its warp adds them
// again one by one, as the other weight-gradient kernels do (a true NaN stays NaN). At the end the
// lanes' and chunks' sums meet in shared memory in a fixed order and the block stores its run of
// `partial`, which grad_weight_finish_kernel adds in a fixed order: bitwise reproducible.

#include <ATen/native/cuda/DepthwiseConv2dChannelsLastMma.cuh>
#include <ATen/native/cuda/DepthwiseConv2dRingGradWeight.cuh>

#include <algorithm>
#include <cstdint>
#include <optional>

// Counts the warps that add their sums again one by one: nothing on a GPU; the CPU emulator counts
// them, so that a fallback on finite data (which hides any bug that makes a NaN, unwritten shared
// memory's poison included) fails its check.
#ifndef DWCONV_COUNT_NAN_FALLBACK
#define DWCONV_COUNT_NAN_FALLBACK()
#endif

namespace at::native::dwconv {

constexpr int kMmaGradWeightColumns = 8;   // output columns of a warp's chunk: a product's k
constexpr int kMmaGradWeightMaxVectors = 4;  // a block's channel vectors at most: 2 chunks or more a block
constexpr int kMmaGradWeightInRows = 6;    // the input ring: a step's two rows and the next two steps'
constexpr int kMmaGradWeightGoRows = 12;   // the grad_output ring: a step's eight rows and the next two steps' four
// Blocks an SM its __launch_bounds__ ask for (128 registers a thread).
constexpr int kMmaGradWeightMinBlocks = 2;

constexpr bool is_mma_grad_weight_filter(int kernel, int stride) {
  return stride == 1 && (kernel == 5 || kernel == 7);
}

// A ring row's pixels: `pixels` rounded up to 1 mod 8, so that rows lie 16 bytes mod 128 apart.
constexpr int mma_grad_weight_pitch(int pixels) {
  return (pixels + 6) / 8 * 8 + 1;
}

// Where a block's vectors lie in shared memory: a vector's rings, in 16-byte vectors.
struct MmaGradWeightLayout {
  int in_pitch, go_pitch;  // pixels a ring row holds
  int vector_stride;       // 16-byte vectors from one channel vector's rings to the next's
};

__host__ __device__ inline MmaGradWeightLayout mma_grad_weight_layout(int kernel, int chunks) {
  MmaGradWeightLayout l{};
  l.in_pitch = mma_grad_weight_pitch(chunks * kMmaGradWeightColumns + kernel - 1);
  l.go_pitch = mma_grad_weight_pitch(chunks * kMmaGradWeightColumns);
  l.vector_stride = kMmaGradWeightInRows * l.in_pitch + kMmaGradWeightGoRows * l.go_pitch;
  return l;
}

// A block's shared memory: its vectors' rings; at the end, each warp's 8 channels' K^2 tap sums
// and bias sum, then a NaN flag a vector, in the same bytes.
inline size_t mma_grad_weight_shared_bytes(int kernel, int vectors, int chunks) {
  const size_t rings = size_t(vectors) * mma_grad_weight_layout(kernel, chunks).vector_stride * 16;
  const size_t sums = (size_t(vectors) * chunks * kMmaChannels * (kernel * kernel + 1) + vectors) * sizeof(float);
  return std::max(rings, sums);
}

// The 16-bit values `channel` of two vectors' words, the first in the low half: a product's pair
// (one PRMT; written as shifts and masks, nvcc 13 made two instructions of each).
__device__ __forceinline__ std::uint32_t channel_pair(const Vector16<std::uint32_t>& low,
                                                     const Vector16<std::uint32_t>& high, int channel) {
  const std::uint32_t a = low.v[channel / 2], b = high.v[channel / 2];
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, channel % 2 == 0 ? 0x5410 : 0x7632);
#else
  return channel % 2 == 0 ? (a & 0xffffu) | (b << 16) : (a >> 16) | (b & 0xffff0000u);
#endif
}

// Blocks of (32, vectors x chunks) threads: warp w takes vector w % vectors of chunk w / vectors.
// grid: (channel blocks, slices). w.tile_w: the item's output columns (chunks x 8).
template <typename scalar_t, int kKernel>
__global__ void __launch_bounds__(kThreads, kMmaGradWeightMinBlocks) grad_weight_mma_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    float* __restrict__ partial,
    float* __restrict__ partial_bias,
    const PassGeometry g,
    const RingGradWeightWork w) {
  using Vec = Vector16<scalar_t>;
  using Words = Vector16<std::uint32_t>;
  constexpr int K = kKernel;
  constexpr int kTaps = K * K;
  constexpr int kValues = kTaps + 1;  // a channel's taps, then its bias
  constexpr int C = kMmaChannels;
  constexpr int kGo = kMmaGradWeightGoRows;
  constexpr int kIn = kMmaGradWeightInRows;
  static_assert(K <= 7, "A's rows 0-6 are the taps across, row 7 the bias's ones");
  DWCONV_SHARED_BYTES(shared_bytes);

  const int lane = threadIdx.x;
  const int warp = threadIdx.y;
  const int warps = blockDim.y;
  const int tid = warp * 32 + lane;
  const int threads = warps * 32;
  const int chunks = w.tile_w / kMmaGradWeightColumns;
  const int vectors = warps / chunks;
  const int vector = warp % vectors;   // the warp's channel vector
  const int chunk = warp / vectors;    // and its chunk of the item's columns
  const int group = lane / 4;  // A's and D's row (kw), B's column (n)
  const int pair = lane % 4;   // A's and B's columns 2 pair and 2 pair + 1 (j); D's columns likewise
  const int channels = static_cast<int>(g.dst_channels);
  const int c0 = static_cast<int>(blockIdx.x) * vectors * C;
  const int channel = c0 + vector * C;  // the warp's first
  const bool live = channel < channels;  // channels are whole vectors
  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);
  const bool tap_row = group < K;    // A's rows 0-6: kw = group
  const bool go_column = group <= K;  // B's columns n = 0 .. K: kh = n - 1 above, n below
  const std::uint32_t bias_row = group == 7 ? kPackedOnes<scalar_t> : 0u;
  const MmaGradWeightLayout layout = mma_grad_weight_layout(K, chunks);
  const int in_w = w.in_w;  // input pixels a ring row holds: w.tile_w + K - 1
  Vec* const rings = reinterpret_cast<Vec*>(shared_bytes);  // [vector][in ring, then go ring][pixel]
  const auto in_slot = [&](int v, int slot) { return rings + v * layout.vector_stride + slot * layout.in_pitch; };
  const auto go_slot = [&](int v, int slot) {
    return rings + v * layout.vector_stride + kIn * layout.in_pitch + slot * layout.go_pitch;
  };
  const int block_vectors = smaller(vectors, (channels - c0) / C);  // the live ones
  // The (pixel, vector) this thread copies of each ring row: a row's in_w x vectors copies fit the
  // block's threads, (8 chunks + K - 1) vectors <= 32 chunks vectors for K <= 25.
  const int copy_v = tid % vectors, copy_px = tid / vectors;
  const bool copy_input = copy_px < in_w, copy_go = copy_px < w.tile_w;

  float d[C][4];
#pragma unroll
  for (int c = 0; c < C; ++c) {
#pragma unroll
    for (int i = 0; i < 4; ++i) d[c][i] = 0.f;
  }

  const int64_t item_begin = static_cast<int64_t>(blockIdx.y) * w.items_per_slice;
  const int64_t item_end = smaller(w.items, item_begin + w.items_per_slice);
  for (int64_t item = item_begin; item < item_end; ++item) {
    const RingItemPlace place = ring_item_place(w, item, dst_h, dst_w);
    const int n = place.n, x_base = place.x0, y0 = place.y0, rows = place.rows;
    const int first_row = y0 - g.pad_h;          // step 0's input row r
    const int steps = (rows + K - 1 + 1) / 2;    // input rows first_row .. first_row + rows + K - 2
    const scalar_t* const in_image = input + static_cast<int64_t>(n) * src_h * src_w * channels + c0;
    const scalar_t* const go_image = grad_output + static_cast<int64_t>(n) * dst_h * dst_w * channels + c0;

    // Input row r into its slot, grad_output row y into its: zero off the plane, past the band and
    // past the block's channels. A thread copies (pixel copy_px, vector copy_v) of each row, vectors
    // fastest, so that a warp's copies are runs of the tensor; element offsets from the thread's
    // column fit 32 bits (the kernel runs with 32-bit indexing only).
    const int sx = x_base - g.pad_w + copy_px;
    const bool in_column = copy_input && copy_v < block_vectors && within(sx, src_w);
    const bool go_column_inside = copy_go && copy_v < block_vectors && x_base + copy_px < dst_w;
    const int copy_channel = copy_v < block_vectors ? copy_v * C : 0;  // an idle copy's address stays inside
    const scalar_t* const in_at = in_image + (in_column ? sx : 0) * channels + copy_channel;
    const scalar_t* const go_at = go_image + (go_column_inside ? x_base + copy_px : 0) * channels + copy_channel;
    const unsigned in_row_elements = static_cast<unsigned>(src_w * channels);
    const unsigned go_row_elements = static_cast<unsigned>(dst_w * channels);
    const auto copy_input_row = [&](int r, int slot) {
      const bool inside = in_column && within(r, src_h);
      if (copy_input) {
        copy_async_or_zero(in_slot(copy_v, slot) + copy_px, in_at + (inside ? unsigned(r) * in_row_elements : 0u), inside);
      }
    };
    const auto copy_go_row = [&](int y, int slot) {
      const bool inside = go_column_inside && within(y - y0, rows);
      if (copy_go) {
        copy_async_or_zero(go_slot(copy_v, slot) + copy_px, go_at + (inside ? unsigned(y) * go_row_elements : 0u), inside);
      }
    };

    // Step s's rows: input rows first_row + 2 s and + 1 (slots 2 s and 2 s + 1, mod kIn) and
    // grad_output rows y0 + 2 s - 6 .. + 1 (slot y - y0 + 8, mod kGo), of which the step before has
    // brought all but input rows first_row + 2 s, + 1 and grad_output rows y0 + 2 s, + 1. A group of
    // copies a step, committed even where empty (past the band), so that waiting for all but the
    // newest group always waits for the next step's. The slots a call writes turn as it is called.
    int in_write = 0, go_write = 8;
    const auto copy_step = [&](int s) {
      if (s < steps) {
        copy_input_row(first_row + 2 * s, in_write);
        copy_input_row(first_row + 2 * s + 1, in_write + 1);
        copy_go_row(y0 + 2 * s, go_write);
        copy_go_row(y0 + 2 * s + 1, go_write + 1);
      }
      commit_async_copies();
      in_write = in_write + 2 < kIn ? in_write + 2 : 0;
      go_write = go_write + 2 < kGo ? go_write + 2 : 0;
    };
    // No thread still reads the previous item's rings: its last step ended in a barrier. The rows
    // above the band that step 0 reads (y0 - 6 .. y0 - 1) are zeros.
    for (int y = y0 - 6; y < y0; ++y) copy_go_row(y, y - y0 + 8);
    copy_step(0);
    copy_step(1);
    wait_async_copies<1>();
    __syncthreads();

    // The lane's fragments: A's pixels (its two columns moved by kw = group) and B's, in the
    // chunk; a column past the plane is zero in A as it is in B. A's rows past the taps read as
    // `fill`: zeros, and row 7's ones (the bias).
    const int x0 = chunk * kMmaGradWeightColumns + 2 * pair;  // in the item
    const bool a_inside[2] = {live && tap_row && x_base + x0 < dst_w, live && tap_row && x_base + x0 + 1 < dst_w};
    const int a_px = x0 + group;
    Words fill, zero;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      fill.v[i] = bias_row;
      zero.v[i] = 0u;
    }
    const Words above_fill[2] = {a_inside[0] || tap_row ? zero : fill, a_inside[1] || tap_row ? zero : fill};
    int in_read = 0;              // step s's input rows' slots: 2 s and 2 s + 1, mod kIn
    int go_read = 9 - group;      // B's column n = group: grad_output row y0 + 2 s + 1 - group
    for (int s = 0; s < steps; ++s) {
      copy_step(s + 2);  // into the slots that neither this step nor the next reads
      const Words* const above = reinterpret_cast<const Words*>(in_slot(vector, in_read) + a_px);
      const Words* const below = reinterpret_cast<const Words*>(in_slot(vector, in_read + 1) + a_px);
      const Words* const go = reinterpret_cast<const Words*>(go_slot(vector, go_read) + x0);
      const Words above0 = a_inside[0] ? above[0] : above_fill[0], above1 = a_inside[1] ? above[1] : above_fill[1];
      const Words below0 = a_inside[0] ? below[0] : zero, below1 = a_inside[1] ? below[1] : zero;
      const Words go0 = go_column ? go[0] : zero, go1 = go_column ? go[1] : zero;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const std::uint32_t a[2] = {channel_pair(above0, above1, c), channel_pair(below0, below1, c)};
        multiply_add_16x8x8<scalar_t>(d[c], a, channel_pair(go0, go1, c));
      }
      in_read = in_read + 2 < kIn ? in_read + 2 : 0;
      go_read = go_read + 2 < kGo ? go_read + 2 : go_read + 2 - kGo;
      wait_async_copies<1>();  // all but step s + 2's group
      __syncthreads();  // the next step's rows are in; this step's are no longer read
    }
  }
  wait_async_copies<0>();  // the last steps' groups, empty

  // Lane (group, pair) holds D[kw][2 pair], D[kw][2 pair + 1] (rows 0-7: kh = n - 1) and
  // D[8 + kw][2 pair], D[8 + kw][2 pair + 1] (rows 8-15: kh = n), kw = group. Tap (kh, kw)'s sum:
  // kh = 2 pair, d[1] + d[2]; kh = 2 pair + 1, this lane's d[3] then the next pair's d[0]. The
  // warps' sums go where the rings were (the last step ended in a barrier).
  float* const sums = reinterpret_cast<float*>(shared_bytes);  // [warp][channel][value]
  float* const nan_flags = sums + warps * C * kValues;         // [vector]
  float* const region = sums + warp * C * kValues;
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
  __syncthreads();  // every warp's sums are whole
  // A vector's chunks' sums, in chunk order, into its first chunk's warp's (warp = vector).
  for (int i = tid; i < vectors * C * kValues; i += threads) {
    float total = sums[i];
    for (int q = 1; q < chunks; ++q) total += sums[q * vectors * C * kValues + i];
    sums[i] = total;
  }
  __syncthreads();

  // A NaN among a vector's sums may be a product's 0 x inf: its first warp adds them again one by one.
  if (chunk == 0) {
    float nans = 0.f;
    for (int v = lane; v < C * kValues; v += 32) nans += region[v] != region[v] ? 1.f : 0.f;
    nans = add_down_warp(nans);
    if (lane == 0) nan_flags[vector] = nans;
  }
  __syncthreads();
  if (chunk == 0 && nan_flags[vector] > 0.f && live) {
    if (lane == 0) DWCONV_COUNT_NAN_FALLBACK();
    for (int v = lane; v < C * kValues; v += 32) {
      const int c = v / kValues, tap = v % kValues;
      const int kh = tap / K, kw = tap % K;
      float total = 0.f;
      for (int64_t item = item_begin; item < item_end; ++item) {
        const RingItemPlace place = ring_item_place(w, item, dst_h, dst_w);
        for (int y = place.y0; y < place.y0 + place.rows; ++y) {
          for (int x = place.x0; x < place.x0 + place.cols; ++x) {
            const float go = static_cast<float>(
                grad_output[((static_cast<int64_t>(place.n) * dst_h + y) * dst_w + x) * channels + channel + c]);
            if (tap == kTaps) {
              total += go;
              continue;
            }
            const int iy = y + kh - g.pad_h, ix = x + kw - g.pad_w;
            if (within(iy, src_h) && within(ix, src_w)) {
              total += go * static_cast<float>(
                                input[((static_cast<int64_t>(place.n) * src_h + iy) * src_w + ix) * channels + channel + c]);
            }
          }
        }
      }
      region[v] = total;
    }
  }
  __syncthreads();  // every vector's sums are final

  // The block's run of `partial` ([channel][tap] from channel c0 on), stored by the whole block in order.
  const int run_channels = block_vectors * C;
  float* const run = partial + (static_cast<int64_t>(blockIdx.y) * channels + c0) * kTaps;
  for (int i = tid; i < run_channels * kTaps; i += threads) run[i] = sums[(i / kTaps) * kValues + i % kTaps];
  if (partial_bias != nullptr) {
    for (int i = tid; i < run_channels; i += threads) {
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

// A block's vectors: the pass's channel vectors shared evenly by the fewest blocks of at most
// kMmaGradWeightMaxVectors; its chunks: as many as fill kThreads threads, no more than a row has;
// items as wide as the chunks; then the bands and slices of cut_ring_items.
template <typename scalar_t>
std::optional<RingGradWeightLaunch> plan_mma_grad_weight(const PassGeometry& g, const GpuLimits& gpu) {
  const int kernel = g.kernel_h;
  const int64_t all_vectors = g.dst_channels / kMmaChannels;
  const int64_t channel_blocks = (all_vectors + kMmaGradWeightMaxVectors - 1) / kMmaGradWeightMaxVectors;
  if (channel_blocks > 65535) return std::nullopt;
  const int vectors = static_cast<int>((all_vectors + channel_blocks - 1) / channel_blocks);
  const int64_t row_chunks = (g.dst_w + kMmaGradWeightColumns - 1) / kMmaGradWeightColumns;
  const int most_chunks = static_cast<int>(std::min<int64_t>(kThreads / 32 / vectors, row_chunks));
  const int64_t items_w = (row_chunks + most_chunks - 1) / most_chunks;
  const int chunks = static_cast<int>((row_chunks + items_w - 1) / items_w);  // items no wider than they need
  const int tile_w = chunks * kMmaGradWeightColumns;
  const size_t shared_bytes = mma_grad_weight_shared_bytes(kernel, vectors, chunks);
  const int64_t resident =
      resident_blocks_per_sm(gpu, vectors * chunks * 32, shared_bytes,
                             registers_within_bounds(kMmaGradWeightMinBlocks)) *
      std::max<int64_t>(gpu.sm_count, 1);
  const auto cut = cut_ring_items(g, items_w, channel_blocks, resident, kernel - 1);
  if (!cut) return std::nullopt;
  return RingGradWeightLaunch{
      dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(cut->slices)),
      dim3(32, static_cast<unsigned>(vectors * chunks)),
      RingGradWeightWork{tile_w, tile_w, tile_w + kernel - 1, static_cast<int>(items_w),
                         static_cast<int>(cut->band_rows), static_cast<int>(cut->bands), cut->items,
                         cut->items_per_slice},
      shared_bytes};
}

}  // namespace at::native::dwconv
