#pragma once
// The large-filter 2D depthwise kernels (RepLKNet's 13x13 to 31x31, and any filter of at least
// kLargeFilterMinTaps taps the register-tiled sizes do not cover, at stride 1 and dilation 1):
// the register tile's blocks over planes staged whole, the weight gradient with the roles
// exchanged, and their launch plans.

#include <ATen/native/cuda/DepthwiseConv2dRegisterTiled.cuh>

namespace at::native::dwconv {

// Large-filter kernel (NCHW or channels_last) for filters of any size at stride 1 and
// dilation 1 that the compiled sizes do not cover (RepLKNet's 13x13 to 31x31, 9x9, 5x51...).
// These are bound by their multiply-adds, not by memory: a 31x31 filter makes 961 per output.
// It keeps the register tile of register_tiled_nchw_kernel (a thread computes kBlockRows x
// kBlockCols outputs from its window in shared memory, each input row of the window read once and
// applied to every output row it feeds), but the filter size is a runtime value: the plane's weights
// stay in shared memory, kernel_h rows of large_filter_weight_pitch values, and a window row is
// walked kBlockCols taps at a time. Each step loads the next kBlockCols input columns (one
// 16-byte load in float) and, for each output row the input row feeds, kBlockCols weights (one
// load, the same address across a plane's threads), then makes 16 multiply-adds per output row.
// Source and destination are addressed through their strides; a block's planes are
// consecutive channels of one image with planes fastest, so channels_last tiles are loaded and
// results stored across channels. Where a block has thread groups (large_filter_groups), each
// group takes every groups-th input row of the windows and adds its sums into the first group's
// at the end (add_group_sums): more warps for the same tile in shared memory.

constexpr int kLargeFilterMinTaps = 16;

__host__ __device__ inline int large_filter_weight_pitch(int kernel_w) {
  return (kernel_w + kBlockCols - 1) / kBlockCols * kBlockCols;
}

// A thread's window row in 16-byte vectors: kBlockCols columns past the weight pitch, since
// each step loads the kBlockCols columns after the step's first tap.
template <typename acc_t>
int large_filter_window_vectors(int kernel_w) {
  return (large_filter_weight_pitch(kernel_w) + kBlockCols) / kVector16<acc_t>;
}

// Stages a region of `rows` x `cols` values of each of a block's planes into shared memory
// (rows `pitch` values apart, planes `plane_stride` apart), zero outside the plane: value
// (row, col) of plane slot p comes from (row0 + row, col0 + col) of the plane that
// plane_base(p) points to (null for a slot with no plane, whose values are not written), of
// height x width and strides s. Consecutive threads load consecutive columns of a plane, or
// consecutive slots (channels) of a pixel when `channels_fastest`. A thread has 2 * kStageVectors
// loads in flight (stage_in_batches; one, waited out value by value, made the staging of 7x7 and
// 14x14 planes under a large filter 100 round trips a thread), walks its positions with carries,
// and calls plane_base again only when its slot changes (with channels fastest, never: a block's
// threads are a whole number of slots).
template <typename scalar_t, typename index_t, typename PlaneBase>
__device__ __forceinline__ void stage_planes(at::acc_type<scalar_t, true>* dst, int plane_stride, int pitch, int rows,
                                             int cols, int row0, int col0, index_t height, index_t width,
                                             const Strides4& s, bool channels_fastest, PlaneBase plane_base) {
  using acc_t = at::acc_type<scalar_t, true>;
  const int planes = blockDim.x;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const index_t row_stride = s.h, col_stride = s.w;
  int cached_slot = -1;
  const scalar_t* cached_base = nullptr;
  struct Loaded {
    acc_t value;
    int at;  // p * plane_stride + row * pitch + col; negative for a slot with no plane
  };
  const auto load = [&](int p, int row, int col, bool in_range) {
    if (in_range && p != cached_slot) {
      cached_slot = p;
      cached_base = plane_base(p);
    }
    const scalar_t* base = in_range ? cached_base : nullptr;
    const index_t sy = row0 + row, sx = col0 + col;
    const bool inside = base != nullptr && sy >= 0 && sy < height && sx >= 0 && sx < width;
    return Loaded{inside ? static_cast<acc_t>(base[sy * row_stride + sx * col_stride]) : acc_t(0),
                  base != nullptr ? p * plane_stride + row * pitch + col : -1};
  };
  const auto store = [&](int, const Loaded& loaded) {
    if (loaded.at >= 0) dst[loaded.at] = loaded.value;
  };
  if (channels_fastest) {
    GridWalk<int, 3> at(tid, threads, {0, cols, planes});  // (row, col, slot)
    stage_in_batches<2 * kStageVectors>(
        rows * cols * planes, tid, threads, at,
        [&](const GridWalk<int, 3>& pos, bool in_range) { return load(pos.at[2], pos.at[0], pos.at[1], in_range); },
        store);
  } else {
    GridWalk<int, 3> at(tid, threads, {0, rows, cols});  // (slot, row, col)
    stage_in_batches<2 * kStageVectors>(
        planes * rows * cols, tid, threads, at,
        [&](const GridWalk<int, 3>& pos, bool in_range) { return load(pos.at[0], pos.at[1], pos.at[2], in_range); },
        store);
  }
}

// One step along a window row: the taps step * kBlockCols + [0, taps) of the output rows
// first_row to last_row (every row when kEveryRow), from input columns step * kBlockCols +
// [0, 2 * kBlockCols) in `head` and `next`. Output row i takes its weights at `taps - i * weight_pitch`.
template <typename acc_t, bool kEveryRow, bool kWholeStep>
__device__ __forceinline__ void accumulate_large_filter_step(acc_t (&acc)[kBlockRows][kBlockCols],
                                                             const acc_t (&head)[kBlockCols],
                                                             const acc_t (&next)[kBlockCols], const acc_t* taps,
                                                             int weight_pitch, int step_taps, int first_row,
                                                             int last_row) {
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    if (kEveryRow || (i >= first_row && i <= last_row)) {
      acc_t w[kBlockCols];
      load_shared_vectors<acc_t, kBlockCols / kVector16<acc_t>>(taps - i * weight_pitch, w);
#pragma unroll
      for (int k = 0; k < kBlockCols; ++k) {
        if (kWholeStep || k < step_taps) {
#pragma unroll
          for (int j = 0; j < kBlockCols; ++j) {
            acc[i][j] += (j + k < kBlockCols ? head[j + k] : next[j + k - kBlockCols]) * w[k];
          }
        }
      }
    }
  }
}

