#pragma once
// The streamed channels_last kernel for the register-tiled filters (square 3x3, 5x5, 7x7 at
// stride 1; 3x3 and 5x5 at stride 2; dilation 1, multiplier 1): forward and the stride-1
// backward-input, and its launch plan. Device code and plain host arithmetic, as in
// DepthwiseConv2dCommon.cuh, so that tests/emulator can run it on a CPU.
//
// channels_last_register_tiled_kernel stages one tile, waits for it, computes and exits: its
// loads and its arithmetic take turns, and only the other blocks on the SM (two or three, by its
// registers) overlap them. Here a block owns a strip of lanes_w output columns of one image for
// `vectors` channel vectors and walks down a band of its rows, step_rows (kBlockRows a row of
// lanes) at a step. Its shared memory holds a ring of input rows: the step's window and the next
// step's new rows, which are in flight as asynchronous copies (copy_async_or_zero: cp.async, no
// registers) while the step computes. Each input row is copied from global memory once for the
// band, its padding and the channels past the last written as zeros by the copies. A thread's
// work in a step is the register-tiled kernel's (accumulate_channels_last_column): kBlockRows
// rows of one column for one channel vector. Two barriers a step: one after the wait (the step's
// rows, copied by every thread, have landed), one before the next step's copies reuse the slots
// the step read.

#include <ATen/native/cuda/DepthwiseConv2dRegisterTiled.cuh>

#include <optional>

namespace at::native::dwconv {

// The blocks an SM the kernel's __launch_bounds__ ask for (128 registers), and its planner counts on.
constexpr int kStreamMinBlocks = 2;
// Steps down a plane a strip needs for the kernel to take it: with fewer (planes of 7 or 8 rows)
// a band's first step, whose rows nothing overlaps, is half its work or more.
constexpr int kStreamMinRowSteps = 3;
// Blocks a launch wants, in units of what the GPU holds at once: the band's steps are as many as
// keep this many waves, so that the last wave's idle SMs cost little (without stream_band_waves).
constexpr int kStreamWaves = 4;
// What a band costs beside its steps, in steps: its first window is copied with nothing to overlap
// the wait (about a step's latency), and its last step's sums are stored with no copies behind them.
constexpr int64_t kStreamBandStartSteps = 1;

struct ChannelsLastStream {
  int lanes_w;    // output columns of a strip; blockDim.y / lanes_w rows of lanes
  int in_w;       // input columns staged for a strip
  int ring_rows;  // input rows the ring holds: a step's window and the next step's new rows
  int strips_w;   // strips across a plane: blockIdx.x = band * strips_w + strip
  int steps;      // steps of a full band (the plane's last band may have fewer)
};

struct ChannelsLastStreamLaunch {
  dim3 grid, block;  // grid: (bands * strips_w, channel groups, batch); block: (vectors, lanes)
  ChannelsLastStream stream;
  size_t shared_bytes;
};

// The ring slot of `slot` counted on past the ring's last, by less than one turn.
__device__ __forceinline__ int wrap_ring_slot(int slot, int ring_rows) {
  return slot < ring_rows ? slot : slot - ring_rows;
}

// Issues the asynchronous copies of `rows` input rows, image rows first_image_row.. into ring slots
// first_slot.. (wrapping round the ring), columns from image column `image_col0`, and commits them
// as one group. A thread copies its own channel vector (threadIdx.x, at `src_vector` in the image)
// of every blockDim.y-th pixel of those rows, so that consecutive threads copy a pixel's
// consecutive vectors; a ring column holds `pitch` vectors, blockDim.x or more. Rows and columns outside the image, and every vector of a thread whose
// vector is not `live`, are written as zeros. A copy is a few instructions beside the step's
// arithmetic: one compare a coordinate (`within`) and a 32-bit offset.
template <typename scalar_t>
__device__ __forceinline__ void copy_stream_rows(Vector16<scalar_t>* ring, const scalar_t* src_vector,
                                                 const ChannelsLastStream& s, int pitch, int first_slot, int rows,
                                                 int first_image_row, int image_col0, bool live, int src_h, int src_w,
                                                 int channels) {
  GridWalk<int, 2> at(threadIdx.y, blockDim.y, {0, s.in_w});  // (row, column)
  for (int p = threadIdx.y; p < rows * s.in_w; p += blockDim.y, at.advance()) {
    const int row = at.at[0], col = at.at[1];
    const int slot = wrap_ring_slot(first_slot + row, s.ring_rows);
    const int iy = first_image_row + row, ix = image_col0 + col;
    const bool inside = live && within(iy, src_h) && within(ix, src_w);
    // Nothing is read where the copy is outside; the address stays inside the tensor all the same.
    const unsigned offset = inside ? static_cast<unsigned>((iy * src_w + ix) * channels) : 0u;
    copy_async_or_zero(ring + (slot * s.in_w + col) * pitch + threadIdx.x, src_vector + offset, inside);
  }
  commit_async_copies();
}

// A band's walk down its rows, shared by the streamed kernels (this file's and the tensor-core one):
// the ring's first window copied, then at each step the next step's new rows copied into the slots
// after the step's window while the step computes, with the waits and barriers between. The ring
// holds window_rows + new_rows rows, so every slot sum is less than two turns and wraps with one
// subtraction.
template <typename scalar_t>
struct StreamBand {
  Vector16<scalar_t>* ring;
  const scalar_t* src_vector;  // the thread's channel vector of the image's first pixel
  ChannelsLastStream s;
  int pitch;        // vectors a ring column holds
  int window_rows;  // input rows a step reads
  int new_rows;     // input rows a step moves down
  int image_row0, image_col0;  // the band's first input row and the strip's first input column
  bool live;        // the thread's vector is one of the image's (else it copies zeros)
  int src_h, src_w, channels;

