"""Fixtures of the harness tests. Imports of the harness stay inside the fixtures so
that tests/gpu, which runs in torch's environment on a GPU machine, needs none of them."""

import pytest


def _started_early(items):
    """The modules of the items marked started_early, each with its items."""
    modules = {}
    for item in items:
        if item.get_closest_marker("started_early"):
            modules.setdefault(item.module, []).append(item)
    return modules


def pytest_collection_modifyitems(items):
    """Tests marked started_early run last, so that their background work has the session to run in."""
    items.sort(key=lambda item: item.get_closest_marker("started_early") is not None)  # stable


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    for module, items in _started_early(session.items).items():
        module.start_early(session, items)


def pytest_sessionfinish(session):
    for module in _started_early(getattr(session, "items", [])):
        module.stop_early(session)


@pytest.fixture(autouse=True)
def no_kernel_paths_off_from_the_shell(monkeypatch):
    """DWCONV_DISABLE_KERNELS in the shell that runs the tests would reach the bench, routing-table and
    gpu-session under test (each keeps the paths it names off): the tests that need it set it."""
    monkeypatch.delenv("DWCONV_DISABLE_KERNELS", raising=False)


@pytest.fixture
def fake_tree(tmp_path):
    """(path, commit) of a synthetic PyTorch checkout at the tag v2.11.0."""
    from tests.fake_pytorch import make_fake_pytorch
    return make_fake_pytorch(tmp_path / "pytorch")


@pytest.fixture
def fake_pin(fake_tree):
    from tests.fake_pytorch import pin_for
    return pin_for(fake_tree[1], url=f"file://{fake_tree[0]}")


@pytest.fixture
def patch_set_dirs(tmp_path):
    """A writable copy of the test patch set: (patches_dir, overrides_dir)."""
    from tests.fake_pytorch import write_patch_set
    return write_patch_set(tmp_path / "patchset")


@pytest.fixture
def patch_set(patch_set_dirs):
    from build_scripts.patchset import PatchSet
    return PatchSet.load(*patch_set_dirs)


@pytest.fixture(scope="session")
def kernel_choice_driver(tmp_path_factory):
    """The kernel-choice driver (tests/emulator/kernel_choice.cpp), built once a session."""
    from build_scripts import plan_report
    return plan_report.build_driver(tmp_path_factory.mktemp("kernel_choice"))


@pytest.fixture(scope="session")
def overlay_probe():
    """overlay_probe(code, **switches): the lines `code` prints in the pinned torch (on the CPU)
    with the real overlay imported (L0 built and staged it), and no switch in its environment
    but the given ones (DWCONV_ROUTING, DWCONV_ROUTING_TABLE, DWCONV_DISABLE_KERNELS)."""
    import os
    import subprocess
    from build_scripts.check import DEFAULT_WORK_DIR, run_l0
    from build_scripts.patchset import PatchSet
    from build_scripts.pin import load_pin
    from build_scripts.runtime_env import ensure_runtime_env
    from build_scripts.wheel_cache import cache_dir

    pin = load_pin()
    run_l0(pin, PatchSet.load())
    python = ensure_runtime_env(pin, cache_dir())
    prologue = (
        "import sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        f"sys.path.insert(0, {str(DEFAULT_WORK_DIR / 'overlay-staging')!r})\n"
        "import torch, dwconv_overlay\n"
    )

    def run(code, **switches):
        env = {k: v for k, v in os.environ.items()
               if k not in ("DWCONV_ROUTING", "DWCONV_ROUTING_TABLE", "DWCONV_DISABLE_KERNELS")}
        env.update(switches)
        proc = subprocess.run([str(python), "-c", prologue + code], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.splitlines()
    return run
