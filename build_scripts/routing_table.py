"""`make routing-table`: the routing's measurements, from a `make bench` report.

Writes patches/files/aten/src/ATen/native/cuda/DepthwiseConvRoutingTable.h: one point
per measured layer, dtype, layout and pass (forward, backward-input, backward-weight)
naming the fastest route the patched torch has for it (Point.route): our kernel, what
upstream runs (stock torch's automatic choice), or cuDNN where upstream runs its native
depthwise kernel, which the patch set replaces with ours. DepthwiseConvRouting.h decides
every call from the nearest point, on GPUs of the kind the report was measured on (its
compute capability, kMeasuredArch); see notes/routing.md. A report measured on another torch,
without the times of ours and stock for a pass, or where ours failed its float64 check, is refused
rather than half-used; cuDNN's time counts only where cuDNN passed its check. Where a table only
times the routing of the kernels just measured (gpu-session's `routed` step, --avoid-failed-ours),
a pass where ours failed is routed elsewhere instead, and the summary names it: a kernel that is
wrong on one layer must not cost the routed run of every other.

A report measured with kernel paths switched off (DWCONV_DISABLE_KERNELS, the report's kernel_paths_off)
makes a table only for a torch run with the same paths off: routing-table refuses it unless its own
DWCONV_DISABLE_KERNELS names them (gpu-session's `routed` step passes its setting on to both), and the
table's measured_on names them.

With TABLE=<file> (render_runtime) the same points go to a file instead, which a patched torch
or the overlay loads at run time, with no rebuild: DWCONV_ROUTING_TABLE=<file>, or
torch.ops.dwconv.load_routing_table(<file>) (DepthwiseConvRouting.h's parse_routing_table reads
it). So a GPU of another kind gets its own table from a bench on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT
from .bench.report import merge, passed
from .bench.schema import SCHEMA as REPORT_SCHEMA, one_run_ms, paths_off_of
from .errors import HarnessError

TABLE = REPO_ROOT / "patches/files/aten/src/ATen/native/cuda/DepthwiseConvRoutingTable.h"
ROUTED_PASSES = {"forward": "Forward", "backward_input": "BackwardInput", "backward_weight": "BackwardWeight"}
DTYPES = {"float64": "Float64", "float32": "Float32", "float16": "Float16", "bfloat16": "BFloat16"}
LAYOUTS = {"contiguous": "Contiguous", "channels_last": "ChannelsLast"}
NATIVE_BACKEND = "CudaDepthwise2d"  # torch._C._select_conv_backend's name for upstream's depthwise kernel
# How much faster cuDNN must be than ours to take a pass upstream gives its native kernel: the
# run-to-run spread of the H100 bench (notes/performance.md), so that noise does not flip routes.
CUDNN_MARGIN = 0.03
# The compute capability of the GPU a report from before the bench recorded it (2026-11-25) was
# measured on, by the device's name.
ARCH_OF_DEVICE_NAME = {"H100": 90, "H200": 90, "A100": 80}


@dataclass(frozen=True)
class Point:
    layer: str  # the bench's set and layer
    passname: str
    dtype: str
    layout: str
    kernel: tuple[int, int]
    stride: tuple[int, int]
    shape: tuple[int, int, int, int]  # the input's N, C, H, W
    ours_ms: float
    stock_ms: float
    cudnn_ms: float | None = None  # cuDNN forced, where measured
    stock_backend: str | None = None  # what stock ran (the bench's backends.stock_forward)
    stock_ok: bool = True  # stock passed its float64 check
    ours_ok: bool = True  # ours passed its float64 check (a table with --avoid-failed-ours only)

    @property
    def label(self) -> str:
        return f"{self.layer} batch {self.shape[0]}"

    @property
    def sizes(self) -> tuple:
        """The layer without its batch: a layer two sets share (MobileNetV2's and EfficientNet-B0's
        32@112) is one layer."""
        return (self.shape[1:], self.kernel, self.stride)

    @property
    def input_elements(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2] * self.shape[3]

    @property
    def plane_elements(self) -> int:
        return self.shape[2] * self.shape[3]

    @property
    def route(self) -> str:
        """The fastest of what the patched torch can run, ours winning ties: where stock ran the
        native kernel (ours, once patched), ours or cuDNN (by more than CUDNN_MARGIN); elsewhere
        ours or stock's own choice, which is no route where it failed its float64 check (2026-11-27, H200:
        stock's cuDNN fp16 weight gradients at 4.9e-3 against 4e-3). Where ours failed its check, not
        ours: cuDNN where upstream runs its native kernel (ours, once patched) and cuDNN was measured,
        else upstream."""
        if not self.ours_ok:
            return "Cudnn" if self.stock_backend == NATIVE_BACKEND and self.cudnn_ms is not None else "Upstream"
        if self.stock_backend == NATIVE_BACKEND and self.cudnn_ms is not None:
            return "Cudnn" if self.cudnn_ms * (1 + CUDNN_MARGIN) < self.ours_ms else "Ours"
        return "Ours" if self.ours_ms <= self.stock_ms or not self.stock_ok else "Upstream"

    @property
    def measured(self) -> str:
        """The layer and its times, as the table's point carries them."""
        ours = f"ours {self.ours_ms:.4g} ms" + ("" if self.ours_ok else " (failed its float64 check)")
        return (f"{self.label} {self.dtype} {self.layout} {self.passname}: {ours}, "
                f"stock {self.stock_ms:.4g} ms" + (f" ({self.stock_backend})" if self.stock_backend else "")
                + ("" if self.stock_ok else ", failed its float64 check")
                + (f", cuDNN {self.cudnn_ms:.4g} ms" if self.cudnn_ms is not None else ""))

    def runs_ours(self, route: str) -> bool:
        """Whether the patched torch runs our kernel for this pass when routed `route`: routed to ours, or
        to upstream's own choice where that is its native kernel, ours once patched."""
        return route == "Ours" or (route == "Upstream" and self.stock_backend == NATIVE_BACKEND)

    def patched_ms(self, route: str) -> float | None:
        """What this pass takes in the patched torch when routed `route` (None: not measured)."""
        if route == "Cudnn":
            return self.cudnn_ms
        return self.ours_ms if self.runs_ours(route) else self.stock_ms


