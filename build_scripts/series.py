"""patches/series: the ordered list of what the patch set changes, and why.

One item a line, three fields separated by '|':

    <kind> <path> | <what it does and why> | upstream: <status> [details]

kind     path names                                what applying it does
replace  an upstream path                          patches/files/<path> replaces the upstream file
add      a path upstream does not have             patches/files/<path> is added
override native_functions/<f>.yaml or              native_functions_overrides/<path> is merged,
         derivatives/<f>.yaml                      by operator name, into the upstream yaml
diff     <f>.patch                                 patches/diffs/<path> is applied like `git apply --3way`

The upstream status follows DEP-3's Forwarded field: not-needed (only makes
sense here), no (not sent yet), or a link to where it was sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import HarnessError

KINDS = ("replace", "add", "override", "diff")
UPSTREAM_STATUSES = ("not-needed", "no", "yes", "forwarded", "accepted")

# Where override files live, by the upstream yaml they merge into:
# (directory under native_functions_overrides/, path in a PyTorch tree).
OVERRIDE_TARGETS = {
    "native_functions": "aten/src/ATen/native/native_functions.yaml",
    "derivatives": "tools/autograd/derivatives.yaml",
}


@dataclass(frozen=True)
class SeriesItem:
    kind: str
    path: str  # as written in the series
    reason: str
    upstream: str
    line: int

    @property
    def where(self) -> str:
        return f"patches/series:{self.line} ({self.kind} {self.path})"


def _relative_path(text: str, where: str) -> str:
    path = PurePosixPath(text)
    if not text or path.is_absolute() or ".." in path.parts or str(path) != text:
        raise HarnessError(f"{where}: {text!r} is not a plain relative path")
    return text


def parse_series(text: str) -> list[SeriesItem]:
    items: list[SeriesItem] = []
    seen: dict[tuple[str, str], int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"patches/series:{number}"
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 3:
            raise HarnessError(
                f"{where}: expected '<kind> <path> | <reason> | upstream: <status>', got {line!r}"
            )
        spec, reason, upstream = fields
        parts = spec.split()
        if len(parts) != 2 or parts[0] not in KINDS:
            raise HarnessError(f"{where}: the item must start with one of {', '.join(KINDS)} and a path, got {spec!r}")
        kind, path = parts[0], _relative_path(parts[1], where)
        if not reason:
            raise HarnessError(f"{where}: {kind} {path} has no reason")
        label, _, status = upstream.partition(":")
        status = status.strip()
        if label.strip() != "upstream" or not status:
            raise HarnessError(f"{where}: the third field must be 'upstream: <status>', got {upstream!r}")
        if status.split()[0] not in UPSTREAM_STATUSES:
            raise HarnessError(
                f"{where}: upstream status {status!r} must start with one of {', '.join(UPSTREAM_STATUSES)}"
            )
        if kind == "override" and PurePosixPath(path).parts[0] not in OVERRIDE_TARGETS:
            raise HarnessError(
                f"{where}: an override lives under one of "
                f"{', '.join(d + '/' for d in OVERRIDE_TARGETS)}, got {path!r}"
            )
        key = (kind if kind in ("override", "diff") else "file", path)
        if key in seen:
            raise HarnessError(f"{where}: {path} is already listed at patches/series:{seen[key]}")
        seen[key] = number
        items.append(SeriesItem(kind, path, reason, status, number))
    return items


def load_series(patches_dir: Path) -> list[SeriesItem]:
    series = patches_dir / "series"
    try:
        return parse_series(series.read_text())
    except FileNotFoundError:
        raise HarnessError(f"{series} is missing: the patch set needs a series file") from None