// The part of a thread's window that holds plane values: rows [row_begin, row_end) and columns
// [col_begin, col_end), in the window's own coordinates (the rest is zero padding). A row or a
// kBlockCols-tap step that meets only padding is skipped, as upstream's kernels skip each padded
// tap: under a large filter on a small plane most of a window is padding (13x13 on 7x7: 7 of a
// thread's 16 rows hold the plane; 27x27 on 14x14: 14 of 30).
struct WindowSpan {
  int row_begin, row_end, col_begin, col_end;
};

// The span of a window whose (0, 0) is the plane's (first_row, first_col), on a height x width plane.
__device__ __forceinline__ WindowSpan window_span(int first_row, int first_col, int64_t height, int64_t width) {
  return WindowSpan{-first_row, static_cast<int>(height) - first_row, -first_col, static_cast<int>(width) - first_col};
}

// Adds one input row of a thread's window (`input`: its first column) into the output rows it
// feeds, first_row to last_row (every row when kEveryRow): output row i through kernel row
// (input row - i), whose weights start at `taps - i * weight_pitch`. Only the steps whose input
// columns (step * kBlockCols + [0, 2 * kBlockCols - 1)) meet [col_begin, col_end).
template <typename acc_t, bool kEveryRow>
__device__ __forceinline__ void accumulate_large_filter_row(acc_t (&acc)[kBlockRows][kBlockCols], const acc_t* input,
                                                            const acc_t* taps, int weight_pitch, int kernel_w,
                                                            int first_row, int last_row, int col_begin, int col_end) {
  constexpr int kStepVectors = kBlockCols / kVector16<acc_t>;
  const int whole_steps = kernel_w / kBlockCols;
  const int rest = kernel_w - whole_steps * kBlockCols;
  const int first_step = col_begin < 2 * kBlockCols - 1 ? 0 : (col_begin - kBlockCols + 1) / kBlockCols;
  const int end_step = smaller((col_end + kBlockCols - 1) / kBlockCols, whole_steps + (rest > 0 ? 1 : 0));
  if (first_step >= end_step) return;
  acc_t head[kBlockCols], next[kBlockCols];
  load_shared_vectors<acc_t, kStepVectors>(input + first_step * kBlockCols, head);
  const int last_whole_step = smaller(end_step, whole_steps);
  for (int step = first_step; step < last_whole_step; ++step) {
    load_shared_vectors<acc_t, kStepVectors>(input + (step + 1) * kBlockCols, next);
    accumulate_large_filter_step<acc_t, kEveryRow, true>(acc, head, next, taps + step * kBlockCols, weight_pitch,
                                                         kBlockCols, first_row, last_row);
#pragma unroll
    for (int j = 0; j < kBlockCols; ++j) head[j] = next[j];
  }
  if (end_step > whole_steps) {  // the rest taps, after the whole steps (head holds their first columns)
    load_shared_vectors<acc_t, kStepVectors>(input + (whole_steps + 1) * kBlockCols, next);
    accumulate_large_filter_step<acc_t, kEveryRow, false>(acc, head, next, taps + whole_steps * kBlockCols,
                                                          weight_pitch, rest, first_row, last_row);
  }
}

