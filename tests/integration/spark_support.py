"""Helpers for the Spark consumer tests: a Python reference of the windowed aggregation, result readers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from benchmarks.topic_reader import read_topic
from schemas.settings import KafkaSettings, SkewrouteSettings

T0 = 1_700_000_000_000  # a multiple of 10 s: windows start at T0 + k * slide

Agg = tuple[int, float, float, float, float]  # count, sum, min, max, mean
Key = tuple[int, int, str]  # window start ms, window end ms, key


@dataclass(frozen=True)
class Rec:
    """One input record: key, event time (ms), measure."""

    key: str
    t: int
    x: float


def window_starts(t: int, size: int, slide: int) -> list[int]:
    """Spark's windows containing ``t`` (offset 0): starts ``s`` with ``s <= t < s + size``, ``s % slide == 0``."""
    last = t - (t % slide)
    return [s for s in range(last, t - size, -slide) if s <= t < s + size]


def reference(
    records: Iterable[Rec], size: int, slide: int, dropped: Callable[[Rec, int], bool] = lambda r, end: False
) -> dict[Key, Agg]:
    """Exact aggregates per (window, key); ``dropped(record, window_end)`` removes a late contribution."""
    acc: dict[Key, list[float]] = {}
    for r in records:
        for s in window_starts(r.t, size, slide):
            if dropped(r, s + size):
                continue
            a = acc.setdefault((s, s + size, r.key), [0, 0.0, float("inf"), float("-inf")])
            a[0] += 1
            a[1] += r.x
            a[2] = min(a[2], r.x)
            a[3] = max(a[3], r.x)
    return {k: (int(a[0]), a[1], a[2], a[3], a[1] / a[0]) for k, a in acc.items()}


def rows_to_dict(rows: Iterable[dict]) -> dict[Key, Agg]:
    """Result rows (window_start/end in ms) -> the reference's shape."""
    return {
        (int(r["window_start"]), int(r["window_end"]), r["key"]): (
            int(r["count"]), float(r["sum"]), float(r["min"]), float(r["max"]), float(r["mean"]),
        )
        for r in rows
    }  # fmt: skip


def read_results(kafka: KafkaSettings, topic: str, expected: int | None = None) -> dict[Key, Agg]:
    """The results topic, last value per message key (the sink's overwrite semantics)."""
    last: dict[bytes, dict] = {}
    for rec in read_topic(kafka, topic, expected=expected, idle_s=3.0):
        assert rec.key is not None and rec.value is not None
        last[rec.key] = json.loads(rec.value)
    return rows_to_dict(last.values())


def assert_same(got: dict[Key, Agg], want: dict[Key, Agg]) -> None:
    """Exact equality of keys, counts, sums, min, max; mean within 1e-9 relative."""
    missing, extra = set(want) - set(got), set(got) - set(want)
    assert not missing and not extra, (
        f"{len(got)} result rows for {len(want)} expected: {len(missing)} missing {sorted(missing)[:5]}, "
        f"{len(extra)} extra {sorted(extra)[:5]}"
    )
    for k, w in want.items():
        g = got[k]
        assert g[:4] == w[:4], f"{k}: got {g}, want {w}"
        assert abs(g[4] - w[4]) <= 1e-9 * max(1.0, abs(w[4])), f"{k}: mean {g[4]} != {w[4]}"


def run_available_now(spark: Any, settings: SkewrouteSettings) -> Any:
    """Run the job once over what the combiner topic holds (available-now), fail on its error; its handle."""
    from spark_consumers.job import start_job

    handle = start_job(spark, settings, available_now=True)
    try:
        handle.query.awaitTermination(300)
    finally:
        handle.stop()
    assert handle.query.exception() is None, handle.query.exception()
    return handle


def raw_recs(raw: Iterable[Any]) -> list[Rec]:
    """Reference records of raw JSON records ``{"key", "i", ...}`` (the measure is ``i``, the time the Kafka one)."""
    out = []
    for r in raw:
        doc = orjson.loads(r.value or b"")
        out.append(Rec(doc["key"], r.timestamp, float(doc["i"])))
    return out
