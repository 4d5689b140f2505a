"""Routing of non-hot keys ("the tail"): hash (the paper) or a two-choice affinity rule like cAM's.

``affinity``: each key has two distinct hash candidates (:func:`distinct_candidates`). A key one of its
candidates already holds (in the fragmentation scope: the current slide in micro-batch mode, the sliding
window otherwise) goes there, so the rule never splits a key inside its scope. The other keys choose the
less loaded candidate, all tuples of a key at once. cAM decides tuple by tuple in arrival order; here the
batch is a look-ahead buffer (its key counts are known), so the free keys are decided largest first
(ties: batch order), each on the less loaded of its candidates (ties: the first, the key's hash combiner).
Largest-first is the classic greedy for packing (LPT): the big keys are placed while there is room to
even them out and the small ones level what is left. Spill (when the hot keys were routed first and
filled some combiners up to the mean): a key whose candidates are both full goes to the least loaded
combiner, unsplit. (The previous rule, a flow plan that moved whole
keys from the most loaded combiners in batch order, could move a key larger than the excess and swap the
imbalance instead of removing it: 1.28 max/mean on Zipf 1.5 with n = 2, where this rule measures ~1.01.)

The loop is compiled (:func:`router.partitioners.kernels_choice.two_choice_keys`); :func:`two_choice_keys`
is its Python reference (same decisions, tested against each other).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import choice_kernels

__all__ = ["affinity_fill", "two_choice_keys"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def two_choice_keys(order: IntP, c1: IntP, c2: IntP, weights: I64, loads: F64, level: float, out: IntP) -> None:
    """Keys in ``order``: key ``i`` (``weights[i]`` tuples) to the less loaded of ``c1[i]``, ``c2[i]``.

    Ties go to ``c1[i]``. Spill: when the key would lift that candidate above ``level`` and the least loaded
    combiner is less loaded still, the key goes there (the first such combiner). ``loads`` is updated,
    ``out[i]`` gets the choice.
    """
    load = loads.tolist()
    for i, a, b, w in zip(order.tolist(), c1[order].tolist(), c2[order].tolist(), weights[order].tolist(), strict=True):
        x = a if load[a] <= load[b] else b
        if load[x] + w > level:
            low = min(load)
            if low < load[x]:
                x = load.index(low)
        load[x] += w
        out[i] = x
    loads[:] = load


def affinity_fill(
    c1: IntP, c2: IntP, held: IntP | None, weights: I64, loads: npt.ArrayLike, n: int, level: float | None = None
) -> IntP:
    """Choose ``c1[i]`` or ``c2[i]`` for every key (``held[i] >= 0``: the key must go to ``held[i]``).

    ``weights`` are the keys' tuple counts, ``loads`` the load vector before them (``held=None``: all
    keys free). Held keys are placed first; the free ones largest first on their less loaded candidate.
    With ``level`` (the mean load once the segment is routed), a free key that would lift its candidate
    above it spills to the least loaded combiner instead when that one is less loaded (still one combiner
    per key).
    """
    load = np.asarray(loads, dtype=np.float64).copy()
    if held is None:
        choice = np.empty(c1.shape[0], dtype=np.intp)
        free = np.arange(c1.shape[0], dtype=np.intp)
    else:
        choice = held.astype(np.intp, copy=True)
        fixed = held >= 0
        load += np.bincount(held[fixed], weights=weights[fixed], minlength=n)
        free = np.flatnonzero(~fixed)
        if free.size == 0:
            return choice
    w = weights[free]
    top = int(w.max()) if w.size else 0
    order = free[np.argsort((top - w).astype(np.uint16) if top < 1 << 16 else -w, kind="stable")]
    kernels = choice_kernels()
    cap = float("inf") if level is None else float(level)
    if kernels is None:
        two_choice_keys(order, c1, c2, weights, load, cap, choice)
    else:
        kernels.two_choice_keys(order, c1, c2, weights, load, cap, choice)
    return choice
