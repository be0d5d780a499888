#pragma once
// The weight gradient of channels_last depthwise convolutions with square 3x3, 5x5 and 7x7
// filters at stride 1 or 2 (dilation 1, multiplier 1), in float and the half types, and the
// arithmetic that plans its launches: device code and plain host arithmetic, as in
// DepthwiseConv2dCommon.cuh, whose helpers it uses, so that tests/emulator can run it on a CPU.
//
// grad_weight[c, kh, kw] = sum over (n, y, x) of grad_output[n, y, x, c] * input[n, y*S - p + kh,
// x*S - p + kw, c]. A block owns 32 channels (a warp's lanes, so every shared-memory read of a
// warp is 32 consecutive words) and walks an item, a band of output rows of one image and a
// chunk of its columns, a row at a time. Shared memory holds, in acc_t, a ring of the K + S
// input rows around the current output row and two grad_output rows: each input value is staged
// from global memory once for its item (the ring moves down S rows a step), as 16-byte vectors,
// and converted once. Thread (channel, kh, lane) keeps the K sums of its channel's kernel row kh;
// at each step it takes the row's columns kRingChunk at a time (the lanes of a block alternate
// chunks), reading the chunk's grad_output values and the input window they meet once from shared
// memory: 8 + 7 + 7 = 22 reads for 56 multiply-adds at 7x7. While it computes, the loads of
// the next step's S input rows and grad_output row are in flight in registers; they are stored
// after the step, and one barrier a step orders the ring. The sums of a slice of items meet in
// `partial` (lanes added in order), which grad_weight_finish_kernel adds in a fixed order:
// bitwise reproducible, like the other weight-gradient kernels.
//
// With the bias gradient, the block has one more row of threads (threadIdx.y == kernel) that
// stages nothing and multiplies nothing: at each step its threads sum the staged grad_output row
// (the same chunks, lane by lane) into what is their first tap sum, and their sums end in
// `partial_bias`. So the bias costs no read of grad_output of its own, and the loop keeps its
// registers: it runs at its bound, and a bias sum held by the other threads made it spill.
//
// It replaces, where it takes a pass, grad_weight_register_channels_last_kernel, which loaded
// each input value from L1/L2 once for each kernel row and held all K^2 sums a thread (151
// registers at 7x7 in bf16: one block an SM).

#include <ATen/native/cuda/DepthwiseConv2dCommon.cuh>

#include <algorithm>
#include <optional>