// A thread's share of its window, the input rows of `span` from its first one on, input_row_step
// apart from the first_input_row-th: input row r (`window + r * pitch`) feeds output row i through
// kernel row r - i, for the kernel_h x kernel_w filter at `taps` (rows weight_pitch apart).
template <typename acc_t>
__device__ __forceinline__ void accumulate_large_filter_window(acc_t (&acc)[kBlockRows][kBlockCols], const acc_t* window,
                                                               int pitch, const acc_t* taps, int weight_pitch,
                                                               int kernel_h, int kernel_w, const WindowSpan& span,
                                                               int first_input_row, int input_row_step) {
  const int rows_end = smaller(kBlockRows + kernel_h - 1, span.row_end);
  for (int r = (span.row_begin > 0 ? span.row_begin : 0) + first_input_row; r < rows_end; r += input_row_step) {
    const int first_row = r < kernel_h ? 0 : r - kernel_h + 1;  // the output rows input row r feeds
    const int last_row = smaller(kBlockRows - 1, r);
    const acc_t* row_taps = taps + r * weight_pitch;
    if (first_row == 0 && last_row == kBlockRows - 1) {
      accumulate_large_filter_row<acc_t, true>(acc, window + r * pitch, row_taps, weight_pitch, kernel_w, 0,
                                               kBlockRows - 1, span.col_begin, span.col_end);
    } else {
      accumulate_large_filter_row<acc_t, false>(acc, window + r * pitch, row_taps, weight_pitch, kernel_w, first_row,
                                                last_row, span.col_begin, span.col_end);
    }
  }
}

// The shared memory of a large-filter block of `groups` thread groups of `threads` threads each:
// its tile (`tile_bytes`), which add_group_sums then reuses for the sums of every group but the first.
template <typename acc_t>
size_t large_filter_shared_bytes(size_t tile_bytes, int groups, int threads) {
  return std::max(tile_bytes, size_t(groups - 1) * kBlockRows * kBlockCols * threads * sizeof(acc_t));
}

