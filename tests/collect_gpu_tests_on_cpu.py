"""Collect tests/gpu in the pinned torch on a machine without a GPU, as if it had one: torch.cuda
reports one sm_90 device and the device-type test base does not touch it, so that the GPU
tests' imports, decorators, OpInfo look-ups and instantiation run as they will on the GPU
machine. Nothing is run. Prints pytest's collection, then one JSON line: {"exit": code, "ids": [...]}."""

import json
import sys

import pytest
import torch
import torch.utils._triton

torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)
torch.cuda.get_device_name = lambda *args, **kwargs: "no GPU: collection only"
torch.utils._triton.has_triton = lambda: False

from torch.testing._internal import common_device_type  # noqa: E402


def _set_up_without_a_device(cls):
    cls.primary_device = "cuda:0"
    cls.no_magma = True
    cls.no_cudnn = False
    cls.cudnn_version = torch.backends.cudnn.version()


common_device_type.CUDATestBase.setUpClass = classmethod(_set_up_without_a_device)


class Collected:
    def __init__(self):
        self.ids = []

    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]


collected = Collected()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[1:]], plugins=[collected])
print(json.dumps({"exit": int(code), "ids": collected.ids}))
