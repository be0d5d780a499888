"""The real L0 check on the real pinned wheel, and proof that each of its checks can fail.

The kernel source here is a fixture with upstream's DepthwiseConv2d.cu interfaces
(tests/fixtures/l0_patch_set), not a kernel. The first run downloads the pinned
wheel and CUDA headers (~1.3 GB) into $DWCONV_CACHE; later runs reuse them.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.check import LIBRARY_NAME, run_l0
from build_scripts.errors import HarnessError
from build_scripts.fatbin import fatbin_entries
from build_scripts.patchset import PatchSet
from build_scripts.pin import load_pin, parse_arch_list
from build_scripts.runtime_env import ensure_runtime_env
from build_scripts.toolchain import compile_command, find_toolchain, include_flags, link_command, run_compiler
from build_scripts.wheel_cache import cache_dir, ensure_pinned_torch

pytestmark = pytest.mark.l0

FIXTURE = Path(__file__).parent / "fixtures" / "l0_patch_set"
KERNEL = "patches/files/aten/src/ATen/native/cuda/DepthwiseConv2d.cu"
ONE_ARCH = parse_arch_list("8.0")  # negative cases: one arch is enough to fail


@pytest.fixture
def fixture_copy(tmp_path):
    dest = tmp_path / "patchset"
    shutil.copytree(FIXTURE, dest)
    return dest


def edit(root: Path, relative: str, old: str, new: str) -> None:
    path = root / relative
    text = path.read_text()
    assert old in text, f"fixture changed: {old!r} not in {relative}"
    path.write_text(text.replace(old, new))


def add_override(root: Path, flavour: str, name: str, text: str) -> None:
    (root / "native_functions_overrides" / flavour).mkdir(parents=True, exist_ok=True)
    (root / "native_functions_overrides" / flavour / name).write_text(text)
    with open(root / "patches" / "series", "a") as series:
        series.write(f"override {flavour}/{name} | test case | upstream: no\n")


@pytest.fixture
def l0(tmp_path):
    """L0 on a patch set, in a work folder of the test's own; the codegen runs and compiled objects
    come from $DWCONV_CACHE's shared caches where they were made before, from the same files."""
    def run(root: Path, archs=None):
        patch_set = PatchSet.load(root / "patches", root / "native_functions_overrides")
        before = patch_set.hash
        try:
            return run_l0(load_pin(), patch_set, archs=archs, work=tmp_path / "work")
        finally:
            assert PatchSet.load(root / "patches", root / "native_functions_overrides").hash == before
    return run


def test_fixture_patch_set_passes_for_every_target_arch(fixture_copy, tmp_path, l0):
    report = l0(fixture_copy, archs=parse_arch_list("8.0;9.0+PTX"))
    steps = list(report.timings)  # in the order the steps ended
    # autograd's syntax check and the compile overlap (one thread each): either may end first.
    assert steps[:3] == ["fetch", "merge", "codegen"] and sorted(steps[3:5]) == ["autograd", "compile"]
    assert steps[5:] == ["link", "symbols"]
    obj = tmp_path / "work" / "obj" / "aten/src/ATen/native/cuda/DepthwiseConv2d.cu.o"
    assert {("cubin", 80), ("cubin", 90), ("ptx", 90)} <= fatbin_entries(obj)
    library = tmp_path / "work" / LIBRARY_NAME
    assert report.library == library
    exported = subprocess.run(["nm", "-DC", "--defined-only", str(library)], capture_output=True,
                              text=True, check=True).stdout
    for name in ("at::native::conv_depthwise2d_cuda(", "at::native::conv_depthwise2d_cuda_out(",
                 "at::native::dwconv_l0_fixture_cuda("):
        assert name in exported
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert "libtorch_cuda.so" in needed and "libc10_cuda.so" in needed
    assert "L0 passed in" in report.summary()


