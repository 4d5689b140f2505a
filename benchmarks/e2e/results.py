"""What a run's results topic says: the last result per (window, key), and each record's latency."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from benchmarks.demo.source import T0_MS, DemoInput
from benchmarks.e2e.measures import record_latencies
from benchmarks.e2e.plan import RunSpec
from benchmarks.topic_reader import read_topic

__all__ = ["latencies", "latency_series", "read_results"]


def read_results(spec: RunSpec) -> tuple[dict[bytes, dict[str, Any]], list[tuple[dict[str, Any], int]]]:
    """Last result per message key, and every result message with its Kafka timestamp (ms)."""
    last: dict[bytes, dict[str, Any]] = {}
    every: list[tuple[dict[str, Any], int]] = []
    # idle 5 s: under load the tail past a stale high watermark can take seconds to arrive
    for r in read_topic(spec.settings().kafka, spec.results_topic, idle_s=5.0):
        if r.key is not None and r.value is not None:
            row = orjson.loads(r.value)
            last[r.key] = row
            every.append((row, r.timestamp))
    return last, every


def latencies(data: DemoInput, sent_s: np.ndarray, every: list[tuple[dict[str, Any], int]], window_ms: int
             ) -> np.ndarray:  # fmt: skip
    """Per record: seconds from production to the first result counting it (NaN: never counted)."""
    uniq, codes = np.unique(data.keys, return_inverse=True)
    code_of = {str(k): i for i, k in enumerate(uniq.tolist())}
    k = len(uniq)
    group = ((data.times - T0_MS) // window_ms).astype(np.int64) * k + codes.astype(np.int64)
    rg, rc, rs = [], [], []
    for row, ts in every:
        c = code_of.get(str(row["key"]))
        if c is None:
            continue
        rg.append((int(row["window_start"]) - T0_MS) // window_ms * k + c)
        rc.append(int(row["count"]))
        rs.append(ts / 1000)
    return record_latencies(group, sent_s, np.array(rg, np.int64), np.array(rc, np.int64), np.array(rs))


def latency_series(sent_s: np.ndarray, lat: np.ndarray, start: float) -> dict[str, list[float | None]]:
    """Latency p50/p99 per second of production (for the plot)."""
    sec = np.floor(sent_s - start).astype(np.int64)
    out: dict[str, list[float | None]] = {"second": [], "p50": [], "p99": []}
    for s in np.unique(sec):
        v = lat[(sec == s) & np.isfinite(lat)]
        out["second"].append(float(s))
        out["p50"].append(float(np.percentile(v, 50)) if v.size else None)
        out["p99"].append(float(np.percentile(v, 99)) if v.size else None)
    return out
