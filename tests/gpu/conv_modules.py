"""Depthwise modules, inputs and training steps of the routing's GPU tests, and the operator names
and kernel namespace the profiler shows for each route."""

import torch

OUR_FORWARD = "aten::_conv_depthwise2d"
OUR_BACKWARD = "dwconv::conv_depthwise2d_backward"  # the backward with the bias gradient (DepthwiseConvBackwardOps.cpp)
CUDNN_OPS = {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}
OUR_KERNELS = "at::native::dwconv::"  # in the demangled name of every CUDA kernel of ours


def depthwise_module(conv1d=False, channels=64, kernel=3, stride=1, multiplier=1, bias=True, dtype=torch.bfloat16,
                     channels_last=True):
    cls = torch.nn.Conv1d if conv1d else torch.nn.Conv2d
    padding = 3 if conv1d else kernel // 2
    m = cls(channels, channels * multiplier, kernel, stride=stride, padding=padding, groups=channels, bias=bias)
    m = m.to(device="cuda", dtype=dtype)
    return m.to(memory_format=torch.channels_last) if channels_last and not conv1d else m


def make_input(module, batch=4, length=28, channels_last=True):
    channels = module.in_channels
    dtype = module.weight.dtype
    if isinstance(module, torch.nn.Conv1d):
        x = torch.randn(batch, channels, length, device="cuda", dtype=dtype)
        return x.transpose(1, 2).contiguous().transpose(1, 2) if channels_last else x
    x = torch.randn(batch, channels, length, length, device="cuda", dtype=dtype)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def layout(t):
    """The strides that matter: those of dimensions longer than 1."""
    return tuple(stride for size, stride in zip(t.shape, t.stride()) if size > 1)


def train_step(module, x, grad=None):
    """Output, grad_input, grad_weight and grad_bias (None without a bias) of one training step with
    the gradient `grad` (random if not given), the parameters' gradients set anew."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    out = module(x)
    out.backward(torch.randn_like(out) if grad is None else grad)
    # a copy of the output: a replayed CUDA graph writes the next step's into the same memory
    return out.detach().clone(), x.grad, module.weight.grad, None if module.bias is None else module.bias.grad