// Adds the sums of groups 1.. into group 0's, in group order (the same sums on every run), through
// shared memory at `sums` (large_filter_shared_bytes), which no thread may still be reading.
template <typename acc_t, typename index_t>
__device__ __forceinline__ void add_group_sums(acc_t (&acc)[kBlockRows][kBlockCols], acc_t* sums,
                                               const RegisterTileThread<index_t>& place, int groups) {
  const int group_threads = blockDim.x * blockDim.y * place.rows;
  const int slot = (place.row * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  constexpr int kValues = kBlockRows * kBlockCols;
  __syncthreads();  // every group is done with the tiles
  if (place.group > 0) {
    acc_t* mine = sums + (place.group - 1) * kValues * group_threads + slot;
#pragma unroll
    for (int v = 0; v < kValues; ++v) mine[v * group_threads] = acc[v / kBlockCols][v % kBlockCols];
  }
  __syncthreads();
  if (place.group > 0) return;
  for (int other = 1; other < groups; ++other) {
    const acc_t* theirs = sums + (other - 1) * kValues * group_threads + slot;
#pragma unroll
    for (int v = 0; v < kValues; ++v) acc[v / kBlockCols][v % kBlockCols] += theirs[v * group_threads];
  }
}

// Three blocks an SM in float and the half types (tile_min_blocks): it takes 72-80 registers, sm_90.
template <typename scalar_t, typename index_t, bool kBackward>
__global__ void __launch_bounds__(kThreads, tile_min_blocks<scalar_t>()) large_filter_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const RegisterTile t,
    const Strides4 src_strides,
    const Strides4 dst_strides) {
  using acc_t = at::acc_type<scalar_t, true>;
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const tiles = reinterpret_cast<acc_t*>(shared_bytes);
  const int weight_pitch = large_filter_weight_pitch(g.kernel_w);
  const int weight_values = g.kernel_h * weight_pitch;
  acc_t* const taps = tiles + threadIdx.x * t.plane_stride;
  const acc_t* const tile = taps + weight_values;

  const auto place = register_tile_thread<index_t>(g, t.groups);
  const index_t dst_channels = g.dst_channels;
  const int filter_taps = g.kernel_h * g.kernel_w;

  acc_t acc[kBlockRows][kBlockCols];  // started after the first staging, so that it is not live there
  const WindowSpan span = window_span(place.y0 - g.pad_h + place.row * kBlockRows,
                                      place.x0 - g.pad_w + static_cast<int>(threadIdx.y) * kBlockCols, g.src_h, g.src_w);

  const int group = kBackward ? g.multiplier : 1;
  for (int member = 0; member < group; ++member) {
    __syncthreads();  // no thread still reads the previous member's tiles or weights
    stage_planes<scalar_t, index_t>(
        tiles + weight_values, t.plane_stride, t.pitch, t.tile_in_h, t.tile_in_w, place.y0 - g.pad_h, place.x0 - g.pad_w, g.src_h,
        g.src_w, src_strides, src_strides.c == 1, [&](int p) -> const scalar_t* {
          const index_t slot_plane = place.first_plane + p;
          if (slot_plane >= place.plane_count) return nullptr;  // the last block's spare planes
          const index_t slot_c = slot_plane % dst_channels;
          const index_t src_c = kBackward ? slot_c * g.multiplier + member : slot_c / g.multiplier;
          return src + slot_plane / dst_channels * static_cast<index_t>(src_strides.n) +
                 src_c * static_cast<index_t>(src_strides.c);
        });
    if (place.live) {
      const index_t weight_row = kBackward ? place.c * g.multiplier + member : place.c;
      for (int i = place.plane_tid; i < filter_taps; i += place.plane_threads) {
        // Backward-input correlates with the kernel flipped in both directions.
        const int tap = kBackward ? filter_taps - 1 - i : i;
        taps[i / g.kernel_w * weight_pitch + i % g.kernel_w] =
            static_cast<acc_t>(weight[weight_row * filter_taps + tap]);
      }
    }
    __syncthreads();

    if (member == 0) start_block<kBackward>(acc, place.group == 0 ? bias : nullptr, place);  // groups' sums are added
    accumulate_large_filter_window(acc, tile + place.row * kBlockRows * t.pitch + threadIdx.y * kBlockCols, t.pitch,
                                   taps, weight_pitch, g.kernel_h, g.kernel_w, span, place.group, t.groups);
  }
  if (t.groups > 1) add_group_sums(acc, tiles, place, t.groups);

  if (!place.live || place.group != 0) return;
  const int x = place.x0 + threadIdx.y * kBlockCols;
  const index_t dst_col_stride = dst_strides.w;
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    const int y = place.y0 + place.row * kBlockRows + i;
    if (y >= g.dst_h || x >= g.dst_w) continue;
    scalar_t* out = dst + place.n * static_cast<index_t>(dst_strides.n) + place.c * static_cast<index_t>(dst_strides.c) +
                    y * static_cast<index_t>(dst_strides.h) + x * dst_col_stride;
    store_block_row<scalar_t, index_t>(out, acc[i], g.dst_w - x, dst_col_stride, t.row_access);
  }
}

