#pragma once
// The conv1d kernels: depthwise convolutions over planes of one row with a 1 x K filter (K from
// kRowMinTaps to kRowMaxTaps, Mamba's k = 4 among them), as nn.Conv1d(groups=C) reaches them. Row
// kernels for NCHW-contiguous (N, C, L) tensors, column kernels for channels_last ones (a
// transposed (N, L, C) projection output), each with its weight gradient, and their launch plans.

#include <ATen/native/cuda/DepthwiseConv2dCommon.cuh>

namespace at::native::dwconv {

// Row kernels: conv1d as torch runs it (NCHW-contiguous planes of one row, a 1 x K filter with
// K from kRowMinTaps to kRowMaxTaps, stride 1, dilation 1, 32-bit indexing, 16-byte aligned data).
// A thread takes chunks of kRowChunk consecutive outputs of a row, each starting on a kRowChunk
// boundary of dst in memory (so a row's first chunk may start before it), and its window
// (kRowChunk + K - 1 inputs) from the aligned 16-byte vectors of src that hold it: every global
// access of a whole chunk is 16 bytes wide, and the window stays in registers, each input widened
// once for K multiply-adds. The window starts some elements into its first vector; a branch per
// possible offset makes it a constant there, so the window is never indexed at run time. (At stride
// 1 dst_w = src_w + 2 * pad - K + 1, so a window inside its row puts the chunk's outputs inside
// theirs.) A chunk is 32 bytes of output (8 outputs in double): two 16-byte vectors of bf16/fp16.
//
// Both row kernels, forward and backward-input (row_kernel) and the weight gradient's, stream spans
// of chunks: below.

constexpr int row_chunk_outputs(int element_size) { return element_size >= 8 ? 8 : 32 / element_size; }
template <typename scalar_t>
constexpr int kRowChunk = row_chunk_outputs(sizeof(scalar_t));
constexpr int kRowMinTaps = 2;
constexpr int kRowMaxTaps = 4;
constexpr int kRowMinWidth = 64;  // narrower rows are mostly ends: the tiled kernel serves them
// The widest row they take: a row's chunks start up to a chunk before it and end up to a chunk past it,
// and a chunk's first output (chunk x kRowChunk) is a 32-bit value.
constexpr int64_t kRowMaxWidth = std::numeric_limits<int32_t>::max() - 2 * row_chunk_outputs(2);

// The inputs of a chunk's window.
template <typename scalar_t, int kTaps>
constexpr int kRowWindow = kRowChunk<scalar_t> + kTaps - 1;

// A row's chunks of `chunk` outputs: enough for the row wherever its first element falls in a chunk.
inline int row_chunks(int64_t width, int chunk) {
  return static_cast<int>((width + 2 * (chunk - 1)) / chunk);
}

// The first output of a row's chunk, in the row that starts at element `row_start` of dst:
// chunks start on kRowChunk boundaries of dst in memory, so the first may start before the row.
template <typename scalar_t, typename index_t>
__device__ __forceinline__ index_t row_chunk_first(index_t row_start, index_t chunk) {
  constexpr int kChunk = kRowChunk<scalar_t>;
  return chunk * kChunk - (row_start & (kChunk - 1));
}

// Whether element i of a window that starts at `first` of its row lies in the row.
template <typename index_t>
__device__ __forceinline__ bool row_window_inside(index_t first, int i, index_t row_length) {
  return first + i >= 0 && first + i < row_length;
}

template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void store_row_chunk(scalar_t* address, const acc_t (&values)[kRowChunk<scalar_t>]) {
  constexpr int V = kVector16<scalar_t>;
#pragma unroll
  for (int v = 0; v < kRowChunk<scalar_t> / V; ++v) {
    Vector16<scalar_t> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = static_cast<scalar_t>(values[v * V + k]);
    store_vector(address + v * V, out);
  }
}

// Forward and backward-input: the row kernel streams the flattened (row, chunk) order. A warp takes
// spans of kWarpLanes x kRowLaneChunks consecutive chunks (the grid's warps walking spans by its
// stride), lane l chunks l, l + 32, ... of its span. A lane first loads its chunks' own inputs (the
// kRowChunk values from the aligned vector at or before each window's first input: the whole 16-byte
// vectors of src, each loaded once), all of them before any sum, so that every lane has
// kRowLaneChunks x 32 bytes in flight; then, a chunk at a time, the head of the next chunk's own
// inputs, which the window reaches into, comes from the next lane (__shfl_down_sync), or is loaded
// where the next chunk is another row's or the next lane is past the warp. One 16-byte load a vector
// of src, where the kernel before it loaded each window whole (half of it the neighbours' vectors
// again, from L1) and had 32 bytes of new data in flight a lane: about 24 KB an SM, which kept the
// H200's conv1d at 58-66 % of the copy bandwidth (2026-11-27).
//
// Each dst row reads one src row: forward any multiplier (dst channel c reads src channel c /
// multiplier), backward-input multiplier 1 (has_row_kernel; with more, a dst row sums several and
// the general kernels take it). Nothing outside a chunk's row is read (a vector across a row's end
// is read a value at a time) or summed.

// Chunks a lane takes from a warp's span, all loaded before the first is summed.
constexpr int row_lane_chunks(int element_size) { return element_size >= 8 ? 2 : 4; }
template <typename scalar_t>
constexpr int kRowLaneChunks = row_lane_chunks(sizeof(scalar_t));

// 32-bit words of a chunk's own inputs, and of the next chunk's that its window reaches into (its
// window starts up to V - 1 values into its own and is K - 1 values longer than the chunk).
template <typename scalar_t>
constexpr int kRowOwnWords = kRowChunk<scalar_t> * static_cast<int>(sizeof(scalar_t)) / 4;
template <typename scalar_t, int kTaps>
constexpr int kRowHaloWords = ((kVector16<scalar_t> + kTaps - 2) * static_cast<int>(sizeof(scalar_t)) + 3) / 4;

// A chunk's values as loaded (a grad_output chunk's, for widen_value).
template <typename scalar_t>
struct RowChunkWords {
  uint32_t v[kRowOwnWords<scalar_t>];
};

// A chunk's inputs as loaded: its own words, then the halo's.
template <typename scalar_t, int kTaps>
struct RowWords {
  uint32_t v[kRowOwnWords<scalar_t> + kRowHaloWords<scalar_t, kTaps>];
};

// A lane's chunk in the flattened order: its row (n * dst_channels + channel), channel and chunk,
// moved on a warp's width at a time with carries.
struct RowChunkPlace {
  int row, channel, chunk;