def load_report(path: Path) -> dict:
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise HarnessError(f"{path}: not a readable bench report: {err}") from None
    if report.get("schema") != REPORT_SCHEMA:
        raise HarnessError(f"{path}: schema {report.get('schema')!r}, expected {REPORT_SCHEMA!r} (a `make bench` report)")
    if report.get("settings", {}).get("cudnn_benchmark"):
        raise HarnessError(f"{path} was measured with torch.backends.cudnn.benchmark on (CUDNN_BENCHMARK=1); the table "
                           "routes for torch's default, off: make it from a run without CUDNN_BENCHMARK (a run with it "
                           "shows whether the routing holds for users who set it)")
    return report


def measured_arch(report: dict, source: str) -> int:
    """The compute capability of the report's GPU, 90 for sm_90 (major x 10 + minor)."""
    arch = report.get("arch")
    if arch is not None:
        match = re.fullmatch(r"sm_(\d+)", str(arch))
        if match is None:
            raise HarnessError(f"{source}: arch {arch!r} is not sm_<compute capability>, e.g. sm_90")
        return int(match.group(1))
    for name, capability in ARCH_OF_DEVICE_NAME.items():
        if name in report["device"]:
            return capability
    raise HarnessError(f"{source} names no arch (a bench from before 2026-11-25), and {report['device']!r} is not a "
                       f"GPU whose arch is known here ({', '.join(ARCH_OF_DEVICE_NAME)}): rerun the benchmark")


