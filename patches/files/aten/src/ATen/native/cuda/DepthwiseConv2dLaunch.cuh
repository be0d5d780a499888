#pragma once
// Launches the kernel a choice of DepthwiseConv2dKernelChoice.cuh names, on raw pointers: the
// launch code of DepthwiseConv2d.cu, which tests/emulator also runs on a CPU (through its own
// DWCONV_LAUNCH), so that the path from a call's choice to its kernel's arguments is checked
// there too. No ATen tensors, and no CUDA runtime calls but the opt-in past 48 KB of shared memory;
// the caller checks the launches.

#include <ATen/AccumulateType.h>
#include <ATen/native/cuda/DepthwiseConv2dChannelsLastMma.cuh>
#include <ATen/native/cuda/DepthwiseConv2dChannelsLastStream.cuh>
#include <ATen/native/cuda/DepthwiseConv2dConv1d.cuh>
#include <ATen/native/cuda/DepthwiseConv2dGeneral.cuh>
#include <ATen/native/cuda/DepthwiseConv2dKernelChoice.cuh>
#include <ATen/native/cuda/DepthwiseConv2dLargeFilter.cuh>
#include <ATen/native/cuda/DepthwiseConv2dMmaGradWeight.cuh>
#include <ATen/native/cuda/DepthwiseConv2dPixel.cuh>
#include <ATen/native/cuda/DepthwiseConv2dPlaneStream.cuh>
#include <ATen/native/cuda/DepthwiseConv2dRegisterTiled.cuh>
#include <ATen/native/cuda/DepthwiseConv2dRingGradWeight.cuh>
#include <ATen/native/cuda/DepthwiseConv2dWalkGradWeight.cuh>
#include <ATen/native/cuda/DepthwiseConv2dWindowGradWeight.cuh>
#include <ATen/native/cuda/DepthwiseConv2dStride2.cuh>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <variant>

// kernel<<<grid, block, shared_bytes, stream>>>(args...), a macro so that the CPU emulator can
// supply its own launch.
#ifndef DWCONV_LAUNCH
#define DWCONV_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<grid, block, shared_bytes, stream>>>(__VA_ARGS__)
#endif

// Allows `kernel` up to `shared_bytes` of dynamic shared memory, past the 48 KB every kernel may
// take. Its callers pass opt_in_shared_bytes(gpu), the same for every launch on a device, so that
// host threads launching at once never lower each other's allowance. A macro, so that the CPU
// emulator checks that every launch past 48 KB was allowed what it takes.
#ifndef DWCONV_OPT_IN_SHARED_BYTES
#include <c10/cuda/CUDAException.h>
#define DWCONV_OPT_IN_SHARED_BYTES(kernel, shared_bytes) \
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes)))
#endif

namespace at::native::dwconv {

// Some kernels are built for some element types, or one pass, only: the choice gives them no other,
// so their launches compile no other instance. A choice that reached one with another is a bug, and
// must fail here rather than return with the output unwritten.
template <typename scalar_t>
void refuse_unbuilt_instance(const char* kernel, const char* pass) {
  TORCH_INTERNAL_ASSERT(false, "depthwise conv: ", kernel, " was chosen for a ", pass, " in ",
                        c10::toString(c10::CppTypeToScalarType<scalar_t>::value), ", which it is not built for");
}

// A forward or backward-input pass's tensors: src (input or grad_output) into dst (output or
// grad_input), with the strides the direct and large-filter kernels read.
template <typename scalar_t>
struct PassPointers {
  const scalar_t* src;
  const scalar_t* weight;
  const scalar_t* bias;  // null: none (always for backward-input)
  scalar_t* dst;
  Strides4 src_strides, dst_strides;
};

// The weight gradient's tensors. `partial` holds grad_weight_slices(choice) x channels x taps
// sums, which grad_weight_finish_kernel adds in a fixed order into grad_weight; with a bias
// gradient, `partial_bias` holds slices x channels sums of grad_output, which every kernel takes
// as it reads grad_output, for grad_bias (both null: none; the choice is made with_bias).
template <typename scalar_t>
struct GradWeightPointers {
  const scalar_t* grad_output;
  const scalar_t* input;
  at::acc_type<scalar_t, true>* partial;
  scalar_t* grad_weight;
  Strides4 grad_output_strides, input_strides;
  at::acc_type<scalar_t, true>* partial_bias = nullptr;
  scalar_t* grad_bias = nullptr;
};

// A thread an element, at most 32 blocks an SM (the kernels walk the rest).
inline dim3 elementwise_grid(int64_t total, const GpuLimits& gpu) {
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, gpu.sm_count * 32);
  return dim3(static_cast<unsigned>(std::max<int64_t>(blocks, 1)));
}

