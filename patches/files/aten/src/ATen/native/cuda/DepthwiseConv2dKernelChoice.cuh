#pragma once
// Which kernel runs each pass of DepthwiseConv2d.cu, and its launch plan: a pure function of the
// pass's geometry, of what the pass reads of its tensors (layout, where their data start, 64-bit
// indexing), of the kernel paths switched off and of the GPU's SM count. DepthwiseConv2dLaunch.cuh
// launches what these functions return (for DepthwiseConv2d.cu, and in tests/emulator on a CPU);
// tests/emulator/kernel_choice.cpp runs them on a CPU too, so that the GPU tests' expectations of
// which kernel takes a call, and the launches `make plan-report` shows, need no GPU.
// Plain host arithmetic over the planners of the kernel headers, no ATen tensors.

#include <ATen/native/cuda/DepthwiseConv2dKernelPaths.h>
#include <ATen/native/cuda/DepthwiseConv2dChannelsLastMma.cuh>
#include <ATen/native/cuda/DepthwiseConv2dChannelsLastStream.cuh>
#include <ATen/native/cuda/DepthwiseConv2dConv1d.cuh>
#include <ATen/native/cuda/DepthwiseConv2dGeneral.cuh>
#include <ATen/native/cuda/DepthwiseConv2dLargeFilter.cuh>
#include <ATen/native/cuda/DepthwiseConv2dMmaGradWeight.cuh>
#include <ATen/native/cuda/DepthwiseConv2dPixel.cuh>
#include <ATen/native/cuda/DepthwiseConv2dPlaneStream.cuh>
#include <ATen/native/cuda/DepthwiseConv2dRegisterTiled.cuh>
#include <ATen/native/cuda/DepthwiseConv2dRingGradWeight.cuh>
#include <ATen/native/cuda/DepthwiseConv2dStride2.cuh>
#include <ATen/native/cuda/DepthwiseConv2dWalkGradWeight.cuh>
#include <ATen/native/cuda/DepthwiseConv2dWindowGradWeight.cuh>

#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <variant>

