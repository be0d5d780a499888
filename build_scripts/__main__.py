"""Command line of the harness: `python -m build_scripts <verb>` (the Makefile's verbs)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError

# Verbs whose machinery is not in the project yet: what each still needs.
NOT_YET = {
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


def cmd_build(args) -> None:
    from .docker_build import docker_build_wheel
    from .patchset import PatchSet
    from .pin import load_pin
    facts = docker_build_wheel(load_pin(), PatchSet.load().hash)
    print(f"wheel: {facts.path}")


def cmd_build_local(args) -> None:
    from .apply import apply_patch_set
    from .overlay import DIST_DIR
    from .patchset import PatchSet
    from .pin import load_pin
    from .source import make_source, source_dir
    from .wheel_build import compile_wheel, install_requirements, preflight_problems
    pin, src, environ = load_pin(), source_dir(), dict(os.environ)
    problems = preflight_problems(src, pin, environ)
    if problems:
        raise HarnessError("make build-local needs a prepared machine:\n" + "\n".join(f"  {p}" for p in problems)
                           + "\n(`make build` does the same in Docker)")
    make_source(src, pin, force=_force(args))
    patch_set = PatchSet.load()
    apply_patch_set(src, patch_set, pin, force=_force(args))
    install_requirements(src, pin, environ, force=_force(args))
    print(f"wheel: {compile_wheel(src, pin, patch_set, DIST_DIR, environ, force=_force(args))}")


def cmd_build_wheel(args) -> None:
    from .pin import load_pin
    from .source import source_dir
    from .wheel_build import compile_wheel, install_requirements
    pin, src, environ = load_pin(), source_dir(), dict(os.environ)
    steps = args.steps.split(",")
    unknown = set(steps) - {"requirements", "compile"}
    if unknown:
        raise HarnessError(f"--steps: unknown step(s) {', '.join(sorted(unknown))}; expected requirements, compile")
    if "requirements" in steps:
        install_requirements(src, pin, environ, force=_force(args))
    if "compile" in steps:
        from .patchset import PatchSet
        print(f"wheel: {compile_wheel(src, pin, PatchSet.load(), Path(args.out), environ, force=_force(args))}")


def cmd_docker(args) -> None:
    from .docker_build import docker_build_runtime
    from .patchset import PatchSet
    from .pin import load_pin
    tag = docker_build_runtime(load_pin(), PatchSet.load().hash)
    print(f"image: {tag}\n  docker run --gpus all {tag}            # a shell in the patched environment\n"
          f"  docker run --gpus all {tag} selftest   # checks that our kernels run")


def cmd_test_upstream(args) -> None:
    from .pin import load_pin
    from .source import source_dir
    from .upstream_runs import DEFAULT_OVERLAY_DIR, plan, run_test_upstream
    env = os.environ
    pin = load_pin()
    tests_dir = Path(env.get("UPSTREAM_TESTS") or source_dir() / "test").resolve()
    out_dir = Path(env.get("UPSTREAM_OUT") or REPO_ROOT / "build" / "test-upstream" / args.mode).resolve()
    the_plan = plan(
        args.mode,
        python=env.get("PYTHON_UNDER_TEST") or "python3",
        stock_python=env.get("STOCK_PYTHON") or None,
        image=env.get("IMAGE") or None,
        baseline_file=Path(env["BASELINE"]) if env.get("BASELINE") else None,
        overlay_dir=Path(env.get("DWCONV_OVERLAY_DIR") or DEFAULT_OVERLAY_DIR),
        tests_dir=tests_dir,
        out_dir=out_dir,
    )
    comparison = run_test_upstream(pin, the_plan, tests_dir, out_dir, allow_cpu=env.get("ALLOW_CPU") == "1")
    if comparison.new_failures:
        raise HarnessError(f"{len(comparison.new_failures)} new failure(s) with the patch set (listed above)")


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
        ("build", cmd_build, "the custom torch wheel, built in Docker (docker/builder.Dockerfile) into dist/"),
        ("build-local", cmd_build_local, "the same on a prepared machine: source, patch, compile into dist/"),
        ("build-wheel", cmd_build_wheel, "compile the patched PYTORCH_SRC into a wheel (the builder stage's step)"),
        ("docker", cmd_docker, "the runtime image of the patched environment, around the wheel in dist/"),
        ("test-upstream", cmd_test_upstream, "upstream's convolution tests, patched torch against stock torch"),
    ]:
        verb = sub.add_parser(name, help=text)
        verb.add_argument("--force", action="store_true", help="proceed despite a wrong commit or a dirty tree")
        verb.set_defaults(fn=fn)
        if name == "build-wheel":
            verb.add_argument("--steps", default="requirements,compile",
                              help="comma-separated: requirements (pip install the build requirements), compile")
            verb.add_argument("--out", default=str(REPO_ROOT / "dist"), help="where the wheel goes")
        if name == "test-upstream":
            verb.add_argument("--with", dest="mode", default=os.environ.get("WITH", "overlay"),
                              choices=("overlay", "local", "image"), help="which patched torch (default: WITH or overlay)")
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
