"""A routing table read at run time (DWCONV_ROUTING_TABLE, torch.ops.dwconv.load_routing_table):
the file `make routing-table TABLE=<file>` writes routes every call as the compiled-in table made
from the same reports does, and a file that is not one is refused, naming the line. The rule is
compiled with g++ (tests/routing/route_query.cpp --table); the synthetic reports are test inputs,
not measurements."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from build_scripts import REPO_ROOT
from build_scripts.__main__ import main
from build_scripts.errors import HarnessError
from build_scripts.routing_table import TABLE, RUNTIME_FORMAT, points_of, read_points, render_runtime
from tests.test_routing_rule import PINNED, Router, conv2d, report, row

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the routing rule")

PASSES = ("forward", "backward_input", "backward_weight")


def write_reports(tmp_path: Path, rows: list[dict], arch: str = "sm_90") -> Path:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(report(rows, arch=arch)))
    return path


def table_file_of(tmp_path: Path, reports: list[Path]) -> Path:
    points, measured_on, source, arch = read_points(reports, PINNED)
    path = tmp_path / "table.tsv"
    path.write_text(render_runtime(points, measured_on, source, arch))
    return path


def calls() -> list[dict]:
    """Depthwise conv2d calls around the bench's layers: each dtype and layout, filter, stride, plane
    and batch, on the table's kind of GPU and on another."""
    grid = itertools.product(("float32", "bfloat16", "float16"), ("contiguous", "channels_last"), (3, 5, 7, 13, 31),
                             (1, 2), ((144, 56), (960, 7), (32, 112), (384, 14)), (1, 64))
    found = [conv2d(n=n, c=c, h=size, w=size, k=k, s=s, dtype=dtype, layout=layout)
             for dtype, layout, k, s, (c, size), n in grid if k < size]
    return found + [{**call, "gpu_arch": 80} for call in found[::7]]


SYNTHETIC_ROWS = [
    row("144@56", "bfloat16", "channels_last", "forward", ours=1.0, stock=2.0),
    row("144@56", "bfloat16", "channels_last", "backward_weight", ours=3.0, stock=2.0),
    row("960@7", "bfloat16", "channels_last", "forward", ours=3.0, stock=2.0, channels=960, size=7),
    row("672@14 k5 s2", "float16", "channels_last", "backward_input", ours=1.0, stock=2.0, channels=672, size=14,
        kernel=5, stride=2),
    row("96@56 k7", "float32", "contiguous", "forward", ours=2.0, stock=3.0, cudnn=1.5, kernel=7, channels=96,
        stock_backend="CudaDepthwise2d"),
    row("96@56 k7", "float32", "contiguous", "backward_weight", ours=1.0, stock=3.0, cudnn=1.5, kernel=7,
        channels=96, stock_backend="CudaDepthwise2d"),
    row("128@56 k31 b1", "float32", "contiguous", "forward", ours=1.0, stock=3.0, batch=1, channels=128, kernel=31,
        stock_backend="CudaDepthwise2d"),
]


def test_a_table_file_routes_every_call_as_the_compiled_table_of_the_same_report(tmp_path):
    source = write_reports(tmp_path, SYNTHETIC_ROWS)
    compiled = Router(tmp_path / "compiled", SYNTHETIC_ROWS)
    (tmp_path / "file").mkdir()
    from_file = Router(tmp_path / "file", table_file=table_file_of(tmp_path, [source]))
    asked = calls()
    answers = from_file.ask(*asked)
    assert answers == compiled.ask(*asked)
    # the file's points decide (the committed table, which the driver was built with, does not)
    assert {a["routes"]["forward"] for a in answers} == {"ours", "cudnn", "upstream"}
    for call in asked[::40]:
        assert from_file.explain(call) == compiled.explain(call)