namespace at::native::dwconv {

constexpr int kRingChannels = 32;                 // a block's channels: blockDim.x
constexpr int kRingChunk = 8;                     // output columns a thread takes at a time
constexpr int kRingPrefetch = 4;                  // 16-byte vectors a thread holds for the next step, at most
constexpr int kRingMinBlocks = 3;                 // blocks an SM its __launch_bounds__ ask for
constexpr int kRingRegisters = registers_within_bounds(kRingMinBlocks);  // 80
constexpr size_t kRingSharedBytes = 40 * 1024;    // so that five or six blocks share an SM

// blockDim.z: lanes that alternate a row's chunks, so that a block has 160 to 224 threads.
constexpr int ring_lanes(int kernel) {
  return kernel == 3 ? 2 : 1;
}

// blockDim.y: a row of threads a kernel row, and one summing the bias where it is asked for.
constexpr int ring_rows(int kernel, bool with_bias) {
  return kernel + (with_bias ? 1 : 0);
}

constexpr bool is_ring_grad_weight_filter(int kernel, int stride) {
  return (kernel == 3 || kernel == 5 || kernel == 7) && (stride == 1 || stride == 2);
}

// The lanes' sums of a block's channels (threadIdx.x, blockDim.x of them) meet in shared memory
// and are added in lane order, so that the result is bitwise reproducible. A thread's first `count`
// values are its lane's sums of slots first .. first + count - 1 of the `slots` each lane has; on
// return, lane 0's hold the block's totals. Every thread of the block calls it, after a barrier past
// the last read of `scratch` ([lane][slot][blockDim.x]).
template <typename acc_t, int kValues>
__device__ __forceinline__ void add_lanes_in_order(acc_t (&values)[kValues], int count, acc_t* scratch, int first,
                                                   int slots, int lane, int lanes) {
  const int channel = threadIdx.x;
  const int channels = blockDim.x;
  if (lanes > 1) {
#pragma unroll
    for (int i = 0; i < kValues; ++i) {
      if (i < count) scratch[(lane * slots + first + i) * channels + channel] = values[i];
    }
    __syncthreads();
  }
  if (lane != 0) return;
#pragma unroll
  for (int i = 0; i < kValues; ++i) {
    if (i >= count) break;
    for (int other = 1; other < lanes; ++other) {
      values[i] += scratch[(other * slots + first + i) * channels + channel];
    }
  }
}

// The block's tap sums into its run of `partial`: the slice's (blockIdx.y's) channels c0 .. c0 + 31
// hold kTaps values each ([channel][tap]), one contiguous run a block. Stored by the threads that
// hold them, a warp's 32 channels were kTaps x 4 bytes apart, a sector a lane: 8x the sectors of
// the run. Instead the holders put their values in `scratch` at the run's order (first the
// `count` sums of taps first .., as add_lanes_in_order leaves them in lane 0), the block waits,
// and all its threads store the run in order. kTaps is odd, so a warp's puts fall on 32 banks.
// Every thread of the block calls it, `holds` where its values are the block's totals. The
// first 32 x kTaps values of `scratch` must be ones no thread reads any more: add_lanes_in_order's
// scratch, lane-outermost with kTaps + 1 slots a lane, gives lane 0's own slots there, which only
// lane 0 wrote and no thread reads (the other lanes' start past them).
template <int kTaps, typename acc_t, int kValues>
__device__ __forceinline__ void store_partial_run(const acc_t (&values)[kValues], int count, int first, bool holds,
                                                  acc_t* scratch, acc_t* partial, int channels, int c0) {
  static_assert(kTaps % 2 == 1, "a warp's puts are kTaps words apart");
  const int channel = threadIdx.x;
  if (holds) {
#pragma unroll
    for (int i = 0; i < kValues; ++i) {
      if (i < count) scratch[channel * kTaps + first + i] = values[i];
    }
  }
  __syncthreads();
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const int run_values = smaller(kRingChannels, channels - c0) * kTaps;
  acc_t* const run = partial + (static_cast<int64_t>(blockIdx.y) * channels + c0) * kTaps;
  for (int i = tid; i < run_values; i += threads) run[i] = scratch[i];
}

struct RingGradWeightWork {
  int tile_w;    // output columns of an item (the last chunk of a row may have fewer)
  int staged_w;  // grad_output columns staged: tile_w rounded up to kRingChunk, zero past the item
  int in_w;      // input columns staged: (staged_w - 1) * stride + kernel
  int chunks_w;  // items across an output row
  int band_rows;  // output rows of an item (the last band of a plane may have fewer)
  int bands;     // items down a plane
  int64_t items;  // batch * bands * chunks_w, chunks fastest
  int64_t items_per_slice;
};

// The output rectangle of one item, and its image.
struct RingItemPlace {
  int n;
  int x0;    // first output column
  int cols;  // output columns: tile_w, fewer in the last chunk of a row
  int y0;    // first output row
  int rows;  // output rows: band_rows, fewer in the last band of a plane
};

__host__ __device__ inline RingItemPlace ring_item_place(const RingGradWeightWork& w, int64_t item, int dst_h,
                                                         int dst_w) {
  const int chunk = static_cast<int>(item % w.chunks_w);
  const int band = static_cast<int>(item / w.chunks_w % w.bands);
  const int n = static_cast<int>(item / w.chunks_w / w.bands);
  const int x0 = chunk * w.tile_w;
  const int y0 = band * w.band_rows;
  return RingItemPlace{n, x0, smaller(w.tile_w, dst_w - x0), y0, smaller(w.band_rows, dst_h - y0)};
}

// Shared memory of a plan: the input ring, then two grad_output rows, 32 channels a pixel.
template <typename acc_t>
size_t ring_shared_bytes(int kernel, int stride, int in_w, int staged_w) {
  return (size_t(kernel + stride) * in_w + 2 * size_t(staged_w)) * kRingChannels * sizeof(acc_t);
}

// Blocks of 32 x ring_rows(kKernel, partial_bias != null) x ring_lanes(kKernel): 160 to 256 threads.
template <typename scalar_t, int kKernel, int kStride>
__global__ void __launch_bounds__(kThreads, kRingMinBlocks) grad_weight_ring_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ input,
    at::acc_type<scalar_t, true>* __restrict__ partial,
    at::acc_type<scalar_t, true>* __restrict__ partial_bias,
    const PassGeometry g,
    const RingGradWeightWork w) {
  using acc_t = at::acc_type<scalar_t, true>;
  using Vec = Vector16<scalar_t>;
  constexpr int V = kVector16<scalar_t>;
  constexpr int kVectors = kRingChannels / V;  // 16-byte vectors of a pixel's block channels
  constexpr int kRing = kKernel + kStride;      // input rows held
  constexpr int kLanes = ring_lanes(kKernel);
  constexpr int kBlockThreads = kRingChannels * kKernel * kLanes;
  constexpr int kWindow = (kRingChunk - 1) * kStride + kKernel;
  constexpr int kTaps = kKernel * kKernel;
  static_assert(kRingChannels % V == 0, "a block's channels are whole vectors");
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* const in_ring = reinterpret_cast<acc_t*>(shared_bytes);    // [kRing][in_w][32]
  acc_t* const go_rows = in_ring + kRing * w.in_w * kRingChannels;  // [2][staged_w][32]
  const int in_row_values = w.in_w * kRingChannels;
  const int go_row_values = w.staged_w * kRingChannels;

  const int channel = threadIdx.x;
  const int kh = threadIdx.y;
  const int lane = threadIdx.z;
  const bool bias_row = kh == kKernel;  // sums grad_output only
  const int tid = (lane * kKernel + kh) * kRingChannels + channel;  // a kernel row's: staging work
  const int channels = static_cast<int>(g.dst_channels);
  const int c0 = static_cast<int>(blockIdx.x) * kRingChannels;
  const int live_vectors = smaller(kVectors, (channels - c0) / V);  // channels are whole vectors
  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);

  // The vectors of one step's new rows: kStride input rows of in_w pixels, then a grad_output row
  // of staged_w pixels, kVectors a pixel. A thread's share is the same at every step: its items'
  // places are worked out once, each packed in a word (row + 1, pixel, vector; row kStride is
  // grad_output's, row -1 no item) to spare registers.
  const int in_vectors = kStride * w.in_w * kVectors;
  const int step_vectors = in_vectors + w.staged_w * kVectors;
  int places[kRingPrefetch];