// The grid, block and dynamic shared memory a choice is launched with.
struct LaunchShape {
  dim3 grid, block;
  size_t shared_bytes;
};

inline LaunchShape launch_shape(const PassChoice& choice, const GpuLimits& gpu) {
  return std::visit(
      [&](const auto& plan) -> LaunchShape {
        using Plan = std::decay_t<decltype(plan)>;
        if constexpr (std::is_same_v<Plan, DirectLaunch>) {
          const PassGeometry& g = choice.geometry;
          return {elementwise_grid(g.batch * g.dst_channels * g.dst_h * g.dst_w, gpu), dim3(kThreads), 0};
        } else if constexpr (std::is_same_v<Plan, RowLaunch> || std::is_same_v<Plan, ColumnLaunch> ||
                             std::is_same_v<Plan, Stride2NchwLaunch>) {
          return {plan.grid, dim3(kThreads), 0};
        } else if constexpr (std::is_same_v<Plan, PixelLaunch>) {
          return {plan.grid, plan.block, 0};
        } else {
          return {plan.grid, plan.block, plan.shared_bytes};
        }
      },
      choice.plan);
}

inline LaunchShape launch_shape(const GradWeightChoice& choice) {
  return std::visit(
      [](const auto& plan) -> LaunchShape {
        using Plan = std::decay_t<decltype(plan)>;
        if constexpr (std::is_same_v<Plan, GradWeightPlan>) {
          return {dim3(static_cast<unsigned>(plan.channel_blocks), static_cast<unsigned>(plan.slices)),
                  plan.channels_last ? dim3(kChannelLanes, kPositionLanes) : dim3(kThreads), 0};
        } else if constexpr (std::is_same_v<Plan, RowGradWeightLaunch>) {
          return {plan.grid, dim3(kThreads), 0};
        } else if constexpr (std::is_same_v<Plan, ColumnGradWeightLaunch>) {
          return {plan.grid, plan.block, 0};
        } else {
          return {plan.grid, plan.block, plan.shared_bytes};
        }
      },
      choice.plan);
}

// Whether a grid-stride loop over `total` items, launched as `shape`, steps its counter past
// INT32_MAX: its last thread's last step reaches total - 1 + the grid's threads. A tensor 32-bit
// indexing can address may still be that close to 2^31 elements, so such a loop counts in 64 bits.
inline bool grid_stride_overflows_int32(int64_t total, const LaunchShape& shape) {
  const int64_t threads = int64_t(shape.grid.x) * shape.grid.y * shape.grid.z * shape.block.x * shape.block.y *
                          shape.block.z;
  return total - 1 + threads > std::numeric_limits<int32_t>::max();
}

// f(int32_t{}) or f(int64_t{}): the index type of a kernel compiled for both.
template <typename F>
void with_index_type(bool index64, F&& f) {
  if (index64) {
    f(int64_t{});
  } else {
    f(int32_t{});
  }
}