// ---------------------------------------------------------------------------
// Large-filter weight gradient (NCHW or channels_last): the large-filter kernel with the roles
// exchanged. For one image and channel, grad_weight[a][b] = sum over (y, x) of
// grad_output[y][x] * padded input[y + a][x + b]: a correlation whose output is the filter's
// taps, whose filter is the grad_output plane and whose window is the input. A thread computes
// a kBlockRows x kBlockCols block of taps; a block's plane slots are consecutive channels, each
// summing its own channel's taps over the items of its slice (an item: a band of grad_output
// rows of one batch entry, the whole plane where it fits), so no sums cross slots. Each slice
// writes its sums to `partial`; grad_weight_finish_kernel adds the slices in a fixed order. A slot's
// threads also share out the sum of its staged grad_output bands, the bias gradient's, which
// goes to `partial_bias` unless that is null.

struct LargeFilterGradWeightWork {
  int band_rows;            // grad_output rows an item covers (the last band of a plane may have fewer)
  int64_t bands;            // items of one batch entry
  int64_t items_per_slice;  // items are (batch entry, band), batch entry major
};

template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads, 2) grad_weight_large_filter_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const RegisterTile t,
    const LargeFilterGradWeightWork work,
    const Strides4 go_strides,
    const Strides4 in_strides) {
  using acc_t = at::acc_type<scalar_t, true>;
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const regions = reinterpret_cast<acc_t*>(shared_bytes);
  const int go_pitch = large_filter_weight_pitch(static_cast<int>(g.dst_w));
  const int go_values = work.band_rows * go_pitch;
  const index_t dst_channels = g.dst_channels;
  const index_t first_c = static_cast<index_t>(blockIdx.x) * blockDim.x;
  const index_t c = first_c + threadIdx.x;
  const index_t items = static_cast<index_t>(g.batch) * work.bands;
  const index_t item_begin = static_cast<index_t>(blockIdx.y) * work.items_per_slice;
  const index_t item_end = smaller(items, item_begin + static_cast<index_t>(work.items_per_slice));
  auto channel_plane = [&](const scalar_t* data, const Strides4& s, index_t n, int p, bool input_channel) -> const scalar_t* {
    const index_t slot_c = first_c + p;
    if (slot_c >= dst_channels) return nullptr;  // the last block's spare slots
    const index_t plane_c = input_channel ? slot_c / g.multiplier : slot_c;
    return data + n * static_cast<index_t>(s.n) + plane_c * static_cast<index_t>(s.c);
  };

  acc_t acc[kBlockRows][kBlockCols] = {};
  const int slot_threads = blockDim.y * blockDim.z;
  const int slot_tid = threadIdx.z * blockDim.y + threadIdx.y;
  acc_t grad_output_sum = acc_t(0);  // of the staged values slot_tid, slot_tid + slot_threads, ...
  for (index_t item = item_begin; item < item_end; ++item) {
    const index_t n = item / work.bands;
    const int y0 = static_cast<int>(item % work.bands) * work.band_rows;
    const int rows = static_cast<int>(smaller(static_cast<index_t>(work.band_rows), static_cast<index_t>(g.dst_h) - y0));
    __syncthreads();  // no thread still reads the previous item's planes
    stage_planes<scalar_t, index_t>(regions, t.plane_stride, go_pitch, rows, static_cast<int>(g.dst_w), y0, 0, g.dst_h,
                                    g.dst_w, go_strides, go_strides.c == 1,
                                    [&](int p) { return channel_plane(grad_output, go_strides, n, p, false); });
    stage_planes<scalar_t, index_t>(regions + go_values, t.plane_stride, t.pitch, rows + t.tile_in_h - work.band_rows,
                                    t.tile_in_w, y0 - g.pad_h, -g.pad_w, g.src_h, g.src_w, in_strides,
                                    in_strides.c == 1,
                                    [&](int p) { return channel_plane(input, in_strides, n, p, true); });
    __syncthreads();
    const acc_t* plane = regions + threadIdx.x * t.plane_stride;
    const WindowSpan span = window_span(y0 - g.pad_h + static_cast<int>(threadIdx.z) * kBlockRows,
                                        static_cast<int>(threadIdx.y) * kBlockCols - g.pad_w, g.src_h, g.src_w);
    accumulate_large_filter_window(acc, plane + go_values + threadIdx.z * kBlockRows * t.pitch + threadIdx.y * kBlockCols,
                                   t.pitch, plane, go_pitch, rows, static_cast<int>(g.dst_w), span, 0, 1);
    if (partial_bias != nullptr) {
      const int dst_w = static_cast<int>(g.dst_w);
      GridWalk<int, 2> at(slot_tid, slot_threads, {0, dst_w});  // (band row, column)
      for (int i = slot_tid; i < rows * dst_w; i += slot_threads, at.advance()) {
        grad_output_sum += plane[at.at[0] * go_pitch + at.at[1]];
      }
    }
  }

  if (partial_bias != nullptr) {  // a slot's threads' sums, added in thread order
    acc_t* const slot_sums = regions + threadIdx.x * t.plane_stride;
    __syncthreads();  // no thread still reads the planes
    slot_sums[slot_tid] = grad_output_sum;
    __syncthreads();
    if (slot_tid == 0 && c < dst_channels) {
      acc_t total = acc_t(0);
      for (int i = 0; i < slot_threads; ++i) total += slot_sums[i];
      partial_bias[static_cast<int64_t>(blockIdx.y) * dst_channels + c] = total;
    }
  }
  if (c >= dst_channels) return;
  const int taps = g.kernel_h * g.kernel_w;
  acc_t* out = partial + (static_cast<int64_t>(blockIdx.y) * dst_channels + c) * taps;  // slices x weight: 64-bit
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    const int a = threadIdx.z * kBlockRows + i;
#pragma unroll
    for (int j = 0; j < kBlockCols; ++j) {
      const int b = threadIdx.y * kBlockCols + j;
      if (a < g.kernel_h && b < g.kernel_w) out[a * g.kernel_w + b] = acc[i][j];
    }
  }
}

