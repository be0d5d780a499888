// The Meta kernels of aten::_conv_depthwise2d and of the backward ops the overrides add,
// aten::_conv_depthwise2d_backward and aten::_conv_depthwise3d_backward
// (native_functions_overrides/native_functions/depthwise_meta.yaml, depthwise_backward.yaml):
// the CUDA kernels' argument checks, with their messages, and their outputs' shapes, dtypes and
// memory formats, on sizes that may be symbolic, so that fake tensors and torch.compile can
// trace the ops. In libtorch_cpu, with the other Meta kernels.
//
// As the CUDA kernels: the 2D output and grad_input take the input's layout (channels_last when
// the input suggests it, else contiguous); upstream's 3D kernel gives a contiguous grad_input;
// grad_weight has the weight's shape, contiguous; outputs take the input's (the forward) or
// grad_output's (the backward) dtype.

#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/native/ConvUtils.h>
#include <c10/util/Exception.h>

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

bool all_at_least(SymIntArrayRef values, int64_t least) {
  for (const auto& v : values) {
    if (v < least) return false;
  }
  return true;
}

MemoryFormat layout_2d(const Tensor& input) {
  return input.suggest_memory_format() == MemoryFormat::ChannelsLast ? MemoryFormat::ChannelsLast
                                                                     : MemoryFormat::Contiguous;
}

// The checks conv_depthwise2d_cuda makes before it allocates (DepthwiseConv2d.cu), for `spatial_dims`
// 2 or 3; `name` is conv_depthwise2d or conv_depthwise3d. Returns the output's sizes.
std::vector<SymInt> checked_output_sizes(const char* name, int64_t spatial_dims, const Tensor& input,
                                         const Tensor& weight, SymIntArrayRef kernel_size, SymIntArrayRef stride,
                                         SymIntArrayRef padding, SymIntArrayRef dilation) {
  const auto dims = static_cast<size_t>(spatial_dims);
  const char* kernel_dims = spatial_dims == 2 ? "kH, kW" : "kT, kH, kW";
  const char* input_dims = spatial_dims == 2 ? "(N, C, H, W)" : "(N, C, T, H, W)";
  TORCH_CHECK(kernel_size.size() == dims, name, ": kernel_size must have ", dims, " elements, got ", kernel_size.size());
  TORCH_CHECK(stride.size() == dims, name, ": stride must have ", dims, " elements, got ", stride.size());
  TORCH_CHECK(padding.size() == dims, name, ": padding must have ", dims, " elements, got ", padding.size());
  TORCH_CHECK(dilation.size() == dims, name, ": dilation must have ", dims, " elements, got ", dilation.size());
  TORCH_CHECK(weight.dim() == spatial_dims + 2 && weight.sym_size(1) == 1, name,
              ": weight must have shape (out_channels, 1, ", kernel_dims, "), got ", weight.sym_sizes());
  TORCH_CHECK(kernel_size == weight.sym_sizes().slice(2), name, ": kernel_size ", kernel_size,
              " does not match the weight's ", weight.sym_sizes());
  TORCH_CHECK(all_at_least(stride, 1), name, ": stride must be positive, got ", stride);
  TORCH_CHECK(all_at_least(dilation, 1), name, ": dilation must be positive, got ", dilation);
  TORCH_CHECK(all_at_least(padding, 0), name, ": padding must be non-negative, got ", padding);
  TORCH_CHECK(input.dim() == spatial_dims + 2, name, ": expected a ", spatial_dims + 2, "-D input ", input_dims,
              ", got ", input.dim(), "-D");
  TORCH_CHECK(input.sym_size(1) > 0 && weight.sym_size(0) % input.sym_size(1) == 0, name, ": out_channels (",
              weight.sym_size(0), ") must be a multiple of in_channels (", input.sym_size(1), ")");
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), name, ": input is ", input.scalar_type(),
              " but weight is ", weight.scalar_type());
  TORCH_CHECK(all_at_least(input.sym_sizes().slice(2), 1), name, ": empty spatial input ", input.sym_sizes());
  auto sizes = conv_output_size(input.sym_sizes(), weight.sym_sizes(), padding, stride, dilation);
  TORCH_CHECK(all_at_least(SymIntArrayRef(sizes).slice(2), 1), name, ": the output would be empty: input ",
              input.sym_sizes(), ", kernel ", kernel_size, ", stride ", stride, ", padding ", padding, ", dilation ",
              dilation, " give ", SymIntArrayRef(sizes));
  return sizes;
}

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
  const auto output_sizes =
      checked_output_sizes(name, spatial_dims, self, weight, kernel_size, stride, padding, dilation);
  TORCH_CHECK(grad_output.scalar_type() == self.scalar_type(), name, "_backward: input is ", self.scalar_type(),
              " but grad_output is ", grad_output.scalar_type());
  TORCH_CHECK(grad_output.sym_sizes() == SymIntArrayRef(output_sizes), name, "_backward: grad_output has shape ",
              grad_output.sym_sizes(), " but the convolution's output has shape ", SymIntArrayRef(output_sizes));
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
  const auto sizes = checked_output_sizes("conv_depthwise2d", 2, input, weight, kernel_size, stride, padding, dilation);
  if (bias_opt.has_value() && bias_opt->defined()) {
    const Tensor& bias = *bias_opt;
    TORCH_CHECK(bias.dim() <= 1 && bias.sym_numel() == weight.sym_size(0), "conv_depthwise2d: bias must have "
                "out_channels (", weight.sym_size(0), ") elements, got ", bias.sym_sizes());
    TORCH_CHECK(bias.scalar_type() == input.scalar_type(), "conv_depthwise2d: input is ", input.scalar_type(),
                " but bias is ", bias.scalar_type());
  }
  return at::empty_symint(sizes, input.options().memory_format(layout_2d(input)));
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
                                 dilation, output_mask, layout_2d(self));
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
