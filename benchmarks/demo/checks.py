"""What the report measures, from the topics' contents and the Spark observability log.

- routing quality per metric window (docs/partitioners.md "Metrics", via :mod:`router.choose.measure`) from the
  combiner topic: each routed record's key, event time and partition (= combiner);
- delivery: every input record routed exactly once (distinct source positions = records produced);
- Spark: shuffled partials, straggler ratio (max / median combiner task time) per micro-batch;
- exactness: Spark's last result per (window, key) against a direct computation over the produced input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.demo.pipeline import PipelineRun
from benchmarks.demo.source import DemoInput
from router.choose.measure import WindowMetrics, summarise, window_metrics
from spark_consumers.observability import BatchStats

__all__ = [
    "Exactness",
    "delivery",
    "exactness",
    "record_max_mean",
    "weighted_record_max_mean",
    "record_skew",
    "reference_aggregates",
    "routing_quality",
    "spark_summary",
    "sync_summary",
]

Agg = tuple[int, float, float, float]  # count, sum, min, max


def routing_quality(run: PipelineRun, n: int, m: int, width_ms: float) -> tuple[WindowMetrics, dict[str, float]]:
    """Per-window metrics of the combiner topic's contents and their mean / p95 summary.

    The window is the micro-batch's span (``width_ms`` = the trigger, in event time). Besides the summary of
    :func:`router.choose.measure.summarise`: ``partials_mean``, the mean (key, combiner) pairs per window (the
    partials the combiners ship for it) and ``partials_floor_mean``, the fewest any assignment keeping each
    window's max/mean <= 1.05 needs (the floor times the window's distinct keys).
    """
    recs = run.combiner_records
    keys = np.array([r["k"] for r in recs], dtype=object)
    times = np.array([r["t"] for r in recs], dtype=np.int64)
    comb = np.array([r["c"] for r in recs], dtype=np.int64)
    order = np.argsort(times, kind="stable")
    index = np.floor_divide(times[order], int(width_ms))
    w = window_metrics(keys[order], comb[order], index, width_ms, n, m, 1.0)
    summary = summarise(w)
    summary["partials_mean"] = float(np.mean(w.gamma)) if w.gamma.size else math.nan
    summary["partials_floor_mean"] = float(np.mean(w.floor * w.distinct)) if w.floor.size else math.nan
    return w, summary


def delivery(run: PipelineRun) -> dict[str, int]:
    """Routed records, distinct source positions, duplicates, dead letters, and what the workers counted."""
    positions = {(r["tp"], r["p"], r["o"]) for r in run.combiner_records}
    return {
        "produced": run.records,
        "routed_records": len(run.combiner_records),
        "distinct_positions": len(positions),
        "duplicates": len(run.combiner_records) - len(positions),
        "dead_letters": run.dead_letters,
        "worker_routed": int(sum(w.tuples_out for w in run.workers)),
    }


def spark_summary(batches: list[BatchStats], n: int = 0) -> dict[str, float]:
    """Totals and per-batch means over the micro-batches that read records (``n``: the combiners).

    ``record_max_mean`` is the mean of each micro-batch's combiner records max/mean weighted by its records.
    """
    data = [b for b in batches if b.input_rows > 0]
    ratios = [b.straggler_ratio for b in data if b.straggler_ratio is not None]
    task_max = [max(b.combiner_task_ms) for b in data if b.combiner_task_ms]
    skew = [record_skew(b) for b in data if b.combiner_records]
    spread = weighted_record_max_mean(data, n) if n else None
    return {
        "batches": float(len(data)),
        "input_rows": float(sum(b.input_rows for b in data)),
        "shuffled_partials": float(sum(b.shuffled_partials for b in data)),
        "partials_per_record": sum(b.shuffled_partials for b in data) / max(1, sum(b.input_rows for b in data)),
        "partials_per_batch": float(np.mean([b.shuffled_partials for b in data])) if data else math.nan,
        "record_max_mean": math.nan if spread is None else spread,
        "straggler_mean": float(np.mean(ratios)) if ratios else math.nan,
        "straggler_max": float(np.max(ratios)) if ratios else math.nan,
        "record_skew_mean": float(np.mean(skew)) if skew else math.nan,
        "max_task_ms_mean": float(np.mean(task_max)) if task_max else math.nan,
        "batch_ms_mean": float(np.mean([b.batch_ms for b in data])) if data else math.nan,
        "rows_dropped_by_watermark": float(sum(b.rows_dropped_by_watermark for b in batches)),
    }


def record_skew(b: BatchStats) -> float:
    """The ratio max / median of records read per combiner task in one micro-batch (straggler ratio of pure work)."""
    med = float(np.median(b.combiner_records))
    return max(b.combiner_records) / med if med > 0 else math.nan


def record_max_mean(b: BatchStats, n: int) -> float:
    """The ratio max / mean of records read per combiner task in one micro-batch, over at least ``n`` tasks.

    A combiner partition without records in the micro-batch has no task and counts as an empty one.
    """
    total = float(sum(b.combiner_records))
    return max(b.combiner_records) * max(n, len(b.combiner_records)) / total if total > 0 else math.nan


def weighted_record_max_mean(batches: list[BatchStats], n: int) -> float | None:
    """:func:`record_max_mean` over the micro-batches with records, weighted by their records (``None``: none).

    A trailing micro-batch of 16 records (max/mean 4.5 however they are placed) must not outweigh the ones that
    hold the work.
    """
    spread_of = [b for b in batches if b.combiner_records and sum(b.combiner_records)]
    if not spread_of:
        return None
    weights = [sum(b.combiner_records) for b in spread_of]
    return float(np.average([record_max_mean(b, n) for b in spread_of], weights=weights))


def sync_summary(run: PipelineRun) -> dict[str, float]:
    """Dalton sync traffic on the run's control topic: SYNC messages, GLOBAL rounds, most members in a round."""
    syncs = [m for m in run.control if m["type"] == "sync"]
    rounds = [m for m in run.control if m["type"] == "global"]
    return {
        "sync_messages": float(len(syncs)),
        "senders": float(len({m["instance"] for m in syncs})),
        "global_rounds": float(len(rounds)),
        "max_members": float(max((m["members"] for m in rounds), default=0)),
    }