  __device__ __forceinline__ void advance(int chunks_per_row, int channels) {
    chunk += kWarpLanes;
    while (chunk >= chunks_per_row) {  // chunks_per_row >= 4 (kRowMinWidth): at most 8 times
      chunk -= chunks_per_row;
      ++row;
      if (++channel == channels) channel = 0;
    }
  }
};

// Where a chunk reads and writes: its row's first element in src and in dst, its first output y0
// (row_chunk_first) and the first input of its window and of its own inputs, in the row.
struct RowChunkSpan {
  int src_start, dst_start, y0, first, own;
};

// The span of chunk `chunk` of the row that starts at element src_start of src and dst_start of dst.
template <typename scalar_t>
__device__ __forceinline__ RowChunkSpan row_chunk_span(int src_start, int dst_start, int chunk, int pad) {
  RowChunkSpan span;
  span.src_start = src_start;
  span.dst_start = dst_start;
  span.y0 = row_chunk_first<scalar_t>(dst_start, chunk);
  span.first = span.y0 - pad;
  span.own = span.first - ((src_start + span.first) & (kVector16<scalar_t> - 1));
  return span;
}

// The span of a forward or backward-input chunk: dst row `at.row` reads src row at.row / multiplier.
template <typename scalar_t>
__device__ __forceinline__ RowChunkSpan row_chunk_span(const RowChunkPlace& at, const PassGeometry& g) {
  const int multiplier = static_cast<int>(g.multiplier);
  const int src_row = multiplier == 1 ? at.row : at.row / multiplier;
  return row_chunk_span<scalar_t>(src_row * static_cast<int>(g.src_w), at.row * static_cast<int>(g.dst_w), at.chunk,
                                  static_cast<int>(g.pad_w));
}

// `words` 32-bit words from the aligned vectors of the row at `src_row` from its element `from` on.
// Nothing outside the row's src_w elements is read (zeros there): a vector across one of its ends
// (a row that does not start or end on a 16-byte boundary) is read a value at a time.
template <int kWords, typename scalar_t>
__device__ __forceinline__ void load_row_words(uint32_t* words, const scalar_t* src_row, int from, int src_w) {
  constexpr int V = kVector16<scalar_t>;
#pragma unroll
  for (int q = 0; q * 4 < kWords; ++q) {
    const int x = from + q * V;
    Vector16<uint32_t> loaded = load_words_or_zero(x >= 0 && x + V <= src_w, src_row + x);
    if (x < src_w && x + V > 0 && !(x >= 0 && x + V <= src_w)) {
      Vector16<scalar_t> values;
#pragma unroll
      for (int k = 0; k < V; ++k) values.v[k] = x + k >= 0 && x + k < src_w ? src_row[x + k] : scalar_t(0);
      memcpy(&loaded, &values, sizeof(loaded));
    }
#pragma unroll
    for (int w = 0; w < 4 && q * 4 + w < kWords; ++w) words[q * 4 + w] = loaded.v[w];
  }
}

template <int kOffset, typename scalar_t, typename acc_t, typename Words, int kCount>
__device__ __forceinline__ void widen_window(const Words& words, acc_t (&window)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) window[i] = widen_value<scalar_t, acc_t>(words, kOffset + i);
}

// The window, values offset .. offset + kCount - 1 of `words`: a branch an offset, so that no value
// is indexed at run time.
template <typename scalar_t, typename acc_t, typename Words, int kCount, int... kOffsets>
__device__ __forceinline__ void widen_window_at(int offset, const Words& words, acc_t (&window)[kCount],
                                                std::integer_sequence<int, kOffsets...>) {
  ((offset == kOffsets ? widen_window<kOffsets, scalar_t>(words, window) : void()), ...);
}

// The window of a chunk whose own inputs `own` this lane holds (its first input `first`, its own
// inputs' `own_first`, in the row at `src_row`): the next chunk's head from the next lane's `own`,
// or loaded where `load_tail` (the next lane's chunk is not the next one of this row). Every lane of
// the warp calls it together.
template <typename scalar_t, int kTaps, typename acc_t>
__device__ __forceinline__ void take_row_window(acc_t (&window)[kRowWindow<scalar_t, kTaps>],
                                                const uint32_t (&own)[kRowOwnWords<scalar_t>], bool load_tail,
                                                const scalar_t* src_row, int first, int own_first, int src_w) {
  constexpr int kOwnWords = kRowOwnWords<scalar_t>;
  constexpr int kHaloWords = kRowHaloWords<scalar_t, kTaps>;
  RowWords<scalar_t, kTaps> words;
#pragma unroll
  for (int w = 0; w < kOwnWords; ++w) words.v[w] = own[w];
#pragma unroll
  for (int w = 0; w < kHaloWords; ++w) words.v[kOwnWords + w] = __shfl_down_sync(0xffffffffu, own[w], 1);
  if (load_tail) load_row_words<kHaloWords>(words.v + kOwnWords, src_row, own_first + kRowChunk<scalar_t>, src_w);
  widen_window_at<scalar_t>(first - own_first, words, window, std::make_integer_sequence<int, kVector16<scalar_t>>{});
}

template <typename scalar_t, typename index_t, bool kBackward, int kTaps>
__global__ void __launch_bounds__(kThreads, 2) row_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const int chunks_per_row) {
  static_assert(std::is_same_v<index_t, int32_t>, "the row kernel indexes in 32 bits");
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int kChunk = kRowChunk<scalar_t>;
  constexpr int kWindow = kRowWindow<scalar_t, kTaps>;
  constexpr int kLaneChunks = kRowLaneChunks<scalar_t>;
  constexpr int kOwnWords = kRowOwnWords<scalar_t>;
  const int src_w = static_cast<int>(g.src_w), dst_w = static_cast<int>(g.dst_w);
  const int channels = static_cast<int>(g.dst_channels);
  const int rows = static_cast<int>(g.batch) * channels;
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  const int span_chunks = kWarpLanes * kLaneChunks;
  const int spans = static_cast<int>((int64_t(rows) * chunks_per_row + span_chunks - 1) / span_chunks);
  const int warp_stride = static_cast<int>(gridDim.x) * kWarps;
  const int first_span = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarpLanes;
  // The lane's first chunk of each span as (n, channel, chunk), moved on by the grid's stride with
  // carries: the divisions are paid once. Below rows * chunks_per_row + span_chunks: 32-bit.
  GridWalk<int, 3> span_at(first_span * span_chunks + lane, warp_stride * span_chunks, {0, channels, chunks_per_row});
  for (int span = first_span; span < spans; span += warp_stride, span_at.advance()) {
    const RowChunkPlace start{span_at.at[0] * channels + span_at.at[1], span_at.at[1], span_at.at[2]};

    uint32_t own[kLaneChunks][kOwnWords];
    scalar_t filters[kLaneChunks][kTaps];  // loaded with the inputs, so that no sum waits for them
    RowChunkPlace at = start;
#pragma unroll
    for (int u = 0; u < kLaneChunks; ++u) {
      const bool live = at.row < rows;  // else nothing is read: the place of row 0, from src_w on
      const RowChunkSpan c = row_chunk_span<scalar_t>(live ? at : RowChunkPlace{0, 0, 0}, g);
      load_row_words<kOwnWords>(own[u], src + c.src_start, live ? c.own : src_w, src_w);
#pragma unroll
      for (int j = 0; j < kTaps; ++j) filters[u][j] = weight[at.channel * kTaps + j];
      at.advance(chunks_per_row, channels);
    }

    at = start;
#pragma unroll
    for (int u = 0; u < kLaneChunks; ++u) {
      const bool live = at.row < rows;
      const RowChunkSpan c = row_chunk_span<scalar_t>(live ? at : RowChunkPlace{0, 0, 0}, g);
      const bool outputs = live && c.y0 < dst_w;  // a row that starts late in its first chunk needs one chunk fewer
      acc_t window[kWindow];
      take_row_window<scalar_t, kTaps>(window, own[u],
                                       outputs && (lane == kWarpLanes - 1 || at.chunk + 1 == chunks_per_row),
                                       src + c.src_start, c.first, c.own, src_w);
      if (outputs) {
        acc_t taps[kTaps];
#pragma unroll
        for (int j = 0; j < kTaps; ++j) taps[j] = static_cast<acc_t>(filters[u][kBackward ? kTaps - 1 - j : j]);
        const acc_t start_value = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[at.channel]) : acc_t(0);
        acc_t acc[kChunk];
        // Where the window leaves the row, its values outside are never summed (0 x inf would be NaN).
        whole_or_edge(c.first < 0 || c.first + kWindow > src_w, [&](auto edge) {
#pragma unroll
          for (int k = 0; k < kChunk; ++k) {
            acc[k] = start_value;
#pragma unroll
            for (int j = 0; j < kTaps; ++j) {
              if (!decltype(edge)::value || row_window_inside(c.first, k + j, src_w)) acc[k] += window[k + j] * taps[j];
            }
          }
        });
        if (c.y0 >= 0 && c.y0 + kChunk <= dst_w) {
          store_row_chunk(dst + c.dst_start + c.y0, acc);
        } else {
#pragma unroll
          for (int k = 0; k < kChunk; ++k) {
            const int y = c.y0 + k;
            if (y >= 0 && y < dst_w) dst[c.dst_start + y] = static_cast<scalar_t>(acc[k]);
          }
        }
      }
      at.advance(chunks_per_row, channels);
    }
  }
}

