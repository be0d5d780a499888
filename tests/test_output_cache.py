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


def test_l0_keeps_an_object_with_its_report_and_another_run_may_keep_the_same(tmp_path):
    """check.keep_object: the compiler's report in place before the object that says the entry is
    whole; a second run keeping the same entry (another checkout's L0 at the same time) is no error."""
    from build_scripts.check import keep_object
    from build_scripts.resource_report import report_dir

    obj, report = tmp_path / "kernel.cu.o", tmp_path / "kernel.cu.o.report"
    obj.write_bytes(b"object")
    report.mkdir()
    (report / "ptxas.log").write_text("registers")
    cached = tmp_path / "cache" / "0123.o"
    keep_object(obj, report, cached)
    keep_object(obj, report, cached)
    assert cached.read_bytes() == b"object" and (report_dir(cached) / "ptxas.log").read_text() == "registers"
    assert sorted(p.name for p in cached.parent.iterdir()) == ["0123.o", report_dir(cached).name]
