"""The README's tables of which kernel takes a pass (its "Which kernel takes a pass" section) against
the code: every kernel path the header names is in them, each header they name exists, each version
is one the notes record, and what each row says of the GPU is what the runs and the next session's
plan say: a path added since the last GPU run is owed a leg of notes/next-gpu-session.plan that
switches it off, so that the plan cannot drop a path's timing unseen."""

import re

from build_scripts import REPO_ROOT
from build_scripts.bench.schema import switched_off_paths
from build_scripts.gpu_plan import parse_plan
from build_scripts.plan_report import KERNEL_PATHS_HEADER, kernel_path_names

README = REPO_ROOT / "README.md"
NOTES = REPO_ROOT / "notes" / "performance.md"
PLAN_FILE = REPO_ROOT / "notes" / "next-gpu-session.plan"
SECTION = "### Which kernel takes a pass"
# The GPU runs so far, by the label the tables give them, and the last version each ran.
GPU_RUNS = {"H100 11-22": 15, "H200 11-27": 38}
OWED = re.compile(r"owed: `([^`]+)`$")
OWED_WITHOUT_LEG = re.compile(r"owed, no leg: \S.*")


def table_rows() -> list[dict[str, str]]:
    """The section's table rows, each as {column: cell}."""
    text = README.read_text()
    start = text.index(SECTION)
    section = text[start:text.index("\n### ", start + len(SECTION))]
    rows, header = [], None
    for line in section.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if header is None:
            header = cells
        elif not set(line) <= set("|- "):
            assert len(cells) == len(header), line
            rows.append(dict(zip(header, cells)))
    return rows


def paths_of(row: dict[str, str]) -> list[str]:
    return re.findall(r"`([^`]+)`", row["path"])


def test_every_kernel_path_is_in_the_readme_tables_and_nothing_else():
    named = [path for row in table_rows() for path in paths_of(row)]
    assert set(named) == set(kernel_path_names()), (set(named) ^ set(kernel_path_names()))
    assert all(row["path"] == "–" or paths_of(row) for row in table_rows())


def test_each_header_the_tables_name_exists():
    headers = {row["header"].strip("`") for row in table_rows() if "header" in row}
    assert headers and all((KERNEL_PATHS_HEADER.parent / header).is_file() for header in headers), headers


def test_each_row_says_the_gpu_runs_its_version_had_or_the_plan_leg_that_owes_it():
    versions = [int(v) for v in re.findall(r"^## v(\d+) ", NOTES.read_text(), re.M)]
    legs = {leg.name: leg for leg in parse_plan(PLAN_FILE.read_text())}
    for row in table_rows():
        since = int(re.fullmatch(r"v(\d+)", row["since"]).group(1))
        assert since in versions, row
        ran = [label for label, last in GPU_RUNS.items() if since <= last]
        if ran:
            assert row["GPU"] == ", ".join(ran), row
            continue
        owed = OWED.fullmatch(row["GPU"])
        if not owed:
            assert OWED_WITHOUT_LEG.fullmatch(row["GPU"]), row
            continue
        leg = legs[owed.group(1)]
        switched_off = {path for variant in leg.settings.get("VARIANTS", "").split(",")
                        for path in switched_off_paths(variant.strip())}
        assert paths_of(row)[0] in switched_off, (row, leg.name)