#pragma unroll
  for (int b = 0; b < kRingPrefetch; ++b) {
    const int i = tid + b * kBlockThreads;
    const bool is_input = i < in_vectors;
    const int j = is_input ? i : i - in_vectors;
    const int row = bias_row || i >= step_vectors ? -1 : is_input ? j / (w.in_w * kVectors) : kStride;
    const int in_row = is_input ? j % (w.in_w * kVectors) : j;
    places[b] = (row + 1) << 24 | (in_row / kVectors) << 8 | in_row % kVectors;
  }
  auto place_row = [&](int b) { return (places[b] >> 24) - 1; };
  auto place_px = [&](int b) { return (places[b] >> 8) & 0xffff; };
  auto place_vec = [&](int b) { return places[b] & 0xff; };

  // One 16-byte vector of src values (as loaded: 32-bit words), stored as V values of acc_t.
  auto store_staged = [](acc_t* to, const Vector16<uint32_t>& words) {
    Vec v;
    memcpy(&v, &words, sizeof(v));
    store_widened(to, v);
  };

  acc_t sums[kKernel];  // the bias row's sum in sums[0]
#pragma unroll
  for (int kw = 0; kw < kKernel; ++kw) sums[kw] = acc_t(0);

  const int64_t item_begin = static_cast<int64_t>(blockIdx.y) * w.items_per_slice;
  const int64_t item_end = smaller(w.items, item_begin + w.items_per_slice);
  for (int64_t item = item_begin; item < item_end; ++item) {
    const RingItemPlace place = ring_item_place(w, item, dst_h, dst_w);
    const int n = place.n, x0 = place.x0, cols = place.cols, y0 = place.y0, rows = place.rows;
    const int sy0 = y0 * kStride - g.pad_h;  // the input row of ring row 0
    const int sx0 = x0 * kStride - g.pad_w;
    const scalar_t* in_image = input + static_cast<int64_t>(n) * src_h * src_w * channels + c0;
    const scalar_t* go_image = grad_output + static_cast<int64_t>(n) * dst_h * dst_w * channels + c0;

    // Where a staged vector comes from, and whether it is read at all (else it is zeros): input
    // ring row r (counted from the item's first) at (sy0 + r, sx0 + px), zero outside the plane;
    // grad_output row y0 + t at column x0 + px, zero past the item's columns.
    struct Source {
      const scalar_t* address;
      bool inside;
    };
    auto input_at = [&](int r, int px, int vec) {
      const int sy = sy0 + r, sx = sx0 + px;
      return Source{in_image + (sy * src_w + sx) * channels + vec * V,
                    vec < live_vectors && sy >= 0 && sy < src_h && sx >= 0 && sx < src_w};
    };
    auto grad_output_at = [&](int t, int px, int vec) {
      return Source{go_image + ((y0 + t) * dst_w + x0 + px) * channels + vec * V, vec < live_vectors && px < cols};
    };

    __syncthreads();  // no thread still reads the previous item's rows
    if (!bias_row) {  // the first step's kKernel input rows and grad_output row
      GridWalk<int, 3> at(tid, kBlockThreads, {0, w.in_w, kVectors});  // (ring row, pixel, vector)
      stage_in_batches<kStageVectors>(
          kKernel * w.in_w * kVectors, tid, kBlockThreads, at,
          [&](const GridWalk<int, 3>& pos, bool in_range) {
            const Source from = input_at(pos.at[0], pos.at[1], pos.at[2]);
            return load_words_or_zero(in_range && from.inside, from.address);
          },
          [&](int i, const Vector16<uint32_t>& loaded) { store_staged(in_ring + i * V, loaded); });
      GridWalk<int, 2> go_at(tid, kBlockThreads, {0, kVectors});  // (pixel, vector)
      stage_in_batches<kStageVectors>(
          w.staged_w * kVectors, tid, kBlockThreads, go_at,
          [&](const GridWalk<int, 2>& pos, bool in_range) {
            const Source from = grad_output_at(0, pos.at[0], pos.at[1]);
            return load_words_or_zero(in_range && from.inside, from.address);
          },
          [&](int i, const Vector16<uint32_t>& loaded) { store_staged(go_rows + i * V, loaded); });
    }
    __syncthreads();

    for (int t = 0; t < rows; ++t) {
      // The next step's new rows, in flight while this step computes: one load site a vector (its
      // source chosen, not its load), so that the loads are in flight together.
      const bool next = t + 1 < rows;
      Vector16<uint32_t> loaded[kRingPrefetch];  // converted when stored (load_words_or_zero)
#pragma unroll
      for (int b = 0; b < kRingPrefetch; ++b) {
        const int row = place_row(b), px = place_px(b), vec = place_vec(b);
        const Source from = row == kStride ? grad_output_at(t + 1, px, vec)
                                           : input_at(t * kStride + kKernel + row, px, vec);
        loaded[b] = load_words_or_zero(next && row >= 0 && from.inside, from.address);
      }

      const acc_t* in_row = in_ring + ((t * kStride + kh) % kRing) * in_row_values + channel;
      const acc_t* go_row = go_rows + (t & 1) * go_row_values + channel;
      if (!bias_row) {
        for (int x = lane * kRingChunk; x < cols; x += kLanes * kRingChunk) {
          whole_or_edge(x + kRingChunk > cols, [&](auto partial_chunk) {
            constexpr bool kPartial = decltype(partial_chunk)::value;
            acc_t window[kWindow];
#pragma unroll
            for (int q = 0; q < kWindow; ++q) window[q] = in_row[(x * kStride + q) * kRingChannels];
#pragma unroll
            for (int j = 0; j < kRingChunk; ++j) {
              if (kPartial && x + j >= cols) break;
              const acc_t go = go_row[(x + j) * kRingChannels];
#pragma unroll
              for (int kw = 0; kw < kKernel; ++kw) sums[kw] += go * window[j * kStride + kw];
            }
          });
        }
      } else {
        for (int x = lane * kRingChunk; x < cols; x += kLanes * kRingChunk) {
          acc_t chunk_sum = acc_t(0);  // zeros past the item's columns
#pragma unroll
          for (int j = 0; j < kRingChunk; ++j) chunk_sum += go_row[(x + j) * kRingChannels];
          sums[0] += chunk_sum;
        }
      }

      if (next) {
#pragma unroll
        for (int b = 0; b < kRingPrefetch; ++b) {
          const int row = place_row(b);
          if (row < 0) continue;
          acc_t* const to = row == kStride ? go_rows + ((t + 1) & 1) * go_row_values
                                           : in_ring + ((t * kStride + kKernel + row) % kRing) * in_row_values;
          store_staged(to + (place_px(b) * kVectors + place_vec(b)) * V, loaded[b]);
        }
      }
      __syncthreads();  // the next step's rows are staged; this step's are no longer read
    }
  }

  // The lanes' sums meet in the ring (no longer read: the last step ended in a barrier), a lane's
  // the kKernel^2 taps and the bias. The ring holds (kKernel + kStride) x in_w >= (kKernel + 1) x
  // (kKernel + 7) pixels, more than the kLanes x (kKernel^2 + 1) of the sums.
  add_lanes_in_order(sums, bias_row ? 1 : kKernel, in_ring, bias_row ? kTaps : kh * kKernel, kTaps + 1, lane, kLanes);
  store_partial_run<kTaps>(sums, kKernel, kh * kKernel, lane == 0 && !bias_row, in_ring, partial, channels, c0);
  if (bias_row && lane == 0 && c0 + channel < channels) {
    partial_bias[static_cast<int64_t>(blockIdx.y) * channels + c0 + channel] = sums[0];
  }
}

