#pragma once
// The specialised paths of the 2D depthwise kernels (DepthwiseConv2d.cu), by name, so that
// each can be switched off at run time: a pass whose path is off takes the kernel it would
// take for a shape the path does not serve (in the end the general tiled or direct kernels).
// For measuring what each path brings (`make bench VARIANTS=ours-without-<name>`,
// notes/performance.md) and for running the fallbacks on a GPU. Nothing is switched off
// unless asked: DWCONV_DISABLE_KERNELS=<name>,<name> at first use, then
// torch.ops.dwconv.disable_kernels([...]) (DepthwiseConv2dKernelPaths.cpp).
// Plain logic, free of ATen.

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace at::native::dwconv {

enum class KernelPath : int {
  ChannelsLastTiled,               // forward and backward-input, channels_last, 16-byte channel vectors
  RegisterTiled,                   // forward and backward-input, NCHW, 3x3/5x5/7x7 register tiles
  RegisterTiledGradWeight,         // the weight gradient of the same
  ChannelsLastRegisterGradWeight,  // the weight gradient, channels_last, 3x3/5x5/7x7
  LargeFilter,                     // forward and backward-input, filters of 16 taps or more
  LargeFilterGradWeight,           // the weight gradient of the same
  Row,                             // conv1d, NCHW: all three passes
  Column,                          // conv1d, channels_last: all three passes
  Stride2GradInput,                // backward-input at stride 2, 3x3 and 5x5
  RegisterTiledStride2,            // the register tiles at stride 2 (forward and weight gradient)
  TileVectorLoads,                 // register tiles staged from 16-byte global loads
  ChannelsLastRegisterTiled,       // forward and backward-input, channels_last, 3x3/5x5/7x7 register tiles
  ChannelsLastRingGradWeight,      // the weight gradient, channels_last, 3x3/5x5/7x7, staged rows in a ring
  ChannelsLastStream,              // forward and backward-input, channels_last, 3x3/5x5/7x7, a band of rows streamed
  ChannelsLastWindowGradWeight,    // the weight gradient, channels_last, 3x3/5x5/7x7, a thread's K^2 sums, rows read once
  Pixel,                           // forward and backward-input, both layouts, 3x3/5x5, a thread a pixel: small grids
  ChannelsLastMma,                 // forward and backward-input, channels_last bf16/fp16 3x3/5x5, warp matrix products
  StagedGradOutput,                // the NCHW register-tiled weight gradient's small planes of grad_output via shared memory
  ChannelsLastWalkGradWeight,      // the weight gradient, channels_last, 3x3, a thread's window walked down in registers
  WindowSharedOptIn,               // the window weight gradient's blocks past 48 KB of shared memory (opt_in_shared_bytes)
  ChannelsLastMmaGradWeight,       // the weight gradient, channels_last bf16/fp16 5x5/7x7, warp matrix products
  ChannelsLastMmaThreeBlocks,      // the channels_last_mma 3x3 one-tile instances bounded for three blocks an SM
  ChannelsLastRegisterTiledThreeBlocks,  // channels_last_register_tiled's bf16/fp16 3x3/5x5 ones, the same
  PlaneStream,                     // forward and backward-input, NCHW float, small planes, chunks of planes streamed
  PlaneStreamVectorRows,           // the plane stream's src rows at a pitch of 16-byte vectors, read as vectors
  PlaneStreamGradWeight,           // the weight gradient, NCHW float, small planes, a group's planes streamed an entry at a time
  RowBackward,                     // conv1d, NCHW: grad_input and grad_weight asked together, from one kernel
  ColumnBackward,                  // conv1d, channels_last, padding below K: both gradients from one kernel, or the weight's alone
  PlaneStreamLargePlanes,          // the plane stream (all three passes) on planes up to 64x64 floats, 3x3/5x5 stride 1
  RegisterTiledGradWeightWaves,    // register_tiled_grad_weight's slices cut for the fewest waves at its compiled registers
  StreamBandWaves,                 // the streamed channels_last kernels' bands cut for the fewest waves x steps
  Stride2GradInputWaves,           // the channels_last stride-2 backward-input's blocks for the fewest waves x items
  kCount
};

inline constexpr std::array<std::string_view, static_cast<int>(KernelPath::kCount)> kKernelPathNames = {
    "channels_last_tiled", "register_tiled", "register_tiled_grad_weight", "channels_last_register_grad_weight",
    "large_filter", "large_filter_grad_weight", "row", "column", "stride2_grad_input", "register_tiled_stride2",
    "tile_vector_loads", "channels_last_register_tiled", "channels_last_ring_grad_weight", "channels_last_stream",
    "channels_last_window_grad_weight", "pixel", "channels_last_mma", "staged_grad_output",
    "channels_last_walk_grad_weight", "window_shared_opt_in", "channels_last_mma_grad_weight",
    "channels_last_mma_three_blocks", "channels_last_register_tiled_three_blocks", "plane_stream",
    "plane_stream_vector_rows", "plane_stream_grad_weight", "row_backward", "column_backward",
    "plane_stream_large_planes", "register_tiled_grad_weight_waves", "stream_band_waves",
    "stride2_grad_input_waves"};

using KernelPathMask = std::uint32_t;
// A path is a bit of the mask: one more than it holds would shift past its width.
static_assert(static_cast<int>(KernelPath::kCount) <= std::numeric_limits<KernelPathMask>::digits,
              "more kernel paths than KernelPathMask has bits: widen it");

constexpr bool every_kernel_path_named() {
  for (const auto name : kKernelPathNames) {
    if (name.empty()) return false;
  }
  return true;
}
static_assert(every_kernel_path_named(), "a KernelPath without its name in kKernelPathNames");

// The mask of the named paths, or false with the first name that is not one (`unknown`).
inline bool kernel_path_mask(const std::vector<std::string>& names, KernelPathMask* mask, std::string* unknown) {
  KernelPathMask parsed = 0;
  for (const auto& name : names) {
    int found = -1;
    for (int p = 0; p < static_cast<int>(kKernelPathNames.size()); ++p) {
      if (kKernelPathNames[p] == name) found = p;
    }
    if (found < 0) {
      *unknown = name;
      return false;
    }
    parsed |= KernelPathMask{1} << found;
  }
  *mask = parsed;
  return true;
}

// "a,b" as {"a", "b"}; spaces around names and empty items are dropped.
inline std::vector<std::string> split_kernel_path_list(std::string_view text) {
  std::vector<std::string> names;
  while (!text.empty()) {
    const auto comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) names.emplace_back(item);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return names;
}

inline std::vector<std::string> kernel_path_names(KernelPathMask mask) {
  std::vector<std::string> names;
  for (int p = 0; p < static_cast<int>(kKernelPathNames.size()); ++p) {
    if (mask >> p & 1) names.emplace_back(kKernelPathNames[p]);
  }
  return names;
}

// The paths switched off now (DepthwiseConv2dKernelPaths.cpp); DepthwiseConv2dKernelChoice.cuh
// chooses the kernels around them.
std::atomic<KernelPathMask>& disabled_kernel_paths();

} // namespace at::native::dwconv
