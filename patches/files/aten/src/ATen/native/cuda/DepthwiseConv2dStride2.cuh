#pragma once
// Backward-input of the stride-2 depthwise 2D convolutions (square 3x3 and 5x5 filters at
// dilation 1), the pass that is no stride-1 correlation, and the arithmetic that plans its
// launches: device code and plain host arithmetic, as in DepthwiseConv2dRegisterTiled.cuh, whose
// helpers it uses, so that tests/emulator can run it on a CPU too.
//
// grad_input[y, x] = sum of grad_output[(y + p - kh) / 2, (x + p - kw) / 2] * w[kh, kw] over the
// taps for which both divide exactly. Pixel y = 2a + py (py, its phase, 0 or 1) takes the taps
// kh of parity py + p, from grad_output row a + (py + p - kh) / 2. With p = 2P + kParity those
// rows lie in a window of kPhaseWindow rows from a + P + kParity - (K - 1) / 2, the same for both
// phases: so a thread computes a pair of grad_input rows (one of each phase) from one window of
// grad_output. Columns go the same way, and a 2 x 2 block of grad_input pixels takes K * K
// multiply-adds in all, each tap's window value and pixel known at compile time (the kernel size
// and the padding's parity are template arguments): no tap is tested at run time. Upstream's kernel and our direct kernel test every tap of
// every grad_input element instead, and load each grad_output value once per tap that takes it.

#include <ATen/native/cuda/DepthwiseConv2dRegisterTiled.cuh>

namespace at::native::dwconv {

template <int kKernel>
constexpr int kPhaseWindow = (kKernel + 1) / 2;

// The window row (or column) that tap `tap` of a pixel of phase `phase` reads, or -1 where the tap
// does not land on a stride point for that phase.
template <int kKernel, int kParity>
__host__ __device__ constexpr int phase_window_index(int phase, int tap) {
  const int twice_offset = phase + kParity - tap;
  return (twice_offset & 1) != 0 ? -1 : twice_offset / 2 - kParity + (kKernel - 1) / 2;
}

// The first grad_output row (or column) of the window of row (or column) pair `pair`, at a
// padding of parity kParity.
template <int kKernel, int kParity, typename index_t>
__device__ __forceinline__ index_t phase_window_first(index_t pair, int pad) {
  return pair + (pad - kParity) / 2 + kParity - (kKernel - 1) / 2;
}

// Which passes the stride-2 kernels take: backward-input (g from backward_input_direct: src =
// grad_output, dst = grad_input) at stride 2 and dilation 1, a square filter of a compiled size,
// the same padding parity along both axes. The caller checks the layout (and for channels_last
// the plan and alignment) and 32-bit indexing.
inline bool has_stride2_grad_input(const PassGeometry& g) {
  return g.stride_h == 2 && g.stride_w == 2 && g.dilation_h == 1 && g.dilation_w == 1 &&
         g.kernel_h == g.kernel_w && (g.kernel_h == 3 || g.kernel_h == 5) && g.pad_h % 2 == g.pad_w % 2;
}

// NCHW (any multiplier): a thread computes 2 x kBlockCols values of grad_input, rows 2a and
// 2a + 1 and columns from kBlockCols * b, from a window of kPhaseWindow rows by
// kBlockCols / 2 + kPhaseWindow - 1 columns of each of its grad_output planes, weights loaded once
// a plane. Threads walk (n, c, a, b), b fastest, by the grid's stride with carries; a thread stores
// its rows of 4 values `access_values` at a time (register_tile_access_values: 4, 2 or 1).
template <typename scalar_t, typename index_t, int kKernel, int kParity>
__global__ void __launch_bounds__(kThreads) stride2_grad_input_nchw_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ weight,
    scalar_t* __restrict__ grad_input,
    const PassGeometry g,
    const int access_values) {
  using acc_t = at::acc_type<scalar_t, true>;
  constexpr int kRows = kPhaseWindow<kKernel>;
  constexpr int kPairs = kBlockCols / 2;
  constexpr int kCols = kPairs + kRows - 1;
  const index_t go_h = g.src_h, go_w = g.src_w, gi_h = g.dst_h, gi_w = g.dst_w;
  const index_t channels = g.dst_channels, go_channels = g.src_channels, multiplier = g.multiplier;
  const index_t row_pairs = (gi_h + 1) / 2, blocks_w = (gi_w + kBlockCols - 1) / kBlockCols;
  const index_t total = static_cast<index_t>(g.batch) * channels * row_pairs * blocks_w;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const index_t grid_stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  GridWalk<index_t, 4> at(first, grid_stride, {0, channels, row_pairs, blocks_w});
  for (index_t i = first; i < total; i += grid_stride, at.advance()) {
    const index_t n = at.at[0], c = at.at[1], a = at.at[2], b = at.at[3];
    const index_t row0 = phase_window_first<kKernel, kParity>(a, g.pad_h);
    const index_t col0 = phase_window_first<kKernel, kParity>(kPairs * b, g.pad_w);
    bool row_inside[kRows], col_inside[kCols];
#pragma unroll
    for (int r = 0; r < kRows; ++r) row_inside[r] = row0 + r >= 0 && row0 + r < go_h;
#pragma unroll
    for (int q = 0; q < kCols; ++q) col_inside[q] = col0 + q >= 0 && col0 + q < go_w;

    acc_t acc[2][kBlockCols] = {};
    for (index_t member = 0; member < multiplier; ++member) {
      const index_t go_c = c * multiplier + member;
      const scalar_t* plane = grad_output + (n * go_channels + go_c) * go_h * go_w;
      acc_t window[kRows][kCols];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int q = 0; q < kCols; ++q) {
          window[r][q] = row_inside[r] && col_inside[q] ? static_cast<acc_t>(plane[(row0 + r) * go_w + col0 + q])
                                                        : acc_t(0);
        }
      }
      const scalar_t* w = weight + go_c * (kKernel * kKernel);
#pragma unroll
      for (int kh = 0; kh < kKernel; ++kh) {
#pragma unroll
        for (int kw = 0; kw < kKernel; ++kw) {
          const acc_t tap = static_cast<acc_t>(w[kh * kKernel + kw]);
#pragma unroll
          for (int py = 0; py < 2; ++py) {
            const int r = phase_window_index<kKernel, kParity>(py, kh);
            if (r < 0) continue;
#pragma unroll
            for (int px = 0; px < 2; ++px) {
              const int q = phase_window_index<kKernel, kParity>(px, kw);
              if (q < 0) continue;
#pragma unroll
              for (int pair = 0; pair < kPairs; ++pair) acc[py][2 * pair + px] += window[r][pair + q] * tap;
            }
          }
        }
      }
    }
    const index_t x = b * kBlockCols;
