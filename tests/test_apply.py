"""`make patch` / `make unpatch` on a synthetic PyTorch tree: all or nothing, idempotent."""

import subprocess

import pytest

from build_scripts.apply import apply_patch_set, unapply_patch_set
from build_scripts.errors import HarnessError
from build_scripts.patchset import PatchSet
from build_scripts.stamp import ADDED, MODIFIED, STAMP_PATH, read_stamp
from tests.fake_pytorch import (
    COMMON_HEADER, KERNEL_2D, SERIES, pin_for, run, tree_snapshot, write_patch_set,
)


def git_status(tree):
    return run(tree, "git", "status", "--porcelain", "--untracked-files=all").splitlines()


def test_apply_writes_every_item_and_records_the_hash(fake_tree, fake_pin, patch_set):
    tree, _ = fake_tree
    stamp = apply_patch_set(tree, patch_set, fake_pin)

    assert (tree / "aten/src/ATen/native/cuda/DepthwiseConv2d.cu").read_text() == KERNEL_2D
    assert (tree / "aten/src/ATen/native/cuda/DepthwiseCommon.cuh").read_text() == COMMON_HEADER
    native = (tree / "aten/src/ATen/native/native_functions.yaml").read_text()
    assert "CUDA: dwconv_convolution_cuda" in native and "_conv_depthwise2d.out(" not in native
    assert "- func: _conv_depthwise2d_backward(" in native
    assert "/*groups=*/ self.sym_size(1)" in (tree / "tools/autograd/derivatives.yaml").read_text()
    assert "return false;" in (tree / "aten/src/ATen/native/Convolution.cpp").read_text()

    assert stamp.patchset_hash == patch_set.hash
    assert read_stamp(tree) == stamp
    assert stamp.files["aten/src/ATen/native/cuda/DepthwiseCommon.cuh"][0] == ADDED
    assert stamp.files["aten/src/ATen/native/Convolution.cpp"][0] == MODIFIED
    # The hash is readable from Python in the tree (and so in a wheel built from it).
    namespace = {}
    exec((tree / STAMP_PATH).read_text(), namespace)
    assert namespace["PATCHSET_HASH"] == patch_set.hash
    # Changes are plain work-tree changes: nothing is left staged by git apply --3way.
    assert run(tree, "git", "diff", "--cached", "--name-only") == ""
    assert sorted(line[3:] for line in git_status(tree)) == sorted(stamp.files) + [STAMP_PATH]


def test_apply_twice_changes_nothing(fake_tree, fake_pin, patch_set, capsys):
    tree, _ = fake_tree
    apply_patch_set(tree, patch_set, fake_pin)
    before = tree_snapshot(tree)
    apply_patch_set(tree, patch_set, fake_pin)
    assert tree_snapshot(tree) == before
    assert "already applied; nothing to do" in capsys.readouterr().out


def test_failed_item_rolls_everything_back(fake_tree, fake_pin, tmp_path):
    tree, _ = fake_tree
    conflicting = (
        "--- a/aten/src/ATen/native/Convolution.cpp\n+++ b/aten/src/ATen/native/Convolution.cpp\n"
        "@@ -1,3 +1,3 @@\n-// not what upstream has\n+// ours\n namespace at::native {\n bool use_depthwise() {\n"
    )
    patch_set = PatchSet.load(*write_patch_set(tmp_path / "ps", files={"patches/diffs/0001-convolution.patch": conflicting}))
    before = tree_snapshot(tree)
    # The diff is the last item: the files and yaml before it were written, then undone.
    with pytest.raises(HarnessError) as error:
        apply_patch_set(tree, patch_set, fake_pin)
    message = str(error.value)
    assert "the tree is as it was" in message
    assert "patches/series:6 (diff 0001-convolution.patch): git apply --3way failed" in message
    assert tree_snapshot(tree) == before
    assert git_status(tree) == []


