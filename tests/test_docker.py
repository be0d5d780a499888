"""The Docker path without a Docker engine: the Dockerfiles and shell scripts pass their
linters, the builder stages copy what the harness steps import, `make build` and
`make docker` stop at once where there is no engine, and the commands they would run."""

import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.docker_build import (
    BUILDER_DOCKERFILE,
    RUNTIME_DOCKERFILE,
    builder_command,
    current_wheel,
    engine_problems,
    image_tag,
    require_engine,
    runtime_command,
)
from build_scripts.errors import HarnessError
from build_scripts.pin import load_pin

BIN = Path(sys.executable).parent
SHELL_SCRIPTS = [REPO_ROOT / "docker/runtime/entrypoint.sh", REPO_ROOT / ".ci/run"]


def hadolint(*paths):
    return subprocess.run([BIN / "hadolint", "--no-color", "--config", REPO_ROOT / ".hadolint.yaml", *paths],
                          capture_output=True, text=True)


def shellcheck(*paths):
    return subprocess.run([BIN / "shellcheck", *paths], capture_output=True, text=True)


# -- lint -------------------------------------------------------------------------

def test_dockerfiles_pass_hadolint():
    proc = hadolint(BUILDER_DOCKERFILE, RUNTIME_DOCKERFILE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_a_planted_defect(tmp_path):
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN cd /tmp && apt-get install curl\n")
    proc = hadolint(bad)
    assert proc.returncode != 0
    assert "DL3007" in proc.stdout  # :latest


def test_shell_scripts_pass_shellcheck():
    proc = shellcheck(*SHELL_SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shellcheck_catches_a_planted_defect(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\nrm -rf $1/build\n")
    proc = shellcheck(bad)
    assert proc.returncode != 0 and "SC2086" in proc.stdout


# -- the builder Dockerfile -------------------------------------------------------

def stages(dockerfile: Path) -> dict[str, str]:
    """stage name -> its text."""
    text = dockerfile.read_text()
    parts = re.split(r"^FROM\s+\S+(?:\s+AS\s+(\S+))?\s*$", text, flags=re.M)
    return {parts[i] or f"unnamed{i}": parts[i + 1] for i in range(1, len(parts), 2)}


def copied_modules(stage_text: str) -> set[str]:
    joined = stage_text.replace("\\\n", " ")
    return {m.removeprefix("build_scripts/").removesuffix(".py")
            for m in re.findall(r"build_scripts/\w+\.py", joined)}


def imported_modules(code: str) -> set[str]:
    """The build_scripts modules that running `code` imports."""
    probe = code + "; import sys; print(' '.join(m for m in sys.modules if m.startswith('build_scripts')))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    return {m.removeprefix("build_scripts.").replace("build_scripts", "__init__") for m in out.split()}


def test_builder_stages_are_the_documented_pipeline():
    assert list(stages(BUILDER_DOCKERFILE)) == ["toolchain", "source", "requirements", "patched", "compile", "wheel"]


def test_builder_base_is_cuda_13_0_with_cudnn_pinned_by_digest_and_overridable():
    text = BUILDER_DOCKERFILE.read_text()
    match = re.search(r"^ARG BUILDER_IMAGE=(\S+)$", text, re.M)
    assert match, "the base image is a build arg"
    assert re.fullmatch(r"nvidia/cuda:13\.0\.\d+-cudnn-devel-ubuntu\d\d\.\d\d@sha256:[0-9a-f]{64}", match.group(1))
    assert re.search(r"^FROM \$\{BUILDER_IMAGE\} AS toolchain$", text, re.M)
    runtime = re.search(r"^ARG RUNTIME_IMAGE=(\S+)$", RUNTIME_DOCKERFILE.read_text(), re.M).group(1)
    assert re.fullmatch(r"nvidia/cuda:13\.0\.\d+-cudnn-runtime-ubuntu\d\d\.\d\d@sha256:[0-9a-f]{64}", runtime)


def test_source_stage_copies_exactly_what_make_source_imports():
    # Fewer files would break the stage; more would re-clone PyTorch on unrelated edits.
    needed = imported_modules("import build_scripts.__main__ as m, build_scripts.source")
    assert copied_modules(stages(BUILDER_DOCKERFILE)["source"]) == needed


def test_requirements_stage_adds_what_the_requirements_step_imports():
    needed = imported_modules("import build_scripts.__main__, build_scripts.source, build_scripts.wheel_build")
    have = copied_modules(stages(BUILDER_DOCKERFILE)["source"]) | copied_modules(stages(BUILDER_DOCKERFILE)["requirements"])
    assert have == needed


def test_compile_stage_keeps_ccache_in_a_cache_mount_at_a_stable_path():
    text = BUILDER_DOCKERFILE.read_text()
    ccache_dir = re.search(r"CCACHE_DIR=(\S+)", text).group(1)
    compile_stage = stages(BUILDER_DOCKERFILE)["compile"]
    assert f"--mount=type=cache,id=dwconv-ccache,target={ccache_dir}" in compile_stage
    assert "PYTORCH_SRC=/opt/pytorch" in text
    assert "build_scripts build-wheel --steps compile --out /dist" in compile_stage
    assert "COPY --from=compile /dist/ /" in stages(BUILDER_DOCKERFILE)["wheel"]


def test_builder_context_keeps_the_patch_set_and_drops_build_outputs():
    patterns = (REPO_ROOT / "docker/builder.Dockerfile.dockerignore").read_text().split()
    assert patterns[0 if patterns[0] == "*" else patterns.index("*")] == "*"
    for kept in ("!pin.toml", "!pyproject.toml", "!build_scripts/**", "!patches/**", "!native_functions_overrides/**"):
        assert kept in patterns
    assert not any(p.startswith(("!build/", "!dist", "!.venv")) for p in patterns)


# -- make build / make docker without an engine ----------------------------------

def fake_run(results):
    def run(cmd, **kwargs):
        code, err = results.get(tuple(cmd[:3]), (0, ""))
        return subprocess.CompletedProcess(cmd, code, "", err)
    return run


def test_engine_problems_name_each_missing_piece():
    assert engine_problems(which=lambda _: None) == ["there is no `docker` command on PATH"]
    down = fake_run({("docker", "info", "--format"): (1, "Cannot connect to the Docker daemon at unix:///x.sock")})
    assert engine_problems(run=down, which=lambda _: "/bin/docker") == [
        "the Docker engine is not reachable (Cannot connect to the Docker daemon at unix:///x.sock)"]
    no_buildx = fake_run({("docker", "buildx", "version"): (1, "unknown command")})
    assert engine_problems(run=no_buildx, which=lambda _: "/bin/docker") == [
        "BuildKit's buildx plugin is missing (`docker buildx version` failed)"]
    assert engine_problems(run=fake_run({}), which=lambda _: "/bin/docker") == []


def test_without_an_engine_the_message_says_what_is_needed_and_points_to_the_overlay():
    with pytest.raises(HarnessError) as err:
        require_engine("build", which=lambda _: None)
    text = str(err.value)
    assert text.startswith("make build cannot run here: there is no `docker` command on PATH.")
    for needed in ("BuildKit", "GB of free disk", "GiB of RAM per compile job", "hours", "`make overlay`"):
        assert needed in text


def test_make_build_stops_at_once_where_the_engine_is_down(tmp_path):
    fake_docker = tmp_path / "docker"
    fake_docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    fake_docker.chmod(0o755)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "build_scripts", "build"], cwd=REPO_ROOT, capture_output=True,
                          text=True, env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert time.monotonic() - started < 10
    assert proc.returncode == 1
    assert "make build cannot run here: the Docker engine is not reachable (Cannot connect to the Docker daemon)" in proc.stderr
    assert "run `make overlay`" in proc.stderr
    assert not (REPO_ROOT / "dist" / ".partial").exists()


def test_builder_command_exports_the_wheel_and_passes_only_the_args_set():
    cmd = builder_command({"MAX_JOBS": "12", "BUILDER_IMAGE": "", "TORCH_CUDA_ARCH_LIST": "9.0"}, REPO_ROOT / "dist")
    assert cmd[:3] == ["docker", "buildx", "build"]
    assert cmd[cmd.index("--file") + 1] == str(BUILDER_DOCKERFILE)
    assert cmd[cmd.index("--target") + 1] == "wheel"
    assert cmd[cmd.index("--output") + 1] == f"type=local,dest={REPO_ROOT / 'dist'}"
    build_args = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--build-arg"]
    assert build_args == ["TORCH_CUDA_ARCH_LIST=9.0", "MAX_JOBS=12"]
    assert cmd[-1] == str(REPO_ROOT)


def write_built_wheel(dist, pin, stamp_hash):
    wheel = dist / f"torch-{pin.wheel_version}-cp312-cp312-linux_x86_64.whl"
    dist.mkdir(exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"torch-{pin.wheel_version}.dist-info/METADATA", f"Version: {pin.wheel_version}\n")
        zf.writestr("torch/version.py", f"__version__ = '{pin.wheel_version}'\ngit_version = '{pin.commit}'\n")
        zf.writestr("torch/_dwconv_patchset.py", f"PATCHSET_HASH = {stamp_hash!r}\n")
    return wheel


def test_make_docker_uses_the_wheel_of_the_current_patch_set(tmp_path):
    pin = load_pin()
    with pytest.raises(HarnessError, match=r"no torch 2\.11\.0\+cu130\.dwconv wheel of the current patch set "
                                           r"aaaaaaaaaaaa in .*; run `make build`"):
        current_wheel(pin, "a" * 64, tmp_path)
    write_built_wheel(tmp_path, pin, "b" * 64)
    with pytest.raises(HarnessError, match=r"found torch-2\.11\.0\+cu130\.dwconv-cp312-cp312-linux_x86_64\.whl "
                                           r"\(patch set bbbbbbbbbbbb\)"):
        current_wheel(pin, "a" * 64, tmp_path)
    assert current_wheel(pin, "b" * 64, tmp_path).patchset_hash == "b" * 64


def test_runtime_image_command_and_tag():
    pin = load_pin()
    tag = image_tag(pin, "c" * 64, {})
    assert tag == "dwconv/torch:2.11.0-cu130.dwconv-cccccccccccc"
    assert image_tag(pin, "c" * 64, {"IMAGE": "me/torch:dw"}) == "me/torch:dw"
    wheel = REPO_ROOT / "dist" / "torch-2.11.0+cu130.dwconv-cp312-cp312-linux_x86_64.whl"
    cmd = runtime_command(wheel, tag, {"RUNTIME_IMAGE": "nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04"})
    assert cmd[cmd.index("--file") + 1] == str(RUNTIME_DOCKERFILE)
    assert "TORCH_WHEEL=dist/torch-2.11.0+cu130.dwconv-cp312-cp312-linux_x86_64.whl" in cmd
    assert "RUNTIME_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04" in cmd
    assert cmd[cmd.index("--tag") + 1] == tag and "--load" in cmd


def test_runtime_context_holds_the_wheel_and_the_images_files():
    patterns = (REPO_ROOT / "docker/runtime.Dockerfile.dockerignore").read_text().split()
    assert "*" in patterns and "!dist/torch-*.whl" in patterns and "!docker/runtime/**" in patterns
    text = RUNTIME_DOCKERFILE.read_text()
    for copied in re.findall(r"^COPY (docker/\S+)", text, re.M):
        assert (REPO_ROOT / copied).exists(), copied


# -- the runtime image's entry point ----------------------------------------------

def test_entrypoint_runs_a_given_command():
    proc = subprocess.run(["sh", REPO_ROOT / "docker/runtime/entrypoint.sh", "echo", "hello"], capture_output=True, text=True)
    assert proc.stdout == "hello\n"
