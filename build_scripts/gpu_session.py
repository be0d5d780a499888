"""`make gpu-session`: one device call's worth of GPU work, within the call's time limit.

A lent GPU machine takes a command of at most 10 minutes and gives back what it wrote under
$OUT and the tail of its output. This runs the GPU verbs named in STEPS one after another,
each in its own process with its output in OUT/<step>.log, and stops each in time to end
with a summary (OUT/session.md, printed last) rather than being cut off mid-step:

  probe      the card as found (nvidia-smi, read only) and the overlay's self-test
             (docker/runtime/selftest.py --overlay: our kernels run, values match float64)
  tests      make test-gpu but the sanitizer (JUnit XML in OUT/tests.xml), a test that hangs
             stopped after TEST_TIMEOUT_S where pytest-timeout is there (make gpu-deps); TESTS narrows
             it: "kernels" (the kernels' and the routing's checks, KERNEL_TESTS) or files of tests/gpu
  sanitizer  make test-gpu GPU_TESTS=tests/gpu/test_sanitizer.py (compute-sanitizer)
  bench      make bench SETS=... VARIANTS=... CONFIGS=... MATCH=... (the problems whose labels the regular
             expression finds, as for look-back and profile), told to start no problem that would end past the
             budget (its report then says where it stopped); its JSON report lands in OUT itself
             (the device gives back nothing deeper than OUT/a/b/file, nor more than 8 files), and
             `make bench-report` redraws the markdown and plots from it here
  look-back  make bench with VARIANTS=ours and ours-without-<path> for each kernel path
  routed     the routing table of the reports the bench step gave back in this call (make routing-table
             TABLE=OUT/routing-table.tsv, on the device: no rebuild), then make bench VARIANTS=stock,cudnn,routed
             of the same problems with DWCONV_ROUTING_TABLE set to it: the routing by the kernels just
             measured, timed in the same call (STEPS=bench,routed; the bench's VARIANTS must hold stock and ours);
             a pass where ours failed its float64 check is routed elsewhere, and the summary names it
  models     make bench-models MODELS=... CONFIGS=...: whole networks, stock against the overlay (its
             JSON report lands in OUT, as the bench's; `make bench-report` redraws models.md here)
  profile    make profile: Nsight Compute on our kernels of the bench passes SETS, CONFIGS,
             PASSES and MATCH choose (profile.md and profile.csv in OUT)
  upstream   make test-upstream (needs upstream's test/ folder: UPSTREAM_TESTS)

With DWCONV_DISABLE_KERNELS=<path>,<path> every step runs the overlay without those kernel paths: the bench
times ours and routed without them (its report records them), and the routed step's table is made for
that setting (make routing-table refuses reports measured with other paths off); session.md names them.
The tests and sanitizer steps are refused with it: the GPU tests expect every path on at start.

Needs only the standard library: it runs in the GPU machine's Python, which has no network.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import REPO_ROOT
from .errors import HarnessError

DEFAULT_BUDGET_S = 540  # the device's 10-minute command limit, less start-up and copying back
RESERVE_S = 15          # kept back from every step: stopping it, then the summary
MIN_STEP_S = 30         # a step is not started with less than this left
BENCH_REPORT_S = 30     # kept back from the bench's own limit: its markdown and plots
KILL_GRACE_S = 5        # between asking a stopped step to end and killing what is left of it
SUMMARY_LINES = 12      # of a step's output, the last lines its pattern picks go into the summary
FAILURE_TAIL_LINES = 5  # a step that did not pass: its output's last lines go into the summary too

TEST_TIMEOUT_S = 300    # one GPU test longer than this has hung (a kernel that never ends): stop the run there
SANITIZER_TESTS = "tests/gpu/test_sanitizer.py"  # compute-sanitizer, the slowest: a step of its own
# TESTS=kernels: what must pass before any number is read (the kernels against float64, autograd,
# which kernel each call reaches, the device's limits); torch.compile's and the bench's own tests,
# Inductor's compiles the slowest of them, are left for a call with time to spare.
KERNEL_TESTS = ("tests/gpu/test_depthwise2d.py", "tests/gpu/test_depthwise_autograd.py",
                "tests/gpu/test_routing.py", "tests/gpu/test_gpu_limits.py")
BENCH_SUMMARY = re.compile(r"^(wrote |given back: |stopping: |make bench: |error|implementations failed)")
# and the table's: its routes a configuration and pass, how it routes the layers held out
ROUTED_SUMMARY = re.compile(BENCH_SUMMARY.pattern + r"|^held[ -]out|^(routed as measured|time over|slower than stock)"
                            r"|^ours failed its float64 check"
                            r"|ours \d+, cuDNN \d+, upstream \d+$")
MODELS_SUMMARY = re.compile(r"^(\[\d+/\d+ |wrote |given back: |stopping: |make bench-models: |error|variants failed)")
PYTEST_SUMMARY = re.compile(r"^(=+ .*\b(passed|failed|error|errors|skipped)\b.* in [\d.]+s|FAILED |ERROR |Timeout)")

NVIDIA_SMI_QUERY = ("name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,"
                    "temperature.gpu,utilization.gpu,memory.used,memory.total")


ROUTING_TABLE_FILE = "routing-table.tsv"  # the routed step's table, in OUT
ROUTED_VARIANTS = "stock,cudnn,routed"


@dataclass(frozen=True)
class Step:
    name: str
    # run in order, each while time is left; the step fails at the first failure. A callable gives its
    # command when its turn comes (from what the steps before it left), or raises HarnessError saying why not.
    commands: list[list[str] | Callable[[], list[str]]]
    summary: re.Pattern        # the lines of its output that say how it went
    reports_under: str = ""    # a folder of OUT whose JSON reports are moved up into OUT after the step
    env: dict[str, str] = field(default_factory=dict)  # set for its commands


def session_bench_reports(out: Path) -> list[Path]:
    """The reports the bench step gave back into OUT in this call (its log's `given back:` lines)."""
    log = out / "bench.log"
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    reports = [Path(line.removeprefix("given back: ").strip()) for line in lines if line.startswith("given back: ")]
    if not reports:
        raise HarnessError("routed: the bench step gave back no report in this call to make the routing table of: "
                           "run it first (STEPS=bench,routed), with VARIANTS holding stock and ours")
    return reports


@dataclass
class Outcome:
    step: str
    status: str  # passed, failed (exit N), stopped at the budget, skipped
    seconds: float
    lines: list[str]


def can_stop_hung_tests() -> bool:
    """Whether pytest-timeout is there: in this Python, or among the wheels test-gpu installs."""
    return importlib.util.find_spec("pytest_timeout") is not None or any(
        (REPO_ROOT / ".whl").glob("pytest_timeout-*.whl"))


def gpu_test_targets(text: str) -> str:
    """The tests step's GPU_TESTS from TESTS: every GPU test but the sanitizer's (empty), KERNEL_TESTS
    ("kernels"), or the files of tests/gpu named (space- or comma-separated); a name that is not
    such a file is refused here, before a device call is spent on it."""
    words = text.replace(",", " ").split()
    if not words:
        return f"tests/gpu --ignore={SANITIZER_TESTS}"
    if words == ["kernels"]:
        return " ".join(KERNEL_TESTS)
    unknown = [w for w in words if not (w.startswith("tests/gpu/test_") and (REPO_ROOT / w.split("::")[0]).is_file())]
    if unknown:
        raise HarnessError(f"gpu-session: TESTS names {unknown}, which are not test files of tests/gpu; TESTS takes "
                           f"'kernels' ({', '.join(KERNEL_TESTS)}) or tests/gpu/test_*.py files")
    return " ".join(words)


def chosen_problems(sets: str, configs: str, match: str) -> list:
    """The bench problems SETS, CONFIGS and MATCH choose, as a bench step of the session runs them; a
    ValueError names an unknown set or configuration, or a MATCH that finds none."""
    from .bench.layers import matching, problems
    from .bench.schema import comma_separated, parse_configs
    return matching(problems(comma_separated(sets) or None, parse_configs(configs)), match)


def check_problem_choice(sets: str, configs: str, match: str, passes: str | None = None) -> None:
    """Refuses, before any step runs, a choice of bench problems that names none: unknown sets or
    configurations, or a MATCH (which bench, look-back and profile all take from the environment)
    that is no regular expression or finds no problem of them; with `passes` (a profile step's
    PASSES, empty for its default), also one that finds no problem with such a pass."""
    from .bench.profile import DEFAULT_PASSES, targets
    from .bench.schema import comma_separated, parse_configs
    try:
        chosen_problems(sets, configs, match)
        if passes is not None:
            targets(comma_separated(sets) or None, comma_separated(passes or DEFAULT_PASSES), match,
                    parse_configs(configs))
    except (ValueError, HarnessError) as err:
        raise HarnessError(f"gpu-session: {str(err).removeprefix('profile: ')}") from None


def steps(out: Path, python: str, make: str, sets: str, variants: str,
          stop_hung_tests: bool = True, configs: str = "", models: str = "", tests: str = "") -> dict[str, Step]:
    make_vars = ["--no-print-directory", f"GPU_PYTHON={python}"]
    problem_vars = [f"SETS={sets}", f"CONFIGS={configs}"]
    return {
        "probe": Step("probe", [
            ["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv"],
            ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
            [python, "docker/runtime/selftest.py", "--overlay"],
        ], re.compile(r"^(GPU:|torch |patch set|conv backend|routing|selftest:|name, |NVIDIA |pid, |\d+, )")),
        "tests": Step("tests", [
            [make, "test-gpu", *make_vars, f"GPU_TESTS={gpu_test_targets(tests)}",
             f"PYTEST_ARGS=--junitxml={out / 'tests.xml'}" + (
                 f" --timeout={TEST_TIMEOUT_S} --timeout-method=thread" if stop_hung_tests else "")],
        ], PYTEST_SUMMARY),
        "sanitizer": Step("sanitizer", [
            [make, "test-gpu", *make_vars, f"GPU_TESTS={SANITIZER_TESTS}", f"PYTEST_ARGS=--junitxml={out / 'sanitizer.xml'}"],
        ], PYTEST_SUMMARY),
        "bench": Step("bench", [
            [make, "bench", *make_vars, f"RESULTS={out / 'results'}", *problem_vars, f"VARIANTS={variants}"],
        ], BENCH_SUMMARY, reports_under="results"),
        "look-back": Step("look-back", [
            [make, "bench", *make_vars, f"RESULTS={out / 'results'}", *problem_vars, "VARIANTS=look-back"],
        ], BENCH_SUMMARY, reports_under="results"),
        "routed": Step("routed", [
            lambda: [python, "-m", "build_scripts", "routing-table", "--table", str(out / ROUTING_TABLE_FILE),
                     "--avoid-failed-ours", *map(str, session_bench_reports(out))],
            [make, "bench", *make_vars, f"RESULTS={out / 'results'}", *problem_vars, f"VARIANTS={ROUTED_VARIANTS}"],
        ], ROUTED_SUMMARY, reports_under="results", env={"DWCONV_ROUTING_TABLE": str(out / ROUTING_TABLE_FILE)}),
        "models": Step("models", [
            [make, "bench-models", *make_vars, f"RESULTS={out / 'results'}", f"MODELS={models}", f"CONFIGS={configs}"],
        ], MODELS_SUMMARY, reports_under="results"),
        "profile": Step("profile", [
            [make, "profile", *make_vars, f"OUT={out}", *problem_vars],
        ], re.compile(r"^(\[\d+/\d+\] |wrote |error|stopping)")),
        "upstream": Step("upstream", [
            [make, "test-upstream", *make_vars, f"UPSTREAM_OUT={out / 'upstream'}"],
        ], re.compile(r"(new failure|passed|failed|wrote )")),
    }


def _tee(stream, log, echo) -> None:
    for line in iter(stream.readline, ""):
        log.write(line)
        log.flush()
        echo.write(line)
        echo.flush()


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        pass


def run_command(command: list[str], log, seconds: float, env: dict[str, str]) -> int | None:
    """Run command with its output into log and stdout; its exit status, or None if it was stopped
    (with its whole process group) after seconds."""
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    try:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace", start_new_session=True)
    except FileNotFoundError:
        log.write(f"{command[0]}: not found\n")
        print(f"{command[0]}: not found", flush=True)
        return 127
    reader = threading.Thread(target=_tee, args=(process.stdout, log, sys.stdout), daemon=True)
    reader.start()
    try:
        status = process.wait(timeout=max(seconds, 0))
    except subprocess.TimeoutExpired:
        _stop_group(process)
        status = None
    except BaseException:  # this process told to stop (stop_steps_on_sigterm): its step's group goes with it
        _stop_group(process)
        raise
    reader.join(timeout=5)
    return status


def _stop_group(process: subprocess.Popen) -> None:
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(process.pid, signal.SIGKILL)  # what is left of the group: a process stuck in the driver
    process.wait()


def stop_steps_on_sigterm() -> None:
    """SIGTERM (a caller that stops this run: `make gpu-plan` past a leg's budget) ends it as an
    exception, so that the step running then, in a process group of its own, is stopped with it
    rather than left running into what comes next."""
    def stop(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, stop)


def refuse_bad_choice(names: list[str], sets: str, configs: str, match: str, passes: str) -> None:
    """What main refuses before any step runs, given the step names and the problem choice."""
    if "routed" in names and "bench" not in names[:names.index("routed")]:
        raise HarnessError("gpu-session: the routed step routes by the table of this call's bench: name bench "
                           "before it (STEPS=bench,routed)")
    if {"bench", "look-back", "routed", "profile"} & set(names):
        check_problem_choice(sets, configs, match, passes if "profile" in names else None)


# The GPU tests expect every kernel path on at start, and switch paths off themselves (TESTS=kernels runs each
# path's passes with it off): under DWCONV_DISABLE_KERNELS they would fail where a call reaches another kernel.
STEPS_WITH_EVERY_PATH_ON = ("tests", "sanitizer")


def session_paths_off(text: str) -> list[str]:
    """DWCONV_DISABLE_KERNELS, which every step inherits (the overlay reads it at start): the kernel paths
    named, refused before any step runs where one is no kernel path."""
    from .bench.schema import kernel_paths_off
    from .plan_report import kernel_path_names
    try:
        return kernel_paths_off(text, kernel_path_names())
    except ValueError as err:
        raise HarnessError(f"gpu-session: {err}") from None


def refuse_steps_without_paths(paths_off: list[str], names: list[str], variants: str | None = None) -> None:
    """Refuses, before any step runs, kernel paths off with one of the GPU tests' steps, or with a bench step
    whose VARIANTS (variants, where given) would time one of them again."""
    from .bench.schema import parse_variants
    from .plan_report import kernel_path_names
    if variants is not None and "bench" in names:
        try:
            parse_variants(variants, kernel_path_names(), paths_off)
        except ValueError as err:
            raise HarnessError(f"gpu-session: {err}") from None
    tests = [name for name in names if name in STEPS_WITH_EVERY_PATH_ON]
    if paths_off and tests:
        raise HarnessError(f"gpu-session: DWCONV_DISABLE_KERNELS={','.join(paths_off)} with the {' and '.join(tests)} "
                           f"step{'s' * (len(tests) > 1)}: the GPU tests expect every kernel path on and switch paths off themselves "
                           "(TESTS=kernels runs each path's passes with it off); run them in a session without it")


def collect_reports(out: Path, folder: str) -> list[Path]:
    """Move the JSON reports under OUT/folder (results/<device>/<date>/) up into OUT, where the
    device gives them back; what else is there (markdown, plots) is dropped with the folder."""
    moved = []
    root = out / folder
    for report in sorted(root.rglob("*.json")) if root.is_dir() else []:
        target = out / report.name
        report.replace(target)
        moved.append(target)
    shutil.rmtree(root, ignore_errors=True)
    return moved


def run_step(step: Step, out: Path, deadline: float, env: dict[str, str]) -> Outcome:
    started = time.monotonic()
    log_path = out / f"{step.name}.log"
    print(f"\n=== {step.name} ({deadline - started:.0f} s left) ===", flush=True)
    status = "passed"
    with log_path.open("w") as log:
        for command in step.commands:
            seconds = deadline - time.monotonic() - RESERVE_S
            if seconds < MIN_STEP_S:
                status = "stopped at the budget" if command is not step.commands[0] else "skipped"
                break
            try:
                argv = command() if callable(command) else command
            except HarnessError as err:
                log.write(f"error: {err}\n")
                status = "failed (no command)"
                break
            step_env = dict(env, **step.env, BENCH_STOP_AFTER=str(int(max(seconds - BENCH_REPORT_S, 1))))
            code = run_command(argv, log, seconds, step_env)
            if code is None:
                status = "stopped at the budget"
                break
            if code != 0:
                status = f"failed (exit {code})"
                break
        if step.reports_under:
            for report in collect_reports(out, step.reports_under):
                log.write(f"given back: {report}\n")
    text = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    kept = {i for i, line in enumerate(text) if step.summary.search(line)}
    kept = set(sorted(kept)[-SUMMARY_LINES:])
    if status != "passed":  # and where it ended
        kept |= set(range(max(len(text) - FAILURE_TAIL_LINES, 0), len(text)))
    return Outcome(step.name, status, time.monotonic() - started, [text[i] for i in sorted(kept)])


def summary_markdown(outcomes: list[Outcome], budget_s: float, context: str) -> str:
    lines = [f"# GPU session: {context}", "", f"Budget {budget_s:.0f} s; logs: <step>.log beside this file.", "",
             "| step | status | seconds |", "| --- | --- | ---: |"]
    lines += [f"| {o.step} | {o.status} | {o.seconds:.0f} |" for o in outcomes]
    for o in outcomes:
        if o.lines:
            lines += ["", f"## {o.step}", "", "```", *o.lines, "```"]
    return "\n".join(lines) + "\n"


def run_session(names: list[str], out: Path, budget_s: float, available: dict[str, Step],
                env: dict[str, str] | None = None, context: str = "") -> list[Outcome]:
    unknown = [n for n in names if n not in available]
    if unknown or not names:
        raise HarnessError(f"gpu-session: unknown step(s) {unknown or names}; STEPS takes a comma-separated list "
                           f"of {', '.join(available)}")
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + budget_s
    outcomes = []
    for name in names:
        if deadline - time.monotonic() - RESERVE_S < MIN_STEP_S:
            outcomes.append(Outcome(name, "skipped", 0.0, []))
            continue
        outcomes.append(run_step(available[name], out, deadline, dict(os.environ if env is None else env)))
    summary = summary_markdown(outcomes, budget_s, context or " ".join(names))
    (out / "session.md").write_text(summary)
    print("\n" + summary, flush=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts.gpu_session", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default=os.environ.get("STEPS") or "probe,tests")
    parser.add_argument("--out", default=os.environ.get("OUT") or "")
    parser.add_argument("--budget", type=float, default=float(os.environ.get("BUDGET") or DEFAULT_BUDGET_S))
    parser.add_argument("--sets", default=os.environ.get("SETS", ""))
    parser.add_argument("--variants", default=os.environ.get("VARIANTS", ""))
    parser.add_argument("--configs", default=os.environ.get("CONFIGS", ""))
    parser.add_argument("--models", default=os.environ.get("MODELS", ""))
    parser.add_argument("--tests", default=os.environ.get("TESTS", ""))
    args = parser.parse_args(argv)
    try:
        if not args.out:
            raise HarnessError("gpu-session: say where the logs and results go: OUT=<folder> (on the device: $OUT)")
        out = Path(args.out).resolve()
        available = steps(out, sys.executable, os.environ.get("MAKE", "make"), args.sets, args.variants,
                          stop_hung_tests=can_stop_hung_tests(), configs=args.configs, models=args.models,
                          tests=args.tests)
        names = [n.strip() for n in args.steps.split(",") if n.strip()]
        refuse_bad_choice(names, args.sets, args.configs, os.environ.get("MATCH", ""), os.environ.get("PASSES", ""))
        paths_off = session_paths_off(os.environ.get("DWCONV_DISABLE_KERNELS", ""))
        refuse_steps_without_paths(paths_off, names, args.variants)
        stop_steps_on_sigterm()
        outcomes = run_session(names, out, args.budget, available, context=args.steps + (
            f" (kernel paths off, DWCONV_DISABLE_KERNELS: {', '.join(paths_off)})" if paths_off else ""))
    except HarnessError as err:
        print(err, file=sys.stderr)
        return 2
    return 0 if all(o.status == "passed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
