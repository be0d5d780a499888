"""What a piece of GPU code ran, as the profiler saw it."""

import torch
from torch.profiler import ProfilerActivity, profile


def op_names(fn):
    """Names of the operators fn called and of the CUDA kernels it launched."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name for e in prof.events()}