// Image n's chunk `chunk` moved on by `walk`'s step (a pass's kThreads chunks), with its carry into n.
__device__ __forceinline__ void step_row_chunk(int& n, int& chunk, const GridWalk<int, 2>& walk, int chunks_per_row) {
  chunk += walk.step[1];
  n += walk.step[0] + (chunk >= chunks_per_row ? 1 : 0);
  if (chunk >= chunks_per_row) chunk -= chunks_per_row;
}

// The weight gradient: blockIdx.x is a channel, blockIdx.y a slice of its batch x chunks of
// grad_output rows, [slice * chunks_per_slice, ...) in (n, chunk) order; g is the forward
// geometry (src = input, dst = grad_output). Thread tid takes the slice's chunks tid, tid + kThreads,
// ... (up to kRowLaneChunks of them: the plan's slices give every warp as much work, so that no warp
// holds up the block's sum). It loads their own inputs and grad_output chunks (two 16-byte vectors
// each in bf16) before any sum, up to 256 bytes in flight, and takes each window's tail from the next
// lane, whose chunk is the next one, as the forward's lanes do. The block's sums go to `partial` as the other
// weight-gradient kernels' do, and its sum of grad_output (slot kTaps) to `partial_bias` unless
// that is null.
template <typename scalar_t, typename index_t, int kTaps>
__global__ void __launch_bounds__(kThreads, 2) grad_weight_row_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const int chunks_per_row,
    const int64_t chunks_per_slice) {
  static_assert(std::is_same_v<index_t, int32_t>, "the row kernel indexes in 32 bits");
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int kChunk = kRowChunk<scalar_t>;
  constexpr int kWindow = kRowWindow<scalar_t, kTaps>;
  constexpr int kLaneChunks = kRowLaneChunks<scalar_t>;
  constexpr int kOwnWords = kRowOwnWords<scalar_t>;
  __shared__ acc_t warp_sums[kWarps][kTaps + 1];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % kWarpLanes;
  const int src_w = static_cast<int>(g.src_w), dst_w = static_cast<int>(g.dst_w), pad = static_cast<int>(g.pad_w);
  const int src_channels = static_cast<int>(g.src_channels), dst_channels = static_cast<int>(g.dst_channels);
  const int c = static_cast<int>(blockIdx.x);
  const int src_c = c / static_cast<int>(g.multiplier);
  const int begin = static_cast<int>(blockIdx.y * chunks_per_slice);
  const int end = static_cast<int>(smaller(g.batch * chunks_per_row, begin + chunks_per_slice));
  acc_t acc[kTaps + 1];
#pragma unroll
  for (int j = 0; j <= kTaps; ++j) acc[j] = acc_t(0);
  // The span of chunk `chunk` of image n's rows (image 0's where not live: nothing is read there).
  const auto chunk_at = [&](int n, int chunk, bool live) {
    const int image = live ? n : 0;
    return row_chunk_span<scalar_t>((image * src_channels + src_c) * src_w, (image * dst_channels + c) * dst_w, chunk,
                                    pad);
  };
  // Passes of the block's threads over the slice, chunk begin + tid + u * kThreads a thread's u-th:
  // one pass where the plan sizes slices to kThreads x kLaneChunks chunks or fewer.
  // (n, chunk) of the thread's chunk in a pass, moved on kThreads chunks at a time with carries.
  GridWalk<int, 2> walk(begin + tid, kThreads, {0, chunks_per_row});
  for (int pass = begin; pass < end; pass += kThreads * kLaneChunks) {  // the same passes for every lane
    int n = walk.at[0], chunk = walk.at[1];  // the pass's first chunk, for the sums
    uint32_t in_own[kLaneChunks][kOwnWords];
    RowChunkWords<scalar_t> go_words[kLaneChunks];
#pragma unroll
    for (int u = 0; u < kLaneChunks; ++u, walk.advance()) {  // on to the next pass's first chunk
      const bool live = pass + tid + u * kThreads < end;  // else nothing read: from the rows' ends on
      const RowChunkSpan at = chunk_at(walk.at[0], walk.at[1], live);
      load_row_words<kOwnWords>(in_own[u], input + at.src_start, live ? at.own : src_w, src_w);
      load_row_words<kOwnWords>(go_words[u].v, grad_output + at.dst_start, live ? at.y0 : dst_w, dst_w);
    }
#pragma unroll
    for (int u = 0; u < kLaneChunks; ++u) {
      if (u > 0) step_row_chunk(n, chunk, walk, chunks_per_row);  // walk's step again, from the pass's first chunk
      const int item = pass + tid + u * kThreads;
      const RowChunkSpan at = chunk_at(n, chunk, item < end);
      const bool sums = item < end && at.y0 < dst_w;  // a row that starts late in its first chunk needs one fewer
      acc_t window[kWindow];
      take_row_window<scalar_t, kTaps>(
          window, in_own[u], sums && (lane == kWarpLanes - 1 || chunk + 1 == chunks_per_row || item + 1 == end),
          input + at.src_start, at.first, at.own, src_w);
      if (sums) {
        // Where the chunk leaves its grad_output row or its window the input row, only the outputs
        // and inputs inside are summed (0 x inf would be NaN).
        whole_or_edge(at.y0 < 0 || at.y0 + kChunk > dst_w || at.first < 0 || at.first + kWindow > src_w,
                      [&](auto edge) {
#pragma unroll
                        for (int k = 0; k < kChunk; ++k) {
                          if (decltype(edge)::value && (at.y0 + k < 0 || at.y0 + k >= dst_w)) continue;
                          const acc_t go = widen_value<scalar_t, acc_t>(go_words[u], k);
#pragma unroll
                          for (int j = 0; j < kTaps; ++j) {
                            if (!decltype(edge)::value || row_window_inside(at.first, k + j, src_w)) {
                              acc[j] += go * window[k + j];
                            }
                          }
                          acc[kTaps] += go;
                        }
                      });
      }
    }
  }
  const acc_t total = sum_over_block(warp_sums, acc, tid);
  if (tid < kTaps) partial[(static_cast<int64_t>(blockIdx.y) * dst_channels + c) * kTaps + tid] = total;
  if (tid == kTaps && partial_bias != nullptr) {
    partial_bias[static_cast<int64_t>(blockIdx.y) * dst_channels + c] = total;
  }
}

// ---------------------------------------------------------------------------
// Both gradients of a conv1d in one kernel (v52), as autograd asks for them: grad_input, and the
// weight and bias sums, from one read of grad_output and one of the input, where row_kernel's
// backward-input and grad_weight_row_kernel each read grad_output: three tensors moved where the two
// passes move four. NCHW rows, multiplier 1, padding below K (has_row_backward).
//
// A block is grad_weight_row_kernel's: a channel and a slice of its (n, chunk) order, thread tid the
// slice's chunks tid, tid + kThreads, ... (kRowBackwardLaneChunks at most), all loaded before any sum.
// The chunks are grad_input's: kRowChunk outputs from x0, on a kRowChunk boundary of grad_input in
// memory, and so of the input (the same shape, both 16-byte aligned). A chunk
//  - computes grad_input[x0 + k] = sum_t go[first + k + t] * w[K - 1 - t], first = x0 + pad - (K - 1),
//    from its grad_output window (its own words and the next lane's, as row_kernel's backward-input);
//  - adds into the weight's sums grad_output's first kRowChunk values of that window, first .. (the
//    chunks' ranges tile each grad_output row), each times the inputs it met in the forward,
//    x0 - (K - 1) + k + j: the chunk's own inputs and the K - 1 before them, the previous lane's last
//    (__shfl_up_sync; a warp's first lane loads them).
// A row's chunks run from grad_input's first to the one whose range reaches grad_output's last value,
// pad values past grad_input's row (row_backward_chunks_per_row): those past the row store nothing.

