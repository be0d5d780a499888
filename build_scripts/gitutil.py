"""Thin wrappers over the git command line, with failures as HarnessError."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .errors import HarnessError


def git_bytes(repo: Path, *args: str, check: bool = True) -> bytes:
    """Run `git -C repo args...` and return its stdout."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True)
    if check and proc.returncode != 0:
        raise HarnessError(
            f"git {' '.join(args)} failed in {repo}:\n"
            + proc.stderr.decode(errors="replace").strip()
        )
    return proc.stdout


def git(repo: Path, *args: str, check: bool = True) -> str:
    return git_bytes(repo, *args, check=check).decode(errors="replace")


def head_blob(repo: Path, path: str) -> bytes | None:
    """The content of path at HEAD, or None if HEAD has no such file."""
    proc = subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{path}"], capture_output=True)
    return proc.stdout if proc.returncode == 0 else None


def index_path(repo: Path) -> Path:
    return (repo / git(repo, "rev-parse", "--git-path", "index").strip()).resolve()


def is_worktree_root(path: Path) -> bool:
    if not path.is_dir():
        return False
    proc = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True
    )
    return proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == path.resolve()


def head_commit(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def describe(repo: Path, commit: str) -> str:
    """A human name for a commit (a tag if one points near it), or ''."""
    return git(repo, "describe", "--tags", "--always", commit, check=False).strip()


def status_paths(repo: Path) -> list[tuple[str, str]]:
    """(two-letter status, path) for every change and untracked file.

    Submodules whose own work trees are dirty are not reported (builds write
    into them); a submodule at another commit is.
    """
    out = git(
        repo, "--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all",
        "--ignore-submodules=dirty",
    )
    entries = out.split("\0")
    result = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if not entry:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":  # a rename or copy carries its source path next
            i += 1
        result.append((code, path))
    return result


def submodule_problems(repo: Path) -> list[str]:
    """Submodules that are not initialised or not at the recorded commit."""
    if not (repo / ".gitmodules").exists():
        return []
    out = git(repo, "submodule", "status", "--recursive")
    problems = []
    for line in out.splitlines():
        if not line:
            continue
        mark, rest = line[0], line[1:].split()
        path = rest[1] if len(rest) > 1 else "?"
        if mark == "-":
            problems.append(f"{path}: not initialised")
        elif mark == "+":
            problems.append(f"{path}: checked out at {rest[0][:12]}, not the recorded commit")
        elif mark == "U":
            problems.append(f"{path}: has merge conflicts")
    return problems
