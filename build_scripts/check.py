"""`make check`: the L0 rung of DESIGN.md's ladder, on the real pinned wheel, no GPU.

  fetch    the pinned wheel and CUDA headers (cached), nvcc of the pinned CUDA
  merge    our overrides into the wheel's packaged native_functions.yaml and derivatives.yaml
  codegen  torchgen's ATen codegen and the packaged autograd codegen on the merged yaml
  autograd the generated Functions.cpp, compiled syntax-only
  compile  every project source, for every target arch, with PyTorch's flags
  link     one shared library from those objects, against the pinned libraries, no undefined symbols
  symbols  each source defines what the upstream file it replaces defined (patches/interfaces.toml),
           and every kernel our dispatch entries name exists, with the declared signature
  load     the linked library is the overlay: staged with its loader and imported into the pinned
           torch (installed with its CUDA libraries; no GPU needed), it must take over exactly the
           ops interfaces.toml [overlay] lists, and give them back on disable()
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from . import REPO_ROOT
from .codegen import GeneratedCode, run_codegen, syntax_check_autograd
from . import overlay
from .errors import HarnessError
from .fatbin import fatbin_entries
from .patchset import PatchSet, digest_tree
from .pin import CudaArch, Pin
from .symbols import (
    INTERFACES_FILE, defined_symbols, load_interfaces, load_overlay_ops, probe_symbols, signature_problems,
    undefined_symbols,
)
from .toolchain import (
    Toolchain, compile_command, compiler_version, find_toolchain, include_flags, link_command, run_compiler,
)
from .runtime_env import ensure_runtime_env
from .wheel_cache import PinnedTorch, cache_dir, ensure_pinned_torch

DEFAULT_WORK_DIR = REPO_ROOT / "build" / "l0"
LIBRARY_NAME = "libdwconv_overlay.so"  # the overlay library: L0 builds and checks it


@dataclass
class L0Report:
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    library: Path | None = None
    started: float = field(default_factory=time.monotonic)

    @contextmanager
    def step(self, name: str):
        print(f"[L0] {name} ...", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            yield
        except HarnessError as err:
            raise HarnessError(f"L0 {name} failed: {err}") from None
        self.timings[name] = time.monotonic() - start

    def summary(self) -> str:
        wall = time.monotonic() - self.started
        steps = ", ".join(f"{n} {s:.1f}s" for n, s in self.timings.items())
        return "\n".join([f"L0 passed in {wall:.1f}s (autograd and compile overlap: {steps})", *self.notes])


@dataclass
class L0Check:
    pin: Pin
    patch_set: PatchSet
    archs: tuple[CudaArch, ...]
    cache: Path  # downloads (the pinned wheel, CUDA headers)
    work: Path  # outputs of this check
    codegen_cache: Path  # codegen outputs by merged-yaml hash
    report: L0Report = field(default_factory=L0Report)

    def run(self) -> L0Report:
        with self.report.step("fetch"):
            torch = ensure_pinned_torch(self.pin, self.cache)
            toolchain = find_toolchain(self.pin)
        with self.report.step("merge"):
            merged = {
                flavour: self.patch_set.merged_yaml(
                    flavour, torch.packaged_yaml(flavour).read_text(), str(torch.packaged_yaml(flavour))
                ).text
                for flavour in ("native_functions", "derivatives")
            }
            merged_dir = self.work / "merged"
            merged_dir.mkdir(parents=True, exist_ok=True)
            for flavour, text in merged.items():
                (merged_dir / f"{flavour}.yaml").write_text(text)
        with self.report.step("codegen"), self._blame_overrides("native_functions", "derivatives"):
            generated = run_codegen(merged["native_functions"], merged["derivatives"], torch, self.codegen_cache)
            if generated.cached:
                self.report.notes.append(
                    f"codegen output (and its Functions.cpp check, if it passed before) reused from "
                    f"{generated.root}: the merged yaml is unchanged"
                )

        includes = include_flags(self._include_roots(generated), torch, toolchain)
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            autograd = pool.submit(self._timed, "autograd", syntax_check_autograd, generated, torch, toolchain)
            objects = self._compile_all(pool, includes, toolchain)
            autograd.result()
        if objects:
            with self.report.step("link"):
                library = self.work / LIBRARY_NAME
                run_compiler(link_command(toolchain, list(objects.values()), library, torch),
                             f"linking {LIBRARY_NAME} against the pinned libraries left symbols unresolved")
                self.report.library = library
        else:
            self.report.notes.append("the patch set has no kernel sources yet: nothing to compile or link")
        with self.report.step("symbols"):
            self._check_symbols(objects, includes, toolchain, torch)
        expected_ops = load_overlay_ops(self.patch_set.patches_dir / INTERFACES_FILE)
        if self.report.library and expected_ops:
            with self.report.step("load"):
                self._check_load(expected_ops)
        elif self.report.library:
            self.report.notes.append("interfaces.toml names no [overlay] ops: the load step had nothing to check")
        return self._finish()

    def _check_load(self, expected_ops: list[str]) -> None:
        """Load the overlay into the pinned torch (installed with its CUDA libraries; no GPU
        needed) and check it takes over exactly the claimed ops, and gives them back."""
        python = ensure_runtime_env(self.pin, self.cache)
        files = overlay.package_files(self.report.library, self.pin, self.patch_set, self.archs)
        staging = overlay.stage(files, self.work / "overlay-staging")
        proc = subprocess.run([str(python), str(Path(__file__).with_name("load_probe.py")), str(staging), *expected_ops],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise HarnessError(f"loading the overlay into torch {self.pin.stock_version} failed:\n"
                               + "\n".join(proc.stderr.strip().splitlines()[-30:]))
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        wanted = sorted(expected_ops)
        problems = []
        for phase, expect in [("before", []), ("loaded", wanted), ("disabled", []), ("enabled_again", wanted)]:
            if sorted(seen[phase]) != expect:
                problems.append(f"{phase}: the overlay's CUDA kernel is active for {sorted(seen[phase])}, expected {expect}")
        if not seen["enabled_after_load"]:
            problems.append("dwconv_overlay.enabled() is False right after import")
        if problems:
            raise HarnessError("the overlay does not register as claimed in interfaces.toml [overlay]:\n  "
                               + "\n  ".join(problems))
        self.report.notes.append(
            f"the overlay loaded into torch {seen['torch']} (no GPU) and took over {', '.join(wanted)}; "
            "disable() and enable() switched them back and forth"
        )

    def _finish(self) -> L0Report:
        diffs = self.patch_set.of_kind("diff")
        if diffs:
            self.report.notes.append(
                f"{len(diffs)} diff item(s) not checked here: a diff needs an upstream tree (`make patch` applies it)"
            )
        return self.report

    def _timed(self, name, fn, *args):
        with self.report.step(name), self._blame_overrides("derivatives"):
            return fn(*args)

    @contextmanager
    def _blame_overrides(self, *flavours: str):
        """Name the override files a codegen-side failure may come from."""
        try:
            yield
        except HarnessError as err:
            labels = [self.patch_set.label(item) for item in self.patch_set.of_kind("override")
                      if PurePosixPath(item.path).parts[0] in flavours]
            suspects = ", ".join(labels) if labels else f"none (upstream's {'/'.join(flavours)} yaml as packaged)"
            raise HarnessError(
                f"{err}\noverrides merged in: {suspects}; the merged yaml is in {self.work / 'merged'}"
            ) from None

    def _include_roots(self, generated: GeneratedCode) -> list[Path]:
        # patches/files mirrors the PyTorch tree, so its aten/src and root are include roots.
        ours = [self.patch_set.files_root / "aten" / "src", self.patch_set.files_root]
        return [p for p in ours if p.is_dir()] + [generated.include_root]

    def _compile_units(self) -> list[tuple[str, Path, str, list[str]]]:
        """(key, source, what to call it in messages, extra flags) for every source the library is
        built from: the series' sources (keyed by tree path) and the overlay's own (keyed
        overlay/<name>), which learn the pinned commit to refuse another torch with."""
        units = [(item.path, self.patch_set.source(item), f"{item.where}: {self.patch_set.label(item)}", [])
                 for item in self.patch_set.compiled_sources()]
        pinned = [f'-DDWCONV_PINNED_COMMIT="{self.pin.commit}"']
        units += [(f"overlay/{p.name}", p, f"patches/overlay/{p.name}", pinned) for p in self.patch_set.overlay_sources()]
        return units

    def _compile_all(self, pool, includes, toolchain) -> dict[str, Path]:
        units = self._compile_units()
        if not units:
            return {}
        obj_dir = self.work / "obj"
        objects = {key: obj_dir / (key + ".o") for key, *_ in units}
        for obj in objects.values():
            obj.parent.mkdir(parents=True, exist_ok=True)
        arch_names = ", ".join(f"sm_{a.sm}" for a in self.archs)

        sources_digest = self._project_files_digest(toolchain)

        def compile_one(key: str, source: Path, label: str, extra_flags: list[str]) -> None:
            obj = objects[key]
            cmd = compile_command(toolchain, source, obj, includes + extra_flags, self.archs)
            # Reuse an object compiled by the same command from the same project files.
            cached = self.work / "objcache" / (hashlib.sha256(
                (sources_digest + "\0".join(cmd)).encode()).hexdigest()[:32] + ".o")
            if cached.exists():
                shutil.copyfile(cached, obj)
            else:
                target = f" for {arch_names}" if source.suffix == ".cu" else ""
                run_compiler(cmd, f"{label} does not compile{target}")
                cached.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(obj, cached)
            if source.suffix == ".cu":
                self._check_gpu_code(label, obj)

        with self.report.step("compile"):
            for future in [pool.submit(compile_one, *unit) for unit in units]:
                future.result()
        return objects

    def _project_files_digest(self, toolchain: Toolchain) -> str:
        """Everything a project source may include from the patch set, and the compilers."""
        digest = hashlib.sha256(digest_tree(self.patch_set.files_root).encode())
        for compiler in (str(toolchain.nvcc), toolchain.cxx):
            digest.update(compiler_version(compiler).encode())
        return digest.hexdigest()

    def _check_gpu_code(self, label: str, obj: Path) -> None:
        """The object must carry a cubin for every target arch (and PTX where asked)."""
        found = fatbin_entries(obj)
        wanted = {("cubin", a.major * 10 + a.minor) for a in self.archs}
        wanted |= {("ptx", a.major * 10 + a.minor) for a in self.archs if a.ptx}
        missing = sorted(wanted - found)
        if missing:
            raise HarnessError(f"{label}: the object lacks GPU code for {missing} (it has {sorted(found)})")

    def _check_symbols(self, objects: dict[str, Path], includes, toolchain: Toolchain, torch: PinnedTorch) -> None:
        problems: list[str] = []
        probe_dir = self.work / "probes"
        labels = {item.path: self.patch_set.label(item) for item in self.patch_set.compiled_sources()}
        interfaces_path = self.patch_set.patches_dir / INTERFACES_FILE
        for interface in load_interfaces(interfaces_path):
            if interface.source not in objects:
                raise HarnessError(f"{interfaces_path}: {interface.source} is not a compiled source of the series")
            where = labels[interface.source]
            names = list(interface.defines) + list(interface.registers)
            expected = probe_symbols(interface.header, names, includes, toolchain, probe_dir)
            obj = objects[interface.source]
            defined = defined_symbols(obj)
            for name in interface.defines:
                problems += signature_problems(name, expected[name], defined, where, interface.header)
            referenced = undefined_symbols(obj)
            for stub in interface.registers:
                if expected[stub] not in referenced and expected[stub] not in defined:
                    problems.append(f"{where}: registers no kernel with {stub} (no REGISTER_DISPATCH for it)")

        kernels = self._dispatch_kernels()
        if kernels:
            ours = set().union(*(defined_symbols(o) for o in objects.values()))
            exported = set().union(*(defined_symbols(torch.lib_dir / lib, dynamic=True)
                                     for lib in ("libtorch_cpu.so", "libtorch_cuda.so")))
            for header, (names, origin) in kernels.items():
                expected = probe_symbols(header, sorted(names), includes, toolchain, probe_dir)
                subject = f"{origin} (dispatch kernel; looked in the patch set's sources and the pinned libraries)"
                for name in sorted(names):
                    if expected[name] not in exported:
                        problems += signature_problems(name, expected[name], ours, subject, header)
        if problems:
            raise HarnessError("\n".join(problems))

    def _dispatch_kernels(self) -> dict[str, tuple[set[str], str]]:
        """header -> (at::native kernels named by our dispatch entries, the override naming them)."""
        kernels: dict[str, tuple[set[str], str]] = {}
        for entry in self.patch_set.overrides("native_functions"):
            dispatch = entry.value.get("dispatch") if isinstance(entry.value, dict) else None
            if not dispatch:
                continue
            header = f"ATen/ops/{entry.key.split('.')[0]}_native.h"
            names, _ = kernels.setdefault(header, (set(), entry.origin))
            names.update(f"at::native::{kernel}" for kernel in dispatch.values())
        return kernels


def run_l0(pin: Pin, patch_set: PatchSet | None = None, archs: tuple[CudaArch, ...] | None = None,
           cache: Path | None = None, work: Path | None = None, codegen_cache: Path | None = None) -> L0Report:
    work = (work or DEFAULT_WORK_DIR).resolve()  # codegen runs in other working directories
    check = L0Check(
        pin=pin,
        patch_set=patch_set or PatchSet.load(),
        archs=archs or pin.archs(),
        cache=cache or cache_dir(),
        work=work,
        codegen_cache=(codegen_cache or work / "codegen").resolve(),
    )
    check.work.mkdir(parents=True, exist_ok=True)
    return check.run()