// Chunks a lane takes: float's four, as the weight gradient's (116 registers on sm_90, two blocks an SM);
// two of the 2-byte types' 16 outputs and of double's 8 (123 and 128), whose windows take twice the registers.
constexpr int row_backward_lane_chunks(int element_size) { return element_size == 4 ? 4 : 2; }
template <typename scalar_t>
constexpr int kRowBackwardLaneChunks = row_backward_lane_chunks(sizeof(scalar_t));

// 32-bit words of the K - 1 inputs before a chunk, and the 16-byte vectors that end at the chunk and hold them.
template <typename scalar_t, int kTaps>
constexpr int kRowBeforeWords = ((kTaps - 1) * static_cast<int>(sizeof(scalar_t)) + 3) / 4;
template <typename scalar_t, int kTaps>
constexpr int kRowBeforeVectors = (kRowBeforeWords<scalar_t, kTaps> + 3) / 4;

// A chunk's weight-gradient inputs as words: the ones before it, then its own.
template <typename scalar_t, int kTaps>
struct RowBeforeAndOwnWords {
  uint32_t v[kRowBeforeWords<scalar_t, kTaps> + kRowOwnWords<scalar_t>];
};

template <typename scalar_t, typename index_t, int kTaps>
__global__ void __launch_bounds__(kThreads, 2) row_backward_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    const scalar_t* __restrict__ weight,
    scalar_t* __restrict__ grad_input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const int chunks_per_row,
    const int64_t chunks_per_slice) {
  static_assert(std::is_same_v<index_t, int32_t>, "the row kernels index in 32 bits");
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<scalar_t>;
  constexpr int kChunk = kRowChunk<scalar_t>;
  constexpr int kWindow = kRowWindow<scalar_t, kTaps>;
  constexpr int kLaneChunks = kRowBackwardLaneChunks<scalar_t>;
  constexpr int kOwnWords = kRowOwnWords<scalar_t>;
  constexpr int kBeforeWords = kRowBeforeWords<scalar_t, kTaps>;
  constexpr int kBeforeVectorWords = 4 * kRowBeforeVectors<scalar_t, kTaps>;
  // The values of the words before a chunk that lie before its K - 1 inputs there.
  constexpr int kBeforeSkip = kBeforeWords * 4 / static_cast<int>(sizeof(scalar_t)) - (kTaps - 1);
  __shared__ acc_t warp_sums[kWarps][kTaps + 1];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % kWarpLanes;
  const int src_w = static_cast<int>(g.src_w), dst_w = static_cast<int>(g.dst_w);
  const int channels = static_cast<int>(g.dst_channels);
  const int c = static_cast<int>(blockIdx.x);
  const int begin = static_cast<int>(blockIdx.y * chunks_per_slice);
  const int end = static_cast<int>(smaller(g.batch * chunks_per_row, begin + chunks_per_slice));
  acc_t taps[kTaps];
#pragma unroll
  for (int j = 0; j < kTaps; ++j) taps[j] = static_cast<acc_t>(weight[c * kTaps + j]);
  acc_t acc[kTaps + 1];
#pragma unroll
  for (int j = 0; j <= kTaps; ++j) acc[j] = acc_t(0);
  // Chunk `chunk` of image n's rows as backward-input's correlation sees it: src grad_output, dst
  // grad_input, y0 the chunk's x0, `first` its grad_output window's (image 0's where not live:
  // nothing is read there).
  const auto chunk_at = [&](int n, int chunk, bool live) {
    const int row = (live ? n : 0) * channels + c;
    return row_chunk_span<scalar_t>(row * dst_w, row * src_w, chunk, kTaps - 1 - static_cast<int>(g.pad_w));
  };
  GridWalk<int, 2> walk(begin + tid, kThreads, {0, chunks_per_row});
  for (int pass = begin; pass < end; pass += kThreads * kLaneChunks) {  // the same passes for every lane
    int n = walk.at[0], chunk = walk.at[1];  // the pass's first chunk, for the sums
    uint32_t in_own[kLaneChunks][kOwnWords];
    uint32_t go_own[kLaneChunks][kOwnWords];
#pragma unroll
    for (int u = 0; u < kLaneChunks; ++u, walk.advance()) {  // on to the next pass's first chunk
      const bool live = pass + tid + u * kThreads < end;  // else nothing read: from the rows' ends on
      const RowChunkSpan at = chunk_at(walk.at[0], walk.at[1], live);
      load_row_words<kOwnWords>(in_own[u], input + at.dst_start, live ? at.y0 : src_w, src_w);
      load_row_words<kOwnWords>(go_own[u], grad_output + at.src_start, live ? at.own : dst_w, dst_w);
    }
#pragma unroll
    for (int u = 0; u < kLaneChunks; ++u) {
      if (u > 0) step_row_chunk(n, chunk, walk, chunks_per_row);  // walk's step again, from the pass's first chunk
      const int item = pass + tid + u * kThreads;
      const RowChunkSpan at = chunk_at(n, chunk, item < end);
      const int x0 = at.y0;
      const bool works = item < end && (x0 < src_w || at.first < dst_w);
      acc_t window[kWindow];  // grad_output from `first` on
      take_row_window<scalar_t, kTaps>(
          window, go_own[u], works && (lane == kWarpLanes - 1 || chunk + 1 == chunks_per_row || item + 1 == end),
          grad_output + at.src_start, at.first, at.own, dst_w);
      // The K - 1 inputs before the chunk: the previous lane's last, whose chunk is the one before in
      // this row (a row's first chunk has none inside the row), or, for a warp's first lane, loaded.
      RowBeforeAndOwnWords<scalar_t, kTaps> inputs;
#pragma unroll
      for (int w = 0; w < kBeforeWords; ++w) {
        inputs.v[w] = __shfl_up_sync(0xffffffffu, in_own[u][kOwnWords - kBeforeWords + w], 1);
      }
      if (lane == 0 && works && chunk > 0) {
        uint32_t before[kBeforeVectorWords];
        load_row_words<kBeforeVectorWords>(before, input + at.dst_start, x0 - kRowBeforeVectors<scalar_t, kTaps> * V,
                                           src_w);
#pragma unroll
        for (int w = 0; w < kBeforeWords; ++w) inputs.v[w] = before[kBeforeVectorWords - kBeforeWords + w];
      }
#pragma unroll
      for (int w = 0; w < kOwnWords; ++w) inputs.v[kBeforeWords + w] = in_own[u][w];
      if (works) {
        // Where a window leaves its row, the values outside are never summed (0 x inf would be NaN).
        whole_or_edge(at.first < 0 || at.first + kWindow > dst_w || x0 - (kTaps - 1) < 0 || x0 + kChunk > src_w,
                      [&](auto edge) {
          constexpr bool kEdge = decltype(edge)::value;
          acc_t grad[kChunk];
#pragma unroll
          for (int k = 0; k < kChunk; ++k) {
            grad[k] = acc_t(0);
#pragma unroll
            for (int t = 0; t < kTaps; ++t) {
              if (!kEdge || row_window_inside(at.first, k + t, dst_w)) grad[k] += window[k + t] * taps[kTaps - 1 - t];
            }
          }
#pragma unroll
          for (int k = 0; k < kChunk; ++k) {
            if (kEdge && !row_window_inside(at.first, k, dst_w)) continue;
            const acc_t go = window[k];
#pragma unroll
            for (int j = 0; j < kTaps; ++j) {
              if (!kEdge || row_window_inside(x0 - (kTaps - 1), k + j, src_w)) {
                acc[j] += go * widen_value<scalar_t, acc_t>(inputs, kBeforeSkip + k + j);
              }
            }
            acc[kTaps] += go;
          }
          if (x0 >= 0 && x0 + kChunk <= src_w) {
            store_row_chunk(grad_input + at.dst_start + x0, grad);
          } else {
#pragma unroll
            for (int k = 0; k < kChunk; ++k) {
              if (x0 + k >= 0 && x0 + k < src_w) grad_input[at.dst_start + x0 + k] = static_cast<scalar_t>(grad[k]);
            }
          }
        });
      }
    }
  }
  const acc_t total = sum_over_block(warp_sums, acc, tid);
  if (tid < kTaps) partial[(static_cast<int64_t>(blockIdx.y) * channels + c) * kTaps + tid] = total;
  if (tid == kTaps && partial_bias != nullptr) partial_bias[static_cast<int64_t>(blockIdx.y) * channels + c] = total;
}