  __device__ __forceinline__ void copy_first_window() const {
    copy_stream_rows(ring, src_vector, s, pitch, 0, window_rows, image_row0, image_col0, live, src_h, src_w, channels);
  }

  // Before step `step` (of `steps`) computes from the window whose first row is in slot `step_slot`.
  __device__ __forceinline__ void begin_step(int step, int steps, int step_slot) const {
    if (step + 1 < steps) {
      // The next step's new rows follow this step's window.
      copy_stream_rows(ring, src_vector, s, pitch, wrap_ring_slot(step_slot + window_rows, s.ring_rows), new_rows,
                       image_row0 + window_rows + step * new_rows, image_col0, live, src_h, src_w, channels);
      wait_async_copies<1>();
    } else {
      wait_async_copies<0>();
    }
    __syncthreads();  // the step's rows have landed, whoever copied them
  }

  // After step `step` computed: the slot of the next step's first window row.
  __device__ __forceinline__ int end_step(int step, int steps, int step_slot) const {
    if (step + 1 < steps) __syncthreads();  // no thread still reads the slots the next step's copies fill
    return wrap_ring_slot(step_slot + new_rows, s.ring_rows);
  }
};

// Block: (vectors, lane_rows * lanes_w) threads; threadIdx.x is the channel vector, threadIdx.y
// the pixel lane. 32-bit indexing only.
template <typename scalar_t, bool kBackward, int kKernel, int kStride>
__global__ void __launch_bounds__(kThreads, kStreamMinBlocks) channels_last_stream_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const ChannelsLastStream s) {
  using acc_t = at::acc_type<scalar_t, true>;
  using Vec = Vector16<scalar_t>;
  constexpr int V = kVector16<scalar_t>;
  static_assert(!kBackward || kStride == 1, "backward-input is a stride-1 correlation");
  DWCONV_SHARED_BYTES(shared_bytes);
  const int vectors = blockDim.x;
  const int threads = vectors * blockDim.y;
  Vec* const ring = reinterpret_cast<Vec*>(shared_bytes);                          // [slot][column][vector]
  acc_t* const taps = reinterpret_cast<acc_t*>(ring + s.ring_rows * s.in_w * vectors);  // stage_weight_vectors

  const int tid = threadIdx.y * vectors + threadIdx.x;
  const int channels = static_cast<int>(g.dst_channels);
  const int c0 = static_cast<int>(blockIdx.y) * vectors * V;
  const int live_vectors = smaller(vectors, (channels - c0) / V);
  const int n = static_cast<int>(blockIdx.z);
  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);
  const int step_rows = blockDim.y / s.lanes_w * kBlockRows;
  const int band_y = static_cast<int>(blockIdx.x) / s.strips_w * s.steps * step_rows;  // the band's first output row
  const int x0 = static_cast<int>(blockIdx.x) % s.strips_w * s.lanes_w;
  const int image_row0 = band_y * kStride - g.pad_h;  // the band's first input row
  const int image_col0 = x0 * kStride - g.pad_w;
  const int window_rows = (step_rows - 1) * kStride + kKernel;
  const int new_rows = step_rows * kStride;  // input rows a step moves down
  const int steps = smaller(s.steps, (dst_h - band_y + step_rows - 1) / step_rows);
  const int vec = threadIdx.x;
  const bool live_vector = vec < live_vectors;  // else a part-filled group's idle vector: zeros copied
  // An idle vector's (never read) copies take the image's first vector, inside the tensor.
  const scalar_t* const src_vector = src + n * src_h * src_w * channels + c0 + (live_vector ? vec * V : 0);

  const StreamBand<scalar_t> band{ring,       src_vector, s,          vectors, window_rows, new_rows,
                                  image_row0, image_col0, live_vector, src_h,  src_w,       channels};
  band.copy_first_window();
  // Backward-input correlates with the kernel flipped in both directions.
  stage_weight_vectors(taps, weight, c0, channels, kKernel * kKernel, vectors,
                       staged_tap_pitch<acc_t, scalar_t>(vectors), tid, threads, kBackward);

  const int ty = threadIdx.y / s.lanes_w;
  const int tx = threadIdx.y % s.lanes_w;
  const bool computes = live_vector && x0 + tx < dst_w;  // idle past the plane's edge too
  const int row_step = s.in_w * vectors;                 // between ring slots, in vectors
  const int lane_row_offset = ty * kBlockRows * kStride;  // the lane row's first window row, below new_rows
  const Vec* const column = ring + tx * kStride * vectors + vec;
  int step_slot = 0;  // the ring slot of the step's first window row
  for (int step = 0; step < steps; ++step) {
    band.begin_step(step, steps, step_slot);

    const int y = band_y + step * step_rows + ty * kBlockRows;
    if (computes && y < dst_h) {
      acc_t acc[kBlockRows][V];
      start_channels_last_column<kBackward>(acc, bias, c0 + vec * V);
      const int first_slot = wrap_ring_slot(step_slot + lane_row_offset, s.ring_rows);
      accumulate_channels_last_column<scalar_t, kKernel, kStride>(
          acc,
          [&](int r) { return column + wrap_ring_slot(first_slot + r, s.ring_rows) * row_step; },
          taps, vec, vectors);
      store_channels_last_column(acc, dst + ((n * dst_h + y) * dst_w + x0 + tx) * channels + c0 + vec * V, dst_h - y,
                                 dst_w * channels);
    }
    step_slot = band.end_step(step, steps, step_slot);
  }
}

