"""Partition-quality sweep: every partitioner on a grid of skew x combiners x key counts, Pareto front marked.

Each cell is one stream (Zipf over ``keys`` distinct ids, ranks permuted, or a real data set) and one ``n``.
Every partitioner is built the way the quality targets are stated -
``create(name, n, window=60_000, slide=1_000, seed=1)`` - and fed the stream in batches of 1,000 with a
tuple counter as the time. Metrics per 1,000-tuple window, then averaged over the windows:

- balance: ``max / mean`` of the per-combiner tuple counts;
- replication: distinct (key, combiner) pairs / distinct keys (1.0 = no key split).

The replication floor of a cell is what any assignment needs to keep every window's max/mean within the
balance cap (1.10): a combiner then holds at most ``floor(1.10 * WINDOW / n)`` tuples of a window, so a key
with ``c`` tuples in the window sits on at least ``ceil(c / that)`` combiners. Where the floor is above the
replication cap, no partitioner can meet both caps; the report says so next to the cap it lists.

Dominance: ``b`` dominates ``a`` when ``b`` has a lower balance ratio by more than 2 % (``b < 0.98 a``) and no
higher replication, or a lower replication by more than 0.02 at no worse balance. The frontier of a cell is
the set of partitioners no other one dominates.
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
from router.partitioners import create

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
    "run_sweep",
    "sweep_markdown",
    "write_sweep",
]

DEFAULT_PARTITIONERS = ("dalton", "hash", "pkg", "cam", "am", "fish", "prompt", "dchoices", "wchoices")
SKEWS = (0.6, 0.8, 1.0, 1.2, 1.5, 2.0)
COMBINERS = (2, 4, 8, 16, 32)
KEY_COUNTS = (1_000, 10_000, 100_000)
WINDOW = 1_000  # tuples per metric window and per batch
BALANCE_MARGIN = 0.02  # relative
REPLICATION_MARGIN = 0.02  # absolute


@dataclass(frozen=True)
class Cell:
    """One stream and one number of combiners. ``spec`` is a workload spec (``benchmarks.workloads``)."""

    label: str
    spec: str
    n: int
    skew: float | None = None  # Zipf exponent (None for the data sets)


@dataclass
class Result:
    """Every partitioner's figures on one cell; ``frontier`` lists the non-dominated ones."""

    cell: Cell
    balance: dict[str, float] = field(default_factory=dict)
    replication: dict[str, float] = field(default_factory=dict)
    rate: dict[str, float] = field(default_factory=dict)  # tuples/s (noisy: shared machine)
    frontier: list[str] = field(default_factory=list)
    floor: float = 1.0  # replication any assignment needs for max/mean <= the balance cap in every window
    dominators: dict[str, list[str]] = field(default_factory=dict)


def grid(
    skews: Iterable[float] = SKEWS,
    ns: Iterable[int] = COMBINERS,
    key_counts: Iterable[int] = KEY_COUNTS,
    *,
    tuples: int = 100_000,
    datasets: bool = True,
    seed: int = 42,
) -> list[Cell]:
    """The sweep's cells: Zipf ``skews x ns x key_counts`` (ids permuted), then flights and words at each ``n``."""
    ns = list(ns)
    cells = [
        Cell(f"zipf s={s:g} keys={k}", f"zipf:s={s},keys={k},tuples={tuples},perm=1,seed={seed}", n, s)
        for s, n, k in itertools.product(skews, ns, key_counts)
    ]
    if datasets:
        for n in ns:
            cells.append(Cell("flights dest", f"flights:key=dest,tuples={tuples}", n))
            cells.append(Cell("words en", f"words:lang=en,tuples={tuples},seed={seed}", n))
    return cells


def _stream(spec: str) -> npt.NDArray[np.int64]:
    """The cell's keys as dense int ids (string keys are numbered)."""
    keys = np.concatenate([np.asarray(k) for k, _ in make_workload(spec).batches()])
    if keys.dtype.kind in "iu":
        return keys.astype(np.int64)
    return np.unique(keys, return_inverse=True)[1].reshape(-1).astype(np.int64)


def window_metrics(keys: npt.NDArray[np.int64], out: npt.NDArray[np.int64], n: int) -> tuple[float, float]:
    """Mean per-window max/mean load and mean replication (windows of :data:`WINDOW` tuples)."""
    imb: list[float] = []
    rep: list[float] = []
    for s in range(0, keys.shape[0], WINDOW):
        k, w = keys[s : s + WINDOW], out[s : s + WINDOW]
        c = np.bincount(w, minlength=n)
        imb.append(float(c.max() / c.mean()))
        rep.append(np.unique(k * n + w).size / np.unique(k).size)
    return float(np.mean(imb)), float(np.mean(rep))


