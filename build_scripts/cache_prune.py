"""Keeps L0's caches ($DWCONV_CACHE/l0-objects and codegen) from growing without bound.

Every edit of a project file makes new compiled objects and every yaml edit a new codegen run,
and the old ones are never looked up again. An entry is a group of paths (an object and its
compiler report) whose first path's mtime says when it was last used (`touch` it on a hit); the
least recently used go first, until the rest fit the budget. Entries used in the last
RECENT_SECONDS stay whatever the budget: another L0 run may be about to read them.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

RECENT_SECONDS = 600


def touch(path: Path) -> None:
    """Mark a cache entry as used now."""
    os.utime(path)


def _bytes(path: Path) -> int:
    try:
        if path.is_dir() and not path.is_symlink():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
        return path.stat().st_size
    except FileNotFoundError:  # pruned meanwhile
        return 0


def prune(entries: list[list[Path]], max_bytes: int | None = None, max_entries: int | None = None,
          now: float | None = None) -> list[Path]:
    """Remove the least recently used entries until the rest hold at most max_bytes and number at
    most max_entries, sparing those used in the last RECENT_SECONDS. Returns the removed entries'
    first paths."""
    now = time.time() if now is None else now
    by_use = []  # (last use, group); another process or thread may prune the same cache meanwhile
    for group in entries:
        try:
            by_use.append((group[0].stat().st_mtime, group))
        except (FileNotFoundError, IndexError):
            continue
    by_use.sort(key=lambda item: item[0])  # oldest first
    sizes = {group[0]: sum(_bytes(p) for p in group) for _, group in by_use}
    total, count = sum(sizes.values()), len(by_use)
    removed = []
    for used, group in by_use:
        over = (max_bytes is not None and total > max_bytes) or (max_entries is not None and count > max_entries)
        if not over:
            break
        if now - used < RECENT_SECONDS:
            continue
        for path in group:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        total -= sizes[group[0]]
        count -= 1
        removed.append(group[0])
    return removed
