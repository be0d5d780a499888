"""The bench report's rows (schema dwconv-bench/1): run.py writes them; report.py and
build_scripts/routing_table.py read them. One row is one problem and pass:

  set, layer, conv ("1d"/"2d"), batch, channels, height, width, kernel [kh, kw],
  stride [sh, sw], padding [ph, pw], bias, dtype, layout, pass,
  bytes, floor_ms            what the pass must move, and that over the copy bandwidth
  macs, compute_floor_ms     its multiply-adds, and those over the fp32 FMA rate (null when
                             the run did not measure it)
  ms {variant: ms | null}    median per run; null where it failed (errors says why). The
                             variants: VARIANTS, and ours-without-<kernel path> (variants.py)
  graph {variant: bool}      timed by CUDA-graph replay (else eagerly)
  check {variant: {...}}     the float64 check: error per pass and ok, or failed
  backends, buffer_sets      what stock selected; how many buffer sets rotated

conv1d rows are the 2D problem torch runs for them: height 1, kernel [1, k].

report.merge gives each row of a merged report `runs`: the times (ms) of each report that timed it, in
the order merged; the row's ms holds the latest time of each variant.

A run given a time limit (stop_after_s) that stopped before its last problem also has
  cut_short {problems_done, problems, stop_after_s, next}   next: the first problem not measured

and kernel_paths_off lists the kernel paths switched off in the process (DWCONV_DISABLE_KERNELS), which
ours and routed ran without (absent before 2026-12-07, when the variants switched every path back on).
A bench-models report has it too; one from before then does not, though its overlay ran without any
paths its process's DWCONV_DISABLE_KERNELS named.
"""

from __future__ import annotations

import hashlib
import re

from .floor import compute_floor_ms, floor_ms, pass_bytes, pass_macs
from .layers import CONFIG_DTYPES, CONFIG_LAYOUTS, COVERAGE_CONFIGS_2D, Problem

SCHEMA = "dwconv-bench/1"
VARIANTS = ("stock", "cudnn", "native", "ours", "routed")
BASELINES = ("stock", "cudnn", "native")  # upstream's own paths, timed beside ours; not the patch set's
WITHOUT = "ours-without-"
LOOK_BACK = "look-back"  # VARIANTS=look-back: ours, and ours without each kernel path


def paths_off_of(report: dict) -> list[str]:
    """The kernel paths ours and routed ran without in the report's run ([] for a report from before they
    were recorded: none were then)."""
    return list(report.get("kernel_paths_off") or [])


def kernel_paths_of(report: dict) -> list[str]:
    """The kernel paths the report's overlay had ([] for a report from before they were recorded, 2026-12-08:
    its overlay is taken to have none of those added since)."""
    return list(report.get("kernel_paths") or [])


def switched_off_path(variant: str) -> str | None:
    """The kernel path an ours-without-<path> variant switches off (<path>+<path>: several
    together, SEPARATOR-joined); None for the others."""
    return variant[len(WITHOUT):] if variant.startswith(WITHOUT) else None


def row_key(row: dict) -> tuple:
    """A row's problem and pass: two reports' rows of one key are one measurement, the later standing."""
    return row["set"], row["layer"], row["batch"], row["dtype"], row["layout"], row["pass"]


def problem_row_key(problem: Problem, passname: str) -> tuple:
    """The row_key of a problem's pass, before any row is made of it."""
    return problem.layer.set, problem.layer.name, problem.batch, problem.dtype, problem.layout, passname


def one_run_ms(row: dict, variants) -> dict | None:
    """The times of the last run that timed every one of `variants` on this row (a merged report's rows keep
    each run's times in `runs`; another row's only run is its own), or None where no run timed them all: a
    ratio of two variants' times is read from one run, as the method takes them, never across runs."""
    for ms in reversed(row.get("runs") or [row["ms"]]):
        if all(ms.get(v) for v in variants):
            return ms
    return None


