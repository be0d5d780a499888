"""What each pass must move through memory at the least, and the time that takes.

A depthwise convolution barely computes, so each pass's floor is the bytes it has to read
and write once, over the copy bandwidth measured on the same GPU:
  forward          read input, weight (and bias), write output
  backward_input   read grad_output and weight, write grad_input
  backward_weight  read input and grad_output, write grad_weight
  step             the forward pass, then both gradients at once, as autograd asks for them: read
                   grad_output, the input and the weight, write grad_input and grad_weight (a bias
                   gradient is taken as fused into them). One kernel can compute both gradients from
                   one read of grad_output (the conv1d row kernels' do, v52), so the step's floor
                   counts it once. (Reports before 2026-12-01 counted the three passes apart, reading
                   grad_output twice: about six activation-sized tensors where a step needs five.)

The same byte counts size the buffer rotation that keeps L2 from flattering small layers: enough
sets that the pass moving least, run once on each, touches L2_MULTIPLE times the L2.

Large filters (RepLKNet's 13 to 31) do compute: their passes are bound by multiply-adds, so each
pass also has a compute floor, its multiply-adds over the fp32 FMA rate measured on the same GPU
(timing.fma_rate). A pass must make one multiply-add per output element and filter tap whose input
lies inside the plane: the forward pass for each output value, backward-input and the weight
gradient the same products again. A tap on the zero padding is not work a kernel has to do (ours
skip them under large filters, as upstream's kernels skip each padded tap), and under a large
filter on a small plane most taps are: 13x13 on a 7x7 plane meets it with 49 of 169. The roofline
floor is the larger of the two. (Reports before 2026-11-24 counted every tap, padding included.)
"""

from __future__ import annotations

from math import prod

from .layers import Problem

ELEMENT_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def pass_bytes(problem: Problem, passname: str) -> int:
    size = ELEMENT_BYTES[problem.dtype]
    x, w, y = prod(problem.input_shape), prod(problem.weight_shape), prod(problem.output_shape)
    b = problem.layer.channels if problem.layer.bias else 0
    elements = {
        "forward": x + w + b + y,
        "backward_input": y + w + x,
        "backward_weight": x + y + w,
    }
    if passname == "step":
        both_gradients = y + x + w + x + w
        return (elements["forward"] + both_gradients) * size
    return elements[passname] * size


def floor_ms(problem: Problem, passname: str, bandwidth_bytes_per_ms: float) -> float:
    return pass_bytes(problem, passname) / bandwidth_bytes_per_ms


def taps_inside(out_length: int, in_length: int, kernel: int, stride: int, pad: int) -> int:
    """Along one axis: the (output position, filter tap) pairs whose input lies inside [0, in_length)."""
    return sum(max(0, min(kernel, in_length + pad - o * stride) - max(0, pad - o * stride)) for o in range(out_length))


def pass_macs(problem: Problem, passname: str) -> int:
    layer = problem.layer
    per_axis = taps_inside(layer.output_length(), layer.length, layer.kernel, layer.stride, layer.pad)
    macs = problem.batch * layer.channels * per_axis ** layer.dims
    return 3 * macs if passname == "step" else macs


def compute_floor_ms(problem: Problem, passname: str, macs_per_ms: float) -> float:
    return pass_macs(problem, passname) / macs_per_ms


L2_MULTIPLE = 3  # the rotating buffers' bytes: at least this many times the L2 size, for every pass
MAX_SETS = 512  # a graph of this many runs; batch-1 layers of a few hundred KB need hundreds
MIN_SETS = 2


def rotation_bytes(problem: Problem) -> int:
    """What one run of the pass that moves least touches: the rotation must exceed L2 with it."""
    return min(pass_bytes(problem, p) for p in problem.passes if p != "step")


def allocation_bytes(problem: Problem) -> int:
    """What one buffer set takes (input, weight, bias, grad_output), and the outputs of a step kept
    alive while its graph is captured (output, grad_input, grad_weight)."""
    return pass_bytes(problem, "forward") + pass_bytes(problem, "backward_weight")


def buffer_sets_needed(rotation_bytes: int, allocation_bytes: int, l2_bytes: int, memory_budget: int) -> int:
    """How many buffer sets to rotate over so that one pass over them all, each run touching
    rotation_bytes (the pass that moves least), exceeds L2 several times, with each set taking
    allocation_bytes of the memory budget."""
    wanted = -(-L2_MULTIPLE * l2_bytes // max(rotation_bytes, 1))
    affordable = max(memory_budget // max(allocation_bytes, 1), 1)
    return max(MIN_SETS, min(wanted, MAX_SETS, affordable)) if affordable >= MIN_SETS else 1
