"""Command line of the harness: `python -m build_scripts <verb>` (the Makefile's verbs)."""

from __future__ import annotations

import argparse
import os
import sys

from .errors import HarnessError

# Verbs whose machinery is not in the project yet: what each still needs.
NOT_YET = {
    "build": "the Docker build of the custom torch wheel is not written yet. It will need Docker with "
             "BuildKit, tens of GB of disk and hours of CPU time; this machine has no Docker engine.",
    "docker": "the runtime image of the patched environment is not written yet; it needs the wheel from "
              "`make build`.",
    "test-upstream": "running upstream's convolution tests needs a patched torch (the overlay or a "
                     "`make build` wheel); neither exists yet.",
    "bench": "the benchmark suite is not written yet; it needs the overlay and a GPU.",
}


def _force(args) -> bool:
    return args.force or os.environ.get("FORCE", "") not in ("", "0")


def cmd_source(args) -> None:
    from .pin import load_pin
    from .source import make_source, source_dir
    make_source(source_dir(), load_pin(), force=_force(args))


def cmd_patch(args) -> None:
    from .apply import apply_patch_set
    from .patchset import PatchSet
    from .pin import load_pin
    from .source import source_dir
    apply_patch_set(source_dir(), PatchSet.load(), load_pin(), force=_force(args))


def cmd_unpatch(args) -> None:
    from .apply import unapply_patch_set
    from .source import source_dir
    unapply_patch_set(source_dir(), force=_force(args))


def cmd_check(args) -> None:
    from .check import run_l0
    from .pin import load_pin
    report = run_l0(load_pin())
    print(report.summary())


def cmd_overlay(args) -> None:
    from .overlay import build_overlay
    from .pin import load_pin
    wheel = build_overlay(load_pin())
    print(f"overlay wheel: {wheel}\n"
          f"install it beside torch 2.11.0+cu130 with `pip install {wheel}`, then `import dwconv_overlay`")


def cmd_series(args) -> None:
    from .patchset import PatchSet
    patch_set = PatchSet.load()
    print(f"patch set {patch_set.hash}")
    for item in patch_set.items:
        print(f"  {item.kind:8} {item.path}\n           {item.reason} [upstream: {item.upstream}]")
    if not patch_set.items:
        print("  (no items yet)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)
    for name, fn, text in [
        ("source", cmd_source, "clone the pinned PyTorch into PYTORCH_SRC (or check the checkout there)"),
        ("patch", cmd_patch, "apply the patch set to PYTORCH_SRC, all or nothing"),
        ("unpatch", cmd_unpatch, "restore PYTORCH_SRC to upstream"),
        ("check", cmd_check, "L0: codegen, compile, link and symbol checks against the pinned wheel, no GPU"),
        ("overlay", cmd_overlay, "L0, then the overlay library packed as a wheel in dist/"),
        ("series", cmd_series, "list the patch set's items and its hash"),
    ]:
        verb = sub.add_parser(name, help=text)
        verb.add_argument("--force", action="store_true", help="proceed despite a wrong commit or a dirty tree")
        verb.set_defaults(fn=fn)
    for name in NOT_YET:
        sub.add_parser(name, help="not available yet").set_defaults(fn=None)
    args = parser.parse_args(argv)
    if args.fn is None:
        print(f"make {args.verb}: not available yet: {NOT_YET[args.verb]}", file=sys.stderr)
        return 2
    try:
        args.fn(args)
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
