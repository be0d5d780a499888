"""Build outputs kept in $DWCONV_CACHE by a digest of everything that made them, for every checkout
on the machine: the emulator's builds in `make test` (hundreds of them, each the same from one run
to the next while the kernels, the emulator and the compiler are).

A key is the caller's digest: the compiler's version, its flags but the paths that differ from one
run to another, and the bytes of every file the build may read that is not pinned (the pinned
torch's headers are fixed by the path of their version). An entry is put in place whole (copied
beside, then renamed), so that a run stopped half-way leaves nothing a later one would take. An
output is copied out by `cp`, not by this process, so that it may be run at once beside threads
that start processes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from .cache_prune import prune, touch

CACHE_BYTES = 2 << 30  # per kind; least recently used dropped first


def placeless(args: list[str], places: dict[str, str]) -> list[str]:
    """`args` with each path of `places` replaced by its name ("<repo>"), a path before any folder
    holding it, as ccache's base_dir does: a key that one checkout's or run's own paths leave alone."""
    named = []
    for arg in args:
        for path in sorted(places, key=len, reverse=True):
            arg = arg.replace(path, places[path])
        named.append(arg)
    return named


INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)


def included_files(sources: list[Path], include_dirs: list[Path]) -> list[tuple[str, Path]]:
    """`sources` and every file they include, directly or not, that the compiler finds in
    `include_dirs` (its -I folders, in order; a quoted include looks in the including file's folder
    first), each with the name it is known by: "<source>" or "<folder index>:<include spelling>". Every
    include is followed, whatever #if around it, so the list holds at least what a build reads; a
    header found in none of the folders (the pinned torch's, the system's) is not in it."""
    found = [(f"<source {i}>", source) for i, source in enumerate(sources)]
    seen = {path.resolve() for _, path in found}
    for _, path in found:  # grows as it goes
        for kind, spelling in INCLUDE.findall(path.read_text(errors="replace")):
            folders = ([path.parent] if kind == '"' else []) + list(include_dirs)
            for folder in folders:
                candidate = folder / spelling
                if candidate.is_file():
                    if candidate.resolve() not in seen:
                        seen.add(candidate.resolve())
                        index = include_dirs.index(folder) if folder in include_dirs else "here"
                        found.append((f"{index}:{spelling}", candidate))
                    break
    return found


def sources_digest(sources: list[Path], include_dirs: list[Path]) -> str:
    """sha256 over what included_files finds, by name and bytes: a key's part for the files a build
    reads that are not pinned, which changes with any of them and with nothing else (a file beside
    them that the build does not include, a checkout's own paths)."""
    digest = hashlib.sha256()
    for name, path in included_files(sources, include_dirs):
        data = path.read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def cached_output(folder: Path, key: str, output: Path, make: Callable[[Path], None]) -> Path:
    """`output`, copied from the entry kept under `key` in folder, or made by make(output) and kept."""
    entry = folder / hashlib.sha256(key.encode()).hexdigest()[:32]
    if entry.is_file():
        touch(entry)
        # Copied by another process: a file this one writes may be held open for writing by the child
        # another of its threads forks meanwhile, and running it then fails (ETXTBSY, "Text file busy").
        subprocess.run(["cp", "-p", str(entry), str(output)], check=True, capture_output=True, text=True)
        return output
    make(output)
    folder.mkdir(parents=True, exist_ok=True)
    partial = entry.with_name(f"{entry.name}.{os.getpid()}.{id(output)}.partial")
    shutil.copy2(output, partial)
    os.replace(partial, entry)
    prune([[path] for path in folder.iterdir() if not path.name.endswith(".partial")], max_bytes=CACHE_BYTES)
    return output
