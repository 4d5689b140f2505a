"""Cutting a batch into segments (one per slide and statistics window) and each segment's keys, compiled.

:meth:`~router.partitioners.dalton.partitioner.DaltonPartitioner._assign` routes a batch that crosses a slide
(or statistics window) boundary segment by segment. At a slide of a thousand tuples a router batch holds
dozens of segments, and finding the cuts and each segment's distinct keys with numpy (``floor_divide`` over
the batch, ``np.unique`` per segment) cost ~0.05 µs per tuple; these loops do the same in one pass each.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from router.partitioners.dalton import sticky
from router.partitioners.dalton.slots import SlotTable
from router.partitioners.dalton.sticky import compile_loop
from router.partitioners.dalton.sticky_plan import plan_scope, sum_by_slot
from router.partitioners.dalton.sticky_segment import place_sticky_segment, stable_order
from router.partitioners.dalton.window import add_pieces

__all__ = ["segment_bounds", "segment_bounds_py", "segment_keys", "segment_keys_py", "warm"]

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


@functools.cache
def warm() -> None:
    """Compile (or load from numba's cache) every compiled loop of the sticky placement, once per process.

    Called when a Dalton partitioner is created, with the argument types it passes, so the first scopes of a
    route do not pay it (~0.5 s from the cache, tens of seconds when compiling).
    """
    sticky.warm()
    n = 2
    one = np.zeros(1, np.intp)
    ones = np.ones(1, np.int64)
    segment_bounds(np.zeros(2), 1.0, 1.0)
    segment_keys(one, np.full(1, -1, np.intp))
    last = np.full(1, -1, np.int16)
    place_sticky_segment(one, np.zeros(1, np.uint64), ones, one, np.zeros(1, np.bool_), np.zeros((1, n), np.bool_),
                         True, np.zeros(0, np.uint64), np.zeros((0, n), np.bool_), np.zeros(n, np.int64),
                         np.zeros((1, 3), np.int16), np.ones(n), last, np.zeros((n, n)), 0.05, 2.5, 0.0,
                         False, False)  # fmt: skip
    slots, counts = sum_by_slot(one, ones)
    plan_scope(slots, counts, last, n, 1.0, 64.0)
    table = SlotTable(4)
    table.find(table.ids[table.insert(np.ones(1, np.uint64))])
    for rtype in (np.uint8, np.uint16):  # the window's reference counts (blocks < 255, < 65535)
        add_pieces(np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.bool_), np.zeros(n, rtype), one, one,
                   ones, True)  # fmt: skip
