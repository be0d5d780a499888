"""`make gpu-plan-import` (build_scripts/plan_import.py): a gpu-plan call's plan.md and legs.tar.gz, as
gpu_plan writes them (its own plan_markdown and pack make them here), filed in results/<device>/<date>/
with bench.md, the plots and the launch audits; and every refusal leaving the results folder as it was."""

import copy
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT, plan_import, plan_report
from build_scripts.errors import HarnessError
from build_scripts.gpu_plan import CallHeader, Leg, LegOutcome, pack, plan_markdown
from tests.test_bench import synthetic_report
from tests.test_plan_audit import AS_PLANNED, FINISHED

DEVICE = "Synthetic GPU"  # synthetic_report's card
DAY_FOLDER = ("Synthetic-GPU", "2026-12-09")


def bench_report(command: str, variants=("stock", "cudnn", "ours"), paths_off=(), launches=False) -> dict:
    report = synthetic_report()
    report["command"] = command
    report["settings"]["variants"] = list(variants)
    for row in report["rows"]:
        row["ms"] = {v: t for v, t in row["ms"].items() if v in variants}
        row["check"] = {v: c for v, c in row["check"].items() if v in variants}
    if paths_off:
        report["kernel_paths_off"] = list(paths_off)
    if launches:
        report["settings"]["launches"] = True
        for row in report["rows"]:
            if (row["set"], row["layer"], row["dtype"], row["layout"], row["pass"]) == (
                    "MobileNetV2", "96@112 s2", "float32", "contiguous", "backward_weight"):
                row["launches"] = {"ours": [AS_PLANNED, FINISHED]}
    return report


def device_call(folder: Path, legs: dict[str, tuple[str, dict[str, object]]], device: str | None = DEVICE,
                started: str = "2026-12-09T10:00:00Z", extra_members: dict[str, bytes | str] | None = None) -> Path:
    """What the device gives back of a gpu-plan call (plan.md, legs.tar.gz) in folder, written by gpu_plan's
    own functions: legs maps a leg's name to its status and files (None: no folder came back), a report
    given as a dict; extra_members are added to the archive as no call adds them (str: a link to it)."""
    work = folder / "work"
    outcomes = []
    for name, (status, files) in legs.items():
        outcomes.append(LegOutcome(name, status, 12.0))
        if files is None:
            continue
        (work / name).mkdir(parents=True)
        (work / name / "session.md").write_text(f"# GPU session: {name}\n\n| step | status | seconds |\n"
                                                "| --- | --- | ---: |\n| bench | passed | 9 |\n")
        for file, content in files.items():
            text = json.dumps(content) if isinstance(content, dict) else str(content)
            (work / name / file).write_text(text)
    out = folder / "files_at"
    out.mkdir()
    header = CallHeader(f"make gpu-plan PLAN=notes/next-gpu-session.plan LEGS={','.join(legs)} BUDGET=540", device,
                        started)
    plan_legs = [Leg(name, {"STEPS": "bench", "MATCH": "b64|b8"}) for name in legs]
    (out / "plan.md").write_text(plan_markdown(outcomes, plan_legs, work, 540, header))
    pack(work, [o.name for o in outcomes], out / "legs.tar.gz")
    if extra_members:
        with tarfile.open(out / "legs.tar.gz", "r:gz") as archive:
            kept = [(m, archive.extractfile(m).read()) for m in archive.getmembers()]
        with tarfile.open(out / "legs.tar.gz", "w:gz") as archive:
            for member, data in kept:
                archive.addfile(member, io.BytesIO(data))
            for name, data in extra_members.items():
                member = tarfile.TarInfo(name)
                if isinstance(data, str):  # a link's target
                    member.type, member.linkname = tarfile.SYMTYPE, data
                    archive.addfile(member)
                    continue
                member.size = len(data)
                archive.addfile(member, io.BytesIO(data))
    return out


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