def test_kernel_syntax_error_names_the_item_and_shows_nvcc(fixture_copy, l0):
    edit(fixture_copy, KERNEL, "return out;\n}", "return out\n}")
    with pytest.raises(HarnessError) as error:
        l0(fixture_copy, archs=ONE_ARCH)
    message = str(error.value)
    assert message.startswith("L0 compile failed: patches/series:3 (replace aten/src/ATen/native/cuda/DepthwiseConv2d.cu): "
                              f"{KERNEL} does not compile for sm_80")
    assert "DepthwiseConv2d.cu(" in message and "error: expected a \";\"" in message


def test_drifted_signature_and_missing_stub_registration(fixture_copy, l0):
    edit(fixture_copy, KERNEL,
         "    IntArrayRef dilation) {\n  auto out",
         "    int64_t dilation) {\n  auto out")
    edit(fixture_copy, KERNEL, "  return conv_depthwise2d_cuda_out(self, weight, kernel_size, bias, stride, padding, dilation, out);",
         "  return conv_depthwise2d_cuda_out(self, weight, kernel_size, bias, stride, padding, {dilation}, out);")
    edit(fixture_copy, KERNEL, "REGISTER_CUDA_DISPATCH(conv_depthwise2d_backward_stub, &fixture_backward)", "")
    with pytest.raises(HarnessError) as error:
        l0(fixture_copy, archs=ONE_ARCH)
    message = str(error.value)
    assert message.startswith("L0 symbols failed:")
    assert (f"{KERNEL}: at::native::conv_depthwise2d_cuda has a signature that drifted from "
            "ATen/ops/_conv_depthwise2d_native.h:") in message
    assert ("    declared: at::native::conv_depthwise2d_cuda(at::Tensor const&, at::Tensor const&, c10::ArrayRef<long>, "
            "std::optional<at::Tensor> const&, c10::ArrayRef<long>, c10::ArrayRef<long>, c10::ArrayRef<long>)") in message
    assert ("    defined:  at::native::conv_depthwise2d_cuda(at::Tensor const&, at::Tensor const&, c10::ArrayRef<long>, "
            "std::optional<at::Tensor> const&, c10::ArrayRef<long>, c10::ArrayRef<long>, long)") in message
    assert f"{KERNEL}: registers no kernel with at::native::conv_depthwise2d_backward_stub" in message


def test_unresolved_symbol_fails_the_link(fixture_copy, l0):
    edit(fixture_copy, KERNEL, "namespace at::native {\nnamespace {", (
        "void dwconv_helper_nobody_defines();\n\nnamespace at::native {\nnamespace {"))
    edit(fixture_copy, KERNEL, "  return self;\n}", "  dwconv_helper_nobody_defines();\n  return self;\n}")
    with pytest.raises(HarnessError) as error:
        l0(fixture_copy, archs=ONE_ARCH)
    message = str(error.value)
    assert message.startswith(f"L0 link failed: linking {LIBRARY_NAME} against the pinned libraries left symbols unresolved")
    assert "undefined reference to `dwconv_helper_nobody_defines()'" in message


def test_interface_of_a_source_the_series_lacks(fixture_copy, l0):
    edit(fixture_copy, "patches/interfaces.toml", 'source = "aten/src/ATen/native/cuda/DepthwiseConv2d.cu"\nheader = "ATen/native/ConvUtils.h"',
         'source = "aten/src/ATen/native/cuda/DepthwiseConv3d.cu"\nheader = "ATen/native/ConvUtils.h"')
    with pytest.raises(HarnessError, match=r"interfaces.toml: aten/src/ATen/native/cuda/DepthwiseConv3d.cu is not a "
                                           r"compiled source of the series"):
        l0(fixture_copy, archs=ONE_ARCH)


