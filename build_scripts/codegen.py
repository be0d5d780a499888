"""Upstream codegen on the merged yaml: torchgen's ATen codegen and the
packaged autograd codegen, both run from the pinned wheel.

Outputs are arranged as an include root (ATen/..., torch/csrc/autograd/generated/...)
that goes ahead of the wheel's headers, so project sources and the generated
autograd code see operators as the merged yaml defines them.

Codegen is a pure function of the merged yaml and the pinned torchgen, so its
output is kept under the hash of those inputs (in $DWCONV_CACHE/codegen, for
every checkout) and reused while they stay the same; the CODEGEN_RUNS_KEPT most
recently used runs are kept.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .cache_prune import prune, touch
from .errors import HarnessError
from .symbols import KERNEL_KEYS
from .toolchain import COMMON_DEFINES, CXX_FLAGS, Toolchain, compiler_version, include_flags, run_compiler
from .wheel_cache import PinnedTorch


CODEGEN_RUNS_KEPT = 8  # about 100 MB each: the repository's and the L0 tests' fixture patch sets


@dataclass(frozen=True)
class GeneratedCode:
    root: Path
    cached: bool

    @property
    def include_root(self) -> Path:
        return self.root / "include"

    @property
    def autograd_functions_cpp(self) -> Path:
        return self.root / "autograd" / "Functions.cpp"

    @property
    def merged_native_functions(self) -> Path:
        return self.root / "aten-src" / "native" / "native_functions.yaml"

    @property
    def merged_derivatives(self) -> Path:
        return self.root / "autograd-src" / "derivatives.yaml"


def _run_torchgen(args: list[str], torch: PinnedTorch, what: str, cwd: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(torch.root))
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        lines = (proc.stderr + proc.stdout).strip().splitlines()
        raise HarnessError(f"{what} failed:\n" + "\n".join(lines[-40:]))


def _codegen_key(native_functions: str, derivatives: str, torch: PinnedTorch) -> str:
    digest = hashlib.sha256()
    for part in (native_functions, derivatives, torch.wheel.name):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:24]


def run_codegen(native_functions: str, derivatives: str, torch: PinnedTorch, cache: Path) -> GeneratedCode:
    """Generate ATen and autograd code for the merged yaml texts (or reuse a cached run)."""
    dest = cache / _codegen_key(native_functions, derivatives, torch)
    if (dest / ".complete").exists():
        touch(dest)
        return GeneratedCode(dest, cached=True)
    if cache.is_dir():  # room for the run about to be made
        prune([[run] for run in cache.iterdir() if run.is_dir()], max_entries=CODEGEN_RUNS_KEPT - 1)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        aten_src = work / "aten-src"
        (aten_src / "native").mkdir(parents=True)
        (aten_src / "native" / "native_functions.yaml").write_text(native_functions)
        shutil.copy(torch.packaged_aten / "native" / "tags.yaml", aten_src / "native" / "tags.yaml")
        (aten_src / "templates").symlink_to(torch.packaged_aten / "templates")
        autograd_src = work / "autograd-src"
        autograd_src.mkdir()
        (autograd_src / "derivatives.yaml").write_text(derivatives)
        (autograd_src / "templates").symlink_to(torch.packaged_autograd / "templates")

        _run_torchgen(
            ["-m", "torchgen.gen", "--source-path", str(aten_src), "--install_dir", str(work / "aten"),
             "--aoti-install-dir", str(work / "aoti"), "--per-operator-headers",
             "--generate", "headers", "sources"],
            torch, "ATen codegen (torchgen.gen) on the merged native_functions.yaml", work,
        )
        _run_torchgen(
            ["-m", "torchgen.packaged.autograd.gen_autograd",
             str(aten_src / "native" / "native_functions.yaml"), str(aten_src / "native" / "tags.yaml"),
             str(work / "autograd"), str(autograd_src)],
            torch, "autograd codegen (gen_autograd) on the merged derivatives.yaml", work,
        )
        include = work / "include"
        (include / "torch" / "csrc" / "autograd").mkdir(parents=True)
        (include / "ATen").symlink_to("../aten")
        (include / "torch" / "csrc" / "autograd" / "generated").symlink_to("../../../../autograd")
        (work / ".complete").write_text("")
        shutil.rmtree(dest, ignore_errors=True)
        work.rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return GeneratedCode(dest, cached=False)


def syntax_check_autograd(generated: GeneratedCode, torch: PinnedTorch, toolchain: Toolchain) -> None:
    """Compile the generated Functions.cpp syntax-only: catches formulas that
    codegen accepts but C++ does not (an undefined name, a wrong argument)."""
    includes = include_flags([generated.include_root], torch, toolchain)
    cmd = [toolchain.cxx, "-fsyntax-only", str(generated.autograd_functions_cpp),
           *CXX_FLAGS, *COMMON_DEFINES, *includes]
    # A pass is remembered with the exact command and compiler that produced it.
    record = "\n".join([compiler_version(toolchain.cxx), *cmd]) + "\n"
    passed = generated.root / ".functions-cpp-passed"
    if passed.exists() and passed.read_text() == record:
        return
    run_compiler(cmd, "the generated autograd Functions.cpp does not compile (a derivatives.yaml formula is wrong)")
    passed.write_text(record)


@dataclass(frozen=True)
class OverlayOps:
    """What the overlay must add to a stock torch, by operator name (name.overload)."""

    new: tuple[str, ...]  # operators our native_functions overrides add
    dispatched: tuple[str, ...]  # operators whose dispatch entries our overrides set
    differentiated: tuple[str, ...]  # operators whose derivatives our overrides set

    def arguments(self) -> list[str]:
        return ["--new-ops", *self.new, "--dispatch-ops", *self.dispatched, "--autograd-ops", *self.differentiated,
                "--kernel-keys", *KERNEL_KEYS]


def generate_overlay_code(generated: GeneratedCode, torch: PinnedTorch, ops: OverlayOps) -> Path:
    """The overlay's share of codegen for `ops` (build_scripts/torchgen_overlay.py), kept
    beside the codegen output it comes from."""
    script = Path(__file__).with_name("torchgen_overlay.py")
    key = hashlib.sha256("\0".join([script.read_text(), *ops.arguments()]).encode()).hexdigest()[:16]
    dest = generated.root / "overlay" / key / "OverlayGenerated.cpp"
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    _run_torchgen(
        [str(script), "--native-functions", str(generated.merged_native_functions),
         "--upstream-native-functions", str(torch.packaged_yaml("native_functions")),
         "--tags", str(generated.merged_native_functions.with_name("tags.yaml")),
         "--derivatives", str(generated.merged_derivatives),
         "--templates", str(torch.packaged_autograd / "templates"), "--out", str(partial), *ops.arguments()],
        torch, "generating the overlay's registrations (build_scripts/torchgen_overlay.py)", generated.root,
    )
    partial.replace(dest)
    return dest
