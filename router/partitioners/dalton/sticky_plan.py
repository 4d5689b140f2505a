"""One router's plan of its next scope, compiled in one piece (:func:`plan_scope`), and the scope's counts.

:func:`~router.partitioners.dalton.placement_sticky.plan_next_scope` describes the plan and calls
:func:`plan_scope` (:func:`plan_scope_py` is the same code, uncompiled) on the closing scope's counts per
key, which :func:`sum_by_slot` adds up from the scope's segments. Both run at every scope's end: as some
thirty numpy calls they took ~60 µs per scope, which at a slide of a thousand tuples was 0.06 µs per tuple.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import compile_loop
from router.partitioners.dalton.sticky import plan_homes
from router.partitioners.dalton.sticky_segment import order_by, stable_order

__all__ = ["plan_scope", "plan_scope_py", "sum_by_slot", "sum_by_slot_py"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def sum_by_slot_py(slots: IntP, counts: I64) -> tuple[IntP, F64]:
    """The distinct ``slots``, ascending, and the ``counts`` of each added up."""
    order = stable_order(slots.astype(np.uint64))
    out_slots = np.empty(slots.shape[0], np.intp)
    out_counts = np.zeros(slots.shape[0], np.float64)
    m = -1
    for j in range(order.shape[0]):
        s = slots[order[j]]
        if m < 0 or out_slots[m] != s:
            m += 1
            out_slots[m] = s
        out_counts[m] += counts[order[j]]
    return out_slots[: m + 1], out_counts[: m + 1]


def plan_scope_py(
    slots: IntP,
    counts: F64,
    last_comb: npt.NDArray[np.int16],
    n: int,
    split: float,
    small: float,
    allow: float,
    others: F64,
) -> tuple[IntP, npt.NDArray[np.bool_]]:
    """Plan the next scope on ``counts`` per key (``slots``); sets each key's home in ``last_comb``.

    Homes are planned up to ``1 + allow`` times the mean. ``others[c]``: the load the other routers are
    expected to put on combiner ``c`` per tuple of this router (zeros when it balances its own tuples): it
    counts as planned, and the mean is the routers' together. Returns the keys given combiner sets (indices into
    ``slots``, largest first) and their sets.
    """
    k = slots.shape[0]
    home = np.empty(k, np.intp)
    total = 0.0
    for i in range(k):
        home[i] = last_comb[slots[i]]
        total += counts[i]
    planned = np.empty(n, np.float64)
    all_load = total
    for c in range(n):
        planned[c] = others[c] * total
        all_load += planned[c]
    mean = all_load / n
    n_large = 0
    for i in range(k):
        if counts[i] > split * mean:
            n_large += 1
    large = np.empty(n_large, np.intp)
    n_large = 0
    for i in range(k):
        if counts[i] > split * mean:
            large[n_large] = i
            n_large += 1
    whole = counts.astype(np.int64)  # whole numbers of tuples
    large = order_by(large, whole, True)
    sets = np.zeros((n_large, n), np.bool_)
    for row in range(n_large):  # a few keys (at most n / split): each fills the least loaded combiners to the mean
        rem = counts[large[row]]
        while rem > 0:
            low = 0
            for c in range(1, n):
                if planned[c] < planned[low]:
                    low = c
            put = min(rem, mean - planned[low]) if planned[low] < mean else rem
            planned[low] += put
            sets[row, low] = True
            rem -= put
    is_large = np.zeros(k, np.bool_)
    for row in range(n_large):
        is_large[large[row]] = True
    fixed_load = np.zeros(n, np.float64)  # keys too small to move stay home and count as planned load
    n_moving = 0
    for i in range(k):
        if is_large[i]:
            continue
        if counts[i] >= mean / small or home[i] < 0:
            n_moving += 1
        else:
            fixed_load[home[i]] += counts[i]
    moving = np.empty(n_moving, np.intp)
    n_moving = 0
    for i in range(k):
        if not is_large[i] and (counts[i] >= mean / small or home[i] < 0):
            moving[n_moving] = i
            n_moving += 1
    moving = order_by(moving, whole, True)
    loads = planned + fixed_load
    plan_homes(moving, counts, home, loads, mean * (1.0 + allow))
    for i in range(k):
        last_comb[slots[i]] = -1 if is_large[i] else home[i]
    return large, sets


sum_by_slot = compile_loop(sum_by_slot_py)
plan_scope = compile_loop(plan_scope_py)
