"""The heavy profile's columns checked against the produced input (the light ones: :mod:`benchmarks.demo.checks`).

- ``score``: the sum of :func:`spark_consumers.aggregations.score_reference` over the (window, key)'s records,
  computed here with numpy (the same 31-bit steps on int64 arrays), must equal Spark's exactly;
- ``percentiles``: each value Spark returns for fraction ``q`` of ``n`` values must lie between the values of
  rank ``q * n - n / accuracy - 1`` and ``q * n + n / accuracy + 1`` (``percentile_approx``'s documented rank
  error, plus one rank for its rank convention).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["heavy_exactness", "scores"]

_A, _C, _MASK = 1103515245, 12345, 0x7FFFFFFF


def scores(values: npt.ArrayLike, rounds: int) -> npt.NDArray[np.int64]:
    """``score_reference`` of every (integer) measure, vectorised."""
    acc = np.asarray(values, dtype=np.int64) & _MASK
    for i in range(1, rounds + 1):
        acc = (acc * _A + (_C + i)) & _MASK  # acc < 2**31: the product stays below 2**62
    return acc


def heavy_exactness(data: Any, results: dict[bytes, dict[str, Any]], window_ms: int, aggregations: Sequence[str],
                    rounds: int, qs: Sequence[float], accuracy: int) -> dict[str, Any]:  # fmt: skip
    """Per heavy column present in ``aggregations``: groups checked and groups wrong (with up to 5 examples).

    ``data``: the produced input (``keys``, ``times``, ``values`` arrays); ``results``: the last result row per
    message key, as read from the results topic.
    """
    out: dict[str, Any] = {"checked": 0, "wrong": 0, "examples": []}
    if "score" not in aggregations and "percentiles" not in aggregations:
        return out
    got = {(int(r["window_start"]), str(r["key"])): r for r in results.values()}
    windows = np.asarray(data.times, dtype=np.int64) // window_ms * window_ms
    keys = np.asarray(data.keys).astype(str)
    uniq, codes = np.unique(keys, return_inverse=True)
    w_uniq, w_codes = np.unique(windows, return_inverse=True)
    group = w_codes.astype(np.int64) * len(uniq) + codes
    values = np.asarray(data.values, dtype=np.int64)
    order = np.lexsort((values, group))
    g_sorted, v_sorted = group[order], values[order]
    starts = np.r_[0, np.flatnonzero(np.diff(g_sorted)) + 1]
    sizes = np.diff(np.r_[starts, g_sorted.size])
    score_sum = np.add.reduceat(scores(v_sorted, rounds), starts) if "score" in aggregations else None
    for gi, (st, n) in enumerate(zip(starts.tolist(), sizes.tolist(), strict=True)):
        g = int(g_sorted[st])
        k = (int(w_uniq[g // len(uniq)]), str(uniq[g % len(uniq)]))
        row = got.get(k)
        if row is None:
            continue  # missing groups are the light check's finding
        out["checked"] += 1
        bad = []
        if score_sum is not None and int(row["score"]) != int(score_sum[gi]):
            bad.append(f"score {row['score']} != {int(score_sum[gi])}")
        if "percentiles" in aggregations:
            err = n / accuracy
            for q, value in zip(qs, row["percentiles"], strict=True):
                lo = v_sorted[st + min(n - 1, max(0, int(np.ceil(q * n - err - 1)) - 1))]
                hi = v_sorted[st + min(n - 1, max(0, int(np.floor(q * n + err + 1)) - 1))]
                if not lo <= float(value) <= hi:
                    bad.append(f"p{q:g} {value} outside [{lo}, {hi}] (n={n})")
        if bad:
            out["wrong"] += 1
            if len(out["examples"]) < 5:
                out["examples"].append(f"window {k[0]} key {k[1]!r}: {'; '.join(bad)}")
    return out
