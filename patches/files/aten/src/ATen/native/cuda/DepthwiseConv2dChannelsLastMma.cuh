#pragma once
// The tensor-core channels_last kernel: bfloat16 and half, square 3x3 at stride 1 (dilation 1,
// multiplier 1), forward and backward-input, on sm_80 and later. Its blocks stream bands of rows as
// channels_last_stream_kernel's do (a ring of input rows in shared memory, the next step's rows in
// flight as cp.async copies), but a step's multiply-adds are warp matrix products
// (DepthwiseConv2dCommon.cuh's multiply_add_16x8x8) instead of a thread's FMAs: the streamed kernel
// issues about 26 instructions an output value at 3x3 (v26), its FMAs and the widening of each
// 16-bit value among them, where an H100 at the byte floor has about 34 an output value to spend.
//
// A warp owns one 16-byte channel vector (8 channels) of the block's and takes tasks of 16 output
// columns x kMmaTaskRows output rows of a step in turn. A tile of the task (one output row's 16
// pixels x 8 channels, D, in float) gets, for each tap (kh, kw), D += A B: A the 16 input vectors
// under the tap (16 pixels x 8 channels), B the tap's 8 weights on its diagonal (zero elsewhere). A's
// rows are input vectors in the ring, a row address a lane (load_matrices), so that the window's
// shifts cost no data movement; each input row's A for the three shifts is loaded once and serves
// every output row of the task that reads it (6 rows of loads for 4 output rows at 3x3). B is fixed
// for the warp's channels and held in registers from the start. Of each product's 1,024
// multiply-adds 128 are wanted: the tensor cores do the rest in less time than the CUDA cores
// would take for the 128, and a warp issues about a tenth of the instructions.
//
// The zeros of B also multiply the other channels' inputs, and 0 x inf is NaN: an infinite or NaN
// input would spread to the other channels of its vector. A value the products give as NaN is
// therefore summed again from the ring by the lane that holds it, as a plain sum of its own
// channel's products, which gives what the CUDA-core kernels give (a true NaN stays NaN).
// Device code and plain host arithmetic, as in DepthwiseConv2dCommon.cuh, so that tests/emulator
// can run it on a CPU.

#include <ATen/native/cuda/DepthwiseConv2dChannelsLastStream.cuh>

#include <cstdint>
#include <optional>