namespace at::native::dwconv {

// What a forward or backward-input pass's choice reads of its tensors: src is the input or
// grad_output, dst the output or grad_input.
struct PassOperands {
  bool nchw;           // src and dst both NCHW-contiguous
  bool channels_last;  // src and dst both channels_last-contiguous (a tensor may be both)
  std::uintptr_t src, dst, weight;  // where their data start
  int element_size;
  bool index64;  // src or dst needs 64-bit index math
};

// What the weight gradient's choice reads of grad_output and the input.
struct GradWeightOperands {
  bool nchw;           // both NCHW-contiguous
  bool channels_last;  // both channels_last-contiguous
  std::uintptr_t grad_output, input;
  int element_size;
  bool index64;
  bool with_bias = false;  // grad_bias asked for too: the kernels sum it as they read grad_output
};

// What the choice of one kernel for both gradients reads of grad_output, the input and grad_input.
struct BackwardOperands {
  bool nchw;           // all three NCHW-contiguous
  bool channels_last;  // all three channels_last-contiguous
  std::uintptr_t grad_output, input, grad_input;
  int element_size;
  bool index64;
};

// The forward and backward-input kernels, each named as its __global__ function (kernel_name).
enum class PassKernel {
  kDirect,
  kTiledNchw,
  kRegisterTiled,
  kLargeFilter,
  kTiledChannelsLast,
  kChannelsLastRegisterTiled,
  kChannelsLastStream,
  kRow,
  kColumn,
  kStride2GradInputNchw,
  kStride2GradInputChannelsLast,
  kPixel,
  kChannelsLastMma,
  kPlaneStream,
};

enum class GradWeightKernel {
  kNchw,
  kChannelsLast,
  kRow,
  kRegisterTiled,
  kChannelsLastRegister,
  kChannelsLastRing,
  kChannelsLastWindow,
  kChannelsLastWalk,
  kColumn,
  kLargeFilter,
  kChannelsLastMma,
  kPlaneStream,
  kColumnBackward,  // column_backward_kernel without grad_input
};

// The kernels that compute grad_input and the weight gradient together.
enum class BothGradientsKernel {
  kRow,
  kColumn,
};

inline const char* kernel_name(PassKernel kernel) {
  switch (kernel) {
    case PassKernel::kDirect: return "direct_kernel";
    case PassKernel::kTiledNchw: return "tiled_nchw_kernel";
    case PassKernel::kRegisterTiled: return "register_tiled_nchw_kernel";
    case PassKernel::kLargeFilter: return "large_filter_kernel";
    case PassKernel::kTiledChannelsLast: return "tiled_channels_last_kernel";
    case PassKernel::kChannelsLastRegisterTiled: return "channels_last_register_tiled_kernel";
    case PassKernel::kChannelsLastStream: return "channels_last_stream_kernel";
    case PassKernel::kRow: return "row_kernel";
    case PassKernel::kColumn: return "column_kernel";
    case PassKernel::kStride2GradInputNchw: return "stride2_grad_input_nchw_kernel";
    case PassKernel::kStride2GradInputChannelsLast: return "stride2_grad_input_channels_last_kernel";
    case PassKernel::kPixel: return "pixel_kernel";
    case PassKernel::kChannelsLastMma: return "channels_last_mma_kernel";
    case PassKernel::kPlaneStream: return "plane_stream_kernel";
  }
  return "?";
}

inline const char* kernel_name(GradWeightKernel kernel) {
  switch (kernel) {
    case GradWeightKernel::kNchw: return "grad_weight_nchw_kernel";
    case GradWeightKernel::kChannelsLast: return "grad_weight_channels_last_kernel";
    case GradWeightKernel::kRow: return "grad_weight_row_kernel";
    case GradWeightKernel::kRegisterTiled: return "grad_weight_register_tiled_kernel";
    case GradWeightKernel::kChannelsLastRegister: return "grad_weight_register_channels_last_kernel";
    case GradWeightKernel::kChannelsLastRing: return "grad_weight_ring_kernel";
    case GradWeightKernel::kChannelsLastWindow: return "grad_weight_window_kernel";
    case GradWeightKernel::kChannelsLastWalk: return "grad_weight_walk_kernel";
    case GradWeightKernel::kColumn: return "grad_weight_column_kernel";
    case GradWeightKernel::kLargeFilter: return "grad_weight_large_filter_kernel";
    case GradWeightKernel::kChannelsLastMma: return "grad_weight_mma_kernel";
    case GradWeightKernel::kPlaneStream: return "plane_stream_grad_weight_kernel";
    case GradWeightKernel::kColumnBackward: return "column_backward_kernel";
  }
  return "?";
}

inline const char* kernel_name(BothGradientsKernel kernel) {
  switch (kernel) {
    case BothGradientsKernel::kRow: return "row_backward_kernel";
    case BothGradientsKernel::kColumn: return "column_backward_kernel";
  }
  return "?";
}

struct DirectLaunch {};  // the grid follows from dst alone
struct ColumnLaunch {
  dim3 grid;
};
struct Stride2NchwLaunch {
  dim3 grid;
  int access_values;  // grad_input values a store moves (register_tile_access_values)
};

// A forward or backward-input pass: the kernel, the geometry it reads (the forward's; for
// backward-input the stride-1 correlation where a tiled kernel takes it, else
// backward_input_direct's) and its plan (the alternative the kernel launches with).
struct PassChoice {
  PassKernel kernel;
  PassGeometry geometry;
  std::variant<DirectLaunch, TiledLaunch, RegisterTiledLaunch, ChannelsLastLaunch, ChannelsLastStreamLaunch, RowLaunch,
               ColumnLaunch, Stride2NchwLaunch, Stride2ChannelsLastLaunch, PixelLaunch, ChannelsLastMmaLaunch,
               PlaneStreamLaunch>
      plan;
};

struct GradWeightChoice {
  GradWeightKernel kernel;
  std::variant<GradWeightPlan, RowGradWeightLaunch, RegisterGradWeightLaunch, ColumnGradWeightLaunch,
               ChannelsLastGradWeightLaunch, RingGradWeightLaunch, LargeFilterGradWeightLaunch,
               PlaneStreamGradWeightLaunch>
      plan;
};

// The kernel paths a choice may take: all but those `disabled` names (DepthwiseConv2dKernelPaths.h).
class EnabledPaths {
 public:
  explicit EnabledPaths(KernelPathMask disabled) : disabled_(disabled) {}
  bool on(KernelPath path) const { return !(disabled_ >> static_cast<int>(path) & 1); }
  // The register tiles at g's stride: `path`, and at stride 2 the stride-2 tiles too.
  bool register_tiles(KernelPath path, const PassGeometry& g) const {
    return on(path) && (g.stride_h == 1 || on(KernelPath::RegisterTiledStride2));
  }

