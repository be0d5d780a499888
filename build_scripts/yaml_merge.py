"""Merge override entries into native_functions.yaml / derivatives.yaml by operator name.

Both upstream files are one top-level YAML sequence of mappings, each entry
starting with '- func:' (native_functions) or '- name:' (derivatives) in
column 0. An override file is a mapping with up to three sections:

    replace:            # entries that take the place of upstream's, same operator
      - func: convolution_backward(...) -> (Tensor, Tensor, Tensor)
        dispatch: ...
    add:                # entries for operators upstream does not have (appended)
      - func: _conv_depthwise2d_backward(...) -> (Tensor, Tensor)
    delete:             # operators (name.overload) whose entries are removed
      - some_op.out

Entries are spliced in as the text the override file spells them, so a merge
touches only the bytes of the entries it names; the result is then parsed
again and compared with the intended list of entries.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import yaml

from .errors import HarnessError

try:
    _Loader = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml
    _Loader = yaml.SafeLoader

SECTIONS = ("replace", "add", "delete")


@dataclass(frozen=True)
class Flavour:
    """What distinguishes the two yaml files we merge into."""

    name: str
    key_field: str  # the field whose signature names the operator


NATIVE_FUNCTIONS = Flavour("native_functions.yaml", "func")
DERIVATIVES = Flavour("derivatives.yaml", "name")
FLAVOURS = {"native_functions": NATIVE_FUNCTIONS, "derivatives": DERIVATIVES}


def operator_key(signature: str) -> str:
    """'add.out(Tensor self, ...) -> Tensor(a!)' -> 'add.out'."""
    return signature.split("(", 1)[0].strip()


@dataclass(frozen=True)
class OverrideEntry:
    key: str
    action: str  # one of SECTIONS
    text: str  # upstream-style entry text ('- func: ...\n  ...\n'); '' for delete
    value: object  # the parsed entry; None for delete
    origin: str  # 'file:line' for messages


def _compose(text: str, origin: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{origin}:{mark.line + 1}:{mark.column + 1}" if mark else origin
        problem = getattr(err, "problem", None) or str(err)
        raise HarnessError(f"{where}: malformed YAML: {problem}") from None


def _construct(node: yaml.Node) -> object:
    return _Loader("").construct_document(node)


def _reject_duplicate_keys(node: yaml.Node, origin: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise HarnessError(
                    f"{origin}:{key_node.start_mark.line + 1}: duplicate key {key!r} "
                    f"(first at line {seen[key] + 1})"
                )
            seen[key] = key_node.start_mark.line
            _reject_duplicate_keys(value_node, origin)
    elif isinstance(node, yaml.SequenceNode):
        for child in node.value:
            _reject_duplicate_keys(child, origin)


def _is_gap_line(line: str) -> bool:
    """Blank lines and comments are gaps between entries, not part of them."""
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _entry_end(lines: list[str], start: int, limit: int) -> int:
    end = limit
    while end > start + 1 and _is_gap_line(lines[end - 1]):
        end -= 1
    return end


def _signature_of(node: yaml.Node, flavour: Flavour, origin: str) -> str:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.value == flavour.key_field and isinstance(value_node, yaml.ScalarNode):
                return value_node.value
    raise HarnessError(
        f"{origin}:{node.start_mark.line + 1}: an entry of {flavour.name} needs a "
        f"'{flavour.key_field}:' naming its operator"
    )


def parse_override_file(path: Path, flavour: Flavour, label: str | None = None) -> list[OverrideEntry]:
    origin = label or str(path)
    text = path.read_text()
    root = _compose(text, origin)
    if root is None:
        raise HarnessError(f"{origin}: the override file is empty")
    if not isinstance(root, yaml.MappingNode):
        raise HarnessError(f"{origin}: expected a mapping with sections {', '.join(SECTIONS)}")
    _reject_duplicate_keys(root, origin)
    lines = text.splitlines(keepends=True)
    entries: list[OverrideEntry] = []
    for key_node, section in root.value:
        action = key_node.value
        where = f"{origin}:{key_node.start_mark.line + 1}"
        if action not in SECTIONS:
            raise HarnessError(f"{where}: unknown section {action!r}; expected {', '.join(SECTIONS)}")
        if not isinstance(section, yaml.SequenceNode) or not section.value:
            raise HarnessError(f"{where}: section {action!r} must be a non-empty list")
        if action == "delete":
            for item in section.value:
                if not isinstance(item, yaml.ScalarNode) or not item.value.strip():
                    raise HarnessError(f"{origin}:{item.start_mark.line + 1}: delete takes operator names (name.overload)")
                entries.append(OverrideEntry(operator_key(item.value), action, "", None,
                                             f"{origin}:{item.start_mark.line + 1}"))
            continue
        for index, item in enumerate(section.value):
            entries.append(_override_entry(lines, section, index, item, action, flavour, origin))
    return entries


def _override_entry(lines, section, index, item, action, flavour, origin) -> OverrideEntry:
    line = item.start_mark.line
    where = f"{origin}:{line + 1}"
    signature = _signature_of(item, flavour, origin)
    dash = item.start_mark.column - 2
    if dash < 0 or lines[line][dash:dash + 2] != "- ":
        raise HarnessError(f"{where}: write each entry as a block list item ('- {flavour.key_field}: ...')")
    if index + 1 < len(section.value):
        following = section.value[index + 1].start_mark.line
    else:  # the section ends where the next token starts: a line start, or mid-line at EOF
        following = section.end_mark.line + (1 if section.end_mark.column else 0)
    end = _entry_end(lines, line, min(following, len(lines)))
    body = []
    for text_line in lines[line:end]:
        if text_line.strip() and text_line[:dash].strip():
            raise HarnessError(f"{where}: the entry's lines must be indented at least as far as its '- '")
        body.append(text_line[dash:] if text_line.strip() else text_line.lstrip(" "))
    text = "".join(body)
    if not text.endswith("\n"):
        text += "\n"
    value = _construct(item)
    if yaml.load(text, Loader=_Loader) != [value]:  # the dedent must not change the entry
        raise HarnessError(f"{where}: could not cut this entry out of the file verbatim; check its indentation")
    return OverrideEntry(operator_key(signature), action, text, value, where)


@dataclass(frozen=True)
class _UpstreamEntry:
    key: str
    comment_start: int  # first line of the comments attached above it
    start: int  # its '- ' line
    end: int  # one past its last line


def _split_upstream(text: str, flavour: Flavour, origin: str):
    root = _compose(text, origin)
    if not isinstance(root, yaml.SequenceNode):
        raise HarnessError(f"{origin}: expected a top-level list of entries")
    lines = text.splitlines(keepends=True)
    starts = [node.start_mark.line for node in root.value]
    entries = []
    for i, node in enumerate(root.value):
        start = starts[i]
        if node.start_mark.column != 2 or not lines[start].startswith("- "):
            raise HarnessError(f"{origin}:{start + 1}: entries must start with '- ' in column 1")
        previous_end = entries[-1].end if entries else 0
        limit = starts[i + 1] if i + 1 < len(starts) else len(lines)
        comment_start = start
        while comment_start > previous_end and lines[comment_start - 1].startswith("#"):
            comment_start -= 1
        key = operator_key(_signature_of(node, flavour, origin))
        entries.append(_UpstreamEntry(key, comment_start, start, _entry_end(lines, start, limit)))
    return lines, entries, _construct(root)


@dataclass(frozen=True)
class MergeResult:
    text: str
    changed: dict[str, OverrideEntry]  # operator key -> the override applied to it


def merge_overrides(upstream_text: str, overrides: list[OverrideEntry], flavour: Flavour,
                    upstream_origin: str) -> MergeResult:
    """Apply overrides (already checked for duplicates) to upstream's text."""
    lines, entries, upstream_values = _split_upstream(upstream_text, flavour, upstream_origin)
    positions: dict[str, int] = {}
    for index, entry in enumerate(entries):
        positions.setdefault(entry.key, index)
    by_key = {o.key: o for o in overrides}
    keys_upstream = [e.key for e in entries]
    for override in overrides:
        present = override.key in positions
        if override.action == "add" and present:
            raise HarnessError(
                f"{override.origin}: add names {override.key!r}, which the pinned {flavour.name} "
                "already has; use replace"
            )
        if override.action != "add" and not present:
            close = difflib.get_close_matches(override.key, keys_upstream, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise HarnessError(
                f"{override.origin}: {override.action} names operator {override.key!r}, which the "
                f"pinned {flavour.name} does not have{hint}"
            )
        if present and keys_upstream.count(override.key) > 1:
            raise HarnessError(f"{override.origin}: {flavour.name} defines {override.key!r} more than once")

    out: list[str] = []
    expected: list[object] = []
    cursor = 0
    for entry, value in zip(entries, upstream_values):
        override = by_key.get(entry.key)
        if override is None:
            expected.append(value)
            continue
        if override.action == "replace":
            out += lines[cursor:entry.start]
            out.append(override.text)
            expected.append(override.value)
            cursor = entry.end
        else:  # delete, with the comments attached to the entry and one blank line after it
            out += lines[cursor:entry.comment_start]
            cursor = entry.end
            if cursor < len(lines) and not lines[cursor].strip():
                cursor += 1
    out += lines[cursor:]
    additions = [o for o in overrides if o.action == "add"]
    if additions:
        if out and not out[-1].endswith("\n"):
            out.append("\n")
        for addition in additions:
            out += ["\n", addition.text]
            expected.append(addition.value)
    merged = "".join(out)
    if yaml.load(merged, Loader=_Loader) != expected:
        raise HarnessError(
            f"internal error: merging into {upstream_origin} did not give the intended entries; "
            "please report this with the override files"
        )
    return MergeResult(merged, by_key)


def check_unique(overrides: list[OverrideEntry], flavour: Flavour) -> None:
    seen: dict[str, OverrideEntry] = {}
    for override in overrides:
        if override.key in seen:
            first = seen[override.key]
            raise HarnessError(
                f"operator {override.key!r} of {flavour.name} is overridden twice: "
                f"{first.action} at {first.origin} and {override.action} at {override.origin}"
            )
        seen[override.key] = override