namespace at::native::dwconv {

constexpr int kMmaTilePixels = 16;        // a product's rows: output pixels of one output row
constexpr int kMmaChannels = 8;           // a product's columns: a 16-byte vector of 16-bit values
constexpr int kMmaTaskRows = 4;           // output rows of a warp's task, a column of tiles
constexpr int kMmaWarps = kThreads / 32;  // a block's warps, each on one channel vector
constexpr int kMmaMinBlocks = 2;          // __launch_bounds__: 128 registers

struct ChannelsLastMma {
  ChannelsLastStream ring;  // the strip (lanes_w: its output columns), the ring's rows and columns, the band's steps
  int step_rows;            // output rows a step: a multiple of kMmaTaskRows
  int pitch;                // 16-byte vectors a ring column holds: blockDim.x made odd, so that the
                            // eight rows an ldmatrix matrix reads (eight columns) fall in distinct banks
};

struct ChannelsLastMmaLaunch {
  dim3 grid, block;  // grid: (bands * strips_w, channel groups, batch); block: (vectors, kThreads / vectors)
  ChannelsLastMma mma;
  size_t shared_bytes;
};

// The 16 bits of a 16-bit value.
template <typename scalar_t>
__device__ __forceinline__ std::uint32_t bits_of(scalar_t value) {
  return value.x;
}

// Two floats as 16-bit values in one 32-bit word, the first in the low half.
template <typename scalar_t>
__device__ __forceinline__ std::uint32_t packed_pair(float low, float high) {
  return bits_of(static_cast<scalar_t>(low)) | bits_of(static_cast<scalar_t>(high)) << 16;
}

// Block: (vectors, kThreads / vectors) threads, vectors dividing kMmaWarps; threadIdx.x is the
// channel vector a thread copies. 32-bit indexing only.
template <typename scalar_t, bool kBackward, int kKernel>
__global__ void __launch_bounds__(kThreads, kMmaMinBlocks) channels_last_mma_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const ChannelsLastMma m) {
  using Vec = Vector16<scalar_t>;
  static_assert(kVector16<scalar_t> == kMmaChannels, "a product's columns are one 16-byte vector of 16-bit values");
  constexpr int kTaps = kKernel * kKernel;
  constexpr int kWindowRows = kMmaTaskRows + kKernel - 1;  // input rows a task reads
  DWCONV_SHARED_BYTES(shared_bytes);
  const ChannelsLastStream& s = m.ring;
  const int vectors = blockDim.x;
  Vec* const ring = reinterpret_cast<Vec*>(shared_bytes);  // [slot][column][pitch]

  const int tid = threadIdx.y * vectors + threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  const int channels = static_cast<int>(g.dst_channels);
  const int c0 = static_cast<int>(blockIdx.y) * vectors * kMmaChannels;
  const int live_vectors = smaller(vectors, (channels - c0) / kMmaChannels);
  const int n = static_cast<int>(blockIdx.z);
  const int src_h = static_cast<int>(g.src_h), src_w = static_cast<int>(g.src_w);
  const int dst_h = static_cast<int>(g.dst_h), dst_w = static_cast<int>(g.dst_w);
  const int band_y = static_cast<int>(blockIdx.x) / s.strips_w * s.steps * m.step_rows;  // the band's first output row
  const int x0 = static_cast<int>(blockIdx.x) % s.strips_w * s.lanes_w;
  const int window_rows = m.step_rows - 1 + kKernel;
  const int steps = smaller(s.steps, (dst_h - band_y + m.step_rows - 1) / m.step_rows);
  const int image_row0 = band_y - g.pad_h;
  const int image_col0 = x0 - g.pad_w;
  const bool live_copies = static_cast<int>(threadIdx.x) < live_vectors;  // else zeros are copied
  const scalar_t* const src_vector =
      src + n * src_h * src_w * channels + c0 + (live_copies ? static_cast<int>(threadIdx.x) * kMmaChannels : 0);

  copy_stream_rows(ring, src_vector, s, m.pitch, 0, window_rows, image_row0, image_col0, live_copies, src_h, src_w,
                   channels);

  // The warp's vector, and B for each tap: B's column `group` is the vector's channel `group`, and
  // a lane holds its rows 2 quad and 2 quad + 1: the tap's weight where the row is the column (in
  // the low half for group == 2 quad, the high for 2 quad + 1), else zero.
  const int vec = warp % vectors;
  const bool live = vec < live_vectors;  // the whole warp: an idle vector of a part-filled group
  const int group = lane / 4, quad = lane % 4;
  const scalar_t* const filter = weight + (live ? c0 + vec * kMmaChannels + group : 0) * kTaps;
  std::uint32_t b[kTaps];
#pragma unroll
  for (int tap = 0; tap < kTaps; ++tap) {
    b[tap] = (live && group / 2 == quad) ? bits_of(filter[kBackward ? kTaps - 1 - tap : tap]) << (16 * (group % 2))
                                         : 0u;
  }
  // The two channels of D's columns a lane holds, and their bias (the forward only).
  const int out_channel = c0 + vec * kMmaChannels + 2 * quad;
  float bias_pair[2] = {0.f, 0.f};
  if (!kBackward && bias != nullptr && live) {
    bias_pair[0] = static_cast<float>(bias[out_channel]);
    bias_pair[1] = static_cast<float>(bias[out_channel + 1]);
  }

  // A lane addresses pixel lane % 16 of a tile's row of A: lanes 0-7 and 8-15 the rows of matrices 0
  // and 1 (A's rows 0-7, 8-15), and in a load of two shifts lanes 16-31 the same at the next shift.
  const int tile_pixel = lane % 16;
  const int next_shift = lane / 16;
  const int task_columns = (s.lanes_w + kMmaTilePixels - 1) / kMmaTilePixels * kMmaTilePixels;  // a task row's
  const int tasks = task_columns / kMmaTilePixels * (m.step_rows / kMmaTaskRows);
  const int first_task = warp / vectors, task_stride = kMmaWarps / vectors;
  const int first_x_tile = first_task * kMmaTilePixels % task_columns;
  const int first_row0 = first_task * kMmaTilePixels / task_columns * kMmaTaskRows;
  const int row_step = s.in_w * m.pitch;  // vectors between ring slots
  const Vec* const ring_end = ring + s.ring_rows * row_step;
  const int out_row_step = dst_w * channels;
  const int out_half_step = 8 * channels;  // from a lane's pixel `group` of a tile to `group` + 8

  int step_slot = 0;  // the ring slot of the step's first window row
  for (int step = 0; step < steps; ++step) {
    const bool next = step + 1 < steps;
    if (next) {
      copy_stream_rows(ring, src_vector, s, m.pitch, wrap_ring_slot(step_slot + window_rows, s.ring_rows),
                       m.step_rows, image_row0 + window_rows + step * m.step_rows, image_col0, live_copies, src_h,
                       src_w, channels);
      wait_async_copies<1>();
    } else {
      wait_async_copies<0>();
    }
    __syncthreads();  // the step's rows have landed, whoever copied them

    // Tasks in the step's order: column tiles of the first kMmaTaskRows rows, then of the next.
    int x_tile = first_x_tile, row0 = first_row0;
    for (int task = first_task; live && task < tasks; task += task_stride) {
      // The ring's vector of the task's window row i at the strip's column x.
      const auto window = [&](int i, int x) {
        return ring + wrap_ring_slot(step_slot + row0 + i, s.ring_rows) * row_step + x * m.pitch + vec;
      };
      // Spare columns past the strip read a real pixel; their sums are not stored.
      const Vec* row = window(0, smaller(x_tile + tile_pixel, s.lanes_w - 1));
      float d[kMmaTaskRows][4];
#pragma unroll
      for (int r = 0; r < kMmaTaskRows; ++r) {
        d[r][0] = d[r][2] = bias_pair[0];
        d[r][1] = d[r][3] = bias_pair[1];
      }
#pragma unroll
      for (int i = 0; i < kWindowRows; ++i) {
        std::uint32_t a[kKernel][2];
#pragma unroll
        for (int kw = 0; kw + 1 < kKernel; kw += 2) {
          std::uint32_t words[4];
          load_matrices<4>(words, row + (kw + next_shift) * m.pitch);
          a[kw][0] = words[0];
          a[kw][1] = words[1];
          a[kw + 1][0] = words[2];
          a[kw + 1][1] = words[3];
        }
        if constexpr (kKernel % 2 == 1) {
          std::uint32_t words[2];
          load_matrices<2>(words, row + (kKernel - 1) * m.pitch);
          a[kKernel - 1][0] = words[0];
          a[kKernel - 1][1] = words[1];
        }
#pragma unroll
        for (int kh = 0; kh < kKernel; ++kh) {
          const int r = i - kh;  // the output row that reads window row i under filter row kh
          if (r < 0 || r >= kMmaTaskRows) continue;
#pragma unroll
          for (int kw = 0; kw < kKernel; ++kw) multiply_add_16x8x8<scalar_t>(d[r], a[kw], b[kh * kKernel + kw]);
        }
        row += row_step;
        if (row >= ring_end) row -= s.ring_rows * row_step;
      }
      float total = 0.f;
#pragma unroll
      for (int r = 0; r < kMmaTaskRows; ++r) total += (d[r][0] + d[r][1]) + (d[r][2] + d[r][3]);
      if (total != total) {  // a NaN among them (or inf - inf): each NaN again as its own channel's sum
#pragma unroll
        for (int r = 0; r < kMmaTaskRows; ++r) {
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            if (d[r][v] == d[r][v]) continue;
            const int x = smaller(x_tile + group + 8 * (v / 2), s.lanes_w - 1), k = v % 2;
            float sum = bias_pair[k];
            for (int tap = 0; tap < kTaps; ++tap) {
              const auto* const value = reinterpret_cast<const scalar_t*>(window(r + tap / kKernel, x + tap % kKernel));
              const scalar_t w = weight[(out_channel + k) * kTaps + (kBackward ? kTaps - 1 - tap : tap)];
              sum += static_cast<float>(value[2 * quad + k]) * static_cast<float>(w);
            }
            d[r][v] = sum;
          }
        }
      }
      const int y0 = band_y + step * m.step_rows + row0;
      const int x = x_tile + group;  // of the strip: the lane's pixels are x and x + 8
      const int out = ((n * dst_h + y0) * dst_w + x0 + x) * channels + out_channel;
      const bool stores[2] = {x < s.lanes_w && x0 + x < dst_w, x + 8 < s.lanes_w && x0 + x + 8 < dst_w};
      const int rows = smaller(kMmaTaskRows, dst_h - y0);
#pragma unroll
      for (int r = 0; r < kMmaTaskRows; ++r) {
        if (r >= rows) break;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          if (!stores[half]) continue;
          *reinterpret_cast<std::uint32_t*>(dst + out + r * out_row_step + half * out_half_step) =
              packed_pair<scalar_t>(d[r][2 * half], d[r][2 * half + 1]);
        }
      }
      x_tile += task_stride * kMmaTilePixels;
      while (x_tile >= task_columns) {
        x_tile -= task_columns;
        row0 += kMmaTaskRows;
      }
    }
    if (next) __syncthreads();  // no warp still reads the slots the next step's copies fill
    step_slot = wrap_ring_slot(step_slot + m.step_rows, s.ring_rows);
  }
}