def test_dispatch_kernel_that_nothing_defines(fixture_copy, l0):
    edit(fixture_copy, KERNEL, "Tensor dwconv_l0_fixture_cuda(const Tensor& self)", "Tensor dwconv_l0_fixtur_cuda(const Tensor& self)")
    with pytest.raises(HarnessError) as error:
        l0(fixture_copy, archs=ONE_ARCH)
    assert ("native_functions_overrides/native_functions/fixture.yaml:4 (dispatch kernel; looked in the patch set's "
            "sources and the pinned libraries): at::native::dwconv_l0_fixture_cuda(at::Tensor const&) is not defined "
            "(declared in ATen/ops/_dwconv_l0_fixture_native.h)") in str(error.value)


def test_broken_derivative_formula_fails_the_autograd_compile(fixture_copy, l0):
    add_override(fixture_copy, "derivatives", "broken.yaml", (
        "replace:\n"
        "  - name: _conv_depthwise2d(Tensor self, Tensor weight, SymInt[2] kernel_size, Tensor? bias, SymInt[2] stride, "
        "SymInt[2] padding, SymInt[2] dilation) -> Tensor\n"
        "    self, weight, bias: \"undefined_depthwise_helper(grad, self, weight, grad_input_mask)\"\n"
    ))
    with pytest.raises(HarnessError) as error:
        l0(fixture_copy, archs=ONE_ARCH)
    message = str(error.value)
    assert message.startswith("L0 autograd failed: the generated autograd Functions.cpp does not compile")
    assert "native_functions_overrides/derivatives/broken.yaml" in message
    assert "'undefined_depthwise_helper' was not declared in this scope" in message


def test_derivatives_entry_missing_an_output_fails_codegen(fixture_copy, l0):
    """A forward-mode formula for one output of a two-output operator, none for the other."""
    edit(fixture_copy, "native_functions_overrides/native_functions/fixture.yaml",
         "_dwconv_l0_fixture(Tensor self) -> Tensor", "_dwconv_l0_fixture(Tensor self) -> (Tensor first, Tensor second)")
    add_override(fixture_copy, "derivatives", "fixture.yaml", (
        "add:\n"
        "  - name: _dwconv_l0_fixture(Tensor self) -> (Tensor first, Tensor second)\n"
        "    self: grads[0] + grads[1]\n"
        "    first: self_t\n"
    ))
    with pytest.raises(HarnessError) as error:
        l0(fixture_copy, archs=ONE_ARCH)
    message = str(error.value)
    assert message.startswith("L0 codegen failed: autograd codegen (gen_autograd) on the merged derivatives.yaml failed")
    assert ("Expected the number of forward derivatives implemented (1) to match the number of "
            "differentiable outputs (2)") in message
    assert ("the error names operators our overrides set: _dwconv_l0_fixture "
            "(native_functions_overrides/native_functions/fixture.yaml:4), _dwconv_l0_fixture "
            "(native_functions_overrides/derivatives/fixture.yaml:2)") in message


def test_unknown_dispatch_key_fails_codegen(fixture_copy, l0):
    edit(fixture_copy, "native_functions_overrides/native_functions/fixture.yaml",
         "      CUDA: dwconv_l0_fixture_cuda", "      CUDAX: dwconv_l0_fixture_cuda")
    with pytest.raises(HarnessError) as error:
        l0(fixture_copy, archs=ONE_ARCH)
    message = str(error.value)
    assert message.startswith("L0 codegen failed: ATen codegen (torchgen.gen) on the merged native_functions.yaml failed")
    assert "CUDAX" in message
    assert "native_functions_overrides/native_functions/fixture.yaml" in message


