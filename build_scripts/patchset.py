"""The patch set as a whole: its series, its files and overrides, its hash,
and what it makes of upstream files (computed in memory, before any write)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from . import REPO_ROOT
from .errors import HarnessError
from .series import OVERRIDE_TARGETS, SeriesItem, load_series
from .yaml_merge import FLAVOURS, MergeResult, OverrideEntry, check_unique, merge_overrides, parse_override_file

PATCHES_DIR = REPO_ROOT / "patches"
OVERRIDES_DIR = REPO_ROOT / "native_functions_overrides"

# Translation units the toolchain compiles; other files (headers) are included by them.
COMPILED_SUFFIXES = {".cu": "nvcc", ".cpp": "c++"}


def digest_tree(root: Path) -> str:
    """sha256 over every file under root (relative path and bytes), bytecode caches aside."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        if path.is_file() and "__pycache__" not in path.parts:
            data = path.read_bytes()
            digest.update(f"{path.relative_to(root)}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


@dataclass(frozen=True)
class PatchSet:
    patches_dir: Path
    overrides_dir: Path
    items: tuple[SeriesItem, ...]

    @classmethod
    def load(cls, patches_dir: Path = PATCHES_DIR, overrides_dir: Path = OVERRIDES_DIR) -> PatchSet:
        patches_dir, overrides_dir = patches_dir.resolve(), overrides_dir.resolve()
        patch_set = cls(patches_dir, overrides_dir, tuple(load_series(patches_dir)))
        patch_set._check_files()
        return patch_set

    # -- where things are ---------------------------------------------------

    def source(self, item: SeriesItem) -> Path:
        """The file in this repository that the item brings."""
        if item.kind in ("replace", "add"):
            return self.patches_dir / "files" / item.path
        if item.kind == "override":
            return self.overrides_dir / item.path
        return self.patches_dir / "diffs" / item.path

    def label(self, item: SeriesItem) -> str:
        """The item's source as a short path for messages."""
        source = self.source(item)
        for base in (self.patches_dir.parent, self.overrides_dir.parent):
            if source.is_relative_to(base):
                return str(source.relative_to(base))
        return str(source)

    @staticmethod
    def target(item: SeriesItem) -> str:
        """The path in a PyTorch tree that the item changes (not for diffs)."""
        if item.kind == "override":
            return OVERRIDE_TARGETS[PurePosixPath(item.path).parts[0]]
        return item.path

    def of_kind(self, *kinds: str) -> list[SeriesItem]:
        return [item for item in self.items if item.kind in kinds]

    def compiled_sources(self) -> list[SeriesItem]:
        return [i for i in self.of_kind("replace", "add") if PurePosixPath(i.path).suffix in COMPILED_SUFFIXES]

    @property
    def overlay_root(self) -> Path:
        """patches/overlay/: what only the overlay adds (its registration and loader package),
        never applied to a PyTorch tree."""
        return self.patches_dir / "overlay"

    def overlay_sources(self) -> list[Path]:
        root = self.overlay_root
        return sorted(p for p in root.glob("*") if p.suffix in COMPILED_SUFFIXES) if root.is_dir() else []

    @property
    def files_root(self) -> Path:
        """patches/files mirrors the PyTorch tree: its include roots are ours too."""
        return self.patches_dir / "files"

    # -- consistency ----------------------------------------------------------

    def _check_files(self) -> None:
        for item in self.items:
            if not self.source(item).is_file():
                raise HarnessError(f"{item.where}: {self.label(item)} does not exist")
        listed = {self.source(item).resolve() for item in self.items}
        roots = [self.patches_dir / "files", self.patches_dir / "diffs"]
        roots += [self.overrides_dir / d for d in OVERRIDE_TARGETS]
        for root in roots:
            for path in sorted(root.rglob("*")) if root.is_dir() else []:
                if path.is_file() and path.resolve() not in listed:
                    raise HarnessError(
                        f"{path} is not listed in {self.patches_dir / 'series'}: add an item for it "
                        "(with its reason) or remove it"
                    )
        for flavour_dir in OVERRIDE_TARGETS:
            self.overrides(flavour_dir)  # parses, and refuses an operator overridden twice

    @property
    def hash(self) -> str:
        """sha256 over the series, every item's content in series order, and the overlay's files."""
        digest = hashlib.sha256()
        digest.update(b"series\0" + (self.patches_dir / "series").read_bytes())
        for item in self.items:
            data = self.source(item).read_bytes()
            digest.update(f"\0{item.kind}\0{item.path}\0{len(data)}\0".encode() + data)
        digest.update(b"\0overlay\0" + digest_tree(self.overlay_root).encode())
        return digest.hexdigest()

    # -- what it makes of upstream --------------------------------------------

    def overrides(self, flavour_dir: str) -> list[OverrideEntry]:
        flavour = FLAVOURS[flavour_dir]
        entries: list[OverrideEntry] = []
        for item in self.of_kind("override"):
            if PurePosixPath(item.path).parts[0] == flavour_dir:
                entries += parse_override_file(self.source(item), flavour, self.label(item))
        check_unique(entries, flavour)
        return entries

    def merged_yaml(self, flavour_dir: str, upstream_text: str, upstream_origin: str) -> MergeResult:
        return merge_overrides(upstream_text, self.overrides(flavour_dir), FLAVOURS[flavour_dir], upstream_origin)

    def planned_contents(self, read_upstream: Callable[[str], bytes | None]) -> dict[str, bytes]:
        """Tree path -> new content for every file and override item.

        read_upstream(path) gives upstream's bytes of a path, or None when
        upstream has no such file. Diffs are not included: git applies them.
        """
        planned: dict[str, bytes] = {}
        for item in self.of_kind("replace", "add"):
            exists = read_upstream(item.path) is not None
            if item.kind == "replace" and not exists:
                raise HarnessError(f"{item.where}: upstream has no {item.path} to replace (use add for a new file)")
            if item.kind == "add" and exists:
                raise HarnessError(f"{item.where}: upstream already has {item.path} (use replace)")
            planned[item.path] = self.source(item).read_bytes()
        for flavour_dir, target in OVERRIDE_TARGETS.items():
            if not any(PurePosixPath(i.path).parts[0] == flavour_dir for i in self.of_kind("override")):
                continue
            upstream = read_upstream(target)
            if upstream is None:
                raise HarnessError(f"the tree has no {target} to merge overrides into")
            planned[target] = self.merged_yaml(flavour_dir, upstream.decode(), target).text.encode()
        return planned
