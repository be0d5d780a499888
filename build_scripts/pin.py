"""The pinned PyTorch release, read from pin.toml (the only place it is written)."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError

PIN_FILE = REPO_ROOT / "pin.toml"

# TORCH_CUDA_ARCH_LIST syntax: "8.0", "9.0a", "9.0+PTX".
_ARCH_RE = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


@dataclass(frozen=True)
class CudaArch:
    major: int
    minor: int
    suffix: str  # "", "a" or "f" (arch-specific features)
    ptx: bool

    @classmethod
    def parse(cls, text: str) -> CudaArch:
        match = _ARCH_RE.match(text.strip())
        if not match:
            raise HarnessError(
                f"bad CUDA arch {text!r}: expected TORCH_CUDA_ARCH_LIST syntax "
                "such as 8.0, 9.0a or 9.0+PTX"
            )
        major, minor, suffix, ptx = match.groups()
        return cls(int(major), int(minor), suffix, bool(ptx))

    @property
    def sm(self) -> str:
        return f"{self.major}{self.minor}{self.suffix}"

    def gencode_flags(self) -> list[str]:
        flags = [f"-gencode=arch=compute_{self.sm},code=sm_{self.sm}"]
        if self.ptx:
            flags.append(f"-gencode=arch=compute_{self.sm},code=compute_{self.sm}")
        return flags

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}{'+PTX' if self.ptx else ''}"


def parse_arch_list(text: str) -> tuple[CudaArch, ...]:
    archs = tuple(CudaArch.parse(a) for a in re.split(r"[;\s]+", text.strip()) if a)
    if not archs:
        raise HarnessError(f"empty CUDA arch list {text!r}")
    return archs


@dataclass(frozen=True)
class Pin:
    version: str
    tag: str
    commit: str
    git_url: str
    stock_version: str
    cuda_version: str
    default_archs: tuple[CudaArch, ...]
    local_label: str

    @property
    def wheel_version(self) -> str:
        """Version of the wheels we build: 2.11.0+<local label>."""
        return f"{self.version}+{self.local_label}"

    def describe(self) -> str:
        return f"PyTorch {self.tag} ({self.commit})"

    def archs(self, environ: dict[str, str] | None = None) -> tuple[CudaArch, ...]:
        """Target archs: TORCH_CUDA_ARCH_LIST when set, else the pin's default."""
        env = os.environ if environ is None else environ
        override = env.get("TORCH_CUDA_ARCH_LIST", "").strip()
        return parse_arch_list(override) if override else self.default_archs


def load_pin(path: Path = PIN_FILE) -> Pin:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise HarnessError(f"pin file {path} is missing") from None
    except tomllib.TOMLDecodeError as err:
        raise HarnessError(f"pin file {path} is not valid TOML: {err}") from None
    try:
        torch, cuda, wheel = data["pytorch"], data["cuda"], data["wheel"]
        pin = Pin(
            version=torch["version"],
            tag=torch["tag"],
            commit=torch["commit"],
            git_url=torch["git_url"],
            stock_version=torch["stock_version"],
            cuda_version=cuda["version"],
            default_archs=tuple(CudaArch.parse(a) for a in cuda["archs"]),
            local_label=wheel["local_label"],
        )
    except KeyError as err:
        raise HarnessError(f"pin file {path} lacks the key {err}") from None
    if not re.fullmatch(r"[0-9a-f]{40}", pin.commit):
        raise HarnessError(f"pin file {path}: commit {pin.commit!r} is not a full SHA-1")
    if not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9]+)*", pin.local_label):
        raise HarnessError(
            f"pin file {path}: local_label {pin.local_label!r} is not a PEP 440 local label"
        )
    return pin