def passed(row: dict, variant: str) -> bool:
    """Whether the variant passed its float64 check on this row's problem (no check recorded: yes)."""
    return row.get("check", {}).get(variant, {}).get("ok", True)


SEPARATOR = "+"


def switched_off_paths(variant: str) -> list[str]:
    """The kernel paths an ours-without-<path>[+<path>...] variant switches off; [] for the others."""
    path = switched_off_path(variant)
    return path.split(SEPARATOR) if path else []


def comma_separated(text: str) -> list[str]:
    """SETS=a,b and VARIANTS=a,b: the names, spaces and empty items dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def parse_variants(text: str, kernel_paths: list[str], paths_off: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
    """VARIANTS=a,b: names of VARIANTS, or ours-without-<path> for a path of kernel_paths (the
    overlay's; <path>+<path> switches several off together, to look back past a newer path that
    took an older one's passes), or look-back for ours and ours without each path. Empty: VARIANTS.
    paths_off: the paths already off in the process (DWCONV_DISABLE_KERNELS); look-back leaves them out,
    and an ours-without-<path> of one is refused, since it would time ours again under another name."""
    names = []
    for name in comma_separated(text):
        paths = switched_off_paths(name)
        already_off = [path for path in paths if path in paths_off]
        if already_off:
            raise ValueError(f"variant {name!r}: {', '.join(already_off)} {'is' if len(already_off) == 1 else 'are'} "
                             f"already off in this process (DWCONV_DISABLE_KERNELS={','.join(paths_off)}), so it "
                             "would time ours again: leave it out, or the path out of DWCONV_DISABLE_KERNELS")
        if name == LOOK_BACK:
            names += ["ours", *(WITHOUT + path for path in kernel_paths if path not in paths_off)]
        elif name in VARIANTS or (paths and set(paths) <= set(kernel_paths)):
            names.append(name)
        else:
            raise ValueError(f"unknown variant {name!r}; the variants are {', '.join(VARIANTS)}, "
                             f"{WITHOUT}<path> for a path of {', '.join(kernel_paths)} (several joined by "
                             f"{SEPARATOR}), and {LOOK_BACK} (ours and ours without each path)")
    return tuple(dict.fromkeys(names)) or VARIANTS


def kernel_paths_off(text: str, kernel_paths: list[str]) -> list[str]:
    """DWCONV_DISABLE_KERNELS=a,b as the overlay reads it (split_kernel_path_list: items between commas, spaces
    around them dropped): the paths named, in kernel_paths' order; a name that is no kernel path is refused,
    as the overlay refuses it."""
    named = [item.strip(" ") for item in text.split(",") if item.strip(" ")]
    unknown = [name for name in named if name not in kernel_paths]
    if unknown:
        raise ValueError(f"DWCONV_DISABLE_KERNELS: no depthwise kernel path is called {', '.join(map(repr, unknown))}; "
                         f"the paths are {', '.join(kernel_paths)}")
    return [path for path in kernel_paths if path in named]


def ends_in_time(elapsed_s: float, longest_problem_s: float, stop_after_s: float | None) -> bool:
    """Whether a problem started elapsed_s into the run, taking as long as the longest so far,
    ends within stop_after_s (None: no limit)."""
    return stop_after_s is None or elapsed_s + longest_problem_s <= stop_after_s


def problem_row(problem: Problem, passname: str, bandwidth_bytes_per_ms: float,
                macs_per_ms: float | None = None) -> dict:
    layer = problem.layer
    return {
        "set": layer.set, "layer": layer.name, "conv": f"{layer.dims}d", "batch": problem.batch,
        "channels": layer.channels, "height": 1 if layer.conv1d else layer.length, "width": layer.length,
        "kernel": [1 if layer.conv1d else layer.kernel, layer.kernel],
        "stride": [1 if layer.conv1d else layer.stride, layer.stride],
        "padding": [0 if layer.conv1d else layer.pad, layer.pad],
        "bias": layer.bias, "dtype": problem.dtype, "layout": problem.layout, "pass": passname,
        "bytes": pass_bytes(problem, passname), "floor_ms": floor_ms(problem, passname, bandwidth_bytes_per_ms),
        "macs": pass_macs(problem, passname),
        "compute_floor_ms": compute_floor_ms(problem, passname, macs_per_ms) if macs_per_ms else None,
        "ms": {}, "graph": {}, "errors": {}, "check": {}, "backends": {}, "buffer_sets": 0,
    }


MAX_REPORT_NAME = 120  # file systems allow 255 bytes a name; a long VARIANTS list alone passed that


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-")


def parse_configs(text: str) -> tuple[tuple[str, str], ...] | None:
    """CONFIGS: comma-separated dtype/layout pairs for the 2D layers ("float32/channels_last"), or
    "coverage" for COVERAGE_CONFIGS_2D; empty gives None, the issue's CONFIGS_2D."""
    words = comma_separated(text)
    if words == ["coverage"]:
        return COVERAGE_CONFIGS_2D
    configs = []
    for word in words:
        dtype, _, layout = word.partition("/")
        if dtype not in CONFIG_DTYPES or layout not in CONFIG_LAYOUTS:
            raise ValueError(f"unknown configuration {word!r}: CONFIGS takes 'coverage' or dtype/layout pairs, "
                             f"dtype one of {', '.join(CONFIG_DTYPES)} and layout one of {', '.join(CONFIG_LAYOUTS)}")
        configs.append((dtype, layout))
    return tuple(dict.fromkeys(configs)) or None


def configs_text(configs_2d: tuple[tuple[str, str], ...] | None) -> str:
    """What parse_configs reads back as configs_2d ("" for the issue's)."""
    return ",".join(f"{dtype}/{layout}" for dtype, layout in configs_2d or ())


def report_file_name(sets: list[str], variants: list[str], configs: list[str] = (), kind: str = "bench") -> str:
    """<kind>-<sets>-<variants>[-<configs>].json, the sets (or models), variants and 2D configurations (where
    not the issue's) it ran; a name too long for a file system keeps its start and ends in a hash of the
    whole (the report holds the full lists)."""
    stem = "-".join([kind, *map(slug, sets), *map(slug, variants), *map(slug, configs)])
    if len(stem) > MAX_REPORT_NAME:
        stem = stem[:MAX_REPORT_NAME - 13] + "-" + hashlib.sha256(stem.encode()).hexdigest()[:12]
    return stem + ".json"


# `make bench-models` (model_run.py): whole networks, its report (model_report.py) and its settings.
MODELS_SCHEMA = "dwconv-model-bench/1"
MODEL_NAMES = ("MobileNetV2", "EfficientNet-B0", "ConvNeXt-T")  # models.py builds them
MODEL_VARIANTS = ("stock", "cudnn", "ours", "routed")


def parse_models(text: str) -> list[str] | None:
    """MODELS=a,b: names of MODEL_NAMES; empty gives None, all of them."""
    names = comma_separated(text)
    unknown = [name for name in names if name not in MODEL_NAMES]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; the models are {', '.join(MODEL_NAMES)}")
    return list(dict.fromkeys(names)) or None


def parse_model_variants(text: str) -> tuple[str, ...]:
    """VARIANTS=a,b for bench-models: names of MODEL_VARIANTS, stock first where not named (every figure
    is relative to it, and the check holds each variant to its error); empty gives all of them."""
    names = comma_separated(text)
    unknown = [name for name in names if name not in MODEL_VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown} for bench-models; its variants are {', '.join(MODEL_VARIANTS)}")
    if names and "stock" not in names:
        names.insert(0, "stock")
    return tuple(dict.fromkeys(names)) or MODEL_VARIANTS
