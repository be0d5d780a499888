"""The SM limits the CPU side plans with (build_scripts/plan_report.py's SM_LIMITS: `make
plan-report ARCH=` and the kernel-choice tests' GPUs) are this GPU's own, which
DepthwiseConv2d.cu reads from the device: a table that disagreed would have the CPU checks test
plans that no GPU of that kind makes."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch 2.11.0+cu130, which is not installed here")
if not torch.cuda.is_available():
    pytest.skip("the GPU tests need a CUDA device; there is none here", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from build_scripts.plan_report import SM_LIMITS  # noqa: E402


def test_the_sm_limits_of_this_gpus_arch_are_its_own():
    props = torch.cuda.get_device_properties(0)
    arch = f"sm_{props.major}{props.minor}"
    if arch not in SM_LIMITS:
        pytest.skip(f"build_scripts/plan_report.py has no SM limits for {arch} ({props.name})")
    sm = SM_LIMITS[arch]
    assert (props.max_threads_per_multi_processor, props.shared_memory_per_multiprocessor) == \
        (sm.threads, sm.shared_bytes), f"{props.name} ({arch})"
