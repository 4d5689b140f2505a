"""Adapter between the benchmark and the project's metrics (shared ALGORITHMS.md definitions).

Computes the per-window metrics of a combined assignment and their run summaries (mean, p95). Uses
``router.partitioners.metrics`` when it exists; until then the private fallback with the same
definitions.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from router.bench._metrics_fallback import WindowMetrics, window_metrics
from router.partitioners.keys import KeyCodec

__all__ = ["REDUCER_HASH_SEED", "SUMMARY_FIELDS", "WindowMetrics", "reducers_of", "summarise", "window_metrics"]

#: Partial aggregates go to reducer ``murmur3_32(key_bytes, 42) mod m`` (Spark's murmur3 seed; a seed
#: other than the combiners' so that reducers are independent of hash-partitioned combiners).
REDUCER_HASH_SEED = 42

#: Per-window series summarised in reports: (attribute, label).
SUMMARY_FIELDS = (
    ("max_load", "max load L"),
    ("ratio", "max/mean load"),
    ("imbalance", "imbalance I"),
    ("replication", "replication"),
    ("reducer_max", "reducer max A"),
    ("time", "window time T"),
)


def reducers_of(distinct_keys: np.ndarray, m: int) -> npt.NDArray[np.int64]:
    """The reducer of each distinct key (keys as ints or strings, canonical bytes as the partitioners)."""
    if distinct_keys.size == 0:
        return np.zeros(0, dtype=np.int64)
    batch = KeyCodec(1, REDUCER_HASH_SEED).encode(distinct_keys)
    if batch.distinct != distinct_keys.size:
        raise ValueError("reducers_of expects distinct keys")
    return (batch.hashes[:, 0].astype(np.int64) % m)[batch.inverse]


def summarise(w: WindowMetrics) -> dict[str, float]:
    """Mean and p95 over the windows of every summary field (``<field>_mean``, ``<field>_p95``)."""
    out: dict[str, float] = {"windows": float(len(w.tuples))}
    for attr, _ in SUMMARY_FIELDS:
        series = np.asarray(getattr(w, attr), dtype=np.float64)
        out[f"{attr}_mean"] = float(series.mean()) if series.size else float("nan")
        out[f"{attr}_p95"] = float(np.percentile(series, 95)) if series.size else float("nan")
    return out