def pass_passed(row: dict, variant: str, tolerance: float | None) -> bool:
    """Whether the variant passed its float64 check on this row's pass: a check covers all of a problem's
    passes, and one that failed on another pass still passed this one if its error here is within the
    tolerance (None: the report records none, so the problem's verdict stands)."""
    if passed(row, variant):
        return True
    check = row["check"][variant]
    error = check.get("error", {}).get(row["pass"])
    return "failed" not in check and tolerance is not None and error is not None and error <= tolerance


def points_of(report: dict, source: str, pinned_version: str, avoid_failed_ours: bool = False) -> list[Point]:
    if report.get("torch") != pinned_version:
        raise HarnessError(f"{source} was measured on torch {report.get('torch')}, not the pinned {pinned_version}")
    points = []
    for row in report["rows"]:
        if row["pass"] not in ROUTED_PASSES:
            continue
        if row.get("conv") == "1d" and row["layout"] == "channels_last":
            continue  # upstream copies a transposed conv1d input to contiguous first, and so does the routing
        layer = f"{row['set']} {row['layer']}"
        label = f"{layer} batch {row['batch']}"
        # ours, stock and cuDNN as one run timed them (a merged report's rows keep each run's times)
        ms = one_run_ms(row, ("ours", "stock", "cudnn")) or one_run_ms(row, ("ours", "stock"))
        if ms is None:  # no run timed both: the row's latest times, unless they are two runs'
            ms = row.get("ms", {})
            if len(row.get("runs", ())) > 1 and all(isinstance(ms.get(v), (int, float)) for v in ("ours", "stock")):
                raise HarnessError(f"{source}: {label} {row['dtype']} {row['layout']} {row['pass']}: no one report "
                                   "timed both ours and stock; route by reports that time them together")
        tolerance = report.get("settings", {}).get("tolerance", {}).get(row["dtype"])
        ours_ok = passed(row, "ours") if not avoid_failed_ours else (
            # this pass's own error (a check covers the problem's passes), and where ours raised, its check
            # may be missing
            pass_passed(row, "ours", tolerance) and not row.get("errors", {}).get("ours"))
        if avoid_failed_ours and not ours_ok and not isinstance(ms.get("ours"), (int, float)):
            ms = {**ms, "ours": float("inf")}  # it raised before any time: routed elsewhere all the same
        if not isinstance(ms.get("ours"), (int, float)) or not isinstance(ms.get("stock"), (int, float)):
            raise HarnessError(f"{source}: {label} {row['dtype']} {row['layout']} {row['pass']} lacks the time of "
                               f"ours or of stock ({ms}); rerun the benchmark")
        if row["dtype"] not in DTYPES or row["layout"] not in LAYOUTS:
            raise HarnessError(f"{source}: {label}: unknown dtype {row['dtype']!r} or layout {row['layout']!r}")
        if not ours_ok and not avoid_failed_ours:
            raise HarnessError(f"{source}: {label} {row['dtype']} {row['layout']}: ours failed its float64 check "
                               f"({row['check']['ours']}); fix the kernel (or the tolerance) and rerun the benchmark "
                               "before routing by it")
        # cuDNN is a route only where it computed the right result
        cudnn_ms = ms.get("cudnn") if passed(row, "cudnn") else None
        points.append(Point(
            layer=layer, passname=row["pass"], dtype=row["dtype"], layout=row["layout"],
            kernel=tuple(row["kernel"]), stride=tuple(row["stride"]),
            shape=(row["batch"], row["channels"], row["height"], row["width"]),
            ours_ms=float(ms["ours"]), stock_ms=float(ms["stock"]),
            cudnn_ms=float(cudnn_ms) if isinstance(cudnn_ms, (int, float)) else None,
            stock_backend=row.get("backends", {}).get("stock_forward"), stock_ok=passed(row, "stock"),
            ours_ok=ours_ok))
    if not points:
        raise HarnessError(f"{source} has no forward or backward rows to route by")
    return points