template <typename scalar_t, bool kBackward>
using ChannelsLastStreamKernel = void (*)(const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*, PassGeometry,
                                          ChannelsLastStream);

// The kernel for a filter size and stride (those of has_register_tiled_filter; backward-input at
// stride 1 only), or null.
template <typename scalar_t, bool kBackward>
ChannelsLastStreamKernel<scalar_t, kBackward> channels_last_stream_kernel_for(int kernel, int stride) {
  return register_tiled_instance<!kBackward>(kernel, stride, [](auto k, auto s) {
    return &channels_last_stream_kernel<scalar_t, kBackward, decltype(k)::value, decltype(s)::value>;
  });
}

// Bands of about `steps` of a plane's `row_steps` steps (shared evenly by the fewest bands of at
// most `steps`), for the streamed kernels: a full band's steps into `stream` and the grid's x (bands
// x strips) into `grid`; false where that x would be too wide.
inline bool set_stream_bands(ChannelsLastStream& stream, dim3& grid, int64_t row_steps, int64_t steps) {
  const int64_t bands = (row_steps + steps - 1) / steps;
  const int64_t grid_x = bands * stream.strips_w;
  if (grid_x > std::numeric_limits<int32_t>::max()) return false;
  stream.steps = static_cast<int>((row_steps + bands - 1) / bands);
  grid.x = static_cast<unsigned>(grid_x);
  return true;
}