// ---------------------------------------------------------------------------
// The large-filter kernels' launches.

// How many planes of plane_threads threads a block holds (at most max_planes, as many as fit 256
// threads and fits(planes)): the fewest that fill the largest share of their warps' lanes.
template <typename Fits>
int planes_filling_warps(int plane_threads, int64_t max_planes, Fits fits) {
  int planes = 1;
  double best_share = 0.0;
  for (int p = 1; p * plane_threads <= kThreads && p <= max_planes && fits(p); ++p) {
    const int threads = p * plane_threads;
    const double share = double(threads) / double((threads + 31) / 32 * 32);
    if (share > best_share) {
      best_share = share;
      planes = p;
    }
  }
  return planes;
}

// The filters the large-filter kernel takes: stride 1 and dilation 1, at least
// kLargeFilterMinTaps taps, not a register-tiled size, on planes of 2 rows or more (a thread's
// kBlockRows rows waste at most half their work; conv1d, H = 1, keeps the tiled kernel's long rows).
inline bool has_large_filter(const PassGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1 &&
         g.kernel_h * g.kernel_w >= kLargeFilterMinTaps && !has_register_tiled_filter(g) && g.dst_h >= 2;
}

// Thread groups for a large-filter launch of `blocks` blocks of `block` (RegisterTile::groups: they
// share out the window's `window_rows` rows, two at least each, and add their sums through shared
// memory): the number with the most warps on the GPU at once (blocks an SM at the kernel's
// register bound, shared memory and threads, times the warps of a block, over the grid's first
// wave), a number more only where it brings a quarter more warps (each group adds its sums once).
// On 7x7 and 14x14 planes one group was a warp a block, ten blocks an SM by shared memory: ten
// warps to hide the latency of its shared loads.
template <typename acc_t>
int large_filter_groups(int64_t blocks, dim3 block, size_t tile_bytes, int window_rows, const GpuLimits& gpu) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int registers = registers_within_bounds(tile_min_blocks<acc_t>());
  const int most = std::min(most_thread_groups(block), window_rows / 2);
  int best = 1;
  int64_t best_warps = 0;
  for (int groups = 1; groups == 1 || groups <= most; ++groups) {
    const size_t bytes = large_filter_shared_bytes<acc_t>(tile_bytes, groups, threads);
    if (bytes > kMaxSharedBytes) break;
    const int64_t per_sm = resident_blocks_per_sm(gpu, threads * groups, bytes, registers);
    const int64_t warps = std::min(blocks, gpu.sm_count * per_sm) * ((threads * groups + 31) / 32);
    if (4 * warps > 5 * best_warps) {
      best = groups;
      best_warps = warps;
    }
  }
  return best;
}

