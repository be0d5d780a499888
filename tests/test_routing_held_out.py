"""The routing table's held-out check (build_scripts/routing_held_out.py), on a CPU.

Each layer of a bench report is routed by the real rule (DepthwiseConvRouting.h, compiled with
g++) from the other layers' points, and the route's cost read off the layer's own times. The
synthetic reports here are test inputs, not measurements; the last test reads the committed
H100 reports the routing table comes from.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest

from build_scripts import REPO_ROOT, routing_table
from build_scripts.__main__ import main
from build_scripts.errors import HarnessError
from build_scripts.routing_held_out import enum_values, held_out_routes, summary
from build_scripts.routing_table import TABLE, points_of, read_points
from tests.test_routing_rule import PINNED, report, row

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the routing rule")

FP32 = ("float32", "contiguous", "forward")


def three_sizes(large_ours: float) -> list[dict]:
    """One filter and stride on a small, a middle and a large plane: ours wins on the first two."""
    return [row("small", *FP32, ours=1.0, stock=2.0, channels=32, size=14),
            row("middle", *FP32, ours=1.0, stock=2.0, channels=64, size=28),
            row("large", *FP32, ours=large_ours, stock=2.0, channels=256, size=56)]


def test_each_layer_is_routed_by_its_neighbours_and_costed_by_its_own_times():
    held = held_out_routes(points_of(report(three_sizes(large_ours=5.0)), "r", PINNED))
    assert [(h.point.layer, h.route, h.point.route) for h in held] == [
        ("Synthetic small", "Ours", "Ours"), ("Synthetic middle", "Ours", "Ours"),
        ("Synthetic large", "Ours", "Upstream")]  # the middle plane is the large one's nearest
    assert [h.cost for h in held] == [1.0, 1.0, 2.5]  # ours 5.0 where stock's own choice took 2.0


def test_both_batches_of_a_layer_are_held_out_together():
    rows = [row("a", *FP32, ours=1.0, stock=2.0, batch=64), row("a", *FP32, ours=1.0, stock=2.0, batch=1),
            row("b", *FP32, ours=3.0, stock=2.0, channels=96, batch=64)]
    held = held_out_routes(points_of(report(rows), "r", PINNED))
    # with its batch-64 point in, a's batch-1 point would follow it; held out, b's decides
    assert [h.route for h in held] == ["Upstream", "Upstream", "Ours"]


def test_upstream_costs_our_time_where_stock_ran_the_native_kernel():
    """In the patched torch upstream's native kernel is ours: routing there is no escape from it."""
    native = dict(stock_backend="CudaDepthwise2d")
    rows = [row("slow here", *FP32, ours=3.0, stock=1.0, cudnn=2.0, channels=960, size=7, **native),
            row("fast there", *FP32, ours=1.0, stock=2.0, cudnn=3.0, **native)]
    [slow, fast] = held_out_routes(points_of(report(rows), "r", PINNED))
    assert (slow.point.route, slow.route, slow.ms, slow.best_ms) == ("Cudnn", "Ours", 3.0, 2.0)
    assert (fast.point.route, fast.route, fast.ms) == ("Ours", "Cudnn", 3.0)
    assert slow.point.patched_ms("Upstream") == 3.0


def test_the_summary_counts_other_routes_their_cost_and_the_passes_slower_than_stock():
    text = summary(points_of(report(three_sizes(large_ours=5.0)), "r", PINNED))
    assert "each of 3 layers" in text and "3 points" in text
    assert "routed as measured: 2, otherwise: 1" in text
    assert f"geomean: {2.5 ** (1 / 3):.3f}x" in text
    assert "slower than stock by over 3%: 1 points held out, 0 with every layer measured" in text
    assert "2.50x  Synthetic large batch 64 float32 contiguous forward: ours 5 ms, measured fastest upstream 2 ms" in text


