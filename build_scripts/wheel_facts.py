"""What a torch wheel says about itself, read without installing it: the version in
its file name and METADATA, torch/version.py, and the patch-set stamp a patched
build packs as torch/_dwconv_patchset.py."""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .errors import HarnessError
from .pin import Pin
from .stamp import STAMP_PATH


def metadata_text(zf: zipfile.ZipFile) -> str:
    name = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
    if name is None:
        raise KeyError("no .dist-info/METADATA")
    return zf.read(name).decode()


def version_py_value(text: str, name: str) -> str | None:
    """The string assigned to `name` in a version.py-style file."""
    match = re.search(rf"^{name}\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", text, re.M)
    return match.group(1) if match else None


def _metadata_field(metadata: str, field: str) -> str | None:
    match = re.search(rf"^{field}:\s*(.+)$", metadata, re.M)
    return match.group(1).strip() if match else None


def _stamp_hash(text: str) -> str | None:
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PATCHSET_HASH":
            return ast.literal_eval(node.value)
    return None


@dataclass(frozen=True)
class WheelFacts:
    path: Path
    filename_version: str
    metadata_version: str | None
    torch_version: str | None   # torch.__version__
    git_version: str | None     # torch.version.git_version
    cuda: str | None            # torch.version.cuda
    patchset_hash: str | None   # torch._dwconv_patchset.PATCHSET_HASH, None in a stock wheel


def read_wheel_facts(wheel: Path) -> WheelFacts:
    parts = wheel.name.split("-")
    if len(parts) < 5 or not wheel.name.endswith(".whl"):
        raise HarnessError(f"{wheel.name} is not a wheel file name (name-version-python-abi-platform.whl)")
    try:
        with zipfile.ZipFile(wheel) as zf:
            metadata = metadata_text(zf)
            version_py = zf.read("torch/version.py").decode()
            names = set(zf.namelist())
            stamp = zf.read(STAMP_PATH).decode() if STAMP_PATH in names else None
    except (OSError, zipfile.BadZipFile, KeyError) as err:
        raise HarnessError(f"{wheel} is not a readable torch wheel ({err})") from None
    try:
        patchset_hash = _stamp_hash(stamp) if stamp is not None else None
    except (SyntaxError, ValueError) as err:
        raise HarnessError(f"{wheel.name}: {STAMP_PATH} is not a valid stamp ({err})") from None
    return WheelFacts(
        path=wheel,
        filename_version=parts[1],
        metadata_version=_metadata_field(metadata, "Version"),
        torch_version=version_py_value(version_py, "__version__"),
        git_version=version_py_value(version_py, "git_version"),
        cuda=version_py_value(version_py, "cuda"),
        patchset_hash=patchset_hash,
    )


def built_wheel_problems(facts: WheelFacts, pin: Pin, patchset_hash: str) -> list[str]:
    """How a wheel from our build differs from what it must be (empty when it is right)."""
    wanted = {
        "version in the file name": (facts.filename_version, pin.wheel_version),
        "METADATA Version": (facts.metadata_version, pin.wheel_version),
        "torch.__version__": (facts.torch_version, pin.wheel_version),
        "torch.version.git_version": (facts.git_version, pin.commit),
        "torch.version.cuda": (facts.cuda, pin.cuda_version),
        "torch._dwconv_patchset.PATCHSET_HASH": (facts.patchset_hash, patchset_hash),
    }
    return [f"{what} is {found!r}, expected {expected!r}"
            for what, (found, expected) in wanted.items() if found != expected]


def check_built_wheel(wheel: Path, pin: Pin, patchset_hash: str) -> WheelFacts:
    facts = read_wheel_facts(wheel)
    problems = built_wheel_problems(facts, pin, patchset_hash)
    if problems:
        raise HarnessError(f"{wheel.name} is not the wheel this build should make:\n"
                           + "\n".join(f"  {p}" for p in problems))
    return facts