// The steps a band of the streamed kernels takes, at least 2, for `strips` x bands blocks over the
// `resident` blocks the GPU holds at once; nothing where bands of 2 steps would not fill the GPU once.
// With `by_waves` (the path stream_band_waves): the cut of the fewest steps in all, waves x (a band's
// steps + kStreamBandStartSteps), among those that fill the GPU at least once, fewer bands on a tie.
// The blocks of a wave start together and take as long as each other, so a last wave only a few
// blocks deep costs a whole band (MobileNetV2 144@56 at three blocks an SM: 4.04 waves of 3 steps
// are 5 x 4 steps; 2 bands of 7 steps, 1.62 waves, are 2 x 8), and every band's start is paid again.
// Without: the most steps that leave kStreamWaves waves.
inline std::optional<int64_t> stream_band_steps(int64_t row_steps, int64_t strips, int64_t resident, bool by_waves) {
  const auto bands = [&](int64_t steps) { return (row_steps + steps - 1) / steps; };
  if (strips * bands(2) < resident) return std::nullopt;
  if (!by_waves) {
    int64_t steps = 2;
    while (steps < row_steps && strips * bands(steps + 1) >= kStreamWaves * resident) ++steps;
    return steps;
  }
  if (row_steps <= 2) return 2;  // one band: the cut above's
  resident = std::max<int64_t>(resident, 1);
  std::optional<int64_t> best;
  int64_t fewest = 0;
  for (int64_t steps = row_steps; steps >= 2; --steps) {
    const int64_t blocks = strips * bands(steps);
    // Only each band count's own cut (the steps that count spreads evenly), and only full GPUs.
    if ((row_steps + bands(steps) - 1) / bands(steps) != steps || blocks < resident) continue;
    const int64_t total = (blocks + resident - 1) / resident * (steps + kStreamBandStartSteps);
    if (!best || total < fewest) {
      best = steps;
      fewest = total;
    }
  }
  return best;
}

// `launch` with bands of about `steps` steps, or nothing where the grid would be too wide.
inline std::optional<ChannelsLastStreamLaunch> with_stream_steps(ChannelsLastStreamLaunch launch, const PassGeometry& g,
                                                                 int64_t steps) {
  const int64_t step_rows = int64_t(launch.block.y) / launch.stream.lanes_w * kBlockRows;
  if (!set_stream_bands(launch.stream, launch.grid, (g.dst_h + step_rows - 1) / step_rows, steps)) return std::nullopt;
  return launch;
}