def render(points: list[Point], measured_on: str, source: str, arch: int) -> str:
    """The table's header; `arch` is the measured GPUs' compute capability (0: nothing measured)."""
    lines = [
        "#pragma once",
        "// @generated by build_scripts/routing_table.py (`make routing-table BENCH=\"<report> ...\"`). Do not edit.",
        f"// From: {source}",
        f"// Measured on: {measured_on}",
        "// One point per measured layer and pass: the fastest route, ours (ties included), upstream's own",
        "// choice, or cuDNN where upstream runs its native kernel (ours once patched), and what was measured.",
        "// DepthwiseConvRouting.h decides each call from the nearest.",
        "",
        "#include <ATen/native/cuda/DepthwiseConvRouting.h>",
        "",
        "#include <array>",
        "",
        "namespace at::native::dwconv::routing {",
        "",
        f"inline constexpr const char* kMeasuredOn = {json.dumps(measured_on)};",
        "// The compute capability of the GPUs measured: on another kind, \"auto\" keeps upstream's choice.",
        f"inline constexpr int kMeasuredArch = {arch};",
        "",
    ]
    if not points:
        lines.append("inline constexpr std::array<MeasuredPoint, 0> kMeasuredPoints{};  // nothing measured yet")
    else:
        lines.append(f"inline constexpr std::array<MeasuredPoint, {len(points)}> kMeasuredPoints{{{{")
        for p in points:
            lines.append(
                f"    {{Pass::{ROUTED_PASSES[p.passname]}, DType::{DTYPES[p.dtype]}, Layout::{LAYOUTS[p.layout]}, "
                f"{p.kernel[0]}, {p.kernel[1]}, {p.stride[0]}, {p.stride[1]}, {p.input_elements}.0, {p.plane_elements}.0, "
                f"Route::{p.route}, {json.dumps(p.measured)}}},")
        lines.append("}};")
    lines += ["", "} // namespace at::native::dwconv::routing", ""]
    return "\n".join(lines)


# The first line of a table file (DepthwiseConvRouting.h's kRoutingTableFormat), and the names the
# file gives the rule's enums (its pass_name, dtype_name, layout_name and route_name).
RUNTIME_FORMAT = "dwconv-routing-table 1"
RUNTIME_ROUTES = {"Ours": "ours", "Cudnn": "cudnn", "Upstream": "upstream"}


def render_runtime(points: list[Point], measured_on: str, source: str, arch: int) -> str:
    """The table as a file for DWCONV_ROUTING_TABLE: the header's points, a line each, fields
    separated by tabs (the format: DepthwiseConvRouting.h, above kRoutingTableFormat)."""
    if not points:
        raise HarnessError("routing-table: no points to write: a table routes by its points")
    if not 1 <= arch <= 1000:
        raise HarnessError(f"routing-table: the measured GPU's compute capability is {arch}; a table file needs it")
    for text in (measured_on, source, *(p.measured for p in points)):
        if "\t" in text or "\n" in text or "\r" in text:
            raise HarnessError(f"routing-table: {text!r} holds a tab or a line break, which a table file cannot")
    lines = [RUNTIME_FORMAT,
             f"# @generated by build_scripts/routing_table.py (`make routing-table BENCH=... TABLE=<file>`) from {source}",
             "# Load with DWCONV_ROUTING_TABLE=<file> or torch.ops.dwconv.load_routing_table(<file>).",
             f"measured_on\t{measured_on}",
             f"measured_arch\t{arch}"]
    lines += ["\t".join(["point", p.passname, p.dtype, p.layout, *map(str, p.kernel), *map(str, p.stride),
                         str(p.input_elements), str(p.plane_elements), RUNTIME_ROUTES[p.route], p.measured])
              for p in points]
    return "\n".join(lines) + "\n"


