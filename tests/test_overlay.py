"""The overlay package: its wheel, and its refusal of a torch it was not built for."""

import base64
import hashlib
import os
import subprocess
import sys
import zipfile

import pytest

from build_scripts.overlay import build_info, package_files, stage, write_wheel, overlay_version
from build_scripts.patchset import PatchSet
from build_scripts.pin import load_pin

FAKE_LIBRARY = b"\x7fELF not really a library"


@pytest.fixture
def files(tmp_path):
    library = tmp_path / "libdwconv_overlay.so"
    library.write_bytes(FAKE_LIBRARY)
    pin = load_pin()
    return package_files(library, pin, PatchSet.load(), pin.default_archs)


def test_wheel_carries_loader_library_and_metadata(files, tmp_path):
    pin = load_pin()
    patch_set = PatchSet.load()
    version = overlay_version(pin, patch_set.hash)
    assert version == f"2.11.0+cu130.dwconv.{patch_set.hash[:12]}"
    wheel = write_wheel(tmp_path, version, files, pin)
    assert wheel.name == f"dwconv_overlay-{version}-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert {"dwconv_overlay/__init__.py", "dwconv_overlay/_build_info.py",
                "dwconv_overlay/libdwconv_overlay.so"} <= names
        dist_info = f"dwconv_overlay-{version}.dist-info"
        metadata = zf.read(f"{dist_info}/METADATA").decode()
        assert "Requires-Dist: torch==2.11.0\n" in metadata
        assert "Tag: py3-none-linux_x86_64" in zf.read(f"{dist_info}/WHEEL").decode()
        for line in zf.read(f"{dist_info}/RECORD").decode().splitlines():
            name, digest, size = line.split(",")
            if digest:
                data = zf.read(name)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert digest == f"sha256={expected}" and int(size) == len(data)
        info = zf.read("dwconv_overlay/_build_info.py").decode()
    assert info == build_info(pin, patch_set.hash, pin.default_archs)
    assert "PINNED_COMMIT = '70d99e998b4955e0049d13a98d77ae1b14db1f45'" in info


def test_loader_refuses_another_torch_naming_both(files, tmp_path):
    fake_torch = tmp_path / "fake" / "torch"
    fake_torch.mkdir(parents=True)
    (fake_torch / "__init__.py").write_text(
        "__version__ = '2.13.0+cpu'\n"
        "class version:\n    git_version = 'abcdef'\n"
        "class ops:\n    @staticmethod\n    def load_library(path):\n        raise AssertionError('must not load')\n"
    )
    staging = stage(files, tmp_path / "staging")
    proc = subprocess.run([sys.executable, "-c", "import dwconv_overlay"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path / 'fake'}:{staging}"})
    assert proc.returncode == 1
    assert ("ImportError: dwconv_overlay is built for torch 2.11.0+cu130 (commit 70d99e998b4955e0049d13a98d77ae1b14db1f45), "
            "but this process has torch 2.13.0+cpu (commit abcdef)") in proc.stderr
    assert "must not load" not in proc.stderr
