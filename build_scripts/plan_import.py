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
        without-<path>+<path>/   the same for the legs run with kernel paths off (DWCONV_DISABLE_KERNELS);
        cudnn-benchmark/         for those run with CUDNN_BENCHMARK=1 (numbers of two methods make no one table)
        <leg>/plan-audit.md      `make plan-audit` of a report that recorded launches (LAUNCHES=1), and its
        <leg>/bench.md           own tables: its few repeats under the profiler stay out of the day's
        <leg>/models.md          a bench-models report's

The card is the one plan.md names (nvidia-smi's name) and must be the reports' own; the day is the UTC day
the call started (a report's date where plan.md has none). INTO=<folder> files the call elsewhere, and
INTO alone, without FROM, draws the tables of a folder's filed calls again. Nothing is filed before all
of it has been checked: an archive member outside a leg's folder or no plain file, a leg plan.md does not
list or named as the tables' folders are, reports of another card, a leg or call filed already. The
routing table is a source file, so it is not rewritten here: the command that would, from the folder's
reports that timed stock and ours with every path on, is printed once the harness has read them.
"""

from __future__ import annotations

import argparse
import hashlib
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
SKIPPED = "skipped"  # gpu_plan's status of a leg the call had no time for: no folder comes back
# the tables' own folders beside the legs': a leg of these names would be drawn over
TABLE_FOLDERS = re.compile(r"^(without-|cudnn-benchmark|method-)")


@dataclass(frozen=True)
class Call:
    """A call's plan.md: its legs and their statuses, in order, and the card and day it names."""
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

    def brought(self, leg: str) -> bool:
        """Whether the call ran the leg, so that a folder of that name came back with it (a leg it skipped may
        come back with a later call)."""
        return leg in self.legs and not self.legs[leg].startswith(SKIPPED)


def read_call(text: str, source: str) -> Call:
    start = text.find("\n| leg | status |")
    if not text.startswith("# GPU plan") or start < 0:
        raise HarnessError(f"gpu-plan-import: {source} is no plan.md of `make gpu-plan` (no '# GPU plan' and its "
                           "table of legs)")
    end = text.find("\n\n", start + 1)
    legs = {m["name"]: m["status"] for m in LEG_ROW.finditer(text[start:end if end > 0 else len(text)])}
    bad = [name for name in legs if not LEG_NAME.match(name) or TABLE_FOLDERS.match(name)]
    if not legs:
        raise HarnessError(f"gpu-plan-import: {source}: its table lists no leg")
    if bad:
        raise HarnessError(f"gpu-plan-import: {source}: legs named as no plan names them, or as the tables' folders "
                           f"are (without-*, cudnn-benchmark*, method-*): {', '.join(bad)}")
    header = dict(HEADER_LINE.findall(text[:start]))
    device = header.get("Device")
    day = DAY.match(header.get("Started", ""))
    return Call(legs, None if device in (None, UNKNOWN_DEVICE) else device, day and day.group(0),
                header.get("Started", ""))


def archive_members(archive: tarfile.TarFile, call: Call, source: str) -> list[tarfile.TarInfo]:
    """The archive's files, each refused unless it is a plain file in the folder of a leg the call ran
    (or the call's note of what it left out)."""
    members = archive.getmembers()
    wrong = []
    for member in members:
        parts = PurePosixPath(member.name).parts
        if not member.isfile():
            wrong.append(f"{member.name} (no plain file)")
        elif member.name == LEFT_OUT_NAME:
            continue
        elif PurePosixPath(member.name).is_absolute() or ".." in parts or len(parts) < 2 or not call.brought(parts[0]):
            wrong.append(f"{member.name} (outside the folders of the legs plan.md lists as run)")
    if wrong:
        raise HarnessError(f"gpu-plan-import: {source} holds what no gpu-plan call packs; nothing was filed:\n  "
                           + "\n  ".join(wrong))
    return members


def is_report(content: object) -> bool:
    return isinstance(content, dict) and content.get("schema") in (SCHEMA, MODELS_SCHEMA)


def reports_packed(archive: tarfile.TarFile, members: list[tarfile.TarInfo]) -> list[dict]:
    """The bench and bench-models reports among the members, read in place."""
    found = []
    for member in members:
        if member.name.endswith(".json"):
            try:
                content = json.loads(archive.extractfile(member).read())
            except ValueError:
                continue
            if is_report(content):
                found.append(content)
    return found


def reports_in(folder: Path) -> list[tuple[Path, dict]]:
    """The bench and bench-models reports under folder, oldest first (a later report's times stand)."""
    found = []
    for path in folder.rglob("*.json"):
        try:
            content = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if is_report(content):
            found.append((path, content))
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


def make_folders(folder: Path) -> list[Path]:
    """folder made with its missing parents: those it made, deepest first, to take back on a failure."""
    made = []
    while not folder.exists():
        made.append(folder)
        folder = folder.parent
    for path in reversed(made):
        path.mkdir()
    return made


def file_call(source: Path, results: Path, into: Path | None = None) -> tuple[Path, Call, list[str]]:
    """The call's legs and plan.md moved into their folder, all or nothing: the folder, the call and the
    legs filed."""
    plan_path, archive_path = source / PLAN_NAME, source / ARCHIVE_NAME
    missing = [str(p) for p in (plan_path, archive_path) if not p.is_file()]
    if missing:
        raise HarnessError(f"gpu-plan-import: no {' nor '.join(missing)}: FROM names the folder the device gave "
                           "`make gpu-plan`'s plan.md and legs.tar.gz back in (the run's files_at)")
    call = read_call(plan_path.read_text(errors="replace"), str(plan_path))
    made: list[Path] = []
    moved: list[tuple[Path, Path]] = []
    staging = None
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            members = archive_members(archive, call, str(archive_path))
            dest = destination(call, reports_packed(archive, members), results, into)
            legs = [leg for leg in call.legs if any(m.name.startswith(f"{leg}/") for m in members)]
            left_out = any(m.name == LEFT_OUT_NAME for m in members)
            found = clashes(dest, call, legs, left_out)
            if found:
                raise HarnessError("gpu-plan-import: filed already, or in the way; nothing was filed:\n  "
                                   + "\n  ".join(found))
            made = make_folders(dest)
            staging = Path(tempfile.mkdtemp(prefix=".gpu-plan-import-", dir=dest.parent))
            for member in members:
                write_member(archive, member, staging / member.name)
        shutil.copy2(plan_path, staging / PLAN_NAME)
        names = [(leg, leg) for leg in legs] + [(LEFT_OUT_NAME, call.left_out_name)] * left_out \
            + [(PLAN_NAME, call.record_name)]  # the call's record last: a folder without it is no filed call
        for staged, filed in names:
            move(staging / staged, dest / filed)
            moved.append((staging / staged, dest / filed))
    except (tarfile.TarError, EOFError, OSError) as err:
        undo(moved, made, staging)
        raise HarnessError(f"gpu-plan-import: cannot read or file {archive_path}: {err}; nothing was filed") from None
    except BaseException:
        undo(moved, made, staging)
        raise
    shutil.rmtree(staging)
    return dest, call, legs


def write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with archive.extractfile(member) as packed, target.open("wb") as copy:
        shutil.copyfileobj(packed, copy)
    os.utime(target, (member.mtime, member.mtime))


def move(staged: Path, filed: Path) -> None:
    staged.rename(filed)  # the staging folder is beside the destination: one file system


def undo(moved: list[tuple[Path, Path]], made: list[Path], staging: Path | None) -> None:
    """What file_call did, taken back: the legs moved, the staging folder and the folders it made."""
    for staged, filed in reversed(moved):
        filed.rename(staged)
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
    for folder in made:  # deepest first, each empty once what was moved into it is back
        folder.rmdir()


def filed_legs(dest: Path) -> list[str]:
    """The legs filed in dest, each with the call that brought it, in the order the calls started."""
    calls = [read_call(path.read_text(errors="replace"), str(path)) for path in dest.glob(f"{CALL_PREFIX}*.md")]
    legs = [leg for call in sorted(calls, key=lambda call: call.started) for leg in call.legs
            if call.brought(leg) and (dest / leg).is_dir()]
    return list(dict.fromkeys(legs))


def filed_reports(dest: Path) -> list[tuple[str, Path, dict]]:
    """The reports of the legs filed in dest, each with its leg, in the order the legs ran."""
    return [(leg, path, report) for leg in filed_legs(dest) for path, report in reports_in(dest / leg)]


def method_key(report: dict) -> str:
    from .bench.report import method
    return json.dumps(method(report), sort_keys=True)


def table_groups(dest: Path, reports: list[tuple[Path, dict]]) -> dict[Path, list[Path]]:
    """The bench reports that make one table each, by the folder it goes in: those of one setting of the
    kernel paths and one method together (the day's folder, without-<paths>/, cudnn-benchmark/, or for a
    method the bench's settings do not name method-<its hash>/); a report that recorded launches alone,
    in its leg's folder."""
    groups: dict[tuple, list[Path]] = {}
    for path, report in reports:
        if report["schema"] != SCHEMA:
            continue
        if report.get("settings", {}).get("launches"):
            groups[("launches", path)] = [path]
        else:
            groups.setdefault((tuple(sorted(paths_off_of(report))), method_key(report)), []).append(path)
    launches_in = [key[1].parent for key in groups if key[0] == "launches"]
    folders: dict[Path, list[Path]] = {}
    for key, paths in groups.items():
        if key[0] == "launches":
            folder = paths[0].parent / paths[0].stem if launches_in.count(paths[0].parent) > 1 else paths[0].parent
        else:
            paths_off, method = key
            benchmark_mode = json.loads(method).get("cudnn_benchmark")
            parts = [f"without-{'+'.join(paths_off)}"] * bool(paths_off) + ["cudnn-benchmark"] * bool(benchmark_mode)
            folder = dest / "-".join(parts)
            if folder in folders:
                folder = dest / "-".join([*parts, f"method-{hashlib.sha256(method.encode()).hexdigest()[:6]}"])
        folders[folder] = paths
    return folders


def draw_tables(dest: Path, reports: list[tuple[str, Path, dict]]) -> tuple[list[Path], list[str]]:
    """bench.md and its plots for each table group of the filed legs' bench reports (filed_reports), plan-audit.md
    for each that recorded launches, models.md for each bench-models report: what was written, and what could
    not be made, with why."""
    from .bench.model_report import write_model_report
    from .bench.report import write_report
    plots = importlib.util.find_spec("matplotlib") is not None
    written, not_made = [], []
    for folder, paths in table_groups(dest, [(path, report) for _, path, report in reports]).items():
        try:
            written += write_report(paths, folder, with_plots=plots)
        except (ValueError, KeyError) as err:
            stale = " (the bench.md there is from before this call)" if (folder / "bench.md").exists() else ""
            not_made.append(f"{folder / 'bench.md'}{stale}: {err}")
    for leg in dict.fromkeys(leg for leg, _, _ in reports):
        own = [(path, report) for other, path, report in reports if other == leg]
        audited = [(path, report) for path, report in own if report.get("settings", {}).get("launches")]
        models = [(path, report) for path, report in own if report["schema"] == MODELS_SCHEMA]
        for path, report in audited:
            target = path.parent / (f"plan-audit-{path.stem}.md" if len(audited) > 1 else "plan-audit.md")
            try:
                target.write_text(audit_markdown(report, path))
                written.append(target)
            except HarnessError as err:
                not_made.append(f"{target}: {err}")
        for path, _ in models:
            folder = path.parent / path.stem if len(models) > 1 else path.parent
            try:
                written += write_model_report(path, folder, with_plot=plots)
            except (ValueError, KeyError) as err:
                not_made.append(f"{folder / 'models.md'}: {err}")
    return written, not_made


def audit_markdown(report: dict, path: Path) -> str:
    from .plan_audit import audit, markdown
    from .plan_report import build_driver
    return markdown(audit(report, build_driver(REPO_ROOT / "build" / "plan-report")), report, relative(path))


def routing_reports(reports: list[tuple[str, Path, dict]]) -> list[Path]:
    """The filed bench reports a compiled-in routing table is made from: stock and ours timed with every kernel
    path on, as torch runs by default (cuDNN's benchmark mode off)."""
    return [path for _, path, report in reports
            if report["schema"] == SCHEMA and not paths_off_of(report)
            and not report.get("settings", {}).get("cudnn_benchmark")
            and {"stock", "ours"} <= set(report.get("settings", {}).get("variants", []))]


def routing_lines(dest: Path, reports: list[tuple[str, Path, dict]]) -> list[str]:
    """The `make routing-table` command over the folder's reports, once the harness has read them as it
    would; else why it would refuse them."""
    from .pin import load_pin
    from .routing_table import read_points
    paths = routing_reports(reports)
    if not paths:
        return []
    try:
        points, measured_on, _, _ = read_points(paths, load_pin().stock_version)
    except HarnessError as err:
        return [f"no routing table from the reports filed in {relative(dest)}: {err}"]
    batches = sorted({f"{p.dtype} {p.layout} b{p.shape[0]}" for p in points})
    return [f"the routing table from the {len(paths)} reports filed in {relative(dest)} ({len(points)} points: "
            f"{', '.join(batches)}; {measured_on}), the session's filed elsewhere to be added; it rewrites "
            "DepthwiseConvRoutingTable.h:",
            f"  make routing-table BENCH=\"{' '.join(relative(p) for p in paths)}\""]


def relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def summary(dest: Path, call: Call | None, legs: list[str], written: list[Path], not_made: list[str],
            routing: list[str]) -> str:
    lines = []
    if call is not None:
        lines += [f"filed in {relative(dest)}: {call.record_name}"]
        lines += [f"  {leg}/ ({call.legs[leg]})" for leg in legs]
        lines += [f"  (no folder came back for {leg}: {status})" for leg, status in call.legs.items() if leg not in legs]
    lines += [f"wrote {relative(path)}" for path in written]
    lines += routing
    lines += [f"not made: {line}" for line in not_made]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts.plan_import", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", default=os.environ.get("FROM", ""),
                        help="the folder holding the call's plan.md and legs.tar.gz")
    parser.add_argument("--into", default=os.environ.get("INTO", ""),
                        help="file it here rather than in results/<device>/<date>/; alone, draw this folder's tables again")
    parser.add_argument("--results", default=str(REPO_ROOT / "results"))
    args = parser.parse_args(argv)
    try:
        if args.source:
            dest, call, legs = file_call(Path(args.source), Path(args.results), Path(args.into) if args.into else None)
        elif args.into and any(Path(args.into).glob(f"{CALL_PREFIX}*.md")):
            dest, call, legs = Path(args.into), None, []
        else:
            raise HarnessError("gpu-plan-import: name the folder the device gave the call's files back in: FROM=<folder> "
                               "(or, to draw the tables of calls filed already again, INTO=<their folder> alone)")
        reports = filed_reports(dest)  # read once: the tables and the routing table's check both take them
        written, not_made = draw_tables(dest, reports)
        print(summary(dest, call, legs, written, not_made, routing_lines(dest, reports)))
    except HarnessError as err:
        print(err, file=sys.stderr)
        return 2
    return 1 if not_made else 0


if __name__ == "__main__":
    sys.exit(main())
