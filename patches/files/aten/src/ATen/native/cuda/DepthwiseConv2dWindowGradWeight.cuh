#pragma once
// The weight gradient of channels_last depthwise convolutions with square 3x3, 5x5 and 7x7
// filters at stride 1, and 3x3 and 5x5 at stride 2 (dilation 1, multiplier 1), in float and the
// half types: a thread holds all K^2 tap sums of its channel and meets each input row once.
//
// grad_weight_ring_kernel (DepthwiseConv2dRingGradWeight.cuh), whose items, slices and partial
// sums this kernel shares, gives a thread one kernel row: each step it reads a window of
// (8 - 1) * S + K input values and 8 grad_output values from shared memory for 8 * K multiply-
// adds, 22 reads for 56 at 7x7. A shared-memory read of a warp (32 channels, 128 bytes) takes the
// SM's shared memory for a cycle, in which its four schedulers issue four multiply-adds a lane:
// at 7x7 the ring kernel waits on shared memory 1.6 cycles for each cycle of multiply-adds, at
// 5x5 2.0, at 3x3 3.0. Here a step is an input row (S rows at stride S): a thread reads its window
// once into registers and meets it with every grad_output row it pairs with, grad_output row
// t = s - m for kernel row kh = r + S * m; 14 + 7 x 8 reads for 392 multiply-adds at 7x7, 0.71
// cycles of shared memory a cycle of multiply-adds (1.0 at 5x5, 1.9 at 3x3).
//
// Shared memory holds, in acc_t, the S input rows of the step and of the next step, and a ring of
// the last (K - 1) / S + 1 grad_output rows with the next one. The next step's rows are copied
// while the step computes (cp.async, no registers held): a thread copies the same channel vector
// of every few pixels, and in the half types converts the vectors it copied itself once they have
// landed (its own wait makes them visible to it), so one barrier a step orders the ring. Each
// thread also sums the grad_output values it meets at kh = 0, each once: the bias gradient, free
// beside the multiply-adds. A block is 32 channels (a warp's lanes: a warp's shared reads are
// 32 consecutive words) by lanes, a lane an 8-column chunk of the item's columns; the lanes' sums
// meet in shared memory in lane order at the end, so the result is bitwise reproducible.

#include <ATen/native/cuda/DepthwiseConv2dRingGradWeight.cuh>

#include <algorithm>
#include <optional>
#include <type_traits>

