"""The pin is read from one file and checked; the toolchain and wheel must match it."""

import zipfile

import pytest

from build_scripts.errors import HarnessError
from build_scripts.pin import PIN_FILE, CudaArch, load_pin, parse_arch_list
from build_scripts.toolchain import find_toolchain
from build_scripts.wheel_cache import _requirement_pins, cache_dir, verify_torch_wheel


def test_repository_pin():
    pin = load_pin()
    assert (pin.version, pin.tag, pin.commit) == ("2.11.0", "v2.11.0", "70d99e998b4955e0049d13a98d77ae1b14db1f45")
    assert pin.cuda_version == "13.0"
    assert [str(a) for a in pin.default_archs] == ["8.0", "9.0"]
    assert pin.wheel_version == "2.11.0+cu130.dwconv"


def test_arch_list_override_and_gencode():
    pin = load_pin()
    assert [str(a) for a in pin.archs({"TORCH_CUDA_ARCH_LIST": "8.6; 9.0a+PTX"})] == ["8.6", "9.0a+PTX"]
    assert pin.archs({}) == pin.default_archs
    assert CudaArch.parse("9.0a+PTX").gencode_flags() == [
        "-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_90a,code=compute_90a"]


@pytest.mark.parametrize("bad", ["sm_80", "8", "9.0+ptx", ""])
def test_bad_arch_lists(bad):
    with pytest.raises(HarnessError, match="bad CUDA arch|empty CUDA arch list"):
        parse_arch_list(bad)


def test_pin_file_errors(tmp_path):
    good = PIN_FILE.read_text()
    path = tmp_path / "pin.toml"
    path.write_text(good.replace('commit = "70d99e998b4955e0049d13a98d77ae1b14db1f45"', 'commit = "70d99e9"'))
    with pytest.raises(HarnessError, match="is not a full SHA-1"):
        load_pin(path)
    path.write_text(good.replace("local_label", "label"))
    with pytest.raises(HarnessError, match="lacks the key 'local_label'"):
        load_pin(path)
    with pytest.raises(HarnessError, match="is missing"):
        load_pin(tmp_path / "none.toml")


def fake_wheel(tmp_path, version_py: str):
    path = tmp_path / "torch-2.11.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("torch/version.py", version_py)
    return path


def test_wheel_of_another_build_is_refused_naming_both(tmp_path):
    wheel = fake_wheel(tmp_path, "__version__ = '2.11.0+cu128'\ngit_version = 'abc'\ncuda: Optional[str] = '12.8'\n")
    with pytest.raises(HarnessError) as error:
        verify_torch_wheel(wheel, load_pin())
    message = str(error.value)
    assert "version '2.11.0+cu128' (pinned: '2.11.0+cu130')" in message
    assert "commit 'abc' (pinned: '70d99e998b4955e0049d13a98d77ae1b14db1f45')" in message
    assert "cuda '12.8' (pinned: '13.0')" in message


def test_truncated_wheel_is_reported(tmp_path):
    wheel = tmp_path / "torch-2.11.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(HarnessError, match=r"is not a readable torch wheel .*; delete it and run again"):
        verify_torch_wheel(wheel, load_pin())


def test_pinned_wheel_metadata_is_accepted(tmp_path):
    verify_torch_wheel(fake_wheel(tmp_path, (
        "__version__ = '2.11.0+cu130'\ngit_version = '70d99e998b4955e0049d13a98d77ae1b14db1f45'\n"
        "cuda: Optional[str] = '13.0'\n")), load_pin())


def test_requirement_pins_read_exact_pins_only():
    metadata = (
        "Metadata-Version: 2.1\nName: torch\n"
        'Requires-Dist: cuda-toolkit[cublas,cusparse]==13.0.2; platform_system == "Linux"\n'
        "Requires-Dist: nvidia-cublas==13.1.0.3.*; (sys_platform == 'linux') and extra == 'cublas'\n"
        "Requires-Dist: sympy>=1.13.3\n"
    )
    pins = _requirement_pins(metadata)
    assert pins["cuda-toolkit"][0] == "13.0.2"
    assert pins["nvidia-cublas"] == ("13.1.0.3.*", "(sys_platform == 'linux') and extra == 'cublas'")
    assert "sympy" not in pins


def test_cache_dir_is_outside_the_repo_by_default(tmp_path):
    assert cache_dir({"DWCONV_CACHE": str(tmp_path)}) == tmp_path.resolve()
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "dwconv"


def test_nvcc_of_another_cuda_release_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("NVCC", str(fake))
    with pytest.raises(HarnessError, match=rf"{fake} is CUDA 12.4, but the pin is CUDA 13.0"):
        find_toolchain(load_pin())
