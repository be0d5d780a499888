"""Which kernel takes each pass of a depthwise 2D call: the GPU tests' expectations, as data free
of torch.

test_depthwise2d.py runs each call on the GPU and asks the profiler which kernels it launched;
tests/test_kernel_choice.py asks the host code's choice (DepthwiseConv2dKernelChoice.cuh,
compiled for the CPU) the same question, so that an expectation that no longer matches the
choice fails without a GPU. Each table is a function of the dtype's element size, as channel
vectors are 16 bytes of channels.
"""

from dataclasses import dataclass, field

PASSES = ("forward", "backward-input", "grad-weight")
# grad_input and grad_weight asked for together, as autograd asks: where one kernel computes both
# (ROW_BACKWARD, COLUMN_BACKWARD), the passes' own kernels do not run.
BACKWARD = "backward"

DIRECT = "direct_kernel"
TILED_NCHW = "tiled_nchw_kernel"
CHANNELS_LAST_TILED = "tiled_channels_last_kernel"
CHANNELS_LAST_REGISTER_TILED = "channels_last_register_tiled_kernel"
CHANNELS_LAST_STREAM = "channels_last_stream_kernel"
CHANNELS_LAST_MMA = "channels_last_mma_kernel"
REGISTER_TILED = "register_tiled_nchw_kernel"
REGISTER_TILED_GRAD_WEIGHT = "grad_weight_register_tiled_kernel"
CHANNELS_LAST_GRAD_WEIGHT = "grad_weight_register_channels_last_kernel"
RING_GRAD_WEIGHT = "grad_weight_ring_kernel"
WINDOW_GRAD_WEIGHT = "grad_weight_window_kernel"
WALK_GRAD_WEIGHT = "grad_weight_walk_kernel"
MMA_GRAD_WEIGHT = "grad_weight_mma_kernel"
LARGE_FILTER = "large_filter_kernel"
LARGE_FILTER_GRAD_WEIGHT = "grad_weight_large_filter_kernel"
ROW = "row_kernel"
ROW_GRAD_WEIGHT = "grad_weight_row_kernel"
ROW_BACKWARD = "row_backward_kernel"
COLUMN = "column_kernel"
COLUMN_GRAD_WEIGHT = "grad_weight_column_kernel"
COLUMN_BACKWARD = "column_backward_kernel"  # both gradients, or with padding below k the weight's alone
STRIDE2_NCHW = "stride2_grad_input_nchw_kernel"
STRIDE2_CHANNELS_LAST = "stride2_grad_input_channels_last_kernel"
PIXEL = "pixel_kernel"
PLANE_STREAM = "plane_stream_kernel"
PLANE_STREAM_GRAD_WEIGHT = "plane_stream_grad_weight_kernel"

# The tables of the tiled kernels switch the pixel path off: their calls are small, so most are grids
# the GPU holds at once, which the pixel kernel takes (pixel_cases).
PIXEL_OFF = ("pixel",)
# The register-tiled table switches the plane stream off too, and its weight gradient: they take that
# table's float calls of small planes that fill the GPU (plane_stream_cases).
TILES_OFF = PIXEL_OFF + ("plane_stream", "plane_stream_grad_weight")


