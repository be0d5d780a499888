"""Fixtures of the harness tests. Imports of the harness stay inside the fixtures so
that tests/gpu, which runs in torch's environment on a GPU machine, needs none of them."""

import pytest


@pytest.fixture
def fake_tree(tmp_path):
    """(path, commit) of a synthetic PyTorch checkout at the tag v2.11.0."""
    from tests.fake_pytorch import make_fake_pytorch
    return make_fake_pytorch(tmp_path / "pytorch")


@pytest.fixture
def fake_pin(fake_tree):
    from tests.fake_pytorch import pin_for
    return pin_for(fake_tree[1], url=f"file://{fake_tree[0]}")


@pytest.fixture
def patch_set_dirs(tmp_path):
    """A writable copy of the test patch set: (patches_dir, overrides_dir)."""
    from tests.fake_pytorch import write_patch_set
    return write_patch_set(tmp_path / "patchset")


@pytest.fixture
def patch_set(patch_set_dirs):
    from build_scripts.patchset import PatchSet
    return PatchSet.load(*patch_set_dirs)