 private:
  KernelPathMask disabled_;
};

inline bool is_16_byte_aligned(std::uintptr_t address) {
  return address % 16 == 0;
}

namespace choice_detail {

// The kernels that read the pass as a stride-1 correlation (the forward at any stride), in the
// order they are preferred; nothing where none takes it.
template <typename scalar_t>
std::optional<PassChoice> choose_tiled(const PassGeometry& g, const PassOperands& t, const EnabledPaths& paths,
                                       const GpuLimits& gpu) {
  using acc_t = at::acc_type<scalar_t, true>;
  const bool index32 = !t.index64;  // the specialised kernels are compiled for 32-bit indexing only
  const bool aligned = is_16_byte_aligned(t.src) && is_16_byte_aligned(t.dst);
  // A grid the GPU holds at once: a thread a pixel, ahead of every tile.
  if (index32 && paths.on(KernelPath::Pixel) &&
      (t.nchw || (t.channels_last && aligned && is_16_byte_aligned(t.weight)))) {
    if (auto plan = plan_pixel<scalar_t>(g, !t.nchw, gpu)) return PassChoice{PassKernel::kPixel, g, *plan};
  }
  // The large-filter kernel takes either layout and any alignment.
  if (index32 && (t.nchw || t.channels_last) && paths.on(KernelPath::LargeFilter)) {
    if (auto plan = plan_large_filter<acc_t>(g, gpu)) {
      plan->tile.row_access = t.nchw && register_tile_row_access(g, reinterpret_cast<const void*>(t.dst),
                                                                 t.element_size);
      return PassChoice{PassKernel::kLargeFilter, g, *plan};
    }
  }
  if (t.nchw) {
    if (index32 && paths.on(KernelPath::Row) && has_row_kernel(g) && aligned) {
      return PassChoice{PassKernel::kRow, g, plan_row(g, t.element_size, gpu)};
    }
    // Small float planes, a pass that fills the GPU: chunks of whole planes streamed.
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (index32 && aligned && paths.on(KernelPath::PlaneStream)) {
        if (auto plan = plan_plane_stream<scalar_t>(g, gpu, paths.on(KernelPath::PlaneStreamVectorRows),
                                                    paths.on(KernelPath::PlaneStreamLargePlanes))) {
          return PassChoice{PassKernel::kPlaneStream, g, *plan};
        }
      }
    }
    if (index32 && paths.register_tiles(KernelPath::RegisterTiled, g)) {
      if (auto plan = plan_register_tiled<acc_t>(g, gpu)) {
        plan->tile.row_access = register_tile_row_access(g, reinterpret_cast<const void*>(t.dst), t.element_size);
        plan->tile.vector_loads = paths.on(KernelPath::TileVectorLoads) &&
                                  register_tile_vector_loads(g, reinterpret_cast<const void*>(t.src), t.element_size);
        return PassChoice{PassKernel::kRegisterTiled, g, *plan};
      }
    }
    if (auto plan = plan_tiled<acc_t>(g)) return PassChoice{PassKernel::kTiledNchw, g, *plan};
    return std::nullopt;
  }
  // channels_last: every kernel moves whole 16-byte channel vectors.
  if (!t.channels_last || !aligned) return std::nullopt;
  if (index32 && paths.on(KernelPath::Column) && has_column_kernel(g, kVector16<scalar_t>) &&
      is_16_byte_aligned(t.weight)) {
    // A segment a thread: a cap would leave some threads two segments and the rest one.
    return PassChoice{PassKernel::kColumn, g,
                      ColumnLaunch{plan_column(g, kVector16<scalar_t>, std::numeric_limits<int32_t>::max())}};
  }
  if (index32 && paths.on(KernelPath::ChannelsLastMma) && is_16_byte_aligned(t.weight)) {  // its filters' copies
    if (auto plan = plan_channels_last_mma<scalar_t>(g, gpu, paths.on(KernelPath::ChannelsLastMmaThreeBlocks),
                                                     paths.on(KernelPath::StreamBandWaves))) {
      return PassChoice{PassKernel::kChannelsLastMma, g, *plan};
    }
  }
  if (index32 && paths.on(KernelPath::ChannelsLastStream)) {
    if (auto plan = plan_channels_last_stream<scalar_t>(g, gpu, paths.on(KernelPath::StreamBandWaves))) {
      return PassChoice{PassKernel::kChannelsLastStream, g, *plan};
    }
  }
  if (index32 && paths.on(KernelPath::ChannelsLastRegisterTiled)) {
    if (auto plan = plan_channels_last_register_tiled<scalar_t>(g, gpu.sm_count)) {
      plan->three_blocks = paths.on(KernelPath::ChannelsLastRegisterTiledThreeBlocks) &&
                           register_tiled_three_blocks_serve(sizeof(scalar_t), g.kernel_h, g.stride_h);
      return PassChoice{PassKernel::kChannelsLastRegisterTiled, g, *plan};
    }
  }
  if (paths.on(KernelPath::ChannelsLastTiled)) {
    if (auto plan = plan_tiled_channels_last<scalar_t>(g, gpu.sm_count)) {
      return PassChoice{PassKernel::kTiledChannelsLast, g, *plan};
    }
  }
  return std::nullopt;
}

// Backward-input at stride 2 (g: backward_input_direct's geometry) through a stride-2 kernel.
template <typename scalar_t>
std::optional<PassChoice> choose_stride2_grad_input(const PassGeometry& g, const PassOperands& t,
                                                    const EnabledPaths& paths, const GpuLimits& gpu) {
  if (t.index64 || !paths.on(KernelPath::Stride2GradInput) || !has_stride2_grad_input(g)) return std::nullopt;
  if (t.nchw) {
    return PassChoice{PassKernel::kStride2GradInputNchw, g,
                      Stride2NchwLaunch{plan_stride2_grad_input_nchw(g, gpu),
                                        register_tile_access_values(g, reinterpret_cast<const void*>(t.dst),
                                                                    t.element_size)}};
  }
  if (t.channels_last && is_16_byte_aligned(t.src) && is_16_byte_aligned(t.dst)) {
    if (auto plan = plan_stride2_grad_input_channels_last<scalar_t>(g, gpu, paths.on(KernelPath::Stride2GradInputWaves))) {
      return PassChoice{PassKernel::kStride2GradInputChannelsLast, g, *plan};
    }
  }
  return std::nullopt;
}

}  // namespace choice_detail

