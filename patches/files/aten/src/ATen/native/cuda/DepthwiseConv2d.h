#pragma once
// Entry points of the project's depthwise 2D kernels (DepthwiseConv2d.cu) that
// are not declared by upstream headers: the CUDA kernel of
// conv_depthwise2d_backward_stub, so that the overlay can switch it on and off.

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

} // namespace at::native::dwconv
