#pragma once
// Entry points of the project's depthwise 2D kernels (DepthwiseConv2d.cu) that
// are not declared by upstream headers: the CUDA kernel of
// conv_depthwise2d_backward_stub, so that the overlay can switch it on and off, and the
// backward with the bias gradient, the CUDA kernel of dwconv::conv_depthwise2d_backward
// (DepthwiseConvBackwardOps.cpp), which the routing calls.

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <array>
#include <tuple>

namespace at::native::dwconv {

std::tuple<Tensor, Tensor> depthwise2d_backward_cuda(
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    IntArrayRef kernel_size,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    std::array<bool, 2> output_mask);

// output_mask[2]: grad_bias too, grad_output summed over all but the channels; with grad_weight
// it comes from the weight-gradient kernel, which sums grad_output as it reads it, else from a
// sum of its own.
std::tuple<Tensor, Tensor, Tensor> depthwise2d_backward_with_bias_cuda(
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    IntArrayRef kernel_size,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    std::array<bool, 3> output_mask);

} // namespace at::native::dwconv
