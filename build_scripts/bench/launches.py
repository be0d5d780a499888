"""The launches a pass really makes on the GPU, as the profiler records them (`make bench LAUNCHES=1`):
each kernel's name, grid, block, shared memory and registers a thread. `make plan-audit` sets them
beside what the host code plans on a CPU (build_scripts/plan_audit.py), since every planner's waves,
v55's cut by the compiled registers included, are reasoned about from those plans.

kernel_launches reads a Chrome trace (torch.profiler's export, Kineto's format) and needs no GPU;
record_launches runs a pass under the profiler and needs one.
"""

from __future__ import annotations

import json
import os
import tempfile

from .profile import short_name

KERNEL_NAMESPACE = "at::native::dwconv::"  # our kernels', as their demangled names give it

# Kineto writes a kernel's launch in its trace event's args under these names; "shared memory" is the
# static and the dynamic shared memory together.
GRID, BLOCK, REGISTERS, SHARED = "grid", "block", "registers per thread", "shared memory"


def kernel_launches(trace: dict) -> list[dict]:
    """The kernels of a Chrome trace in the order they started: {"kernel": demangled name, "grid": [x, y, z],
    "block": [x, y, z], "registers": a thread's, "shared_bytes": static and dynamic}."""
    kernels = [event for event in trace.get("traceEvents", [])
               if str(event.get("cat", "")).lower() == "kernel" and event.get("ph") == "X"]
    launches = []
    for event in sorted(kernels, key=lambda e: e.get("ts", 0)):
        args = event.get("args", {})
        missing = [key for key in (GRID, BLOCK, REGISTERS, SHARED) if key not in args]
        if missing:
            raise ValueError(f"the trace's kernel event {event.get('name')!r} has no {', '.join(missing)}: "
                             f"not a Kineto trace of CUDA kernels")
        launches.append({"kernel": event["name"], "grid": [int(v) for v in args[GRID]],
                         "block": [int(v) for v in args[BLOCK]], "registers": int(args[REGISTERS]),
                         "shared_bytes": int(args[SHARED])})
    return launches


def function_name(kernel: str) -> str:
    """A recorded kernel's __global__ function (`grad_weight_register_tiled_kernel`), as the kernel-choice
    driver names a plan's kernel."""
    return short_name(kernel).partition("<")[0]


def record_launches(run_pass) -> list[dict]:
    """The kernels one call of `run_pass` launches on the GPU (kernel_launches' rows), recorded by
    torch.profiler (CPU and CUDA activity, as tests/gpu/profiling.py records them)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_pass()
        torch.cuda.synchronize()
    handle, path = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        prof.export_chrome_trace(path)
        with open(path) as trace:
            launches = kernel_launches(json.load(trace))
    finally:
        os.unlink(path)
    if not launches:
        raise RuntimeError("the profiler recorded no kernel (is CUPTI usable here?)")
    return launches