template <typename scalar_t>
using RingGradWeightKernel = void (*)(const scalar_t*, const scalar_t*, at::acc_type<scalar_t, true>*,
                                      at::acc_type<scalar_t, true>*, PassGeometry, RingGradWeightWork);

// The kernel for a filter size and stride (is_ring_grad_weight_filter), or null; compiled for
// float and the half types only (a double ring would hold a quarter of the columns).
template <typename scalar_t>
RingGradWeightKernel<scalar_t> grad_weight_ring_kernel_for(int kernel, int stride) {
  if constexpr (sizeof(at::acc_type<scalar_t, true>) != 4) {
    return nullptr;
  } else {
    switch (kernel * 10 + stride) {
      case 31: return grad_weight_ring_kernel<scalar_t, 3, 1>;
      case 32: return grad_weight_ring_kernel<scalar_t, 3, 2>;
      case 51: return grad_weight_ring_kernel<scalar_t, 5, 1>;
      case 52: return grad_weight_ring_kernel<scalar_t, 5, 2>;
      case 71: return grad_weight_ring_kernel<scalar_t, 7, 1>;
      case 72: return grad_weight_ring_kernel<scalar_t, 7, 2>;
      default: return nullptr;
    }
  }
}

struct RingGradWeightLaunch {
  dim3 grid, block;  // grid: (channel blocks, slices); block: (32 channels, ring_rows, lanes)
  RingGradWeightWork work;
  size_t shared_bytes;
};