// ---------------------------------------------------------------------------
// Column kernels: conv1d in the transposed layout (channels_last planes of one row, as a (N, L, C)
// projection output is seen as (N, C, 1, L)), multiplier 1, the row kernels' filters, channels a
// whole number of 16-byte vectors, 16-byte aligned data and weight, 32-bit indexing. A thread owns one
// vector of channels and walks kColumnSegment consecutive outputs of a row with the last K input
// vectors in registers: a step loads one input vector (the weight gradient also one grad_output
// vector), so every global access is a whole channel vector, a warp's 32 lanes reading 32
// consecutive vectors of one pixel, and each input is loaded once a segment for K multiply-adds a
// channel. Segments whose window leaves the row take a checked instance of the same walk (padding
// reads nothing; the weight gradient adds nothing for it).

constexpr int kColumnSegment = 8;

// A row's segments of dst_w outputs.
template <typename index_t>
__host__ __device__ inline index_t column_segments(index_t dst_w) {
  return (dst_w + kColumnSegment - 1) / kColumnSegment;
}

// A segment's window: input vector j of the step's K, and whether it lies in the row.
template <typename acc_t, int kTaps, int V>
struct ColumnWindow {
  acc_t values[kTaps][V];
  bool inside[kTaps];

  // Moves the window one step on, to input x of the row whose pixel 0 is at `row` (x read only
  // when it lies in the row's src_w pixels, or whatever it is when not kChecked).
  template <bool kChecked, typename scalar_t, typename index_t>
  __device__ __forceinline__ void step(const scalar_t* row, index_t channels, index_t x, index_t src_w) {
    const bool in_row = x >= 0 && x < src_w;
#pragma unroll
    for (int j = 0; j + 1 < kTaps; ++j) {
      inside[j] = inside[j + 1];
#pragma unroll
      for (int k = 0; k < V; ++k) values[j][k] = values[j + 1][k];
    }
    inside[kTaps - 1] = !kChecked || in_row;
    widen_vector(load_vector_or_zero(inside[kTaps - 1], row + x * channels), values[kTaps - 1]);
  }

  // The first K - 1 inputs of a segment whose window starts at input `first`.
  template <bool kChecked, typename scalar_t, typename index_t>
  __device__ __forceinline__ void start(const scalar_t* row, index_t channels, index_t first, index_t src_w) {
#pragma unroll
    for (int j = 0; j + 1 < kTaps; ++j) step<kChecked>(row, channels, first + j, src_w);
  }
};

// Whether a segment's window (inputs from first_input, kColumnSegment + K - 1 of them) lies in the
// row. At stride 1 dst_w = src_w + 2 * pad - K + 1, so its outputs then lie in theirs.
template <int kTaps, typename index_t>
__device__ __forceinline__ bool column_segment_inside(index_t first_input, index_t src_w) {
  return first_input >= 0 && first_input + kColumnSegment + kTaps - 1 <= src_w;
}

// One thread's segment, forward or backward-input: outputs l0 .. l0 + kColumnSegment - 1 of the
// row at dst_row from the inputs at src_row (pixel x at src_row + x * channels).
template <bool kChecked, int kTaps, typename scalar_t, typename index_t, typename acc_t, int V>
__device__ __forceinline__ void column_segment(const acc_t (&taps)[kTaps][V], const acc_t (&start)[V],
                                               const scalar_t* src_row, scalar_t* dst_row, index_t channels,
                                               index_t l0, index_t first_input, index_t src_w, index_t dst_w) {
  ColumnWindow<acc_t, kTaps, V> window;
  window.template start<kChecked>(src_row, channels, first_input, src_w);
#pragma unroll
  for (int s = 0; s < kColumnSegment; ++s) {
    window.template step<kChecked>(src_row, channels, first_input + s + kTaps - 1, src_w);
    Vector16<scalar_t> out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      acc_t sum = start[k];
#pragma unroll
      for (int j = 0; j < kTaps; ++j) sum += window.values[j][k] * taps[j][k];
      out.v[k] = static_cast<scalar_t>(sum);
    }
    if (!kChecked || l0 + s < dst_w) store_vector(dst_row + (l0 + s) * channels, out);
  }
}

// Forward, or backward-input as the stride-1 correlation with the flipped filter (g then is
// backward_input_as_correlation's geometry). Threads walk (n, segment, channel vector), vectors
// fastest, by the grid's stride.
template <typename scalar_t, typename index_t, bool kBackward, int kTaps>
__global__ void __launch_bounds__(kThreads, 2) column_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<scalar_t>;
  const index_t channels = g.dst_channels, src_w = g.src_w, dst_w = g.dst_w, pad = g.pad_w;
  const index_t vectors = channels / V;
  const index_t segments = column_segments(dst_w);
  const index_t total = static_cast<index_t>(g.batch) * segments * vectors;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const index_t grid_stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  GridWalk<index_t, 3> at(first, grid_stride, {0, segments, vectors});
  for (index_t i = first; i < total; i += grid_stride, at.advance()) {
    const index_t n = at.at[0], l0 = at.at[1] * kColumnSegment, c0 = at.at[2] * V;
    // The vector's filters are kTaps whole vectors of weight, [channel][tap].
    acc_t taps[kTaps][V];
#pragma unroll
    for (int q = 0; q < kTaps; ++q) {
      acc_t loaded[V];
      widen_vector(load_vector(weight + c0 * kTaps + q * V), loaded);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int k = (q * V + e) / kTaps, tap = (q * V + e) % kTaps;
        taps[kBackward ? kTaps - 1 - tap : tap][k] = loaded[e];
      }
    }
    acc_t start[V];
#pragma unroll
    for (int k = 0; k < V; ++k) start[k] = (!kBackward && bias != nullptr) ? static_cast<acc_t>(bias[c0 + k]) : acc_t(0);
    const scalar_t* src_row = src + n * src_w * channels + c0;
    scalar_t* dst_row = dst + n * dst_w * channels + c0;
    const index_t first_input = l0 - pad;
    if (column_segment_inside<kTaps>(first_input, src_w)) {
      column_segment<false>(taps, start, src_row, dst_row, channels, l0, first_input, src_w, dst_w);
    } else {
      column_segment<true>(taps, start, src_row, dst_row, channels, l0, first_input, src_w, dst_w);
    }
  }
}

