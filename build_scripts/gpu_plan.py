"""`make gpu-plan`: several `make gpu-session` runs in one device call, sized before the machine starts.

A lent GPU comes for 15 minutes a session, and the machine's idle time between calls counts, so the
work queued for it goes in as few calls as will hold it. A plan file names that work, one leg a line:

    # a comment line
    bf16-look-back: STEPS=bench,routed SETS=ConvNeXt-T CONFIGS=bfloat16/channels_last BUDGET=150
        VARIANTS=stock,cudnn,ours
    (an indented line goes on the leg above)

each leg being the make variables of one `make gpu-session` (BUDGET: its most seconds;
DWCONV_DISABLE_KERNELS=<path>,<path>: the kernel paths its every step runs without, a leg to time ours and
route by it where a path proved wrong; a leg without it runs every path, whatever the call's setting). Two verbs:

  estimate (here)   each leg's seconds from what the results folder's reports recorded (bench/sizing.py
                    for the bench, look-back and routed steps; the slowest recorded run of the other
                    steps), beside its BUDGET and the call's
  run (the device)  the legs in order (LEGS=a,b: those alone), each a gpu-session in a folder of its own outside OUT with the
                    smaller of its BUDGET and what the call has left; after each, OUT/plan.md (each leg's
                    status and seconds, then its session.md) and OUT/legs.tar.gz (every leg's folder:
                    logs, reports, routing tables) are written anew: the device gives back at most
                    8 files, and a call cut off still leaves the legs it finished

Both refuse, before anything runs, a plan with a leg the harness would refuse (leg_problems). The run
needs only what gpu-session needs: the standard library, and the bench's layer lists to check names.
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError
from .gpu_session import (DEFAULT_BUDGET_S, MIN_STEP_S, chosen_problems, gpu_test_targets, refuse_bad_choice,
                          refuse_steps_without_paths, run_command, session_paths_off, steps)

KNOWN_SETTINGS = {"STEPS", "SETS", "CONFIGS", "VARIANTS", "MATCH", "PASSES", "BUDGET", "MODELS", "TESTS",
                  "CUDNN_BENCHMARK", "LAUNCHES", "REPEATS", "DWCONV_OVERLAY_DIR", "DWCONV_DISABLE_KERNELS"}
LEG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a folder name the device gives back
RESERVE_S = 20       # kept back from the call: the last leg's summary and packing
# Past a leg's budget before it is killed (gpu-session stops its own steps in time, so only a leg gone
# wrong takes it): it comes out of the margin between the call's BUDGET (540) and the device's 600 s.
STOP_GRACE_S = 30
# The slowest run recorded of each step the bench sizing does not cover (results/*/session-*.md,
# 2026-11-22 and 11-27): TESTS=kernels and the whole of tests/gpu then, the sanitizer's subset.
STEP_SECONDS = {"probe": 16, "tests": 117, "sanitizer": 49}
ROUTING_TABLE_S = 10  # the routed step's table (and the held-out check where g++ is) before its bench


@dataclass(frozen=True)
class Leg:
    name: str
    settings: dict[str, str]

    @property
    def budget_s(self) -> float:
        return float(self.settings.get("BUDGET") or DEFAULT_BUDGET_S)

    def make_variables(self) -> list[str]:
        """Its settings but BUDGET as make's command line takes them: a `$` doubled, which make would
        expand (MATCH="contiguous$" would reach the bench as "contiguous")."""
        return [f"{key}={value.replace('$', '$$')}" for key, value in self.settings.items() if key != "BUDGET"]


def parse_plan(text: str) -> list[Leg]:
    """The legs of a plan file; a malformed line is refused with its number. Quotes as in a shell, a
    line at a time; a line whose first character past any indent is # is a comment (a # elsewhere is
    part of a value)."""
    entries: list[tuple[int, str, list[str]]] = []  # line, leg name, its words
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace():
            if not entries:
                raise HarnessError(f"gpu-plan: line {number}: an indented line with no leg above it")
            entries[-1][2].extend(_words(line, number))
            continue
        name, colon, rest = line.partition(":")
        if not colon or not LEG_NAME.match(name.strip()):
            raise HarnessError(f"gpu-plan: line {number}: expected '<name>: STEPS=... ' (a name of letters, digits, "
                               f"'.', '_' and '-'), got {line.strip()!r}")
        entries.append((number, name.strip(), _words(rest, number)))
    legs = []
    for number, name, words in entries:
        settings = {}
        for word in words:
            key, equals, value = word.partition("=")
            if not equals:
                raise HarnessError(f"gpu-plan: line {number}: {word!r} is no KEY=value")
            settings[key] = value
        if "STEPS" not in settings:
            raise HarnessError(f"gpu-plan: line {number}: leg {name!r} names no STEPS")
        legs.append(Leg(name, settings))
    names = [leg.name for leg in legs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated or not legs:
        raise HarnessError(f"gpu-plan: {'legs named twice: ' + ', '.join(repeated) if repeated else 'no leg in the plan'}")
    return legs


def _words(text: str, number: int) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as err:
        raise HarnessError(f"gpu-plan: line {number}: {err}") from None


def leg_problems(settings: dict[str, str]) -> list[str]:
    """What `make gpu-session` would refuse in a leg (or a planned call): unknown settings, steps, sets,
    configurations, variants, models or tests, or a MATCH that picks no bench problem."""
    from . import plan_report
    from .bench.layers import problems
    from .bench.schema import parse_configs, parse_models, parse_variants
    found = [f"unknown setting {key}" for key in settings.keys() - KNOWN_SETTINGS]
    step_names = steps(Path("out"), "python3", "make", "", "")
    named = settings.get("STEPS", "").split(",")
    found += [f"unknown step {name!r}" for name in named if name not in step_names]
    if "BUDGET" in settings and not re.fullmatch(r"\d+(\.\d+)?", settings["BUDGET"]):
        found.append(f"BUDGET={settings['BUDGET']!r} is no number of seconds")
    if "REPEATS" in settings and not re.fullmatch(r"[1-9]\d*", settings["REPEATS"]):
        found.append(f"REPEATS={settings['REPEATS']!r} is no count of runs")
    found += [f"{key}={value!r}: make would drop its leading spaces (MATCH searches the rest)"
              for key, value in settings.items() if value != value.lstrip()]
    sets = [name for name in settings.get("SETS", "").split(",") if name] or None
    chosen = True  # whether SETS and CONFIGS name problems, for MATCH to choose among
    configs = None
    try:
        configs = parse_configs(settings.get("CONFIGS", ""))
    except ValueError as err:
        found.append(str(err))
        chosen = False
    try:
        problems(sets, configs)
    except ValueError as err:
        found.append(str(err))
        sets, chosen = None, False
    paths = plan_report.kernel_path_names()
    paths_off: list[str] = []
    try:
        paths_off = session_paths_off(settings.get("DWCONV_DISABLE_KERNELS", ""))
        refuse_steps_without_paths(paths_off, named)  # the variants are checked below, with the rest
    except HarnessError as err:
        found.append(str(err))
    for check in (lambda: parse_variants(settings.get("VARIANTS", ""), paths, paths_off),
                  lambda: parse_models(settings.get("MODELS", ""))):
        try:
            check()
        except ValueError as err:
            found.append(str(err))
    try:
        gpu_test_targets(settings.get("TESTS", ""))
    except HarnessError as err:
        found.append(str(err))
    if chosen:
        try:
            refuse_bad_choice(named, settings.get("SETS", ""), settings.get("CONFIGS", ""), settings.get("MATCH", ""),
                              settings.get("PASSES", ""))
        except HarnessError as err:
            found.append(str(err))
    return found


def chosen_legs(legs: list[Leg], names: str) -> list[Leg]:
    """The legs LEGS=a,b names, in the plan's order (all of them where it is empty)."""
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in {leg.name for leg in legs}]
    if unknown:
        raise HarnessError(f"gpu-plan: LEGS names no leg of the plan: {', '.join(unknown)}; its legs are "
                           f"{', '.join(leg.name for leg in legs)}")
    return [leg for leg in legs if not wanted or leg.name in wanted]