// Whether the ring kernel can take this pass (g the forward geometry; the caller checks that both
// tensors are channels_last-contiguous and 16-byte aligned): a filter it is compiled for, at
// dilation 1 and multiplier 1, float or a half type, channels whole 16-byte vectors.
inline bool has_ring_grad_weight(const PassGeometry& g, size_t element_size) {
  return g.kernel_h == g.kernel_w && g.stride_h == g.stride_w && is_ring_grad_weight_filter(g.kernel_h, g.stride_h) &&
         g.dilation_h == 1 && g.dilation_w == 1 && g.multiplier == 1 && element_size <= 4 &&
         g.dst_channels % (16 / static_cast<int64_t>(element_size)) == 0;
}

// The cut of the planes into bands and of the items (chunks_w across a row) into slices with
// the least time, in steps an SM runs: waves x items a slice x (rows a band + the `warm_up` steps
// a band takes beyond its rows); fewer blocks where it is a tie (fewer partial sums). Bands are
// at least 2 x K rows; nothing where a channel block would have more than 64 x 65535 items.
struct RingItemCut {
  int64_t bands, band_rows, items, items_per_slice, slices, cost;
};

inline std::optional<RingItemCut> cut_ring_items(const PassGeometry& g, int64_t chunks_w, int64_t channel_blocks,
                                                 int64_t resident, int64_t warm_up) {
  std::optional<RingItemCut> best;
  for (int64_t bands = 1; bands <= 8 && (bands == 1 || g.dst_h / bands >= 2 * g.kernel_h); bands *= 2) {
    const int64_t band_rows = (g.dst_h + bands - 1) / bands;
    const int64_t real_bands = (g.dst_h + band_rows - 1) / band_rows;
    const int64_t items = g.batch * real_bands * chunks_w;
    const auto cut = fewest_steps_cut(items, channel_blocks, resident, 64, band_rows + warm_up, 0);
    if (!cut) continue;
    if (!best || cut->steps < best->cost || (cut->steps == best->cost && cut->slices < best->slices)) {
      best = RingItemCut{real_bands, band_rows, items, cut->items_per_slice, cut->slices, cut->steps};
    }
  }
  return best;
}