// One position lane's segment of the weight gradient: adds grad_output's vectors at l0 .. times
// the window's inputs into sums[j][k].
template <bool kChecked, int kTaps, typename scalar_t, typename index_t, typename acc_t, int V>
__device__ __forceinline__ void column_grad_weight_segment(acc_t (&sums)[kTaps + 1][V], const scalar_t* go_row,
                                                           const scalar_t* in_row, index_t channels, index_t l0,
                                                           index_t first_input, index_t src_w, index_t dst_w) {
  ColumnWindow<acc_t, kTaps, V> window;
  window.template start<kChecked>(in_row, channels, first_input, src_w);
#pragma unroll
  for (int s = 0; s < kColumnSegment; ++s) {
    window.template step<kChecked>(in_row, channels, first_input + s + kTaps - 1, src_w);
    if (kChecked && l0 + s >= dst_w) continue;
    acc_t go[V];
    widen_vector(load_vector(go_row + (l0 + s) * channels), go);
#pragma unroll
    for (int j = 0; j < kTaps; ++j) {
      if (!window.inside[j]) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) sums[j][k] += go[k] * window.values[j][k];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) sums[kTaps][k] += go[k];
  }
}

// The weight gradient (g: the forward geometry). Block: (kChannelLanes channel vectors,
// kPositionLanes position lanes); blockIdx.x picks the block's vectors, blockIdx.y a slice
// of the (n, segment) items, [slice * items_per_slice, ...), which the position lanes take in
// turn. The lanes' sums then meet in shared memory, added in lane order, and go to `partial`.
template <typename scalar_t, typename index_t, int kTaps>
__global__ void __launch_bounds__(kThreads, 2) grad_weight_column_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const int64_t items_per_slice) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<scalar_t>;
  __shared__ acc_t lane_sums[(kTaps + 1) * V][kPositionLanes][kChannelLanes];
  const index_t channels = g.dst_channels, src_w = g.src_w, dst_w = g.dst_w, pad = g.pad_w;
  const index_t vector = static_cast<index_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  const bool active = vector < channels / V;
  const index_t c0 = vector * V;
  const index_t segments = column_segments(dst_w);
  const index_t slice = blockIdx.y;
  const index_t begin = slice * static_cast<index_t>(items_per_slice);
  const index_t end = smaller(static_cast<index_t>(g.batch) * segments, begin + static_cast<index_t>(items_per_slice));
  acc_t sums[kTaps + 1][V];  // row kTaps: grad_output's own sums, the bias gradient's
#pragma unroll
  for (int j = 0; j <= kTaps; ++j) {
#pragma unroll
    for (int k = 0; k < V; ++k) sums[j][k] = acc_t(0);
  }
  if (active) {
    GridWalk<index_t, 2> at(begin + threadIdx.y, kPositionLanes, {0, segments});  // (n, segment)
    for (index_t i = begin + threadIdx.y; i < end; i += kPositionLanes, at.advance()) {
      const index_t n = at.at[0], l0 = at.at[1] * kColumnSegment;
      const scalar_t* go_row = grad_output + n * dst_w * channels + c0;
      const scalar_t* in_row = input + n * src_w * channels + c0;
      const index_t first_input = l0 - pad;
      if (column_segment_inside<kTaps>(first_input, src_w)) {
        column_grad_weight_segment<false, kTaps>(sums, go_row, in_row, channels, l0, first_input, src_w, dst_w);
      } else {
        column_grad_weight_segment<true, kTaps>(sums, go_row, in_row, channels, l0, first_input, src_w, dst_w);
      }
    }
  }
  // Slot t holds tap t / V of channel c0 + t % V (tap kTaps: the bias).
  sum_position_lanes(lane_sums, [&](int t) { return sums[t / V][t % V]; }, [&](int t, acc_t total) {
    if (!active) return;
    if (t / V < kTaps) {
      partial[(static_cast<int64_t>(slice) * channels + c0 + t % V) * kTaps + t / V] = total;
    } else if (partial_bias != nullptr) {
      partial_bias[static_cast<int64_t>(slice) * channels + c0 + t % V] = total;
    }
  });
}

// ---------------------------------------------------------------------------
// Both conv1d gradients in channels_last (column_backward_kernel): the column kernels' passes with
// padding below K (has_column_backward), grad_input and the weight's and bias's sums from one read
// of grad_output and the input; and, without grad_input, the weight gradient alone from the same
// walk (kGradInput false).
//
// A thread takes kColumnBackwardBytes of a pixel's channels (a warp 32 such vectors: 256 contiguous
// bytes a load) and segments of kColumnSegment grad_input positions x0 .. x0 + S - 1 of a row, over
// x in [0, src_w + pad): it loads the segment's grad_output window go[x0 + pad - (K - 1) ...] and
// input window in[x0 - (K - 1) ...] (S + K - 1 pixels each) before any sum, then at each step s:
//  - grad_input[x0 + s] = sum_t go[x0 + s + pad - t] w[t], grad_output zero outside its row, as
//    column_kernel's backward-input reads it (nothing stored past grad_input's row);
//  - the weight's sums add go[l] in[l - pad + t] and the bias's go[l], l = x0 + s + pad - (K - 1).
// The segments' l tile grad_output's row from l <= 0 (pad < K) to past its end, so each grad_output
// value is summed once; the weight's sums meet no value outside a row (0 x inf would be NaN). Blocks are
// grad_weight_column_kernel's: (kChannelLanes vector lanes, kPositionLanes position lanes), the grid's
// x the vector groups and y slices of the (n, segment) items, the lanes' sums meeting in lane order.

// A thread's channels: 8 bytes (4 of a 2-byte type, 2 float, 1 double). With the column kernels' 16,
// the two windows, the filter and the K + 1 sums a thread in acc_t would not fit the 128 registers of
// two blocks an SM (bf16 at K = 4: 72 registers for the filter and the sums alone).
constexpr int kColumnBackwardBytes = 8;
constexpr int column_backward_channels(int element_size) { return kColumnBackwardBytes / element_size; }
template <typename scalar_t>
constexpr int kColumnBackwardChannels = column_backward_channels(sizeof(scalar_t));

// A thread's channels of one pixel as loaded, widened where they are used (widen_value).
struct alignas(kColumnBackwardBytes) ColumnWords {
  uint32_t v[kColumnBackwardBytes / 4];
};

// The thread's channels of pixel `pixel` of the row at `row` where `inside`, else zeros, with nothing read
// (and no address formed: a pixel outside the row may lie past what 32-bit indices reach).
template <typename scalar_t, typename index_t>
__device__ __forceinline__ ColumnWords load_column_words_or_zero(bool inside, const scalar_t* row, index_t pixel,
                                                                 index_t channels) {
  ColumnWords words{};
  if (inside) words = load_words<ColumnWords>(row + pixel * channels);
  return words;
}

// One 8-byte store of the thread's channels, cached in L2 only (as store_vector).
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void store_column_words(scalar_t* address,
                                                   const acc_t (&values)[kColumnBackwardChannels<scalar_t>]) {
  DWCONV_EXPECT_ALIGNED_TO(address, kColumnBackwardBytes);
  scalar_t narrowed[kColumnBackwardChannels<scalar_t>];
#pragma unroll
  for (int k = 0; k < kColumnBackwardChannels<scalar_t>; ++k) narrowed[k] = static_cast<scalar_t>(values[k]);
  ColumnWords words;
  memcpy(&words, narrowed, sizeof(words));
#ifdef __CUDA_ARCH__
  __stcg(reinterpret_cast<uint2*>(address), make_uint2(words.v[0], words.v[1]));
#else
  memcpy(address, &words, sizeof(words));
#endif
}

// A row's segments: enough for grad_input's src_w positions and the pad past them, whose segments
// hold grad_output's last values.
template <typename index_t>
__host__ __device__ inline index_t column_backward_segments(index_t src_w, index_t pad) {
  return (src_w + pad + kColumnSegment - 1) / kColumnSegment;
}