def test_a_route_the_bench_did_not_time_is_named_not_costed():
    """An older report without cuDNN forced: a cuDNN route has no time to cost."""
    native = dict(stock_backend="CudaDepthwise2d")
    rows = [row("a", *FP32, ours=3.0, stock=1.0, cudnn=1.0, **native),
            {**row("b", *FP32, ours=2.0, stock=1.0, channels=96, **native), "ms": {"ours": 2.0, "stock": 1.0}}]
    [a, b] = held_out_routes(points_of(report(rows), "r", PINNED))
    assert (b.route, b.ms, b.cost) == ("Cudnn", None, None)
    assert "(1 to a route the bench did not time)" in summary([a.point, b.point])


def test_the_enums_are_read_from_the_rule_header():
    assert enum_values("Route") == {"Upstream": 0, "Ours": 1, "Cudnn": 2}
    assert enum_values("Pass") == {"Forward": 0, "BackwardInput": 1, "BackwardWeight": 2}
    with pytest.raises(HarnessError, match="no enum class Colour"):
        enum_values("Colour")


def test_routing_table_prints_the_check_and_says_when_it_skips_it(tmp_path, monkeypatch, capsys):
    """Without g++ (a GPU machine making the table for its routed step) the table is written all the
    same and the summary says the held-out check did not run, rather than printing no check at all."""
    source = tmp_path / "bench.json"
    source.write_text(json.dumps(report(three_sizes(large_ours=5.0))))
    table = tmp_path / "table.h"
    monkeypatch.setattr(routing_table, "TABLE", table)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["routing-table", str(source)]) == 0
    printed = capsys.readouterr().out
    assert "held-out check skipped: it compiles the routing rule with g++, which is not on PATH" in printed
    assert "routed as measured" not in printed
    assert "kMeasuredPoints" in table.read_text()
    monkeypatch.undo()
    table.unlink()
    monkeypatch.setattr(routing_table, "TABLE", table)
    assert main(["routing-table", str(source)]) == 0
    printed = capsys.readouterr().out
    assert "routed as measured: 2, otherwise: 1" in printed
    assert "skipped" not in printed
    assert "kMeasuredPoints" in table.read_text()


def test_a_layer_two_sets_share_is_held_out_with_both_copies():
    """MobileNetV2 and EfficientNet-B0 both have 32@112: with one copy in, the other would be its
    own nearest point (distance zero) and the check would flatter the rule."""
    shared = dict(channels=32, size=112)
    rows = [row("32@112", *FP32, ours=3.0, stock=2.0, **shared),
            {**row("32@112", *FP32, ours=3.0, stock=2.0, **shared), "set": "EfficientNet-B0"},
            row("64@56", *FP32, ours=1.0, stock=2.0, channels=64, size=56)]
    held = held_out_routes(points_of(report(rows), "r", PINNED))
    assert [h.point.layer for h in held] == ["Synthetic 32@112", "EfficientNet-B0 32@112", "Synthetic 64@56"]
    assert [h.route for h in held] == ["Ours", "Ours", "Upstream"]  # each copy routed by 64@56 alone
    assert "each of 2 layers" in summary([h.point for h in held])


def test_the_committed_table_held_out():
    """The H200 reports of 2026-11-27 (notes/routing.md): on layers it has not measured (the 41
    layers, some in two sets), the rule routes 63 of 482 passes otherwise than measured, 2.6 % over
    the fastest route in geomean, and 17 passes come out slower than stock, where 1 does with every
    layer in the table (stock's time counts only where stock passed its float64 check)."""
    source = next(line.split(": ", 1)[1] for line in TABLE.read_text().splitlines() if line.startswith("// From: "))
    points, *_ = read_points([REPO_ROOT / s for s in source.split(" + ")], PINNED)
    held = held_out_routes(points)
    geomean = math.exp(sum(math.log(h.cost) for h in held) / len(held))
    assert (len(points), len({p.sizes for p in points}), round(geomean, 3)) == (482, 41, 1.026)
    assert sum(h.route != h.point.route for h in held) == 63
    assert sum(h.point.stock_ok and h.ms > h.point.stock_ms * 1.03 for h in held) == 17
