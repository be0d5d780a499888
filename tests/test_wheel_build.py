"""The wheel build's orchestration, without the hours-long compile: the settings and
commands it runs, the tree it accepts, and the check of the wheel it produces. A
stand-in `python` plays `pip install` and `python -m build`, recording what it was
given and writing a wheel the way v2.11.0's setup.py would."""

import json
import os
import stat
import subprocess
import sys
import textwrap
import zipfile

import pytest

from build_scripts import REPO_ROOT
from build_scripts.errors import HarnessError
from build_scripts.pin import load_pin, parse_arch_list
from build_scripts.wheel_build import (
    build_environment,
    build_settings,
    check_build_tree,
    compile_wheel,
    default_max_jobs,
    install_requirements,
    max_jobs,
    preflight_problems,
    requirements_command,
    wheel_command,
)
from build_scripts.wheel_facts import built_wheel_problems, read_wheel_facts

GIB = 2**30

# Plays the Python of the build. `-m pip ...` and `-m build ...` are recorded in
# $FAKE_LOG; `-m build` writes a wheel as v2.11.0's setup.py would: the version
# from PYTORCH_BUILD_VERSION (+ .postN for PYTORCH_BUILD_NUMBER > 1), the commit
# from git, and the stamp file packed from the tree.
FAKE_PYTHON = textwrap.dedent("""\
    #!{python}
    import json, os, subprocess, sys, zipfile
    args = sys.argv[1:]
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps({{"args": args, "cwd": os.getcwd(),
                              "env": {{k: v for k, v in os.environ.items() if k.isupper()}}}}) + "\\n")
    if args[:2] == ["-m", "build"]:
        version = os.environ["PYTORCH_BUILD_VERSION"]
        if int(os.environ["PYTORCH_BUILD_NUMBER"]) > 1:
            version += ".post" + os.environ["PYTORCH_BUILD_NUMBER"]
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        outdir = args[args.index("--outdir") + 1]
        os.makedirs(outdir, exist_ok=True)
        with zipfile.ZipFile(f"{{outdir}}/torch-{{version}}-cp311-cp311-linux_x86_64.whl", "w") as zf:
            zf.writestr(f"torch-{{version}}.dist-info/METADATA", f"Metadata-Version: 2.4\\nName: torch\\nVersion: {{version}}\\n")
            zf.writestr("torch/version.py", f"__version__ = '{{version}}'\\ngit_version = '{{commit}}'\\ncuda = '13.0'\\n")
            if os.path.exists("torch/_dwconv_patchset.py"):
                zf.write("torch/_dwconv_patchset.py", "torch/_dwconv_patchset.py")
    sys.exit(int(os.environ.get("FAKE_STATUS", "0")))
""")


