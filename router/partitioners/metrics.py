"""Partitioning quality per window, exactly as docs/partitioners.md ("Metrics") defines it.

For a window ``w`` with combiner loads ``L_i`` (tuples), distinct keys ``D_i`` at combiner ``i`` and ``K``
distinct keys in the window:

- imbalance ``I = max_i L_i - mean_i L_i`` and the ratio ``max / mean`` (the mean is over all ``n``
  combiners, empty ones included);
- aggregation cost ``Γ = Σ_i D_i`` and replication ``Γ / K`` (1.0 = no key split);
- reducer cost ``max_j A_j``: partial aggregates (one per distinct (key, combiner) pair) received by the
  busiest of ``m`` reducers, a partial of key ``k`` going to reducer ``murmur3_32(key_bytes, seed) mod m``;
- modelled window time ``T = max_i L_i + c · max_j A_j``;
- the **floor** of replication at balance target ``b`` (default 1.05): with key counts ``c_k`` in a window of
  ``W`` tuples, no assignment keeping ``max/mean <= b`` reaches fewer than ``Σ_k ceil(c_k / floor(b · W / n)) / K``
  partials per key (:func:`replication_floor`). Reported beside every partitioner: it says how far a rule is
  from what is possible, not only from its peers.

With Spark consumers the window of these metrics is one **micro-batch** (the route's ``window.slide`` = the
trigger): Spark pre-aggregates each micro-batch per combiner task, so a key on ``c`` combiners costs ``c``
shuffled partials in it, and the slowest task sets the stage.

Windows are count-based (``size`` consecutive tuples: :func:`count_windows`) or time-based (tumbling,
``floor(t / window)``: :func:`time_windows`; windows without tuples are not reported). Each metric is a
per-window series; :meth:`WindowSeries.summary` gives its mean and 95th percentile over the run.
Keys follow :mod:`router.partitioners.keys` (``7``, ``"7"`` and ``b"7"`` are one key). Vectorised numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from router.partitioners.keys import DEFAULT_HASH_SEED, KeyCodec, Keys

__all__ = ["BALANCE_TARGET", "Summary", "WindowSeries", "count_windows", "measure", "replication_floor", "time_windows"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: The balance target ``b`` of the replication floor (max/mean per window).
BALANCE_TARGET = 1.05

#: Per-window series that :meth:`WindowSeries.summary` reports.
SERIES = ("imbalance", "ratio", "gamma", "replication", "reducer_cost", "time")


@dataclass(frozen=True)
class Summary:
    """Mean and 95th percentile (linear interpolation) of one per-window series."""

    mean: float
    p95: float


@dataclass(frozen=True)
class WindowSeries:
    """Per-window counts of one run; the metrics are derived properties (one entry per window).

    ``windows[w]`` is window ``w``'s index (``position // size`` or ``floor(t / window)``); ``loads[w, i]``
    is ``L_i``, ``distinct[w, i]`` is ``D_i``, ``keys[w]`` is ``K`` and ``partials[w, j]`` is ``A_j``.
    """

    windows: I64
    loads: I64
    distinct: I64
    keys: I64
    partials: I64
    c: float = 1.0

    @property
    def max_load(self) -> I64:
        """``max_i L_i``."""
        return self.loads.max(axis=1)

    @property
    def mean_load(self) -> F64:
        """``mean_i L_i`` over all ``n`` combiners."""
        return self.loads.mean(axis=1)

    @property
    def imbalance(self) -> F64:
        """``I = max_i L_i - mean_i L_i`` (tuples)."""
        return self.max_load - self.mean_load

    @property
    def ratio(self) -> F64:
        """``max_i L_i / mean_i L_i`` (1.0 = perfect balance)."""
        return self.max_load / self.mean_load

    @property
    def gamma(self) -> I64:
        """Aggregation cost ``Γ = Σ_i D_i``."""
        return self.distinct.sum(axis=1)

    @property
    def replication(self) -> F64:
        """``Γ / K`` (1.0 = no key split)."""
        return self.gamma / self.keys

    @property
    def reducer_cost(self) -> I64:
        """``max_j A_j``: partial aggregates at the busiest reducer."""
        return self.partials.max(axis=1)

    @property
    def time(self) -> F64:
        """Modelled window time ``T = max_i L_i + c · max_j A_j`` (tuple units)."""
        return self.max_load + self.c * self.reducer_cost

    def series(self, metric: str) -> npt.NDArray[np.floating] | I64:
        """The per-window series of ``metric`` (one of :data:`SERIES`)."""
        if metric not in SERIES:
            raise ValueError(f"unknown metric {metric!r}; valid: {', '.join(SERIES)}")
        return np.asarray(getattr(self, metric))

    def summary(self) -> dict[str, Summary]:
        """Mean and p95 over the windows of every metric in :data:`SERIES`."""
        out = {}
        for metric in SERIES:
            values = np.asarray(self.series(metric), dtype=np.float64)
            if values.size == 0:
                out[metric] = Summary(float("nan"), float("nan"))
            else:
                out[metric] = Summary(float(values.mean()), float(np.percentile(values, 95)))
        return out


def measure(
    keys: Keys,
    combiners: npt.ArrayLike,
    window_of: npt.ArrayLike,
    n: int,
    *,
    m: int | None = None,
    c: float = 1.0,
    reducer_seed: int = DEFAULT_HASH_SEED,
) -> WindowSeries:
    """Per-window metrics for tuples with a combiner id and a window index each.

    ``m`` reducers (default ``n``); ``c`` the relative cost of merging one partial aggregate.
    """
    m = n if m is None else m
    if n < 1 or m < 1:
        raise ValueError(f"n and m must be >= 1, got n={n}, m={m}")
    batch = KeyCodec(1, reducer_seed).encode(keys)
    comb = np.asarray(combiners, dtype=np.int64).reshape(-1)
    win = np.asarray(window_of, dtype=np.int64).reshape(-1)
    if not comb.shape[0] == win.shape[0] == batch.size:
        raise ValueError(f"{batch.size} keys, {comb.shape[0]} combiner ids, {win.shape[0]} window indices")
    if comb.size and (comb.min() < 0 or comb.max() >= n):
        raise ValueError(f"combiner ids must be in [0, {n})")
    windows, w = np.unique(win, return_inverse=True)
    w = w.reshape(-1)
    nw, nk = windows.shape[0], batch.distinct
    key = batch.inverse.astype(np.int64)
    reducer = (batch.hashes[:, 0] % np.uint32(m)).astype(np.int64)
    loads = np.bincount(w * n + comb, minlength=nw * n).reshape(nw, n)
    pairs = np.unique((w * nk + key) * n + comb)  # distinct (window, key, combiner)
    pw, pk, pc = pairs // (nk * n), (pairs // n) % nk, pairs % n
    distinct = np.bincount(pw * n + pc, minlength=nw * n).reshape(nw, n)
    window_keys = np.bincount(np.unique(w * nk + key) // nk, minlength=nw)
    partials = np.bincount(pw * m + reducer[pk], minlength=nw * m).reshape(nw, m)
    return WindowSeries(windows, loads, distinct, window_keys, partials, float(c))


def count_windows(
    keys: Keys,
    combiners: npt.ArrayLike,
    n: int,
    size: int = 1000,
    *,
    m: int | None = None,
    c: float = 1.0,
    reducer_seed: int = DEFAULT_HASH_SEED,
) -> WindowSeries:
    """Metrics per tumbling window of ``size`` consecutive tuples (the last one may be shorter)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    total = np.asarray(combiners).reshape(-1).shape[0]
    index = np.arange(total, dtype=np.int64) // size
    return measure(keys, combiners, index, n, m=m, c=c, reducer_seed=reducer_seed)