template <typename scalar_t, typename index_t, int kTaps, bool kGradInput>
__global__ void __launch_bounds__(kThreads, 2) column_backward_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    const scalar_t* __restrict__ weight,  // kGradInput only
    scalar_t* __restrict__ grad_input,    // kGradInput only
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const int64_t items_per_slice) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kColumnBackwardChannels<scalar_t>;
  constexpr int S = kColumnSegment;
  constexpr int kWindow = S + kTaps - 1;
  // grad_output's window: the weight's sums read its first S pixels, grad_input all of it.
  constexpr int kGoWindow = kGradInput ? kWindow : S;
  __shared__ acc_t lane_sums[(kTaps + 1) * V][kPositionLanes][kChannelLanes];
  const index_t channels = g.dst_channels, src_w = g.src_w, dst_w = g.dst_w, pad = g.pad_w;
  const index_t vector = static_cast<index_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  const bool active = vector < channels / V;
  const index_t c0 = vector * V;
  const index_t segments = column_backward_segments(src_w, pad);
  const index_t slice = blockIdx.y;
  const index_t begin = slice * static_cast<index_t>(items_per_slice);
  const index_t end = smaller(static_cast<index_t>(g.batch) * segments, begin + static_cast<index_t>(items_per_slice));
  // The thread's filters as loaded, a tap's V channels in 8 bytes, widened where used: in acc_t a 2-byte
  // type's took 8 registers more, and half's K = 4 instance spilled on sm_80.
  ColumnWords taps[kTaps];
  acc_t sums[kTaps + 1][V];  // row kTaps: grad_output's own sums, the bias gradient's
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
    scalar_t tap[V];
#pragma unroll
    for (int k = 0; k < V; ++k) tap[k] = kGradInput && active ? weight[(c0 + k) * kTaps + t] : scalar_t(0);
    memcpy(&taps[t], tap, sizeof(taps[t]));
  }
#pragma unroll
  for (int k = 0; k < V; ++k) {
#pragma unroll
    for (int j = 0; j <= kTaps; ++j) sums[j][k] = acc_t(0);
  }
  if (active) {
    GridWalk<index_t, 2> at(begin + threadIdx.y, kPositionLanes, {0, segments});  // (n, segment)
    for (index_t i = begin + threadIdx.y; i < end; i += kPositionLanes, at.advance()) {
      const index_t n = at.at[0], x0 = at.at[1] * S;
      const index_t go_first = x0 + pad - (kTaps - 1), in_first = x0 - (kTaps - 1);
      const scalar_t* go_row = grad_output + n * dst_w * channels + c0;
      const scalar_t* in_row = input + n * src_w * channels + c0;
      const bool crosses_edge = go_first < 0 || go_first + kGoWindow > dst_w || in_first < 0 ||
                                in_first + kWindow > src_w;
      whole_or_edge(crosses_edge, [&](auto edge) {
        constexpr bool kEdge = decltype(edge)::value;
        ColumnWords go[kGoWindow], in[kWindow];
#pragma unroll
        for (int j = 0; j < kGoWindow; ++j) {
          go[j] = load_column_words_or_zero(!kEdge || within(go_first + j, dst_w), go_row, go_first + j, channels);
        }
#pragma unroll
        for (int j = 0; j < kWindow; ++j) {
          in[j] = load_column_words_or_zero(!kEdge || within(in_first + j, src_w), in_row, in_first + j, channels);
        }
#pragma unroll
        for (int s = 0; s < S; ++s) {
          if constexpr (kGradInput) {
            acc_t grad[V];
#pragma unroll
            for (int k = 0; k < V; ++k) {
              grad[k] = acc_t(0);
#pragma unroll
              for (int t = 0; t < kTaps; ++t) {
                grad[k] += widen_value<scalar_t, acc_t>(go[s + kTaps - 1 - t], k) *
                           widen_value<scalar_t, acc_t>(taps[t], k);
              }
            }
            if (!kEdge || x0 + s < src_w) store_column_words(grad_input + (n * src_w + x0 + s) * channels + c0, grad);
          }
          if (kEdge && !within(go_first + s, dst_w)) continue;
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const acc_t value = widen_value<scalar_t, acc_t>(go[s], k);
#pragma unroll
            for (int t = 0; t < kTaps; ++t) {
              if (!kEdge || within(in_first + s + t, src_w)) {
                sums[t][k] += value * widen_value<scalar_t, acc_t>(in[s + t], k);
              }
            }
            sums[kTaps][k] += value;
          }
        }
      });
    }
  }
  // Slot q holds tap q / V of channel c0 + q % V (tap kTaps: the bias).
  sum_position_lanes(lane_sums, [&](int q) { return sums[q / V][q % V]; }, [&](int q, acc_t total) {
    if (!active) return;
    if (q / V < kTaps) {
      partial[(static_cast<int64_t>(slice) * channels + c0 + q % V) * kTaps + q / V] = total;
    } else if (partial_bias != nullptr) {
      partial_bias[static_cast<int64_t>(slice) * channels + c0 + q % V] = total;
    }
  });
}

// ---------------------------------------------------------------------------
// Row and column kernels' launches.

// Whether a pass (g: the forward geometry, or backward-input's correlation) is a conv1d the row
// and column kernels compute: planes of one row, a 1 x K filter with K in [kRowMinTaps,
// kRowMaxTaps], stride 1, dilation 1.
inline bool is_conv1d_pass(const PassGeometry& g) {
  return g.src_h == 1 && g.dst_h == 1 && g.kernel_h == 1 && g.pad_h == 0 && g.stride_w == 1 && g.dilation_w == 1 &&
         g.kernel_w >= kRowMinTaps && g.kernel_w <= kRowMaxTaps;
}

// Whether a pass has a row kernel: each dst row reads one src row (not a backward-input with a
// multiplier, whose rows sum several), and its chunks' outputs are 32-bit values. The caller checks the
// rest: both tensors NCHW-contiguous and 16-byte aligned, 32-bit indexing.
inline bool has_row_kernel(const PassGeometry& g) {
  return is_conv1d_pass(g) && g.dst_w >= kRowMinWidth && g.dst_w <= kRowMaxWidth && g.src_channels <= g.dst_channels;
}

// Whether a pass has a column kernel: multiplier 1 and whole channel vectors, enough of them for
// half a block's vector lanes (fewer leave the weight gradient's lanes idle; the general
// kernels' lanes are single channels). The caller checks the rest: both tensors channels_last-
// contiguous and 16-byte aligned, 32-bit indexing.
inline bool has_column_kernel(const PassGeometry& g, int vector_width) {
  return is_conv1d_pass(g) && g.multiplier == 1 && g.dst_channels % vector_width == 0 &&
         g.dst_channels / vector_width >= kChannelLanes / 2;
}

// The row or column kernel for a filter width: kernel_of(std::integral_constant<int, kTaps>), or
// null outside [kRowMinTaps, kRowMaxTaps].
template <typename KernelOf>
auto conv1d_kernel_for_taps(int taps, KernelOf kernel_of) {
  static_assert(kRowMinTaps == 2 && kRowMaxTaps == 4, "one case per compiled filter width");
  switch (taps) {
    case 2: return kernel_of(std::integral_constant<int, 2>{});
    case 3: return kernel_of(std::integral_constant<int, 3>{});
    case 4: return kernel_of(std::integral_constant<int, 4>{});
    default: return decltype(kernel_of(std::integral_constant<int, 2>{})){nullptr};
  }
}

template <typename scalar_t, typename index_t, bool kBackward>
auto row_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &row_kernel<scalar_t, index_t, kBackward, decltype(k)::value>; });
}

template <typename scalar_t, typename index_t>
auto grad_weight_row_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &grad_weight_row_kernel<scalar_t, index_t, decltype(k)::value>; });
}