namespace at::native::dwconv {

constexpr int kWindowChunk = 8;       // output columns a lane takes at a time
constexpr int kWindowMaxLanes = kThreads / kRingChannels;
// Blocks an SM the __launch_bounds__ of an instance ask for, which bound its registers
// (registers_within_bounds): 128 for the 5x5 and 7x7 sums and windows (ptxas takes 88-119); 80 at
// 3x3 stride 2 (it takes 71-72) and 64 at 3x3 stride 1 (63-64). The planner counts the blocks an SM
// holds by these bounds, so a bound far above what the kernel takes under-fills the GPU: at 128
// for every instance it planned three 160-thread blocks an SM for MobileNetV2 32@112, where
// registers and shared memory hold five (H200, 2026-11-27: 384 blocks on 132 SMs).
constexpr int window_min_blocks(int kernel, int stride) {
  return kernel == 3 ? (stride == 1 ? 4 : 3) : 2;
}

constexpr bool is_window_grad_weight_filter(int kernel, int stride) {
  return (stride == 1 && (kernel == 3 || kernel == 5 || kernel == 7)) || (stride == 2 && (kernel == 3 || kernel == 5));
}

// grad_output rows the ring holds: the (K - 1) / S + 1 a step reads and the next step's.
constexpr int window_grad_output_slots(int kernel, int stride) {
  return (kernel - 1) / stride + 2;
}

// acc_t values from a staged pixel to the next: its 32 channels, and in the half types 16 bytes
// more. There a warp's 32 lanes widen 8 pixels' 16-byte vectors (4 a pixel), each into two
// adjacent 16-byte pieces, a store's pieces 32 bytes apart from lane to lane; at a pitch of 128
// bytes two neighbouring pixels' pieces fell on the same banks (twice the fewest wavefronts), at
// 144 they interleave. The loops reach a pixel at a fixed offset all the same: the pad costs shared
// memory, not instructions.
template <typename scalar_t>
constexpr int window_pixel_pitch() {
  using acc_t = at::acc_type<scalar_t, true>;
  return std::is_same_v<scalar_t, acc_t> ? kRingChannels : kRingChannels + kVector16<acc_t>;
}

// Shared memory of a plan: the input rows (2 x S x in_w pixels) and the grad_output ring in acc_t,
// then (the half types) the step's copies as loaded; at the end the lanes' sums reuse it, and the
// block's run of partial sums its first 32 x kTaps values (store_partial_run), which lane_sums covers.
template <typename scalar_t>
size_t window_shared_bytes(int kernel, int stride, int in_w, int staged_w, int lanes) {
  using acc_t = at::acc_type<scalar_t, true>;
  const size_t staged = (size_t(2 * stride) * in_w + size_t(window_grad_output_slots(kernel, stride)) * staged_w) *
                        window_pixel_pitch<scalar_t>() * sizeof(acc_t);
  const size_t copied = std::is_same_v<scalar_t, acc_t>
                            ? 0
                            : (size_t(stride) * in_w + staged_w) * kRingChannels * sizeof(scalar_t);
  const size_t lane_sums = size_t(lanes) * (kernel * kernel + 1) * kRingChannels * sizeof(acc_t);
  return std::max(staged + copied, lane_sums);
}

// Blocks of 32 x lanes threads: threadIdx.x the channel, threadIdx.y the lane.
template <typename scalar_t, int kKernel, int kStride>
__global__ void __launch_bounds__(kThreads, window_min_blocks(kKernel, kStride)) grad_weight_window_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const RingGradWeightWork w) {
  using acc_t = at::acc_type<scalar_t, true>;
  using Vec = Vector16<scalar_t>;
  constexpr int V = kVector16<scalar_t>;
  constexpr int kVectors = kRingChannels / V;   // 16-byte vectors of a pixel's block channels
  constexpr int kReach = (kKernel - 1) / kStride;  // a step meets grad_output rows s - kReach .. s
  constexpr int kGoSlots = window_grad_output_slots(kKernel, kStride);
  constexpr int kWindow = (kWindowChunk - 1) * kStride + kKernel;
  constexpr int kTaps = kKernel * kKernel;
  constexpr bool kConverted = !std::is_same_v<scalar_t, acc_t>;
  constexpr int kPitch = window_pixel_pitch<scalar_t>();
  static_assert(kRingChannels % V == 0 && kThreads % kRingChannels == 0, "a block's channels are whole vectors");
  static_assert(kConverted || kPitch == kVectors * V, "float's copies land in the rows at the pixel pitch");
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const in_rows = reinterpret_cast<acc_t*>(shared_bytes);         // [2 * kStride][in_w][kPitch]
  acc_t* const go_ring = in_rows + 2 * kStride * w.in_w * kPitch;         // [kGoSlots][staged_w][kPitch]
  Vec* const copied = reinterpret_cast<Vec*>(go_ring + kGoSlots * w.staged_w * kPitch);  // [pixel][vector]

  const int channel = threadIdx.x;
  const int lane = threadIdx.y;
  const int lanes = blockDim.y;
  const int tid = lane * kRingChannels + channel;
  const int channels = static_cast<int>(g.dst_channels);
  const int c0 = static_cast<int>(blockIdx.x) * kRingChannels;
  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);
  // The copies: a thread takes vector copy_vec of pixels copy_px0, copy_px0 + copy_px_step, ...
  // of each row a step brings; a vector past the last channel is copied as zeros.
  const int copy_vec = tid % kVectors;
  const int copy_px0 = tid / kVectors;
  const int copy_px_step = lanes * kRingChannels / kVectors;
  const bool live = copy_vec < (channels - c0) / V;  // channels are whole vectors
  const int copy_channel = c0 + (live ? copy_vec * V : 0);  // an idle vector's address stays inside

  // Where step s's row r (r < kStride: input, r == kStride: grad_output) goes: as loaded, then
  // converted into the ring (the half types), or straight into the ring.
  const auto ring_row = [&](int s, int r, int go_slot) -> acc_t* {
    return r < kStride ? in_rows + ((s & 1) * kStride + r) * w.in_w * kPitch
                       : go_ring + go_slot * w.staged_w * kPitch;
  };
  const auto landing = [&](int s, int r, int go_slot) -> Vec* {
    if constexpr (kConverted) {
      return copied + r * w.in_w * kVectors + copy_vec;
    } else {
      return reinterpret_cast<Vec*>(ring_row(s, r, go_slot)) + copy_vec;
    }
  };
  const auto row_pixels = [&](int r) { return r < kStride ? w.in_w : w.staged_w; };

  acc_t sums[kKernel][kKernel];
