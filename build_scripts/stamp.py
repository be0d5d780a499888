"""The record, kept inside a patched tree, of which patch set was applied.

It is a Python module so that the same file, packaged into the wheel by the
full build, answers `torch._dwconv_patchset.PATCHSET_HASH` at run time.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

from .errors import HarnessError

STAMP_PATH = "torch/_dwconv_patchset.py"

ADDED = "added"
MODIFIED = "modified"
DELETED = "deleted"  # recorded with digest "": the file must be absent


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    return sha256_bytes(path.read_bytes()) if path.is_file() else None


@dataclass(frozen=True)
class Stamp:
    patchset_hash: str
    # path -> (ADDED, MODIFIED or DELETED, sha256 of the content we wrote)
    files: dict[str, tuple[str, str]]

    def render(self) -> str:
        lines = [
            "# Written by the dwconv harness (build_scripts/apply.py): the depthwise",
            "# patch set applied to this tree. `make unpatch` removes it.",
            f"PATCHSET_HASH = {self.patchset_hash!r}",
            "PATCHED_FILES = {",
        ]
        lines += [f"    {path!r}: {entry!r}," for path, entry in sorted(self.files.items())]
        lines.append("}")
        return "\n".join(lines) + "\n"

    def edited_paths(self, tree: Path) -> list[str]:
        """Patched paths whose content is no longer what the patch wrote."""
        return [
            path for path, (_, digest) in sorted(self.files.items())
            if sha256_file(tree / path) != (digest or None)
        ]


def read_stamp(tree: Path) -> Stamp | None:
    path = tree / STAMP_PATH
    if not path.exists():
        return None
    try:
        values = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                values[node.targets[0].id] = ast.literal_eval(node.value)
        files = {p: (kind, digest) for p, (kind, digest) in values["PATCHED_FILES"].items()}
        return Stamp(values["PATCHSET_HASH"], files)
    except (SyntaxError, ValueError, KeyError, TypeError) as err:
        raise HarnessError(
            f"{path} exists but is not a valid patch-set stamp ({err}); "
            "restore the tree with `git checkout -- . && git clean -fd` in it"
        ) from None
