"""The layers `make bench` times, as the models have them, and the problems run on each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod


@dataclass(frozen=True)
class Layer:
    set: str
    name: str
    channels: int
    length: int  # H = W for conv2d; L for conv1d
    kernel: int
    stride: int = 1
    bias: bool = False
    conv1d: bool = False
    padding: int | None = None  # default: kernel // 2 ("same" at stride 1)
    batches: tuple[int, ...] = (64, 1)

    @property
    def pad(self) -> int:
        return self.kernel // 2 if self.padding is None else self.padding

    @property
    def dims(self) -> int:
        return 1 if self.conv1d else 2

    def output_length(self) -> int:
        return (self.length + 2 * self.pad - self.kernel) // self.stride + 1


# Sets of one kernel size name their layers C@H (sN); the others C@H kK (sN).
_ONE_KERNEL_SIZE_SETS = ("MobileNetV2", "ConvNeXt-T")


def _conv2d_set(set_name: str, layers, bias: bool = False) -> list[Layer]:
    out = []
    for channels, size, kernel, stride in layers:
        name = f"{channels}@{size}" + (f" k{kernel}" if set_name not in _ONE_KERNEL_SIZE_SETS else "")
        name += f" s{stride}" if stride != 1 else ""
        out.append(Layer(set_name, name, channels, size, kernel, stride, bias))
    return out


MOBILENET_V2 = _conv2d_set("MobileNetV2", [
    (32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 3, 1), (144, 56, 3, 2), (192, 28, 3, 1),
    (192, 28, 3, 2), (384, 14, 3, 1), (576, 14, 3, 1), (576, 14, 3, 2), (960, 7, 3, 1)])
EFFICIENTNET_B0 = _conv2d_set("EfficientNet-B0", [
    (32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 5, 2), (240, 28, 5, 1), (240, 28, 3, 2),
    (480, 14, 3, 1), (672, 14, 5, 1), (672, 14, 5, 2), (1152, 7, 5, 1)])
CONVNEXT_T = _conv2d_set("ConvNeXt-T", [(96, 56, 7, 1), (192, 28, 7, 1), (384, 14, 7, 1), (768, 7, 7, 1)], bias=True)
REPLKNET_31B = _conv2d_set("RepLKNet-31B", [(128, 56, 31, 1), (256, 28, 29, 1), (512, 14, 27, 1), (1024, 7, 13, 1)])
MAMBA_CONV1D = [
    Layer("Mamba conv1d", f"{channels} L={length}", channels, length, kernel=4, bias=True, conv1d=True, padding=3,
          batches=(batch,))
    for length, batch in ((2048, 8), (16384, 1)) for channels in (1536, 2048, 4096, 5120)
]

# Sets beyond the issue's, for the routing: real models' depthwise layers (each distinct one, at a
# 224x224 input, as the model's code builds it) between the issue's, where the routing rule, held
# out, routed by neighbours that disagree (notes/routing.md): 5x5 stride 2 at 28x28 (MnasNet-B1's
# 240@28), 13x13 on 28-7 planes (UniRepLKNet-T, deploy form: one 13x13 a block), and the most used
# of the mobile models (MobileNetV3-Large, torchvision's mobilenet_v3_large; MnasNet-B1 is
# torchvision's mnasnet1_0).
MOBILENET_V3_LARGE = _conv2d_set("MobileNetV3-Large", [
    (16, 112, 3, 1), (64, 112, 3, 2), (72, 56, 3, 1), (72, 56, 5, 2), (120, 28, 5, 1), (240, 28, 3, 2),
    (200, 14, 3, 1), (184, 14, 3, 1), (480, 14, 3, 1), (672, 14, 3, 1), (672, 14, 5, 2), (960, 7, 5, 1)])
MNASNET_B1 = _conv2d_set("MnasNet-B1", [
    (32, 112, 3, 1), (48, 112, 3, 2), (72, 56, 3, 1), (72, 56, 5, 2), (120, 28, 5, 1), (240, 28, 5, 2),
    (480, 14, 5, 1), (480, 14, 3, 1), (576, 14, 3, 1), (576, 14, 5, 2), (1152, 7, 5, 1), (1152, 7, 3, 1)])
UNIREPLKNET_T = _conv2d_set("UniRepLKNet-T", [(80, 56, 3, 1), (160, 28, 13, 1), (320, 14, 13, 1), (320, 14, 3, 1),
                                              (640, 7, 13, 1)], bias=True)  # deploy form: BN folded into a bias

SETS = {layers[0].set: layers for layers in (MOBILENET_V2, EFFICIENTNET_B0, CONVNEXT_T, REPLKNET_31B, MAMBA_CONV1D,
                                             MOBILENET_V3_LARGE, MNASNET_B1, UNIREPLKNET_T)}
# What `make bench` runs when SETS is not given: the sets. The others are asked for by name.
DEFAULT_SETS = ("MobileNetV2", "EfficientNet-B0", "ConvNeXt-T", "RepLKNet-31B", "Mamba conv1d")
COVERAGE_SETS = tuple(name for name in SETS if name not in DEFAULT_SETS)
# The sets the training-step geomean target is stated over.
GEOMEAN_SETS = ("MobileNetV2", "EfficientNet-B0", "ConvNeXt-T")

# dtype and layout of each configuration; conv1d runs in bf16 only, as Mamba does,
# contiguous (B, D, L) and as a transposed (B, L, D) projection output ("channels_last").
CONFIGS_2D = (("float32", "contiguous"), ("bfloat16", "channels_last"), ("float16", "channels_last"))
CONFIGS_1D = (("bfloat16", "contiguous"), ("bfloat16", "channels_last"))
# The 2D configurations users reach beside the issue's, for the routing (`CONFIGS=coverage`): fp32
# channels_last, where torch.compile's layout optimisation puts an fp32 model's depthwise convs and
# stock runs cuDNN; bf16 and fp16 NCHW, autocast on an NCHW model, where stock runs its native kernel
# (bf16) or cuDNN where its workload table says (fp16). The routing has no point for a configuration
# no bench measured, and keeps stock's choice there.
COVERAGE_CONFIGS_2D = (("float32", "channels_last"), ("bfloat16", "contiguous"), ("float16", "contiguous"))
CONFIG_DTYPES = ("float32", "bfloat16", "float16")
CONFIG_LAYOUTS = ("contiguous", "channels_last")

TRAINING_PASSES = ("forward", "backward_input", "backward_weight", "step")
INFERENCE_PASSES = ("forward",)
INFERENCE_BATCH = 1


@dataclass(frozen=True)
class Problem:
    """One layer at one batch size, dtype and layout, with the passes to time."""
    layer: Layer
    batch: int
    dtype: str
    layout: str
    passes: tuple[str, ...]

    @property
    def label(self) -> str:
        """The problem as reports name it and MATCH searches it (label_text)."""
        return label_text(self.layer.set, self.layer.name, self.batch, self.dtype, self.layout)

    @property
    def input_shape(self) -> tuple[int, ...]:
        spatial = (self.layer.length,) * self.layer.dims
        return (self.batch, self.layer.channels, *spatial)

    @property
    def weight_shape(self) -> tuple[int, ...]:
        return (self.layer.channels, 1, *(self.layer.kernel,) * self.layer.dims)

    @property
    def output_shape(self) -> tuple[int, ...]:
        spatial = (self.layer.output_length(),) * self.layer.dims
        return (self.batch, self.layer.channels, *spatial)


def problems(set_names: list[str] | None = None, configs_2d: tuple[tuple[str, str], ...] | None = None) -> list[Problem]:
    """The problems of the sets (default: the issue's), the 2D layers in configs_2d (default: the
    issue's CONFIGS_2D), conv1d in CONFIGS_1D."""
    chosen = set_names or list(DEFAULT_SETS)
    unknown = [s for s in chosen if s not in SETS]
    if unknown:
        raise ValueError(f"unknown layer set(s) {unknown}; the sets are {list(SETS)}")
    out = []
    for set_name in chosen:
        for layer in SETS[set_name]:
            configs = CONFIGS_1D if layer.conv1d else configs_2d or CONFIGS_2D
            for dtype, layout in configs:
                for batch in layer.batches:
                    inference = batch == INFERENCE_BATCH and not layer.conv1d
                    out.append(Problem(layer, batch, dtype, layout, INFERENCE_PASSES if inference else TRAINING_PASSES))
    return out


def label_text(set_name: str, layer: str, batch: int, dtype: str, layout: str) -> str:
    """"<set> <layer> b<batch> <dtype> <layout>": a problem as run_bench prints it, names the first one
    a cut-short run left, and MATCH searches it."""
    return f"{set_name} {layer} b{batch} {dtype} {layout}"


def label_pattern(match: str) -> re.Pattern:
    """MATCH compiled, to search the problems' labels (Problem.label)."""
    try:
        return re.compile(match)
    except re.error as err:
        raise ValueError(f"MATCH={match!r} is not a regular expression: {err}") from None


def matching(chosen: list[Problem], match: str) -> list[Problem]:
    """The problems whose label the regular expression `match` finds: all of them where it is empty."""
    pattern = label_pattern(match)
    found = [problem for problem in chosen if pattern.search(problem.label)]
    if not found:
        raise ValueError(f"no problem of the chosen sets and configurations matches MATCH={match!r} "
                         f"(a label: {chosen[0].label!r})")
    return found


# The check runs each problem at its own batch, so that it checks the very kernels and launches the
# timing runs; only a problem whose float64 copy would pass CHECK_MAX_ELEMENTS elements a tensor (none
# of the bench's: the largest input has 84 M), or whose float64 reference would take more than
# CHECK_MAX_MACS multiply-adds a pass, is checked at a smaller batch. The second cap is for the large
# filters: upstream's float64 kernels, which compute the reference, run every tap of 128@56 k31 at
# batch 64, 25 G multiply-adds a pass. tests/test_kernel_choice.py holds each smaller batch to the
# kernels the problem's own batch takes.
CHECK_MAX_ELEMENTS = 1 << 28
CHECK_MAX_MACS = 1 << 32


def checked_problem(problem: Problem) -> Problem:
    """The problem the float64 check runs: the problem itself, unless its tensors are too large or its
    reference too long to compute."""
    per_sample = max(prod(problem.input_shape), prod(problem.output_shape)) // problem.batch
    macs_per_sample = prod(problem.output_shape) // problem.batch * problem.layer.kernel ** problem.layer.dims
    batch = max(1, min(problem.batch, CHECK_MAX_ELEMENTS // per_sample, CHECK_MAX_MACS // macs_per_sample))
    return Problem(problem.layer, batch, problem.dtype, problem.layout, problem.passes)
