"""`make gpu-plan-import FROM=<folder>`: what a `make gpu-plan` device call gave back (plan.md and
legs.tar.gz, in the folder the device tool names files_at), filed under results/<device>/<date>/ with
the tables, plots and launch audits made from it:

    results/<device>/<date>/
        gpu-plan-<first leg>.md  the call's plan.md: its command, card and start, each leg's status and summary
        <leg>/                   each leg's folder as the call left it: session.md, the steps' logs, the
                                 bench's JSON reports, the routed step's routing-table.tsv
        left-out-<first leg>.txt what the call left out of its archive to bring it back (bulky logs), if anything
        bench.md, *.png          `make bench-report` over the bench reports of every leg filed in the folder,
                                 earlier calls' of the same day included, so a second call redraws them
        without-<path>+<path>/   the same for the legs that ran with kernel paths off (DWCONV_DISABLE_KERNELS)
        <leg>/models.md, *.png   a bench-models report's
        <leg>/plan-audit.md      `make plan-audit` of a report that recorded launches (LAUNCHES=1)

The card and day come from plan.md (the card nvidia-smi named, the UTC day the call started) and must
agree with the reports' own; INTO=<folder> files the call elsewhere. Nothing is filed before all of it
has been checked: an archive member outside a leg's folder or no plain file, a leg plan.md does not
list, reports of two cards, a leg or call filed already. The routing table is a source file, so it is
not rewritten here: the command that would, from the reports that timed stock and ours with every path
on, is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from . import REPO_ROOT
from .bench.schema import MODELS_SCHEMA, SCHEMA, paths_off_of, slug
from .errors import HarnessError
from .gpu_plan import LEG_NAME, UNKNOWN_DEVICE

PLAN_NAME = "plan.md"
ARCHIVE_NAME = "legs.tar.gz"
LEFT_OUT_NAME = "left-out.txt"
CALL_PREFIX = "gpu-plan-"
LEG_ROW = re.compile(r"^\| (?P<name>\S+) \| (?P<status>.+?) \| \d+ \| `.*` \|$", re.MULTILINE)
HEADER_LINE = re.compile(r"^(Command|Device|Started): (.+)$", re.MULTILINE)
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Call:
    """A call's plan.md: its legs and their statuses, in order, and the card and day it names."""
    text: str
    legs: dict[str, str]
    device: str | None
    day: str | None
    started: str

    @property
    def record_name(self) -> str:
        return f"{CALL_PREFIX}{next(iter(self.legs))}.md"

    @property
    def left_out_name(self) -> str:
        return f"left-out-{next(iter(self.legs))}.txt"


def read_call(text: str, source: str) -> Call:
    table = text.find("\n| leg | status |")
    if not text.startswith("# GPU plan") or table < 0:
        raise HarnessError(f"gpu-plan-import: {source} is no plan.md of `make gpu-plan` (no '# GPU plan' and its "
                           "table of legs)")
    legs = {m["name"]: m["status"] for m in LEG_ROW.finditer(text, table)}
    bad = [name for name in legs if not LEG_NAME.match(name)]
    if not legs or bad:
        raise HarnessError(f"gpu-plan-import: {source}: " + (f"legs named as no plan names them: {', '.join(bad)}"
                                                              if bad else "its table lists no leg"))
    header = dict(HEADER_LINE.findall(text[:table]))
    device = header.get("Device")
    day = DAY.match(header.get("Started", ""))
    return Call(text, legs, None if device in (None, UNKNOWN_DEVICE) else device, day and day.group(0),
                header.get("Started", ""))


def archive_members(archive: tarfile.TarFile, call: Call, source: str) -> list[tarfile.TarInfo]:
    """The archive's files, each refused unless it is a plain file in the folder of a leg plan.md lists
    (or the call's note of what it left out)."""
    members = archive.getmembers()
    wrong = []
    for member in members:
        parts = PurePosixPath(member.name).parts
        if not member.isfile():
            wrong.append(f"{member.name} (no plain file)")
        elif member.name == LEFT_OUT_NAME:
            continue
        elif PurePosixPath(member.name).is_absolute() or ".." in parts or len(parts) < 2 or parts[0] not in call.legs:
            wrong.append(f"{member.name} (outside the folders of the legs plan.md lists)")
    if wrong:
        raise HarnessError(f"gpu-plan-import: {source} holds what no gpu-plan call packs; nothing was filed:\n  "
                           + "\n  ".join(wrong))
    return members


