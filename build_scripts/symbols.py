"""Do the compiled objects define what they must, with the declared signatures?

The expected symbols come from the compiler, not from string matching: a
probe translation unit includes the declaring header and takes the address
of each name, so its object file refers to exactly the mangled symbol that
header declares. An object that defines a same-named function with another
signature (an overload, as far as C++ is concerned) is thereby caught.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .cache_prune import prune, touch
from .errors import HarnessError
from .toolchain import COMMON_DEFINES, CXX_FLAGS, Toolchain, run_compiler

INTERFACES_FILE = "interfaces.toml"
PROBES_KEPT = 1000  # answers kept (a few hundred bytes each), least recently used dropped first


@dataclass(frozen=True)
class Interface:
    """What one project-owned source must provide for the file it replaces."""

    source: str  # tree path of the source, as in the series
    header: str  # the header that declares the names
    defines: tuple[str, ...]  # functions it must define (qualified names)
    registers: tuple[str, ...]  # DispatchStubs it must register a kernel with


def _read_interfaces_file(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise HarnessError(f"{path}: not valid TOML: {err}") from None


def load_interfaces(path: Path) -> list[Interface]:
    data = _read_interfaces_file(path)
    interfaces = []
    for number, entry in enumerate(data.get("interface", []), start=1):
        unknown = set(entry) - {"source", "header", "defines", "registers"}
        if unknown or "source" not in entry or "header" not in entry:
            raise HarnessError(
                f"{path}: [[interface]] #{number} needs source and header, and may have "
                f"defines and registers{f' (unknown: {sorted(unknown)})' if unknown else ''}"
            )
        interfaces.append(Interface(entry["source"], entry["header"],
                                    tuple(entry.get("defines", ())), tuple(entry.get("registers", ()))))
    return interfaces


OVERLAY_KEYS = {"cuda": "CUDA", "meta": "Meta", "autograd": "Autograd"}  # [overlay] field -> dispatch key
# The keys whose kernels the overlay registers where a `dispatch:` entry names them (codegen
# hands them to build_scripts/torchgen_overlay.py); Autograd kernels come from derivatives.
KERNEL_KEYS = ("CUDA", "Meta")


def load_overlay_ops(path: Path) -> dict[str, list[str]]:
    """[overlay] in interfaces.toml: dispatch key -> the aten ops whose kernel for that key
    the overlay must take over (an empty dict when it claims none)."""
    section = _read_interfaces_file(path).get("overlay", {})
    unknown = set(section) - set(OVERLAY_KEYS)
    if unknown:
        raise HarnessError(f"{path}: [overlay] has {sorted(unknown)}; it may name {', '.join(OVERLAY_KEYS)}")
    claimed = {}
    for field_name, key in OVERLAY_KEYS.items():
        ops = section.get(field_name, [])
        if not isinstance(ops, list) or not all(isinstance(op, str) and op.startswith("aten::") for op in ops):
            raise HarnessError(f"{path}: [overlay] {field_name} must be a list of 'aten::name.overload' strings")
        if ops:
            claimed[key] = ops
    return claimed


def _nm(path: Path, *flags: str) -> list[tuple[str, str]]:
    """(type letter, mangled name) for each symbol nm lists."""
    proc = subprocess.run(["nm", "--format=posix", *flags, str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise HarnessError(f"nm {' '.join(flags)} {path} failed: {proc.stderr.strip()}")
    rows = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.endswith(":"):
            rows.append((parts[1], parts[0]))
    return rows


def defined_symbols(path: Path, dynamic: bool = False) -> set[str]:
    flags = ("-D", "--defined-only") if dynamic else ("--defined-only",)
    return {name for kind, name in _nm(path, *flags) if kind not in "Uw"}


def undefined_symbols(path: Path) -> set[str]:
    return {name for kind, name in _nm(path, "-u")}


def demangle(names) -> dict[str, str]:
    names = sorted(names)
    if not names:
        return {}
    proc = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, proc.stdout.splitlines()))


def _base_name(demangled: str) -> str:
    return demangled.split("(", 1)[0]


def probe_symbols(header: str, names: list[str], includes: list[str], toolchain: Toolchain,
                  work: Path, inputs_digest: str | None = None, kept_dir: Path | None = None,
                  placeless: Callable[[list[str]], list[str]] = list) -> dict[str, str]:
    """qualified name -> the mangled symbol that `header` declares for it. With inputs_digest (what
    the include roots hold beside their paths, and the compilers), an answer is kept in kept_dir
    (else `work`) and reused while the probe's source, its command as placeless() names it (without
    the paths one checkout's differs in) and that digest are unchanged."""
    work.mkdir(parents=True, exist_ok=True)
    stem = header.replace("/", "_").replace(".", "_")
    source, obj = work / f"probe_{stem}.cpp", work / f"probe_{stem}.o"
    body = [f"#include <{header}>"]
    body += [f'extern "C" const void* dwconv_probe_{i} = reinterpret_cast<const void*>(&{name});'
             for i, name in enumerate(names)]
    text = "\n".join(body) + "\n"
    command = [toolchain.cxx, "-c", "-O0", str(source), "-o", str(obj), *CXX_FLAGS, *COMMON_DEFINES, *includes]
    kept = None
    if inputs_digest is not None:  # one answer kept per header and names (a header may be probed for several)
        which = hashlib.sha256(text.encode()).hexdigest()[:12]
        key = hashlib.sha256("\0".join([inputs_digest, text, *placeless(command)]).encode()).hexdigest()[:32]
        kept_dir = kept_dir or work
        kept_dir.mkdir(parents=True, exist_ok=True)
        kept = kept_dir / f"probe_{stem}.{which}.{key}.json"
        if kept.is_file():
            touch(kept)
            return json.loads(kept.read_text())
    source.write_text(text)
    run_compiler(command, f"{header} does not declare {', '.join(names)} as one unambiguous function or object each")
    by_base = {}
    for mangled, plain in demangle(undefined_symbols(obj)).items():
        by_base.setdefault(_base_name(plain), mangled)
    missing = [n for n in names if n not in by_base]
    if missing:
        raise HarnessError(f"probing {header}: no symbol found for {', '.join(missing)}")
    found = {name: by_base[name] for name in names}
    if kept is not None:
        partial = kept.with_name(f"{kept.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(found))
        os.replace(partial, kept)
        prune([[path] for path in kept_dir.glob("probe_*.json")], max_entries=PROBES_KEPT)
    return found


def signature_problems(name: str, expected: str, defined: set[str], subject: str, header: str) -> list[str]:
    """Empty if `expected` is among `defined`; else say what is there instead."""
    if expected in defined:
        return []
    plain = demangle([expected])[expected]
    namesakes = [d for d in demangle(defined).values() if _base_name(d) == name]
    if namesakes:
        return [f"{subject}: {name} has a signature that drifted from {header}:\n"
                f"    declared: {plain}\n" + "".join(f"    defined:  {d}\n" for d in namesakes).rstrip()]
    return [f"{subject}: {plain} is not defined (declared in {header})"]
