"""Harness for the depthwise-convolution patch set on PyTorch (see DESIGN.md)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