def summary(points: list[Point]) -> str:
    by_key: dict[tuple[str, str, str], list[Point]] = {}
    for p in points:
        by_key.setdefault((p.dtype, p.layout, p.passname), []).append(p)
    rows = [f"  {d:9} {lay:14} {pas:16} ours {sum(p.route == 'Ours' for p in ps)}, "
            f"cuDNN {sum(p.route == 'Cudnn' for p in ps)}, upstream {sum(p.route == 'Upstream' for p in ps)}"
            for (d, lay, pas), ps in sorted(by_key.items())]
    failed = [f"  {p.measured}: " + ("no route avoids ours (upstream's native kernel is ours once patched, and "
                                     "cuDNN has no correct time here)" if p.runs_ours(p.route)
                                     else f"routed to {p.route.lower()}")
              for p in points if not p.ours_ok]
    if failed:
        failed.insert(0, f"ours failed its float64 check at {len(failed)} point{'s' * (len(failed) > 1)}, "
                         "routed elsewhere where it can be:")
    return "\n".join(["routing points (dtype, layout, pass: layers routed to each):", *rows, *failed])


def check_paths_off(report: dict, source: str, paths_off: list[str]) -> None:
    """Refuses reports whose ours ran with other kernel paths off than the torch the table is for runs
    with (paths_off: its DWCONV_DISABLE_KERNELS): a table routes by ours' times, and a path switched off
    changes them."""
    measured = paths_off_of(report)
    if set(measured) == set(paths_off):
        return
    if not paths_off:
        raise HarnessError(f"{source} timed ours with kernel paths {', '.join(measured)} off (DWCONV_DISABLE_KERNELS); "
                           "a table routes by ours' times, and a torch with every path on runs other kernels: rerun "
                           f"the bench without DWCONV_DISABLE_KERNELS, or set DWCONV_DISABLE_KERNELS={','.join(measured)} "
                           "here too to make a table for a torch run with them off")
    raise HarnessError(f"{source} timed ours with kernel paths {', '.join(measured) or 'none'} off, and the table is "
                       f"for a torch run with DWCONV_DISABLE_KERNELS={','.join(paths_off)}: make it from a bench run "
                       "with the same setting")


def read_points(report_paths: list[Path], pinned_version: str, avoid_failed_ours: bool = False,
                paths_off: list[str] | tuple[str, ...] = ()) -> tuple[list[Point], str, str, int]:
    """The points of one report, or of several of one card (a bench cut short, then the sets it
    left: where two measured a layer and pass, the later stands), with where they were measured,
    the reports' names and the card's compute capability. paths_off: the kernel paths the torch the
    table is for runs with switched off (its DWCONV_DISABLE_KERNELS), which the reports' ours must
    have run without, no more and no fewer; where measured_on says so."""
    sources = []
    for path in report_paths:
        try:
            sources.append(str(path.resolve().relative_to(REPO_ROOT)))
        except ValueError:
            sources.append(str(path))
    reports = [load_report(path) for path in report_paths]
    try:
        report = merge(reports, sources)
    except ValueError as err:
        raise HarnessError(f"routing-table: {err}") from None
    source = " + ".join(sources)
    check_paths_off(report, source, list(paths_off))
    points = points_of(report, source, pinned_version, avoid_failed_ours)
    arch = measured_arch(report, source)
    dates = ", ".join(sorted({r["date"] for r in reports}))
    measured_on = f"{report['device']}, torch {report['torch']}, {dates}"
    if paths_off_of(report):
        measured_on += f", kernel paths {', '.join(paths_off_of(report))} off"
    return points, measured_on, source, arch


def write_table(report_paths: list[Path], pinned_version: str, table: Path = TABLE) -> list[Point]:
    points, measured_on, source, arch = read_points(report_paths, pinned_version)
    table.write_text(render(points, measured_on, source, arch))
    return points
