"""build_scripts/output_cache.py: a build output kept by its key, reused only for the same key, and
never taken half-made."""

import os

import pytest

from build_scripts.output_cache import cached_output


def maker(calls, text):
    def make(output):
        calls.append(output)
        output.write_text(text)
        output.chmod(0o755)
    return make


def test_an_output_is_made_once_per_key_and_copied_out_after(tmp_path):
    folder, calls = tmp_path / "cache", []
    first = cached_output(folder, "key a", tmp_path / "a", maker(calls, "A"))
    assert first.read_text() == "A" and calls == [tmp_path / "a"]
    again = cached_output(folder, "key a", tmp_path / "b", maker(calls, "made again"))
    assert again == tmp_path / "b" and again.read_text() == "A" and len(calls) == 1
    assert os.access(again, os.X_OK)  # a binary stays runnable
    other = cached_output(folder, "key b", tmp_path / "c", maker(calls, "B"))
    assert other.read_text() == "B" and len(calls) == 2
    assert sorted(p.name.endswith(".partial") for p in folder.iterdir()) == [False, False]


def test_a_failed_build_keeps_nothing(tmp_path):
    folder = tmp_path / "cache"

    def fails(output):
        output.write_text("half")
        raise RuntimeError("the compiler failed")

    with pytest.raises(RuntimeError, match="the compiler failed"):
        cached_output(folder, "key", tmp_path / "out", fails)
    assert not folder.exists() or not any(folder.iterdir())
    calls = []
    assert cached_output(folder, "key", tmp_path / "out", maker(calls, "whole")).read_text() == "whole"
    assert len(calls) == 1