def reference_aggregates(data: DemoInput, window_ms: int) -> dict[tuple[int, str], Agg]:
    """Count, sum, min, max per (tumbling window start, key), computed directly from the produced input."""
    import pandas as pd

    frame = pd.DataFrame({"w": data.times - data.times % window_ms, "k": data.keys, "x": data.values})
    g = frame.groupby(["w", "k"], sort=False)["x"].agg(["count", "sum", "min", "max"])
    return {
        (int(w), str(k)): (int(c), float(s), float(lo), float(hi))
        for (w, k), c, s, lo, hi in zip(g.index, g["count"], g["sum"], g["min"], g["max"], strict=True)
    }


@dataclass(frozen=True)
class Exactness:
    """Spark's final aggregates vs the reference: how many (window, key) agree, and examples of those that don't."""

    expected: int
    got: int
    matching: int
    mismatching: int
    missing: int
    extra: int
    examples: list[str]

    @property
    def exact(self) -> bool:
        """Every (window, key) present on both sides with equal aggregates."""
        return self.mismatching == self.missing == self.extra == 0 and self.matching == self.expected

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {**self.__dict__, "exact": self.exact}


def exactness(data: DemoInput, results: dict[bytes, dict[str, Any]], window_ms: int) -> Exactness:
    """Compare Spark's last result per (window, key) with :func:`reference_aggregates`.

    count, sum, min and max must be equal (the measures are integers, so sums are exact in doubles); the mean
    must equal sum / count within 1e-9 relative.
    """
    want = reference_aggregates(data, window_ms)
    got: dict[tuple[int, str], dict[str, Any]] = {}
    for row in results.values():
        got[(int(row["window_start"]), str(row["key"]))] = row
    bad, examples = 0, list[str]()
    for k, w in want.items():
        if k not in got:
            continue
        row = got[k]
        g = (int(row["count"]), float(row["sum"]), float(row["min"]), float(row["max"]))
        mean_ok = abs(float(row["mean"]) - w[1] / w[0]) <= 1e-9 * max(1.0, abs(w[1] / w[0]))
        if g != w or not mean_ok:
            bad += 1
            if len(examples) < 5:
                examples.append(f"window {k[0]} key {k[1]!r}: spark {g} mean {row['mean']}, direct {w}")
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    examples += [f"missing window {k[0]} key {k[1]!r}" for k in missing[:3]]
    examples += [f"unexpected window {k[0]} key {k[1]!r}" for k in extra[:3]]
    matching = len(want) - bad - len(missing)
    return Exactness(len(want), len(got), matching, bad, len(missing), len(extra), examples)
