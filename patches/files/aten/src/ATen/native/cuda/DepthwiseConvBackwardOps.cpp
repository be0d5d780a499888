// The CUDA kernels of aten::_conv_depthwise2d_backward and aten::_conv_depthwise3d_backward
// (native_functions_overrides/native_functions/depthwise_backward.yaml), and the operator
// dwconv::conv_depthwise2d_backward with its CUDA kernel.
//
// Upstream reaches the depthwise backward kernels only through DispatchStubs. The 3D op runs
// the stub convolution_backward runs (upstream's 3D kernel); the 2D op runs the patch set's 2D
// backward (which is what the 2D stub runs too, in a patched build or while the overlay is
// enabled) in the input's layout: a channels_last input gets a channels_last grad_input with no
// copy, as _conv_depthwise2d gives a channels_last output (the stub, for upstream's callers, gives
// upstream's contiguous grad_input). Both check their arguments; the bias gradient is not theirs
// to compute (it is grad_output summed over every dimension but the channels, see
// derivatives/depthwise.yaml).
//
// dwconv::conv_depthwise2d_backward is the 2D backward with the bias gradient as well
// (output_mask[2]), summed by the weight-gradient kernel as it reads grad_output, so a training
// step of a biased layer reads grad_output once less. The routing's convolution_backward calls it
// (DepthwiseConvRouting.cpp). It is the project's operator, not aten's: upstream's
// _conv_depthwise2d_backward keeps its signature, and its derivatives stay as they are. Its
// kernel is always registered (the overlay's switch hands aten's operators back, not this one).

#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/native/cuda/DepthwiseConv2d.h>
#include <torch/library.h>

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
  auto [grad_input, grad_weight, grad_bias] = dwconv::depthwise2d_backward_with_bias_cuda(
      grad_output, self, weight, kernel_size, stride, padding, dilation, {output_mask[0], output_mask[1], false});
  return std::make_tuple(std::move(grad_input), std::move(grad_weight));
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

TORCH_LIBRARY_FRAGMENT(dwconv, m) {
  m.def(
      "conv_depthwise2d_backward(Tensor grad_output, Tensor self, Tensor weight, int[2] kernel_size, int[2] stride, "
      "int[2] padding, int[2] dilation, bool[3] output_mask) -> (Tensor grad_input, Tensor grad_weight, "
      "Tensor grad_bias)");
}

TORCH_LIBRARY_IMPL(dwconv, CUDA, m) {
  m.impl("conv_depthwise2d_backward", TORCH_FN(at::native::dwconv::depthwise2d_backward_with_bias_cuda));
}
