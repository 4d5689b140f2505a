"""Partition-quality sweep: every partitioner on a grid of skew x combiners x key counts x micro-batch sizes.

Each cell is one stream (Zipf over ``keys`` distinct ids, ranks permuted, or a real data set), one ``n`` and
one micro-batch size ``W`` (tuples). Every partitioner is built the way the shipped configurations tie the
route to the Spark trigger - ``create(name, n, window=12 W, slide=W, seed=1)`` - and fed the stream in router
batches of random sizes (100..5,000 tuples: :func:`router.choose.measure.unaligned_batches`; they do not line
up with the micro-batches) with a tuple counter as the time. Metrics per micro-batch of ``W`` tuples (whole
micro-batches only), then averaged:

- balance: ``max / mean`` of the per-combiner tuple counts;
- replication: distinct (key, combiner) pairs / distinct keys = shuffled partials per key and micro-batch;
- floor: the least replication any assignment keeping each micro-batch's max/mean <= 1.05 needs, knowing
  that micro-batch's exact key counts (:func:`router.partitioners.metrics.replication_floor`).

Targets (Dalton): balance <= 1.05 and replication <= floor + 0.05 in every cell, dominated nowhere.
Dominance (docs/partitioners.md): ``b`` dominates ``a`` when ``b`` has a lower balance by more than 2 %
(``b < 0.98 a``) at no more than 0.005 higher replication, or a lower replication by more than 0.02 at a
balance no more than 0.01 above ``a``'s. The frontier of a cell is the set no other partitioner dominates.

``aligned=True`` is the earlier measurement, kept as a regression: batches of exactly ``W`` tuples, aligned
with the metric's window (with ``W = 1,000``: each 1,000-tuple batch measured alone).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from benchmarks.workloads import make_workload
from router.choose.measure import unaligned_batches
from router.partitioners import create
from router.partitioners.metrics import BALANCE_TARGET
from router.partitioners.metrics import measure as measure_windows
from router.partitioners.metrics import replication_floor as floor_series

__all__ = [
    "DEFAULT_PARTITIONERS",
    "Cell",
    "Result",
    "caps",
    "dominated_by",
    "dominates",
    "grid",
    "replication_floor",
    "measure",
    "micro_batch_metrics",
    "run_sweep",
    "stream_keys",
    "sweep_markdown",
    "write_sweep",
]

DEFAULT_PARTITIONERS = ("dalton", "hash", "pkg", "cam", "am", "fish", "prompt", "dchoices", "wchoices")
SKEWS = (0.6, 0.8, 1.0, 1.2, 1.5, 2.0)
COMBINERS = (2, 4, 8, 16, 32)
KEY_COUNTS = (1_000, 10_000, 100_000)
WINDOWS = (5_000, 20_000, 100_000)  # micro-batch sizes W (tuples)
MICRO_BATCHES = 5  # at least this many whole micro-batches per cell
BALANCE_MARGIN = 0.02  # relative
BALANCE_SLACK = 0.01  # absolute: "at balance no worse than 0.01 above"
REPLICATION_MARGIN = 0.02  # absolute
REPLICATION_SLACK = 0.005  # absolute: "at no more than 0.005 higher replication"
REPLICATION_ALLOWANCE = 0.05  # Dalton's target: replication <= floor + this


@dataclass(frozen=True)
class Cell:
    """One stream and one number of combiners. ``spec`` is a workload spec (``benchmarks.workloads``)."""

    label: str
    spec: str
    n: int
    skew: float | None = None  # Zipf exponent (None for the data sets)
    window: int = 20_000  # micro-batch size W (tuples): slide = W, window = 12 W, metric per W
    aligned: bool = False  # batches of exactly W tuples (the earlier per-batch measurement), not random ones
    slides: int = 1  # slides per micro-batch: slide = W / slides (a route whose slide is shorter than the trigger)


@dataclass
class Result:
    """Every partitioner's figures on one cell; ``frontier`` lists the non-dominated ones."""

    cell: Cell
    balance: dict[str, float] = field(default_factory=dict)
    replication: dict[str, float] = field(default_factory=dict)
    rate: dict[str, float] = field(default_factory=dict)  # tuples/s (noisy: shared machine)
    frontier: list[str] = field(default_factory=list)
    floor: float = 1.0  # least replication any assignment needs for max/mean <= 1.05 in every micro-batch
    dominators: dict[str, list[str]] = field(default_factory=dict)