// Launches the pass `choice` names (forward, or backward-input when kBackward). The specialised
// kernels are compiled for 32-bit indexing only, which the choice respects.
template <typename scalar_t, bool kBackward, typename Stream>
void launch_pass(const PassChoice& choice, bool index64, const PassPointers<scalar_t>& p, const GpuLimits& gpu,
                 Stream stream) {
  constexpr const char* kPassName = kBackward ? "backward-input pass" : "forward pass";
  const PassGeometry& g = choice.geometry;
  const LaunchShape shape = launch_shape(choice, gpu);
  switch (choice.kernel) {
    case PassKernel::kLargeFilter: {
      const auto& plan = std::get<RegisterTiledLaunch>(choice.plan);
      const auto kernel = large_filter_kernel<scalar_t, int32_t, kBackward>;
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                    plan.tile, p.src_strides, p.dst_strides);
      break;
    }
    case PassKernel::kRegisterTiled: {
      const auto& plan = std::get<RegisterTiledLaunch>(choice.plan);
      const auto kernel = register_tiled_kernel_for<scalar_t, int32_t, kBackward>(g.kernel_h, g.stride_h);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                    plan.tile);
      break;
    }
    case PassKernel::kChannelsLastRegisterTiled: {
      const auto& plan = std::get<ChannelsLastLaunch>(choice.plan);
      const auto kernel = channels_last_register_tiled_kernel_for<scalar_t, int32_t, kBackward>(g.kernel_h, g.stride_h,
                                                                                              plan.three_blocks);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                    plan.tile);
      break;
    }
    case PassKernel::kChannelsLastStream: {
      const auto& plan = std::get<ChannelsLastStreamLaunch>(choice.plan);
      const auto kernel = channels_last_stream_kernel_for<scalar_t, kBackward>(g.kernel_h, g.stride_h);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                    plan.stream);
      break;
    }
    case PassKernel::kChannelsLastMma: {
      if constexpr (sizeof(scalar_t) == 2) {  // the choice gives it bfloat16 and half only
        const auto& plan = std::get<ChannelsLastMmaLaunch>(choice.plan);
        const auto kernel = channels_last_mma_kernel_for<scalar_t, kBackward>(g.kernel_h, g.stride_h, plan.mma.tiles,
                                                                              plan.mma.three_blocks);
        DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                      plan.mma);
      } else {
        refuse_unbuilt_instance<scalar_t>(kernel_name(choice.kernel), kPassName);
      }
      break;
    }
    case PassKernel::kPlaneStream: {
      if constexpr (std::is_same_v<scalar_t, float>) {  // the choice gives it float only
        const auto& plan = std::get<PlaneStreamLaunch>(choice.plan);
        const auto kernel = plane_stream_kernel_for<scalar_t, kBackward>(g.kernel_h, g.stride_h, plan.stream.vector_rows);
        DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                      plan.stream);
      } else {
        refuse_unbuilt_instance<scalar_t>(kernel_name(choice.kernel), kPassName);
      }
      break;
    }
    case PassKernel::kRow: {
      const auto& plan = std::get<RowLaunch>(choice.plan);
      const auto kernel = row_kernel_for<scalar_t, int32_t, kBackward>(g.kernel_w);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                    plan.chunks_per_row);
      break;
    }
    case PassKernel::kColumn: {
      const auto kernel = column_kernel_for<scalar_t, int32_t, kBackward>(g.kernel_w);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g);
      break;
    }
    case PassKernel::kTiledNchw: {
      const auto& plan = std::get<TiledLaunch>(choice.plan);
      with_index_type(index64, [&](auto index) {
        const auto kernel = tiled_nchw_kernel<scalar_t, decltype(index), kBackward>;
        DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                      plan.cols_per_thread, plan.tile_in_h, plan.tile_in_w);
      });
      break;
    }
    case PassKernel::kTiledChannelsLast: {
      const auto& plan = std::get<ChannelsLastLaunch>(choice.plan);
      with_index_type(index64, [&](auto index) {
        const auto kernel = tiled_channels_last_kernel<scalar_t, decltype(index), kBackward>;
        DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                      plan.tile);
      });
      break;
    }
    case PassKernel::kStride2GradInputNchw:
    case PassKernel::kStride2GradInputChannelsLast: {
      if constexpr (kBackward) {  // the choice gives a stride-2 kernel to backward-input only
        if (choice.kernel == PassKernel::kStride2GradInputNchw) {
          const auto& plan = std::get<Stride2NchwLaunch>(choice.plan);
          const auto kernel = stride2_grad_input_nchw_kernel_for<scalar_t, int32_t>(g);
          DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.dst, g,
                        plan.access_values);
        } else {
          const auto kernel = stride2_grad_input_channels_last_kernel_for<scalar_t, int32_t>(g);
          DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.dst, g);
        }
      } else {
        refuse_unbuilt_instance<scalar_t>(kernel_name(choice.kernel), kPassName);
      }
      break;
    }
    case PassKernel::kPixel: {
      const auto& plan = std::get<PixelLaunch>(choice.plan);
      const auto kernel = pixel_kernel_for<scalar_t, kBackward>(g.kernel_h, g.stride_h, plan.channels_last);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst, g,
                    plan.items);
      break;
    }
    case PassKernel::kDirect: {
      const int64_t total = g.batch * g.dst_channels * g.dst_h * g.dst_w;
      const bool channels_fastest = p.dst_strides.c == 1 && g.dst_channels > 1;
      with_index_type(index64 || grid_stride_overflows_int32(total, shape), [&](auto index) {
        using index_t = decltype(index);
        const auto kernel = direct_kernel<scalar_t, index_t, kBackward>;
        DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.src, p.weight, p.bias, p.dst,
                      g, p.src_strides, p.dst_strides, channels_fastest, static_cast<index_t>(total));
      });
      break;
    }
  }
}

// How many slices the chosen weight-gradient kernel (GradWeightChoice, or BothGradientsChoice's) sums
// into `partial`: its grid's y.
template <typename Choice>
int64_t grad_weight_slices(const Choice& choice) {
  return launch_shape(choice).grid.y;
}

