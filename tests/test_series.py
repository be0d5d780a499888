"""patches/series: every item with a reason and an upstream status, every file listed."""

import pytest

from build_scripts.errors import HarnessError
from build_scripts.patchset import PatchSet
from build_scripts.series import parse_series
from tests.fake_pytorch import SERIES, write_patch_set


def test_parses_items_in_order():
    items = parse_series(SERIES)
    assert [(i.kind, i.path) for i in items] == [
        ("replace", "aten/src/ATen/native/cuda/DepthwiseConv2d.cu"),
        ("add", "aten/src/ATen/native/cuda/DepthwiseCommon.cuh"),
        ("override", "native_functions/depthwise.yaml"),
        ("override", "derivatives/depthwise.yaml"),
        ("diff", "0001-convolution.patch"),
    ]
    assert items[0].reason == "our 2D kernels replace upstream's"
    assert items[2].upstream == "not-needed"
    assert items[0].where == "patches/series:2 (replace aten/src/ATen/native/cuda/DepthwiseConv2d.cu)"


@pytest.mark.parametrize("line, message", [
    ("replace a/b.cu | reason", r"patches/series:1: expected '<kind> <path> \| <reason> \| upstream: <status>'"),
    ("patch a/b.cu | r | upstream: no", r"must start with one of replace, add, override, diff"),
    ("replace a/b.cu |  | upstream: no", r"replace a/b.cu has no reason"),
    ("replace a/b.cu | r | status: no", r"the third field must be 'upstream: <status>'"),
    ("replace a/b.cu | r | upstream:", r"the third field must be 'upstream: <status>'"),
    ("replace a/b.cu | r | upstream: maybe", r"upstream status 'maybe' must start with one of"),
    ("replace ../b.cu | r | upstream: no", r"'../b.cu' is not a plain relative path"),
    ("replace /b.cu | r | upstream: no", r"'/b.cu' is not a plain relative path"),
    ("override other/x.yaml | r | upstream: no", r"an override lives under one of native_functions/, derivatives/"),
])
def test_bad_lines_name_the_line(line, message):
    with pytest.raises(HarnessError, match=message):
        parse_series(line + "\n")


def test_duplicate_item():
    text = "add a.cu | r | upstream: no\nreplace a.cu | r | upstream: no\n"
    with pytest.raises(HarnessError, match=r"patches/series:2: a.cu is already listed at patches/series:1"):
        parse_series(text)


def test_series_naming_a_missing_file(tmp_path):
    dirs = write_patch_set(tmp_path, files={"patches/files/aten/src/ATen/native/cuda/DepthwiseConv2d.cu": None})
    with pytest.raises(HarnessError, match=r"patches/series:2 \(replace .*DepthwiseConv2d.cu\): "
                                           r"patches/files/aten/src/ATen/native/cuda/DepthwiseConv2d.cu does not exist"):
        PatchSet.load(*dirs)


def test_file_not_in_series_is_refused(tmp_path):
    dirs = write_patch_set(tmp_path, files={"patches/files/aten/src/ATen/native/cuda/Forgotten.cu": "//\n"})
    with pytest.raises(HarnessError, match=r"Forgotten.cu is not listed in .*series"):
        PatchSet.load(*dirs)


def test_missing_series_file(tmp_path):
    with pytest.raises(HarnessError, match="series is missing"):
        PatchSet.load(tmp_path / "patches", tmp_path / "overrides")


def test_hash_covers_content_and_order(tmp_path):
    base = PatchSet.load(*write_patch_set(tmp_path / "a"))
    same = PatchSet.load(*write_patch_set(tmp_path / "b"))
    edited = PatchSet.load(*write_patch_set(tmp_path / "c", files={
        "patches/files/aten/src/ATen/native/cuda/DepthwiseConv2d.cu": "// edited\n"}))
    lines = SERIES.splitlines(keepends=True)
    reordered = PatchSet.load(*write_patch_set(tmp_path / "d", series="".join([lines[0], lines[2], lines[1], *lines[3:]])))
    assert base.hash == same.hash
    assert len({base.hash, edited.hash, reordered.hash}) == 3


def test_the_repository_patch_set_loads():
    patch_set = PatchSet.load()
    assert len(patch_set.hash) == 64
