#pragma once
// What the CUDA kernels (cuda/DepthwiseConv2d.cu) and the Meta kernels (DepthwiseConvMeta.cpp) of
// the depthwise convolutions must agree on: the argument checks, so that a bad call fails alike
// on both, with the same message, on concrete (int64_t) or symbolic (c10::SymInt) sizes (`name`
// is conv_depthwise2d or conv_depthwise3d); and the 2D outputs' memory format.

#include <ATen/core/Tensor.h>
#include <ATen/native/ConvUtils.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace at::native::depthwise_checks {

template <typename T>
ArrayRef<T> sizes_of(const Tensor& t);

template <>
inline IntArrayRef sizes_of<int64_t>(const Tensor& t) {
  return t.sizes();
}

template <>
inline SymIntArrayRef sizes_of<c10::SymInt>(const Tensor& t) {
  return t.sym_sizes();
}

template <typename T>
bool all_at_least(ArrayRef<T> values, int64_t least) {
  for (const auto& v : values) {
    if (v < least) return false;
  }
  return true;
}

template <typename T>
bool all_at_most(ArrayRef<T> values, int64_t most) {
  for (const auto& v : values) {
    if (v > most) return false;
  }
  return true;
}

// The kernels hold a convolution's geometry in int.
constexpr int64_t kMaxGeometry = std::numeric_limits<int32_t>::max();

// The checks of the arguments and of input and weight, then the output's sizes, which must not be
// empty. The device is the caller's to check.
template <typename T>
std::vector<T> checked_output_sizes(const char* name, int64_t spatial_dims, const Tensor& input,
                                    const Tensor& weight, ArrayRef<T> kernel_size, ArrayRef<T> stride,
                                    ArrayRef<T> padding, ArrayRef<T> dilation) {
  const auto dims = static_cast<size_t>(spatial_dims);
  TORCH_CHECK(kernel_size.size() == dims, name, ": kernel_size must have ", dims, " elements, got ", kernel_size.size());
  TORCH_CHECK(stride.size() == dims, name, ": stride must have ", dims, " elements, got ", stride.size());
  TORCH_CHECK(padding.size() == dims, name, ": padding must have ", dims, " elements, got ", padding.size());
  TORCH_CHECK(dilation.size() == dims, name, ": dilation must have ", dims, " elements, got ", dilation.size());
  const ArrayRef<T> weight_sizes = sizes_of<T>(weight), input_sizes = sizes_of<T>(input);
  TORCH_CHECK(weight.dim() == spatial_dims + 2 && weight_sizes[1] == 1, name, ": weight must have shape (out_channels, 1, ",
              spatial_dims == 2 ? "kH, kW" : "kT, kH, kW", "), got ", weight_sizes);
  TORCH_CHECK(kernel_size == weight_sizes.slice(2), name, ": kernel_size ", kernel_size, " does not match the weight's ",
              weight_sizes);
  TORCH_CHECK(all_at_least(kernel_size, 1), name, ": kernel_size must be positive, got ", kernel_size);
  TORCH_CHECK(all_at_least(stride, 1), name, ": stride must be positive, got ", stride);
  TORCH_CHECK(all_at_least(dilation, 1), name, ": dilation must be positive, got ", dilation);
  TORCH_CHECK(all_at_least(padding, 0), name, ": padding must be non-negative, got ", padding);
  TORCH_CHECK(all_at_most(kernel_size, kMaxGeometry) && all_at_most(stride, kMaxGeometry) &&
                  all_at_most(padding, kMaxGeometry) && all_at_most(dilation, kMaxGeometry),
              name, ": kernel_size, stride, padding and dilation must each be at most ", kMaxGeometry, ", got ",
              kernel_size, ", ", stride, ", ", padding, ", ", dilation);
  TORCH_CHECK(input.dim() == spatial_dims + 2, name, ": expected a ", spatial_dims + 2, "-D input ",
              spatial_dims == 2 ? "(N, C, H, W)" : "(N, C, T, H, W)", ", got ", input.dim(), "-D");
  TORCH_CHECK(input_sizes[1] > 0 && weight_sizes[0] >= input_sizes[1] && weight_sizes[0] % input_sizes[1] == 0, name,
              ": out_channels (", weight_sizes[0], ") must be a positive multiple of in_channels (", input_sizes[1], ")");
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), name, ": input is ", input.scalar_type(), " but weight is ",
              weight.scalar_type());
  TORCH_CHECK(all_at_least(input_sizes.slice(2), 1), name, ": empty spatial input ", input_sizes);
  for (size_t d = 0; d < dims; ++d) {  // the spans the kernels work out in int
    TORCH_CHECK((kernel_size[d] - 1) * dilation[d] + 1 <= kMaxGeometry &&
                    input_sizes[d + 2] + padding[d] * 2 <= kMaxGeometry,
                name, ": the dilated kernel ", kernel_size, " x ", dilation, " or the padded input ", input_sizes,
                " + 2 x ", padding, " spans more than ", kMaxGeometry);
  }
  std::vector<T> sizes = conv_output_size(input_sizes, weight_sizes, padding, stride, dilation);
  TORCH_CHECK(all_at_least(ArrayRef<T>(sizes).slice(2), 1), name, ": the output would be empty: input ", input_sizes,
              ", kernel ", kernel_size, ", stride ", stride, ", padding ", padding, ", dilation ", dilation, " give ",
              ArrayRef<T>(sizes));
  return sizes;
}

// A bias, where there is one, holds out_channels values of the input's dtype.
inline void check_bias(const char* name, const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias) {
  if (!bias.has_value() || !bias->defined()) return;
  TORCH_CHECK(bias->dim() <= 1 && bias->sym_numel() == weight.sym_size(0), name, ": bias must have out_channels (",
              weight.sym_size(0), ") elements, got ", bias->sym_sizes());
  TORCH_CHECK(bias->scalar_type() == input.scalar_type(), name, ": input is ", input.scalar_type(), " but bias is ",
              bias->scalar_type());
}

// The backward's grad_output: of the input's dtype and the convolution's output's shape.
template <typename T>
void check_grad_output(const char* name, const Tensor& grad_output, const Tensor& input,
                       const std::vector<T>& output_sizes) {
  TORCH_CHECK(grad_output.scalar_type() == input.scalar_type(), name, "_backward: input is ", input.scalar_type(),
              " but grad_output is ", grad_output.scalar_type());
  TORCH_CHECK(sizes_of<T>(grad_output) == ArrayRef<T>(output_sizes), name, "_backward: grad_output has shape ",
              sizes_of<T>(grad_output), " but the convolution's output has shape ", ArrayRef<T>(output_sizes));
}

// The dtypes the kernels are compiled for (AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16)), refused
// as that dispatch refuses them (NotImplementedError, `dispatch_name` the kernel's), for the Meta
// kernels to do what the CUDA kernels do: which reach no dispatch for an empty batch of `input`.
inline void check_dtype(const char* dispatch_name, const Tensor& t, const Tensor& input) {
  if (input.sym_size(0) == 0) return;
  const auto dtype = t.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(dtype == kDouble || dtype == kFloat || dtype == kHalf || dtype == kBFloat16, '"',
                              dispatch_name, "\" not implemented for '", c10::toString(dtype), "'");
}

// The 2D kernels' layout, which their output and grad_input take: channels_last where the input
// suggests it, else contiguous.
inline MemoryFormat layout_2d(const Tensor& input) {
  return input.suggest_memory_format() == MemoryFormat::ChannelsLast ? MemoryFormat::ChannelsLast
                                                                     : MemoryFormat::Contiguous;
}

} // namespace at::native::depthwise_checks
