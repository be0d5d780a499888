"""The pinned PyTorch checkout: clone it, or check one the user already has."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError
from .gitutil import describe, head_commit, is_worktree_root, status_paths, submodule_problems
from .pin import Pin
from .stamp import STAMP_PATH, Stamp, read_stamp

DEFAULT_SOURCE_DIR = REPO_ROOT / "build" / "pytorch"
_MAX_LISTED = 15


def source_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    value = env.get("PYTORCH_SRC", "").strip()
    return Path(value).expanduser().resolve() if value else DEFAULT_SOURCE_DIR


@dataclass(frozen=True)
class Checkout:
    path: Path
    commit: str
    stamp: Stamp | None  # the patch set applied to it, if any


def _listing(paths: list[str]) -> str:
    shown = "\n".join(f"  {p}" for p in paths[:_MAX_LISTED])
    more = len(paths) - _MAX_LISTED
    return shown + (f"\n  ... and {more} more" if more > 0 else "")


def foreign_changes(tree: Path, stamp: Stamp | None) -> list[str]:
    """Changes in the tree that our patch set did not make, as 'XY path' lines."""
    ours = {STAMP_PATH} | (set(stamp.files) if stamp else set())
    edited = set(stamp.edited_paths(tree)) if stamp else set()
    return [
        f"{code} {path}" for code, path in status_paths(tree)
        if path not in ours or path in edited
    ]


def _tag_note(repo: Path, commit: str) -> str:
    """' (v2.10.0-12-gabc)' when git can name the commit after a tag, else ''."""
    name = describe(repo, commit)
    return f" ({name})" if name and not commit.startswith(name) else ""


def validate_checkout(path: Path, pin: Pin, force: bool = False) -> Checkout:
    """Check that `path` is a clean checkout of the pinned commit.

    A tree that carries exactly our patch set counts as clean. With force,
    a wrong commit, a dirty tree or bad submodules are warnings instead.
    """
    if not is_worktree_root(path):
        raise HarnessError(
            f"{path} is not the root of a git checkout of PyTorch; run `make source` "
            "to clone the pinned release there, or set PYTORCH_SRC to your checkout"
        )
    commit = head_commit(path)
    problems = []
    if commit != pin.commit:
        problems.append(
            f"{path} is at commit {commit}{_tag_note(path, commit)}, "
            f"but the pin is {pin.describe()}; check out {pin.tag} there"
        )
    stamp = read_stamp(path)
    changes = foreign_changes(path, stamp)
    if changes:
        problems.append(
            f"{path} has changes that are not the patch set's (commit them, or set them aside "
            f"with `git -C {path} stash -u`):\n{_listing(changes)}"
        )
    submodules = submodule_problems(path)
    if submodules:
        problems.append(
            f"{path} has submodule problems (run `git -C {path} submodule update --init "
            f"--recursive`):\n{_listing(submodules)}"
        )
    if problems and not force:
        raise HarnessError("\n".join(problems) + "\n(FORCE=1 proceeds anyway)")
    for problem in problems:
        print(f"warning (forced): {problem}", file=sys.stderr)
    return Checkout(path, commit, stamp)


def clone_pinned(dest: Path, pin: Pin, url: str | None = None) -> Checkout:
    """Shallow-clone the pinned tag with its submodules into dest, atomically.

    The clone goes to a sibling directory first and is renamed into place
    only once its HEAD is the pinned commit; a failure leaves nothing behind.
    """
    url = url or os.environ.get("PYTORCH_GIT_URL") or pin.git_url
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        "git", "clone", "--branch", pin.tag, "--depth", "1",
        "--recurse-submodules", "--shallow-submodules", "--jobs", str(os.cpu_count() or 2),
        url, str(partial),
    ]
    print(f"cloning {pin.tag} from {url} into {dest} ...", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        if proc.returncode != 0:
            raise HarnessError(f"git clone of {pin.tag} from {url} failed:\n{proc.stderr.strip()}")
        commit = head_commit(partial)
        if commit != pin.commit:
            raise HarnessError(
                f"tag {pin.tag} at {url} is commit {commit}, but the pin is commit "
                f"{pin.commit}; refusing a source that is not the pinned one"
            )
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.rename(dest)
    return Checkout(dest, commit, None)


def make_source(dest: Path, pin: Pin, force: bool = False) -> Checkout:
    """`make source`: validate dest if it exists, else clone the pin into it."""
    if dest.exists():
        checkout = validate_checkout(dest, pin, force)
        state = f"patched (patch set {checkout.stamp.patchset_hash[:12]})" if checkout.stamp else "unpatched"
        print(f"{dest}: {pin.describe()}, {state}")
        return checkout
    checkout = clone_pinned(dest, pin)
    print(f"{dest}: cloned {pin.describe()}")
    return checkout
