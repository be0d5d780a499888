// The Meta kernels of aten::_conv_depthwise2d_backward and aten::_conv_depthwise3d_backward
// (native_functions_overrides/native_functions/depthwise_backward.yaml): the checks and the
// outputs' shapes, dtypes and memory formats of the CUDA kernels, with symbolic sizes, so
// that fake tensors and torch.compile can trace the ops. In libtorch_cpu, with the other
// Meta kernels.
//
// As the CUDA kernels: grad_input has the input's shape, in the 2D kernel's layout (channels_last
// when the input suggests it, else contiguous) and contiguous in 3D (upstream's 3D kernel);
// grad_weight has the weight's shape, contiguous; both in grad_output's dtype.

#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/native/ConvUtils.h>
#include <c10/util/Exception.h>

#ifndef AT_PER_OPERATOR_HEADERS
#include <ATen/Functions.h>
#include <ATen/NativeFunctions.h>
#else
#include <ATen/ops/_conv_depthwise2d_backward_native.h>
#include <ATen/ops/_conv_depthwise3d_backward_native.h>
#include <ATen/ops/empty.h>
#endif

#include <array>
#include <tuple>

namespace at::native {
namespace {

bool all_at_least(SymIntArrayRef values, int64_t least) {
  for (const auto& v : values) {
    if (v < least) return false;
  }
  return true;
}

std::tuple<Tensor, Tensor> depthwise_backward_meta(
    const char* op,
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
  const int64_t dims = spatial_dims + 2;
  TORCH_CHECK(self.dim() == dims, op, ": expected a ", dims, "-D input, got ", self.dim(), "-D");
  TORCH_CHECK(weight.dim() == dims && weight.sym_size(1) == 1, op,
              ": weight must have shape (out_channels, 1, <kernel>), got ", weight.sym_sizes());
  TORCH_CHECK(kernel_size.size() == static_cast<size_t>(spatial_dims) && stride.size() == kernel_size.size() &&
                  padding.size() == kernel_size.size() && dilation.size() == kernel_size.size(),
              op, ": kernel_size, stride, padding and dilation must have ", spatial_dims, " elements each");
  TORCH_CHECK(kernel_size == weight.sym_sizes().slice(2), op, ": kernel_size ", kernel_size,
              " does not match the weight's ", weight.sym_sizes());
  TORCH_CHECK(all_at_least(stride, 1), op, ": stride must be positive, got ", stride);
  TORCH_CHECK(all_at_least(dilation, 1), op, ": dilation must be positive, got ", dilation);
  TORCH_CHECK(all_at_least(padding, 0), op, ": padding must be non-negative, got ", padding);
  TORCH_CHECK(self.sym_size(1) > 0 && weight.sym_size(0) % self.sym_size(1) == 0, op, ": out_channels (",
              weight.sym_size(0), ") must be a multiple of in_channels (", self.sym_size(1), ")");
  TORCH_CHECK(weight.scalar_type() == self.scalar_type() && grad_output.scalar_type() == self.scalar_type(), op,
              ": input, weight and grad_output must have one dtype, got ", self.scalar_type(), ", ",
              weight.scalar_type(), " and ", grad_output.scalar_type());
  const auto output_sizes = conv_output_size(self.sym_sizes(), weight.sym_sizes(), padding, stride, dilation);
  TORCH_CHECK(grad_output.sym_sizes() == SymIntArrayRef(output_sizes), op, ": grad_output has shape ",
              grad_output.sym_sizes(), " but the convolution's output has shape ", SymIntArrayRef(output_sizes));
  const auto options = grad_output.options();
  Tensor grad_input =
      output_mask[0] ? at::empty_symint(self.sym_sizes(), options.memory_format(grad_input_format)) : Tensor();
  Tensor grad_weight = output_mask[1] ? at::empty_symint(weight.sym_sizes(), options) : Tensor();
  return std::make_tuple(std::move(grad_input), std::move(grad_weight));
}

} // namespace

std::tuple<Tensor, Tensor> _conv_depthwise2d_backward_meta_symint(
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    SymIntArrayRef kernel_size,
    SymIntArrayRef stride,
    SymIntArrayRef padding,
    SymIntArrayRef dilation,
    std::array<bool, 2> output_mask) {
  const auto format = self.suggest_memory_format() == MemoryFormat::ChannelsLast ? MemoryFormat::ChannelsLast
                                                                                 : MemoryFormat::Contiguous;
  return depthwise_backward_meta("conv_depthwise2d_backward", 2, grad_output, self, weight, kernel_size, stride,
                                 padding, dilation, output_mask, format);
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
  return depthwise_backward_meta("conv_depthwise3d_backward", 3, grad_output, self, weight, kernel_size, stride,
                                 padding, dilation, output_mask, MemoryFormat::Contiguous);
}

} // namespace at::native