def unpack(archive_path: Path, call: Call, staging: Path) -> list[str]:
    """The archive's files written under staging with their times; the legs it holds, in plan.md's order."""
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            for member in archive_members(archive, call, str(archive_path)):
                target = staging / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.extractfile(member) as source, target.open("wb") as copy:
                    shutil.copyfileobj(source, copy)
                os.utime(target, (member.mtime, member.mtime))
    except (tarfile.TarError, EOFError, OSError) as err:
        raise HarnessError(f"gpu-plan-import: cannot read {archive_path}: {err}; nothing was filed") from None
    return [leg for leg in call.legs if (staging / leg).is_dir()]


def reports_in(folder: Path) -> list[tuple[Path, dict]]:
    """The bench and bench-models reports under folder, oldest first (a later report's times stand)."""
    found = []
    for path in folder.rglob("*.json"):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and report.get("schema") in (SCHEMA, MODELS_SCHEMA):
            found.append((path, report))
    return sorted(found, key=lambda found: (found[0].stat().st_mtime, str(found[0])))


def destination(call: Call, reports: list[dict], results: Path, into: Path | None) -> Path:
    cards = sorted({report["device"] for report in reports})
    if len(cards) > 1 or (call.device and cards and cards != [call.device]):
        named = f"plan.md names {call.device}, " if call.device else ""
        raise HarnessError(f"gpu-plan-import: {named}its reports come from {', '.join(cards)}: not one call's; "
                           "nothing was filed")
    if into:
        return into
    device = call.device or (cards[0] if cards else None)
    day = call.day or min((report["date"] for report in reports), default=None)
    if device is None or day is None:
        raise HarnessError("gpu-plan-import: neither plan.md nor a report says which card or day this call ran on: "
                           "say where it goes, INTO=results/<device>/<date>; nothing was filed")
    return results / slug(device) / day


def clashes(dest: Path, call: Call, legs: list[str], left_out: bool) -> list[str]:
    names = [*legs, call.record_name, *([call.left_out_name] if left_out else [])]
    found = [str(dest / name) for name in names if (dest / name).exists()]
    if (dest / "bench.md").exists() and not any(dest.glob(f"{CALL_PREFIX}*.md")):
        found.append(f"{dest / 'bench.md'} (not drawn from a filed call: its reports would be redrawn without it)")
    return found


def file_call(source: Path, results: Path, into: Path | None = None) -> tuple[Path, Call, list[str]]:
    """The call's legs and plan.md moved into their folder, all or nothing: the folder, the call and the
    legs filed."""
    plan_path, archive_path = source / PLAN_NAME, source / ARCHIVE_NAME
    missing = [str(p) for p in (plan_path, archive_path) if not p.is_file()]
    if missing:
        raise HarnessError(f"gpu-plan-import: no {' nor '.join(missing)}: FROM names the folder the device gave "
                           "`make gpu-plan`'s plan.md and legs.tar.gz back in (the run's files_at)")
    call = read_call(plan_path.read_text(errors="replace"), str(plan_path))
    results.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".gpu-plan-import-", dir=results))
    moved: list[tuple[Path, Path]] = []
    try:
        legs = unpack(archive_path, call, staging)
        left_out = (staging / LEFT_OUT_NAME).is_file()
        reports = [report for leg in legs for _, report in reports_in(staging / leg)]
        dest = destination(call, reports, results, into)
        found = clashes(dest, call, legs, left_out)
        if found:
            raise HarnessError("gpu-plan-import: filed already, or in the way; nothing was filed:\n  " + "\n  ".join(found))
        shutil.copy2(plan_path, staging / PLAN_NAME)
        dest.mkdir(parents=True, exist_ok=True)
        names = [(leg, leg) for leg in legs] + [(LEFT_OUT_NAME, call.left_out_name)] * left_out \
            + [(PLAN_NAME, call.record_name)]  # the call's record last: a folder without it is no filed call
        for staged, filed in names:  # INTO may be on another file system than results/
            shutil.move(staging / staged, dest / filed)
            moved.append((staging / staged, dest / filed))
    except BaseException as err:
        for staged, filed in reversed(moved):
            shutil.move(filed, staged)
        if isinstance(err, OSError):
            raise HarnessError(f"gpu-plan-import: cannot file the call: {err}; nothing was filed") from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest, call, legs