def test_the_committed_table_as_a_file_routes_as_the_built_in_one(tmp_path):
    header = TABLE.read_text()
    source = next(line.split(": ", 1)[1] for line in header.splitlines() if line.startswith("// From: "))
    if source == "no report":
        pytest.skip("the committed table holds no measurements")
    table = table_file_of(tmp_path, [REPO_ROOT / s for s in source.split(" + ")])
    built_in, from_file = Router(tmp_path), Router(tmp_path, table_file=table)
    asked = calls()
    assert from_file.ask(*asked) == built_in.ask(*asked)
    measured = conv2d(c=256, h=28, w=28, k=29, dtype="bfloat16", layout="channels_last")
    assert from_file.explain(measured) == built_in.explain(measured)


def test_a_table_measured_on_another_kind_of_gpu_routes_that_kind(tmp_path):
    """An A100's bench makes a table that routes auto on A100s (sm_80), where the sm_90 table built in
    keeps stock's choice, and leaves other kinds to stock."""
    rows = [row("144@56", "bfloat16", "channels_last", p, ours=1.0, stock=2.0) for p in PASSES]
    router = Router(tmp_path, table_file=table_file_of(tmp_path, [write_reports(tmp_path, rows, arch="sm_80")]))
    call = conv2d(dtype="bfloat16", layout="channels_last")
    a100, h100 = router.ask({**call, "gpu_arch": 80}, {**call, "gpu_arch": 90})
    assert set(a100["routes"].values()) == {"ours"}
    assert set(h100["routes"].values()) == {"upstream"}
    assert set(router.explain({**call, "gpu_arch": 90}).values()) == {
        "upstream: the table was measured on sm_80 GPUs, this one is sm_90 (stock's choice)"}


GOOD_HEAD = f"{RUNTIME_FORMAT}\nmeasured_on\tSynthetic GPU\nmeasured_arch\t90\n"
GOOD_POINT = "point\tforward\tbfloat16\tchannels_last\t3\t3\t1\t1\t28901376\t3136\tours\tSynthetic 144@56"


@pytest.mark.parametrize("text, error", [
    ("", "empty, where a routing table starts with 'dwconv-routing-table 1'"),
    ("#include <array>\n", "line 1: '#include <array>' where a routing table starts with 'dwconv-routing-table 1'"),
    ("dwconv-routing-table 2\n", "line 1: 'dwconv-routing-table 2' where a routing table starts with"),
    (f"{RUNTIME_FORMAT}\nmeasured_on\tX\n{GOOD_POINT}\n", "line 3: a point before measured_on and measured_arch"),
    (f"{RUNTIME_FORMAT}\nmeasured_on\tX\nmeasured_arch\tsm_90\n", "line 3: measured_arch takes one field: the compute"),
    (GOOD_HEAD + "measured_on\tY\n", "line 4: a second measured_on"),
    (GOOD_HEAD + GOOD_POINT + "\textra\n", "line 4: a point has 11 fields (pass, dtype"),
    (GOOD_HEAD + GOOD_POINT.replace("forward", "backward") + "\n", "line 4: pass 'backward': forward, backward_input"),
    (GOOD_HEAD + GOOD_POINT.replace("bfloat16", "int8") + "\n", "line 4: dtype 'int8': float64, float32"),
    (GOOD_HEAD + GOOD_POINT.replace("channels_last", "nhwc") + "\n", "line 4: layout 'nhwc': contiguous or"),
    (GOOD_HEAD + GOOD_POINT.replace("\t3\t3\t", "\t3\t0\t") + "\n", "line 4: kernel and stride sizes are whole"),
    (GOOD_HEAD + GOOD_POINT.replace("\t1\t1\t", "\t1\t1.0\t") + "\n",
     "line 4: kernel and stride sizes are whole numbers from 1, got '1.0'"),
    (GOOD_HEAD + GOOD_POINT.replace("\t3136\t", "\t28901377\t") + "\n", "line 4: input and plane elements are whole"),
    (GOOD_HEAD + GOOD_POINT.replace("\tours\t", "\tfastest\t") + "\n", "line 4: route 'fastest': ours, cudnn or"),
    (GOOD_HEAD + "# a comment\n\nrow\t1\n", "line 6: 'row' begins no line of a routing table"),
    (f"{RUNTIME_FORMAT}\n{GOOD_POINT}\n", "line 2: a point before measured_on and measured_arch"),
    (f"{RUNTIME_FORMAT}\nmeasured_on\tX\n", "no measured_on or no measured_arch line"),
    (GOOD_HEAD, "no points to route by"),
    # what an error quotes is printable ASCII, whatever the file holds (torch hands it to Python as UTF-8)
    ("\x1f\x8b\x08\x00gzip", "line 1: '\\x1f\\x8b\\x08\\x00gzip' where a routing table starts with"),
    (GOOD_HEAD + GOOD_POINT.replace("Synthetic", "Synth\xffetic") + "\n",
     "line 4: not UTF-8 text without control characters: 'Synth\\xffetic 144@56'"),
    (GOOD_HEAD + GOOD_POINT.replace("Synthetic", "Synth\xc0\xafetic") + "\n",  # an overlong '/'
     "line 4: not UTF-8 text without control characters: 'Synth\\xc0\\xafetic 144@56'"),
    (GOOD_HEAD + GOOD_POINT.replace("Synthetic", "Synth\x07etic") + "\n",
     "line 4: not UTF-8 text without control characters: 'Synth\\x07etic 144@56'"),
    (GOOD_HEAD + GOOD_POINT.replace("bfloat16", "bfloat16" * 10) + "\n",
     "line 4: dtype 'bfloat16bfloat16bfloat16bfloat16bfloat16bfloat16bfloat16bflo...': float64"),
])
def test_a_malformed_table_file_is_refused_saying_where(tmp_path, text, error):
    path = tmp_path / "table.tsv"
    path.write_bytes(text.encode("latin-1"))  # each character a byte, as written
    router = Router(tmp_path, table_file=path)
    done = subprocess.run([str(router.binary), *router.table_args], input="", capture_output=True, text=True)
    assert done.returncode == 3
    assert done.stdout.startswith("table error: " + error), done.stdout