// The sum of a weight-gradient kernel's `slices` slices of sums into grad_weight, and of its bias sums
// into grad_bias where that is not null (g: the forward geometry).
template <typename scalar_t, typename Stream>
void launch_grad_weight_finish(const PassGeometry& g, int64_t slices, const at::acc_type<scalar_t, true>* partial,
                               scalar_t* grad_weight, const at::acc_type<scalar_t, true>* partial_bias,
                               scalar_t* grad_bias, const GpuLimits& gpu, Stream stream) {
  const int64_t values = g.dst_channels * g.kernel_h * g.kernel_w;
  const int64_t bias_values = grad_bias != nullptr ? g.dst_channels : 0;
  const auto finish = grad_weight_finish_kernel<scalar_t>;
  DWCONV_LAUNCH(finish, finish_grid(values + bias_values, gpu), finish_block(), 0, stream, partial, grad_weight,
                slices, values, partial_bias, grad_bias, g.dst_channels);
}

// Launches the weight-gradient kernel `choice` names (g: the forward geometry), then the sum of
// its slices into grad_weight.
template <typename scalar_t, typename Stream>
void launch_grad_weight(const GradWeightChoice& choice, bool index64, const PassGeometry& g,
                        const GradWeightPointers<scalar_t>& p, const GpuLimits& gpu, Stream stream) {
  const int taps = g.kernel_h * g.kernel_w;
  const LaunchShape shape = launch_shape(choice);
  switch (choice.kernel) {
    case GradWeightKernel::kRow: {
      const auto& plan = std::get<RowGradWeightLaunch>(choice.plan);
      const auto kernel = grad_weight_row_kernel_for<scalar_t, int32_t>(g.kernel_w);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, p.partial,
                    p.partial_bias, g, plan.chunks_per_row, plan.chunks_per_slice);
      break;
    }
    case GradWeightKernel::kRegisterTiled: {
      const auto& plan = std::get<RegisterGradWeightLaunch>(choice.plan);
      const auto kernel = grad_weight_register_tiled_kernel_for<scalar_t, int32_t>(g.kernel_h, g.stride_h,
                                                                                   plan.work.go_stride > 0);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, p.partial,
                    p.partial_bias, g, plan.tile, plan.work);
      break;
    }
    case GradWeightKernel::kColumn: {
      const auto& plan = std::get<ColumnGradWeightLaunch>(choice.plan);
      const auto kernel = grad_weight_column_kernel_for<scalar_t, int32_t>(g.kernel_w);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, p.partial,
                    p.partial_bias, g, plan.items_per_slice);
      break;
    }
    case GradWeightKernel::kColumnBackward: {
      const auto& plan = std::get<ColumnGradWeightLaunch>(choice.plan);
      const auto kernel = column_backward_kernel_for<scalar_t, int32_t, false>(g.kernel_w);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, nullptr,
                    nullptr, p.partial, p.partial_bias, g, plan.items_per_slice);
      break;
    }
    case GradWeightKernel::kChannelsLastRegister: {
      const auto& plan = std::get<ChannelsLastGradWeightLaunch>(choice.plan);
      const auto kernel = grad_weight_register_channels_last_kernel_for<scalar_t, int32_t>(g.kernel_h, g.stride_h);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, p.partial,
                    p.partial_bias, g, plan.work);
      break;
    }
    case GradWeightKernel::kChannelsLastRing:
    case GradWeightKernel::kChannelsLastWindow:
    case GradWeightKernel::kChannelsLastWalk:
    case GradWeightKernel::kChannelsLastMma: {
      const auto& plan = std::get<RingGradWeightLaunch>(choice.plan);
      const auto kernel = choice.kernel == GradWeightKernel::kChannelsLastRing
                              ? grad_weight_ring_kernel_for<scalar_t>(g.kernel_h, g.stride_h)
                          : choice.kernel == GradWeightKernel::kChannelsLastWindow
                              ? grad_weight_window_kernel_for<scalar_t>(g.kernel_h, g.stride_h)
                          : choice.kernel == GradWeightKernel::kChannelsLastWalk
                              ? grad_weight_walk_kernel_for<scalar_t>(g.stride_h)
                              : grad_weight_mma_kernel_for<scalar_t>(g.kernel_h);  // never null
      if (shape.shared_bytes > kMaxSharedBytes) DWCONV_OPT_IN_SHARED_BYTES(kernel, opt_in_shared_bytes(gpu));
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, p.partial,
                    p.partial_bias, g, plan.work);
      break;
    }
    case GradWeightKernel::kPlaneStream: {
      if constexpr (std::is_same_v<scalar_t, float>) {  // the choice gives it float only
        const auto& plan = std::get<PlaneStreamGradWeightLaunch>(choice.plan);
        const auto kernel = plane_stream_grad_weight_kernel_for<scalar_t>(g.kernel_h, g.stride_h,
                                                                          plan.work.stream.vector_rows);
        if (plan.shared_bytes > kMaxSharedBytes) DWCONV_OPT_IN_SHARED_BYTES(kernel, opt_in_shared_bytes(gpu));
        DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, p.partial,
                      p.partial_bias, g, plan.work);
      } else {
        refuse_unbuilt_instance<scalar_t>(kernel_name(choice.kernel), "weight gradient");
      }
      break;
    }
    case GradWeightKernel::kLargeFilter: {
      const auto& plan = std::get<LargeFilterGradWeightLaunch>(choice.plan);
      const auto kernel = grad_weight_large_filter_kernel<scalar_t, int32_t>;
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, p.partial,
                    p.partial_bias, g, plan.tile, plan.work, p.grad_output_strides, p.input_strides);
      break;
    }
    case GradWeightKernel::kNchw:
    case GradWeightKernel::kChannelsLast: {
      const auto& plan = std::get<GradWeightPlan>(choice.plan);
      with_index_type(index64, [&](auto index) {
        using index_t = decltype(index);
        if (plan.channels_last) {
          const auto kernel = grad_weight_channels_last_kernel_for<scalar_t, index_t>(taps);
          DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input,
                        p.partial, p.partial_bias, g, p.grad_output_strides, p.input_strides, plan.rows_per_slice);
        } else {
          const auto kernel = grad_weight_nchw_kernel_for<scalar_t, index_t>(taps);
          DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input,
                        p.partial, p.partial_bias, g, plan.rows_per_slice);
        }
      });
      break;
    }
  }
  launch_grad_weight_finish<scalar_t>(g, grad_weight_slices(choice), p.partial, p.grad_weight, p.partial_bias,
                                      p.grad_bias, gpu, stream);
}