@pytest.fixture
def driver_here(monkeypatch, kernel_choice_driver):
    monkeypatch.setattr(plan_report, "build_driver", lambda directory: kernel_choice_driver)


@pytest.mark.l0  # the launch audit runs the kernel-choice driver
def test_a_call_is_filed_by_its_card_and_day_with_its_tables_and_audits(tmp_path, capsys, driver_here):
    results = tmp_path / "results"
    source = device_call(tmp_path, {
        "bf16": ("passed", {"bench-bf16.json": bench_report("bench bf16"),
                            "bench-bf16-routed.json": bench_report("routed bf16", ("stock", "cudnn", "routed")),
                            "routing-table.tsv": "table\n", "bench.log": "wrote ...\n"}),
        "without": ("passed", {"bench-without.json": bench_report("bench without", paths_off=["pixel"])}),
        "launches": ("not passed: bench stopped at the budget",
                     {"bench-launches.json": bench_report("bench launches", ("ours",), launches=True)}),
        "compile-tests": ("skipped (the call's budget is spent)", None),
    })
    assert plan_import.main(["--from", str(source), "--results", str(results)]) == 0
    dest = results.joinpath(*DAY_FOLDER)
    assert (dest / "gpu-plan-bf16.md").read_text() == (source / "plan.md").read_text()
    assert {"bf16/session.md", "bf16/routing-table.tsv", "bf16/bench-bf16.json", "without/bench-without.json",
            "launches/bench-launches.json", "bench.md", "speedup.png", "floor.png", "without-pixel/bench.md",
            "launches/plan-audit.md", "launches/bench.md"} <= tree(dest)
    assert not (dest / "compile-tests").exists() and not list(results.rglob(".gpu-plan-import-*"))
    bench_md = (dest / "bench.md").read_text()
    # the path-on reports of the call in one table; the run without a path in its own; the launches leg's
    # five repeats under the profiler beside its audit, not over the others' ours
    assert all(f"Command: `{c}`" in bench_md for c in ("bench bf16", "routed bf16"))
    assert "bench without" not in bench_md and "Command: `bench without`" in (dest / "without-pixel/bench.md").read_text()
    assert "bench launches" not in bench_md and "Command: `bench launches`" in (dest / "launches/bench.md").read_text()
    assert "**1 of 1 passes launched as planned.**" in (dest / "launches/plan-audit.md").read_text()
    out = capsys.readouterr().out
    assert f"filed in {dest}: gpu-plan-bf16.md" in out and "  launches/ (not passed: bench stopped at the budget)" in out
    assert "(no folder came back for compile-tests: skipped (the call's budget is spent))" in out
    # the table only from the reports that timed stock and ours with every path on, read as routing-table reads them
    assert "the routing table from the 1 reports filed in " in out and "bfloat16 channels_last b64" in out
    assert f'make routing-table BENCH="{dest / "bf16/bench-bf16.json"}"' in out


def test_a_second_call_of_the_day_is_filed_beside_the_first_and_the_tables_redrawn_over_both(tmp_path, capsys):
    results = tmp_path / "results"
    first = device_call(tmp_path / "one", {"bf16": ("passed", {"bench-a.json": bench_report("first call")})})
    second = device_call(tmp_path / "two", {"fp16": ("passed", {"bench-b.json": bench_report("second call")})},
                         started="2026-12-09T10:12:00Z")
    assert plan_import.main(["--from", str(first), "--results", str(results)]) == 0
    assert plan_import.main(["--from", str(second), "--results", str(results)]) == 0
    dest = results.joinpath(*DAY_FOLDER)
    assert {"gpu-plan-bf16.md", "gpu-plan-fp16.md", "bf16", "fp16"} <= set(os.listdir(dest))
    bench_md = (dest / "bench.md").read_text()
    assert bench_md.index("Command: `first call`") < bench_md.index("Command: `second call`")
    command = capsys.readouterr().out.rsplit("make routing-table", 1)[1]
    assert "bf16/bench-a.json" in command and "fp16/bench-b.json" in command  # both calls' reports
    # filing either call again is refused, and nothing changes
    before = {p: p.stat().st_mtime_ns for p in dest.rglob("*")}
    assert plan_import.main(["--from", str(second), "--results", str(results)]) == 2
    assert "filed already, or in the way; nothing was filed" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*")} == before


