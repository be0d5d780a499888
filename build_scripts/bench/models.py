"""The networks `make bench-models` runs whole: MobileNetV2, EfficientNet-B0 and ConvNeXt-T for
ImageNet (1000 classes, 224x224 inputs), built here from their papers' definitions so that the GPU
machine, which has torch but no torchvision, can run them. Their parameter counts equal
torchvision's builds of the same models (tests/test_bench_models.py checks them), and their
depthwise layers are those of `make bench`'s layer sets (layers.py).

Left out, as they change no kernel's work: stochastic depth (EfficientNet-B0, ConvNeXt-T), and
weight initialisation schemes (the weights are torch's defaults; the bench times, it does not train).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn


def _conv_bn(in_channels: int, out_channels: int, kernel: int, stride: int = 1, groups: int = 1,
             activation: type[nn.Module] | None = nn.ReLU6) -> nn.Sequential:
    layers = [nn.Conv2d(in_channels, out_channels, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(out_channels)]
    if activation is not None:
        layers.append(activation(inplace=True))
    return nn.Sequential(*layers)


class _Residual(nn.Module):
    """body(x), plus x where the body keeps the shape (stride 1, as many channels out as in)."""

    def __init__(self, body: nn.Module, keeps_shape: bool):
        super().__init__()
        self.body = body
        self.keeps_shape = keeps_shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.keeps_shape else y


# MobileNetV2 (Sandler et al. 2018, table 2): expansion t, output channels c, repeats n, first stride s.
_MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                        (6, 320, 1, 1))


def mobilenet_v2(classes: int = 1000) -> nn.Module:
    layers = [_conv_bn(3, 32, 3, 2)]
    channels = 32
    for expansion, out_channels, repeats, first_stride in _MOBILENET_V2_STAGES:
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            hidden = channels * expansion
            body = [] if expansion == 1 else [_conv_bn(channels, hidden, 1)]
            body += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), _conv_bn(hidden, out_channels, 1, activation=None)]
            layers.append(_Residual(nn.Sequential(*body), stride == 1 and channels == out_channels))
            channels = out_channels
    layers.append(_conv_bn(channels, 1280, 1))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(1280, classes))


class _SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(channels, squeezed, 1), nn.SiLU(inplace=True),
                                  nn.Conv2d(squeezed, channels, 1), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(x)


# EfficientNet-B0 (Tan and Le 2019, table 1): expansion, kernel, first stride, output channels, repeats.
_EFFICIENTNET_B0_STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
                           (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def efficientnet_b0(classes: int = 1000) -> nn.Module:
    layers = [_conv_bn(3, 32, 3, 2, activation=nn.SiLU)]
    channels = 32
    for expansion, kernel, first_stride, out_channels, repeats in _EFFICIENTNET_B0_STAGES:
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            hidden = channels * expansion
            body = [] if expansion == 1 else [_conv_bn(channels, hidden, 1, activation=nn.SiLU)]
            body += [_conv_bn(hidden, hidden, kernel, stride, groups=hidden, activation=nn.SiLU),
                     _SqueezeExcite(hidden, max(1, channels // 4)),  # squeezed from the block's input width
                     _conv_bn(hidden, out_channels, 1, activation=None)]
            layers.append(_Residual(nn.Sequential(*body), stride == 1 and channels == out_channels))
            channels = out_channels
    layers.append(_conv_bn(channels, 1280, 1, activation=nn.SiLU))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(1280, classes))


class _ChannelsLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of an (N, C, H, W) tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.depthwise = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.layer_scale = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layer_scale * self.mlp(self.norm(self.depthwise(x).permute(0, 2, 3, 1)))
        return x + y.permute(0, 3, 1, 2)


# ConvNeXt-T (Liu et al. 2022): blocks and width of each stage.
_CONVNEXT_T_STAGES = ((3, 96), (3, 192), (9, 384), (3, 768))


def convnext_t(classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 96, 4, 4), _ChannelsLayerNorm(96, eps=1e-6)]
    previous = None
    for blocks, dim in _CONVNEXT_T_STAGES:
        if previous is not None:
            layers += [_ChannelsLayerNorm(previous, eps=1e-6), nn.Conv2d(previous, dim, 2, 2)]
        layers += [_ConvNeXtBlock(dim) for _ in range(blocks)]
        previous = dim
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), _ChannelsLayerNorm(previous, eps=1e-6), nn.Flatten(),
                         nn.Linear(previous, classes))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "MobileNetV2": mobilenet_v2, "EfficientNet-B0": efficientnet_b0, "ConvNeXt-T": convnext_t,
}
IMAGE_SIZE = 224


def is_depthwise(module: nn.Module) -> bool:
    return isinstance(module, nn.Conv2d) and module.groups > 1 and module.groups == module.in_channels == \
        module.out_channels


def depthwise_census(build: Callable[[], nn.Module], image_size: int = IMAGE_SIZE) -> list[tuple[int, int, int, int, bool]]:
    """(channels, input size, kernel, stride, bias) of each depthwise convolution one image's forward
    pass runs through the model build() makes, in order, traced on the meta device (no memory, no compute)."""
    found = []

    def record(module, inputs, _output):
        found.append((module.in_channels, inputs[0].shape[-1], module.kernel_size[0], module.stride[0],
                      module.bias is not None))

    with torch.device("meta"):
        model = build().eval()  # a train-mode BatchNorm refuses one value a channel (a 1x1 plane at batch 1)
        for module in model.modules():
            if is_depthwise(module):
                module.register_forward_hook(record)
        model(torch.empty(1, 3, image_size, image_size))
    return found