// The forward pass of `fwd` (src = input, dst = output).
template <typename scalar_t>
PassChoice choose_forward(const PassGeometry& fwd, const PassOperands& t, KernelPathMask disabled, const GpuLimits& gpu) {
  const EnabledPaths paths(disabled);
  if (auto tiled = choice_detail::choose_tiled<scalar_t>(fwd, t, paths, gpu)) return *tiled;
  return PassChoice{PassKernel::kDirect, fwd, DirectLaunch{}};
}

// Backward-input of the forward pass `fwd` (src = grad_output, dst = grad_input): the tiled
// kernels where it is a stride-1 correlation, else a stride-2 kernel where one takes it, else
// the direct kernel.
template <typename scalar_t>
PassChoice choose_backward_input(const PassGeometry& fwd, const PassOperands& t, KernelPathMask disabled,
                                 const GpuLimits& gpu) {
  const EnabledPaths paths(disabled);
  const PassGeometry direct = backward_input_direct(fwd);
  if (const auto correlation = backward_input_as_correlation(fwd)) {
    if (auto tiled = choice_detail::choose_tiled<scalar_t>(*correlation, t, paths, gpu)) return *tiled;
  } else if (auto stride2 = choice_detail::choose_stride2_grad_input<scalar_t>(direct, t, paths, gpu)) {
    return *stride2;
  }
  return PassChoice{PassKernel::kDirect, direct, DirectLaunch{}};
}

