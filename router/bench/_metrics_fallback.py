"""Per-window metrics of shared ALGORITHMS.md, used only while ``router.partitioners.metrics`` is absent.

Definitions (per window ``w``; combiner loads ``L_i``, distinct keys ``D_i`` at combiner ``i``, ``K``
distinct keys): imbalance ``I = max L - mean L`` and ``max/mean``; aggregation cost ``Γ = Σ D_i``;
replication ``Γ / K``; reducer cost ``max_j A_j`` (partials, one per (key, combiner) pair, hashed to
``m`` reducers); modelled window time ``T = max L + c · max A``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["WindowMetrics", "window_metrics"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class WindowMetrics:
    """One value per non-empty window, in time order."""

    start: F64  # window start time
    tuples: I64
    max_load: I64
    mean_load: F64
    imbalance: F64  # max L - mean L
    ratio: F64  # max L / mean L
    gamma: I64  # Σ_i D_i
    distinct: I64  # K
    replication: F64  # Γ / K
    reducer_max: I64  # max_j A_j
    time: F64  # T = max L + c max A


def window_metrics(
    codes: I64,
    combiners: npt.ArrayLike,
    window_of: I64,
    reducer_of_code: I64,
    n: int,
    m: int,
    c: float = 1.0,
    starts: F64 | None = None,
) -> WindowMetrics:
    """Metrics per window: ``codes`` are dense key codes, ``window_of`` dense window indices (0..nw-1)."""
    w = np.asarray(combiners, dtype=np.int64)
    nw = int(window_of.max()) + 1 if window_of.size else 0
    n_keys = int(codes.max()) + 1 if codes.size else 1
    loads = np.bincount(window_of * n + w, minlength=nw * n).reshape(nw, n)
    pair = np.unique((window_of * n_keys + codes) * n + w)
    p_win, p_code = pair // (n_keys * n), (pair // n) % n_keys
    gamma = np.bincount(p_win, minlength=nw)
    wk = np.unique(window_of * n_keys + codes)
    distinct = np.bincount(wk // n_keys, minlength=nw)
    red = np.bincount(p_win * m + reducer_of_code[p_code], minlength=nw * m).reshape(nw, m)
    tuples = loads.sum(axis=1)
    mx = loads.max(axis=1)
    mean = tuples / n
    keep = tuples > 0
    rmax = red.max(axis=1)
    return WindowMetrics(
        start=(starts if starts is not None else np.arange(nw, dtype=np.float64))[keep],
        tuples=tuples[keep],
        max_load=mx[keep],
        mean_load=mean[keep],
        imbalance=(mx - mean)[keep],
        ratio=(mx / np.where(mean > 0, mean, 1))[keep],
        gamma=gamma[keep],
        distinct=distinct[keep],
        replication=(gamma / np.maximum(distinct, 1))[keep],
        reducer_max=rmax[keep],
        time=(mx + c * rmax)[keep],
    )