#pragma unroll
  for (int kh = 0; kh < kKernel; ++kh) {
#pragma unroll
    for (int kw = 0; kw < kKernel; ++kw) sums[kh][kw] = acc_t(0);
  }
  acc_t bias_sum = acc_t(0);

  const int64_t item_begin = static_cast<int64_t>(blockIdx.y) * w.items_per_slice;
  const int64_t item_end = smaller(w.items, item_begin + w.items_per_slice);
  for (int64_t item = item_begin; item < item_end; ++item) {
    const RingItemPlace place = ring_item_place(w, item, dst_h, dst_w);
    const int n = place.n, x0 = place.x0, cols = place.cols, y0 = place.y0, rows = place.rows;
    const int steps = rows + kReach;  // the last meets grad_output row rows - 1 at kh = kStride * kReach
    const int sy0 = y0 * kStride - g.pad_h;  // the input row of step 0's row 0
    const int sx0 = x0 * kStride - g.pad_w;
    const scalar_t* const in_vector = input + static_cast<int64_t>(n) * src_h * src_w * channels + copy_channel;
    const scalar_t* const go_vector =
        grad_output + ((static_cast<int64_t>(n) * dst_h + y0) * dst_w + x0) * channels + copy_channel;

    // Step s's rows: input rows sy0 + s * kStride + r, zero outside the plane, and grad_output
    // row s of the band (none past its last), zero past the item's columns.
    const auto copy_step = [&](int s, int go_slot) {
#pragma unroll
      for (int r = 0; r <= kStride; ++r) {
        if (r == kStride && s >= rows) break;
        const int sy = sy0 + s * kStride + r;
        const bool row_inside = live && (r == kStride || within(sy, src_h));
        Vec* const to = landing(s, r, go_slot);
        for (int px = copy_px0; px < row_pixels(r); px += copy_px_step) {
          const bool inside = row_inside && (r == kStride ? px < cols : within(sx0 + px, src_w));
          const unsigned offset =
              !inside ? 0u
                      : static_cast<unsigned>(r == kStride ? (s * dst_w + px) * channels : (sy * src_w + sx0 + px) * channels);
          copy_async_or_zero(to + px * kVectors, (r == kStride ? go_vector : in_vector) + offset, inside);
        }
      }
      commit_async_copies();
    };
    // The half types: the vectors this thread copied for step s, widened into the ring.
    const auto convert_step = [&](int s, int go_slot) {
      if constexpr (kConverted) {
#pragma unroll
        for (int r = 0; r <= kStride; ++r) {
          if (r == kStride && s >= rows) break;
          const Vec* const from = landing(s, r, go_slot);
          acc_t* const to = ring_row(s, r, go_slot) + copy_vec * V;
          for (int px = copy_px0; px < row_pixels(r); px += copy_px_step) {
            store_widened(to + px * kPitch, from[px * kVectors]);
          }
        }
      }
    };

    // No thread still reads the previous item's rows: its last step ended in a barrier.
    copy_step(0, 0);
    wait_async_copies<0>();
    convert_step(0, 0);
    __syncthreads();

    int go_slot = 0;  // step s's grad_output row's slot: s % kGoSlots
    for (int s = 0; s < steps; ++s) {
      const bool next = s + 1 < steps;
      const int next_go_slot = go_slot + 1 < kGoSlots ? go_slot + 1 : 0;
      if (next) copy_step(s + 1, next_go_slot);  // into slots this step does not read

      // A step whose input rows all lie on the padding (under the usual padding of (K - 1) / 2, the
      // first (K - 1) / 2 / S steps of a plane's top band and about as many of its bottom band's)
      // would multiply zeros: only its bias sums are wanted. The whole block skips it together.
      const int step_row = sy0 + s * kStride;
      const bool meets_plane = step_row + kStride > 0 && step_row < src_h;
      for (int x = lane * kWindowChunk; x < cols; x += lanes * kWindowChunk) {
        if (!meets_plane) {
          if (s < rows) {
            const acc_t* const go_row = go_ring + (go_slot * w.staged_w + x) * kPitch + channel;
#pragma unroll
            for (int j = 0; j < kWindowChunk; ++j) bias_sum += go_row[j * kPitch];
          }
          continue;
        }
        whole_or_edge(x + kWindowChunk > cols, [&](auto partial_chunk) {
          constexpr bool kPartial = decltype(partial_chunk)::value;
          const int chunk_cols = cols - x;
#pragma unroll
          for (int r = 0; r < kStride; ++r) {
            const acc_t* const in_row = ring_row(s, r, 0) + x * kStride * kPitch + channel;
            acc_t window[kWindow];
#pragma unroll
            for (int q = 0; q < kWindow; ++q) window[q] = in_row[q * kPitch];
#pragma unroll
            for (int m = 0; m <= kReach; ++m) {
              const int kh = r + kStride * m;
              if (kh >= kKernel || !within(s - m, rows)) continue;  // the second: the same for the block
              const int slot = go_slot - m < 0 ? go_slot - m + kGoSlots : go_slot - m;
              const acc_t* const go_row = go_ring + (slot * w.staged_w + x) * kPitch + channel;
#pragma unroll
              for (int j = 0; j < kWindowChunk; ++j) {
                if (kPartial && j >= chunk_cols) break;
                const acc_t go = go_row[j * kPitch];
                if (kh == 0) bias_sum += go;
#pragma unroll
                for (int kw = 0; kw < kKernel; ++kw) sums[kh][kw] += go * window[j * kStride + kw];
              }
            }
          }
        });
      }

      if (next) {
        wait_async_copies<0>();
        convert_step(s + 1, next_go_slot);
      }
      __syncthreads();  // the next step's rows are in the ring; this step's are no longer read
      go_slot = next_go_slot;
    }
  }

  // The lanes' sums meet in shared memory (nothing reads the rows any more: the last step ended in
  // a barrier).
  // The taps, then the bias, copied out of the loop's sums[kh][kw] and bias_sum: held in this flat
  // array through the loop instead, they made its 5x5 stride-2 body 322 -> 354 instructions (sm_90).
  acc_t totals[kTaps + 1];