def test_make_check_on_the_repository_patch_set():
    """The README's `make check`, as a user runs it (through the CLI the Makefile calls)."""
    def make_check():
        proc = subprocess.run([sys.executable, "-m", "build_scripts", "check"], cwd=REPO_ROOT,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert "L0 passed in" in proc.stdout
        return proc.stdout

    make_check()
    assert "reused from" in make_check()  # unchanged yaml: codegen is not redone


def test_make_overlay_wheel_installs_and_patches_stock_torch(tmp_path):
    """`make overlay`, then the wheel as a user installs it beside the pinned torch (no GPU)."""
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "overlay"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    wheel = next(line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("overlay wheel: "))
    assert Path(wheel).name.startswith(f"dwconv_overlay-2.11.0+cu130.dwconv.{PatchSet.load().hash[:12]}-")
    python = ensure_runtime_env(load_pin(), cache_dir())
    site = tmp_path / "site"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), wheel],
                   check=True, capture_output=True)
    probe = (
        "import torch, dwconv_overlay\n"
        "cuda = [l for l in torch._C._dispatch_dump('aten::_conv_depthwise2d').splitlines() if l.startswith('CUDA:')]\n"
        "print(dwconv_overlay.enabled(), 'RegisterOverlay.cpp' in cuda[0], dwconv_overlay.PATCHSET_HASH)\n"
    )
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(site)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", PatchSet.load().hash]


def test_overlay_built_for_another_commit_refuses_to_patch(tmp_path):
    """Loaded with torch.ops.load_library directly (no Python check), a library built for
    another torch commit leaves torch alone and says why; enabling it is an error."""
    pin, patch_set = load_pin(), PatchSet.load()
    report = run_l0(pin, patch_set)  # reuses build/l0's objects when make check ran
    torch = ensure_pinned_torch(pin, cache_dir())
    toolchain = find_toolchain(pin)
    registration = tmp_path / "RegisterOverlay.o"
    other = "0" * 40
    includes = include_flags([patch_set.files_root / "aten" / "src"], torch, toolchain)
    run_compiler(compile_command(toolchain, patch_set.overlay_root / "RegisterOverlay.cpp", registration,
                                 includes + [f'-DDWCONV_PINNED_COMMIT="{other}"'], ()), "compile")
    obj_dir = report.library.parent / "obj"
    series_objects = {obj_dir / f"{item.path}.o" for item in patch_set.compiled_sources()}
    overlay_objects = {o for o in (obj_dir / "overlay").glob("*.o") if o.name != "RegisterOverlay.cpp.o"}
    objects = sorted(series_objects | overlay_objects)  # not what an earlier series left in obj/
    library = tmp_path / "libdwconv_overlay.so"
    run_compiler(link_command(toolchain, [*objects, registration], library, torch), "link")
    probe = (
        "import torch\n"
        f"torch.ops.load_library({str(library)!r})\n"
        "cuda = [l for l in torch._C._dispatch_dump('aten::_conv_depthwise2d').splitlines() if l.startswith('CUDA:')]\n"
        "print('patched' if 'RegisterOverlay.cpp' in cuda[0] else 'untouched', torch.ops.dwconv.enabled())\n"
        "try:\n    torch.ops.dwconv.set_enabled(True)\nexcept RuntimeError as e:\n    print('refused:', str(e).splitlines()[0])\n"
    )
    python = ensure_runtime_env(pin, cache_dir())
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    message = f"the dwconv overlay is built for torch commit {other}, but this libtorch is {pin.commit}"
    assert f"{message}; not patching it" in out.stderr
    assert out.stdout.splitlines() == ["untouched False", f"refused: {message}"]


def test_another_checkout_reuses_the_compiled_objects(tmp_path):
    """L0's objects, codegen runs and symbol probes are kept in $DWCONV_CACHE by what made them, a
    checkout's own path aside: the same patch set in another checkout (as CI's fresh clone is)
    checks without compiling, where a cold compile of the kernels takes minutes."""
    run_l0(load_pin(), PatchSet.load())  # this checkout's, compiled or reused
    other = tmp_path / "checkout"
    for part in ("build_scripts", "patches", "native_functions_overrides"):
        shutil.copytree(REPO_ROOT / part, other / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pin.toml", other / "pin.toml")
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "check"], cwd=other, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    steps = dict(re.findall(r"(\w[\w-]*) (\d+\.\d)s", proc.stdout.split("overlap: ", 1)[1].splitlines()[0]))
    assert float(steps["compile"]) < 10 and float(steps["codegen"]) < 10, proc.stdout
    assert (other / "build" / "l0" / LIBRARY_NAME).is_file()