// The weight gradient of the forward pass g.
template <typename scalar_t>
GradWeightChoice choose_grad_weight(const PassGeometry& g, const GradWeightOperands& t, KernelPathMask disabled,
                                    const GpuLimits& gpu) {
  using acc_t = at::acc_type<scalar_t, true>;
  const EnabledPaths paths(disabled);
  const bool index32 = !t.index64;  // the specialised kernels are compiled for 32-bit indexing only
  const bool aligned = is_16_byte_aligned(t.grad_output) && is_16_byte_aligned(t.input);
  const auto* grad_output = reinterpret_cast<const void*>(t.grad_output);
  const auto* input = reinterpret_cast<const void*>(t.input);
  if (index32 && t.nchw && paths.on(KernelPath::Row) && has_row_kernel(g) && aligned) {
    return {GradWeightKernel::kRow, plan_row_grad_weight(g, t.element_size, gpu)};
  }
  // Small float planes, a pass that fills the GPU: a group's planes streamed an entry at a time.
  if constexpr (std::is_same_v<scalar_t, float>) {
    if (index32 && t.nchw && aligned && paths.on(KernelPath::PlaneStreamGradWeight)) {
      if (auto plan = plan_plane_stream_grad_weight<scalar_t>(g, gpu, paths.on(KernelPath::PlaneStreamVectorRows),
                                                              paths.on(KernelPath::PlaneStreamLargePlanes))) {
        return {GradWeightKernel::kPlaneStream, *plan};
      }
    }
  }
  if (index32 && t.nchw && paths.register_tiles(KernelPath::RegisterTiledGradWeight, g)) {
    if (auto plan = plan_register_grad_weight<scalar_t>(g, gpu, register_tile_row_access(g, grad_output, t.element_size),
                                                        paths.on(KernelPath::StagedGradOutput),
                                                        paths.on(KernelPath::RegisterTiledGradWeightWaves))) {
      plan->tile.vector_loads = paths.on(KernelPath::TileVectorLoads) &&
                                register_tile_vector_loads(g, input, t.element_size);
      return {GradWeightKernel::kRegisterTiled, *plan};
    }
  }
  if (index32 && t.channels_last && aligned && paths.on(KernelPath::Column)) {
    if (paths.on(KernelPath::ColumnBackward) && has_column_backward(g, t.element_size)) {
      return {GradWeightKernel::kColumnBackward, plan_column_backward(g, t.element_size, gpu)};
    }
    if (has_column_kernel(g, kVector16<scalar_t>)) {
      return {GradWeightKernel::kColumn, plan_column_grad_weight(g, kVector16<scalar_t>, gpu)};
    }
  }
  if constexpr (kWarpMatrixType<scalar_t>) {
    if (index32 && t.channels_last && aligned && paths.on(KernelPath::ChannelsLastMmaGradWeight) &&
        has_mma_grad_weight(g, t.element_size, gpu.compute_capability)) {
      if (auto plan = plan_mma_grad_weight<scalar_t>(g, gpu)) return {GradWeightKernel::kChannelsLastMma, *plan};
    }
  }
  if (index32 && t.channels_last && aligned && paths.on(KernelPath::ChannelsLastWalkGradWeight) &&
      has_walk_grad_weight(g, t.element_size)) {
    if (auto plan = plan_walk_grad_weight<scalar_t>(g, gpu)) return {GradWeightKernel::kChannelsLastWalk, *plan};
  }
  if (index32 && t.channels_last && aligned && paths.on(KernelPath::ChannelsLastWindowGradWeight) &&
      has_window_grad_weight(g, t.element_size)) {
    if (auto plan = plan_window_grad_weight<scalar_t>(g, gpu, paths.on(KernelPath::WindowSharedOptIn))) {
      return {GradWeightKernel::kChannelsLastWindow, *plan};
    }
  }
  if (index32 && t.channels_last && aligned && paths.on(KernelPath::ChannelsLastRingGradWeight) &&
      has_ring_grad_weight(g, t.element_size)) {
    if (auto plan = plan_ring_grad_weight<scalar_t>(g, gpu, t.with_bias)) {
      return {GradWeightKernel::kChannelsLastRing, *plan};
    }
  }
  if (index32 && t.channels_last && paths.on(KernelPath::ChannelsLastRegisterGradWeight) &&
      has_channels_last_register_grad_weight(g, grad_output, input, t.element_size)) {
    return {GradWeightKernel::kChannelsLastRegister, plan_channels_last_register_grad_weight<scalar_t>(g, gpu)};
  }
  if (index32 && (t.nchw || t.channels_last) && paths.on(KernelPath::LargeFilterGradWeight)) {
    if (auto plan = plan_large_filter_grad_weight<acc_t>(g, gpu)) return {GradWeightKernel::kLargeFilter, *plan};
  }
  const GradWeightPlan plan = plan_grad_weight(g, t.nchw, gpu);
  return {plan.channels_last ? GradWeightKernel::kChannelsLast : GradWeightKernel::kNchw, plan};
}