#pragma unroll
    for (int py = 0; py < 2; ++py) {
      const index_t y = 2 * a + py;
      if (y < gi_h) {
        scalar_t* const out = grad_input + ((n * channels + c) * gi_h + y) * gi_w + x;
        if (access_values == 2) {
          store_block_row_pairs<scalar_t>(out, acc[py], static_cast<int>(gi_w - x));
        } else {
          store_block_row<scalar_t, index_t>(out, acc[py], static_cast<int>(gi_w - x), index_t(1),
                                             access_values == kBlockCols);
        }
      }
    }
  }
}

// channels_last (multiplier 1, channels a whole number of 16-byte vectors, 16-byte aligned
// tensors): a thread computes a 2 x 2 block of grad_input pixels (rows 2a, 2a + 1, columns 2b,
// 2b + 1) of one channel vector from a window of kPhaseWindow x kPhaseWindow grad_output vectors.
// Block: (vectors, kThreads / vectors) threads; threadIdx.x picks the channel vector (blockIdx.y
// the block's group of them), the block's filters are staged in shared memory in acc_t
// (stage_weight_vectors), and the pixel lanes walk (n, a, b) by the grid's stride with carries. Every
// global load and store is a 16-byte vector, a warp's consecutive in memory where the channels
// fill it.
template <typename scalar_t, typename index_t, int kKernel, int kParity>
__global__ void __launch_bounds__(kThreads) stride2_grad_input_channels_last_kernel(
    const scalar_t* __restrict__ grad_output,
    const scalar_t* __restrict__ weight,
    scalar_t* __restrict__ grad_input,
    const PassGeometry g) {
  using acc_t = at::acc_type<scalar_t, true>;
  using Vec = Vector16<scalar_t>;
  constexpr int V = kVector16<scalar_t>;
  constexpr int kWindow = kPhaseWindow<kKernel>;
  DWCONV_SHARED_BYTES(shared_bytes);
  acc_t* taps = reinterpret_cast<acc_t*>(shared_bytes);  // stage_weight_vectors, converted once
  const int vectors = blockDim.x;
  const index_t channels = g.dst_channels;
  const index_t c0 = static_cast<index_t>(blockIdx.y) * vectors * V;
  stage_weight_vectors(taps, weight, c0, channels, kKernel * kKernel, vectors,
                       staged_tap_pitch<acc_t, scalar_t>(vectors), static_cast<int>(threadIdx.y * vectors + threadIdx.x),
                       kThreads, false);
  __syncthreads();
  const int vec = threadIdx.x;
  if (c0 + vec * V >= channels) return;  // a part-filled group's idle vectors: no barrier follows

  const index_t go_h = g.src_h, go_w = g.src_w, gi_h = g.dst_h, gi_w = g.dst_w;
  const index_t row_pairs = (gi_h + 1) / 2, col_pairs = (gi_w + 1) / 2;
  const index_t total = static_cast<index_t>(g.batch) * row_pairs * col_pairs;
  const index_t first = static_cast<index_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const index_t grid_stride = static_cast<index_t>(gridDim.x) * blockDim.y;
  const scalar_t* go_vector = grad_output + c0 + vec * V;
  scalar_t* gi_vector = grad_input + c0 + vec * V;
  GridWalk<index_t, 3> at(first, grid_stride, {0, row_pairs, col_pairs});
  for (index_t i = first; i < total; i += grid_stride, at.advance()) {
    const index_t n = at.at[0], a = at.at[1], b = at.at[2];
    const index_t row0 = phase_window_first<kKernel, kParity>(a, g.pad_h);
    const index_t col0 = phase_window_first<kKernel, kParity>(b, g.pad_w);
    // The window a row at a time, each row's vectors converted once: the four pixels' sums and one
    // row are what a thread holds (the whole window converted at once took 128-142 registers for
    // bf16 5x5 on sm_90, one block an SM).
    acc_t acc[2][2][V] = {};
#pragma unroll
    for (int r = 0; r < kWindow; ++r) {
      const index_t sy = row0 + r;
      acc_t row[kWindow][V];
#pragma unroll
      for (int q = 0; q < kWindow; ++q) {
        const index_t sx = col0 + q;
        const Vec loaded = load_vector_or_zero(sy >= 0 && sy < go_h && sx >= 0 && sx < go_w,
                                               go_vector + ((n * go_h + sy) * go_w + sx) * channels);
#pragma unroll
        for (int k = 0; k < V; ++k) row[q][k] = static_cast<acc_t>(loaded.v[k]);
      }
#pragma unroll
      for (int kh = 0; kh < kKernel; ++kh) {
#pragma unroll
        for (int py = 0; py < 2; ++py) {
          if (phase_window_index<kKernel, kParity>(py, kh) != r) continue;
#pragma unroll
          for (int kw = 0; kw < kKernel; ++kw) {
            acc_t w[V];
            load_staged_weights<scalar_t>(taps, kh * kKernel + kw, vec, vectors, w);
#pragma unroll
            for (int px = 0; px < 2; ++px) {
              const int q = phase_window_index<kKernel, kParity>(px, kw);
              if (q < 0) continue;
#pragma unroll
              for (int k = 0; k < V; ++k) acc[py][px][k] += row[q][k] * w[k];
            }
          }
        }
      }
    }
#pragma unroll
    for (int py = 0; py < 2; ++py) {
#pragma unroll
      for (int px = 0; px < 2; ++px) {
        const index_t y = 2 * a + py, x = 2 * b + px;
        if (y < gi_h && x < gi_w) {
          Vec out;
#pragma unroll
          for (int k = 0; k < V; ++k) out.v[k] = static_cast<scalar_t>(acc[py][px][k]);
          store_vector(gi_vector + ((n * gi_h + y) * gi_w + x) * channels, out);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Launch planning.

// The kernel compiled for a filter size and padding parity: kernel_of(kernel constant, parity
// constant), or null for a size that has none.
template <typename KernelOf>
auto stride2_kernel_for(int kernel, int pad, KernelOf kernel_of) {
  using Kernel = decltype(kernel_of(std::integral_constant<int, 3>{}, std::integral_constant<int, 0>{}));
  const bool odd = pad % 2 != 0;
  switch (kernel) {
    case 3: return odd ? kernel_of(std::integral_constant<int, 3>{}, std::integral_constant<int, 1>{})
                       : kernel_of(std::integral_constant<int, 3>{}, std::integral_constant<int, 0>{});
    case 5: return odd ? kernel_of(std::integral_constant<int, 5>{}, std::integral_constant<int, 1>{})
                       : kernel_of(std::integral_constant<int, 5>{}, std::integral_constant<int, 0>{});
    default: return Kernel{nullptr};
  }
}

template <typename scalar_t, typename index_t>
auto stride2_grad_input_nchw_kernel_for(const PassGeometry& g) {
  return stride2_kernel_for(g.kernel_h, g.pad_h, [](auto k, auto parity) {
    return &stride2_grad_input_nchw_kernel<scalar_t, index_t, decltype(k)::value, decltype(parity)::value>;
  });
}

template <typename scalar_t, typename index_t>
auto stride2_grad_input_channels_last_kernel_for(const PassGeometry& g) {
  return stride2_kernel_for(g.kernel_h, g.pad_h, [](auto k, auto parity) {
    return &stride2_grad_input_channels_last_kernel<scalar_t, index_t, decltype(k)::value, decltype(parity)::value>;
  });
}

// A thread's items: a 2 x kBlockCols block (NCHW) or a 2 x 2 block of one channel vector
// (channels_last), about kStride2ItemsPerThread of them, so that a walk's divisions are paid once
// for several.
constexpr int kStride2ItemsPerThread = 4;

inline dim3 plan_stride2_grad_input_nchw(const PassGeometry& g, const GpuLimits& gpu) {
  const int64_t items = g.batch * g.dst_channels * ((g.dst_h + 1) / 2) * ((g.dst_w + kBlockCols - 1) / kBlockCols);
  return dim3(static_cast<unsigned>(walk_blocks(items, kThreads, kStride2ItemsPerThread, gpu)));
}

struct Stride2ChannelsLastLaunch {
  dim3 grid, block;  // grid: (pixel-block walks, channel vector groups); block: (vectors, pixel lanes)
  size_t shared_bytes;
};

// What a channels_last block does before its first 2 x 2 block, in its items' time: stage its filters.
constexpr int64_t kStride2StartItems = 1;

// Blocks of (vectors, lanes) threads for each group of channel vectors, walking the 2 x 2 blocks of
// grad_input. With `by_waves` (the path stride2_grad_input_waves): walk_blocks_by_waves's count for the
// blocks an SM the instance's registers allow (GpuLimits::compiled_registers; where unknown, its
// launch bound's, one block an SM). Without: about kStride2ItemsPerThread items a lane, 4 blocks an SM at
// the least, which at batch 64 gave MobileNetV2 192@28 s2 1.33 waves of blocks.
template <typename scalar_t>
std::optional<Stride2ChannelsLastLaunch> plan_stride2_grad_input_channels_last(const PassGeometry& g,
                                                                               const GpuLimits& gpu, bool by_waves) {
  constexpr int V = kVector16<scalar_t>;
  if (g.multiplier != 1 || g.dst_channels % V != 0) return std::nullopt;
  const int64_t channel_vectors = g.dst_channels / V;
  const int vectors = channel_vectors_per_block(channel_vectors);
  const int lanes = kThreads / vectors;
  const int64_t channel_blocks = (channel_vectors + vectors - 1) / vectors;
  if (channel_blocks > 65535) return std::nullopt;
  const int64_t items = g.batch * ((g.dst_h + 1) / 2) * ((g.dst_w + 1) / 2);
  const size_t shared_bytes =
      staged_weight_bytes<at::acc_type<scalar_t, true>, scalar_t>(int64_t(g.kernel_h) * g.kernel_w, vectors);
  int64_t blocks;
  if (by_waves) {
    const int registers = kernel_registers(gpu, stride2_grad_input_channels_last_kernel_for<scalar_t, int32_t>(g),
                                           registers_within_bounds(1));
    const int64_t resident = gpu.sm_count * resident_blocks_per_sm(gpu, kThreads, shared_bytes, registers);
    blocks = walk_blocks_by_waves(items, lanes, channel_blocks, resident, kStride2StartItems);
  } else {
    // The walks' blocks for the whole grid, shared among the channel groups.
    const int64_t walks = std::max<int64_t>(
        1, walk_blocks(items * channel_blocks, lanes, kStride2ItemsPerThread, gpu) / channel_blocks);
    blocks = std::max<int64_t>(1, std::min((items + lanes - 1) / lanes, walks));
  }
  return Stride2ChannelsLastLaunch{dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(channel_blocks)),
                                   dim3(vectors, lanes), shared_bytes};
}

}  // namespace at::native::dwconv
