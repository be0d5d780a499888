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


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def build_tree(tmp_path):
    """A build's files: a source including a header of the emulator's folder (quoted) and a kernel
    header (angle brackets) that includes another, a header found nowhere (the system's), and files
    beside them that nothing includes."""
    emulator, kernels = tmp_path / "checkout" / "emulator", tmp_path / "checkout" / "kernels"
    write(emulator / "main.cpp", '#include "helper.h"\n#include <ATen/k/Launch.cuh>\n#include <vector>\nint main() {}\n')
    write(emulator / "helper.h", "#pragma once\n")
    write(emulator / "driver.cpp", "// another build's source\n")
    write(kernels / "ATen/k/Launch.cuh",
          '#pragma once\n#if 0\n  #  include <ATen/k/Common.cuh>\n#endif\n#include "Local.h"\n')
    write(kernels / "ATen/k/Common.cuh", "#pragma once\n")
    write(kernels / "ATen/k/Local.h", "#pragma once\n")  # found beside its includer only
    write(kernels / "ATen/k/Routing.cpp", "// compiled by L0, not by this build\n")
    return emulator, kernels


def test_a_build_s_key_covers_the_files_it_includes_and_no_others(build_tree, tmp_path):
    from build_scripts.output_cache import included_files, sources_digest

    emulator, kernels = build_tree
    sources, folders = [emulator / "main.cpp"], [kernels, emulator]
    assert [(name, path.relative_to(tmp_path / "checkout").as_posix())
            for name, path in included_files(sources, folders)] == [
        ("<source 0>", "emulator/main.cpp"), ("1:helper.h", "emulator/helper.h"),
        ("0:ATen/k/Launch.cuh", "kernels/ATen/k/Launch.cuh"),
        ("0:ATen/k/Common.cuh", "kernels/ATen/k/Common.cuh"),  # followed whatever #if is around it
        ("here:Local.h", "kernels/ATen/k/Local.h")]
    key = sources_digest(sources, folders)
    write(emulator / "driver.cpp", "// changed\n")
    write(kernels / "ATen/k/Routing.cpp", "// a new routing table\n")
    assert sources_digest(sources, folders) == key
    for path in (emulator / "helper.h", kernels / "ATen/k/Common.cuh", kernels / "ATen/k/Local.h",
                 emulator / "main.cpp"):
        before = path.read_text()
        write(path, before + "// changed\n")
        assert sources_digest(sources, folders) != key, path
        write(path, before)
    assert sources_digest(sources, folders) == key


def test_a_header_in_an_earlier_folder_is_the_one_keyed(build_tree, tmp_path):
    """A planted bug's folder comes first and holds one mutated header: that header is the one read."""
    from build_scripts.output_cache import included_files, sources_digest

    emulator, kernels = build_tree
    planted = write(tmp_path / "planted" / "ATen/k/Common.cuh", "#pragma once\n// a bug\n").parents[2]
    sources = [emulator / "main.cpp"]
    names = dict(included_files(sources, [planted, kernels, emulator]))
    assert names["0:ATen/k/Common.cuh"] == planted / "ATen/k/Common.cuh"
    assert names["1:ATen/k/Launch.cuh"] == kernels / "ATen/k/Launch.cuh"
    assert sources_digest(sources, [planted, kernels, emulator]) != sources_digest(sources, [kernels, emulator])


def test_the_key_is_the_same_in_another_checkout(build_tree, tmp_path):
    import shutil

    from build_scripts.output_cache import sources_digest

    emulator, kernels = build_tree
    clone = tmp_path / "clone"
    shutil.copytree(tmp_path / "checkout", clone)
    assert sources_digest([emulator / "main.cpp"], [kernels, emulator]) == \
        sources_digest([clone / "emulator/main.cpp"], [clone / "kernels", clone / "emulator"])
