"""The implementations `make bench` times, each as one callable per pass.

  stock    stock torch 2.11.0, automatic backend choice (overlay disabled)
  cudnn    cuDNN forced in every layout: cudnn_convolution for the forward pass, and for the
           gradients the transposed convolution's cuDNN paths (backward-data is the forward
           pass of a transposed convolution; the weight gradient of a convolution is the
           weight gradient of the transposed convolution with input and grad_output swapped);
           TF32 off and deterministic algorithms, as the routing runs cuDNN (it stands in for
           upstream's native kernel, which computes float32 exactly and the same every run), so
           that its times are what a cuDNN route costs and the comparison with ours is like for
           like (where stock runs cuDNN, the stock column has cuDNN with torch's defaults)
  native   upstream's native depthwise kernels forced (overlay disabled, cuDNN disabled)
  ours     the patch set's kernels through the overlay's operators (forced): the forward op, and
           the backward op the routing calls (dwconv::conv_depthwise2d_backward), whose weight
           gradient sums grad_output for the bias on the way
  ours-without-<path>  the same with one specialised kernel path switched off
           (dwconv_overlay.disable_kernels): what that path brings, measured (VARIANTS=...);
           ours-without-<path>+<path> switches several off together
  routed   the overlay as a user gets it: convolution / convolution_backward, routed as measured

Kernel paths switched off in the process (DWCONV_DISABLE_KERNELS) stay off in every variant: ours and
routed are then the kernels without them, and the report records which (kernel_paths_off).

Every callable takes a Buffers and returns what the pass computes: the output, grad_input,
grad_weight, or for a step the tuple (output, grad_input, grad_weight[, grad_bias]).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch

from .layers import Problem
from .schema import VARIANTS, switched_off_path, switched_off_paths

DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Buffers:
    x: torch.Tensor
    w: torch.Tensor
    b: torch.Tensor | None
    go: torch.Tensor

    def to(self, dtype: torch.dtype) -> "Buffers":
        """The same values in dtype, with the same strides (so in the same layout)."""
        return Buffers(x=self.x.to(dtype), w=self.w.to(dtype), b=None if self.b is None else self.b.to(dtype),
                       go=self.go.to(dtype))


def _in_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """channels_last: conv2d tensors in torch.channels_last; conv1d ones as the transpose
    of a (N, L, C) tensor, which is how a projection hands them to a Mamba conv1d."""
    if layout == "contiguous":
        return t.contiguous()
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def make_buffers(problem: Problem, device: str = "cuda", dtype: torch.dtype | None = None,
                 generator: torch.Generator | None = None) -> Buffers:
    dtype = dtype or DTYPES[problem.dtype]

    def rand(shape, layout):
        return _in_layout(torch.randn(shape, device=device, dtype=dtype, generator=generator), layout)

    bias = rand((problem.layer.channels,), "contiguous") if problem.layer.bias else None
    return Buffers(x=rand(problem.input_shape, problem.layout), w=rand(problem.weight_shape, "contiguous"), b=bias,
                   go=rand(problem.output_shape, problem.layout))


@dataclass(frozen=True)
class ConvArgs:
    """The convolution's arguments, as given (conv1d: 1 element) and as a 2D problem."""
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    groups: int
    kernel2d: list[int]
    stride2d: list[int]
    padding2d: list[int]
    dilation2d: list[int]
    conv1d: bool

    @classmethod
    def of(cls, problem: Problem) -> "ConvArgs":
        layer = problem.layer
        d = layer.dims
        if layer.conv1d:
            return cls([layer.stride], [layer.pad], [1], layer.channels, [1, layer.kernel], [1, layer.stride],
                       [0, layer.pad], [1, 1], True)
        return cls([layer.stride] * d, [layer.pad] * d, [1] * d, layer.channels, [layer.kernel] * 2,
                   [layer.stride] * 2, [layer.pad] * 2, [1, 1], False)

    def as4d(self, t: torch.Tensor) -> torch.Tensor:
        return t.unsqueeze(2) if self.conv1d else t

    def from4d(self, t: torch.Tensor) -> torch.Tensor:
        return t.squeeze(2) if self.conv1d else t

    def transposed_output_padding(self, problem: Problem) -> list[int]:
        """output_padding that makes the transposed convolution give back the input's size."""
        out = []
        for size, k, s, p, dil in zip((1, problem.layer.length) if self.conv1d else (problem.layer.length,) * 2,
                                      self.kernel2d, self.stride2d, self.padding2d, self.dilation2d):
            out_size = (size + 2 * p - dil * (k - 1) - 1) // s + 1
            out.append(size - ((out_size - 1) * s - 2 * p + dil * (k - 1) + 1))
        return out


