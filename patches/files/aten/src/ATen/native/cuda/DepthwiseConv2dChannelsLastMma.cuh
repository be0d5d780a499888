#pragma once
// The tensor-core channels_last kernel: bfloat16 and half, square 3x3 and 5x5 (dilation 1, multiplier
// 1) forward at stride 1 and 2, 7x7 forward at stride 1, and backward-input (stride 1), on sm_80 and
// later. Its blocks stream bands of rows as
// channels_last_stream_kernel's do (a ring of input rows in shared memory, the next step's rows in
// flight as cp.async copies), but a step's multiply-adds are warp matrix products
// (DepthwiseConv2dCommon.cuh's multiply_add_16x8x8) instead of a thread's FMAs: the streamed kernel
// issues about 26 instructions an output value at 3x3 and 48 at 5x5 (v26), its FMAs and the widening
// of each 16-bit value among them, where an H100 at the byte floor has about 34 an output value to
// spend, and about 85 at 7x7.
//
// A warp owns one 16-byte channel vector (8 channels) of the block's and takes tasks of 32 output
// columns (two tiles, at 3x3 and stride 1 where the strip is wider than 16; else one) x kMmaTaskRows
// output rows of a step in turn. A tile (one output row's 16 pixels x 8 channels, D, in float)
// gets, for each tap (kh, kw), D += A B: A the 16 input vectors under the tap (16 pixels x 8
// channels), B the tap's 8 weights on its diagonal (zero elsewhere). A's rows are input vectors in
// the ring, a row address a lane (load_matrices), so that the window's shifts cost no data
// movement; each input row's A for every shift is loaded once and serves every output row of the
// task that reads it (6 rows of loads for 4 output rows at 3x3 and stride 1, 8 at 5x5, 10 at 7x7;
// at stride 2 an input row serves one or two output rows at 3x3, two or three at 5x5). B is fixed
// for the warp's channels and held in registers from the start. Of each product's 1,024
// multiply-adds 128 are wanted: the tensor cores do the rest in less time than the CUDA cores would
// take for the 128, and a warp issues a third to a half of the instructions (the machine code, 3x3:
// about 365 a task of 1,024 output values, where the streamed kernel issues about 825 for as many).
//
// The zeros of B also multiply the other channels' inputs, and 0 x inf is NaN: an infinite or NaN
// input would spread to the other channels of its vector. Where a task's sums hold a NaN, the lane
// sums each of its NaN values again from the ring as a plain sum of its own channel's products and
// stores that, which gives what the CUDA-core kernels give (a true NaN stays NaN). Left as it is:
// PTX leaves the rounding of the products' float sums to the GPU, so a bfloat16 sum beyond the
// float range (products past 1e38) may saturate where a CUDA-core FMA gives inf.
// Device code and plain host arithmetic, as in DepthwiseConv2dCommon.cuh, so that tests/emulator
// can run it on a CPU.

#include <ATen/native/cuda/DepthwiseConv2dChannelsLastStream.cuh>

#include <cstdint>
#include <optional>

