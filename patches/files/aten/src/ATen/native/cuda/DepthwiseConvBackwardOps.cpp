// The CUDA kernels of aten::_conv_depthwise2d_backward and aten::_conv_depthwise3d_backward
// (native_functions_overrides/native_functions/depthwise_backward.yaml).
//
// Upstream reaches the depthwise backward kernels only through DispatchStubs. These ops
// run the very same stubs that convolution_backward runs, so an op call and a
// convolution backward always run the same kernel, whichever is registered with the stub
// (the patch set's in a patched build or while the overlay is enabled).
// The stubs check their arguments; the bias gradient is not theirs to compute (it is
// grad_output summed over every dimension but the channels, see derivatives/depthwise.yaml).

#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/native/ConvUtils.h>

#ifndef AT_PER_OPERATOR_HEADERS
#include <ATen/NativeFunctions.h>
#else
#include <ATen/ops/_conv_depthwise2d_backward_native.h>
#include <ATen/ops/_conv_depthwise3d_backward_native.h>
#endif

#include <array>
#include <tuple>

namespace at::native {

std::tuple<Tensor, Tensor> _conv_depthwise2d_backward_cuda(
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    IntArrayRef kernel_size,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    std::array<bool, 2> output_mask) {
  return conv_depthwise2d_backward_stub(
      kCUDA, grad_output, self, weight, kernel_size, stride, padding, dilation, output_mask);
}

std::tuple<Tensor, Tensor> _conv_depthwise3d_backward_cuda(
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    IntArrayRef kernel_size,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    std::array<bool, 2> output_mask) {
  auto [grad_input, grad_weight, grad_bias] = conv_depthwise3d_backward_stub(
      kCUDA, grad_output, self, weight, kernel_size, stride, padding, dilation,
      std::array<bool, 3>{output_mask[0], output_mask[1], false});
  return std::make_tuple(std::move(grad_input), std::move(grad_weight));
}

} // namespace at::native
