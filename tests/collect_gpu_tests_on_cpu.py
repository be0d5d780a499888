"""Collect tests/gpu in the pinned torch on a machine without a GPU, as if it had one: torch.cuda
reports one sm_90 device and the device-type test base does not touch it, so that the GPU
tests' imports, decorators, OpInfo look-ups and instantiation run as they will on the GPU
machine. Nothing is run. Prints pytest's collection, then one JSON line: {"exit": code, "ids": [...]}."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretend_cuda import pretend_one_cuda_device  # noqa: E402

pretend_one_cuda_device()


class Collected:
    def __init__(self):
        self.ids = []

    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]


collected = Collected()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[1:]], plugins=[collected])
print(json.dumps({"exit": int(code), "ids": collected.ids}))