namespace at::native::dwconv {

constexpr int kMmaTilePixels = 16;        // a product's rows: output pixels of one output row
constexpr int kMmaChannels = 8;           // a product's columns: a 16-byte vector of 16-bit values
constexpr int kMmaTaskRows = 4;           // output rows of a warp's task

// Tiles across a task (a kernel's kTiles: 16 or 32 output columns) where the strip is wider than a
// tile: 2 for 3x3 at stride 1; 1 for the rest, whose two-tile tasks spilled at the kernel's 128
// registers (5x5's 25 weight words, stride 2's longer windows, 7x7's 49).
constexpr int mma_most_task_tiles(int kernel, int stride) {
  return kernel == 3 && stride == 1 ? 2 : 1;
}
constexpr int kMmaWarps = kThreads / 32;  // a block's warps, each on one channel vector
// Blocks an SM its __launch_bounds__ ask for: 2 (128 registers). 7x7 too (49 weight words a lane):
// nvcc 13.0 fits its one-tile tasks in 128 with one word spilled and reloaded once a step, where
// bounded by one block it took 163-165 registers and ran 8 warps an SM (v44).
constexpr int kMmaMinBlocks = 2;
// The 3x3 instances of one-tile tasks ask for kThreeBlocksPerSm instead, where the
// channels_last_mma_three_blocks path is on (the kernel's kThreeBlocks): 80 registers, 24 warps an SM
// where 2 blocks hold 16. nvcc 13.0 fits them with the same loop (sm_90: 332 -> 335 instructions at
// stride 1, 357 -> 358 at stride 2, 327 -> 329 backward-input) and no spill but the sm_90
// backward-input's 12 bytes, stored in the prologue and reloaded once a step (v47). The two-tile
// tasks and 5x5 spill more at 80.
constexpr bool mma_three_blocks_serve(int kernel, int tiles) {
  return kernel == 3 && tiles == 1;
}

struct ChannelsLastMma {
  ChannelsLastStream ring;  // the strip (lanes_w: its output columns), the ring's rows and columns, the band's steps
  int step_rows;            // output rows a step: a multiple of kMmaTaskRows
  int pitch;                // 16-byte vectors a ring column holds: blockDim.x made odd, so that at stride 1
                            // the eight rows an ldmatrix matrix reads (eight columns) fall in distinct
                            // bank groups (at stride 2, two columns apart, in pairs: 2-way conflicts)
  int tiles;                // tiles across a task, the kernel's kTiles: 1 where lanes_w <= 16 or three_blocks, else
                            // mma_most_task_tiles
  bool three_blocks;        // launched as the instance bounded for kThreeBlocksPerSm blocks an SM (kThreeBlocks)
};

// Bytes of a block's filters in shared memory, after its ring: `vectors` channel vectors' taps,
// [vector][channel][tap] as the weight tensor holds them (kTaps 16-byte vectors a channel vector).
template <typename scalar_t>
constexpr size_t mma_filter_bytes(int vectors, int taps) {
  return size_t(vectors) * kMmaChannels * taps * sizeof(scalar_t);
}

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

// 1 in both halves of a word of two 16-bit values.
template <typename scalar_t>
constexpr std::uint32_t kPackedOnes = std::is_same_v<scalar_t, c10::BFloat16> ? 0x3f803f80u : 0x3c003c00u;

// Two floats as 16-bit values in one 32-bit word, the first in the low half.
template <typename scalar_t>
__device__ __forceinline__ std::uint32_t packed_pair(float low, float high) {
  return bits_of(static_cast<scalar_t>(low)) | bits_of(static_cast<scalar_t>(high)) << 16;
}

// Block: (vectors, kThreads / vectors) threads, vectors dividing kMmaWarps; threadIdx.x is the
// channel vector a thread copies. A task: kTiles tiles across (1 where the strip is 16 columns or
// fewer). kThreeBlocks: bounded for kThreeBlocksPerSm blocks an SM (mma_three_blocks_serve), else
// kMmaMinBlocks; the code is the same. 32-bit indexing only.
template <typename scalar_t, bool kBackward, int kKernel, int kStride, int kTiles, bool kThreeBlocks>
__global__ void __launch_bounds__(kThreads, kThreeBlocks ? kThreeBlocksPerSm : kMmaMinBlocks) channels_last_mma_kernel(
    const scalar_t* __restrict__ src,
    const scalar_t* __restrict__ weight,
    const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ dst,
    const PassGeometry g,
    const ChannelsLastMma m) {
  using Vec = Vector16<scalar_t>;
  static_assert(kVector16<scalar_t> == kMmaChannels, "a product's columns are one 16-byte vector of 16-bit values");
  constexpr int kTaps = kKernel * kKernel;
  constexpr int kWindowRows = (kMmaTaskRows - 1) * kStride + kKernel;  // input rows a task reads
  static_assert(!kBackward || kStride == 1, "backward-input is a stride-1 correlation");
  static_assert(!kThreeBlocks || mma_three_blocks_serve(kKernel, kTiles), "only 3x3 one-tile tasks fit 80 registers");
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
  const int window_rows = (m.step_rows - 1) * kStride + kKernel;
  const int new_rows = m.step_rows * kStride;  // input rows a step moves down
  const int steps = smaller(s.steps, (dst_h - band_y + m.step_rows - 1) / m.step_rows);
  const int image_row0 = band_y * kStride - g.pad_h;
  const int image_col0 = x0 * kStride - g.pad_w;
  const bool live_copies = static_cast<int>(threadIdx.x) < live_vectors;  // else zeros are copied
  const scalar_t* const src_vector =
      src + n * src_h * src_w * channels + c0 + (live_copies ? static_cast<int>(threadIdx.x) * kMmaChannels : 0);

  // The block's filters go to shared memory after the ring, with the first window's copies: read
  // there, a tap's 8 weights (8 lanes of a warp) are 8 words in distinct banks, where from global
  // memory they were 8 sectors of 7 lines, for each of a warp's kTaps loads (memory_profile.py: up to
  // 45 % of the kernel's shared wavefronts and global sectors together). The weight tensor is 16-byte aligned
  // (the choice takes this kernel only then), and a channel vector's taps are kTaps whole vectors.
  Vec* const filters = ring + s.ring_rows * s.in_w * m.pitch;  // [vector][channel][tap]
  for (int i = tid; i < vectors * kTaps; i += kThreads) {
    const bool inside = i / kTaps < live_vectors;  // else zeros, nothing read
    copy_async_or_zero(filters + i, weight + (inside ? c0 * kTaps + i * kMmaChannels : 0), inside);
  }
  const StreamBand<scalar_t> band{ring,       src_vector, s,           m.pitch, window_rows, new_rows,
                                  image_row0, image_col0, live_copies, src_h,   src_w,       channels};
  band.copy_first_window();  // commits the filters' copies with the window's

  // The warp's vector; B for each tap (read once the first step's copies have landed, below): B's column
  // `group` is the vector's channel `group`, and a lane holds its rows 2 quad and 2 quad + 1: the
  // tap's weight where the row is the column (in the low half for group == 2 quad, the high for
  // 2 quad + 1), else zero.
  const int vec = warp % vectors;
  const bool live = vec < live_vectors;  // the whole warp: an idle vector of a part-filled group
  const int group = lane / 4, quad = lane % 4;
  const scalar_t* const vector_filters = reinterpret_cast<const scalar_t*>(filters) + vec * kMmaChannels * kTaps;
  std::uint32_t b[kTaps];
  // The bias (the forward only) as one more product: A all ones, B the bias on its diagonal. And the
  // two channels of D's columns a lane holds, with their bias as floats for the NaN sums below.
  const bool biased = !kBackward && bias != nullptr && live;
  const std::uint32_t b_bias =
      (biased && group / 2 == quad) ? bits_of(bias[c0 + vec * kMmaChannels + group]) << (16 * (group % 2)) : 0u;
  const std::uint32_t ones[2] = {kPackedOnes<scalar_t>, kPackedOnes<scalar_t>};
  const int out_channel = c0 + vec * kMmaChannels + 2 * quad;
  const float bias_pair[2] = {biased ? static_cast<float>(bias[out_channel]) : 0.f,
                              biased ? static_cast<float>(bias[out_channel + 1]) : 0.f};

  // A lane addresses pixel lane % 16 of a tile's row of A: lanes 0-7 and 8-15 the rows of matrices 0
  // and 1 (A's rows 0-7, 8-15), and in a load of two shifts lanes 16-31 the same at the next shift.
  // Addresses are byte offsets into the ring: a row's, plus a tile's column and shift.
  const int tile_pixel = lane % 16;
  const int next_shift = lane / 16;
  constexpr int kTaskColumns = kTiles * kMmaTilePixels;
  const int task_columns = (s.lanes_w + kTaskColumns - 1) / kTaskColumns * kTaskColumns;  // a step row's tasks'
  const int tasks = task_columns / kTaskColumns * (m.step_rows / kMmaTaskRows);
  const int first_task = warp / vectors, task_stride = kMmaWarps / vectors;
  const int first_x_task = first_task * kTaskColumns % task_columns;
  const int first_row0 = first_task * kTaskColumns / task_columns * kMmaTaskRows;
  constexpr int kVecBytes = static_cast<int>(sizeof(Vec));
  const int row_bytes = s.in_w * m.pitch * kVecBytes;  // between ring slots
  const int ring_bytes = s.ring_rows * row_bytes;
  const int out_row_step = dst_w * channels;
  const int out_half_step = 8 * channels;  // from a lane's pixel `group` of a tile to `group` + 8

  int step_slot = 0;  // the ring slot of the step's first window row
  band.begin_step(0, steps, step_slot);  // the first step's rows and the filters have landed
#pragma unroll
  for (int tap = 0; tap < kTaps; ++tap) {
    b[tap] = (live && group / 2 == quad)
                 ? bits_of(vector_filters[group * kTaps + (kBackward ? kTaps - 1 - tap : tap)]) << (16 * (group % 2))
                 : 0u;
  }
  for (int step = 0; step < steps; ++step) {
    if (step > 0) band.begin_step(step, steps, step_slot);

    // Tasks in the step's order: across the first kMmaTaskRows rows, then the next.
    int x_task = first_x_task, row0 = first_row0;
    for (int task = first_task; live && task < tasks; task += task_stride) {
      // Each tile's pixel for this lane (spare columns past the strip read a real pixel, whose sums
      // are not stored), at the loads' shifts: kw + next_shift for the pairs, the last alone.
      int pair_at[kTiles], last_at[kTiles];
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const int column = smaller(x_task + t * kMmaTilePixels + tile_pixel, s.lanes_w - 1) * kStride * m.pitch + vec;
        pair_at[t] = (column + next_shift * m.pitch) * kVecBytes;
        last_at[t] = (column + (kKernel - 1) * m.pitch) * kVecBytes;
      }
      int row = wrap_ring_slot(step_slot + row0 * kStride, s.ring_rows) * row_bytes;  // the task's first window row
      float d[kTiles][kMmaTaskRows][4];
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
#pragma unroll
        for (int r = 0; r < kMmaTaskRows; ++r) {
#pragma unroll
          for (int v = 0; v < 4; ++v) d[t][r][v] = 0.f;
          if constexpr (!kBackward) multiply_add_16x8x8<scalar_t>(d[t][r], ones, b_bias);
        }
      }
#pragma unroll
      for (int i = 0; i < kWindowRows; ++i) {
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          std::uint32_t a[kKernel][2];
#pragma unroll
          for (int kw = 0; kw + 1 < kKernel; kw += 2) {
            std::uint32_t words[4];
            load_matrices<4>(words, shared_bytes + row + pair_at[t] + kw * m.pitch * kVecBytes);
            a[kw][0] = words[0];
            a[kw][1] = words[1];
            a[kw + 1][0] = words[2];
            a[kw + 1][1] = words[3];
          }
          if constexpr (kKernel % 2 == 1) {
            std::uint32_t words[2];
            load_matrices<2>(words, shared_bytes + row + last_at[t]);
            a[kKernel - 1][0] = words[0];
            a[kKernel - 1][1] = words[1];
          }
#pragma unroll
          for (int kh = 0; kh < kKernel; ++kh) {
            // The output row that reads window row i under filter row kh, if any.
            if ((i - kh) % kStride != 0) continue;
            const int r = (i - kh) / kStride;
            if (r < 0 || r >= kMmaTaskRows) continue;
#pragma unroll
            for (int kw = 0; kw < kKernel; ++kw) {
              multiply_add_16x8x8<scalar_t>(d[t][r], a[kw], b[kh * kKernel + kw]);
            }
          }
        }
        row += row_bytes;
        if (row >= ring_bytes) row -= ring_bytes;
      }
      float total = 0.f;
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
#pragma unroll
        for (int r = 0; r < kMmaTaskRows; ++r) total += (d[t][r][0] + d[t][r][1]) + (d[t][r][2] + d[t][r][3]);
      }
      const int y0 = band_y + step * m.step_rows + row0;
      const int rows = smaller(kMmaTaskRows, dst_h - y0);  // a task may start past the plane's last row
      if (rows > 0) {
        const int out = ((n * dst_h + y0) * dst_w + x0 + x_task + group) * channels + out_channel;
        // The lane's values, [tile][row][v]: pixel group + 8 (v / 2) of the tile, channel v % 2 of its pair.
        const auto place = [&](int t, int r, int v) {
          return out + r * out_row_step + (2 * t + v / 2) * out_half_step + v % 2;
        };
        const auto strip_column = [&](int t, int v) { return x_task + t * kMmaTilePixels + group + 8 * (v / 2); };
        const auto stored = [&](int t, int r, int v) {
          const int x = strip_column(t, v);
          return r < rows && x < s.lanes_w && x0 + x < dst_w;
        };
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
#pragma unroll
          for (int r = 0; r < kMmaTaskRows; ++r) {
#pragma unroll
            for (int v = 0; v < 4; v += 2) {
              if (stored(t, r, v)) {
                *reinterpret_cast<std::uint32_t*>(dst + place(t, r, v)) = packed_pair<scalar_t>(d[t][r][v], d[t][r][v + 1]);
              }
            }
          }
        }
        if (total != total) {
          // A NaN among them (or inf - inf): each NaN value again as its own channel's sum (see the
          // top of this file), stored over the one above. Rare: a mask of them, then a rolled loop.
          std::uint32_t nan_values = 0;
#pragma unroll
          for (int t = 0; t < kTiles; ++t) {
#pragma unroll
            for (int r = 0; r < kMmaTaskRows; ++r) {
#pragma unroll
              for (int v = 0; v < 4; ++v) {
                nan_values |= std::uint32_t(d[t][r][v] != d[t][r][v]) << ((t * kMmaTaskRows + r) * 4 + v);
              }
            }
          }
#pragma unroll 1
          for (int i = 0; i < kTiles * kMmaTaskRows * 4; ++i) {
            const int t = i / (4 * kMmaTaskRows), r = i / 4 % kMmaTaskRows, v = i % 4, k = v % 2;
            if (!(nan_values >> i & 1u) || !stored(t, r, v)) continue;
            const int x = strip_column(t, v);
            float sum = k == 0 ? bias_pair[0] : bias_pair[1];  // not bias_pair[k]: that would put it on the stack
#pragma unroll 1
            for (int tap = 0; tap < kTaps; ++tap) {
              const int slot = wrap_ring_slot(step_slot + (row0 + r) * kStride + tap / kKernel, s.ring_rows);
              const auto* const in = reinterpret_cast<const scalar_t*>(
                  ring + (slot * s.in_w + x * kStride + tap % kKernel) * m.pitch + vec);
              const scalar_t w = vector_filters[(2 * quad + k) * kTaps + (kBackward ? kTaps - 1 - tap : tap)];
              sum += static_cast<float>(in[2 * quad + k]) * static_cast<float>(w);
            }
            dst[place(t, r, v)] = static_cast<scalar_t>(sum);
          }
        }
      }
      x_task += task_stride * kTaskColumns;
      while (x_task >= task_columns) {
        x_task -= task_columns;
        row0 += kMmaTaskRows;
      }
    }
    step_slot = band.end_step(step, steps, step_slot);
  }
}

