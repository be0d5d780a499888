"""The Meta kernels of _conv_depthwise2d and of the depthwise backward ops, in the real overlay
loaded into the pinned torch on the CPU: shapes, dtypes and memory formats as the CUDA kernels
give them, the CUDA kernels' argument checks, and symbolic tracing (make_fx, fake tensors) of the
ops and of a training step through _conv_depthwise2d's derivative, none of which needs a GPU."""

import json

import pytest

pytestmark = pytest.mark.l0

META = """
import json
from torch.fx.experimental.proxy_tensor import make_fx
op2d, op3d = torch.ops.aten._conv_depthwise2d_backward, torch.ops.aten._conv_depthwise3d_backward
forward = torch.ops.aten._conv_depthwise2d

def meta(*shape, fmt=torch.contiguous_format, dtype=torch.float32):
    return torch.empty(*shape, device="meta", dtype=dtype).to(memory_format=fmt)

def described(t):
    return None if t is None else [list(t.shape), list(t.stride()), str(t.dtype)]

def error(fn):
    try:
        fn()
    except RuntimeError as err:
        return (type(err).__name__ + ": " if isinstance(err, NotImplementedError) else "") + str(err).splitlines()[0]

x, w, go = meta(2, 6, 9, 11), meta(12, 1, 3, 3), meta(2, 12, 5, 6)
x_cl = meta(2, 6, 9, 11, fmt=torch.channels_last)
s2 = ([3, 3], [2, 2], [1, 1], [1, 1])
out = {
    "nchw": [described(t) for t in op2d(go, x, w, *s2, [True, True])],
    "channels_last": [described(t) for t in op2d(go, x_cl, w, *s2, [True, True])],
    "weight only": [described(t) for t in op2d(go, x, w, *s2, [False, True])],
    "bf16": [described(t) for t in op2d(go.bfloat16(), x.bfloat16(), w.bfloat16(), *s2, [True, False])],
    "3d": [described(t) for t in op3d(meta(2, 4, 5, 6, 7), meta(2, 4, 5, 6, 7, fmt=torch.channels_last_3d),
                                     meta(4, 1, 3, 3, 3), [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [True, True])],
    "wrong grad_output": error(lambda: op2d(go, x, w, [3, 3], [1, 1], [1, 1], [1, 1], [True, True])),
    "wrong kernel_size": error(lambda: op2d(go, x, w, [5, 5], [2, 2], [1, 1], [1, 1], [True, True])),
    "wrong channels": error(lambda: op2d(meta(2, 10, 5, 6), x, meta(10, 1, 3, 3), *s2, [True, True])),
    "no out_channels": error(lambda: forward(x, meta(0, 1, 3, 3), [3, 3], None, *s2[1:])),
    "zero stride": error(lambda: op2d(go, x, w, [3, 3], [0, 2], [1, 1], [1, 1], [True, True])),
    "forward": described(forward(x, w, [3, 3], meta(12), *s2[1:])),
    "forward channels_last": described(forward(x_cl, w, [3, 3], None, *s2[1:])),
    "forward bias": error(lambda: forward(x, w, [3, 3], meta(6), *s2[1:])),
    "forward 3-D input": error(lambda: forward(meta(6, 9, 11), w, [3, 3], None, *s2[1:])),
    "forward empty output": error(lambda: forward(x, meta(12, 1, 13, 3), [13, 3], None, [1, 1], [1, 1], [1, 1])),
    "forward zero kernel": error(lambda: forward(x, meta(12, 1, 0, 3), [0, 3], None, [1, 1], [1, 1], [1, 1])),
    "forward huge padding": error(lambda: forward(x, w, [3, 3], None, [1, 1], [2 ** 32 + 1, 1], [1, 1])),
    "forward int64": error(lambda: forward(x.long(), w.long(), [3, 3], None, *s2[1:])),
    "backward int64": error(lambda: op2d(go.long(), x.long(), w.long(), *s2, [True, True])),
    "weight gradient int64": error(lambda: op2d(go.long(), x.long(), w.long(), *s2, [False, True])),
    "3d wrong kernel_size": error(lambda: op3d(meta(2, 4, 5, 6, 7), meta(2, 4, 5, 6, 7), meta(4, 1, 3, 3, 3),
                                              [3, 3, 5], [1, 1, 1], [1, 1, 1], [1, 1, 1], [True, True])),
    "3d wrong grad_output": error(lambda: op3d(meta(2, 4, 5, 6, 6), meta(2, 4, 5, 6, 7), meta(4, 1, 3, 3, 3),
                                               [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [True, True])),
    "3d 4-D grad_output": error(lambda: op3d(meta(2, 4, 5, 6), meta(2, 4, 5, 6, 7), meta(4, 1, 3, 3, 3),
                                             [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [True, True])),
    "3d out_channels": error(lambda: op3d(meta(2, 6, 5, 6, 7), meta(2, 4, 5, 6, 7), meta(6, 1, 3, 3, 3),
                                          [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [True, True])),
    "empty batch int64": described(forward(meta(0, 6, 9, 11, dtype=torch.int64), w.long(), [3, 3], None, *s2[1:])),
    "3d no channels": error(lambda: op3d(meta(2, 0, 5, 6, 7), meta(2, 0, 5, 6, 7), meta(0, 1, 3, 3, 3),
                                         [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [True, True])),
    "dilated span": error(lambda: forward(meta(1, 6, 1, 1), meta(6, 1, 3, 1), [3, 1], None, [1, 1],
                                          [2 ** 30, 0], [2 ** 30, 1])),
    "3d int64": error(lambda: op3d(meta(2, 4, 5, 6, 7, dtype=torch.int64), meta(2, 4, 5, 6, 7, dtype=torch.int64),
                                   meta(4, 1, 3, 3, 3, dtype=torch.int64), [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1],
                                   [True, True])),
}

def both(go, x, w):
    return op2d(go, x, w, *s2, [True, True])

graph = make_fx(both, tracing_mode="symbolic")(torch.randn(2, 12, 5, 6), torch.randn(2, 6, 9, 11),
                                               torch.randn(12, 1, 3, 3))
placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
outputs = [n for n in graph.graph.nodes if n.op == "output"][0].args[0]
out["symbolic"] = {name: str(list(node.meta["val"].shape)) for name, node in
                   zip(("grad_output", "input", "weight", "grad_input", "grad_weight"), [*placeholders, *outputs])}

def training_step(x, w, b):
    y = forward(x, w, [3, 3], b, *s2[1:])
    return torch.autograd.grad(y.square().sum(), (x, w, b))

step = make_fx(training_step, tracing_mode="symbolic")(
    torch.randn(2, 6, 9, 11, requires_grad=True), torch.randn(12, 1, 3, 3, requires_grad=True),
    torch.randn(12, requires_grad=True))
out["step ops"] = sorted({str(n.target) for n in step.graph.nodes if "depthwise" in str(n.target)})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def meta(overlay_probe):
    return json.loads(overlay_probe(META)[-1])


def test_outputs_take_the_cuda_kernels_shapes_dtypes_and_layouts(meta):
    weight = [[12, 1, 3, 3], [9, 9, 3, 1], "torch.float32"]
    assert meta["nchw"] == [[[2, 6, 9, 11], [594, 99, 11, 1], "torch.float32"], weight]
    assert meta["channels_last"] == [[[2, 6, 9, 11], [594, 1, 66, 6], "torch.float32"], weight]  # as the input
    assert meta["weight only"] == [None, weight]
    assert meta["bf16"] == [[[2, 6, 9, 11], [594, 99, 11, 1], "torch.bfloat16"], None]
    # 3D: upstream's kernel, contiguous whatever the input's layout
    assert meta["3d"] == [[[2, 4, 5, 6, 7], [840, 210, 42, 7, 1], "torch.float32"],
                          [[4, 1, 3, 3, 3], [27, 27, 9, 3, 1], "torch.float32"]]


def test_the_cuda_kernels_checks_hold_on_meta_tensors(meta):
    """With the CUDA kernel's messages (DepthwiseConv2d.cu): its argument checks, then the backward's."""
    assert meta["wrong grad_output"] == ("conv_depthwise2d_backward: grad_output has shape [2, 12, 5, 6] but the "
                                         "convolution's output has shape [2, 12, 9, 11]")
    assert meta["wrong kernel_size"] == "conv_depthwise2d: kernel_size [5, 5] does not match the weight's [12, 1, 3, 3]"
    assert meta["wrong channels"] == "conv_depthwise2d: out_channels (10) must be a positive multiple of in_channels (6)"
    assert meta["no out_channels"] == "conv_depthwise2d: out_channels (0) must be a positive multiple of in_channels (6)"
    assert meta["zero stride"] == "conv_depthwise2d: stride must be positive, got [0, 2]"


def test_symbolic_tracing_gives_symbolic_shapes(meta):
    shapes = meta["symbolic"]
    assert shapes["grad_input"] == shapes["input"] and shapes["grad_input"].startswith("[s"), shapes
    assert shapes["grad_weight"] == shapes["weight"] and shapes["weight"].startswith("[s"), shapes


def test_the_forward_op_takes_the_cuda_kernels_layout_and_checks(meta):
    assert meta["forward"] == [[2, 12, 5, 6], [360, 30, 6, 1], "torch.float32"]
    assert meta["forward channels_last"] == [[2, 12, 5, 6], [360, 1, 72, 12], "torch.float32"]
    assert meta["forward bias"] == "conv_depthwise2d: bias must have out_channels (12) elements, got [6]"
    assert meta["forward 3-D input"] == "conv_depthwise2d: expected a 4-D input (N, C, H, W), got 3-D"
    assert meta["forward empty output"] == ("conv_depthwise2d: the output would be empty: input [2, 6, 9, 11], kernel "
                                            "[13, 3], stride [1, 1], padding [1, 1], dilation [1, 1] give "
                                            "[2, 12, -1, 11]")


def test_a_training_step_through_the_forward_ops_derivative_traces_symbolically(meta):
    assert meta["step ops"] == ["aten._conv_depthwise2d.default", "aten._conv_depthwise2d_backward.default"]


def test_what_the_kernels_cannot_hold_is_refused_by_name(meta):
    """A kernel dimension of 0 (which computed an output larger than its input) and geometry past int
    (which the kernels would have truncated) are refused, as are dtypes the kernels are not compiled
    for, in the words of the CUDA kernels' dispatch (the input gradient's first, as ours runs it)."""
    assert meta["forward zero kernel"] == "conv_depthwise2d: kernel_size must be positive, got [0, 3]"
    assert meta["forward huge padding"] == ("conv_depthwise2d: kernel_size, stride, padding and dilation must each be "
                                            "at most 2147483647, got [3, 3], [1, 1], [4294967297, 1], [1, 1]")
    assert meta["forward int64"] == "NotImplementedError: \"conv_depthwise2d_forward_cuda\" not implemented for 'Long'"
    assert meta["backward int64"] == "NotImplementedError: \"conv_depthwise2d_backward_cuda\" not implemented for 'Long'"
    assert meta["weight gradient int64"] == ("NotImplementedError: \"conv_depthwise2d_grad_weight_cuda\" not "
                                             "implemented for 'Long'")
    # an empty batch reaches no dispatch in the CUDA kernels: nothing to refuse
    assert meta["empty batch int64"] == [[0, 12, 5, 6], [360, 30, 6, 1], "torch.int64"]
    # each value fits int, the span they make does not
    assert meta["dilated span"].startswith("conv_depthwise2d: the dilated kernel [3, 1] x [1073741824, 1] or the "
                                           "padded input [1, 6, 1, 1] + 2 x [1073741824, 0] spans more than 2147483647")


def test_the_3d_backward_makes_upstreams_checks(meta):
    """Its CUDA kernel is upstream's 3D stub (DepthwiseConv3d.cu), so its Meta kernel says what that says."""
    assert meta["3d wrong kernel_size"] == "kernel size and weight size mismatch, got [3, 3, 5] and [4, 1, 3, 3, 3]"
    assert meta["3d wrong grad_output"] == "Expect grad_output to be of same shape as output, got 6 and 7 at dimension 4"
    assert meta["3d 4-D grad_output"] == "Expect grad_output to be 5D, got 4D."
    assert meta["3d out_channels"] == "Depthwise out channels should be a multiple of in channels, got 6 and 4"
    assert meta["3d int64"] == "NotImplementedError: \"conv_depthwise3d\" not implemented for 'Long'"
    # no channels: an error, where upstream's check divides by zero
    assert meta["3d no channels"] == "Depthwise out channels should be a multiple of in channels, got 0 and 0"

