"""Timing on the GPU: medians of CUDA-event-timed CUDA-graph replays.

One graph holds the pass run once on each of K buffer sets, whose inputs and outputs
together exceed the L2 cache several times, so that no run finds its data left in L2
by the one before; a replay's time over K is one run. Replays are timed one by one with
CUDA events after a warm-up, and the median is taken. Where a pass cannot be captured
(a library refusing capture), the same K runs are timed eagerly and the row says so.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class Timing:
    ms: float  # median per run
    graph: bool  # timed by graph replay (else eagerly)


def _events(n: int):
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]


def _median_ms(run: Callable[[], None], repeats: int, per_replay: int) -> float:
    events = _events(repeats)
    for start, end in events:
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events) / per_replay


def time_pass(fn: Callable, buffer_sets: list, repeats: int, warmup: int) -> Timing:
    """Median time of fn(buffers) per run, rotating over buffer_sets."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up before capture: lazy initialisation, library handles
        for buffers in buffer_sets:
            fn(buffers)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        kept = []  # outputs stay alive during capture: each run writes memory of its own
        with torch.cuda.graph(graph):
            for buffers in buffer_sets:
                kept.append(fn(buffers))
    except RuntimeError:
        torch.cuda.synchronize()
        graph = kept = None  # freed before the eager runs

        def eager():
            for buffers in buffer_sets:
                fn(buffers)
        for _ in range(warmup):
            eager()
        return Timing(_median_ms(eager, repeats, len(buffer_sets)), graph=False)
    for _ in range(warmup):
        graph.replay()
    return Timing(_median_ms(graph.replay, repeats, len(buffer_sets)), graph=True)


def fma_rate(n: int = 8192, repeats: int = 10) -> float:
    """Multiply-adds per ms of an fp32 matrix product with TF32 off (cuBLAS SGEMM on the CUDA
    cores): the FMA rate a depthwise kernel could reach at best, measured as copy_bandwidth is."""
    a, b = (torch.randn(n, n, device="cuda") for _ in range(2))
    c = torch.empty_like(a)
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for _ in range(2):
            torch.mm(a, b, out=c)
        ms = _median_ms(lambda: torch.mm(a, b, out=c), repeats, 1)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    return n ** 3 / ms


def copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 20) -> float:
    """Bytes per ms of a device-to-device copy, counting the read and the write."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    return 2 * nbytes / _median_ms(lambda: dst.copy_(src), repeats, 1)