template <typename scalar_t, bool kBackward>
using ChannelsLastMmaKernel = void (*)(const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*, PassGeometry,
                                       ChannelsLastMma);

// Whether the kernel serves the pass: bfloat16 or half, square 3x3 or 5x5 at stride 1 or 2, 7x7 at
// stride 1 (dilation 1, multiplier 1; backward-input is always a stride-1 correlation here), channels
// a whole number of 16-byte vectors, on a GPU with the warp matrix products.
template <typename scalar_t>
bool has_channels_last_mma(const PassGeometry& g, const GpuLimits& gpu) {
  return sizeof(scalar_t) == 2 && gpu.compute_capability >= kWarpMatrixCapability &&
         channels_last_register_kernels_serve<scalar_t>(g) &&
         (g.kernel_h == 7 ? g.stride_h == 1 : g.stride_h == 1 || g.stride_h == 2);
}

// `launch` with bands of about `steps` steps (set_stream_bands), or nothing where the grid would be
// too wide.
inline std::optional<ChannelsLastMmaLaunch> with_mma_steps(ChannelsLastMmaLaunch launch, const PassGeometry& g,
                                                           int64_t steps) {
  const int64_t row_steps = (g.dst_h + launch.mma.step_rows - 1) / launch.mma.step_rows;
  if (!set_stream_bands(launch.mma.ring, launch.grid, row_steps, steps)) return std::nullopt;
  return launch;
}