def refused(tmp_path: Path, source: Path, message: str) -> str:
    """The refusal's text, once it is shown to leave the results folder as it was."""
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    (results / "kept.txt").write_text("here before")
    before = tree(results)
    with pytest.raises(HarnessError, match=message) as err:
        plan_import.file_call(source, results)
    assert tree(results) == before  # no leg, no record, no staging folder
    return str(err.value)


def test_an_archive_member_outside_a_listed_legs_folder_is_refused(tmp_path):
    source = device_call(tmp_path, {"bf16": ("passed", {"bench.log": "x"})},
                         extra_members={"../escape.txt": b"x", "bf16/../../up.txt": b"x", "other/file": b"x",
                                        "bf16": b"", "bf16/link": "/etc/passwd"})
    text = refused(tmp_path, source, "holds what no gpu-plan call packs")
    assert "\n  bf16/link (no plain file)" in text
    assert all(f"\n  {name} (outside" in text for name in ("../escape.txt", "bf16/../../up.txt", "other/file", "bf16"))


@pytest.mark.parametrize("failing", ["extract", "rename"])
def test_a_filing_that_fails_midway_takes_back_what_it_did(tmp_path, monkeypatch, failing):
    """The disk fills while the archive is written out, or the last rename fails: the legs moved before are
    taken back, and the folders the filing made removed, the results folder's own included."""
    source = device_call(tmp_path, {"a": ("passed", {"bench.log": "x"}), "b": ("passed", {"bench.log": "y"})})
    if failing == "extract":
        real_write = plan_import.write_member

        def write_then_fill(archive, member, target):
            if target.parent.name == "b":
                raise OSError(28, "No space left on device")
            real_write(archive, member, target)

        monkeypatch.setattr(plan_import, "write_member", write_then_fill)
    else:
        real_move = plan_import.move

        def move_but_the_record(staged, filed):
            if filed.name == "gpu-plan-a.md":
                raise OSError(28, "No space left on device")
            real_move(staged, filed)

        monkeypatch.setattr(plan_import, "move", move_but_the_record)
    results = tmp_path / "results"
    with pytest.raises(HarnessError, match="cannot read or file .*: .*No space left on device.*; nothing was filed"):
        plan_import.file_call(source, results)
    assert not results.exists()


@pytest.mark.parametrize("cards, named", [
    ((DEVICE, "Another GPU"), "Another GPU, Synthetic GPU"),
    (("Another GPU",), "Another GPU"),
])
def test_reports_of_another_card_than_plan_md_names_are_refused(tmp_path, cards, named):
    reports = {}
    for number, card in enumerate(cards):
        reports[f"bench-{number}.json"] = bench_report(card)
        reports[f"bench-{number}.json"]["device"] = card
    source = device_call(tmp_path, {"a": ("passed", reports)})
    refused(tmp_path, source, f"plan.md names Synthetic GPU, its reports come from {named}: not one call's")


def test_a_call_that_names_no_card_or_day_needs_into(tmp_path):
    source = device_call(tmp_path, {"correctness": ("passed", {"probe.log": "GPU: ?\n"})}, device=None)
    assert "Device: unknown (nvidia-smi said nothing)" in (source / "plan.md").read_text()
    refused(tmp_path, source, r"say where it goes, INTO=results/<device>/<date>")
    into = tmp_path / "results" / "Some-GPU" / "2026-12-09"
    dest, call, legs = plan_import.file_call(source, tmp_path / "results", into)
    assert dest == into and legs == ["correctness"] and (into / "correctness" / "probe.log").is_file()
    assert (into / "gpu-plan-correctness.md").is_file() and not any(p.name.startswith(".") for p in into.parent.parent.iterdir())