// A streamed launch, or nothing where the kernel does not serve the pass (the filter, the
// multiplier, channels not a whole number of 16-byte vectors), where a strip has fewer than
// kStreamMinRowSteps steps down the plane (little to overlap; channels_last_register_tiled_kernel
// serves it), where its blocks would not fill the GPU's SMs at least once (batch 1: the register-
// tiled kernel's one-step blocks spread the work wider), or where no strip fits. The caller checks
// 32-bit indexing and 16-byte alignment.
// Strips: for each block of vectors (as many as channel_vectors_per_block allows, then fewer),
// rows of lanes (1, 2, 4) and strips across the plane (the fewest that fit the block's threads,
// then more, narrower ones while the ring does not fit), those that waste at most a third of their
// lanes' slots (kMinRegisterTileUse); of them, blocks of 128 threads or more first, then the best
// use of slots (in steps of 1/16), the most vectors (the longest runs of a pixel's channels a block
// reads), the fewest input vectors copied an output. The band's steps: stream_band_steps's, by the
// waves where `band_waves` (the stream_band_waves path).
template <typename scalar_t>
std::optional<ChannelsLastStreamLaunch> plan_channels_last_stream(const PassGeometry& g, const GpuLimits& gpu,
                                                                  bool band_waves) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int V = kVector16<scalar_t>;
  if (!channels_last_register_kernels_serve<scalar_t>(g)) return std::nullopt;
  const int kernel = g.kernel_h, stride = g.stride_h;
  const int64_t channel_vectors = g.dst_channels / V;
  struct Candidate {
    ChannelsLastStreamLaunch launch;
    int64_t row_steps;  // steps down the plane
    int threads, vectors, use_sixteenths;
    double copied_per_output;
  };
  const auto better = [](const Candidate& a, const Candidate& b) {
    if ((a.threads >= 128) != (b.threads >= 128)) return a.threads >= 128;
    if (a.use_sixteenths != b.use_sixteenths) return a.use_sixteenths > b.use_sixteenths;
    if (a.vectors != b.vectors) return a.vectors > b.vectors;
    return a.copied_per_output < b.copied_per_output;
  };
  std::optional<Candidate> best;
  for (int vectors = channel_vectors_per_block(channel_vectors); vectors >= 1; vectors /= 2) {
    const int lanes = kThreads / vectors;
    const int64_t channel_blocks = (channel_vectors + vectors - 1) / vectors;
    if (channel_blocks > 65535) continue;
    for (const int lane_rows : {1, 2, 4}) {
      if (lane_rows > lanes) continue;
      const int step_rows = lane_rows * kBlockRows;
      const int64_t row_steps = (g.dst_h + step_rows - 1) / step_rows;
      if (row_steps < kStreamMinRowSteps) continue;
      const int window_rows = input_extent(step_rows, stride, kernel, 1);
      const int ring_rows = window_rows + step_rows * stride;
      for (int64_t strips_w = (g.dst_w + lanes / lane_rows - 1) / (lanes / lane_rows); strips_w <= g.dst_w;
           ++strips_w) {
        const int lanes_w = static_cast<int>((g.dst_w + strips_w - 1) / strips_w);
        if ((g.dst_w + lanes_w - 1) / lanes_w != strips_w) continue;  // the shape of fewer strips
        const int in_w = input_extent(lanes_w, stride, kernel, 1);
        const size_t bytes = size_t(ring_rows) * in_w * vectors * sizeof(Vector16<scalar_t>) +
                             staged_weight_bytes<acc_t, scalar_t>(kernel * kernel, vectors);
        if (bytes > kMaxSharedBytes) continue;  // narrower strips next
        const int threads = vectors * lane_rows * lanes_w;
        const double use = channels_last_lane_use(g, row_steps * strips_w, threads, vectors);
        if (use >= kMinRegisterTileUse && strips_w <= std::numeric_limits<int32_t>::max()) {
          const Candidate c{
              ChannelsLastStreamLaunch{dim3(static_cast<unsigned>(strips_w), static_cast<unsigned>(channel_blocks),
                                            static_cast<unsigned>(g.batch)),
                                       dim3(vectors, lane_rows * lanes_w),
                                       ChannelsLastStream{lanes_w, in_w, ring_rows, static_cast<int>(strips_w), 1},
                                       bytes},
              row_steps, threads, vectors, static_cast<int>(use * 16),
              double(in_w) * stride / lanes_w};
          if (!best || better(c, *best)) best = c;
        }
        break;  // the widest strips that fit: narrower ones only copy more halo
      }
    }
  }
  if (!best) return std::nullopt;
  const int64_t resident = gpu.sm_count * resident_blocks_per_sm(gpu, best->threads, best->launch.shared_bytes,
                                                                  registers_within_bounds(kStreamMinBlocks));
  const int64_t strips = int64_t(best->launch.grid.y) * best->launch.grid.z * best->launch.stream.strips_w;
  const auto steps = stream_band_steps(best->row_steps, strips, resident, band_waves);
  if (!steps) return std::nullopt;
  return with_stream_steps(best->launch, g, *steps);
}

}  // namespace at::native::dwconv