// One kernel for both gradients, and its plan.
struct BothGradientsChoice {
  BothGradientsKernel kernel;
  std::variant<RowGradWeightLaunch, ColumnGradWeightLaunch> plan;
};

// Both gradients of the forward pass g from one kernel, where one takes them (the conv1d kernels'
// row_backward_kernel in NCHW, column_backward_kernel in channels_last); else nothing, and each
// gradient takes its own pass. The row or column path switched off switches its kernel off too.
template <typename scalar_t>
std::optional<BothGradientsChoice> choose_both_gradients(const PassGeometry& g, const BackwardOperands& t,
                                                         KernelPathMask disabled, const GpuLimits& gpu) {
  const EnabledPaths paths(disabled);
  const bool aligned = is_16_byte_aligned(t.grad_output) && is_16_byte_aligned(t.input) &&
                       is_16_byte_aligned(t.grad_input);
  if (t.index64 || !aligned) return std::nullopt;
  if (t.nchw && paths.on(KernelPath::Row) && paths.on(KernelPath::RowBackward) && has_row_backward(g)) {
    return BothGradientsChoice{BothGradientsKernel::kRow, plan_row_backward(g, t.element_size, gpu)};
  }
  if (t.channels_last && paths.on(KernelPath::Column) && paths.on(KernelPath::ColumnBackward) &&
      has_column_backward(g, t.element_size)) {
    return BothGradientsChoice{BothGradientsKernel::kColumn, plan_column_backward(g, t.element_size, gpu)};
  }
  return std::nullopt;
}

}  // namespace at::native::dwconv