def _bias_grad(go: torch.Tensor) -> torch.Tensor:
    return go.sum(dim=[d for d in range(go.dim()) if d != 1])


def generic_passes(problem: Problem) -> dict[str, Callable]:
    """aten::convolution and convolution_backward: what nn.Conv*d's forward and autograd call."""
    a = ConvArgs.of(problem)
    zeros = [0] * problem.layer.dims
    conv = torch.ops.aten.convolution.default
    conv_bwd = torch.ops.aten.convolution_backward.default
    has_bias = problem.layer.bias

    def backward(B: Buffers, mask):
        bias_sizes = [problem.layer.channels] if has_bias else None
        return conv_bwd(B.go, B.x, B.w, bias_sizes, a.stride, a.padding, a.dilation, False, zeros, a.groups, mask)

    def step(B: Buffers):
        out = conv(B.x, B.w, B.b, a.stride, a.padding, a.dilation, False, zeros, a.groups)
        grad_input, grad_weight, grad_bias = backward(B, [True, True, has_bias])
        return (out, grad_input, grad_weight, grad_bias) if has_bias else (out, grad_input, grad_weight)

    return {
        "forward": lambda B: conv(B.x, B.w, B.b, a.stride, a.padding, a.dilation, False, zeros, a.groups),
        "backward_input": lambda B: backward(B, [True, False, False])[0],
        "backward_weight": lambda B: backward(B, [False, True, False])[1],
        "step": step,
    }


def cudnn_passes(problem: Problem) -> dict[str, Callable]:
    a = ConvArgs.of(problem)
    output_padding = a.transposed_output_padding(problem)
    conv = torch.ops.aten.convolution.default
    conv_bwd = torch.ops.aten.convolution_backward.default

    def forward(B: Buffers):
        out = torch.ops.aten.cudnn_convolution.default(a.as4d(B.x), a.as4d(B.w), a.padding2d, a.stride2d,
                                                       a.dilation2d, a.groups, torch.backends.cudnn.benchmark, True, False)
        if B.b is not None:
            out.add_(B.b.view(1, -1, 1, 1))
        return a.from4d(out)

    def backward_input(B: Buffers):
        return a.from4d(conv(a.as4d(B.go), a.as4d(B.w), None, a.stride2d, a.padding2d, a.dilation2d, True,
                             output_padding, a.groups))

    def backward_weight(B: Buffers):
        grads = conv_bwd(a.as4d(B.x), a.as4d(B.go), a.as4d(B.w), None, a.stride2d, a.padding2d, a.dilation2d, True,
                         output_padding, a.groups, [False, True, False])
        return a.from4d(grads[1])

    def step(B: Buffers):
        grads = (forward(B), backward_input(B), backward_weight(B))
        return (*grads, _bias_grad(B.go)) if B.b is not None else grads

    return {"forward": forward, "backward_input": backward_input, "backward_weight": backward_weight, "step": step}


def _backend_name(backend) -> str:
    return str(backend).rsplit(".", 1)[-1]  # ConvBackend.CudnnTranspose -> CudnnTranspose


def cudnn_gradient_backend(problem: Problem, B: Buffers) -> str:
    """The backend torch selects for the cudnn variant's gradient calls, both transposed
    convolutions of grad_output (it must be CudnnTranspose for the variant to be cuDNN)."""
    a = ConvArgs.of(problem)
    return _backend_name(torch._C._select_conv_backend(
        a.as4d(B.go), a.as4d(B.w), None, a.stride2d, a.padding2d, a.dilation2d, True,
        a.transposed_output_padding(problem), a.groups))