// A launch, or nothing where the kernel does not serve the pass, where a strip has fewer than
// kStreamMinRowSteps steps down the plane, or where its blocks would not fill the GPU's SMs at least
// once (batch 1: the pixel and register-tiled kernels spread the work wider). Vectors a block: as
// channel_vectors_per_block gives (a power of two up to 8, each on kMmaWarps / vectors warps).
// Steps of 1 or 2 tasks' rows, each with the widest strips whose ring fits, in tasks of one tile or
// (mma_most_task_tiles) two; of them the best use of the warps' task slots (in sixteenths), then
// two tiles, then at least two tasks a warp a step, then the fewest input vectors copied an output.
// With `three_blocks`, 3x3 tasks of one tile, launched as the instance bounded for three blocks an SM
// (mma_three_blocks_serve). The band's steps: as channels_last_stream's (by the waves where
// `band_waves`), for the blocks an SM the instance's registers allow.
template <typename scalar_t>
std::optional<ChannelsLastMmaLaunch> plan_channels_last_mma_bounded(const PassGeometry& g, const GpuLimits& gpu,
                                                                    bool three_blocks, bool band_waves) {
  if (!has_channels_last_mma<scalar_t>(g, gpu)) return std::nullopt;
  const int64_t channel_vectors = g.dst_channels / kMmaChannels;
  const int vectors = channel_vectors_per_block(channel_vectors);
  const int64_t channel_blocks = (channel_vectors + vectors - 1) / vectors;
  if (channel_blocks > 65535 || kMmaWarps % vectors != 0) return std::nullopt;
  const int pitch = vectors | 1;
  const int warps_a_vector = kMmaWarps / vectors;
  const size_t filter_bytes = mma_filter_bytes<scalar_t>(vectors, g.kernel_h * g.kernel_w);
  const bool bounded_for_three = three_blocks && mma_three_blocks_serve(g.kernel_h, 1);
  const int most_tiles = bounded_for_three ? 1 : mma_most_task_tiles(g.kernel_h, g.stride_h);
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
    if (a.mma.tiles != b.mma.tiles) return a.mma.tiles > b.mma.tiles;  // fewer instructions an output
    if (a.two_tasks != b.two_tasks) return a.two_tasks;
    return a.copied_per_output < b.copied_per_output;
  };
  std::optional<Candidate> best;
  for (const int row_groups : {1, 2}) {
    const int step_rows = row_groups * kMmaTaskRows;
    const int64_t row_steps = (g.dst_h + step_rows - 1) / step_rows;
    if (row_steps < kStreamMinRowSteps) continue;
    const int window_rows = (step_rows - 1) * g.stride_h + g.kernel_h;
    const int ring_rows = window_rows + step_rows * g.stride_h;
    // The widest strips whose ring fits beside the filters (narrower ones only copy more halo): from
    // the fewest that 48 KB of single input rows allows.
    const int64_t widest =
        std::max<int64_t>(1, int64_t(kMaxSharedBytes - filter_bytes) / (int64_t(ring_rows) * pitch * 16));
    for (int64_t strips_w = std::max<int64_t>(1, g.dst_w * g.stride_w / widest); strips_w <= g.dst_w; ++strips_w) {
      const int lanes_w = static_cast<int>((g.dst_w + strips_w - 1) / strips_w);
      if ((g.dst_w + lanes_w - 1) / lanes_w != strips_w) continue;  // the shape of fewer strips
      const int in_w = (lanes_w - 1) * g.stride_w + g.kernel_w;
      const size_t bytes = size_t(ring_rows) * in_w * pitch * sizeof(Vector16<scalar_t>) + filter_bytes;
      if (bytes > kMaxSharedBytes) continue;  // narrower strips next
      for (int tiles = 1; tiles <= (lanes_w > kMmaTilePixels ? most_tiles : 1); ++tiles) {
        const int tasks = (lanes_w + tiles * kMmaTilePixels - 1) / (tiles * kMmaTilePixels) * row_groups;
        const int rounds = (tasks + warps_a_vector - 1) / warps_a_vector;  // tasks a warp a step
        // Output pixels over the warps' task slots, the plane's last step and strip counted as full.
        const double use = double(g.dst_h) * g.dst_w / (double(row_steps) * strips_w * rounds * warps_a_vector *
                                                        tiles * kMmaTilePixels * kMmaTaskRows);
        const Candidate c{ChannelsLastMma{ChannelsLastStream{lanes_w, in_w, ring_rows, static_cast<int>(strips_w), 1},
                                          step_rows, pitch, tiles, false},
                          row_steps, bytes, static_cast<int>(use * 16), rounds >= 2,
                          double(in_w) * g.stride_h / lanes_w};
        if (!best || better(c, *best)) best = c;
      }
      break;
    }
  }
  if (!best) return std::nullopt;
  best->mma.three_blocks = bounded_for_three;
  const int64_t blocks_per_sm = resident_blocks_per_sm(
      gpu, kThreads, best->bytes, registers_within_bounds(bounded_for_three ? kThreeBlocksPerSm : kMmaMinBlocks));
  if (bounded_for_three && blocks_per_sm < kThreeBlocksPerSm) return std::nullopt;  // shared memory holds fewer
  const int64_t resident = gpu.sm_count * blocks_per_sm;
  const auto steps =
      stream_band_steps(best->row_steps, channel_blocks * g.batch * best->mma.ring.strips_w, resident, band_waves);
  if (!steps) return std::nullopt;
  return with_mma_steps(ChannelsLastMmaLaunch{dim3(1, static_cast<unsigned>(channel_blocks),
                                                   static_cast<unsigned>(g.batch)),
                                              dim3(vectors, kThreads / vectors), best->mma, best->bytes},
                        g, *steps);
}