def refuse_bad_legs(legs: list[Leg]) -> None:
    found = [f"{leg.name}: {problem}" for leg in legs for problem in leg_problems(leg.settings)]
    if found:
        raise HarnessError("gpu-plan: the plan has legs gpu-session would refuse; nothing was run:\n  "
                           + "\n  ".join(found))


# --- estimate (here) ---

@dataclass(frozen=True)
class Command:
    """One command of a step as gpu-session runs it, with its estimated seconds (None: no estimate)."""
    step: str
    seconds: float | None
    bench: bool  # told to stop BENCH_REPORT_S before its time is up, as the bench, look-back and routed are
    text: str


def leg_commands(leg: Leg, history) -> list[Command]:
    """The commands gpu-session will run for the leg, each with its estimate: the bench, look-back and
    routed steps' from the records (bench/sizing.py), the probe's, tests' and sanitizer's the slowest
    recorded, the others none (the leg's BUDGET is all that can be said of them)."""
    from .bench.sizing import estimate
    settings = leg.settings
    chosen = chosen_problems(settings.get("SETS", ""), settings.get("CONFIGS", ""), settings.get("MATCH", ""))
    repeats = int(settings.get("REPEATS") or 30)
    launches = settings.get("LAUNCHES", "") not in ("", "0")  # in the environment of every bench the leg runs
    commands = []
    timed = bench_step_variants(settings)
    for step in settings["STEPS"].split(","):
        if step in timed:
            if step == "routed":
                commands.append(Command(step, ROUTING_TABLE_S, False, "the routing table"))
            found = estimate(chosen, timed[step], history, repeats=repeats, launches=launches)
            commands.append(Command(step, found.seconds, True, found.text()))
        elif step in STEP_SECONDS:
            commands.append(Command(step, STEP_SECONDS[step], False, f"{STEP_SECONDS[step]} s, its slowest recorded run"))
        else:
            commands.append(Command(step, None, False, "no estimate: nothing recorded"))
    return commands