def grid(
    skews: Iterable[float] = SKEWS,
    ns: Iterable[int] = COMBINERS,
    key_counts: Iterable[int] = KEY_COUNTS,
    *,
    windows: Iterable[int] = WINDOWS,
    tuples: int = 100_000,
    datasets: bool = True,
    seed: int = 42,
) -> list[Cell]:
    """The sweep's cells: Zipf ``skews x ns x key_counts`` (ids permuted), then flights and words at each ``n``.

    Each at every micro-batch size of ``windows`` (streams of at least :data:`MICRO_BATCHES` micro-batches).
    """
    ns = list(ns)
    cells = []
    for w in windows:
        size = max(tuples, MICRO_BATCHES * w)
        cells += [
            Cell(f"zipf s={s:g} keys={k}", f"zipf:s={s},keys={k},tuples={size},perm=1,seed={seed}", n, s, w)
            for s, n, k in itertools.product(skews, ns, key_counts)
        ]
        if datasets:
            for n in ns:
                cells.append(Cell("flights dest", f"flights:key=dest,tuples={size}", n, window=w))
                cells.append(Cell("words en", f"words:lang=en,tuples={size},seed={seed}", n, window=w))
    return cells


def stream_keys(spec: str) -> npt.NDArray[np.int64]:
    """The cell's keys as dense int ids (string keys are numbered)."""
    keys = np.concatenate([np.asarray(k) for k, _ in make_workload(spec).batches()])
    if keys.dtype.kind in "iu":
        return keys.astype(np.int64)
    return np.unique(keys, return_inverse=True)[1].reshape(-1).astype(np.int64)


def micro_batch_metrics(
    keys: npt.NDArray[np.int64], out: npt.NDArray[np.int64], n: int, window: int
) -> tuple[float, float]:
    """Mean per-micro-batch max/mean load and mean replication (whole micro-batches of ``window`` tuples)."""
    full = keys.shape[0] // window * window
    index = np.arange(full, dtype=np.int64) // window
    series = measure_windows(keys[:full], out[:full], index, n)
    return float(series.ratio.mean()), float(series.replication.mean())


def replication_floor(keys: npt.NDArray[np.int64], n: int, window: int, target: float = BALANCE_TARGET) -> float:
    """Mean over whole micro-batches of the least replication keeping every combiner within ``target`` x mean."""
    full = keys.shape[0] // window * window
    index = np.arange(full, dtype=np.int64) // window
    return float(floor_series(keys[:full], index, n, target=target).mean())


