"""A virtual environment with the pinned torch and its CUDA libraries installed,
kept in the cache, for loading the overlay without a GPU (L0's load step).

torch==2.11.0 from PyPI with its dependencies is about 4.6 GB; pip's own cache
makes a rebuilt environment quick.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .errors import HarnessError
from .pin import Pin


def _python(env: Path) -> Path:
    return env / "bin" / "python"


def ensure_runtime_env(pin: Pin, cache: Path) -> Path:
    """The environment's python, with torch == the pin's stock build importable."""
    env = cache / f"runtime-py{sys.version_info.major}{sys.version_info.minor}-torch-{pin.stock_version}"
    marker = env / ".complete"
    if marker.exists():
        return _python(env)
    shutil.rmtree(env, ignore_errors=True)
    print(f"[L0] installing torch=={pin.version} with its CUDA libraries (about 4.6 GB) into {env}", file=sys.stderr)
    steps = [
        [sys.executable, "-m", "venv", str(env)],
        [str(_python(env)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--only-binary=:all:", f"torch=={pin.version}"],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            raise HarnessError(f"{' '.join(cmd[:4])} ... failed:\n{(proc.stderr or proc.stdout).strip()[-2000:]}")
    version = subprocess.run(
        [str(_python(env)), "-c", "import torch; print(torch.__version__, torch.version.git_version)"],
        capture_output=True, text=True,
    ).stdout.split()
    if version != [pin.stock_version, pin.commit]:
        shutil.rmtree(env, ignore_errors=True)
        raise HarnessError(
            f"pip installed torch {' '.join(version) or '(not importable)'}, not the pinned "
            f"{pin.stock_version} {pin.commit}"
        )
    marker.write_text(f"{pin.stock_version}\n")
    return _python(env)
