"""compute-sanitizer memcheck and racecheck over a small subset of the depthwise kernels
(sanitizer_subset.py: every kernel at least once, forward and backward, both layouts,
through the ops).
A file of its own: it is the slowest GPU test, and `make gpu-session` runs it as its own step."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch 2.11.0+cu130, which is not installed here")
if not torch.cuda.is_available():
    pytest.skip("the GPU tests need a CUDA device; there is none here", allow_module_level=True)


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer is not on PATH")
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer(tool):
    """No invalid access, no shared-memory race."""
    script = Path(__file__).with_name("sanitizer_subset.py")
    proc = subprocess.run(["compute-sanitizer", f"--tool={tool}", "--error-exitcode=3", sys.executable, str(script)],
                          capture_output=True, text=True, env=os.environ, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "sanitizer subset done" in proc.stdout  # every call ran, not only the first
    # memcheck ends with "ERROR SUMMARY: 0 errors", racecheck with "RACECHECK SUMMARY: 0 hazards
    # displayed (0 errors, 0 warnings)"
    summary = "ERROR SUMMARY: 0 errors" if tool == "memcheck" else "RACECHECK SUMMARY: 0 hazards displayed (0 errors,"
    assert summary in proc.stdout, proc.stdout[-4000:]
