"""Routing of non-hot keys ("the tail"): hash (the paper) or a two-choice affinity rule like cAM's.

``affinity``: each key has two distinct hash candidates (:func:`distinct_candidates`). A key one of its
candidates already holds (in the fragmentation scope: the current slide in micro-batch mode, the sliding
window otherwise) goes there, so the rule never splits a key inside its scope. The other keys choose the
less loaded candidate. cAM decides tuple by tuple; here a batch's keys are decided together, all tuples of
a key at once (their counts are known: the batch is a look-ahead buffer), by a vectorised fill: every
free key starts on its first candidate, then the most loaded combiners move free keys to their second
candidate while that one is below the mean load (largest keys first, at most the excess, at most the
room). This is cAM's least-loaded choice made with the whole batch in view, in ``O(n)`` numpy passes.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import numpy.typing as npt

__all__ = ["affinity_fill"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def _plan(load: list[float], target: float, movable: list[list[float]], n: int) -> list[float]:
    """How much weight to move from ``i`` to ``j`` (``movable[i][j]`` available), flattened ``i * n + j``.

    Sources from the most loaded, destinations from the least loaded (order taken once, at the start).
    """
    flow = [0.0] * (n * n)
    ascending = sorted(range(n), key=load.__getitem__)
    for i in reversed(ascending):
        excess = load[i] - target
        if excess < 1:
            break
        row = movable[i]
        for j in ascending:
            room = target - load[j]
            x = row[j]
            if room <= 0 or x <= 0:
                continue
            x = min(excess, room, x)
            flow[i * n + j] = x
            load[j] += x
            load[i] -= x
            excess -= x
            if excess < 1:
                break
    return flow


def affinity_fill(c1: IntP, c2: IntP, held: IntP | None, weights: I64, loads: I64, n: int) -> IntP:
    """Choose ``c1[i]`` or ``c2[i]`` for every key (``held[i] >= 0``: the key must go to ``held[i]``).

    ``weights`` are the keys' tuple counts, ``loads`` the load vector before them (``held=None``: all
    keys free). Returns the choice. Free keys start on ``c1``; an ``n x n`` plan (most loaded combiners
    first, at most each one's excess and each destination's room) says how much weight moves from ``i``
    to ``j``; each ``(i, j)`` group then moves its first keys (batch order) while their midpoints fit in
    the planned amount.
    """
    if held is None:  # every key is free
        choice = c1.copy()
        free: IntP | None = None
        code = c1 * n + c2
        wc = weights
    else:
        choice = np.where(held < 0, c1, held)
        free = np.flatnonzero(held < 0)
        if free.size == 0:
            return choice
        code = c1[free] * n + c2[free]
        wc = weights[free]
    load = (loads + np.bincount(choice, weights=weights, minlength=n)).tolist()
    target = sum(load) / n
    if max(load) - target < 1:
        return choice
    movable = cast("list[list[float]]", np.bincount(code, weights=wc, minlength=n * n).reshape(n, n).tolist())
    flow: F64 = np.asarray(_plan(load, target, movable, n), dtype=np.float64)
    go = np.flatnonzero(flow[code] > 0)  # only keys of groups the plan moves
    if go.size == 0:
        return choice
    gcode = code[go]
    order = go[np.argsort(gcode.astype(np.int16) if n * n < 32768 else gcode, kind="stable")]
    cs, ws = code[order], wc[order]
    total = np.bincount(cs, weights=ws, minlength=n * n)
    within = np.cumsum(ws) - (np.cumsum(total) - total)[cs]  # weight up to and including the key
    moved = order[2 * within - ws <= 2 * flow[cs]]  # its midpoint fits in the planned amount
    if free is not None:
        moved = free[moved]
    choice[moved] = c2[moved]
    return choice
