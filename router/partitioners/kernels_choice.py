"""Compiled (numba) twins of the per-key loops of the key codec, PKG and FISH.

Each kernel does the same arithmetic in the same order as the Python function it stands for (no
fast-math), so decisions are identical; tests compare both:

* :func:`first_appearance` - :meth:`router.partitioners.keys.KeyCodec.encode` (distinct keys of a batch in
  order of first appearance, and each tuple's index into them);
* :func:`pkg_greedy` - PKG with two candidates (:func:`router.partitioners.pkg.greedy_fill`);
* :func:`two_choice_keys` - Dalton's tail (:func:`router.partitioners.dalton.tail.two_choice_keys`);
* :func:`two_choice_weighted`, :func:`pkg_fill_kernel` -
  :func:`router.partitioners.waterfill.two_choice` and :func:`~router.partitioners.waterfill.pkg_fill`.

Compiled on first use and cached next to this file (``cache=True``); loaded through
:func:`router.partitioners.accel.choice_kernels`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["first_appearance", "pkg_fill_kernel", "pkg_greedy", "two_choice_keys", "two_choice_weighted", "warm"]


@njit(cache=True)
def first_appearance(rows, scratch):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """Distinct values of ``rows`` in order of first appearance, and each row's index into them.

    ``scratch`` (one entry per possible row value, all ``-1``) is used as the row -> index map and left all
    ``-1`` again: its size is the key cache's, so it is kept by the caller instead of refilled every batch.
    """
    inverse = np.empty(rows.shape[0], np.intp)
    uniq = np.empty(rows.shape[0], np.intp)
    m = 0
    for t in range(rows.shape[0]):
        r = rows[t]
        j = scratch[r]
        if j < 0:
            j = m
            scratch[r] = m
            uniq[m] = r
            m += 1
        inverse[t] = j
    for i in range(m):
        scratch[uniq[i]] = -1
    return uniq[:m], inverse


@njit(cache=True)
def pkg_greedy(cand, counts, loads, out):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """PKG (two candidates): every tuple, key after key, to the less loaded candidate (ties: the first)."""
    t = 0
    for i in range(cand.shape[0]):
        a = cand[i, 0]
        b = cand[i, 1]
        for _ in range(counts[i]):
            if loads[a] <= loads[b]:
                loads[a] += 1
                out[t] = a
            else:
                loads[b] += 1
                out[t] = b
            t += 1


@njit(cache=True)
def two_choice_weighted(first, second, wait, ptime, out):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """One tuple per key: to the candidate with the smaller waiting time ``wait = C_w * P_w`` (ties: ``first``).

    Each tuple adds ``P_w``; without capacity feedback the caller passes ``P_w = 1`` (``wait`` is the load).
    """
    for i in range(first.shape[0]):
        a = first[i]
        b = second[i]
        if wait[a] <= wait[b]:
            wait[a] += ptime[a]
            out[i] = a
        else:
            wait[b] += ptime[b]
            out[i] = b


@njit(cache=True)
def pkg_fill_kernel(first, second, counts, loads, out):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """Tuples each key sends to ``first`` (the closed form of ``pair_fill``), keys in order; ``loads`` float64."""
    for i in range(first.shape[0]):
        a = first[i]
        b = second[i]
        c = counts[i]
        la = loads[a]
        lb = loads[b]
        if la <= lb:  # c = 1 included: head = 1, so the one tuple goes to the less loaded candidate
            head = min(c, math.floor(lb - la) + 1)
            xa = head + (c - head) // 2
        else:
            head = min(c, math.ceil(la - lb))
            xa = (c - head + 1) // 2
        loads[a] = la + xa
        loads[b] = lb + c - xa
        out[i] = xa


@njit(cache=True)
def two_choice_keys(order, c1, c2, weights, loads, level, out):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """Keys in ``order``, all tuples of a key at once, to the less loaded of two candidates (ties: ``c1``).

    Spill: to the least loaded combiner when the candidate would exceed ``level`` and that one is less loaded.

    Dalton's tail (:func:`router.partitioners.dalton.tail.two_choice_keys` is the Python reference).
    """
    for j in range(order.shape[0]):
        i = order[j]
        a = c1[i]
        b = c2[i]
        x = a if loads[a] <= loads[b] else b
        if loads[x] + weights[i] > level:
            low = 0
            for c in range(1, loads.shape[0]):
                if loads[c] < loads[low]:
                    low = c
            if loads[low] < loads[x]:
                x = low
        loads[x] += weights[i]
        out[i] = x


def warm() -> None:
    """Compile (or load from the cache) every kernel for the array types the callers pass."""
    i64, f64 = np.zeros(0, np.int64), np.zeros(1, np.float64)
    first_appearance(np.zeros(0, np.intp), np.full(1, -1, np.intp))
    pkg_greedy(np.zeros((0, 2), np.int64), i64, np.zeros(1, np.int64), i64)
    two_choice_weighted(i64, i64, f64, f64, i64)
    pkg_fill_kernel(i64, i64, i64, f64, i64)
    ip = np.zeros(0, np.intp)
    two_choice_keys(ip, ip, ip, i64, f64, 0.0, ip)
