"""A small git repository that imitates the parts of a PyTorch tree the patch set touches,
and a small patch set for it. GitHub is out of reach, so the harness is tested on these."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from build_scripts.pin import Pin, load_pin

NATIVE_FUNCTIONS = """\
# Stand-in for upstream's native_functions.yaml: a preamble of comments,
# entries with attached comments, and the depthwise entries the patch set touches.

- func: _cast_Byte(Tensor self, bool non_blocking=False) -> Tensor
  variants: function

- func: convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor
  dispatch:
    CompositeExplicitAutograd: convolution
  autogen: convolution.out
  tags: core

- func: convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)
  dispatch:
    CompositeExplicitAutograd, CUDA: convolution_backward
  autogen: convolution_backward.out
  tags: core

# Only exists to exercise deletion of an entry with its attached comment.
- func: _conv_depthwise2d.out(Tensor self, Tensor weight, SymInt[2] kernel_size, Tensor? bias, SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation, *, Tensor(a!) out) -> Tensor(a!)
  python_module: nn
  dispatch:
    CUDA: conv_depthwise2d_cuda_out

- func: _conv_depthwise2d(Tensor self, Tensor weight, SymInt[2] kernel_size, Tensor? bias, SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation) -> Tensor
  python_module: nn
  dispatch:
    CUDA: conv_depthwise2d_cuda

- func: conv_depthwise3d(Tensor self, Tensor weight, SymInt[3] kernel_size, Tensor? bias, SymInt[3] stride, SymInt[3] padding, SymInt[3] dilation) -> Tensor
  python_module: nn
  dispatch:
    CUDA: conv_depthwise3d_cuda
  autogen: conv_depthwise3d.out
"""

DERIVATIVES = """\
# Stand-in for upstream's derivatives.yaml (formulas are placeholders).
- name: abs(Tensor self) -> Tensor
  self: abs_backward_stand_in(grad, self)
  result: abs_jvp_stand_in(self_t, self_p)

- name: _conv_depthwise2d(Tensor self, Tensor weight, SymInt[2] kernel_size, Tensor? bias, SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation) -> Tensor
  self, weight, bias: "depthwise2d_backward_stand_in(grad, self, weight, grad_input_mask)"

- name: conv_depthwise3d(Tensor self, Tensor weight, SymInt[3] kernel_size, Tensor? bias, SymInt[3] stride, SymInt[3] padding, SymInt[3] dilation) -> Tensor
  self, weight, bias: "depthwise3d_backward_stand_in(grad, self, weight, grad_input_mask)"
"""

CONVOLUTION_CPP = """\
// upstream Convolution.cpp stand-in
namespace at::native {
bool use_depthwise() {
  return true;
}
} // namespace at::native
"""

UPSTREAM_FILES = {
    "aten/src/ATen/native/native_functions.yaml": NATIVE_FUNCTIONS,
    "tools/autograd/derivatives.yaml": DERIVATIVES,
    "aten/src/ATen/native/Convolution.cpp": CONVOLUTION_CPP,
    "aten/src/ATen/native/cuda/DepthwiseConv2d.cu": "// upstream DepthwiseConv2d.cu stand-in\n",
    "aten/src/ATen/native/cuda/DepthwiseConv3d.cu": "// upstream DepthwiseConv3d.cu stand-in\n",
    "torch/__init__.py": "",
    "requirements-build.txt": "# stand-in for v2.11.0's build requirements\nsetuptools\ncmake\nninja\n",
}


def run(cwd: Path, *cmd: str) -> str:
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_fake_pytorch(root: Path, tag: str = "v2.11.0") -> tuple[Path, str]:
    """A git repo holding UPSTREAM_FILES at one commit tagged `tag`; (path, commit)."""
    root.mkdir(parents=True)
    for path, text in UPSTREAM_FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    run(root, "git", "init", "-q", "-b", "main")
    run(root, "git", "add", "-A")
    run(root, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "upstream")
    run(root, "git", "tag", "-a", tag, "-m", tag)
    return root, run(root, "git", "rev-parse", "HEAD").strip()


def pin_for(commit: str, url: str = "file:///nonexistent") -> Pin:
    return dataclasses.replace(load_pin(), commit=commit, git_url=url)


def tree_snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file and directory of the work tree, and the git index, with bytes and mtime."""
    snapshot = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if relative == ".git/index" or not (relative == ".git" or relative.startswith(".git/")):
            mtime = 0 if relative == ".git/index" else path.stat().st_mtime_ns
            snapshot[relative] = (path.read_bytes(), mtime) if path.is_file() else (b"<dir>", 0)
    return snapshot