def ours_passes(problem: Problem) -> dict[str, Callable]:
    a = ConvArgs.of(problem)
    forward_op = torch.ops.aten._conv_depthwise2d.default
    backward_op = torch.ops.dwconv.conv_depthwise2d_backward.default

    def forward(B: Buffers):
        return a.from4d(forward_op(a.as4d(B.x), a.as4d(B.w), a.kernel2d, B.b, a.stride2d, a.padding2d, a.dilation2d))

    def backward(B: Buffers, mask):
        grads = backward_op(a.as4d(B.go), a.as4d(B.x), a.as4d(B.w), a.kernel2d, a.stride2d, a.padding2d,
                            a.dilation2d, mask)
        gi, gw, gb = grads
        return (a.from4d(gi) if mask[0] else None), (a.from4d(gw) if mask[1] else None), (gb if mask[2] else None)

    def step(B: Buffers):
        out = forward(B)
        grad_input, grad_weight, grad_bias = backward(B, [True, True, B.b is not None])
        return (out, grad_input, grad_weight, grad_bias) if B.b is not None else (out, grad_input, grad_weight)

    return {
        "forward": forward,
        "backward_input": lambda B: backward(B, [True, False, False])[0],
        "backward_weight": lambda B: backward(B, [False, True, False])[1],
        "step": step,
    }


def stock_backend(problem: Problem, B: Buffers) -> str:
    """The backend stock torch selects for this convolution (torch._C._select_conv_backend)."""
    a = ConvArgs.of(problem)
    return _backend_name(torch._C._select_conv_backend(B.x, B.w, B.b, a.stride, a.padding, a.dilation, False,
                                                       [0] * problem.layer.dims, a.groups))


CUDNN_FLAGS = ("enabled", "benchmark", "benchmark_limit", "deterministic", "allow_tf32", "fp32_precision")


def _cudnn_flags_settable():
    """Where torch.testing._internal has frozen the cuDNN flags (disable_global_flags), torch.backends'
    own context that lets them be assigned (torch.backends.cudnn.flags would read and reset every flag,
    which fails where a caller set TF32 through the newer fp32_precision settings)."""
    if not torch.backends.flags_frozen():
        return contextlib.nullcontext()
    allow = getattr(torch.backends, "__allow_nonbracketed_mutation", None)
    if allow is None:
        raise RuntimeError("the cuDNN flags are frozen (torch.backends.disable_global_flags) and this torch has no "
                           "torch.backends.__allow_nonbracketed_mutation to set them with")
    return allow()


@contextlib.contextmanager
def cudnn_settings(**flags):
    """The torch.backends.cudnn flags named (allow_tf32=False, deterministic=True, ...) set within and
    put back after, the others neither read nor touched; also where torch.testing._internal has frozen
    the flags (the GPU tests)."""
    unknown = sorted(set(flags) - set(CUDNN_FLAGS))
    if unknown:
        raise ValueError(f"cudnn_settings: torch.backends.cudnn has no flag named {', '.join(unknown)}")
    cudnn = torch.backends.cudnn
    before = {name: getattr(cudnn, name) for name in flags}
    with _cudnn_flags_settable():
        for name, value in flags.items():
            setattr(cudnn, name, value)
    try:
        yield
    finally:
        with _cudnn_flags_settable():
            for name, value in before.items():
                setattr(cudnn, name, value)


class Overlay:
    """Switches the overlay (imported by the caller) on and off around each variant."""

    def __init__(self, module):
        self.module = module

    @contextlib.contextmanager
    def variant(self, name: str):
        """The overlay switched as the variant runs; its state before (on or off, routing, kernel paths)
        comes back after, whatever happened within. The kernel paths already off (DWCONV_DISABLE_KERNELS,
        or the caller's disable_kernels) stay off: ours and routed time the kernels this process runs, and
        ours-without-<path> switches its paths off on top."""
        enabled = name in ("ours", "routed") or switched_off_path(name) is not None
        was_on, previous, disabled = self.module.enabled(), self.module.routing(), self.module.disabled_kernels()
        cudnn = cudnn_settings(**{"native": {"enabled": False},
                                  "cudnn": {"allow_tf32": False, "deterministic": True}}.get(name, {}))
        try:
            (self.module.enable if enabled else self.module.disable)()
            if name == "routed":
                self.module.set_routing("auto")
            self.module.disable_kernels(list(dict.fromkeys([*disabled, *switched_off_paths(name)])))
            with cudnn:
                yield
        finally:
            self.module.disable_kernels(disabled)
            self.module.set_routing(previous)
            (self.module.enable if was_on else self.module.disable)()


def passes_of(name: str, problem: Problem) -> dict[str, Callable]:
    if name in ("stock", "native", "routed"):
        return generic_passes(problem)
    if name == "cudnn":
        return cudnn_passes(problem)
    if name == "ours" or switched_off_path(name) is not None:
        return ours_passes(problem)
    raise ValueError(f"unknown variant {name!r}; the variants are {VARIANTS}")