def pair(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


@dataclass(frozen=True)
class Call:
    """One call of _conv_depthwise2d and its backward: the input (batch, channels, size) in
    `layout` ("nchw" or "cl", which grad_output shares), the filter and its arguments. The
    offsets: how many elements past a 16-byte boundary the input's and grad_output's data start
    (every other tensor is a fresh allocation)."""

    label: str
    n: int
    c: int
    size: tuple
    kernel: tuple
    stride: tuple = (1, 1)
    padding: tuple = (0, 0)
    dilation: tuple = (1, 1)
    multiplier: int = 1
    layout: str = "nchw"
    input_offset: int = 0
    grad_output_offset: int = 0

    def __post_init__(self):
        for name in ("size", "kernel", "stride", "padding", "dilation"):
            object.__setattr__(self, name, pair(getattr(self, name)))
        if self.layout not in ("nchw", "cl"):
            raise ValueError(f"{self.label}: layout must be nchw or cl, not {self.layout!r}")


@dataclass(frozen=True)
class Expectation:
    """For each pass of `call` (PASSES, and BACKWARD) and kernel name: whether that pass launches
    that kernel, with the kernel paths `disabled` switched off."""

    call: Call
    launches: dict
    disabled: tuple = field(default=())


def _vector(element_size):
    return 16 // element_size


def register_tiled_cases(element_size):
    """NCHW square 3, 5 and 7 at stride 1 (all three passes), 3 and 5 at stride 2 (forward and the
    weight gradient; backward-input goes to the stride-2 kernel), dilation 1, over planes that give
    one plane a block, several tiles a plane, and many planes a block with the last one part-filled;
    most grids here are small enough for thread groups that only stage (register_tile_groups), and
    for the pixel kernel, which is off here, as is the plane stream, which takes the float calls of
    small planes that fill the GPU (TILES_OFF)."""
    every, strided, none = set(PASSES), {"forward", "grad-weight"}, set()
    rows = [  # (label, batch, channels, size, kernel, stride, padding, dilation, multiplier, passes register-tiled)
        ("4 tiles a plane", 2, 3, (112, 112), 3, 1, 1, 1, 1, every),
        ("a plane a block", 3, 5, (56, 56), 7, 1, 3, 1, 1, every),
        ("several planes a block; backward sums two planes", 5, 7, (28, 28), 5, 1, 2, 1, 2, every),
        ("16 planes a block, the last part-filled", 60, 37, (14, 14), 3, 1, 1, 1, 1, every),
        ("a plane a block and 16 groups that stage it (111 planes: fewer than the SMs)", 3, 37, (14, 14), 3, 1, 1,
         1, 1, every),
        ("7x7 planes", 1, 70, (7, 7), 7, 1, 3, 1, 1, every),
        ("tall and narrow, no padding", 2, 4, (300, 9), 5, 1, 0, 1, 1, every),
        ("one input row", 2, 4, (1, 500), 3, 1, 1, 1, 1, every),
        ("stride 2", 2, 8, (30, 30), 3, 2, 1, 1, 1, strided),
        ("MobileNetV2's 96@112 s2, narrowed: tiles split their rows", 2, 16, (112, 112), 3, 2, 1, 1, 1, strided),
        ("5x5 stride 2, multiplier 2, an odd height", 3, 6, (57, 30), 5, 2, 2, 1, 2, strided),
        ("7x7 outputs, many planes a block", 4, 96, (14, 14), 3, 2, 1, 1, 1, strided),
        ("7x7 is not compiled for stride 2", 2, 8, (30, 30), 7, 2, 3, 1, 1, none),
        ("dilation 2", 2, 8, (30, 30), 3, 1, 2, 2, 1, none),
        ("no compiled size", 2, 8, (30, 30), 9, 1, 4, 1, 1, none),
    ]
    return [
        Expectation(Call(label, n, c, size, kernel, stride, padding, dilation, m),
                    {"forward": {REGISTER_TILED: "forward" in passes},
                     "backward-input": {REGISTER_TILED: "backward-input" in passes},
                     "grad-weight": {REGISTER_TILED_GRAD_WEIGHT: "grad-weight" in passes}}, TILES_OFF)
        for label, n, c, size, kernel, stride, padding, dilation, m, passes in rows
    ]


def channels_last_tiled_cases(element_size):
    """channels_last forward and backward-input through the 16-byte tiled kernels (multiplier 1,
    channels a whole number of 16-byte vectors, aligned data, a tile that fits in shared memory;
    backward-input at stride 1): for square 3, 5 and 7 at stride 1 and 3 and 5 at stride 2
    (dilation 1), the streamed kernel where its blocks fill the GPU with bands of two steps or
    more (the tensor-core one in bfloat16 and half), else the register-tiled one where its tile
    uses two thirds of its lanes; the general one for the rest. The pixel kernel, which would take
    most of these small grids, is off (PIXEL_OFF); with the tensor-core path off too, the half
    types stream their bands on the CUDA cores."""
    vector = _vector(element_size)
    tiled, register, stream, mma = CHANNELS_LAST_TILED, CHANNELS_LAST_REGISTER_TILED, CHANNELS_LAST_STREAM, CHANNELS_LAST_MMA
    rows = [  # (label, channels, size, kernel, stride, padding, dilation, multiplier, aligned, forward's kernel)
        ("a band of rows streamed: 448 blocks", 32 * vector, (112, 112), 3, 1, 1, 1, 1, True,
         mma if element_size == 2 else stream),
        ("streamed, a part-filled channel group", 20 * vector, (112, 112), 3, 1, 1, 1, 1, True,
         mma if element_size == 2 else stream),
        ("streamed, 12 rows: three steps of four", 32 * vector, (12, 600), 3, 1, 1, 1, 1, True,
         mma if element_size == 2 else stream),
        ("streamed 5x5", 32 * vector, (112, 112), 5, 1, 2, 1, 1, True, mma if element_size == 2 else stream),
        ("streamed 7x7", 24 * vector, (112, 112), 7, 1, 3, 1, 1, True, mma if element_size == 2 else stream),
        ("streamed at stride 2: backward-input elsewhere", 32 * vector, (224, 224), 3, 2, 1, 1, 1, True,
         mma if element_size == 2 else stream),
        ("8 vectors a block", 8 * vector, (20, 33), 3, 1, 1, 1, 1, True, register),
        ("several tiles down and across", 8 * vector, (56, 56), 5, 1, 2, 1, 1, True, register),
        ("7x7", 3 * vector, (14, 14), 7, 1, 3, 1, 1, True, register),
        ("stride 2: backward-input elsewhere", 4 * vector, (11, 60), 5, 2, 2, 1, 1, True, register),
        ("5x5 outputs: too few for 4-row lanes", 18 * vector, (9, 9), 3, 2, 1, 1, 1, True, tiled),
        ("2 rows: half of each lane idle", 8 * vector, (2, 40), 3, 1, 1, 1, 1, True, tiled),
        ("7x7 is not compiled for stride 2", 8 * vector, (20, 20), 7, 2, 3, 1, 1, True, tiled),
        ("dilation", 2 * vector, (12, 12), 3, 1, 2, 2, 1, True, tiled),
        ("conv1d, one long tile row", 8 * vector, (1, 700), (1, 4), 1, (0, 3), 1, 1, True, tiled),
        ("conv1d with 16 vectors: the column kernel", 16 * vector, (1, 700), (1, 4), 1, (0, 3), 1, 1, True, COLUMN),
        ("channels not whole vectors", 4 * vector + 1, (16, 16), 3, 1, 1, 1, 1, True, None),
        ("multiplier 2", 4 * vector, (16, 16), 3, 1, 1, 1, 2, True, None),
        ("data off a 16-byte boundary", 4 * vector, (16, 16), 3, 1, 1, 1, 1, False, None),
        ("no tile fits in shared memory", 8 * vector, (40, 40), 31, 1, 15, 1, 1, True, None),
    ]
    cases = []
    for label, c, size, kernel, stride, padding, dilation, m, aligned, forward in rows:
        backward = forward if stride == 1 else None  # same-size planes at stride 1
        launches = {}
        for name, chosen in (("forward", forward), ("backward-input", backward)):
            launches[name] = {kernel: chosen == kernel for kernel in (register, tiled, stream, mma)}
            if chosen is not None:
                launches[name][chosen] = True
        offset = 0 if aligned else 1
        cases.append(Expectation(Call(label, 2, c, size, kernel, stride, padding, dilation, m, "cl", offset, offset),
                                 launches, PIXEL_OFF))
    for label, size, kernel, stride, padding in (("streamed, tensor cores off", 112, 3, 1, 1),
                                                 ("streamed 7x7, tensor cores off", 112, 7, 1, 3),
                                                 ("streamed 5x5 at stride 2, tensor cores off", 224, 5, 2, 2)):
        passes = ("forward", "backward-input") if stride == 1 else ("forward",)
        cases.append(Expectation(Call(label, 2, 24 * vector, size, kernel, stride, padding, 1, 1, "cl"),
                                 {name: {stream: True, mma: False} for name in passes}, PIXEL_OFF + ("channels_last_mma",)))
    return cases


def channels_last_grad_weight_cases(element_size):
    """The channels_last weight gradients of square 3, 5 and 7 filters at stride 1 or 2, dilation 1,
    multiplier 1, in float and the half types where the channels are whole 16-byte vectors and the
    data 16-byte aligned: the walk kernel at 3x3, at 5x5 and 7x7 the tensor-core kernel in the half
    types at stride 1 and the window kernel otherwise, and the ring kernel for 7x7 at stride 2, which
    the window kernel is not compiled for. Elsewhere the register-blocked kernel, which for the half
    types needs an even channel count and data aligned to a channel pair."""
    pairs = element_size == 2
    vector = _vector(element_size)

    def specialised(channels, kernel):  # the kernel where the channels are whole vectors
        return kernel if element_size <= 4 and channels % vector == 0 else CHANNELS_LAST_GRAD_WEIGHT

    register = None if pairs else CHANNELS_LAST_GRAD_WEIGHT
    stride_1 = MMA_GRAD_WEIGHT if pairs else WINDOW_GRAD_WEIGHT  # 5x5 and 7x7 at stride 1
    rows = [  # (label, channels, size, kernel, stride, padding, dilation, multiplier, aligned, the kernel or None)
        ("3x3, two channel blocks", 64, (20, 33), 3, 1, 1, 1, 1, True, specialised(64, WALK_GRAD_WEIGHT)),
        ("144 channels at stride 2: a part-filled channel block", 144, (15, 15), 3, 2, 1, 1, 1, True,
         specialised(144, WALK_GRAD_WEIGHT)),
        ("5x5, 20 x 33", 32, (20, 33), 5, 1, 2, 1, 1, True, specialised(32, stride_1)),
        ("7x7, 20 x 33, a part-filled chunk of 8 columns", 40, (20, 33), 7, 1, 3, 1, 1, True, specialised(40, stride_1)),
        ("5x5 at stride 2: a row in items, odd rows", 32, (11, 150), 5, 2, 2, 1, 1, True,
         specialised(32, WINDOW_GRAD_WEIGHT)),
        ("7x7 at stride 2: the ring", 40, (17, 30), 7, 2, 3, 1, 1, True, specialised(40, RING_GRAD_WEIGHT)),
        ("5x5 stride 2, channels no whole vector", 18, (9, 9), 5, 2, 2, 1, 1, True, CHANNELS_LAST_GRAD_WEIGHT),
        ("7x7: whole vectors in float only", 12, (14, 14), 7, 1, 3, 1, 1, True, specialised(12, WINDOW_GRAD_WEIGHT)),
        ("odd channels: no pairs", 7, (12, 12), 3, 1, 1, 1, 1, True, register),
        ("one element off: pairs misaligned", 8, (12, 12), 3, 1, 1, 1, 1, False, register),
        ("multiplier 2", 8, (12, 12), 3, 1, 1, 1, 2, True, None),
        ("stride 3", 8, (12, 12), 3, 3, 1, 1, 1, True, None),
        ("dilation 2", 8, (12, 12), 3, 1, 2, 2, 1, True, None),
        ("no compiled size", 8, (12, 12), 9, 1, 4, 1, 1, True, None),
    ]
    kernels = (WALK_GRAD_WEIGHT, WINDOW_GRAD_WEIGHT, RING_GRAD_WEIGHT, MMA_GRAD_WEIGHT, CHANNELS_LAST_GRAD_WEIGHT)
    return [
        Expectation(Call(label, 3, c, size, kernel, stride, padding, dilation, m, "cl", 1 - aligned, 1 - aligned),
                    {"grad-weight": {name: name == takes for name in kernels}})
        for label, c, size, kernel, stride, padding, dilation, m, aligned, takes in rows
    ]


def large_filter_cases(element_size):
    """The large-filter kernels: stride 1, dilation 1, 16 taps or more, not a compiled 3/5/7
    size, 2 output rows or more, and for the weight gradient 2 kernel rows or more; NCHW or
    channels_last, any alignment; over the RepLKNet-31B planes and filters and odd shapes."""
    rows = [  # (label, batch, channels, size, kernel, padding, multiplier, layout, misaligned, expected)
        ("RepLKNet-31B stage 1: a plane a block", 2, 4, (56, 56), (31, 31), (15, 15), 1, "nchw", False, True),
        ("RepLKNet-31B stage 2", 2, 6, (28, 28), (29, 29), (14, 14), 1, "cl", False, True),
        ("two planes a block", 3, 10, (14, 14), (27, 27), (13, 13), 1, "nchw", False, True),
        ("8 planes a block; backward sums two planes", 2, 20, (7, 7), (13, 13), (6, 6), 2, "cl", False, True),
        ("not square, a 3-tap rest", 2, 3, (40, 61), (9, 31), (4, 15), 1, "nchw", False, True),
        ("SLaK's 51x5", 1, 2, (100, 13), (51, 5), (25, 2), 1, "cl", False, True),
        ("channels_last off a 16-byte boundary", 2, 8, (20, 20), (13, 13), (6, 6), 1, "cl", True, True),
        ("16 taps, uneven output size", 2, 4, (30, 30), (4, 4), (1, 2), 1, "nchw", False, True),
        ("15 taps", 2, 4, (30, 30), (3, 5), (1, 2), 1, "nchw", False, False),
        ("a compiled size: register-tiled", 2, 4, (30, 30), (7, 7), (3, 3), 1, "nchw", False, False),
        ("conv1d: one row keeps the tiled kernel", 1, 3, (1, 300), (1, 31), (0, 15), 1, "nchw", False, False),
    ]
    return [
        Expectation(Call(label, n, c, size, kernel, 1, padding, 1, m, layout, int(misaligned), int(misaligned)),
                    {"forward": {LARGE_FILTER: expected}, "backward-input": {LARGE_FILTER: expected},
                     "grad-weight": {LARGE_FILTER_GRAD_WEIGHT: expected}})
        for label, n, c, size, kernel, padding, m, layout, misaligned, expected in rows
    ]


def _conv1d_cases(rows, kernel, grad_weight_kernel, both_kernel=None, walked_grad_weight=None):
    """Calls on (N, C, 1, width) inputs from rows of (label, batch, channels, width, kernel width,
    stride, padding, dilation, multiplier, layout, whether forward, backward-input and the weight
    gradient run `kernel`, `kernel` and `grad_weight_kernel`), and, given `both_kernel`, whether
    both gradients asked together run it: where backward-input and the weight gradient each run
    theirs. Given `walked_grad_weight`, the weight gradient runs it in place of `grad_weight_kernel`
    where the padding is below the kernel width. Layouts: nchw, misaligned (NCHW, the input one element
    off a 16-byte boundary), cl (channels_last, as a transposed (N, L, C) tensor), cl-misaligned (the
    input off a boundary)."""
    cases = []
    for label, n, c, width, k, stride, padding, dilation, m, layout, (forward, backward, grad_weight) in rows:
        call = Call(label, n, c, (1, width), (1, k), (1, stride), (0, padding), (1, dilation), m,
                    "cl" if layout.startswith("cl") else "nchw", int(layout.endswith("misaligned")), 0)
        walked = walked_grad_weight is not None and padding < k
        alone = {grad_weight_kernel: grad_weight and not walked}
        if walked_grad_weight is not None:
            alone[walked_grad_weight] = grad_weight and walked
        launches = {"forward": {kernel: forward}, "backward-input": {kernel: backward}, "grad-weight": alone}
        if both_kernel is not None:
            both = backward and grad_weight
            launches[BACKWARD] = {kernel: backward and not both,
                                  **{name: runs and not both for name, runs in alone.items()}}
            launches[BACKWARD][both_kernel] = both or launches[BACKWARD].get(both_kernel, False)
        cases.append(Expectation(call, launches))
    return cases


def row_cases(element_size):
    """The conv1d row kernels: rows of one input row, NCHW-contiguous, a 1 x 2, 3 or 4 filter at
    stride 1 and dilation 1, 64 outputs or more, 16-byte aligned data; backward-input where it is
    a correlation (padding at most k - 1); both gradients asked together from row_backward_kernel
    where both passes take the row kernels."""
    return _conv1d_cases([
        ("Mamba's causal conv1d", 2, 8, 2048, 4, 1, 3, 1, 1, "nchw", (True, True, True)),
        ("no padding: grad_output's rows 3 shorter", 2, 4, 300, 4, 1, 0, 1, 1, "nchw", (True, True, True)),
        ("each row's window at another offset", 3, 5, 203, 3, 1, 1, 1, 1, "nchw", (True, True, True)),
        ("multiplier 2: backward-input's rows sum two (the general kernels)", 2, 3, 150, 2, 1, 1, 1, 2, "nchw",
         (True, False, True)),
        ("padding past k - 1: no correlation", 2, 4, 100, 4, 1, 5, 1, 1, "nchw", (True, False, True)),
        ("input off a 16-byte boundary", 1, 4, 300, 4, 1, 3, 1, 1, "misaligned", (False, True, False)),
        ("no compiled width", 2, 4, 300, 5, 1, 2, 1, 1, "nchw", (False, False, False)),
        ("43 outputs: too narrow", 2, 4, 40, 4, 1, 3, 1, 1, "nchw", (False, False, False)),
        ("stride 2", 2, 4, 300, 4, 2, 3, 1, 1, "nchw", (False, False, False)),
        ("dilation 2", 2, 4, 300, 4, 1, 3, 2, 1, "nchw", (False, False, False)),
        ("channels_last: the column kernels", 2, 16, 300, 4, 1, 3, 1, 1, "cl", (False, False, False)),
    ], ROW, ROW_GRAD_WEIGHT, ROW_BACKWARD)


def column_cases(element_size):
    """The conv1d column kernels on channels_last (a transposed (N, L, C) projection output):
    multiplier 1, channels a whole number of 16-byte vectors and 16 vectors or more, a 1 x 2, 3
    or 4 filter at stride 1 and dilation 1, 16-byte aligned data; backward-input where it is a
    correlation; the weight gradient, alone or with grad_input, from column_backward_kernel where the
    padding is below k, from grad_weight_column_kernel past it."""
    vector = _vector(element_size)
    return _conv1d_cases([
        ("Mamba's causal conv1d", 2, 512, 1024, 4, 1, 3, 1, 1, "cl", (True, True, True)),
        ("segments past both ends", 2, 16 * vector, 47, 4, 1, 3, 1, 1, "cl", (True, True, True)),
        ("a part-filled vector group", 3, 17 * vector, 20, 2, 1, 1, 1, 1, "cl", (True, True, True)),
        ("padding past k - 1", 2, 16 * vector, 37, 3, 1, 5, 1, 1, "cl", (True, False, True)),
        ("input off a 16-byte boundary", 2, 16 * vector, 100, 4, 1, 3, 1, 1, "cl-misaligned", (False, True, False)),
        ("8 vectors: too few", 2, 8 * vector, 100, 4, 1, 3, 1, 1, "cl", (False, False, False)),
        ("not whole vectors", 2, 16 * vector + 1, 100, 4, 1, 3, 1, 1, "cl", (False, False, False)),
        ("multiplier 2", 2, 16 * vector, 100, 4, 1, 3, 1, 2, "cl", (False, False, False)),
        ("stride 2", 2, 16 * vector, 100, 4, 2, 3, 1, 1, "cl", (False, False, False)),
        ("no compiled width", 2, 16 * vector, 100, 5, 1, 2, 1, 1, "cl", (False, False, False)),
        ("NCHW: the row kernels", 2, 16 * vector, 100, 4, 1, 3, 1, 1, "nchw", (False, False, False)),
        ("no padding", 2, 16 * vector, 61, 4, 1, 0, 1, 1, "cl", (True, True, True)),
    ], COLUMN, COLUMN_GRAD_WEIGHT, COLUMN_BACKWARD, COLUMN_BACKWARD)


def stride2_grad_input_cases(element_size):
    """Backward-input through the stride-2 kernels: stride 2, dilation 1, a square 3x3 or 5x5
    filter, the same padding parity along both axes, 32-bit indexing; NCHW with any multiplier,
    channels_last with multiplier 1, channels a whole number of 16-byte vectors and 16-byte
    aligned data."""
    vector = _vector(element_size)
    rows = [  # (label, channels, size, kernel, padding, dilation, multiplier, layout, misaligned, expected)
        ("MobileNetV2's 96@112 s2, narrowed", 32, (112, 112), 3, 1, 1, 1, "nchw", False, STRIDE2_NCHW),
        ("EfficientNet's 144@56 k5 s2", 24, (56, 56), 5, 2, 1, 1, "nchw", False, STRIDE2_NCHW),
        ("no padding, odd sizes, multiplier 2", 8, (27, 33), 3, 0, 1, 2, "nchw", False, STRIDE2_NCHW),
        ("odd padding, not whole 4-column rows", 6, (14, 15), 5, (3, 1), 1, 1, "nchw", False, STRIDE2_NCHW),
        ("channels_last 3x3", 8 * vector, (28, 28), 3, 1, 1, 1, "cl", False, STRIDE2_CHANNELS_LAST),
        ("a part-filled vector group", 5 * vector, (15, 14), 5, 2, 1, 1, "cl", False, STRIDE2_CHANNELS_LAST),
        ("even padding past a phase", 4 * vector, (20, 20), 3, 2, 1, 1, "cl", False, STRIDE2_CHANNELS_LAST),
        ("multiplier 2: direct", 4 * vector, (20, 20), 3, 1, 1, 2, "cl", False, None),
        ("channels not whole vectors", 4 * vector + 1, (20, 20), 3, 1, 1, 1, "cl", False, None),
        ("grad_output off a 16-byte boundary", 4 * vector, (20, 20), 3, 1, 1, 1, "cl", True, None),
        ("no compiled size", 8, (30, 30), 7, 3, 1, 1, "nchw", False, None),
        ("dilation 2", 8, (30, 30), 3, 2, 2, 1, "nchw", False, None),
        ("padding parities differ", 8, (30, 30), 3, (1, 0), 1, 1, "nchw", False, None),
    ]
    return [
        Expectation(Call(label, 2, c, size, kernel, 2, padding, dilation, m, layout, 0, int(misaligned)),
                    {"backward-input": {STRIDE2_NCHW: expected == STRIDE2_NCHW,
                                        STRIDE2_CHANNELS_LAST: expected == STRIDE2_CHANNELS_LAST}})
        for label, c, size, kernel, padding, dilation, m, layout, misaligned, expected in rows
    ]


def pixel_cases(element_size):
    """The pixel kernel: square 3x3 and 5x5 at stride 1 or 2, and in channels_last 7x7 at stride 1,
    dilation 1, multiplier 1 (channels_last: whole 16-byte channel vectors and 16-byte aligned data),
    where a GPU of 108 SMs or more holds every thread of the pass (a pixel and channel group each) at
    once at the kernel's register bound; backward-input at stride 1, as the flipped correlation.
    MobileNetV2's, EfficientNet-B0's and ConvNeXt-T's batch-1 layers, with their channels in 16-byte
    vectors so that every dtype has as many threads; elsewhere the tiles or the general kernels."""
    vector = _vector(element_size)
    rows = [  # (label, layout, batch, channels, size, kernel, stride, padding, multiplier, aligned, takes it)
        ("MobileNetV2 192@28 s2, batch 1", "cl", 1, 24 * vector, 28, 3, 2, 1, 1, True, True),
        ("MobileNetV2 960@7, batch 1", "cl", 1, 120 * vector, 7, 3, 1, 1, 1, True, True),
        ("EfficientNet-B0 672@14 k5, batch 1", "cl", 1, 24 * vector, 14, 5, 1, 2, 1, True, True),
        ("EfficientNet-B0 144@56 k5 s2 at 28x28, batch 1", "nchw", 1, 144, 28, 5, 2, 2, 1, True, True),
        ("MobileNetV2 576@14, batch 1", "nchw", 1, 96, 14, 3, 1, 1, 1, True, True),
        ("odd sizes, uneven padding", "nchw", 3, 5, (13, 17), 3, 1, (1, 0), 1, True, True),
        ("a part-filled last block", "cl", 1, 3 * vector, (9, 11), 5, 1, 2, 1, True, True),
        ("too many threads for the GPU at once: the tiles", "nchw", 2, 64, 56, 3, 1, 1, 1, True, False),
        ("multiplier 2", "nchw", 1, 8, 14, 3, 1, 1, 2, True, False),
        ("ConvNeXt-T 384@14, batch 1", "cl", 1, 48 * vector, 14, 7, 1, 3, 1, True, True),
        ("ConvNeXt-T 768@7, batch 1", "cl", 1, 96 * vector, 7, 7, 1, 3, 1, True, True),
        ("7x7, odd sizes, a part-filled last block", "cl", 2, 3 * vector, (9, 11), 7, 1, 3, 1, True, True),
        ("7x7 NCHW: the tiles", "nchw", 1, 64, 14, 7, 1, 3, 1, True, False),
        ("7x7 at stride 2", "cl", 1, 8 * vector, 14, 7, 2, 3, 1, True, False),
        ("7x7, more threads than the GPU holds at once: the tiles", "cl", 1, 16 * vector, 56, 7, 1, 3, 1, True, False),
        ("channels not whole vectors", "cl", 1, 4 * vector + 1, 16, 3, 1, 1, 1, True, False),
        ("data off a 16-byte boundary", "cl", 1, 4 * vector, 16, 3, 1, 1, 1, False, False),
    ]
    return [
        Expectation(Call(label, n, c, size, kernel, stride, padding, 1, m, layout, 1 - aligned, 1 - aligned),
                    {"forward": {PIXEL: takes}, "backward-input": {PIXEL: takes and stride == 1}})
        for label, layout, n, c, size, kernel, stride, padding, m, aligned, takes in rows
    ]


def plane_stream_cases(element_size):
    """The plane-streamed NCHW kernels: float, square 3x3, 5x5 and 7x7 at stride 1 and 3x3 and 5x5 at
    stride 2, dilation 1, multiplier 1, src planes of 32x32 or less, where the pass has a chunk of planes
    for each of the GPU's SMs (132 at most here) and its tensors are 16-byte aligned; and since v54 src
    planes up to 64x64 at 3x3 and 5x5 stride 1 where every block walks two chunks or more; backward-input at
    stride 1, as the flipped correlation; read from vector rows where rows have an even width and the
    padding across is K // 2 (v50), else from flat planes. The weight gradient (v51) where its chunks (a
    batch entry's planes of a group of channels) are as many and the channels a whole number of 16-byte
    vectors' planes. MobileNetV2's, EfficientNet-B0's and ConvNeXt-T's small planes, at batches that give
    every GPU the plans know enough chunks; in the other dtypes, and elsewhere, the register tiles or the
    general kernels."""
    rows = [  # (label, batch, channels, size, kernel, stride, padding, multiplier, aligned, takes it in float,
        # the weight gradient takes it in float: None where that depends on the GPU's SMs)
        ("MobileNetV2 576@14, batch 4: 16 planes a chunk", 4, 576, 14, 3, 1, 1, 1, True, True, True),
        ("MobileNetV2 960@7, batch 16: 64 planes a chunk", 16, 960, 7, 3, 1, 1, 1, True, True, True),
        ("EfficientNet-B0 672@14 k5, batch 4", 4, 672, 14, 5, 1, 2, 1, True, True, True),
        ("EfficientNet-B0 240@28 k3 s2, batch 8: 5 planes a chunk", 8, 240, 28, 3, 2, 1, 1, True, True, True),
        ("EfficientNet-B0 672@14 k5 s2, batch 4: 20 planes a chunk", 4, 672, 14, 5, 2, 2, 1, True, True, None),
        ("ConvNeXt-T 192@28 k7, batch 4", 4, 192, 28, 7, 1, 3, 1, True, True, True),
        ("ConvNeXt-T 768@7 k7, batch 16", 16, 768, 7, 7, 1, 3, 1, True, True, True),
        ("planes of 9x11 in fours, uneven padding; 15 channels", 384, 15, (9, 11), 3, 1, (0, 1), 1, True, True, False),
        ("vector rows of 6 in pitches of 8", 16, 1024, 6, 5, 1, 2, 1, True, True, True),
        ("ConvNeXt-T 384@14 k7, batch 8: vector rows of 14 at a pitch of 20", 8, 384, 14, 7, 1, 3, 1, True, True, True),
        ("even rows, no padding across: flat planes", 64, 96, (10, 12), 3, 1, (1, 0), 1, True, True, True),
        ("MobileNetV2 144@56, batch 8: large planes, one a chunk", 8, 144, 56, 3, 1, 1, 1, True, True, True),
        ("large planes at 5x5 from rows of 11 vectors, two a chunk", 32, 72, (40, 44), 5, 1, 2, 1, True, True, True),
        ("a plane past 64x64 floats: the register tiles", 8, 144, (64, 66), 3, 1, 1, 1, True, False, False),
        ("large planes at 7x7: the register tiles", 8, 144, 56, 7, 1, 3, 1, True, False, False),
        ("large planes at stride 2: the register tiles", 8, 144, 56, 3, 2, 1, 1, True, False, False),
        ("large planes at batch 1, a chunk a block: the register tiles", 1, 144, 56, 3, 1, 1, 1, True, False, False),
        ("fewer chunks than SMs: the register tiles", 2, 96, 14, 3, 1, 1, 1, True, False, False),
        ("multiplier 2", 4, 288, 14, 3, 1, 1, 2, True, False, False),
        ("data off a 16-byte boundary", 4, 576, 14, 3, 1, 1, 1, False, False, False),
        ("7x7 at stride 2 is not compiled", 8, 240, 28, 7, 2, 3, 1, True, False, False),
    ]
    return [
        Expectation(Call(label, n, c, size, kernel, stride, padding, 1, m, "nchw", 1 - aligned, 1 - aligned),
                    {"forward": {PLANE_STREAM: takes and element_size == 4},
                     "backward-input": {PLANE_STREAM: takes and element_size == 4 and stride == 1},
                     **({} if takes_grad_weight is None else
                        {"grad-weight": {PLANE_STREAM_GRAD_WEIGHT: takes_grad_weight and element_size == 4}})},
                    PIXEL_OFF)
        for label, n, c, size, kernel, stride, padding, m, aligned, takes, takes_grad_weight in rows
    ]


# A call the tensor-core channels_last kernel takes in bf16 and fp16, forward and backward-input, on
# every GPU the plans know (its blocks fill the GPU), for the test that an inf or NaN among a
# vector's channels stays in its own channel.
TENSOR_CORE_CALL = Call("tensor cores, inf and NaN among a vector's channels", 32, 64, 56, 3, padding=1, layout="cl")

# The GPU tests of which kernels take which calls, each with its table.
# The biased layers whose training step test_routing.py runs through nn.Conv1d/2d (batch 4, padding
# k // 2, conv1d's 3), each with the weight-gradient kernel it takes, which sums the bias on the way:
# (dtype, conv1d, the 2D call, that kernel).
BIASED_LAYER_CASES = [
    ("bfloat16", False, Call("7x7 channels_last: the tensor-core kernel", 4, 64, 28, 7, padding=3, layout="cl"),
     MMA_GRAD_WEIGHT),
    ("bfloat16", False, Call("5x5 channels_last at stride 2: the window kernel", 4, 64, 28, 5, stride=2, padding=2,
                             layout="cl"), WINDOW_GRAD_WEIGHT),
    ("bfloat16", False, Call("60 channels, not whole vectors", 4, 60, 28, 3, padding=1, layout="cl"),
     CHANNELS_LAST_GRAD_WEIGHT),
    ("bfloat16", True, Call("conv1d, 28 long", 4, 64, (1, 28), (1, 4), padding=(0, 3)), "grad_weight_nchw_kernel"),
    ("float", False, Call("fp32 NCHW 7x7", 4, 64, 28, 7, padding=3), REGISTER_TILED_GRAD_WEIGHT),
]

KERNEL_CHOICE_TABLES = {
    "test_register_tiled_kernel": register_tiled_cases,
    "test_channels_last_tiled_kernel": channels_last_tiled_cases,
    "test_channels_last_grad_weight_kernels": channels_last_grad_weight_cases,
    "test_large_filter_kernel": large_filter_cases,
    "test_row_kernel": row_cases,
    "test_column_kernel": column_cases,
    "test_stride2_grad_input_kernels": stride2_grad_input_cases,
    "test_pixel_kernel": pixel_cases,
    "test_plane_stream_kernel": plane_stream_cases,
}

# One call each specialised path takes (dwconv_overlay.kernel_paths()): (path, layout, batch,
# channels (16-byte vectors of them for channels_last), size, kernel, stride, padding, {pass: the
# kernel it runs with every path on}). tile_vector_loads and staged_grad_output change how the
# register tiles and the weight gradient's grad_output are staged, window_shared_opt_in how wide
# the window weight gradient's blocks are, and channels_last_mma_three_blocks and
# channels_last_register_tiled_three_blocks the register bound of the tensor-core kernel (3x3) and of
# the channels_last register tiles (3x3 and 5x5): 3 blocks an SM or 2, plane_stream_vector_rows
# how the plane stream reads its rows, register_tiled_grad_weight_waves how the register-tiled
# weight gradient cuts a channel's work into slices, stream_band_waves how the streamed
# channels_last kernels cut a plane into bands, and stride2_grad_input_waves how many blocks the
# channels_last stride-2 backward-input walks with, not which kernel runs.
KERNEL_PATH_ROWS = [
    ("channels_last_tiled", "cl", 2, 8, (20, 33), (3, 4), 1, (1, 1),
     {"forward": CHANNELS_LAST_TILED, "backward-input": CHANNELS_LAST_TILED}),
    ("channels_last_register_tiled", "cl", 8, 8, (40, 33), (3, 3), 1, (1, 1),  # more threads than pixel takes
     {"forward": CHANNELS_LAST_REGISTER_TILED, "backward-input": CHANNELS_LAST_REGISTER_TILED}),
    ("channels_last_stream", "cl", 2, 32, (112, 112), (7, 7), 1, (3, 3),  # the half types: channels_last_mma's
     {"forward": CHANNELS_LAST_STREAM, "backward-input": CHANNELS_LAST_STREAM}),
    ("channels_last_mma", "cl", 2, 32, (112, 112), (3, 3), 1, (1, 1),
     {"forward": CHANNELS_LAST_MMA, "backward-input": CHANNELS_LAST_MMA}),
    ("register_tiled", "nchw", 2, 48, (56, 56), (3, 3), 1, (1, 1),  # more threads than pixel takes
     {"forward": REGISTER_TILED, "backward-input": REGISTER_TILED}),
    ("register_tiled_grad_weight", "nchw", 2, 3, (56, 56), (5, 5), 1, (2, 2), {"grad-weight": REGISTER_TILED_GRAD_WEIGHT}),
    ("channels_last_register_grad_weight", "cl", 3, 8.5, (20, 33), (3, 3), 1, (1, 1),  # half a vector over: no ring
     {"grad-weight": CHANNELS_LAST_GRAD_WEIGHT}),
    ("channels_last_ring_grad_weight", "cl", 3, 8, (20, 33), (7, 7), 2, (3, 3), {"grad-weight": RING_GRAD_WEIGHT}),
    ("channels_last_window_grad_weight", "cl", 3, 8, (20, 33), (5, 5), 2, (2, 2), {"grad-weight": WINDOW_GRAD_WEIGHT}),
    ("channels_last_walk_grad_weight", "cl", 3, 8, (20, 33), (3, 3), 1, (1, 1), {"grad-weight": WALK_GRAD_WEIGHT}),
    ("large_filter", "nchw", 2, 4, (30, 30), (13, 13), 1, (6, 6),
     {"forward": LARGE_FILTER, "backward-input": LARGE_FILTER}),
    ("large_filter_grad_weight", "cl", 2, 2, (28, 28), (13, 13), 1, (6, 6), {"grad-weight": LARGE_FILTER_GRAD_WEIGHT}),
    ("row", "nchw", 2, 8, (1, 2048), (1, 4), 1, (0, 3),
     {"forward": ROW, "backward-input": ROW, "grad-weight": ROW_GRAD_WEIGHT, BACKWARD: ROW_BACKWARD}),
    ("row_backward", "nchw", 2, 8, (1, 2048), (1, 4), 1, (0, 3), {BACKWARD: ROW_BACKWARD}),
    ("column", "cl", 2, 16, (1, 256), (1, 4), 1, (0, 3),
     {"forward": COLUMN, "backward-input": COLUMN, "grad-weight": COLUMN_BACKWARD, BACKWARD: COLUMN_BACKWARD}),
    ("column_backward", "cl", 2, 16, (1, 256), (1, 4), 1, (0, 3),
     {"grad-weight": COLUMN_BACKWARD, BACKWARD: COLUMN_BACKWARD}),
    ("stride2_grad_input", "nchw", 2, 8, (30, 30), (3, 3), 2, (1, 1), {"backward-input": STRIDE2_NCHW}),
    ("register_tiled_stride2", "nchw", 4, 32, (120, 120), (3, 3), 2, (1, 1),  # more threads than pixel takes
     {"forward": REGISTER_TILED, "grad-weight": REGISTER_TILED_GRAD_WEIGHT}),
    ("tile_vector_loads", "nchw", 2, 3, (56, 56), (3, 3), 1, (1, 1), {}),
    ("staged_grad_output", "nchw", 4, 3, (14, 14), (3, 3), 1, (1, 1), {}),
    ("window_shared_opt_in", "cl", 2, 12, (56, 56), (7, 7), 1, (3, 3), {}),  # 4 lanes (bf16, 51 KB) or 3
    ("channels_last_mma_grad_weight", "cl", 3, 8, (20, 33), (7, 7), 1, (3, 3), {"grad-weight": MMA_GRAD_WEIGHT}),
    ("channels_last_mma_three_blocks", "cl", 2, 32, (112, 112), (3, 3), 1, (1, 1), {}),
    ("channels_last_register_tiled_three_blocks", "cl", 8, 8, (40, 33), (3, 3), 1, (1, 1), {}),
    ("pixel", "cl", 1, 24, (14, 14), (3, 3), 1, (1, 1), {"forward": PIXEL, "backward-input": PIXEL}),
    ("plane_stream", "nchw", 4, 576, (14, 14), (3, 3), 1, (1, 1),
     {"forward": PLANE_STREAM, "backward-input": PLANE_STREAM}),
    ("plane_stream_vector_rows", "nchw", 4, 576, (14, 14), (3, 3), 1, (1, 1), {}),
    ("plane_stream_grad_weight", "nchw", 4, 576, (14, 14), (3, 3), 1, (1, 1), {"grad-weight": PLANE_STREAM_GRAD_WEIGHT}),
    ("plane_stream_large_planes", "nchw", 8, 144, (56, 56), (3, 3), 1, (1, 1),  # 1,152 chunks: 2 a block or more
     {"forward": PLANE_STREAM, "backward-input": PLANE_STREAM, "grad-weight": PLANE_STREAM_GRAD_WEIGHT}),
    # The grid's cut only: calls whose grid differs with the path off, at any registers (GRID_PATHS)
    ("register_tiled_grad_weight_waves", "nchw", 64, 8, (112, 112), (3, 3), 2, (1, 1), {}),
    ("stream_band_waves", "cl", 24, 18, (56, 56), (3, 3), 1, (1, 1), {}),
    ("stride2_grad_input_waves", "cl", 12, 24, (28, 28), (3, 3), 2, (1, 1), {}),
]

# The paths that change only how a launch is cut into blocks: (the pass whose grid they change, the
# kernel instance whose compiled registers the planner reads, {dtype} the C++ type's name; None where
# it reads none). Their KERNEL_PATH_ROWS calls must plan another grid with the path off, or the GPU
# test of the path switched off would run the very launch it runs with the path on.
GRID_PATHS = {
    "register_tiled_grad_weight_waves": ("grad-weight", "grad_weight_register_tiled_kernel<{dtype}, int, 3, 2, {staged}>"),
    "stream_band_waves": ("forward", None),
    "stride2_grad_input_waves": ("backward-input", "stride2_grad_input_channels_last_kernel<{dtype}, int, 3, 1>"),
}


# Paths compiled for float and the half types only, and for the half types only.
PATHS_WITHOUT_DOUBLE = {"channels_last_ring_grad_weight", "channels_last_window_grad_weight",
                        "channels_last_walk_grad_weight"}
PATHS_OF_THE_HALF_TYPES = {"channels_last_mma", "channels_last_mma_grad_weight", "channels_last_mma_three_blocks",
                           "channels_last_register_tiled_three_blocks"}
# Paths compiled for float only.
PATHS_OF_FLOAT = {"plane_stream", "plane_stream_vector_rows", "plane_stream_grad_weight", "plane_stream_large_planes"}
# Paths the half types take only with channels_last_mma off (channels_last_tiled_cases has such calls).
PATHS_BEHIND_THE_TENSOR_CORES = {"channels_last_stream"}


def kernel_path_cases(element_size):
    """(path, call, {pass: the kernel it runs with every path on}) for each KERNEL_PATH_ROWS row;
    with the path off, that pass runs another kernel."""
    vector = _vector(element_size)
    cases = []
    for path, layout, n, c, size, kernel, stride, padding, takes in KERNEL_PATH_ROWS:
        call = Call(path, n, int(c * vector) if layout == "cl" else c, size, kernel, stride, padding, 1, 1, layout)
        if (element_size > 4 and path in PATHS_WITHOUT_DOUBLE) or (element_size != 2 and path in PATHS_OF_THE_HALF_TYPES):
            takes = {}
        if element_size == 2 and path in PATHS_BEHIND_THE_TENSOR_CORES:
            takes = {}
        if element_size != 4 and path in PATHS_OF_FLOAT:
            takes = {}
        cases.append((path, call, takes))
    return cases


def kernel_path_expectations(element_size):
    """kernel_path_cases as Expectations: each pass's kernel with every path on, not with its path off."""
    expectations = []
    for path, call, takes in kernel_path_cases(element_size):
        expectations.append(Expectation(call, {name: {kernel: True} for name, kernel in takes.items()}))
        expectations.append(Expectation(call, {name: {kernel: False} for name, kernel in takes.items()}, (path,)))
    return expectations


# The calls sanitizer_subset.py runs under compute-sanitizer, through the ops (so in both layouts,
# not rerouted by aten::convolution), in float32 and bfloat16, NCHW and channels_last, with the
# pixel path off (PIXEL_OFF: most are grids the GPU holds at once, and each is here for a tile),
# then PIXEL_SANITIZER_CASES with every path on: tests/test_kernel_choice.py checks that together
# they reach every kernel.
SANITIZER_CASES = [  # (n, c, m, h, w, kernel, stride, padding, dilation)
    (2, 8, 1, 33, 70, (3, 3), (1, 1), (1, 1), (1, 1)),     # NCHW register-tiled: forward, backward-input, weight
    (5, 2, 1, 32, 32, (7, 7), (1, 1), (3, 3), (1, 1)),     # register-tiled weight gradient: 4 batch entries a block,
                                                           # the last group part-filled, sums reduced in two chunks
    (3, 37, 1, 14, 14, (7, 7), (1, 1), (3, 3), (1, 1)),    # NCHW register-tiled: a plane a block, 16 groups that stage
    (8, 272, 1, 14, 14, (3, 3), (1, 1), (1, 1), (1, 1)),   # NCHW 14x14, 136 chunks of 16 planes: the plane stream
                                                           # (float); the register tiles' 16 planes a block of 256
                                                           # threads, outputs stored through shared memory (bf16)
    (4, 672, 1, 14, 14, (5, 5), (2, 2), (2, 2), (1, 1)),   # the plane stream at stride 2 (float): 135 chunks of 20
    (16, 768, 1, 7, 7, (7, 7), (1, 1), (3, 3), (1, 1)),    # the plane stream at 7x7 (float): 192 chunks of 64
    (6, 132, 1, 56, 56, (3, 3), (1, 1), (1, 1), (1, 1)),   # the plane stream's large planes (float): 792 chunks
                                                           # of one, two a block on 132 SMs
    (2, 5, 2, 28, 28, (5, 5), (1, 1), (2, 2), (1, 1)),     # NCHW register-tiled, multiplier 2
    (2, 4, 2, 9, 10, (5, 5), (2, 2), (2, 2), (1, 1)),      # multiplier 2, stride 2: NCHW register-tiled forward and
                                                           # weight gradient, stride-2 backward-input; channels_last
                                                           # direct forward and backward-input
    (1, 2, 1, 112, 112, (3, 3), (2, 2), (1, 1), (1, 1)),   # NCHW register-tiled at stride 2: tiles split their rows
    (2, 40, 1, 15, 17, (3, 3), (2, 2), (1, 1), (1, 1)),    # stride-2 backward-input kernels, both layouts (bf16: 5
                                                           # vectors, a part-filled group), odd sizes
    (1, 16, 1, 14, 14, (5, 5), (2, 2), (2, 2), (1, 1)),    # stride-2 backward-input kernels, 5x5, rows of 4-column stores
    (1, 16, 1, 1, 300, (1, 4), (1, 1), (0, 3), (1, 1)),    # conv1d (Mamba): NCHW row kernels, rows at 8 offsets
    (3, 5, 2, 1, 203, (1, 3), (1, 1), (0, 1), (1, 1)),     # row kernels, multiplier 2, odd rows
    (1, 16, 1, 1, 40, (1, 4), (1, 1), (0, 3), (1, 1)),     # a short conv1d row: NCHW tiled, 256-wide tile rows
    (2, 136, 1, 1, 47, (1, 4), (1, 1), (0, 3), (1, 1)),    # channels_last conv1d: column kernels (bf16: 17
                                                           # vectors, a part-filled group), segments past the ends;
                                                           # both gradients, and the weight's, column_backward_kernel
    (2, 136, 1, 1, 47, (1, 3), (1, 1), (0, 3), (1, 1)),    # padding k: the column weight gradient
    (3, 40, 1, 12, 12, (3, 3), (1, 1), (2, 2), (2, 2)),    # dilation (NCHW tiled), channels over one lane group
    (2, 144, 1, 9, 30, (3, 3), (1, 1), (1, 1), (1, 1)),    # channels_last register tiles: a lane row past the plane;
                                                           # register weight gradient, 8 channel lanes for bf16
    (2, 40, 1, 14, 14, (7, 7), (1, 1), (3, 3), (1, 1)),    # channels_last register tiles, 7x7 (bf16: 5 vectors, a
                                                           # part-filled group), blocks under 256 threads
    (1, 16, 1, 23, 30, (5, 5), (2, 2), (0, 0), (1, 1)),    # channels_last register tiles at stride 2, no padding
    (2, 32, 1, 20, 40, (7, 7), (1, 1), (3, 3), (1, 1)),    # channels_last 7x7 weight gradient: float's window
                                                           # blocks of 5 lanes opt in past 48 KB (52 KB); bf16's
                                                           # on the tensor cores
    (24, 64, 1, 56, 56, (3, 3), (1, 1), (1, 1), (1, 1)),   # channels_last streamed: bands of rows with copies in
                                                           # flight (enough blocks to fill the GPU)
    (2, 64, 1, 14, 14, (7, 7), (2, 2), (3, 3), (1, 1)),    # channels_last tiled forward, direct backward-input,
                                                           # register weight gradient at stride 2, chunked sums
    (2, 3, 1, 28, 30, (13, 13), (1, 1), (6, 6), (1, 1)),   # large-filter kernels, both layouts: a 1-tap rest,
                                                           # output rows not a whole number of stores
    (1, 10, 2, 7, 7, (9, 9), (1, 1), (4, 4), (1, 1)),      # large-filter kernels, 8 planes a block, the last part-
                                                           # filled; backward sums two planes
]

PIXEL_SANITIZER_CASES = [  # (n, c, m, h, w, kernel, stride, padding, dilation)
    (2, 144, 1, 9, 30, (3, 3), (1, 1), (1, 1), (1, 1)),    # pixel kernels, both layouts (bf16: 18 vectors a pixel),
                                                           # a part-filled last block
    (1, 16, 1, 23, 30, (5, 5), (2, 2), (0, 0), (1, 1)),    # pixel kernels, 5x5 at stride 2, no padding
    (1, 48, 1, 9, 11, (7, 7), (1, 1), (3, 3), (1, 1)),     # pixel kernel, 7x7 channels_last (a round a row)
]