def time_windows(
    keys: Keys,
    combiners: npt.ArrayLike,
    n: int,
    times: npt.ArrayLike,
    window: float,
    *,
    m: int | None = None,
    c: float = 1.0,
    reducer_seed: int = DEFAULT_HASH_SEED,
) -> WindowSeries:
    """Metrics per tumbling time window ``floor(t / window)`` (``times`` non-decreasing)."""
    if not window > 0:
        raise ValueError(f"window must be > 0, got {window}")
    t = np.asarray(times, dtype=np.float64).reshape(-1)
    index = np.floor_divide(t, float(window)).astype(np.int64)
    return measure(keys, combiners, index, n, m=m, c=c, reducer_seed=reducer_seed)


def replication_floor(
    keys: Keys, window_of: npt.ArrayLike, n: int, *, target: float = BALANCE_TARGET, size: int | None = None
) -> F64:
    """Per window (in order of window index): the least replication keeping ``max/mean <= target``.

    ``Σ_k ceil(c_k / floor(target · W / n)) / K`` with ``c_k`` the key counts of the window, ``K`` its
    distinct keys and ``W`` its tuples (``size`` instead, when given: the nominal micro-batch size). Known
    only after the fact: it uses each window's exact counts, which no online router has.
    """
    if not target >= 1:
        raise ValueError(f"target must be >= 1, got {target}")
    batch = KeyCodec(1).encode(keys)
    win = np.asarray(window_of, dtype=np.int64).reshape(-1)
    if win.shape[0] != batch.size:
        raise ValueError(f"{batch.size} keys, {win.shape[0]} window indices")
    _, w = np.unique(win, return_inverse=True)
    w = w.reshape(-1).astype(np.int64)
    nw, nk = int(w.max()) + 1 if w.size else 0, batch.distinct
    pair, count = np.unique(w * nk + batch.inverse.astype(np.int64), return_counts=True)
    pw = pair // nk
    tuples = np.bincount(w, minlength=nw)
    width = tuples if size is None else np.full(nw, size, dtype=np.int64)
    most = np.maximum(1, np.floor(target * width / n)).astype(np.float64)
    pieces = np.bincount(pw, weights=np.ceil(count / most[pw]), minlength=nw)
    distinct = np.bincount(pw, minlength=nw)
    return np.asarray(pieces / np.maximum(distinct, 1), dtype=np.float64)
