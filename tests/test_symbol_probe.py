"""The symbol probe (build_scripts/symbols.py) on a header of its own: the mangled name comes from
the compiler, and an answer kept for a digest of the inputs is reused only while that digest, the
probe's names and its command are unchanged, in any checkout."""

from pathlib import Path

from build_scripts.symbols import probe_symbols
from build_scripts.toolchain import Toolchain

TOOLCHAIN = Toolchain(nvcc=Path("/nonexistent/nvcc"), cxx="g++", cuda_home=Path("/nonexistent"))


def declare(root: Path, signature: str) -> list[str]:
    (root / "dw").mkdir(parents=True, exist_ok=True)
    (root / "dw" / "api.h").write_text(f"namespace at::native {{ {signature}; }}\n")
    return [f"-I{root}"]


def probe(includes, work, digest, names=("at::native::scale",)):
    return probe_symbols("dw/api.h", list(names), includes, TOOLCHAIN, work, digest)


def test_the_probe_names_the_declared_signature(tmp_path):
    includes = declare(tmp_path / "src", "float scale(float, int)")
    assert probe(includes, tmp_path / "work", None) == {"at::native::scale": "_ZN2at6native5scaleEfi"}


def test_a_kept_answer_is_reused_only_for_the_same_digest_and_names(tmp_path):
    work = tmp_path / "work"
    includes = declare(tmp_path / "src", "float scale(float, int)")
    assert probe(includes, work, "first") == {"at::native::scale": "_ZN2at6native5scaleEfi"}
    (work / "probe_dw_api_h.o").unlink()

    # The digest stands for what the include roots hold: unchanged, the compiler is not run again.
    declare(tmp_path / "src", "float scale(double, int)")
    assert probe(includes, work, "first") == {"at::native::scale": "_ZN2at6native5scaleEfi"}
    assert not (work / "probe_dw_api_h.o").exists()

    assert probe(includes, work, "second") == {"at::native::scale": "_ZN2at6native5scaleEdi"}
    assert len(list(work.glob("probe_dw_api_h.*.json"))) == 2  # the first digest's answer is kept too

    # Other names of the same header are another probe, kept beside it.
    (tmp_path / "src" / "dw" / "api.h").write_text(
        "namespace at::native { float scale(double, int); int shift(int); }\n")
    assert probe(includes, work, "second", names=("at::native::shift",)) == {"at::native::shift": "_ZN2at6native5shiftEi"}
    assert len(list(work.glob("probe_dw_api_h.*.json"))) == 3
    assert probe(includes, work, "second") == {"at::native::scale": "_ZN2at6native5scaleEdi"}


def test_a_kept_answer_serves_another_checkout(tmp_path):
    """Without the paths placeless() names, the same header and digest probed from another work
    folder (another checkout's build/l0/probes) reads the answer kept in the shared folder."""
    kept = tmp_path / "shared"
    includes = declare(tmp_path / "src", "float scale(float, int)")

    def placeless(command):
        return [arg.replace(str(tmp_path / "one"), "<work>").replace(str(tmp_path / "two"), "<work>") for arg in command]

    first = probe_symbols("dw/api.h", ["at::native::scale"], includes, TOOLCHAIN, tmp_path / "one", "d", kept, placeless)
    declare(tmp_path / "src", "float scale(double, int)")  # unchanged digest: the kept answer stands
    second = probe_symbols("dw/api.h", ["at::native::scale"], includes, TOOLCHAIN, tmp_path / "two", "d", kept, placeless)
    assert first == second == {"at::native::scale": "_ZN2at6native5scaleEfi"}
    assert not (tmp_path / "two" / "probe_dw_api_h.o").exists()