def test_a_well_formed_file_with_comments_crlf_lines_and_utf8_text_is_read(tmp_path):
    path = tmp_path / "table.tsv"
    text = GOOD_HEAD.replace("Synthetic GPU", "Synthetic GPU \u00e9\u4e2d\U0001f600") + "# written by hand\n\n" + GOOD_POINT
    path.write_bytes((text + "\n").replace("\n", "\r\n").encode())
    router = Router(tmp_path, table_file=path)
    [a] = router.ask(conv2d(dtype="bfloat16", layout="channels_last"))
    assert a["routes"] == {"forward": "ours", "backward_input": "upstream", "backward_weight": "upstream"}
    assert router.explain(conv2d(dtype="bfloat16", layout="channels_last"))["forward"] == \
        "ours: as the nearest measured, Synthetic 144@56"


def test_the_file_refuses_what_it_cannot_hold():
    [point] = points_of(report([row("a", "float32", "contiguous", "forward", ours=1.0, stock=2.0)]), "r", PINNED)
    assert render_runtime([point], "Synthetic GPU", "r", 90).startswith(RUNTIME_FORMAT)
    with pytest.raises(HarnessError, match="holds a tab or a line break"):
        render_runtime([dataclasses.replace(point, layer="a\tb")], "Synthetic GPU", "r", 90)
    with pytest.raises(HarnessError, match="holds a tab or a line break"):
        render_runtime([point], "Synthetic\nGPU", "r", 90)
    with pytest.raises(HarnessError, match="compute capability is 0"):
        render_runtime([point], "Synthetic GPU", "r", 0)
    with pytest.raises(HarnessError, match="no points"):
        render_runtime([], "Synthetic GPU", "r", 90)


