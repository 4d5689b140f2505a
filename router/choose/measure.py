"""Adapter between the benchmark and the project's metrics (:mod:`router.partitioners.metrics`).

The metrics themselves (docs/partitioners.md definitions) are computed by
:func:`router.partitioners.metrics.measure`; this module turns its per-window counts into the flat
series the reports plot and the run summaries (mean, p95) they print.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from router.partitioners.keys import Keys
from router.partitioners.metrics import WindowSeries, measure, replication_floor

__all__ = [
    "BATCH_SIZES",
    "REDUCER_HASH_SEED",
    "SUMMARY_FIELDS",
    "WindowMetrics",
    "summarise",
    "unaligned_batches",
    "window_metrics",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Partial aggregates go to reducer ``murmur3_32(key_bytes, 42) mod m`` (Spark's murmur3 seed). Not the
#: combiners' hash seed: with the same seed and ``m`` dividing ``n``, hash routing would send every partial
#: of combiner ``i`` to reducer ``i mod m``, coupling the reducer cost to the combiner load.
REDUCER_HASH_SEED = 42

#: Per-window series summarised in reports: (attribute, label).
SUMMARY_FIELDS = (
    ("max_load", "max load L"),
    ("ratio", "max/mean load"),
    ("imbalance", "imbalance I"),
    ("replication", "replication"),
    ("floor", "replication floor"),
    ("reducer_max", "reducer max A"),
    ("time", "window time T"),
)


@dataclass(frozen=True)
class WindowMetrics:
    """One value per non-empty window, in time order (flattened from a :class:`WindowSeries`)."""

    start: F64  # window start time
    tuples: I64
    max_load: I64
    mean_load: F64
    imbalance: F64  # max L - mean L
    ratio: F64  # max L / mean L
    gamma: I64  # Γ = Σ_i D_i
    distinct: I64  # K
    replication: F64  # Γ / K
    reducer_max: I64  # max_j A_j
    time: F64  # T = max L + c max A
    floor: F64  # least replication at max/mean <= 1.05 given the window's key counts (nan: not computed)

    @classmethod
    def from_series(cls, s: WindowSeries, width: float, floor: F64 | None = None) -> WindowMetrics:
        """Flatten ``s`` whose window indices are ``floor(t / width)`` (``floor``: per window, if known)."""
        return cls(
            start=(s.windows * width).astype(np.float64),
            tuples=s.loads.sum(axis=1),
            max_load=s.max_load,
            mean_load=s.mean_load,
            imbalance=s.imbalance,
            ratio=s.ratio,
            gamma=s.gamma,
            distinct=s.keys,
            replication=s.replication,
            reducer_max=s.reducer_cost,
            time=s.time,
            floor=np.full(s.windows.shape[0], np.nan) if floor is None else np.asarray(floor, dtype=np.float64),
        )


def window_metrics(
    keys: Keys, combiners: npt.ArrayLike, window_index: I64, width: float, n: int, m: int, c: float
) -> WindowMetrics:
    """Per-window metrics of one combined assignment (``window_index = floor(t / width)``), with the floor."""
    series = measure(keys, combiners, window_index, n, m=m, c=c, reducer_seed=REDUCER_HASH_SEED)
    return WindowMetrics.from_series(series, width, replication_floor(keys, window_index, n))


def summarise(w: WindowMetrics) -> dict[str, float]:
    """Mean and p95 over the windows of every summary field (``<field>_mean``, ``<field>_p95``)."""
    out: dict[str, float] = {"windows": float(len(w.tuples))}
    for attr, _ in SUMMARY_FIELDS:
        series = np.asarray(getattr(w, attr), dtype=np.float64)
        out[f"{attr}_mean"] = float(series.mean()) if series.size else float("nan")
        out[f"{attr}_p95"] = float(np.percentile(series, 95)) if series.size else float("nan")
    return out


#: Router batch sizes of the measurements (tuples): random, so batches do not line up with micro-batches.
BATCH_SIZES = (100, 5_000)


def unaligned_batches(total: int, seed: int = 11, sizes: tuple[int, int] = BATCH_SIZES) -> list[tuple[int, int]]:
    """Cut ``total`` tuples into router batches ``[a, b)`` of random sizes in ``[sizes[0], sizes[1])``.

    A micro-batch spans many router batches of whatever sizes the consumer polls return: measuring with
    batches aligned to the metric's window would reward packing each batch, whatever it costs the micro-batch.
    """
    rng = np.random.default_rng(seed)
    cuts = [0]
    while cuts[-1] < total:
        cuts.append(min(total, cuts[-1] + int(rng.integers(sizes[0], sizes[1]))))
    return list(zip(cuts[:-1], cuts[1:], strict=True))