def test_failed_replacement_of_an_applied_set_restores_the_old_one(fake_tree, fake_pin, patch_set, tmp_path):
    tree, _ = fake_tree
    apply_patch_set(tree, patch_set, fake_pin)
    applied = tree_snapshot(tree)
    broken = PatchSet.load(*write_patch_set(tmp_path / "broken", files={
        "patches/files/aten/src/ATen/native/cuda/DepthwiseConv2d.cu": "// v2\n",
        "patches/diffs/0001-convolution.patch": "--- a/nope.cpp\n+++ b/nope.cpp\n@@ -1 +1 @@\n-a\n+b\n",
    }))
    with pytest.raises(HarnessError, match="git apply --3way failed"):
        apply_patch_set(tree, broken, fake_pin)
    assert tree_snapshot(tree) == applied


def test_a_changed_patch_set_replaces_the_applied_one(fake_tree, fake_pin, patch_set, tmp_path):
    tree, _ = fake_tree
    apply_patch_set(tree, patch_set, fake_pin)
    series = "".join(line for line in SERIES.splitlines(keepends=True) if "DepthwiseCommon" not in line)
    smaller = PatchSet.load(*write_patch_set(tmp_path / "v2", series=series, files={
        "patches/files/aten/src/ATen/native/cuda/DepthwiseCommon.cuh": None}))
    stamp = apply_patch_set(tree, smaller, fake_pin)
    assert stamp.patchset_hash == smaller.hash
    assert not (tree / "aten/src/ATen/native/cuda/DepthwiseCommon.cuh").exists()
    assert "aten/src/ATen/native/cuda/DepthwiseCommon.cuh" not in stamp.files


def test_unpatch_restores_upstream_exactly(fake_tree, fake_pin, patch_set, tmp_path):
    tree, _ = fake_tree
    pristine = {k: v[0] for k, v in tree_snapshot(tree).items() if k != ".git/index"}
    apply_patch_set(tree, patch_set, fake_pin)
    unapply_patch_set(tree)
    assert {k: v[0] for k, v in tree_snapshot(tree).items() if k != ".git/index"} == pristine
    assert git_status(tree) == []
    assert read_stamp(tree) is None
    unapply_patch_set(tree)  # a second unpatch is a no-op


def test_unpatch_removes_directories_it_created(fake_tree, fake_pin, tmp_path):
    tree, _ = fake_tree
    patch_set = PatchSet.load(*write_patch_set(tmp_path / "ps", series=(
        "add aten/src/ATen/native/cuda/depthwise/Tiles.cuh | new dir | upstream: no\n"), files={
        "patches/files/aten/src/ATen/native/cuda/depthwise/Tiles.cuh": "// tiles\n",
    }, defaults=False))
    apply_patch_set(tree, patch_set, fake_pin)
    assert (tree / "aten/src/ATen/native/cuda/depthwise/Tiles.cuh").exists()
    unapply_patch_set(tree)
    assert not (tree / "aten/src/ATen/native/cuda/depthwise").exists()
    assert git_status(tree) == []


def test_unpatch_refuses_to_discard_edits(fake_tree, fake_pin, patch_set):
    tree, _ = fake_tree
    apply_patch_set(tree, patch_set, fake_pin)
    edited = tree / "aten/src/ATen/native/cuda/DepthwiseConv2d.cu"
    edited.write_text("// my experiment\n")
    with pytest.raises(HarnessError, match=r"edited after `make patch`.*\n  aten/src/ATen/native/cuda/DepthwiseConv2d.cu"):
        unapply_patch_set(tree)
    assert edited.read_text() == "// my experiment\n"
    unapply_patch_set(tree, force=True)
    assert git_status(tree) == []


def test_apply_refuses_a_wrong_commit_naming_both(fake_tree, patch_set):
    tree, commit = fake_tree
    other = "0123456789abcdef0123456789abcdef01234567"
    before = tree_snapshot(tree)
    with pytest.raises(HarnessError) as error:
        apply_patch_set(tree, patch_set, pin_for(other))
    assert f"is at commit {commit} (v2.11.0)" in str(error.value)
    assert f"the pin is PyTorch v2.11.0 ({other})" in str(error.value)
    assert tree_snapshot(tree) == before
    apply_patch_set(tree, patch_set, pin_for(other), force=True)
    assert read_stamp(tree) is not None