// A large-filter launch for this pass, or nothing when the kernel does not take the filter or
// even one row of threads' tile does not fit in shared memory. A tile is as wide as the plane
// (up to 32 threads, 128 columns, in the fewest tiles), as tall as the threads and shared memory
// allow; planes share a block where that fills whole warps. While the grid has fewer blocks
// than the GPU has SMs (batch 1), blocks hold fewer planes, then fewer rows. Last,
// large_filter_groups. The caller sets tile.row_access (NCHW destinations only;
// register_tile_row_access).
template <typename acc_t>
std::optional<RegisterTiledLaunch> plan_large_filter(const PassGeometry& g, const GpuLimits& gpu) {
  constexpr int V = kVector16<acc_t>;
  constexpr size_t kUnit = sizeof(Vector16<acc_t>);
  if (!has_large_filter(g)) return std::nullopt;
  const int64_t plane_count = g.batch * g.dst_channels;
  const int64_t block_cols = (g.dst_w + kBlockCols - 1) / kBlockCols;
  const int64_t tiles_w = (block_cols + 31) / 32;
  const int bx = static_cast<int>((block_cols + tiles_w - 1) / tiles_w);
  const int64_t block_rows = (g.dst_h + kBlockRows - 1) / kBlockRows;
  const int weight_units = g.kernel_h * large_filter_weight_pitch(g.kernel_w) / V;
  const int window_units = large_filter_window_vectors<acc_t>(g.kernel_w);
  auto layout_of = [&](int planes, int by) {
    return register_tile_layout<acc_t>(dim3(planes, bx, by), window_units, input_extent(by * kBlockRows, 1, g.kernel_h, 1),
                                       weight_units, 1);
  };
  auto fits = [&](int planes, int by) { return layout_of(planes, by).bytes(planes, kUnit) <= kMaxSharedBytes; };

  // Rows of threads: the fewest tiles down the plane whose rows fit the threads and shared memory.
  int64_t tiles_h = (block_rows + std::min(kThreads / bx, 64) - 1) / std::min(kThreads / bx, 64);
  int by = static_cast<int>((block_rows + tiles_h - 1) / tiles_h);
  while (!fits(1, by)) {
    if (by == 1) return std::nullopt;
    tiles_h = (block_rows + by - 2) / (by - 1);
    by = static_cast<int>((block_rows + tiles_h - 1) / tiles_h);
  }
  int planes = planes_filling_warps(bx * by, kThreads, [&](int p) { return fits(p, by); });
  auto blocks = [&] { return (plane_count + planes - 1) / planes * tiles_h * tiles_w; };
  while (blocks() < gpu.sm_count && planes > 1) --planes;
  while (blocks() < gpu.sm_count && by > 1) {
    tiles_h = (block_rows + by - 2) / (by - 1);
    by = static_cast<int>((block_rows + tiles_h - 1) / tiles_h);
  }

  const int64_t plane_groups = (plane_count + planes - 1) / planes;
  if (plane_groups > std::numeric_limits<int32_t>::max() || tiles_h > 65535 || tiles_w > 65535) return std::nullopt;
  const dim3 block(planes, bx, by);
  const auto layout = layout_of(planes, by);
  const int tile_in_h = input_extent(by * kBlockRows, 1, g.kernel_h, 1);
  const int tile_in_w = input_extent(bx * kBlockCols, 1, g.kernel_w, 1);
  RegisterTile tile{layout.pitch_units * V, layout.plane_units * V, tile_in_h, tile_in_w, false};
  const size_t tile_bytes = layout.bytes(planes, kUnit);
  // The window rows a thread meets (WindowSpan): no more than the plane's.
  const int window_rows = static_cast<int>(std::min<int64_t>(kBlockRows + g.kernel_h - 1, g.src_h));
  tile.groups = large_filter_groups<acc_t>(plane_groups * tiles_h * tiles_w, block, tile_bytes, window_rows, gpu);
  return RegisterTiledLaunch{
      dim3(static_cast<unsigned>(plane_groups), static_cast<unsigned>(tiles_h), static_cast<unsigned>(tiles_w)),
      dim3(block.x, block.y, block.z * tile.groups), tile,
      large_filter_shared_bytes<acc_t>(tile_bytes, tile.groups, static_cast<int>(block.x * block.y * block.z))};
}

