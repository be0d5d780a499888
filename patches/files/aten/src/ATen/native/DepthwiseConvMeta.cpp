// The Meta kernels of aten::_conv_depthwise2d and of the backward ops the overrides add,
// aten::_conv_depthwise2d_backward and aten::_conv_depthwise3d_backward
// (native_functions_overrides/native_functions/depthwise_meta.yaml, depthwise_backward.yaml):
// the CUDA kernels' argument checks (DepthwiseConvChecks.h, which the CUDA kernels make too) and
// their outputs' shapes, dtypes and memory formats, on sizes that may be symbolic, so that fake tensors and torch.compile can
// trace the ops. In libtorch_cpu, with the other Meta kernels.
//
// As the CUDA kernels: the 2D output and grad_input take the input's layout (channels_last when
// the input suggests it, else contiguous); upstream's 3D kernel gives a contiguous grad_input;
// grad_weight has the weight's shape, contiguous; outputs take the input's (the forward) or
// grad_output's (the backward) dtype.

#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/native/DepthwiseConvChecks.h>

#ifndef AT_PER_OPERATOR_HEADERS
#include <ATen/Functions.h>
#include <ATen/NativeFunctions.h>
#else
#include <ATen/ops/_conv_depthwise2d_backward_native.h>
#include <ATen/ops/_conv_depthwise2d_native.h>
#include <ATen/ops/_conv_depthwise3d_backward_native.h>
#include <ATen/ops/empty.h>
#endif

#include <array>
#include <optional>
#include <tuple>
#include <vector>

namespace at::native {
namespace {

std::tuple<Tensor, Tensor> depthwise_backward_meta(
    const char* name,
    int64_t spatial_dims,
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    SymIntArrayRef kernel_size,
    SymIntArrayRef stride,
    SymIntArrayRef padding,
    SymIntArrayRef dilation,
    std::array<bool, 2> output_mask,
    MemoryFormat grad_input_format) {
  const auto output_sizes = depthwise_checks::checked_output_sizes(name, spatial_dims, self, weight, kernel_size,
                                                                   stride, padding, dilation);
  depthwise_checks::check_grad_output(name, grad_output, self, output_sizes);
  const auto options = grad_output.options();
  Tensor grad_input =
      output_mask[0] ? at::empty_symint(self.sym_sizes(), options.memory_format(grad_input_format)) : Tensor();
  Tensor grad_weight = output_mask[1] ? at::empty_symint(weight.sym_sizes(), options) : Tensor();
  return std::make_tuple(std::move(grad_input), std::move(grad_weight));
}

} // namespace

Tensor _conv_depthwise2d_meta_symint(
    const Tensor& input,
    const Tensor& weight,
    SymIntArrayRef kernel_size,
    const std::optional<Tensor>& bias_opt,
    SymIntArrayRef stride,
    SymIntArrayRef padding,
    SymIntArrayRef dilation) {
  const auto sizes = depthwise_checks::checked_output_sizes("conv_depthwise2d", 2, input, weight, kernel_size, stride,
                                                            padding, dilation);
  depthwise_checks::check_bias("conv_depthwise2d", input, weight, bias_opt);
  return at::empty_symint(sizes, input.options().memory_format(depthwise_checks::layout_2d(input)));
}

std::tuple<Tensor, Tensor> _conv_depthwise2d_backward_meta_symint(
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    SymIntArrayRef kernel_size,
    SymIntArrayRef stride,
    SymIntArrayRef padding,
    SymIntArrayRef dilation,
    std::array<bool, 2> output_mask) {
  return depthwise_backward_meta("conv_depthwise2d", 2, grad_output, self, weight, kernel_size, stride, padding,
                                 dilation, output_mask, depthwise_checks::layout_2d(self));
}

std::tuple<Tensor, Tensor> _conv_depthwise3d_backward_meta_symint(
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    SymIntArrayRef kernel_size,
    SymIntArrayRef stride,
    SymIntArrayRef padding,
    SymIntArrayRef dilation,
    std::array<bool, 2> output_mask) {
  return depthwise_backward_meta("conv_depthwise3d", 3, grad_output, self, weight, kernel_size, stride, padding,
                                 dilation, output_mask, MemoryFormat::Contiguous);
}

} // namespace at::native