def filed_legs(dest: Path) -> list[str]:
    """The legs of every call filed in dest, in the order the calls started."""
    calls = [read_call(path.read_text(errors="replace"), str(path)) for path in dest.glob(f"{CALL_PREFIX}*.md")]
    return [leg for call in sorted(calls, key=lambda call: call.started) for leg in call.legs if (dest / leg).is_dir()]


def tables_folder(dest: Path, paths_off: tuple[str, ...]) -> Path:
    return dest / ("without-" + "+".join(paths_off)) if paths_off else dest


def draw_tables(dest: Path) -> tuple[list[Path], list[str]]:
    """bench.md and plots for each setting of the kernel paths among the filed legs' bench reports,
    models.md for each bench-models report, plan-audit.md for each that recorded launches: what was
    written, and what could not be made, with why."""
    from .bench.model_report import write_model_report
    from .bench.report import write_report
    plots = importlib.util.find_spec("matplotlib") is not None
    reports = [(leg, path, report) for leg in filed_legs(dest) for path, report in reports_in(dest / leg)]
    written, not_made = [], []
    groups: dict[tuple[str, ...], list[Path]] = {}
    for _, path, report in reports:
        if report["schema"] == SCHEMA:
            groups.setdefault(tuple(sorted(paths_off_of(report))), []).append(path)
    for paths_off, paths in groups.items():
        try:
            written += write_report(paths, tables_folder(dest, paths_off), with_plots=plots)
        except (ValueError, KeyError) as err:
            not_made.append(f"{tables_folder(dest, paths_off) / 'bench.md'}: {err}")
    for _, path, report in reports:
        if report["schema"] == MODELS_SCHEMA:
            written += write_model_report(path, path.parent, with_plot=plots)
    audited = [(leg, path, report) for leg, path, report in reports if report.get("settings", {}).get("launches")]
    for leg, path, report in audited:
        several = sum(1 for other, _, _ in audited if other == leg) > 1
        target = dest / leg / (f"plan-audit-{path.stem}.md" if several else "plan-audit.md")
        try:
            target.write_text(audit_markdown(report, path))
            written.append(target)
        except HarnessError as err:
            not_made.append(f"{target}: {err}")
    return written, not_made


def audit_markdown(report: dict, path: Path) -> str:
    from .plan_audit import audit, markdown
    from .plan_report import build_driver
    return markdown(audit(report, build_driver(REPO_ROOT / "build" / "plan-report")), report, relative(path))


def routing_reports(dest: Path) -> list[Path]:
    """The filed bench reports that timed stock and ours with every kernel path on: what a routing table
    can be made from."""
    return [path for leg in filed_legs(dest) for path, report in reports_in(dest / leg)
            if report["schema"] == SCHEMA and not paths_off_of(report)
            and {"stock", "ours"} <= set(report.get("settings", {}).get("variants", []))]


def relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def summary(dest: Path, call: Call, legs: list[str], written: list[Path], not_made: list[str]) -> str:
    lines = [f"filed in {relative(dest)}: {call.record_name}"]
    lines += [f"  {leg}/ ({call.legs[leg]})" for leg in legs]
    lines += [f"  (no folder came back for {leg}: {status})" for leg, status in call.legs.items() if leg not in legs]
    lines += [f"wrote {relative(path)}" for path in written]
    table_from = routing_reports(dest)
    if table_from:
        lines += ["the routing table from these measurements (it rewrites DepthwiseConvRoutingTable.h):",
                  f"  make routing-table BENCH=\"{' '.join(relative(p) for p in table_from)}\""]
    lines += [f"not made: {line}" for line in not_made]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts.plan_import", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", default=os.environ.get("FROM", ""),
                        help="the folder holding the call's plan.md and legs.tar.gz")
    parser.add_argument("--into", default=os.environ.get("INTO", ""),
                        help="file it here rather than in results/<device>/<date>/")
    parser.add_argument("--results", default=str(REPO_ROOT / "results"))
    args = parser.parse_args(argv)
    try:
        if not args.source:
            raise HarnessError("gpu-plan-import: name the folder the device gave the call's files back in: FROM=<folder>")
        dest, call, legs = file_call(Path(args.source), Path(args.results), Path(args.into) if args.into else None)
        written, not_made = draw_tables(dest)
        print(summary(dest, call, legs, written, not_made))
    except HarnessError as err:
        print(err, file=sys.stderr)
        return 2
    return 1 if not_made else 0


if __name__ == "__main__":
    sys.exit(main())