template <typename scalar_t, typename index_t>
auto row_backward_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &row_backward_kernel<scalar_t, index_t, decltype(k)::value>; });
}

template <typename scalar_t, typename index_t, bool kBackward>
auto column_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &column_kernel<scalar_t, index_t, kBackward, decltype(k)::value>; });
}

template <typename scalar_t, typename index_t>
auto grad_weight_column_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &grad_weight_column_kernel<scalar_t, index_t, decltype(k)::value>; });
}

template <typename scalar_t, typename index_t, bool kGradInput>
auto column_backward_kernel_for(int taps) {
  return conv1d_kernel_for_taps(
      taps, [](auto k) { return &column_backward_kernel<scalar_t, index_t, decltype(k)::value, kGradInput>; });
}

// A warp walks kRowWarpSpans spans or so (its first place's divisions paid once a span), in a grid
// of several blocks an SM where the pass is that large.
constexpr int kRowWarpSpans = 2;

struct RowLaunch {
  dim3 grid;
  int chunks_per_row;  // of row_chunk_outputs(element size) outputs: the kernel's kRowChunk
};

inline RowLaunch plan_row(const PassGeometry& g, int element_size, const GpuLimits& gpu) {
  const int chunks_per_row = row_chunks(g.dst_w, row_chunk_outputs(element_size));
  const int64_t span_chunks = int64_t(kWarpLanes) * row_lane_chunks(element_size);
  const int64_t spans = (g.batch * g.dst_channels * chunks_per_row + span_chunks - 1) / span_chunks;
  return {dim3(static_cast<unsigned>(walk_blocks(spans * kWarpLanes, kThreads, kRowWarpSpans, gpu))), chunks_per_row};
}

struct RowGradWeightLaunch {
  dim3 grid;  // (channels, slices)
  int chunks_per_row;
  int64_t chunks_per_slice;
};

// Slices of a channel's batch x chunks_per_row chunks: as few as give every thread at most
// lane_chunks chunks (one pass of the block), more where the channels alone would not fill two
// waves of the GPU's SMs, while every thread has a chunk.
inline RowGradWeightLaunch plan_row_slices(const PassGeometry& g, int chunks_per_row, int lane_chunks,
                                           const GpuLimits& gpu) {
  const int64_t chunks = g.batch * chunks_per_row;
  const int64_t one_pass = int64_t(kThreads) * lane_chunks;
  const int64_t fewest = (chunks + one_pass - 1) / one_pass;
  const int64_t wanted = (4 * gpu.sm_count + g.dst_channels - 1) / g.dst_channels;
  const int64_t most = std::clamp<int64_t>(std::max(fewest, std::min(wanted, chunks / kThreads)), 1, 65535);
  const int64_t chunks_per_slice = (chunks + most - 1) / most;
  const int64_t slices = (chunks + chunks_per_slice - 1) / chunks_per_slice;
  return {dim3(static_cast<unsigned>(g.dst_channels), static_cast<unsigned>(slices)), chunks_per_row,
          chunks_per_slice};
}

inline RowGradWeightLaunch plan_row_grad_weight(const PassGeometry& g, int element_size, const GpuLimits& gpu) {
  return plan_row_slices(g, row_chunks(g.dst_w, row_chunk_outputs(element_size)), row_lane_chunks(element_size), gpu);
}

// Whether both gradients of a pass (g: the forward geometry) come from row_backward_kernel: the row
// kernels' conv1d, both rows (input and grad_output) 64 or more wide (and its chunks' outputs 32-bit
// values), multiplier 1, and padding below K, so that a row's first chunk of grad_input also reaches
// grad_output's first value. The caller checks
// the rest: grad_output, the input and grad_input NCHW-contiguous and 16-byte aligned, 32-bit indexing.
inline bool has_row_backward(const PassGeometry& g) {
  return is_conv1d_pass(g) && g.multiplier == 1 && g.pad_w < g.kernel_w && g.src_w >= kRowMinWidth &&
         g.dst_w >= kRowMinWidth && g.src_w + g.pad_w <= kRowMaxWidth;
}

// A row's chunks of grad_input for row_backward_kernel: enough for the row and the pad outputs past it
// whose chunks hold grad_output's last values, wherever the row's first element falls in a chunk.
inline int row_backward_chunks_per_row(const PassGeometry& g, int element_size) {
  return row_chunks(g.src_w + g.pad_w, row_chunk_outputs(element_size));
}

inline RowGradWeightLaunch plan_row_backward(const PassGeometry& g, int element_size, const GpuLimits& gpu) {
  return plan_row_slices(g, row_backward_chunks_per_row(g, element_size), row_backward_lane_chunks(element_size), gpu);
}

// A segment a thread, at most max_blocks blocks (the threads then walk the rest).
inline dim3 plan_column(const PassGeometry& g, int vector_width, int64_t max_blocks) {
  const int64_t items = g.batch * column_segments(g.dst_w) * (g.dst_channels / vector_width);
  const int64_t blocks = std::min((items + kThreads - 1) / kThreads, max_blocks);
  return dim3(static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, std::numeric_limits<int32_t>::max())));
}

struct ColumnGradWeightLaunch {
  dim3 grid, block;  // grid: (vector groups, slices)
  int64_t items_per_slice;
};

// Slices of `items` (n, segment) items for blocks of kChannelLanes of `vectors` channel vectors:
// about `blocks_an_sm` blocks an SM of the GPU, each position lane of a slice walking `lane_items`
// segments or more.
inline ColumnGradWeightLaunch plan_column_slices(int64_t vectors, int64_t items, int64_t blocks_an_sm,
                                                 int64_t lane_items, const GpuLimits& gpu) {
  const int64_t vector_groups = (vectors + kChannelLanes - 1) / kChannelLanes;
  const int64_t wanted = (blocks_an_sm * gpu.sm_count + vector_groups - 1) / vector_groups;
  const int64_t useful = items / (lane_items * kPositionLanes);
  const int64_t most = std::clamp<int64_t>(std::min(wanted, useful), 1, 65535);
  const int64_t items_per_slice = (items + most - 1) / most;
  const int64_t slices = (items + items_per_slice - 1) / items_per_slice;
  return {dim3(static_cast<unsigned>(vector_groups), static_cast<unsigned>(slices)),
          dim3(kChannelLanes, kPositionLanes), items_per_slice};
}

// Slices of the (n, segment) items: enough blocks for a few waves of the GPU, each position lane
// of a slice walking 2 segments or more.
inline ColumnGradWeightLaunch plan_column_grad_weight(const PassGeometry& g, int vector_width, const GpuLimits& gpu) {
  return plan_column_slices(g.dst_channels / vector_width, g.batch * column_segments(g.dst_w), 32, 2, gpu);
}

// Whether column_backward_kernel takes a pass's gradients (g: the forward geometry): the column
// kernels' conv1d with padding below K, so that a row's first segment also reaches grad_output's first
// value. The caller checks the rest: grad_output, the input (and grad_input) channels_last-contiguous
// and 16-byte aligned, 32-bit indexing.
inline bool has_column_backward(const PassGeometry& g, int element_size) {
  return has_column_kernel(g, 16 / element_size) && g.pad_w < g.kernel_w;
}

// About four waves of two blocks an SM, each position lane walking 4 segments or more: a block's
// sums then meet once for 32 segments of loads or more a lane group.
inline ColumnGradWeightLaunch plan_column_backward(const PassGeometry& g, int element_size, const GpuLimits& gpu) {
  return plan_column_slices(g.dst_channels / column_backward_channels(element_size),
                            g.batch * column_backward_segments<int64_t>(g.src_w, g.pad_w), 8, 4, gpu);
}

}  // namespace at::native::dwconv
