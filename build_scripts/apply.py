"""`make patch` and `make unpatch`: all or nothing, and idempotent.

Everything the patch set computes (file contents, merged yaml) is worked out
in memory before the first write. The writes then run inside a transaction
that remembers every path's previous bytes and the git index, and puts them
back if anything fails, so a failed apply leaves the tree as it found it.
"""

from __future__ import annotations

import os
import re
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import HarnessError
from .gitutil import git, head_blob, index_path
from .patchset import PatchSet
from .pin import Pin
from .source import validate_checkout
from .stamp import ADDED, DELETED, MODIFIED, STAMP_PATH, Stamp, read_stamp, sha256_bytes


class Transaction:
    """Writes to a tree that can be undone as one."""

    def __init__(self, tree: Path):
        self.tree = tree
        # path -> (bytes, (atime_ns, mtime_ns)), or None where the file did not exist
        self._saved: dict[str, tuple[bytes, tuple[int, int]] | None] = {}
        self._created_dirs: list[Path] = []
        self._index = index_path(tree)
        self._index_bytes = self._index.read_bytes() if self._index.exists() else None

    def _save(self, path: str) -> Path:
        full = self.tree / path
        if path not in self._saved:
            if full.is_file():
                stat = full.stat()
                self._saved[path] = (full.read_bytes(), (stat.st_atime_ns, stat.st_mtime_ns))
            else:
                self._saved[path] = None
        return full

    def guard(self, paths) -> None:
        """Remember paths that something else (git apply) is about to change."""
        for path in paths:
            self._save(path)

    def write(self, path: str, data: bytes | None) -> None:
        full = self._save(path)
        if data is None:
            full.unlink(missing_ok=True)
            self._prune_empty_parents(full)
            return
        missing = [p for p in [full.parent, *full.parent.parents] if not p.exists()]
        self._created_dirs += missing
        full.parent.mkdir(parents=True, exist_ok=True)
        if not full.is_file() or full.read_bytes() != data:
            full.write_bytes(data)

    def _prune_empty_parents(self, path: Path) -> None:
        """Remove directories that deleting path left empty (git tracks no empty ones)."""
        for directory in path.parents:
            if directory == self.tree or not directory.is_dir() or any(directory.iterdir()):
                return
            directory.rmdir()

    def rollback(self) -> None:
        for path, saved in self._saved.items():
            full = self.tree / path
            if saved is None:
                full.unlink(missing_ok=True)
                continue
            data, times = saved
            if not full.is_file() or full.read_bytes() != data:
                full.parent.mkdir(parents=True, exist_ok=True)
                full.write_bytes(data)
            os.utime(full, ns=times)  # build tools must not see a change
        for directory in sorted(set(self._created_dirs), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
        if self._index_bytes is not None:
            self._index.write_bytes(self._index_bytes)


@contextmanager
def transaction(tree: Path, what: str) -> Iterator[Transaction]:
    tx = Transaction(tree)
    try:
        yield tx
    except BaseException as err:
        tx.rollback()
        if isinstance(err, HarnessError):
            raise HarnessError(f"{what} failed, and the tree is as it was:\n{err}") from None
        raise


_DIFF_PATH = re.compile(r"^(?:---|\+\+\+) (?:[ab]/)?(\S+)")


def diff_paths(patch: bytes) -> list[str]:
    """The tree paths a unified diff touches (both sides of a rename)."""
    paths = []
    for line in patch.decode(errors="replace").splitlines():
        match = _DIFF_PATH.match(line)
        if match and match.group(1) != "/dev/null" and match.group(1) not in paths:
            paths.append(match.group(1))
    return paths


def _restore_upstream(tx: Transaction, stamp: Stamp) -> None:
    for path, (kind, _) in stamp.files.items():
        tx.write(path, None if kind == ADDED else head_blob(tx.tree, path))
    tx.write(STAMP_PATH, None)


def _apply_diff(tx: Transaction, patch_set: PatchSet, item, paths: list[str]) -> None:
    tx.guard(paths)
    # Files rewritten earlier in this run have stale stat data in the index; without a
    # refresh, --3way (which checks the index) would call them modified.
    git(tx.tree, "update-index", "-q", "--refresh", check=False)
    proc = subprocess.run(
        ["git", "-C", str(tx.tree), "apply", "--3way", "--whitespace=nowarn", str(patch_set.source(item))],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise HarnessError(f"{item.where}: git apply --3way failed:\n{(proc.stderr + proc.stdout).strip()}")
    # --3way stages what it applies; keep the patch as plain working-tree changes.
    git(tx.tree, "reset", "-q", "--", *paths)


def apply_patch_set(tree: Path, patch_set: PatchSet, pin: Pin, force: bool = False) -> Stamp:
    checkout = validate_checkout(tree, pin, force)
    new_hash = patch_set.hash
    old = checkout.stamp
    if old and old.patchset_hash == new_hash:
        print(f"{tree}: patch set {new_hash[:12]} is already applied; nothing to do")
        return old

    def read_upstream(path: str) -> bytes | None:
        if old and path in old.files:
            return head_blob(tree, path)  # what un-applying the old set restores
        full = tree / path
        return full.read_bytes() if full.is_file() else None

    planned = patch_set.planned_contents(read_upstream)
    diffs = [(item, diff_paths(patch_set.source(item).read_bytes())) for item in patch_set.of_kind("diff")]
    owners = {patch_set.target(item): item for item in patch_set.of_kind("replace", "add", "override")}
    for item, paths in diffs:
        if not paths:
            raise HarnessError(f"{item.where}: {patch_set.label(item)} is not a unified diff")
        for path in paths:
            if path in owners:
                raise HarnessError(f"{item.where} changes {path}, which {owners[path].where} also changes")
            owners[path] = item
    existed_upstream = {path: read_upstream(path) is not None for path in owners}

    with transaction(tree, f"applying patch set {new_hash[:12]}") as tx:
        if old:
            _restore_upstream(tx, old)
        for path, data in planned.items():
            tx.write(path, data)
        for item, paths in diffs:
            _apply_diff(tx, patch_set, item, paths)
        files = {}
        for path in owners:
            now = tree / path
            if not existed_upstream[path]:
                kind = ADDED
            else:
                kind = MODIFIED if now.is_file() else DELETED
            files[path] = (kind, sha256_bytes(now.read_bytes()) if now.is_file() else "")
        stamp = Stamp(new_hash, files)
        tx.write(STAMP_PATH, stamp.render().encode())
    action = f"replaced patch set {old.patchset_hash[:12]} with" if old else "applied patch set"
    print(f"{tree}: {action} {new_hash[:12]} ({len(patch_set.items)} items, {len(files)} files)")
    return stamp


def unapply_patch_set(tree: Path, force: bool = False) -> None:
    stamp = read_stamp(tree)
    if stamp is None:
        print(f"{tree}: no patch set is applied; nothing to do")
        return
    edited = stamp.edited_paths(tree)
    if edited and not force:
        raise HarnessError(
            f"{tree}: these patched files were edited after `make patch`, and unpatching would "
            "discard the edits (FORCE=1 discards them):\n" + "\n".join(f"  {p}" for p in edited)
        )
    with transaction(tree, "unpatching") as tx:
        _restore_upstream(tx, stamp)
    print(f"{tree}: removed patch set {stamp.patchset_hash[:12]}; the tree is upstream again")
