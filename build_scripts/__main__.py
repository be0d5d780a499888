"""Command line of the harness: `python -m build_scripts <verb>` (the Makefile's verbs)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError

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


def cmd_resource_report(args) -> None:
    from .check import run_l0
    from .pin import load_pin
    from .resource_report import kernel_resources, markdown
    from .sass_mix import find_cuobjdump
    from .toolchain import find_toolchain
    pin = load_pin()
    report = run_l0(pin)
    if not report.compiler_reports:
        raise HarnessError("the patch set has no CUDA sources: there is no resource report to show")
    cuobjdump = find_cuobjdump(find_toolchain(pin).cuda_home)
    for label, directory in report.compiler_reports.items():
        rows = [r for r in kernel_resources(directory, cuobjdump) if not args.arch or r.arch == args.arch]
        print(markdown(rows, label) + "\n")


def cmd_memory_profile(args) -> None:
    from .bench.layers import GEOMEAN_SETS, matching, problems
    from .bench.schema import parse_configs
    from .memory_profile import PASSES, build, jobs_for, markdown, profile_all, write_json
    sets = [name for name in args.sets.split(",") if name] or list(GEOMEAN_SETS)
    passes = tuple(name for name in args.passes.split(",") if name) or PASSES
    try:
        chosen = matching(problems(sets, parse_configs(args.configs)), args.match)
    except ValueError as err:  # an unknown layer set or configuration, MATCH not a pattern or matching nothing
        raise HarnessError(str(err)) from err
    if unknown := [p for p in passes if p not in PASSES]:
        raise HarnessError(f"unknown pass(es) {unknown}; the passes are {list(PASSES)}")
    if args.batch < 1:
        raise HarnessError(f"--batch {args.batch}: the emulated batch is 1 or more")
    jobs = jobs_for(chosen, passes, args.batch)
    if not jobs:
        raise HarnessError(f"no 2D problem of the sets {sets} matches {args.match!r} (conv1d has no profile)")
    profiles = profile_all(build(REPO_ROOT / "build" / "memory-profile"), jobs)
    text = markdown(profiles)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "memory-profile.md").write_text(text)
        write_json(profiles, out / "memory-profile.json")


def cmd_plan_report(args) -> None:
    from .bench.layers import problems
    from .bench.schema import parse_configs
    from .plan_report import Gpu, bench_launches, build_driver, markdown
    gpu = Gpu(args.sms, args.arch)  # checked before anything is built, as are the sets and configurations
    sets = [name for name in args.sets.split(",") if name] or None
    try:
        configs_2d = parse_configs(args.configs)
        problems(sets, configs_2d)
    except ValueError as err:  # an unknown layer set or configuration
        raise HarnessError(str(err)) from err
    resources = None
    if args.registers:  # L0 compiles the kernels and keeps the compiler's report (cached when unchanged)
        from .check import run_l0
        from .pin import load_pin
        from .resource_report import kernel_resources
        report = run_l0(load_pin())
        resources = [row for directory in report.compiler_reports.values() for row in kernel_resources(directory)]
    launches = bench_launches(build_driver(REPO_ROOT / "build" / "plan-report"), gpu, sets, configs_2d, resources)
    print(markdown(launches, gpu, resources))


def cmd_plan_audit(args) -> None:
    from .plan_audit import audit, markdown, read_report
    from .plan_report import build_driver
    if not args.report:
        raise HarnessError("plan-audit: name the bench report, e.g. BENCH=results/<device>/<date>/bench-....json "
                           "(a run with LAUNCHES=1)")
    report = read_report(Path(args.report))
    audited = audit(report, build_driver(REPO_ROOT / "build" / "plan-report"))
    print(markdown(audited, report, args.report))
    differing = sum(1 for a in audited if a.differences)
    if differing:
        raise HarnessError(f"plan-audit: {differing} of {len(audited)} passes did not launch as the host code plans "
                           f"on a CPU: plan-report's estimates do not hold for them")


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


def cmd_bench(args) -> None:
    if args.action == "report":
        _bench_report(args)
        return
    import datetime

    from .bench.schema import parse_configs
    try:
        configs_2d = parse_configs(args.configs)
    except ValueError as err:
        raise HarnessError(f"bench: {err}") from None
    if args.action == "profile":
        from .bench.profile import DEFAULT_PASSES, run_profile
        from .bench.schema import comma_separated
        out_dir = Path(args.out) if args.out else None
        if out_dir is None:
            out_dir = Path(args.results) / "profile" / datetime.date.today().isoformat()
        run_profile(out_dir, comma_separated(args.sets) or None, comma_separated(args.passes or DEFAULT_PASSES),
                    args.match, ncu=os.environ.get("NCU") or "ncu", stop_after_s=args.stop_after,
                    configs_2d=configs_2d, paths_off=_paths_off_here())
        return
    if args.action == "models":
        _bench_models(args, configs_2d)
        return
    torch = _gpu_torch("make bench")
    _set_cudnn_benchmark(args, torch)
    from .bench.report import failed_checks
    from .bench.run import run_bench
    from .bench.schema import comma_separated
    sets = comma_separated(args.sets) or None
    out, command = _run_report_path(args, torch, sets or [])
    try:
        report = run_bench(out, sets, args.variants, repeats=args.repeats, command=command,
                           stop_after_s=args.stop_after, configs_2d=configs_2d, match=args.match,
                           launches=args.launches)
    except ValueError as err:
        raise HarnessError(f"bench: {err}") from None
    print(f"wrote {out}")
    try:
        from .bench.report import write_report
        for path in write_report([out], out.parent, with_plots=_has_matplotlib()):
            print(f"wrote {path}")
    except ImportError as err:
        print(f"no report written here ({err}): run `make bench-report BENCH={out}` where the harness is installed")
    baseline_misses = failed_checks(report, baselines=True)
    if baseline_misses:
        print("note: upstream's own paths missed the float64 tolerance or failed (bench.md flags their rows, and the "
              "routing routes nothing to them):\n  " + "\n  ".join(baseline_misses))
    problems = []
    failures = failed_checks(report, baselines=False)
    if failures:
        problems.append("implementations failed the float64 check:\n  " + "\n  ".join(failures))
    lost = (report.get("cut_short") or {}).get("reason")
    if lost:
        problems.append(f"bench stopped at {lost}")
    if problems:
        raise HarnessError("\n".join(problems))


def _bench_report(args) -> None:
    """bench.md and its plots from bench reports, or models.md and its plot from a bench-models one."""
    import json
    if not args.reports:
        raise HarnessError("bench report: name the report(s), e.g. BENCH=results/<device>/<date>/bench.json")
    paths = [Path(p) for p in args.reports]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise HarnessError(f"bench report: no such report: {', '.join(missing)}")
    out_dir = Path(args.out) if args.out else paths[0].parent
    from .bench.schema import MODELS_SCHEMA
    model_reports = [p for p in paths if json.loads(p.read_text()).get("schema") == MODELS_SCHEMA]
    if model_reports and len(paths) > 1:
        raise HarnessError(f"bench report: {', '.join(map(str, model_reports))} is a bench-models report: "
                           "give it alone")
    if model_reports:
        from .bench.model_report import write_model_report
        written = write_model_report(paths[0], out_dir)
    else:
        from .bench.report import write_report
        written = write_report(paths, out_dir)
    for path in written:
        print(f"wrote {path}")


def _gpu_torch(verb: str):
    try:
        import torch
    except ImportError:
        raise HarnessError(f"{verb} runs in a Python with torch 2.11.0+cu130 and a GPU (GPU_PYTHON); "
                           f"{sys.executable} has no torch") from None
    if not torch.cuda.is_available():
        raise HarnessError(f"{verb} needs a CUDA device and torch 2.11.0+cu130; this Python has none "
                           "(run it on the GPU machine, or set GPU_PYTHON)")
    return torch


def _set_cudnn_benchmark(args, torch) -> None:
    """CUDNN_BENCHMARK=1: the run as users with torch.backends.cudnn.benchmark on see it, cuDNN timing its
    algorithms on a shape's first call (the check and warm-up before any timed run) and keeping the
    fastest: stock's cuDNN calls, the cudnn variant and the routing's cuDNN route alike."""
    if args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True


def _run_report_path(args, torch, names: list[str], kind: str = "bench") -> tuple[Path, str]:
    """Where a GPU run's report goes, RESULTS/<device>/<date>/<kind>-<names>-<variants>[-<configs>]
    [-match-<MATCH>-<its hash>][-cudnn-benchmark][-without-<path>+<path>].json (the last: the kernel paths
    DWCONV_DISABLE_KERNELS switches off), and the command that made it, for the report to hold."""
    import datetime
    import hashlib
    import shlex

    from .bench.schema import comma_separated, report_file_name, slug
    # a run of some problems must overwrite neither the day's run of them all nor one of others
    # (" b1 " and "b1$" slug alike: the hash tells them apart)
    match = [f"match-{args.match}-{hashlib.sha256(args.match.encode()).hexdigest()[:6]}"] \
        if kind == "bench" and args.match else []
    modes = match + (["cudnn-benchmark"] if torch.backends.cudnn.benchmark else [])
    paths_off = _paths_off_here()
    modes += [f"without-{'+'.join(paths_off)}"] if paths_off else []
    name = report_file_name(names, comma_separated(args.variants), comma_separated(args.configs) + modes, kind=kind)
    out = Path(args.results) / slug(torch.cuda.get_device_name(0)) / datetime.date.today().isoformat() / name
    setting = [f"DWCONV_DISABLE_KERNELS={','.join(paths_off)}"] if paths_off else []
    return out, shlex.join(setting + _bench_command(args, kind))


def _paths_off_here() -> list[str]:
    """The kernel paths DWCONV_DISABLE_KERNELS switches off in this process, which every variant keeps
    (a name that is no path refused here, as the overlay refuses it, with the paths named)."""
    from .bench.schema import kernel_paths_off
    from .plan_report import kernel_path_names
    try:
        return kernel_paths_off(os.environ.get("DWCONV_DISABLE_KERNELS", ""), kernel_path_names())
    except ValueError as err:
        raise HarnessError(str(err)) from None


def _bench_command(args, kind: str) -> list[str]:
    """The run's command with every setting the make variables gave it (SETS, VARIANTS, ...) as a flag,
    so that the report names what reproduces it."""
    words = ["python", "-m", "build_scripts", "bench", "models" if kind == "models" else "run"]
    chosen = ("--models", args.models) if kind == "models" else ("--sets", args.sets)
    match = ("--match", args.match if kind == "bench" else "")
    for flag, value in (chosen, ("--variants", args.variants), ("--configs", args.configs), match):
        if value:
            words += [flag, value]
    words += ["--repeats", str(args.repeats)] + (["--cudnn-benchmark"] if args.cudnn_benchmark else [])
    return words + (["--launches"] if kind == "bench" and args.launches else [])


def _bench_models(args, configs) -> None:
    from .bench.schema import parse_model_variants, parse_models
    try:
        models = parse_models(args.models)
        parse_model_variants(args.variants)
    except ValueError as err:
        raise HarnessError(f"bench-models: {err}") from None
    torch = _gpu_torch("make bench-models")
    _set_cudnn_benchmark(args, torch)
    from .bench.model_report import failed_checks, write_model_report
    from .bench.model_run import run_models
    out, command = _run_report_path(args, torch, models or [], kind="models")
    try:
        report = run_models(out, models, args.variants, repeats=args.repeats, command=command,
                            stop_after_s=args.stop_after, configs=configs)
    except ValueError as err:
        raise HarnessError(f"bench-models: {err}") from None
    print(f"wrote {out}")
    for path in write_model_report(out, out.parent, with_plot=_has_matplotlib()):
        print(f"wrote {path}")
    failures = failed_checks(report)
    if failures:
        raise HarnessError("variants failed a check or could not be timed:\n  " + "\n  ".join(failures))


def _has_matplotlib() -> bool:
    import importlib.util
    ok = importlib.util.find_spec("matplotlib") is not None
    if not ok:
        print("matplotlib is not installed here: markdown only; `make bench-report BENCH=...` draws the plots")
    return ok


def cmd_routing_table(args) -> None:
    from .pin import load_pin
    from . import routing_held_out
    from .routing_table import TABLE, read_points, render, render_runtime, summary
    reports = args.reports or os.environ.get("BENCH", "").split()
    if not reports:
        raise HarnessError("routing-table: name the bench reports, e.g. BENCH=results/<device>/<date>/bench.json "
                           "(several, space-separated: where two measured a layer, the later stands)")
    try:  # the table is for a torch run with this process's switches: the reports must have timed ours with them
        paths_off = _paths_off_here()
    except HarnessError as err:
        raise HarnessError(f"routing-table: {err}") from None
    if paths_off and not args.table:
        raise HarnessError(f"routing-table: DWCONV_DISABLE_KERNELS={','.join(paths_off)}: a table for a torch run with "
                           "kernel paths off goes to a file (TABLE=<file>, loaded by DWCONV_ROUTING_TABLE); the "
                           "compiled-in table is every build's, which runs every path")
    points, measured_on, source, arch = read_points([Path(p) for p in reports], load_pin().stock_version,
                                                    args.avoid_failed_ours, paths_off)
    # before writing: a failure leaves the table as it was. The check compiles the rule with g++; a GPU
    # machine making a table for its `routed` step may have none, and the table does not depend on it.
    if routing_held_out.compiler() is None:
        held_out = f"held-out check skipped: it {routing_held_out.NO_COMPILER} here"
    else:
        held_out = routing_held_out.summary(points)
    if args.table:
        table_file = Path(args.table)
        text = render_runtime(points, measured_on, source, arch)
        try:
            table_file.write_text(text)
        except OSError as err:
            raise HarnessError(f"routing-table: cannot write {table_file}: {err}") from None
        done = (f"wrote {table_file}: DWCONV_ROUTING_TABLE={table_file} (or dwconv_overlay.load_routing_table) routes "
                "by it, with no rebuild")
    else:
        TABLE.write_text(render(points, measured_on, source, arch))
        done = f"wrote {os.path.relpath(TABLE, REPO_ROOT)}: rebuild the overlay (`make overlay`) to route by it"
    print(summary(points))
    print(held_out)
    print(done)


def cmd_series(args) -> None:
    from .patchset import PatchSet
    patch_set = PatchSet.load()
    print(f"patch set {patch_set.hash}")
    for item in patch_set.items:
        print(f"  {item.kind:8} {item.path}\n           {item.reason} [upstream: {item.upstream}]")
    if not patch_set.items:
        print("  (no items yet)")


def build_parser() -> argparse.ArgumentParser:
    """The verbs and their flags, each flag's default from the make variable of its name."""
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
        ("bench", cmd_bench, "time the layer sets four ways on this GPU, or write a report's tables and plots"),
        ("routing-table", cmd_routing_table, "regenerate the routing table from a bench report"),
        ("resource-report", cmd_resource_report,
         "L0, then the compiler's view of each kernel: registers, spills, shared memory, 16-byte accesses"),
        ("memory-profile", cmd_memory_profile,
         "bank conflicts and global sectors of every bench pass's kernel, counted on the CPU emulator"),
        ("plan-report", cmd_plan_report,
         "the kernel and launch (grid, block, shared memory, blocks per SM, waves) of every bench pass, on a CPU"),
        ("plan-audit", cmd_plan_audit,
         "a GPU run's recorded launches (make bench LAUNCHES=1) against the host code's plans for that GPU"),
    ]:
        verb = sub.add_parser(name, help=text)
        verb.add_argument("--force", action="store_true", help="proceed despite a wrong commit or a dirty tree")
        verb.set_defaults(fn=fn)
        if name == "build-wheel":
            verb.add_argument("--steps", default="requirements,compile",
                              help="comma-separated: requirements (pip install the build requirements), compile")
            verb.add_argument("--out", default=str(REPO_ROOT / "dist"), help="where the wheel goes")
        if name == "bench":
            verb.add_argument("action", nargs="?", choices=("run", "report", "profile", "models"), default="run",
                              help="run: time on this GPU (default); report: markdown and plots of reports; "
                                   "profile: Nsight Compute on our kernels of chosen passes; models: whole "
                                   "networks' training steps and inference on this GPU (make bench-models)")
            verb.add_argument("--models", default=os.environ.get("MODELS", ""),
                              help="models: comma-separated (default: MobileNetV2, EfficientNet-B0, ConvNeXt-T)")
            verb.add_argument("reports", nargs="*", help="report: the bench JSON file(s) of one run")
            verb.add_argument("--sets", default=os.environ.get("SETS", ""),
                              help="run: comma-separated layer sets (default: all)")
            verb.add_argument("--variants", default=os.environ.get("VARIANTS", ""),
                              help="run: comma-separated variants (default: stock, cudnn, native, ours, routed), "
                                   "ours-without-<kernel path> among them; look-back: ours and ours without each path")
            verb.add_argument("--configs", default=os.environ.get("CONFIGS", ""),
                              help="run, profile: the 2D layers' dtype/layout pairs, comma-separated "
                                   "(float32/channels_last,...), or 'coverage' for those users reach beside the "
                                   "issue's (default: float32/contiguous, bfloat16/channels_last, "
                                   "float16/channels_last); conv1d keeps bf16 contiguous and transposed")
            verb.add_argument("--repeats", type=int, default=int(os.environ.get("REPEATS") or 30))
            verb.add_argument("--cudnn-benchmark", action="store_true",
                              default=os.environ.get("CUDNN_BENCHMARK", "") not in ("", "0"),
                              help="run, models: with torch.backends.cudnn.benchmark on, as many training scripts "
                                   "set it (default: torch's default, off); the report's name ends in "
                                   "-cudnn-benchmark")
            verb.add_argument("--stop-after", type=float, default=float(os.environ.get("BENCH_STOP_AFTER") or 0) or None,
                              help="run, profile: start no problem (target) that would end past this many seconds "
                                   "(default: no limit)")
            verb.add_argument("--results", default=os.environ.get("RESULTS") or str(REPO_ROOT / "results"),
                              help="run: where results/<device>/<date>/ goes")
            verb.add_argument("--out", help="report: the output directory (default: beside the first report); "
                                            "profile: where profile.md and profile.csv go")
            verb.add_argument("--passes", default=os.environ.get("PASSES", ""),
                              help="profile: comma-separated passes (default: backward_weight)")
            verb.add_argument("--match", default=os.environ.get("MATCH", ""),
                              help="run, profile: a regular expression on the problems' labels, only those it "
                                   "finds run, e.g. 'L=2048 b8 bfloat16 contiguous' or ' b1 '")
            verb.add_argument("--launches", action="store_true", default=os.environ.get("LAUNCHES", "") not in ("", "0"),
                              help="run: also record, under the profiler, the kernels each pass of ours launches, "
                                   "with their grids, blocks, shared memory and registers, for `make plan-audit` "
                                   "(one profiled run a pass)")
        if name == "plan-report":
            verb.add_argument("--sms", type=int, default=int(os.environ.get("SMS") or 132),
                              help="the GPU's SM count (default 132, an H100 SXM; 114: H100 PCIe; 108: A100)")
            verb.add_argument("--arch", default=os.environ.get("ARCH") or "sm_90",
                              help="the SM's kind, which says what one holds: sm_80 (A100), sm_86 (RTX 30), "
                                   "sm_89 (RTX 40, L4) or sm_90 (H100, H200; the default)")
            verb.add_argument("--sets", default=os.environ.get("SETS", ""),
                              help="comma-separated layer sets (default: all)")
            verb.add_argument("--configs", default=os.environ.get("CONFIGS", ""),
                              help="the 2D layers' dtype/layout pairs, or 'coverage' (as make bench takes them)")
            verb.add_argument("--registers", action="store_true", default=os.environ.get("REGISTERS") == "1",
                              help="count blocks an SM by registers too, from the compiler's report (runs L0: nvcc)")
        if name == "memory-profile":
            verb.add_argument("--sets", default=os.environ.get("SETS", ""),
                              help="comma-separated layer sets (default: MobileNetV2, EfficientNet-B0, ConvNeXt-T)")
            verb.add_argument("--configs", default=os.environ.get("CONFIGS", ""),
                              help="the 2D layers' dtype/layout pairs, or 'coverage' (as make bench takes them)")
            verb.add_argument("--passes", default=os.environ.get("PASSES", ""),
                              help="comma-separated: forward, backward-input, backward-weight (default: all three)")
            verb.add_argument("--match", default=os.environ.get("MATCH", ""),
                              help="a regular expression on the problems' labels, e.g. '96@56 b64 bfloat16'")
            verb.add_argument("--batch", type=int, default=int(os.environ.get("BATCH") or 2),
                              help="the emulated batch (default 2), on an H100 of as many SMs as keep its plan")
            verb.add_argument("--out", default=os.environ.get("OUT", ""),
                              help="where memory-profile.md and memory-profile.json go (default: printed only)")
        if name == "resource-report":
            verb.add_argument("--arch", default=os.environ.get("ARCH", ""), help="one arch only, e.g. sm_90")
        if name == "plan-audit":
            verb.add_argument("report", nargs="?", default=os.environ.get("BENCH", ""))
        if name == "routing-table":
            verb.add_argument("reports", nargs="*", help="bench reports (default: BENCH, space-separated)")
            verb.add_argument("--table", default=os.environ.get("TABLE", ""),
                              help="write the table to this file, to load at run time (DWCONV_ROUTING_TABLE), "
                                   "instead of the compiled-in DepthwiseConvRoutingTable.h")
            verb.add_argument("--avoid-failed-ours", action="store_true",
                              help="route a pass where ours failed its float64 check elsewhere, and say so, rather "
                                   "than refuse the reports (gpu-session's routed step; not for the committed table)")
        if name == "test-upstream":
            verb.add_argument("--with", dest="mode", default=os.environ.get("WITH") or "overlay",
                              choices=("overlay", "local", "image"), help="which patched torch (default: WITH or overlay)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.fn(args)
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