template <typename scalar_t, bool kBackward>
using ChannelsLastMmaKernel = void (*)(const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*, PassGeometry,
                                       ChannelsLastMma);

// Whether the kernel serves the pass: bfloat16 or half, square 3x3 at stride 1 (dilation 1,
// multiplier 1), channels a whole number of 16-byte vectors, on a GPU with the warp matrix products.
template <typename scalar_t>
bool has_channels_last_mma(const PassGeometry& g, const GpuLimits& gpu) {
  return sizeof(scalar_t) == 2 && gpu.compute_capability >= kWarpMatrixCapability &&
         channels_last_register_kernels_serve<scalar_t>(g) && g.kernel_h == 3 && g.stride_h == 1;
}

// `launch` with bands of about `steps` steps (the plane's row steps shared evenly by the fewest
// bands of at most `steps`), or nothing where the grid would be too wide.
inline std::optional<ChannelsLastMmaLaunch> with_mma_steps(ChannelsLastMmaLaunch launch, const PassGeometry& g,
                                                           int64_t steps) {
  const int64_t row_steps = (g.dst_h + launch.mma.step_rows - 1) / launch.mma.step_rows;
  const int64_t bands = (row_steps + steps - 1) / steps;
  const int64_t grid_x = bands * launch.mma.ring.strips_w;
  if (grid_x > std::numeric_limits<int32_t>::max()) return std::nullopt;
  launch.mma.ring.steps = static_cast<int>((row_steps + bands - 1) / bands);
  launch.grid.x = static_cast<unsigned>(grid_x);
  return launch;
}

