"""What `make bench-models` runs: a model of models.py in a configuration, its training and inference
steps as users run them, and the variant (stock, or the overlay routing one way) it runs under."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .models import IMAGE_SIZE, MODELS
from .variants import DTYPES

ROUTING_OF = {"cudnn": "cudnn", "ours": "ours", "routed": "auto"}  # the overlay's routing mode each runs
MODES = {"training": 64, "inference": 1}  # batch of each
CLASSES = 1000


@dataclass(frozen=True)
class ModelProblem:
    model: str
    dtype: str
    layout: str

    @property
    def label(self) -> str:
        return f"{self.model} {self.dtype} {self.layout}"


@contextlib.contextmanager
def model_variant(overlay, name: str):
    """stock: the overlay off; the others: on, routing every depthwise convolution as the variant says.
    The overlay's state before (on or off, its routing) comes back after, whatever happened within."""
    was_on, previous = overlay.enabled(), overlay.routing()
    try:
        if name == "stock":
            overlay.disable()
        else:
            overlay.enable()
            overlay.set_routing(ROUTING_OF[name])
        yield
    finally:
        overlay.set_routing(previous)
        (overlay.enable if was_on else overlay.disable)()


def autocast(dtype: str, device_type: str):
    """Mixed precision as users train it: autocast to bf16/fp16 (the graph captures need its cache off)."""
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=DTYPES[dtype], cache_enabled=False)


def build(problem: ModelProblem, device: str = "cuda") -> torch.nn.Module:
    torch.manual_seed(0)
    model = MODELS[problem.model]().to(device)
    return model.to(memory_format=torch.channels_last) if problem.layout == "channels_last" else model


def make_images(problem: ModelProblem, batch: int, device: str = "cuda", dtype=torch.float32,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, device=device, dtype=dtype, generator=generator)
    if problem.layout == "channels_last":
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, CLASSES, (batch,), device=device, generator=generator)
    return images, labels


def training_step(model: torch.nn.Module, dtype: str, loss_scale: float = 1.0):
    """forward, cross-entropy, backward; the loss multiplied by loss_scale first, as GradScaler does in
    fp16 (a power of two: exact, the gradients loss_scale times the unscaled ones)."""
    def step(batch):
        images, labels = batch
        with autocast(dtype, images.device.type):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), labels)
        (loss * loss_scale if loss_scale != 1.0 else loss).backward()
        return loss.detach()
    return step


def inference_step(model: torch.nn.Module, dtype: str):
    def step(batch):
        with torch.no_grad(), autocast(dtype, batch[0].device.type):
            return model(batch[0])
    return step