#pragma unroll
  for (int tap = 0; tap < kTaps; ++tap) totals[tap] = sums[tap / kKernel][tap % kKernel];
  totals[kTaps] = bias_sum;
  add_lanes_in_order(totals, kTaps + 1, in_rows, 0, kTaps + 1, lane, lanes);
  store_partial_run<kTaps>(totals, kTaps, 0, lane == 0, in_rows, partial, channels, c0);
  if (partial_bias != nullptr && lane == 0 && c0 + channel < channels) {
    partial_bias[static_cast<int64_t>(blockIdx.y) * channels + c0 + channel] = totals[kTaps];
  }
}

// The kernel for a filter size and stride (is_window_grad_weight_filter), or null; compiled for
// float and the half types only, as the ring kernel.
template <typename scalar_t>
RingGradWeightKernel<scalar_t> grad_weight_window_kernel_for(int kernel, int stride) {
  if constexpr (sizeof(at::acc_type<scalar_t, true>) != 4) {
    return nullptr;
  } else {
    switch (kernel * 10 + stride) {
      case 31: return grad_weight_window_kernel<scalar_t, 3, 1>;
      case 32: return grad_weight_window_kernel<scalar_t, 3, 2>;
      case 51: return grad_weight_window_kernel<scalar_t, 5, 1>;
      case 52: return grad_weight_window_kernel<scalar_t, 5, 2>;
      case 71: return grad_weight_window_kernel<scalar_t, 7, 1>;
      default: return nullptr;
    }
  }
}