def test_make_routing_table_with_a_table_file_leaves_the_compiled_in_table_alone(tmp_path, monkeypatch, capsys):
    header = tmp_path / "DepthwiseConvRoutingTable.h"
    monkeypatch.setattr("build_scripts.routing_table.TABLE", header)
    source = write_reports(tmp_path, SYNTHETIC_ROWS)
    table = tmp_path / "h200.tsv"
    assert main(["routing-table", "--table", str(table), str(source)]) == 0
    assert not header.exists()
    assert table.read_text().startswith(RUNTIME_FORMAT + "\n")
    assert f"DWCONV_ROUTING_TABLE={table}" in capsys.readouterr().out
    assert main(["routing-table", "--table", str(tmp_path / "missing" / "t.tsv"), str(source)]) == 1
    assert "cannot write" in capsys.readouterr().err


def test_a_machine_without_gpp_still_makes_the_table_and_says_the_check_was_skipped(tmp_path, monkeypatch, capsys):
    """The GPU machine's `routed` step makes its table there: the held-out check needs g++, the table not."""
    monkeypatch.setattr("build_scripts.routing_table.TABLE", tmp_path / "DepthwiseConvRoutingTable.h")
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: None)
    table = tmp_path / "t.tsv"
    assert main(["routing-table", "--table", str(table), str(write_reports(tmp_path, SYNTHETIC_ROWS))]) == 0
    assert table.read_text().startswith(RUNTIME_FORMAT)
    assert "held-out check skipped: it compiles the routing rule with g++" in capsys.readouterr().out


def test_a_report_timed_with_kernel_paths_off_makes_a_table_only_for_a_torch_run_so(tmp_path, monkeypatch, capsys):
    """A bench run with DWCONV_DISABLE_KERNELS timed other kernels than a torch with every path on runs: its
    table is made only where routing-table's own DWCONV_DISABLE_KERNELS names the same paths (the routed step's
    does: it inherits its session's), and says so in measured_on."""
    monkeypatch.setattr("build_scripts.routing_table.TABLE", tmp_path / "DepthwiseConvRoutingTable.h")
    source = tmp_path / "bench.json"
    source.write_text(json.dumps({**report(SYNTHETIC_ROWS), "kernel_paths_off": ["pixel", "row"]}))
    table = tmp_path / "t.tsv"
    monkeypatch.delenv("DWCONV_DISABLE_KERNELS", raising=False)
    assert main(["routing-table", "--table", str(table), str(source)]) == 1
    assert ("timed ours with kernel paths pixel, row off (DWCONV_DISABLE_KERNELS); a table routes by ours' times, "
            "and a torch with every path on runs other kernels") in capsys.readouterr().err
    monkeypatch.setenv("DWCONV_DISABLE_KERNELS", "pixel")
    assert main(["routing-table", "--table", str(table), str(source)]) == 1
    assert ("timed ours with kernel paths pixel, row off, and the table is for a torch run with "
            "DWCONV_DISABLE_KERNELS=pixel") in capsys.readouterr().err
    monkeypatch.setenv("DWCONV_DISABLE_KERNELS", "rows")
    assert main(["routing-table", "--table", str(table), str(source)]) == 1
    assert "routing-table: DWCONV_DISABLE_KERNELS: no depthwise kernel path is called 'rows'" in capsys.readouterr().err
    assert not table.exists()
    monkeypatch.setenv("DWCONV_DISABLE_KERNELS", "row, pixel")
    assert main(["routing-table", str(source)]) == 1  # the compiled-in table is every build's: every path on
    assert ("a table for a torch run with kernel paths off goes to a file (TABLE=<file>" in capsys.readouterr().err)
    assert not (tmp_path / "DepthwiseConvRoutingTable.h").exists()
    assert main(["routing-table", "--table", str(table), str(source)]) == 0
    assert "measured_on\t" + report(SYNTHETIC_ROWS)["device"] in table.read_text()
    assert ", kernel paths pixel, row off\n" in table.read_text()
    # and a report with every path on makes no table for a torch run with paths off
    assert main(["routing-table", "--table", str(table), str(write_reports(tmp_path, SYNTHETIC_ROWS))]) == 1
    assert "timed ours with kernel paths none off, and the table is for a torch run with" in capsys.readouterr().err