// Both gradients' tensors: grad_input, and the weight gradient's as GradWeightPointers holds them.
template <typename scalar_t>
struct BackwardPointers {
  const scalar_t* grad_output;
  const scalar_t* input;
  const scalar_t* weight;
  scalar_t* grad_input;
  at::acc_type<scalar_t, true>* partial;  // plan.grid.y x channels x taps sums
  scalar_t* grad_weight;
  at::acc_type<scalar_t, true>* partial_bias = nullptr;  // with grad_bias: plan.grid.y x channels
  scalar_t* grad_bias = nullptr;
};

inline LaunchShape launch_shape(const BothGradientsChoice& choice) {
  return std::visit(
      [](const auto& plan) -> LaunchShape {
        if constexpr (std::is_same_v<std::decay_t<decltype(plan)>, RowGradWeightLaunch>) {
          return {plan.grid, dim3(kThreads), 0};
        } else {
          return {plan.grid, plan.block, 0};
        }
      },
      choice.plan);
}

// Launches the kernel choose_both_gradients chose, as it planned it (g: the forward geometry), then the
// sum of its slices into grad_weight (and grad_bias).
template <typename scalar_t, typename Stream>
void launch_both_gradients(const BothGradientsChoice& choice, const PassGeometry& g, const BackwardPointers<scalar_t>& p,
                           const GpuLimits& gpu, Stream stream) {
  const LaunchShape shape = launch_shape(choice);
  switch (choice.kernel) {
    case BothGradientsKernel::kRow: {
      const auto& plan = std::get<RowGradWeightLaunch>(choice.plan);
      const auto kernel = row_backward_kernel_for<scalar_t, int32_t>(g.kernel_w);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, p.weight,
                    p.grad_input, p.partial, p.partial_bias, g, plan.chunks_per_row, plan.chunks_per_slice);
      break;
    }
    case BothGradientsKernel::kColumn: {
      const auto& plan = std::get<ColumnGradWeightLaunch>(choice.plan);
      const auto kernel = column_backward_kernel_for<scalar_t, int32_t, true>(g.kernel_w);
      DWCONV_LAUNCH(kernel, shape.grid, shape.block, shape.shared_bytes, stream, p.grad_output, p.input, p.weight,
                    p.grad_input, p.partial, p.partial_bias, g, plan.items_per_slice);
      break;
    }
  }
  launch_grad_weight_finish<scalar_t>(g, grad_weight_slices(choice), p.partial, p.grad_weight, p.partial_bias,
                                      p.grad_bias, gpu, stream);
}

}  // namespace at::native::dwconv