// Whether the window kernel can take this pass: the ring kernel's conditions (has_ring_grad_weight,
// the caller checking the layout and alignment) at a filter and stride it is compiled for.
inline bool has_window_grad_weight(const PassGeometry& g, size_t element_size) {
  return has_ring_grad_weight(g, element_size) && is_window_grad_weight_filter(g.kernel_h, g.stride_h);
}

// The widest item (a whole number of 8-column chunks, a lane each, at most kWindowMaxLanes) whose
// shared memory fits opt_in_shared_bytes, the row cut into as few items, each as wide as it may be
// (so that only the plane's last item has idle lanes); then the bands and slices of
// cut_ring_items. The bias costs nothing here, so the plan does not depend on it. Opting in past
// 48 KB gives the half types' 7x7 rows their 4 lanes back: at the 144-byte pitch a block of 32
// columns takes 51 KB, and under 48 KB ConvNeXt-T's 96@56 and 192@28 were cut into items of 3 and 2
// lanes (of 24 and 16 columns, the halo read again for each), 9 % and 5 % slower (H200, v35).
// Without `opt_in` (the path window_shared_opt_in off), blocks keep within 48 KB.
template <typename scalar_t>
std::optional<RingGradWeightLaunch> plan_window_grad_weight(const PassGeometry& g, const GpuLimits& gpu, bool opt_in) {
  const int kernel = g.kernel_h, stride = g.stride_h;
  const auto in_width = [&](int staged_w) { return (staged_w - 1) * stride + kernel; };
  const auto bytes = [&](int staged_w) {
    return window_shared_bytes<scalar_t>(kernel, stride, in_width(staged_w), staged_w, staged_w / kWindowChunk);
  };
  const int64_t chunks = (g.dst_w + kWindowChunk - 1) / kWindowChunk;  // of the whole row
  int lanes = static_cast<int>(std::min<int64_t>(chunks, kWindowMaxLanes));
  const size_t most_bytes = opt_in ? opt_in_shared_bytes(gpu) : kMaxSharedBytes;
  while (lanes >= 1 && bytes(lanes * kWindowChunk) > most_bytes) --lanes;
  if (lanes < 1) return std::nullopt;
  const int64_t fewest_items = (chunks + lanes - 1) / lanes;
  lanes = static_cast<int>((chunks + fewest_items - 1) / fewest_items);  // items no wider than they need
  const int64_t chunks_w = (chunks + lanes - 1) / lanes;                 // items across a row: none empty
  const int tile_w = lanes * kWindowChunk;
  const int in_w = in_width(tile_w);
  const size_t shared_bytes = bytes(tile_w);
  const int64_t channel_blocks = (g.dst_channels + kRingChannels - 1) / kRingChannels;
  const int registers = registers_within_bounds(window_min_blocks(kernel, stride));
  const int64_t resident =
      resident_blocks_per_sm(gpu, lanes * kRingChannels, shared_bytes, registers) * std::max<int64_t>(gpu.sm_count, 1);
  const auto cut = cut_ring_items(g, chunks_w, channel_blocks, resident, (kernel - 1) / stride);
  if (!cut) return std::nullopt;
  return RingGradWeightLaunch{
      dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(cut->slices)),
      dim3(kRingChannels, lanes),
      RingGradWeightWork{tile_w, tile_w, in_w, static_cast<int>(chunks_w), static_cast<int>(cut->band_rows),
                         static_cast<int>(cut->bands), cut->items, cut->items_per_slice},
      shared_bytes};
}

}  // namespace at::native::dwconv