@pytest.fixture
def fake_python(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "python"
    path.parent.mkdir()
    path.write_text(FAKE_PYTHON.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "fake-python.log"
    monkeypatch.setenv("FAKE_LOG", str(log))

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return str(path), calls


@pytest.fixture
def patched_tree(fake_tree, fake_pin, patch_set):
    from build_scripts.apply import apply_patch_set
    apply_patch_set(fake_tree[0], patch_set, fake_pin)
    return fake_tree[0]


def environ(**extra):
    return {**os.environ, "MAX_JOBS": "3", **extra}


# -- settings -------------------------------------------------------------------

def test_settings_version_and_archs_come_from_the_pin():
    pin = load_pin()
    settings = {s.name: s.value for s in build_settings(pin, pin.archs({}), 7)}
    assert settings["PYTORCH_BUILD_VERSION"] == "2.11.0+cu130.dwconv"
    assert settings["PYTORCH_BUILD_NUMBER"] == "1"  # > 1 would make it 2.11.0+cu130.dwconv.postN
    assert settings["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"
    assert settings["MAX_JOBS"] == "7"
    archs = pin.archs({"TORCH_CUDA_ARCH_LIST": "9.0a"})
    assert {s.name: s.value for s in build_settings(pin, archs, 1)}["TORCH_CUDA_ARCH_LIST"] == "9.0a"


def test_settings_trim_the_build_but_keep_cudnn_and_the_profiler():
    pin = load_pin()
    settings = build_settings(pin, pin.archs({}), 4)
    values = {s.name: s.value for s in settings}
    for off in ("USE_FLASH_ATTENTION", "USE_MEM_EFF_ATTENTION", "USE_DISTRIBUTED", "USE_NCCL", "BUILD_TEST"):
        assert values[off] == "0", off
    for on in ("USE_CUDA", "USE_CUDNN", "USE_KINETO", "USE_CCACHE"):
        assert values[on] == "1", on
    assert all(len(s.why) > 20 for s in settings), "every setting says why"
    assert len(values) == len(settings), "no variable is set twice"


def test_settings_go_on_top_of_the_callers_environment():
    pin = load_pin()
    env = build_environment(build_settings(pin, pin.archs({}), 2), {"PATH": "/x", "USE_FLASH_ATTENTION": "1"})
    assert env["PATH"] == "/x" and env["USE_FLASH_ATTENTION"] == "0"


@pytest.mark.parametrize("cpus, memory_gib, jobs", [(16, 128, 16), (16, 24, 8), (2, 24, 2), (64, 2, 1)])
def test_compile_jobs_are_bounded_by_cpus_and_memory(cpus, memory_gib, jobs):
    assert default_max_jobs(cpus, memory_gib * GIB) == jobs


def test_max_jobs_from_the_environment_wins_and_is_checked():
    assert max_jobs({"MAX_JOBS": "5"}) == 5
    assert max_jobs({}) >= 1
    with pytest.raises(HarnessError, match="MAX_JOBS='lots' is not a positive integer"):
        max_jobs({"MAX_JOBS": "lots"})


def test_commands_are_the_ones_v2_11_uses(tmp_path):
    assert wheel_command("py", tmp_path) == ["py", "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path)]
    cmd = requirements_command("py", tmp_path)
    assert cmd[:4] == ["py", "-m", "pip", "install"]
    assert cmd[cmd.index("-r") + 1] == str(tmp_path / "requirements-build.txt")
    assert "build" in cmd and "pyyaml>=6" in cmd  # PyPA build, and the harness's own dependencies


# -- the tree -------------------------------------------------------------------

def test_an_unpatched_tree_is_refused(fake_tree, fake_pin, patch_set):
    with pytest.raises(HarnessError, match=r"is not patched; run `make patch` first"):
        check_build_tree(fake_tree[0], fake_pin, patch_set)


def test_a_tree_with_another_patch_set_is_refused(patched_tree, fake_pin, patch_set_dirs):
    from build_scripts.patchset import PatchSet
    (patch_set_dirs[0] / "files/aten/src/ATen/native/cuda/DepthwiseConv2d.cu").write_text("// edited\n")
    edited = PatchSet.load(*patch_set_dirs)
    with pytest.raises(HarnessError, match=r"carries patch set \w{12}, but the current one is \w{12}; run `make patch`"):
        check_build_tree(patched_tree, fake_pin, edited)


def test_a_tree_at_another_commit_is_refused(patched_tree, fake_pin, patch_set):
    import dataclasses
    with pytest.raises(HarnessError, match="but the pin is"):
        check_build_tree(patched_tree, dataclasses.replace(fake_pin, commit="0" * 40), patch_set)


# -- the two steps, with the stand-in python ------------------------------------

def test_requirements_step_installs_the_checkouts_requirements(fake_tree, fake_pin, fake_python):
    python, calls = fake_python
    install_requirements(fake_tree[0], fake_pin, environ(), python=python)
    (call,) = calls()
    assert call["args"][:3] == ["-m", "pip", "install"]
    assert call["args"][call["args"].index("-r") + 1] == str(fake_tree[0] / "requirements-build.txt")


def test_compile_step_builds_checks_and_places_the_wheel(patched_tree, fake_pin, patch_set, fake_python, tmp_path):
    python, calls = fake_python
    out = tmp_path / "dist"
    wheel = compile_wheel(patched_tree, fake_pin, patch_set, out, environ(TORCH_CUDA_ARCH_LIST="9.0"), python=python)
    assert wheel == out / "torch-2.11.0+cu130.dwconv-cp311-cp311-linux_x86_64.whl"
    assert sorted(p.name for p in out.iterdir()) == [wheel.name], "no staging directory is left behind"
    (call,) = calls()
    assert call["args"][:4] == ["-m", "build", "--wheel", "--no-isolation"]
    assert call["cwd"] == str(patched_tree)
    env = call["env"]
    assert (env["PYTORCH_BUILD_VERSION"], env["TORCH_CUDA_ARCH_LIST"], env["MAX_JOBS"]) == ("2.11.0+cu130.dwconv", "9.0", "3")
    assert env["USE_FLASH_ATTENTION"] == "0" and env["USE_CUDNN"] == "1"
    facts = read_wheel_facts(wheel)
    assert facts.patchset_hash == patch_set.hash  # readable as torch._dwconv_patchset.PATCHSET_HASH


def test_a_wheel_with_the_wrong_version_is_refused_and_not_placed(patched_tree, fake_pin, patch_set, fake_python,
                                                                  tmp_path, monkeypatch):
    # Our settings always say PYTORCH_BUILD_NUMBER=1; a build that ignored them would make .postN.
    python, _ = fake_python
    import build_scripts.wheel_build as wheel_build
    real = wheel_build.build_environment
    monkeypatch.setattr(wheel_build, "build_environment",
                        lambda settings, env: {**real(settings, env), "PYTORCH_BUILD_NUMBER": "2"})
    out = tmp_path / "dist"
    with pytest.raises(HarnessError) as err:
        compile_wheel(patched_tree, fake_pin, patch_set, out, environ(), python=python)
    assert "METADATA Version is '2.11.0+cu130.dwconv.post2', expected '2.11.0+cu130.dwconv'" in str(err.value)
    assert list(out.iterdir()) == []


def test_a_failing_build_says_so_and_leaves_nothing(patched_tree, fake_pin, patch_set, fake_python, tmp_path):
    python, _ = fake_python
    out = tmp_path / "dist"
    with pytest.raises(HarnessError, match="failed with status 3"):
        compile_wheel(patched_tree, fake_pin, patch_set, out, environ(FAKE_STATUS="3"), python=python)
    assert list(out.iterdir()) == []


# -- the wheel-metadata check ---------------------------------------------------

def write_wheel(path, version, torch_version, commit, cuda="13.0", stamp_hash=None):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"torch-{version}.dist-info/METADATA", f"Name: torch\nVersion: {version}\n")
        zf.writestr("torch/version.py", f"__version__ = '{torch_version}'\ngit_version = '{commit}'\ncuda: Optional[str] = '{cuda}'\n")
        if stamp_hash:
            zf.writestr("torch/_dwconv_patchset.py", f"PATCHSET_HASH = {stamp_hash!r}\nPATCHED_FILES = {{}}\n")
    return path


def test_wheel_facts_name_every_difference(tmp_path):
    pin = load_pin()
    wheel = write_wheel(tmp_path / "torch-2.11.0-cp311-cp311-linux_x86_64.whl", "2.11.0", "2.11.0+cu130", "f" * 40, cuda="12.8")
    problems = built_wheel_problems(read_wheel_facts(wheel), pin, "a" * 64)
    assert problems == [
        "version in the file name is '2.11.0', expected '2.11.0+cu130.dwconv'",
        "METADATA Version is '2.11.0', expected '2.11.0+cu130.dwconv'",
        "torch.__version__ is '2.11.0+cu130', expected '2.11.0+cu130.dwconv'",
        f"torch.version.git_version is '{'f' * 40}', expected '{pin.commit}'",
        "torch.version.cuda is '12.8', expected '13.0'",
        f"torch._dwconv_patchset.PATCHSET_HASH is None, expected '{'a' * 64}'",
    ]
    good = write_wheel(tmp_path / "torch-2.11.0+cu130.dwconv-cp312-cp312-linux_x86_64.whl", pin.wheel_version,
                       pin.wheel_version, pin.commit, stamp_hash="a" * 64)
    assert built_wheel_problems(read_wheel_facts(good), pin, "a" * 64) == []


def test_a_damaged_wheel_is_an_error_not_a_traceback(tmp_path):
    bad = tmp_path / "torch-2.11.0+cu130.dwconv-cp312-cp312-linux_x86_64.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(HarnessError, match="is not a readable torch wheel"):
        read_wheel_facts(bad)


# -- build-local on an unprepared machine ----------------------------------------

def test_preflight_names_what_is_missing(tmp_path):
    problems = preflight_problems(tmp_path, load_pin(), {"CUDA_HOME": str(tmp_path)}, which=lambda _: None,
                                  disk_free=lambda _: 5 * 10**9)
    text = "\n".join(problems)
    assert "nvcc is not on PATH: install CUDA 13.0" in text
    assert "cuDNN headers (cudnn_version.h) not found" in text
    assert "git is not on PATH" in text
    assert "only 5 GB free" in text


def test_preflight_accepts_cudnn_from_cudnn_root(tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cudnn_version.h").write_text("")
    problems = preflight_problems(tmp_path, load_pin(), {"CUDNN_ROOT": str(tmp_path)}, which=lambda _: None,
                                  disk_free=lambda _: 10**12)
    assert not any("cuDNN" in p for p in problems)


def test_build_wheel_verb_rejects_an_unknown_step():
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "build-wheel", "--steps", "compile,link"],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "--steps: unknown step(s) link" in proc.stderr


def test_requirements_step_needs_only_the_standard_library():
    # The builder runs it before the harness's dependencies are installed.
    code = ("import sys; import build_scripts.__main__, build_scripts.wheel_build; "
            "assert 'yaml' not in sys.modules, 'yaml imported'")
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


def test_archs_parse_like_torch(monkeypatch):
    assert [str(a) for a in parse_arch_list("8.0;9.0a 9.0+PTX")] == ["8.0", "9.0a", "9.0+PTX"]


def test_preflight_before_the_checkout_exists(tmp_path):
    problems = preflight_problems(tmp_path / "build" / "pytorch", load_pin(), {}, which=lambda _: None)
    assert any("nvcc is not on PATH" in p for p in problems)


def test_build_local_names_what_the_machine_lacks(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path), "PYTORCH_SRC": str(tmp_path / "pytorch"), "CUDA_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "build-local"], cwd=REPO_ROOT,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: make build-local needs a prepared machine:\n  nvcc is not on PATH")
    assert "(`make build` does the same in Docker)" in proc.stderr
    assert not (tmp_path / "pytorch").exists(), "nothing is cloned before the checks pass"
