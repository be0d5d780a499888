import pytest

from tests.fake_pytorch import make_fake_pytorch, pin_for, write_patch_set
from build_scripts.patchset import PatchSet


@pytest.fixture
def fake_tree(tmp_path):
    """(path, commit) of a synthetic PyTorch checkout at the tag v2.11.0."""
    return make_fake_pytorch(tmp_path / "pytorch")


@pytest.fixture
def fake_pin(fake_tree):
    return pin_for(fake_tree[1], url=f"file://{fake_tree[0]}")


@pytest.fixture
def patch_set_dirs(tmp_path):
    """A writable copy of the test patch set: (patches_dir, overrides_dir)."""
    return write_patch_set(tmp_path / "patchset")


@pytest.fixture
def patch_set(patch_set_dirs):
    return PatchSet.load(*patch_set_dirs)