def test_the_card_and_day_come_from_the_reports_where_plan_md_lacks_them(tmp_path):
    source = device_call(tmp_path, {"a": ("passed", {"bench-a.json": bench_report("here")})}, device=None, started="")
    dest, _, _ = plan_import.file_call(source, tmp_path / "results")
    assert dest == tmp_path / "results" / "Synthetic-GPU" / "2026-01-01"  # synthetic_report's date


def test_a_folder_with_a_bench_md_no_import_drew_is_not_filed_into(tmp_path):
    dest = tmp_path.joinpath("results", *DAY_FOLDER)
    dest.mkdir(parents=True)
    (dest / "bench.md").write_text("drawn by hand from reports filed by hand")
    source = device_call(tmp_path, {"a": ("passed", {"bench-a.json": bench_report("here")})})
    refused(tmp_path, source, "not drawn from a filed call")


@pytest.mark.parametrize("damage, message", [
    (lambda out: (out / "legs.tar.gz").unlink(), "no .*legs.tar.gz"),
    (lambda out: (out / "plan.md").write_text("# Something else\n"), "is no plan.md of `make gpu-plan`"),
    (lambda out: (out / "legs.tar.gz").write_bytes((out / "legs.tar.gz").read_bytes()[:40]), "cannot read or file .*legs.tar.gz"),
])
def test_a_missing_or_damaged_file_is_refused_naming_it(tmp_path, damage, message):
    source = device_call(tmp_path, {"a": ("passed", {"bench-a.json": bench_report("here")})})
    damage(source)
    refused(tmp_path, source, message)


def test_a_run_of_another_method_gets_a_table_of_its_own(tmp_path, capsys):
    """Numbers of two methods make no one table (report.merge): cuDNN's benchmark mode is drawn apart, and
    left out of the routing table, which is for torch's default."""
    benchmark_mode = bench_report("cuDNN's benchmark mode")
    benchmark_mode["settings"]["cudnn_benchmark"] = True
    source = device_call(tmp_path, {"a": ("passed", {"bench-a.json": bench_report("plain"),
                                                     "bench-b.json": benchmark_mode})})
    assert plan_import.main(["--from", str(source), "--results", str(tmp_path / "results")]) == 0
    dest = tmp_path.joinpath("results", *DAY_FOLDER)
    assert "Command: `plain`" in (dest / "bench.md").read_text()
    assert "Command: `cuDNN's benchmark mode`" in (dest / "cudnn-benchmark" / "bench.md").read_text()
    assert "bench-b.json" not in capsys.readouterr().out.rsplit("make routing-table", 1)[1]


def test_a_method_the_bench_settings_do_not_name_gets_a_folder_by_its_hash(tmp_path):
    other = bench_report("more rotation")
    other["settings"]["l2_multiple"] = 5
    source = device_call(tmp_path, {"a": ("passed", {"bench-a.json": bench_report("plain"), "bench-b.json": other})})
    assert plan_import.main(["--from", str(source), "--results", str(tmp_path / "results")]) == 0
    dest = tmp_path.joinpath("results", *DAY_FOLDER)
    method_folders = [p for p in dest.iterdir() if p.name.startswith("method-")]
    assert len(method_folders) == 1 and "Command: `more rotation`" in (method_folders[0] / "bench.md").read_text()
    assert "more rotation" not in (dest / "bench.md").read_text()


@pytest.mark.l0
def test_two_reports_that_recorded_launches_in_one_leg_keep_a_table_and_an_audit_each(tmp_path, driver_here):
    source = device_call(tmp_path, {"launches": ("passed", {
        "bench-one.json": bench_report("first", ("ours",), launches=True),
        "bench-two.json": bench_report("second", ("ours",), launches=True)})})
    assert plan_import.main(["--from", str(source), "--results", str(tmp_path / "results")]) == 0
    leg = tmp_path.joinpath("results", *DAY_FOLDER, "launches")
    assert "Command: `first`" in (leg / "bench-one" / "bench.md").read_text()
    assert "Command: `second`" in (leg / "bench-two" / "bench.md").read_text()
    assert {"plan-audit-bench-one.md", "plan-audit-bench-two.md"} <= set(os.listdir(leg))


