"""Cutting a batch into segments (one per slide and statistics window) and each segment's keys, compiled.

:meth:`~router.partitioners.dalton.partitioner.DaltonPartitioner._assign` routes a batch that crosses a slide
(or statistics window) boundary segment by segment. At a slide of a thousand tuples a router batch holds
dozens of segments, and finding the cuts and each segment's distinct keys with numpy (``floor_divide`` over
the batch, ``np.unique`` per segment) cost ~0.05 µs per tuple; these loops do the same in one pass each.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import compile_loop
from router.partitioners.dalton.sticky_segment import stable_order

__all__ = ["segment_bounds", "segment_bounds_py", "segment_keys", "segment_keys_py"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def segment_bounds_py(times: F64, slide: float, stats_window: float) -> IntP:
    """Start of every segment, then the end of the last one.

    A segment starts wherever ``time // slide`` or the statistics window (``time // stats_window``) differs
    from the previous tuple's.
    Times that never decrease (the contract of ``assign``) are cut by binary search, a few divisions per
    segment; others tuple by tuple.
    """
    m = times.shape[0]
    bounds = np.empty(m + 1, np.intp)
    bounds[0] = 0
    nb = 1
    ordered = True
    for j in range(1, m):
        if times[j] < times[j - 1]:
            ordered = False
            break
    if ordered:
        start = 0
        while start < m:
            b0 = times[start] // slide
            w0 = times[start] // stats_window
            lo = start + 1
            hi = m
            while lo < hi:  # the first tuple of a later slide or statistics window
                mid = (lo + hi) // 2
                if times[mid] // slide == b0 and times[mid] // stats_window == w0:
                    lo = mid + 1
                else:
                    hi = mid
            bounds[nb] = lo
            nb += 1
            start = lo
        return bounds[:nb]
    b_prev = times[0] // slide
    w_prev = times[0] // stats_window
    for j in range(1, m):
        b = times[j] // slide
        w = times[j] // stats_window
        if b != b_prev or w != w_prev:
            bounds[nb] = j
            nb += 1
        b_prev = b
        w_prev = w
    bounds[nb] = m
    return bounds[: nb + 1]


def segment_keys_py(values: IntP, seen: IntP) -> tuple[IntP, IntP, I64]:
    """``np.unique(values, return_inverse=True)`` and each distinct value's count.

    ``seen`` is scratch, ``-1`` at every index a value can take, and left so.
    """
    m = values.shape[0]
    distinct = np.empty(m, np.intp)
    k = 0
    for j in range(m):
        x = values[j]
        if seen[x] < 0:
            seen[x] = 0
            distinct[k] = x
            k += 1
    uniq = distinct[:k][stable_order(distinct[:k].astype(np.uint64))]
    for r in range(k):
        seen[uniq[r]] = r
    inv = np.empty(m, np.intp)
    counts = np.zeros(k, np.int64)
    for j in range(m):
        r = seen[values[j]]
        inv[j] = r
        counts[r] += 1
    for r in range(k):
        seen[uniq[r]] = -1
    return uniq, inv, counts


segment_bounds = compile_loop(segment_bounds_py)
segment_keys = compile_loop(segment_keys_py)