def bench_step_variants(settings: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """The variants each of the leg's bench steps (bench, look-back, routed) times, as gpu-session runs them:
    look-back leaves out the paths the leg's DWCONV_DISABLE_KERNELS has off."""
    from . import plan_report
    from .bench.schema import LOOK_BACK, kernel_paths_off, parse_variants
    from .gpu_session import ROUTED_VARIANTS
    paths = plan_report.kernel_path_names()
    paths_off = kernel_paths_off(settings.get("DWCONV_DISABLE_KERNELS", ""), paths)
    named = {"bench": settings.get("VARIANTS", ""), "look-back": LOOK_BACK, "routed": ROUTED_VARIANTS}
    return {step: parse_variants(named[step], paths, paths_off) for step in settings["STEPS"].split(",")
            if step in named}


def leg_bench_rows(settings: dict[str, str]) -> set[tuple]:
    """The rows (schema.row_key) a bench step of the leg times: its SETS, CONFIGS and MATCH's problems, each
    pass of each."""
    from .bench.schema import problem_row_key
    chosen = chosen_problems(settings.get("SETS", ""), settings.get("CONFIGS", ""), settings.get("MATCH", ""))
    return {problem_row_key(problem, passname) for problem in chosen for passname in problem.passes}


def leg_predictions(leg: Leg, predictions) -> list:
    """The predictions (bench/predictions.py) the leg's bench steps time on one of their rows or more, as
    bench.md grades them; none in a leg with kernel paths off, whose ours is not the kernels predicted for."""
    from . import plan_report
    from .bench.schema import kernel_paths_off
    if kernel_paths_off(leg.settings.get("DWCONV_DISABLE_KERNELS", ""), plan_report.kernel_path_names()):
        return []
    timed = bench_step_variants(leg.settings)
    if not timed:
        return []
    rows = leg_bench_rows(leg.settings)
    return [p for p in predictions if any(set(p.variants) <= set(variants) for variants in timed.values())
            and rows.intersection(p.rows)]


def simulate_leg(commands: list[Command], budget_s: float) -> tuple[float, list[str], bool]:
    """(seconds, a line a command, whether every command ends in time) for the leg under gpu-session's
    rules: a command starts only with MIN_STEP_S left past the RESERVE_S kept for the summary, a
    bench stops starting problems BENCH_REPORT_S before its time is up, and no command runs past it."""
    from .gpu_session import BENCH_REPORT_S
    from .gpu_session import RESERVE_S as SESSION_RESERVE_S
    elapsed, lines, whole = 0.0, [], True
    for command in commands:
        left = budget_s - elapsed - SESSION_RESERVE_S
        if left < MIN_STEP_S:
            lines.append(f"{command.step}: skipped, {left:.0f} s left")
            whole = False
            continue
        limit = left - BENCH_REPORT_S if command.bench else left
        if command.seconds is None:
            lines.append(f"{command.step}: {command.text}, counted at the {left:.0f} s left")
            elapsed += left
            continue
        if command.seconds > limit:
            lines.append(f"{command.step}: {command.text}: **cut** at about {limit:.0f} s")
            whole = False
            elapsed += limit + (BENCH_REPORT_S if command.bench else 0)
        else:
            lines.append(f"{command.step}: {command.text}")
            elapsed += command.seconds
    return elapsed, lines, whole


def estimate_text(legs: list[Leg], budget_s: float, history, predictions=()) -> str:
    """Each leg as `run` would give it time (the smaller of its BUDGET and what the call has left), and
    its steps as gpu-session would run them in that time: estimated seconds, and what would be cut; and
    the versions whose predictions (bench/predictions.py) its bench steps time."""
    rows, elapsed, whole = [], 0.0, True
    for leg in legs:
        left = budget_s - elapsed - RESERVE_S
        graded = ", ".join(dict.fromkeys(p.version for p in leg_predictions(leg, predictions))) or "–"
        if left < MIN_STEP_S * 2:
            rows.append(f"| {leg.name} | – | {leg.budget_s:.0f} | **skipped**: {left:.0f} s left of the call | {graded} |")
            whole = False
            continue
        given = min(leg.budget_s, left)
        seconds, lines, leg_whole = simulate_leg(leg_commands(leg, history), given)
        whole &= leg_whole
        elapsed += seconds
        budget = f"{leg.budget_s:.0f}" + (f" (given {given:.0f})" if given < leg.budget_s else "")
        rows.append(f"| {leg.name} | {seconds:.0f} | {budget} | {'; '.join(lines)} | {graded} |")
    verdict = "fits" if whole else "does not fit: what is marked cut or skipped would be lost"
    return "\n".join([
        "| leg | estimate, s | BUDGET, s | steps | predictions graded |", "| --- | ---: | ---: | --- | --- |", *rows, "",
        f"The legs take about {elapsed:.0f} s of the call's {budget_s:.0f} s: it {verdict}. The machine's start "
        "(45-90 s) and the idle time between calls come on top, out of the session's device time."])


# --- run (the device) ---

@dataclass
class LegOutcome:
    name: str
    status: str
    seconds: float


STEP_ROW = re.compile(r"^\| (\S+) \| (.+?) \| \d+ \|$", re.MULTILINE)


def leg_status(code: int | None, folder: Path) -> str:
    """What became of a leg: make's exit status alone cannot tell a step that failed from a refusal
    (make exits 2 for both), so the leg's session.md says which of its steps did not pass."""
    if code is None:
        return "stopped (past its budget)"
    summary = folder / "session.md"
    if code == 0:
        return "passed"
    if not summary.is_file():
        return f"refused or failed before any step (exit {code}; leg.log says why)"
    failed = [f"{step} {status}" for step, status in STEP_ROW.findall(summary.read_text()) if status != "passed"]
    return "not passed: " + (", ".join(failed) or f"exit {code}")


def leg_environment() -> dict[str, str]:
    """The call's environment less what would reach a leg beside its own line: the settings a leg
    names (but the overlay's folder, which holds for the whole call) and the make variables given to
    `make gpu-plan` itself, which make passes down in MAKEFLAGS."""
    dropped = (KNOWN_SETTINGS - {"DWCONV_OVERLAY_DIR"}) | {"OUT", "PLAN", "LEGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    return {key: value for key, value in os.environ.items() if key not in dropped}


def run_leg(leg: Leg, folder: Path, budget_s: float, make: str) -> str:
    command = [make, "--no-print-directory", "gpu-session", f"OUT={folder}", f"BUDGET={int(budget_s)}",
               *leg.make_variables()]
    print(f"\n##### leg {leg.name} ({int(budget_s)} s): {shlex.join(command)}", flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "leg.log").open("w") as log:
        code = run_command(command, log, budget_s + STOP_GRACE_S, leg_environment())
    return leg_status(code, folder)


UNKNOWN_DEVICE = "unknown (nvidia-smi said nothing)"


def card_name(nvidia_smi: str = "nvidia-smi") -> str | None:
    """The GPU's name as nvidia-smi gives it (the first card), or None where it cannot say."""
    try:
        found = subprocess.run([nvidia_smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = found.stdout.split("\n") if found.returncode == 0 else [""]
    return names[0].strip() or None


@dataclass(frozen=True)
class CallHeader:
    """What plan.md says of the call before its legs, for `make gpu-plan-import` to file it by: the
    command, the card and when it started (UTC)."""
    command: str
    device: str | None
    started: str  # ISO 8601, seconds, ending in Z

    def lines(self) -> list[str]:
        return [f"Command: `{self.command}`", f"Device: {self.device or UNKNOWN_DEVICE}", f"Started: {self.started}"]


def plan_markdown(outcomes: list[LegOutcome], legs: list[Leg], work: Path, budget_s: float, header: CallHeader) -> str:
    settings = {leg.name: shlex.join(f"{key}={value}" for key, value in leg.settings.items()) for leg in legs}
    lines = ["# GPU plan", "", *header.lines(), "",
             f"Budget {budget_s:.0f} s; every leg's folder is in legs.tar.gz.", "",
             "| leg | status | seconds | variables |", "| --- | --- | ---: | --- |"]
    lines += [f"| {o.name} | {o.status} | {o.seconds:.0f} | `{settings[o.name]}` |" for o in outcomes]
    for o in outcomes:
        summary = work / o.name / "session.md"
        if summary.is_file():
            lines += ["", f"## {o.name}", "", summary.read_text().replace("# GPU session:", "### GPU session:")]
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, write) -> None:
    partial = path.with_name(path.name + ".partial")
    write(partial)
    partial.replace(path)


ARCHIVE_LIMIT = 15 << 20  # the device gives back no file over 16 MiB
BULKY_LOG = 1 << 20       # past the limit, logs and XML this large stay out (named in left-out.txt)


def pack(work: Path, names: list[str], target: Path) -> None:
    """The legs' folders into one archive; were it too large to come back, again without the bulky logs
    (a flood of sanitizer output must not cost the reports)."""
    files = [path for name in names if (work / name).exists()
             for path in sorted([work / name, *(work / name).rglob("*")]) if path.is_file()]

    def write(partial: Path, left_out: list[Path]) -> None:
        with tarfile.open(partial, "w:gz") as archive:
            for path in files:
                if path not in left_out:
                    archive.add(path, arcname=str(path.relative_to(work)), recursive=False)
            if left_out:
                note = "".join(f"{path.relative_to(work)}: {path.stat().st_size} bytes\n" for path in left_out).encode()
                member = tarfile.TarInfo("left-out.txt")
                member.size = len(note)
                archive.addfile(member, io.BytesIO(note))

    write_atomically(target, lambda partial: write(partial, []))
    if target.stat().st_size > ARCHIVE_LIMIT:
        bulky = [path for path in files if path.suffix in (".log", ".xml") and path.stat().st_size > BULKY_LOG]
        write_atomically(target, lambda partial: write(partial, bulky))


def run_plan(legs: list[Leg], out: Path, budget_s: float, make: str = "make", command: str = "") -> list[LegOutcome]:
    deadline = time.monotonic() + budget_s
    header = CallHeader(command or f"make gpu-plan LEGS={','.join(leg.name for leg in legs)} BUDGET={budget_s:.0f}",
                        card_name(), datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-plan-"))
    outcomes: list[LegOutcome] = []
    for leg in legs:
        left = deadline - time.monotonic() - RESERVE_S
        if left < MIN_STEP_S * 2:
            outcomes.append(LegOutcome(leg.name, "skipped (the call's budget is spent)", 0.0))
        else:
            started = time.monotonic()
            status = run_leg(leg, work / leg.name, min(leg.budget_s, left), make)
            outcomes.append(LegOutcome(leg.name, status, time.monotonic() - started))
        text = plan_markdown(outcomes, legs, work, budget_s, header)
        write_atomically(out / "plan.md", lambda partial: partial.write_text(text))
        pack(work, [o.name for o in outcomes], out / "legs.tar.gz")
    shutil.rmtree(work, ignore_errors=True)  # legs.tar.gz holds it
    print("\n" + (out / "plan.md").read_text(), flush=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts.gpu_plan", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verb", choices=("estimate", "run"))
    parser.add_argument("--plan", default=os.environ.get("PLAN", ""))
    parser.add_argument("--legs", default=os.environ.get("LEGS", ""), help="the legs to run, a,b (default: all)")
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    parser.add_argument("--budget", type=float, default=float(os.environ.get("BUDGET") or DEFAULT_BUDGET_S))
    parser.add_argument("--results", default=str(REPO_ROOT / "results"), help="estimate: the reports to size by")
    args = parser.parse_args(argv)
    try:
        if not args.plan:
            raise HarnessError("gpu-plan: name the plan file: PLAN=<file> (notes/next-gpu-session.plan)")
        try:
            legs = chosen_legs(parse_plan(Path(args.plan).read_text()), args.legs)
        except OSError as err:
            raise HarnessError(f"gpu-plan: cannot read the plan {args.plan}: {err.strerror}") from None
        refuse_bad_legs(legs)
        if args.verb == "estimate":
            from .bench.sizing import History
            history = History.load(Path(args.results))
            if not history.records:
                raise HarnessError(f"gpu-plan: no bench report under {args.results} records its problems' seconds: "
                                   "nothing to size the legs by")
            from .bench.predictions import load as load_predictions
            try:
                predictions = load_predictions()
            except (ValueError, OSError) as err:
                raise HarnessError(f"gpu-plan: the predictions file: {err}") from None
            print(estimate_text(legs, args.budget, history, predictions))
            return 0
        if not args.out:
            raise HarnessError("gpu-plan: say where plan.md and legs.tar.gz go: OUT=<folder> (on the device: $OUT)")
        command = shlex.join(["make", "gpu-plan", f"PLAN={args.plan}", *([f"LEGS={args.legs}"] if args.legs else []),
                              f"BUDGET={args.budget:g}"])
        outcomes = run_plan(legs, Path(args.out).resolve(), args.budget, os.environ.get("MAKE", "make"), command)
    except HarnessError as err:
        print(err, file=sys.stderr)
        return 2
    return 0 if all(o.status == "passed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
