"""A real build of docker/builder.Dockerfile's first stages, up to `patched`, with no
Docker engine: Debian's buildah (chroot isolation) on a Debian base made with
mmdebstrap, standing in for the CUDA image (those stages need no CUDA). GitHub is
out of reach, so the source stage clones a synthetic PyTorch tree through a volume,
with the context's pin.toml naming its commit. The compile stage needs the CUDA
base and hours; it is not run here."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.patchset import PatchSet
from build_scripts.wheel_cache import cache_dir
from tests.fake_pytorch import make_fake_pytorch

pytestmark = pytest.mark.image

TOOLS = ("buildah", "mmdebstrap", "podman")
missing = [tool for tool in TOOLS if shutil.which(tool) is None]
if missing:
    pytest.skip(f"building image stages without Docker needs {', '.join(missing)} "
                "(Debian: apt-get install buildah mmdebstrap podman; .ci/run installs them)", allow_module_level=True)

BASE = "localhost/dwconv-test-base:bookworm"
KERNEL = "patches/files/aten/src/ATen/native/cuda/DepthwiseConv2d.cu"
# Package downloads inside RUN need this machine's CA bundle and pip settings.
HOST_MOUNTS = [f"{path}:{path}:ro" for path in ("/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt")
               if Path(path).exists()]


def run(*cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def base_image():
    """A Debian bookworm base with python3 and git, imported once (no registry pulls)."""
    if run("buildah", "inspect", "--type", "image", BASE).returncode == 0:
        return BASE
    tarball = cache_dir() / "images" / "debian-bookworm-minbase.tar"
    if not tarball.exists():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial.tar")  # mmdebstrap picks the format by the suffix
        proc = run("mmdebstrap", "--variant=minbase", "--include=python3,python3-venv,git,ca-certificates",
                   "bookworm", str(partial), "http://deb.debian.org/debian")
        assert proc.returncode == 0, proc.stderr[-3000:]
        partial.rename(tarball)
    proc = run("podman", "import", str(tarball), BASE)
    assert proc.returncode == 0, proc.stderr
    return BASE


@pytest.fixture
def context(tmp_path):
    """(context dir, dir holding the synthetic checkout, its commit)."""
    sources = tmp_path / "sources"
    _, commit = make_fake_pytorch(sources / "pytorch")
    ctx = tmp_path / "context"
    ctx.mkdir()
    for name in ("pin.toml", "pyproject.toml"):
        shutil.copy(REPO_ROOT / name, ctx / name)
    for name in ("build_scripts", "patches", "native_functions_overrides", "docker"):
        shutil.copytree(REPO_ROOT / name, ctx / name, ignore=shutil.ignore_patterns("__pycache__"))
    pin = ctx / "pin.toml"
    pin.write_text(re.sub(r'^commit = "[0-9a-f]{40}"$', f'commit = "{commit}"', pin.read_text(), flags=re.M))
    return ctx, sources, commit


def build(ctx: Path, sources: Path, base: str, tag: str):
    mounts = [flag for mount in [f"{sources}:/sources:ro", *HOST_MOUNTS] for flag in ("-v", mount)]
    return run("buildah", "bud", "--isolation=chroot", "--layers", "--target", "patched",
               "-f", "docker/builder.Dockerfile", "--ignorefile", "docker/builder.Dockerfile.dockerignore",
               "--build-arg", f"BUILDER_IMAGE={base}", "--build-arg", "PYTORCH_GIT_URL=file:///sources/pytorch",
               *mounts, "-t", tag, ".", cwd=ctx)


def in_image(tag: str, script: str) -> str:
    container = run("buildah", "from", "--isolation", "chroot", tag).stdout.strip()
    try:
        proc = run("buildah", "run", "--isolation", "chroot", container, "--", "sh", "-c", script)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    finally:
        run("buildah", "rm", container)


def test_builder_stages_clone_check_and_patch_and_a_kernel_edit_does_not_reclone(base_image, context):
    ctx, sources, commit = context
    first = build(ctx, sources, base_image, "localhost/dwconv-test-patched:first")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    stamp = in_image("localhost/dwconv-test-patched:first",
                     "cd /opt/pytorch && git rev-parse HEAD && git status --porcelain && cat torch/_dwconv_patchset.py")
    lines = stamp.splitlines()
    assert lines[0] == commit
    patch_set = PatchSet.load()
    expected = {("?? " if item.kind == "add" else " M ") + patch_set.target(item) for item in patch_set.items}
    assert {line for line in lines[1:] if line[:3] in (" M ", "?? ")} == expected | {"?? torch/_dwconv_patchset.py"}
    assert f"PATCHSET_HASH = {PatchSet.load().hash!r}" in stamp

    kernel = ctx / KERNEL
    kernel.write_text(kernel.read_text() + "\n// an edit\n")
    second = build(ctx, sources, base_image, "localhost/dwconv-test-patched:second")
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
    steps = second.stdout.split("STEP ")
    clone = next(s for s in steps if "python -m build_scripts source" in s)
    requirements = next(s for s in steps if "build-wheel --steps requirements" in s)
    patching = next(s for s in steps if "python -m build_scripts patch" in s)
    assert "Using cache" in clone and "Using cache" in requirements, "the clone and pip layers are reused"
    assert "Using cache" not in patching and "applied patch set" in patching
    edited = in_image("localhost/dwconv-test-patched:second", "tail -1 /opt/pytorch/" + KERNEL.removeprefix("patches/files/"))
    assert edited == "// an edit\n"


def test_source_stage_refuses_a_tag_at_another_commit(base_image, context):
    ctx, sources, commit = context
    pin = ctx / "pin.toml"
    pin.write_text(pin.read_text().replace(commit, "1" * 40))
    proc = build(ctx, sources, base_image, "localhost/dwconv-test-patched:wrong")
    assert proc.returncode != 0
    assert f"tag v2.11.0 at file:///sources/pytorch is commit {commit}, but the pin is commit {'1' * 40}" in proc.stdout + proc.stderr