def test_tables_that_cannot_be_drawn_are_named_after_the_call_is_filed(tmp_path, capsys):
    """Reports of two torch builds do not make one table: the legs are filed, the table is not drawn, the
    exit status says so, and INTO alone draws the folder's tables again once the cause is gone."""
    other_torch = bench_report("another torch")
    other_torch["torch"] = "2.12.0+cu130"
    source = device_call(tmp_path, {"a": ("passed", {"bench-a.json": bench_report("plain"),
                                                     "bench-b.json": copy.deepcopy(other_torch)})})
    assert plan_import.main(["--from", str(source), "--results", str(tmp_path / "results")]) == 1
    dest = tmp_path.joinpath("results", *DAY_FOLDER)
    assert (dest / "a" / "bench-a.json").is_file() and not (dest / "bench.md").exists()
    out = capsys.readouterr().out
    assert "not made: " in out and "torch 2.12.0+cu130" in out
    (dest / "a" / "bench-b.json").unlink()
    assert plan_import.main(["--into", str(dest)]) == 0
    assert "Command: `plain`" in (dest / "bench.md").read_text()


def test_a_leg_the_first_call_skipped_is_filed_with_the_call_that_ran_it(tmp_path, capsys):
    results = tmp_path / "results"
    first = device_call(tmp_path / "one", {"correctness": ("passed", {"probe.log": "ok"}),
                                           "bf16": ("skipped (the call's budget is spent)", None),
                                           "fp32": ("passed", {"probe.log": "ok"})})
    second = device_call(tmp_path / "two", {"bf16": ("passed", {"bench-a.json": bench_report("rerun")})},
                         started="2026-12-09T10:12:00Z")
    assert plan_import.main(["--from", str(first), "--results", str(results)]) == 0
    assert plan_import.main(["--from", str(second), "--results", str(results)]) == 0
    dest = results.joinpath(*DAY_FOLDER)
    assert plan_import.filed_legs(dest) == ["correctness", "fp32", "bf16"]  # in the order they ran
    assert (dest / "bench.md").read_text().count("Command: `rerun`") == 1
    assert capsys.readouterr().out.count("bf16/bench-a.json") == 1


def test_the_routing_table_command_is_printed_only_for_reports_routing_table_takes(tmp_path, capsys):
    failed = bench_report("ours failed")
    failed["rows"][0]["check"]["ours"] = {"ok": False, "failed": "illegal memory access"}
    source = device_call(tmp_path, {"a": ("passed", {"bench-a.json": failed})})
    assert plan_import.main(["--from", str(source), "--results", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "make routing-table" not in out
    assert "no routing table from the reports filed in " in out and "failed its float64 check" in out


def test_what_the_call_left_out_is_filed_beside_its_record(tmp_path):
    source = device_call(tmp_path, {"a": ("passed", {"bench.log": "x"})},
                         extra_members={"left-out.txt": b"a/sanitizer.log: 20000000 bytes\n"})
    dest, _, _ = plan_import.file_call(source, tmp_path / "results")
    assert (dest / "left-out-a.txt").read_text() == "a/sanitizer.log: 20000000 bytes\n"


def test_a_leg_named_as_a_tables_folder_is_refused(tmp_path):
    source = device_call(tmp_path, {"without-pixel": ("passed", {"bench.log": "x"})})
    refused(tmp_path, source, "as the tables' folders are .*: without-pixel")


def test_make_gpu_plan_import_asks_for_the_folder():
    run = subprocess.run(["make", "--no-print-directory", "gpu-plan-import"], cwd=REPO_ROOT,
                         env=dict(os.environ, FROM="", INTO=""), capture_output=True, text=True)
    assert run.returncode != 0 and "FROM=<folder>" in run.stderr
