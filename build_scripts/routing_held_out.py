"""How the routing table does on layers it has not measured, from the measurements themselves.

The table reproduces every measured decision (each layer is its own nearest point), so that says
nothing of a user's layer that the bench never ran. Here each layer's points are routed by the
routing rule itself (DepthwiseConvRouting.h, compiled with g++ beside routing_held_out.cpp) from
the other layers' points only, and what the route chosen costs is read off the layer's own times:
leave-one-layer-out, both batches of a layer out together, and every set's copy of it (a layer is
its sizes, not its set's name: the same sizes measured in another set would be a distance of zero).
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT
from .errors import HarnessError
from .routing_table import DTYPES, LAYOUTS, ROUTED_PASSES, Point

RULE_INCLUDE = REPO_ROOT / "patches/files/aten/src"
RULE_HEADER = RULE_INCLUDE / "ATen/native/cuda/DepthwiseConvRouting.h"
DRIVER = Path(__file__).with_name("routing_held_out.cpp")
SLOWER_THAN_STOCK = 1.03  # the bench's run-to-run spread, as routing_table.CUDNN_MARGIN
ROUTE_NAMES = {"ours": "Ours", "cudnn": "Cudnn", "upstream": "Upstream"}  # route_name's words


@dataclass(frozen=True)
class HeldOut:
    point: Point
    route: str  # the route the other layers' points give it

    @property
    def ms(self) -> float | None:
        """What that route takes (None: not measured, e.g. cuDNN in a bench without it)."""
        return self.point.patched_ms(self.route)

    @property
    def best_ms(self) -> float:
        return self.point.patched_ms(self.point.route)

    @property
    def cost(self) -> float | None:
        """The route's time over the fastest route's."""
        return None if self.ms is None else self.ms / self.best_ms


def enum_values(name: str, header: Path = RULE_HEADER) -> dict[str, int]:
    """The numbers of a C++ `enum class name : ... { A, B, ... };` in the rule's header."""
    match = re.search(rf"enum class {name}\b[^{{]*\{{([^}}]*)\}}", header.read_text())
    if match is None:
        raise HarnessError(f"{header}: no enum class {name}")
    return {word.strip(): i for i, word in enumerate(match.group(1).split(","))}


NO_COMPILER = "compiles the routing rule with g++, which is not on PATH"


def compiler() -> str | None:
    """The g++ the check compiles the rule with, or None where there is none."""
    return shutil.which("g++")


def _build_driver(work: Path) -> Path:
    compiler_path = compiler()
    if compiler_path is None:
        raise HarnessError(f"the held-out check {NO_COMPILER}")
    binary = work / "routing_held_out"
    done = subprocess.run([compiler_path, "-std=c++17", "-O1", f"-I{RULE_INCLUDE}", str(DRIVER), "-o", str(binary)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise HarnessError(f"compiling {DRIVER.name} failed:\n{done.stderr}")
    return binary


def held_out_routes(points: list[Point]) -> list[HeldOut]:
    """Each point routed by the rule from the points of the other layers."""
    passes, dtypes, layouts, routes = (enum_values(n) for n in ("Pass", "DType", "Layout", "Route"))
    layer_ids = {sizes: i for i, sizes in enumerate(dict.fromkeys(p.sizes for p in points))}

    def head(p: Point) -> list:
        return [layer_ids[p.sizes], passes[ROUTED_PASSES[p.passname]], dtypes[DTYPES[p.dtype]],
                layouts[LAYOUTS[p.layout]], *p.kernel, *p.stride]

    lines = [f"points {len(points)}"]
    lines += [" ".join(map(str, [*head(p), f"{p.input_elements}.0", f"{p.plane_elements}.0", routes[p.route]]))
              for p in points]
    lines.append(f"queries {len(points)}")
    lines += [" ".join(map(str, [*head(p), *p.shape])) for p in points]
    with tempfile.TemporaryDirectory(prefix="dwconv-routing-") as work:
        done = subprocess.run([str(_build_driver(Path(work)))], input="\n".join(lines) + "\n", capture_output=True,
                              text=True)
    answers = done.stdout.split()
    if done.returncode != 0 or len(answers) != len(points):
        raise HarnessError(f"the held-out routing driver failed (exit {done.returncode}): {done.stderr.strip()}")
    return [HeldOut(p, ROUTE_NAMES[word]) for p, word in zip(points, answers)]


def _slower_than_stock(ms: float | None, point: Point) -> bool:
    """Whether ms is over stock's time, where stock computed the right result (else its time is no bar)."""
    return point.stock_ok and ms is not None and ms > point.stock_ms * SLOWER_THAN_STOCK


def summary(points: list[Point], worst: int = 8) -> str:
    """The held-out routes against the measured ones: how many differ, what they cost, and the
    passes made slower than stock, beside the count with every layer in the table."""
    # a pass where ours failed its check (a routed step's table, --avoid-failed-ours) has no time of ours
    # to judge a route by; it still routes its neighbours
    held = [h for h in held_out_routes(points) if h.point.ours_ok]
    others = [h for h in held if h.route != h.point.route]
    untimed = [h for h in others if h.ms is None]
    costs = [h.cost for h in held if h.cost is not None]
    geomean = math.exp(sum(map(math.log, costs)) / len(costs)) if costs else math.nan
    layers = len({p.sizes for p in points})
    lines = [
        f"held out (each of {layers} layers routed by the other layers' points; {len(points)} points"
        + (f", {len(points) - len(held)} where ours failed its check not judged" if len(held) < len(points) else "")
        + "):",
        f"  routed as measured: {len(held) - len(others)}, otherwise: {len(others)}"
        + (f" ({len(untimed)} to a route the bench did not time)" if untimed else ""),
        f"  time over the fastest route, geomean: {geomean:.3f}x",
        f"  slower than stock by over {SLOWER_THAN_STOCK - 1:.0%}: "
        f"{sum(_slower_than_stock(h.ms, h.point) for h in held)} points held out, "
        f"{sum(_slower_than_stock(h.best_ms, h.point) for h in held)} with every layer measured",
    ]
    timed_others = sorted((h for h in others if h.ms is not None), key=lambda h: -h.cost)
    if timed_others:
        lines.append("  the costliest other routes (the bench wants layers near these):")
        for h in timed_others[:worst]:
            p = h.point
            lines.append(f"    {h.cost:5.2f}x  {p.label} {p.dtype} {p.layout} {p.passname}: {h.route.lower()} "
                         f"{h.ms:.4g} ms, measured fastest {p.route.lower()} {h.best_ms:.4g} ms")
    return "\n".join(lines)
