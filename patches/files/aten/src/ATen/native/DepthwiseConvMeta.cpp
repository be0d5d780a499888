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
// grad_output's (the backward) dtype. The 3D backward's CUDA kernel is upstream's, so its Meta
// kernel makes upstream's checks (DepthwiseConv3d.cu's conv_depthwise_shape_check), with its words.

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

std::tuple<Tensor, Tensor> backward_outputs(const Tensor& grad_output, const Tensor& self, const Tensor& weight,
                                            std::array<bool, 2> output_mask, MemoryFormat grad_input_format) {
  const auto options = grad_output.options();
  Tensor grad_input =
      output_mask[0] ? at::empty_symint(self.sym_sizes(), options.memory_format(grad_input_format)) : Tensor();
  Tensor grad_weight = output_mask[1] ? at::empty_symint(weight.sym_sizes(), options) : Tensor();
  return std::make_tuple(std::move(grad_input), std::move(grad_weight));
}

// Upstream's 3D backward checks, in its order and words (the device check aside: meta tensors).
void upstream_3d_checks(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                        SymIntArrayRef kernel_size, SymIntArrayRef stride, SymIntArrayRef padding,
                        SymIntArrayRef dilation) {
  constexpr int64_t dim = 3;
  TORCH_CHECK(kernel_size.size() == dim, "kernel size length should be ", dim, ", but got ", kernel_size.size());
  TORCH_CHECK(stride.size() == dim, "stride length should be ", dim, ", but got ", stride.size());
  TORCH_CHECK(padding.size() == dim, "padding length should be ", dim, ", but got ", padding.size());
  TORCH_CHECK(dilation.size() == dim, "dilation length should be ", dim, ", but got ", dilation.size());
  TORCH_CHECK(weight.defined(), "Weight must be defined.");
  TORCH_CHECK(input.dim() == dim + 1 || input.dim() == dim + 2, "Input dimension should be ", dim + 1, "D or ",
              dim + 2, "D, got ", input.dim(), "D");
  TORCH_CHECK(weight.dim() == dim + 2, "Weight dimension should be ", dim + 2, "D, got ", weight.dim(), "D");
  TORCH_CHECK(weight.sym_size(1) == 1, "Depthwise weight should have in_channels=1, got ", weight.sym_size(1));
  // (Upstream divides by zero here, a process-killing SIGFPE, for an input of no channels.)
  TORCH_CHECK(input.sym_size(-dim - 1) != 0 && weight.sym_size(0) % input.sym_size(-dim - 1) == 0,
              "Depthwise out channels should be a multiple of in channels, got ", weight.sym_size(0), " and ",
              input.sym_size(-dim - 1));
  for (int64_t i = 0; i < dim; ++i) {
    TORCH_CHECK(weight.sym_size(i + 2) == kernel_size[i], "kernel size and weight size mismatch, got ", kernel_size,
                " and ", weight.sym_sizes());
    TORCH_CHECK(stride[i] >= 1, "stride should be at least 1, got ", stride);
    TORCH_CHECK(padding[i] >= 0, "padding should be non-negative, got ", padding);
    TORCH_CHECK(dilation[i] >= 1, "dilation should be at least 1, got ", dilation);
  }
  const auto expected = conv_output_size(input.sym_sizes(), weight.sym_sizes(), padding, stride, dilation);
  TORCH_CHECK(grad_output.dim() == static_cast<int64_t>(expected.size()), "Expect grad_output to be ",
              expected.size(), "D, got ", grad_output.dim(), "D.");
  for (int64_t i = 0; i < grad_output.dim(); ++i) {
    TORCH_CHECK(grad_output.sym_size(i) == expected[i], "Expect grad_output to be of same shape as output, got ",
                grad_output.sym_size(i), " and ", expected[i], " at dimension ", i);
  }
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
  depthwise_checks::check_dtype("conv_depthwise2d_forward_cuda", input, input);
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
  const auto output_sizes = depthwise_checks::checked_output_sizes("conv_depthwise2d", 2, self, weight, kernel_size,
                                                                   stride, padding, dilation);
  depthwise_checks::check_grad_output("conv_depthwise2d", grad_output, self, output_sizes);
  // The CUDA kernel's dispatch that meets the dtype first: the input gradient's, else the weight's.
  if (output_mask[0] || output_mask[1]) {
    depthwise_checks::check_dtype(
        output_mask[0] ? "conv_depthwise2d_backward_cuda" : "conv_depthwise2d_grad_weight_cuda", grad_output, self);
  }
  return backward_outputs(grad_output, self, weight, output_mask, depthwise_checks::layout_2d(self));
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
  upstream_3d_checks(grad_output, self, weight, kernel_size, stride, padding, dilation);
  if (output_mask[0] || output_mask[1]) depthwise_checks::check_dtype("conv_depthwise3d", grad_output, self);
  return backward_outputs(grad_output, self, weight, output_mask, MemoryFormat::Contiguous);
}

} // namespace at::native