@pytest.mark.parametrize("dirt", ["modified", "untracked", "staged"])
def test_apply_refuses_a_dirty_tree(fake_tree, fake_pin, patch_set, dirt):
    tree, _ = fake_tree
    if dirt == "modified":
        (tree / "aten/src/ATen/native/Convolution.cpp").write_text("// local edit\n")
        expected = "aten/src/ATen/native/Convolution.cpp"
    elif dirt == "untracked":
        (tree / "notes.txt").write_text("x")
        expected = "notes.txt"
    else:
        (tree / "torch/__init__.py").write_text("x = 1\n")
        run(tree, "git", "add", "torch/__init__.py")
        expected = "torch/__init__.py"
    before = tree_snapshot(tree)
    with pytest.raises(HarnessError, match=rf"has changes that are not the patch set's.*\n +\S+ +{expected}\n"):
        apply_patch_set(tree, patch_set, fake_pin)
    assert tree_snapshot(tree) == before


def test_apply_refuses_edits_to_patched_files(fake_tree, fake_pin, patch_set, tmp_path):
    tree, _ = fake_tree
    apply_patch_set(tree, patch_set, fake_pin)
    (tree / "tools/autograd/derivatives.yaml").write_text("# hand edit\n")
    other = PatchSet.load(*write_patch_set(tmp_path / "v2", files={
        "patches/files/aten/src/ATen/native/cuda/DepthwiseConv2d.cu": "// v2\n"}))
    with pytest.raises(HarnessError, match=r"not the patch set's.*\n +M tools/autograd/derivatives.yaml\n"):
        apply_patch_set(tree, other, fake_pin)


def test_unknown_operator_fails_before_any_write(fake_tree, fake_pin, tmp_path):
    tree, _ = fake_tree
    patch_set = PatchSet.load(*write_patch_set(tmp_path / "ps", files={
        "native_functions_overrides/native_functions/depthwise.yaml": "delete:\n  - _conv_depthwise9d\n"}))
    before = tree_snapshot(tree)
    with pytest.raises(HarnessError, match=r"native_functions_overrides/native_functions/depthwise.yaml:2: delete "
                                           r"names operator '_conv_depthwise9d'"):
        apply_patch_set(tree, patch_set, fake_pin)
    assert tree_snapshot(tree) == before


def test_replace_of_a_path_upstream_lacks(fake_tree, fake_pin, tmp_path):
    tree, _ = fake_tree
    patch_set = PatchSet.load(*write_patch_set(tmp_path / "ps", series=(
        "replace aten/src/ATen/native/cuda/Nope.cu | r | upstream: no\n"), files={
        "patches/files/aten/src/ATen/native/cuda/Nope.cu": "//\n",
    }, defaults=False))
    with pytest.raises(HarnessError, match=r"upstream has no aten/src/ATen/native/cuda/Nope.cu to replace \(use add"):
        apply_patch_set(tree, patch_set, fake_pin)


def test_diff_and_file_item_on_one_path_is_refused(fake_tree, fake_pin, tmp_path):
    tree, _ = fake_tree
    clash = (
        "--- a/aten/src/ATen/native/cuda/DepthwiseConv2d.cu\n+++ b/aten/src/ATen/native/cuda/DepthwiseConv2d.cu\n"
        "@@ -1 +1 @@\n-// upstream DepthwiseConv2d.cu stand-in\n+// x\n"
    )
    patch_set = PatchSet.load(*write_patch_set(tmp_path / "ps", files={"patches/diffs/0001-convolution.patch": clash}))
    with pytest.raises(HarnessError, match=r"patches/series:6 \(diff 0001-convolution.patch\) changes "
                                           r"aten/src/ATen/native/cuda/DepthwiseConv2d.cu, which patches/series:2"):
        apply_patch_set(tree, patch_set, fake_pin)


def test_interrupt_mid_apply_rolls_back(fake_tree, fake_pin, patch_set, monkeypatch):
    tree, _ = fake_tree
    before = tree_snapshot(tree)
    real_run = subprocess.run

    def interrupted(cmd, *args, **kwargs):
        if "apply" in cmd:
            raise KeyboardInterrupt
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        apply_patch_set(tree, patch_set, fake_pin)
    monkeypatch.undo()
    assert tree_snapshot(tree) == before