def replication_floor(keys: npt.NDArray[np.int64], n: int, balance_cap: float = 1.10) -> float:
    """Mean over windows of the least replication with every combiner at most ``balance_cap`` x the mean load."""
    reps: list[float] = []
    for s in range(0, keys.shape[0], WINDOW):
        counts = np.unique(keys[s : s + WINDOW], return_counts=True)[1]
        room = max(1, int(balance_cap * counts.sum() / n))  # loads are whole tuples
        reps.append(float(np.maximum(1, -(-counts // room)).sum() / counts.shape[0]))
    return float(np.mean(reps))


def measure(name: str, keys: npt.NDArray[np.int64], n: int) -> tuple[float, float, float]:
    """``(balance, replication, tuples/s)`` of partitioner ``name`` on ``keys`` (batches of 1,000)."""
    part = create(name, n, window=60_000, slide=1_000, seed=1)
    times = np.arange(keys.shape[0], dtype=np.int64)
    out = np.empty(keys.shape[0], dtype=np.int64)
    t0 = time.perf_counter()
    for s in range(0, keys.shape[0], WINDOW):
        out[s : s + WINDOW] = part.assign(keys[s : s + WINDOW], times[s : s + WINDOW])
    dt = time.perf_counter() - t0
    balance, replication = window_metrics(keys, out, n)
    return balance, replication, keys.shape[0] / max(dt, 1e-9)


def dominates(b: tuple[float, float], a: tuple[float, float]) -> bool:
    """Whether figures ``b = (balance, replication)`` dominate ``a`` (the rule in the module doc)."""
    (bb, br), (ab, ar) = b, a
    return (bb < (1 - BALANCE_MARGIN) * ab and br <= ar) or (br < ar - REPLICATION_MARGIN and bb <= ab)


def dominated_by(result: Result, name: str) -> list[str]:
    """The partitioners of ``result`` that dominate ``name``."""
    mine = (result.balance[name], result.replication[name])
    return [o for o in result.balance if o != name and dominates((result.balance[o], result.replication[o]), mine)]


def caps(cell: Cell) -> tuple[float, float]:
    """Dalton's targets on a cell: max/mean <= 1.10; replication <= 1.10 (1.25 at s = 2.0 or n = 32)."""
    loose = cell.n >= 32 or (cell.skew is not None and cell.skew >= 2.0)
    return 1.10, 1.25 if loose else 1.10


def run_cell(cell: Cell, names: Sequence[str], keys: npt.NDArray[np.int64] | None = None) -> Result:
    """Measure every partitioner of ``names`` on ``cell`` and mark the frontier."""
    keys = _stream(cell.spec) if keys is None else keys
    res = Result(cell, floor=replication_floor(keys, cell.n, caps(cell)[0]))
    for name in names:
        res.balance[name], res.replication[name], res.rate[name] = measure(name, keys, cell.n)
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
            streams[cell.spec] = _stream(cell.spec)
        res = run_cell(cell, names, streams[cell.spec])
        out.append(res)
        if progress is not None:
            progress(res)
    return out


def summary(results: Sequence[Result], focus: str = "dalton") -> dict[str, object]:
    """Cells where ``focus`` is dominated or misses a cap; its worst balance and replication."""
    dominated = [
        f"{r.cell.label} n={r.cell.n}: by {', '.join(r.dominators[focus])}" for r in results if r.dominators.get(focus)
    ]
    over = []
    for r in results:
        cb, cr = caps(r.cell)
        if r.balance[focus] > cb or r.replication[focus] > cr:
            why = (
                f" (replication floor {r.floor:.3f} > cap {cr:.2f}: no partitioner meets both caps)"
                if r.floor > cr
                else ""
            )
            over.append(f"{r.cell.label} n={r.cell.n}: {r.balance[focus]:.3f} / {r.replication[focus]:.3f}{why}")
    worst_b = max(results, key=lambda r: r.balance[focus])
    worst_r = max(results, key=lambda r: r.replication[focus])
    return {
        "cells": len(results),
        "dominated": dominated,
        "over_caps": over,
        "worst_balance": f"{worst_b.cell.label} n={worst_b.cell.n}: {worst_b.balance[focus]:.3f}",
        "worst_replication": f"{worst_r.cell.label} n={worst_r.cell.n}: {worst_r.replication[focus]:.3f}",
    }


def sweep_markdown(results: Sequence[Result], focus: str = "dalton") -> str:
    """The table: one row per cell, ``balance / replication`` per partitioner, ``*`` on the frontier."""
    names = list(results[0].balance) if results else []
    head = "| stream | n | replication floor | " + " | ".join(names) + " |"
    lines = [
        "# Partition-quality sweep",
        "",
        "Per cell: mean per-1,000-tuple-window max/mean load / mean replication; `*` = on the Pareto front",
        "(not dominated: no other partitioner has a lower max/mean by more than 2 % at no higher replication, or a",
        "lower replication by more than 0.02 at no worse max/mean). Replication floor: the least replication any",
        "assignment needs to keep every window's max/mean <= 1.10.",
        "",
        head,
        "| --- | ---: | ---: |" + " --- |" * len(names),
    ]
    for r in results:
        cells = [f"{r.balance[x]:.3f} / {r.replication[x]:.3f}{' *' if x in r.frontier else ''}" for x in names]
        lines.append(f"| {r.cell.label} | {r.cell.n} | {r.floor:.3f} | " + " | ".join(cells) + " |")
    if focus in names:
        s = summary(results, focus)
        lines += ["", f"## {focus}", "", f"- cells: {s['cells']}"]
        lines.append(f"- worst max/mean: {s['worst_balance']}; worst replication: {s['worst_replication']}")
        dom = s["dominated"]
        over = s["over_caps"]
        assert isinstance(dom, list) and isinstance(over, list)
        lines.append(f"- dominated on {len(dom)} cell(s)" + (":" if dom else ""))
        lines += [f"  - {d}" for d in dom]
        lines.append(f"- over the caps on {len(over)} cell(s)" + (":" if over else ""))
        lines += [f"  - {o}" for o in over]
    return "\n".join(lines) + "\n"


def write_sweep(results: Sequence[Result], out: Path) -> Path:
    """Write ``sweep.md`` and ``sweep.json`` into ``out``; returns the markdown path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n", encoding="utf-8")
    path = out / "sweep.md"
    path.write_text(sweep_markdown(results), encoding="utf-8")
    return path