// Where `three_blocks` allows (the channels_last_mma_three_blocks path), 3x3 passes are planned first
// in one-tile tasks at three blocks an SM: 24 warps an SM and half as many copies again in flight,
// for about 30 % more instructions an output than two-tile tasks at two (sm_90 machine code: 332 a
// tile against 516 for two). Where the SM's shared memory holds fewer than three of its blocks (sm_86
// and sm_89: 100 KB), where that grid would not fill the GPU once, or without the path, as before:
// two blocks an SM, tasks of two tiles where the strip is wide enough.
template <typename scalar_t>
std::optional<ChannelsLastMmaLaunch> plan_channels_last_mma(const PassGeometry& g, const GpuLimits& gpu,
                                                            bool three_blocks, bool band_waves) {
  if (three_blocks && mma_three_blocks_serve(g.kernel_h, 1)) {
    if (auto plan = plan_channels_last_mma_bounded<scalar_t>(g, gpu, true, band_waves)) return plan;
  }
  return plan_channels_last_mma_bounded<scalar_t>(g, gpu, false, band_waves);
}

// The kernel for a filter size (3, 5 or 7), stride (1 or 2; 1 for 7x7 and backward-input), tiles
// across a task (1 or 2) and bound (three_blocks, where mma_three_blocks_serve), or null.
template <typename scalar_t, bool kBackward>
ChannelsLastMmaKernel<scalar_t, kBackward> channels_last_mma_kernel_for(int kernel, int stride, int tiles,
                                                                        bool three_blocks) {
  return register_tiled_instance<!kBackward>(kernel, stride, [=](auto k, auto s) -> ChannelsLastMmaKernel<scalar_t, kBackward> {
    constexpr int kKernel = decltype(k)::value, kStride = decltype(s)::value;
    constexpr int kMostTiles = mma_most_task_tiles(kKernel, kStride);
    if (tiles == 1) {
      if constexpr (mma_three_blocks_serve(kKernel, 1)) {
        if (three_blocks) return &channels_last_mma_kernel<scalar_t, kBackward, kKernel, kStride, 1, true>;
      }
      return three_blocks ? nullptr : &channels_last_mma_kernel<scalar_t, kBackward, kKernel, kStride, 1, false>;
    }
    if constexpr (kMostTiles > 1) {
      if (tiles == kMostTiles && !three_blocks) {
        return &channels_last_mma_kernel<scalar_t, kBackward, kKernel, kStride, kMostTiles, false>;
      }
    }
    return nullptr;
  });
}

}  // namespace at::native::dwconv
