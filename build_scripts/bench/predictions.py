"""Each kernel version's prediction, written down before a GPU ran it (notes/predictions.toml), and
graded against a bench report: the method's look-back (predict, change, measure, look back) in numbers.

A prediction is about a set of bench rows (layers, configurations, passes, one batch) and gives a range
for one measure:
- gain: the time of `baseline` over the time of `variant`, both timed in the same run. The defaults are
  ours without the version's kernel path, and ours: the switch measures a version against the kernels
  before it on whatever GPU the bench runs, with no second overlay.
- floor_multiple: the time of `variant` (ours) over the row's byte floor.

Everything in the file is checked against the harness when it is read (the layers, passes,
configurations, variants and kernel paths), so a prediction that names a row no bench times is refused
here, not found unmatched after the GPU session; tests/test_predictions.py checks the rest against the
host code's launches.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from .. import REPO_ROOT
from .layers import SETS, TRAINING_PASSES, problems
from .schema import (BASELINES, SEPARATOR, WITHOUT, kernel_paths_of, one_run_ms, parse_configs, parse_variants,
                     passed, problem_row_key, row_key, switched_off_paths)

PREDICTIONS_FILE = REPO_ROOT / "notes" / "predictions.toml"
# A measure's name, and whether a higher value is the better one.
MEASURES = {"gain": True, "floor_multiple": False}
FIELDS = {"version", "claim", "path", "layers", "configs", "passes", "batch", "variant", "baseline", *MEASURES}
VERSION = re.compile(r"^v\d+$")


@dataclass(frozen=True)
class Prediction:
    version: str
    claim: str  # the prediction in the notes' words, shortened
    path: str | None  # the kernel path whose kernels it is about (the version's own, where it added one)
    rows: tuple[tuple, ...]  # row keys (schema.row_key): set, layer, batch, dtype, layout, pass
    measure: str  # a key of MEASURES
    low: float
    high: float
    variant: str
    baseline: str | None  # the gain's slower side; None for floor_multiple

    def value(self, row: dict) -> float | None:
        """The measure on one row, a gain's two times from one run; None where no run timed them, or a
        variant failed its check."""
        times = one_run_ms(row, self.variants)
        if times is None or not all(passed(row, v) for v in self.variants):
            return None
        if self.measure == "floor_multiple":
            return times[self.variant] / row["floor_ms"]
        return times[self.baseline] / times[self.variant]

    @property
    def variants(self) -> tuple[str, ...]:
        return (self.variant,) if self.baseline is None else (self.variant, self.baseline)

    def range_text(self) -> str:
        return f"{self.low:g}–{self.high:g}×"

    def measured_as(self) -> str:
        if self.baseline is None:
            return f"{_variant_text(self.variant)} / floor"
        return f"{_variant_text(self.baseline)} / {_variant_text(self.variant)}"


def _variant_text(variant: str) -> str:
    return variant.replace(WITHOUT, "ours without ").replace(SEPARATOR, " + ")


def parse(text: str, kernel_paths: list[str], source: str = str(PREDICTIONS_FILE)) -> list[Prediction]:
    """The predictions of a predictions.toml text; the first entry that names what the harness does not
    know, or is malformed, is refused with its number and what is wrong."""
    try:
        entries = tomllib.loads(text).get("prediction", [])
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{source}: {err}") from None
    if not isinstance(entries, list):
        raise ValueError(f"{source}: `prediction` must be an array of tables ([[prediction]])")
    out = []
    for number, entry in enumerate(entries, 1):
        try:
            out.append(_prediction(entry, kernel_paths))
        except ValueError as err:
            raise ValueError(f"{source}: prediction {number} ({entry.get('version', 'no version')}): {err}") from None
    return out


def load(path: Path | None = None) -> list[Prediction]:
    """The predictions of `path` (default: PREDICTIONS_FILE), checked against the overlay's kernel paths."""
    from ..plan_report import kernel_path_names
    path = path or PREDICTIONS_FILE
    return parse(path.read_text(), kernel_path_names(), str(path))