// A launch, or nothing where the kernel does not serve the pass, where a strip has fewer than
// kStreamMinRowSteps steps down the plane, or where its blocks would not fill the GPU's SMs at least
// once (batch 1: the pixel and register-tiled kernels spread the work wider). Vectors a block: as
// channel_vectors_per_block gives (a power of two up to 8, each on kMmaWarps / vectors warps).
// Steps of 1 or 2 tasks' rows, each with the widest strips whose ring fits; of them the best use of
// the warps' task slots (in sixteenths), then at least two tasks a warp a step, then the fewest
// input vectors copied an output. The band's steps: as channels_last_stream's.
template <typename scalar_t>
std::optional<ChannelsLastMmaLaunch> plan_channels_last_mma(const PassGeometry& g, const GpuLimits& gpu) {
  if (!has_channels_last_mma<scalar_t>(g, gpu)) return std::nullopt;
  const int64_t channel_vectors = g.dst_channels / kMmaChannels;
  const int vectors = channel_vectors_per_block(channel_vectors);
  const int64_t channel_blocks = (channel_vectors + vectors - 1) / vectors;
  if (channel_blocks > 65535 || kMmaWarps % vectors != 0) return std::nullopt;
  const int pitch = vectors | 1;
  const int warps_a_vector = kMmaWarps / vectors;
  struct Candidate {
    ChannelsLastMma mma;
    int64_t row_steps;
    size_t bytes;
    int use_sixteenths;
    bool two_tasks;
    double copied_per_output;
  };
  const auto better = [](const Candidate& a, const Candidate& b) {
    if (a.use_sixteenths != b.use_sixteenths) return a.use_sixteenths > b.use_sixteenths;
    if (a.two_tasks != b.two_tasks) return a.two_tasks;
    return a.copied_per_output < b.copied_per_output;
  };
  std::optional<Candidate> best;
  for (const int row_groups : {1, 2}) {
    const int step_rows = row_groups * kMmaTaskRows;
    const int64_t row_steps = (g.dst_h + step_rows - 1) / step_rows;
    if (row_steps < kStreamMinRowSteps) continue;
    const int window_rows = step_rows - 1 + g.kernel_h;
    const int ring_rows = window_rows + step_rows;
    for (int64_t strips_w = 1; strips_w <= g.dst_w; ++strips_w) {
      const int lanes_w = static_cast<int>((g.dst_w + strips_w - 1) / strips_w);
      if ((g.dst_w + lanes_w - 1) / lanes_w != strips_w) continue;  // the shape of fewer strips
      const int in_w = lanes_w - 1 + g.kernel_w;
      const size_t bytes = size_t(ring_rows) * in_w * pitch * sizeof(Vector16<scalar_t>);
      if (bytes > kMaxSharedBytes) continue;  // narrower strips next
      const int tasks = (lanes_w + kMmaTilePixels - 1) / kMmaTilePixels * row_groups;
      const int rounds = (tasks + warps_a_vector - 1) / warps_a_vector;  // tasks a warp a step
      // Output pixels over the warps' task slots, the plane's last step and strip counted as full.
      const double use = double(g.dst_h) * g.dst_w /
                         (double(row_steps) * strips_w * rounds * warps_a_vector * kMmaTilePixels * kMmaTaskRows);
      const Candidate c{ChannelsLastMma{ChannelsLastStream{lanes_w, in_w, ring_rows, static_cast<int>(strips_w), 1},
                                        step_rows, pitch},
                        row_steps, bytes, static_cast<int>(use * 16), rounds >= 2, double(in_w) / lanes_w};
      if (!best || better(c, *best)) best = c;
      break;  // the widest strips that fit: narrower ones only copy more halo
    }
  }
  if (!best) return std::nullopt;
  const int64_t resident =
      gpu.sm_count * resident_blocks_per_sm(gpu, kThreads, best->bytes, registers_within_bounds(kMmaMinBlocks));
  const int64_t strips = channel_blocks * g.batch * best->mma.ring.strips_w;
  const auto bands = [&](int64_t steps) { return (best->row_steps + steps - 1) / steps; };
  if (strips * bands(2) < resident) return std::nullopt;
  int64_t steps = 2;
  while (steps < best->row_steps && strips * bands(steps + 1) >= kStreamWaves * resident) ++steps;
  return with_mma_steps(ChannelsLastMmaLaunch{dim3(1, static_cast<unsigned>(channel_blocks),
                                                   static_cast<unsigned>(g.batch)),
                                              dim3(vectors, kThreads / vectors), best->mma, best->bytes},
                        g, steps);
}

// The kernel for a filter size (3), or null.
template <typename scalar_t, bool kBackward>
ChannelsLastMmaKernel<scalar_t, kBackward> channels_last_mma_kernel_for(int kernel) {
  return kernel == 3 ? &channels_last_mma_kernel<scalar_t, kBackward, 3> : nullptr;
}

}  // namespace at::native::dwconv
