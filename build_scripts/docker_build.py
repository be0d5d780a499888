"""`make build` and `make docker`: the Docker side of the full build (L2).

`make build` runs docker/builder.Dockerfile with BuildKit and exports the wheel
to dist/; `make docker` builds docker/runtime.Dockerfile around that wheel. Both
check for an engine first and stop at once, saying what is needed, where there
is none.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError
from .overlay import DIST_DIR
from .pin import Pin
from .wheel_build import run_logged
from .wheel_facts import WheelFacts, read_wheel_facts

DOCKER_DIR = REPO_ROOT / "docker"
BUILDER_DOCKERFILE = DOCKER_DIR / "builder.Dockerfile"
RUNTIME_DOCKERFILE = DOCKER_DIR / "runtime.Dockerfile"

# What the full build takes; the README's "Full build" section gives the sources.
REQUIREMENTS = (
    "Docker with BuildKit (the buildx plugin) and a running engine; about 80 GB of free disk "
    "(checkout, build tree, ccache, images); 3 GiB of RAM per compile job; roughly 1-2 hours "
    "on 16 cores for the two pinned archs (an estimate), minutes again with a warm ccache"
)
OVERLAY_HINT = "for the same kernels on stock torch 2.11.0 in minutes, without Docker, run `make overlay`"

# Build arguments a user may set from the environment (make build BUILDER_IMAGE=...).
BUILDER_ARGS = ("BUILDER_IMAGE", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "PYTORCH_GIT_URL")
RUNTIME_ARGS = ("RUNTIME_IMAGE",)


def engine_problems(run=subprocess.run, which=shutil.which) -> list[str]:
    """Why Docker cannot build here (empty when it can)."""
    if not which("docker"):
        return ["there is no `docker` command on PATH"]
    problems = []
    info = run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if info.returncode != 0:
        detail = (info.stderr or info.stdout).strip().splitlines()
        problems.append("the Docker engine is not reachable" + (f" ({detail[-1]})" if detail else ""))
    buildx = run(["docker", "buildx", "version"], capture_output=True, text=True)
    if buildx.returncode != 0:
        problems.append("BuildKit's buildx plugin is missing (`docker buildx version` failed)")
    return problems


def require_engine(verb: str, run=subprocess.run, which=shutil.which) -> None:
    problems = engine_problems(run, which)
    if problems:
        raise HarnessError(
            f"make {verb} cannot run here: " + "; ".join(problems) + ".\n"
            f"It needs {REQUIREMENTS}.\n"
            f"Meanwhile, {OVERLAY_HINT}."
        )


def _build_args(names: tuple[str, ...], environ: dict[str, str]) -> list[str]:
    args = []
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            args += ["--build-arg", f"{name}={value}"]
    return args


def builder_command(environ: dict[str, str], dist_dir: Path = DIST_DIR) -> list[str]:
    """docker buildx build of the wheel, exported to dist_dir (no image is kept)."""
    return [
        "docker", "buildx", "build",
        "--file", str(BUILDER_DOCKERFILE),
        "--target", "wheel",
        "--output", f"type=local,dest={dist_dir}",
        "--progress", "plain",
        *_build_args(BUILDER_ARGS, environ),
        str(REPO_ROOT),
    ]


def image_tag(pin: Pin, patchset_hash: str, environ: dict[str, str]) -> str:
    """IMAGE from the environment, else dwconv/torch:2.11.0-cu130.dwconv-<hash12> (tags allow no '+')."""
    return environ.get("IMAGE", "").strip() or f"dwconv/torch:{pin.wheel_version.replace('+', '-')}-{patchset_hash[:12]}"


def runtime_command(wheel: Path, tag: str, environ: dict[str, str]) -> list[str]:
    return [
        "docker", "buildx", "build",
        "--file", str(RUNTIME_DOCKERFILE),
        "--build-arg", f"TORCH_WHEEL={wheel.relative_to(REPO_ROOT)}",
        *_build_args(RUNTIME_ARGS, environ),
        "--tag", tag,
        "--load",
        "--progress", "plain",
        str(REPO_ROOT),
    ]


def current_wheel(pin: Pin, patchset_hash: str, dist_dir: Path = DIST_DIR) -> WheelFacts:
    """The wheel in dist_dir built from the current patch set, or an error saying what is there."""
    candidates = sorted(dist_dir.glob(f"torch-{pin.wheel_version}-*.whl"))
    facts = [read_wheel_facts(wheel) for wheel in candidates]
    matching = [f for f in facts if f.patchset_hash == patchset_hash]
    if matching:
        return matching[-1]
    found = ", ".join(f"{f.path.name} (patch set {(f.patchset_hash or 'none')[:12]})" for f in facts)
    raise HarnessError(
        f"no torch {pin.wheel_version} wheel of the current patch set {patchset_hash[:12]} in {dist_dir}"
        + (f"; found {found}" if found else "") + "; run `make build` (or `make build-local`) first"
    )


def docker_build_wheel(pin: Pin, patchset_hash: str, environ: dict[str, str] | None = None) -> WheelFacts:
    env = dict(os.environ if environ is None else environ)
    require_engine("build")
    run_logged(builder_command(env), REPO_ROOT, env)
    return current_wheel(pin, patchset_hash)


def docker_build_runtime(pin: Pin, patchset_hash: str, environ: dict[str, str] | None = None) -> str:
    env = dict(os.environ if environ is None else environ)
    wheel = current_wheel(pin, patchset_hash)  # before the engine check: the message says what to do first
    require_engine("docker")
    tag = image_tag(pin, patchset_hash, env)
    run_logged(runtime_command(wheel.path, tag, env), REPO_ROOT, env)
    return tag