// The widest chunk of columns whose ring fits kRingSharedBytes and whose step the kernel rows'
// threads load in kRingPrefetch vectors a thread, the row cut into equal chunks; then the bands
// and slices that fill the SMs in the fewest steps (resident_blocks_per_sm blocks an SM, at
// kRingRegisters, the bias row counted where `with_bias`).
template <typename scalar_t>
std::optional<RingGradWeightLaunch> plan_ring_grad_weight(const PassGeometry& g, const GpuLimits& gpu, bool with_bias) {
  using acc_t = at::acc_type<scalar_t, true>;
  const int kernel = g.kernel_h, stride = g.stride_h;
  const int vectors = kRingChannels / kVector16<scalar_t>;
  const int threads = kRingChannels * kernel * ring_lanes(kernel);  // those that stage and multiply
  const int block_threads = kRingChannels * ring_rows(kernel, with_bias) * ring_lanes(kernel);
  const auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  const auto in_width = [&](int staged_w) { return (staged_w - 1) * stride + kernel; };
  const auto fits = [&](int staged_w) {
    const int in_w = in_width(staged_w);
    return ring_shared_bytes<acc_t>(kernel, stride, in_w, staged_w) <= kRingSharedBytes &&
           (int64_t(stride) * in_w + staged_w) * vectors <= int64_t(kRingPrefetch) * threads;
  };
  const int64_t most_pixels = kRingSharedBytes / (kRingChannels * sizeof(acc_t));  // a bound on staged_w
  int widest = static_cast<int>(std::min<int64_t>(round_up(g.dst_w, kRingChunk), most_pixels / kRingChunk * kRingChunk));
  while (widest >= kRingChunk && !fits(widest)) widest -= kRingChunk;
  if (widest < kRingChunk) return std::nullopt;
  const int64_t chunks_w = (g.dst_w + widest - 1) / widest;
  const int tile_w = static_cast<int>((g.dst_w + chunks_w - 1) / chunks_w);
  const int staged_w = static_cast<int>(round_up(tile_w, kRingChunk));
  const int in_w = in_width(staged_w);

  const int64_t channel_blocks = (g.dst_channels + kRingChannels - 1) / kRingChannels;
  const size_t shared_bytes = ring_shared_bytes<acc_t>(kernel, stride, in_w, staged_w);
  const int64_t resident =
      resident_blocks_per_sm(gpu, block_threads, shared_bytes, kRingRegisters) * std::max<int64_t>(gpu.sm_count, 1);
  const auto cut = cut_ring_items(g, chunks_w, channel_blocks, resident, (kernel - 1) / stride);
  if (!cut) return std::nullopt;
  return RingGradWeightLaunch{
      dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(cut->slices)),
      dim3(kRingChannels, ring_rows(kernel, with_bias), ring_lanes(kernel)),
      RingGradWeightWork{tile_w, staged_w, in_w, static_cast<int>(chunks_w), static_cast<int>(cut->band_rows),
                         static_cast<int>(cut->bands), cut->items, cut->items_per_slice},
      shared_bytes};
}

}  // namespace at::native::dwconv