struct LargeFilterGradWeightLaunch {
  dim3 grid, block;
  RegisterTile tile;  // the input tile of a whole band; row_access unused
  LargeFilterGradWeightWork work;
  size_t shared_bytes;
};

// A large-filter weight-gradient launch, or nothing when the kernel does not take the filter
// (as the large-filter kernel, and at least 2 kernel rows), the taps need more than 256 threads,
// or even a one-row band does not fit. Threads cover the taps (bx x by blocks of 4x4); a band
// is as many grad_output rows as fit in 48 KB with the input rows it needs; slots take as many
// channels as fill the largest share of their warps' lanes; then small batches get fewer slots
// and narrower bands; slices give about 16 blocks an SM.
template <typename acc_t>
std::optional<LargeFilterGradWeightLaunch> plan_large_filter_grad_weight(const PassGeometry& g, const GpuLimits& gpu) {
  constexpr int V = kVector16<acc_t>;
  constexpr size_t kUnit = sizeof(Vector16<acc_t>);
  if (!has_large_filter(g) || g.kernel_h < kBlockRows / 2) return std::nullopt;
  const int bx = (g.kernel_w + kBlockCols - 1) / kBlockCols;
  const int by = (g.kernel_h + kBlockRows - 1) / kBlockRows;
  if (bx * by > kThreads || by > 64) return std::nullopt;
  const int dst_w = static_cast<int>(g.dst_w);
  const int go_units = large_filter_weight_pitch(dst_w) / V;  // a band row of grad_output
  const int window_units = large_filter_window_vectors<acc_t>(dst_w);
  auto layout_of = [&](int planes, int band_rows) {
    return register_tile_layout<acc_t>(dim3(planes, bx, by), window_units,
                                       input_extent(band_rows, 1, by * kBlockRows, 1), band_rows * go_units, 1);
  };
  auto fits = [&](int planes, int band_rows) {
    return layout_of(planes, band_rows).bytes(planes, kUnit) <= kMaxSharedBytes;
  };
  int64_t bands = 1;
  int band_rows = static_cast<int>(g.dst_h);
  auto split = [&](int64_t into) {  // grad_output rows in `into` bands, shared evenly
    bands = into;
    band_rows = static_cast<int>((g.dst_h + bands - 1) / bands);
    bands = (g.dst_h + band_rows - 1) / band_rows;
  };
  while (!fits(1, band_rows)) {
    if (band_rows == 1) return std::nullopt;
    split(bands * 2);
  }

  int planes = planes_filling_warps(bx * by, g.dst_channels, [&](int p) { return fits(p, band_rows); });
  // Small batches: fewer slots a block, then bands of down to 4 rows, until every SM has 4 blocks.
  const int64_t min_blocks = 4 * gpu.sm_count;
  auto blocks = [&] { return (g.dst_channels + planes - 1) / planes * g.batch * bands; };
  while (blocks() < min_blocks && planes > 1) --planes;
  while (blocks() < min_blocks && band_rows > 4) split(bands * 2);

  const int64_t channel_groups = (g.dst_channels + planes - 1) / planes;
  const int64_t items = g.batch * bands;
  const int64_t wanted = (16 * gpu.sm_count + channel_groups - 1) / channel_groups;
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>({items, wanted, 65535}));
  const int64_t items_per_slice = (items + slices - 1) / slices;
  const int64_t used_slices = (items + items_per_slice - 1) / items_per_slice;
  if (channel_groups > std::numeric_limits<int32_t>::max()) return std::nullopt;
  const auto layout = layout_of(planes, band_rows);
  return LargeFilterGradWeightLaunch{
      dim3(static_cast<unsigned>(channel_groups), static_cast<unsigned>(used_slices)), dim3(planes, bx, by),
      RegisterTile{layout.pitch_units * V, layout.plane_units * V, input_extent(band_rows, 1, by * kBlockRows, 1),
                   input_extent(dst_w, 1, bx * kBlockCols, 1), false},
      LargeFilterGradWeightWork{band_rows, bands, items_per_slice}, layout.bytes(planes, kUnit)};
}

}  // namespace at::native::dwconv