def _prediction(entry: dict, kernel_paths: list[str]) -> Prediction:
    unknown = sorted(entry.keys() - FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; the fields are {', '.join(sorted(FIELDS))}")
    version, claim = entry.get("version"), entry.get("claim")
    if not isinstance(version, str) or not VERSION.match(version):
        raise ValueError(f"version must be v<number>, not {version!r}")
    if not isinstance(claim, str) or not claim.strip():
        raise ValueError("claim must say the prediction in words")
    path = entry.get("path")
    if path is not None and path not in kernel_paths:
        raise ValueError(f"no kernel path is called {path!r}; the paths are {', '.join(kernel_paths)}")
    measures = [m for m in MEASURES if m in entry]
    if len(measures) != 1:
        raise ValueError(f"give one measure of {', '.join(MEASURES)}, not {len(measures)}")
    measure = measures[0]
    low, high = _range(entry[measure])
    variant = entry.get("variant", "ours")
    baseline = entry.get("baseline", WITHOUT + path if path else None) if measure == "gain" else None
    if measure == "gain" and baseline is None:
        raise ValueError("a gain needs a baseline: name the version's path, or the baseline variant")
    if measure == "floor_multiple" and "baseline" in entry:
        raise ValueError("a floor_multiple is the variant's time over the floor: it takes no baseline")
    for name in (variant, baseline):
        if name is not None and (name in (*BASELINES, "routed") or parse_variants(name, kernel_paths) != (name,)):
            raise ValueError(f"variant {name!r}: a prediction compares ours, or ours without kernel paths")
    if variant == baseline:
        raise ValueError(f"the variant and the baseline are both {variant!r}: a gain of 1 by construction")
    return Prediction(version, " ".join(claim.split()), path, _rows(entry), measure, low, high, variant, baseline)


def _range(value) -> tuple[float, float]:
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise ValueError(f"a range is [low, high], not {value!r}")
    low, high = float(value[0]), float(value[1])
    if not 0 < low <= high:
        raise ValueError(f"the range [{low:g}, {high:g}] must have 0 < low <= high")
    return low, high


def _rows(entry: dict) -> tuple[tuple, ...]:
    """The row keys the entry's layers, configurations, passes and batch name: each must be a problem the
    bench times (layers.problems), or the entry is refused."""
    layers, passes, batch = entry.get("layers"), entry.get("passes"), entry.get("batch")
    if not isinstance(layers, list) or not layers or not all(isinstance(n, str) for n in layers):
        raise ValueError("layers must list \"<set> <layer>\" names, e.g. \"MobileNetV2 32@112\"")
    if not isinstance(passes, list) or not passes or not set(passes) <= set(TRAINING_PASSES):
        raise ValueError(f"passes must list some of {', '.join(TRAINING_PASSES)}, not {passes!r}")
    if not isinstance(batch, int) or isinstance(batch, bool):
        raise ValueError(f"batch must be a number, not {batch!r}")
    configs = entry.get("configs")
    if not isinstance(configs, list) or not configs:
        raise ValueError("configs must list dtype/layout pairs, e.g. \"bfloat16/channels_last\"")
    wanted_configs = parse_configs(",".join(configs))
    by_name = {f"{layer.set} {layer.name}": layer for layers_of_set in SETS.values() for layer in layers_of_set}
    keys = []
    for name in layers:
        layer = by_name.get(name)
        if layer is None:
            raise ValueError(f"no bench layer is called {name!r} (\"<set> <layer>\", as bench.md names them)")
        timed = {(p.dtype, p.layout): p for p in problems([layer.set], wanted_configs)
                 if p.layer == layer and p.batch == batch}
        for dtype, layout in wanted_configs:
            problem = timed.get((dtype, layout))
            if problem is None:
                raise ValueError(f"the bench does not time {name} at batch {batch} in {dtype}/{layout}")
            missing = [p for p in passes if p not in problem.passes]
            if missing:
                raise ValueError(f"{problem.label} is timed in {', '.join(problem.passes)} only, not "
                                 f"{', '.join(missing)}")
            keys += [problem_row_key(problem, p) for p in passes]
    if len(set(keys)) != len(keys):
        raise ValueError("a row is named twice")
    return tuple(keys)


@dataclass(frozen=True)
class Grade:
    prediction: Prediction
    values: tuple[float, ...]  # the measure on each of its rows the report timed and checked

    @property
    def median(self) -> float | None:
        return median(self.values) if self.values else None

    @property
    def in_range(self) -> int:
        p = self.prediction
        return sum(1 for v in self.values if p.low <= v <= p.high)

    @property
    def verdict(self) -> str:
        """held (the median in the range), better or short of it; – where no row was measured."""
        if self.median is None:
            return "–"
        p = self.prediction
        if p.low <= self.median <= p.high:
            return "held"
        above = self.median > p.high
        return "better" if above == MEASURES[p.measure] else "short"


def grade(prediction: Prediction, rows: list[dict]) -> Grade:
    wanted = set(prediction.rows)
    values = (prediction.value(r) for r in rows if row_key(r) in wanted)
    return Grade(prediction, tuple(v for v in values if v is not None))


def timed_by(prediction: Prediction, rows: list[dict], variants: list[str]) -> bool:
    """Whether a report of these rows and variants times the prediction's measure: its variants, on a row of it."""
    wanted = set(prediction.rows)
    return set(prediction.variants) <= set(variants) and any(row_key(r) in wanted for r in rows)


def _overlay_had_path(prediction: Prediction, kernel_paths: list[str]) -> bool:
    """Whether the run that times the prediction had its kernel path: among the overlay's, or switched off by
    one of its variants, which a run times only where the path is (a gain's two times come from that run)."""
    return (prediction.path is None or prediction.path in kernel_paths
            or any(prediction.path in switched_off_paths(variant) for variant in prediction.variants))


def _version_number(prediction: Prediction) -> int:
    return int(prediction.version.lstrip("v"))


def markdown_lines(report: dict, predictions: list[Prediction], paths_off: list[str]) -> list[str]:
    """bench.md's section grading the predictions this report times (none: no section). One whose kernel
    path the run's overlay did not have is named, not graded: a floor multiple needs only ours, which an
    overlay from before the version times too, with the kernels before it."""
    rows, variants, kernel_paths = report["rows"], report["settings"]["variants"], kernel_paths_of(report)
    timed = sorted((p for p in predictions if timed_by(p, rows, variants)), key=_version_number)
    if not timed:
        return []
    lines = ["", "## Predictions (notes/predictions.toml)", ""]
    if paths_off:
        return lines + [f"Not graded: this run had kernel paths off ({', '.join(paths_off)}), so ours is not the "
                        "kernels the predictions were made for."]
    before = [p for p in timed if not _overlay_had_path(p, kernel_paths)]
    graded = [grade(p, rows) for p in timed if p not in before]  # in the file's order within a version
    if before:
        versions = ", ".join(dict.fromkeys(p.version for p in before))
        lines += [f"Not graded: {len(before)} prediction{'s' * (len(before) > 1)} of {versions}, whose kernel paths "
                  "this run's overlay did not have (an overlay from before them times their rows with the kernels "
                  "they replaced)."]
    if not graded:
        return lines
    lines += [""] * bool(before) + [
        "Each version's prediction, written before any GPU ran it, against this run: the median over its rows that "
        "were timed and passed their check, held where it lies in the predicted range.", "",
        "| version | predicted | measured as | rows | median | worst – best | rows in range | verdict |",
        "| --- | --- | --- | ---: | ---: | --- | ---: | --- |"]
    for g in graded:
        p = g.prediction
        spread = "–"
        if g.values:
            worst, best = sorted((min(g.values), max(g.values)), reverse=not MEASURES[p.measure])
            spread = f"{worst:.2f}× – {best:.2f}×"
        lines.append(f"| {p.version} | {p.claim}: {p.range_text()} | {p.measured_as()} | {len(g.values)} of "
                     f"{len(p.rows)} | {'–' if g.median is None else f'{g.median:.2f}×'} | {spread} | "
                     f"{g.in_range} | {g.verdict} |")
    return lines


def rows_the_switch_leaves(prediction: Prediction, binary: Path, gpu, preamble: list[str] = ()) -> list[tuple]:
    """The prediction's rows that the host code plans alike for its two sides (the kernel-choice driver
    `binary`, for `gpu`; `preamble`: its registers lines): rows its version does not reach, where a gain
    can only be noise. The sides are the variant and the baseline, or for a floor_multiple the variant and
    the variant without the version's path (none: no row is checked)."""
    if prediction.baseline is None and prediction.path is None:
        return []
    sides = _sides(prediction)
    plans = _planned(prediction, sides, binary, gpu, preamble)
    return [key for key in prediction.rows if plans[key][0] == plans[key][1]]


def later_paths_reaching(prediction: Prediction, later_paths: list[str], binary: Path, gpu,
                         preamble: list[str] = ()) -> dict[str, list[tuple]]:
    """For each of `later_paths` (kernel paths added after the prediction's version) that changes the plan
    of either side of it on one of its rows when switched off, those rows: there the comparison holds a
    later version's work too, and the entry should switch the path off on both sides. A floor multiple
    has one side, its variant."""
    sides = _sides(prediction) if prediction.baseline is not None else (prediction.variant,)
    reaching = {}
    for path in later_paths:
        variants = [name for side in sides for name in (side, _without(side, path))]
        plans = _planned(prediction, variants, binary, gpu, preamble)
        rows = [key for key in prediction.rows
                if any(plans[key][i] != plans[key][i + 1] for i in range(0, len(variants), 2))]
        if rows:
            reaching[path] = rows
    return reaching


def _sides(prediction: Prediction) -> tuple[str, str]:
    """The two variants a prediction sets against each other (a floor multiple's: its variant, and that
    without the version's path, which its kernels serve)."""
    if prediction.baseline is not None:
        return prediction.variant, prediction.baseline
    return prediction.variant, _without(prediction.variant, prediction.path)


def _without(variant: str, path: str) -> str:
    return f"{variant}{SEPARATOR}{path}" if variant.startswith(WITHOUT) else f"{WITHOUT}{path}"


def _planned(prediction: Prediction, variants: list[str], binary: Path, gpu, preamble) -> dict[tuple, list[str]]:
    """Each of the prediction's rows: the driver's plan under each variant, in order (a step row's is its
    forward's and its backward's, both gradients asked for together)."""
    from ..plan_audit import row_call_line
    from ..plan_report import run_driver
    from .schema import problem_row
    keys, lines = [], []
    for key in prediction.rows:
        row = problem_row(_problem(key), key[5], 1.0)
        for pass_ in ("forward", "step") if key[5] == "step" else (key[5],):
            keys.append(key)
            lines += [row_call_line({**row, "pass": pass_}, gpu, variant) for variant in variants]
    answers = run_driver(binary, lines, "--plans", preamble=list(preamble))
    plans: dict[tuple, list[str]] = {key: [""] * len(variants) for key in prediction.rows}
    for n, key in enumerate(keys):
        for i in range(len(variants)):
            plans[key][i] += answers[n * len(variants) + i] + "\n"
    return plans


def _problem(key: tuple):
    set_name, layer_name, batch, dtype, layout, _ = key
    return next(p for p in problems([set_name], parse_configs(f"{dtype}/{layout}"))
                if p.layer.name == layer_name and p.batch == batch and (p.dtype, p.layout) == (dtype, layout))