def measure(
    name: str, keys: npt.NDArray[np.int64], n: int, window: int = 20_000, *, aligned: bool = False, slides: int = 1
) -> tuple[float, float, float]:
    """``(balance, replication, tuples/s)`` of partitioner ``name`` on ``keys``, micro-batches of ``window``.

    The partitioner's slide is ``window / slides`` (its window 12 slides): ``slides = 1`` is a route whose slide
    is the Spark trigger.
    """
    slide = max(1, window // slides)
    part = create(name, n, window=12 * slide, slide=slide, seed=1)
    times = np.arange(keys.shape[0], dtype=np.int64)
    out = np.empty(keys.shape[0], dtype=np.int64)
    size = keys.shape[0]
    batches = [(a, min(a + window, size)) for a in range(0, size, window)] if aligned else unaligned_batches(size)
    t0 = time.perf_counter()
    for a, b in batches:
        out[a:b] = part.assign(keys[a:b], times[a:b])
    dt = time.perf_counter() - t0
    balance, replication = micro_batch_metrics(keys, out, n, window)
    return balance, replication, size / max(dt, 1e-9)


def dominates(b: tuple[float, float], a: tuple[float, float]) -> bool:
    """Whether figures ``b = (balance, replication)`` dominate ``a`` (the rule in the module doc)."""
    (bb, br), (ab, ar) = b, a
    return (bb < (1 - BALANCE_MARGIN) * ab and br <= ar + REPLICATION_SLACK) or (
        br < ar - REPLICATION_MARGIN and bb <= ab + BALANCE_SLACK
    )


def dominated_by(result: Result, name: str) -> list[str]:
    """The partitioners of ``result`` that dominate ``name``."""
    mine = (result.balance[name], result.replication[name])
    return [o for o in result.balance if o != name and dominates((result.balance[o], result.replication[o]), mine)]


def caps(result: Result) -> tuple[float, float]:
    """Dalton's targets on a cell: max/mean <= 1.05; replication <= the cell's floor + 0.05."""
    return BALANCE_TARGET, result.floor + REPLICATION_ALLOWANCE


def run_cell(cell: Cell, names: Sequence[str], keys: npt.NDArray[np.int64] | None = None) -> Result:
    """Measure every partitioner of ``names`` on ``cell`` and mark the frontier."""
    keys = stream_keys(cell.spec) if keys is None else keys
    res = Result(cell, floor=replication_floor(keys, cell.n, cell.window))
    for name in names:
        res.balance[name], res.replication[name], res.rate[name] = measure(
            name, keys, cell.n, cell.window, aligned=cell.aligned, slides=cell.slides
        )
    for name in names:
        res.dominators[name] = dominated_by(res, name)
    res.frontier = [name for name in names if not res.dominators[name]]
    return res


def run_sweep(
    cells: Sequence[Cell], names: Sequence[str] = DEFAULT_PARTITIONERS, progress: Callable[[Result], None] | None = None
) -> list[Result]:
    """Run every cell (streams are generated once per spec and reused across ``n``)."""
    streams: dict[str, npt.NDArray[np.int64]] = {}
    out = []
    for cell in cells:
        if cell.spec not in streams:
            streams[cell.spec] = stream_keys(cell.spec)
        res = run_cell(cell, names, streams[cell.spec])
        out.append(res)
        if progress is not None:
            progress(res)
    return out


def summary(results: Sequence[Result], focus: str = "dalton") -> dict[str, object]:
    """Cells where ``focus`` is dominated or misses a cap; its worst balance and replication."""
    dominated = [f"{_where(r)}: by {', '.join(r.dominators[focus])}" for r in results if r.dominators.get(focus)]
    over = []
    for r in results:
        cb, cr = caps(r)
        if r.balance[focus] > cb or r.replication[focus] > cr:
            over.append(f"{_where(r)}: {r.balance[focus]:.3f} / {r.replication[focus]:.3f} (floor {r.floor:.3f})")
    worst_b = max(results, key=lambda r: r.balance[focus])
    worst_r = max(results, key=lambda r: r.replication[focus] - r.floor)
    return {
        "cells": len(results),
        "dominated": dominated,
        "over_caps": over,
        "worst_balance": f"{_where(worst_b)}: {worst_b.balance[focus]:.3f}",
        "worst_replication": f"{_where(worst_r)}: {worst_r.replication[focus]:.3f} (floor {worst_r.floor:.3f})",
    }


def _slide_note(cell: Cell) -> str:
    return f" slide W/{cell.slides}" if cell.slides > 1 else ""


def _where(r: Result) -> str:
    return f"{r.cell.label} n={r.cell.n} W={r.cell.window}{_slide_note(r.cell)}"


def sweep_markdown(results: Sequence[Result], focus: str = "dalton") -> str:
    """The table: one row per cell, ``balance / replication`` per partitioner, ``*`` on the frontier."""
    names = list(results[0].balance) if results else []
    head = "| stream | n | W | floor | " + " | ".join(names) + " |"
    lines = [
        "# Partition-quality sweep",
        "",
        "Per cell: mean per-micro-batch max/mean load / mean replication (shuffled partials per key and",
        "micro-batch of W tuples; random router batches of 100-5,000 tuples; slide = W, window = 12 W);",
        "`*` = on the Pareto front (not dominated: no other partitioner has a lower max/mean by more than 2 % at",
        "no more than 0.005 higher replication, or a lower replication by more than 0.02 at a max/mean no more",
        "than 0.01 higher). Floor: the least replication any assignment needs to keep every micro-batch's",
        "max/mean <= 1.05, knowing its exact key counts.",
        "",
        head,
        "| --- | ---: | ---: | ---: |" + " --- |" * len(names),
    ]
    for r in results:
        cells = [f"{r.balance[x]:.3f} / {r.replication[x]:.3f}{' *' if x in r.frontier else ''}" for x in names]
        w = f"{r.cell.window}{' aligned' if r.cell.aligned else ''}{_slide_note(r.cell)}"
        lines.append(f"| {r.cell.label} | {r.cell.n} | {w} | {r.floor:.3f} | " + " | ".join(cells) + " |")
    if focus in names:
        s = summary(results, focus)
        lines += ["", f"## {focus}", "", f"- cells: {s['cells']}"]
        lines.append(f"- worst max/mean: {s['worst_balance']}; worst replication: {s['worst_replication']}")
        dom = s["dominated"]
        over = s["over_caps"]
        assert isinstance(dom, list) and isinstance(over, list)
        lines.append(f"- dominated on {len(dom)} cell(s)" + (":" if dom else ""))
        lines += [f"  - {d}" for d in dom]
        lines.append(f"- over the targets (max/mean 1.05, floor + 0.05) on {len(over)} cell(s)" + (":" if over else ""))
        lines += [f"  - {o}" for o in over]
    return "\n".join(lines) + "\n"


def write_sweep(results: Sequence[Result], out: Path) -> Path:
    """Write ``sweep.md`` and ``sweep.json`` into ``out``; returns the markdown path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n", encoding="utf-8")
    path = out / "sweep.md"
    path.write_text(sweep_markdown(results), encoding="utf-8")
    return path