# -- a patch set for the fake tree ------------------------------------------------

KERNEL_2D = "// project-owned 2D depthwise kernels (test stand-in)\n#include \"DepthwiseCommon.cuh\"\n"
COMMON_HEADER = "// project-owned shared header (test stand-in)\n#pragma once\n"

NATIVE_OVERRIDE = """\
# Route convolution through a project-owned CUDA kernel; expose the backward.
replace:
  - func: convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor
    dispatch:
      CompositeExplicitAutograd: convolution
      CUDA: dwconv_convolution_cuda
    autogen: convolution.out
    tags: core
add:
  - func: _conv_depthwise2d_backward(Tensor grad_output, Tensor self, Tensor weight, SymInt[2] kernel_size, SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation, bool[2] output_mask) -> (Tensor grad_input, Tensor grad_weight)
    python_module: nn
    dispatch:
      CUDA: conv_depthwise2d_backward_cuda
delete:
  - _conv_depthwise2d.out
"""

DERIVATIVES_OVERRIDE = """\
replace:
  - name: _conv_depthwise2d(Tensor self, Tensor weight, SymInt[2] kernel_size, Tensor? bias, SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation) -> Tensor
    self, weight, bias: "depthwise2d_backward_fixed(grad, self, weight, /*groups=*/ self.sym_size(1), grad_input_mask)"
"""

CONVOLUTION_DIFF = """\
diff --git a/aten/src/ATen/native/Convolution.cpp b/aten/src/ATen/native/Convolution.cpp
--- a/aten/src/ATen/native/Convolution.cpp
+++ b/aten/src/ATen/native/Convolution.cpp
@@ -1,6 +1,6 @@
 // upstream Convolution.cpp stand-in
 namespace at::native {
 bool use_depthwise() {
-  return true;
+  return false;
 }
 } // namespace at::native
"""

SERIES = """\
# test patch set
replace aten/src/ATen/native/cuda/DepthwiseConv2d.cu | our 2D kernels replace upstream's | upstream: no
add aten/src/ATen/native/cuda/DepthwiseCommon.cuh | helpers shared by the 2D and 3D kernels | upstream: no
override native_functions/depthwise.yaml | route depthwise convolution to our kernels | upstream: not-needed
override derivatives/depthwise.yaml | fix groups=1 in the depthwise backward formula | upstream: no
diff 0001-convolution.patch | a change nothing else can make | upstream: no
"""


def write_patch_set(root: Path, series: str = SERIES, files: dict[str, str | None] | None = None,
                    defaults: bool = True) -> tuple[Path, Path]:
    """Write a patch set under root; (patches_dir, overrides_dir).

    The files of SERIES are written unless defaults is False; `files` adds
    or replaces files (None leaves one out)."""
    contents = {} if not defaults else {
        "patches/series": series,
        "patches/files/aten/src/ATen/native/cuda/DepthwiseConv2d.cu": KERNEL_2D,
        "patches/files/aten/src/ATen/native/cuda/DepthwiseCommon.cuh": COMMON_HEADER,
        "native_functions_overrides/native_functions/depthwise.yaml": NATIVE_OVERRIDE,
        "native_functions_overrides/derivatives/depthwise.yaml": DERIVATIVES_OVERRIDE,
        "patches/diffs/0001-convolution.patch": CONVOLUTION_DIFF,
    }
    contents["patches/series"] = series
    contents.update(files or {})
    for path, text in contents.items():
        if text is None:
            continue
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root / "patches", root / "native_functions_overrides"
