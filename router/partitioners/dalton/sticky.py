"""Dalton's sticky placement: one segment of a scope (the consumer's micro-batch), key by key.

Contract of :func:`place_keys` (the compiled loop; :func:`place_keys_py` is the same code, uncompiled):

- the scope's load vector ``loads`` (the tuples this router routed in the scope so far) is raised by the
  segment's tuples; no combiner is raised above ``cap`` by a key that is new to it, nor above ``hold_cap`` by
  a key it already holds, except when every combiner is full already (then the rest goes to the least
  loaded combiner the key reached, or to the least loaded one);
- a key that a combiner already holds in the scope (``held``) stays there: its tuples fill the combiners
  holding it first, in its probe order, up to ``cap`` and then up to ``hold_cap``, and it reaches a further
  combiner only when those are full;
- a key new to the scope goes whole to the first combiner of its probe order with room for all of its
  tuples (``least``: the less loaded of its two candidates first); when none has room for all of them,
  whole to the least loaded combiner if that stays within ``hold_cap``; otherwise (a key larger than the
  room anywhere) it is split, filling combiners in probe order;
- a key's probe order is ``c1[i]``, ``c2[i]``, then the combiners after ``c1[i]``, cyclically (the caller
  gives the same candidates on every router, so routers that see the same loads take the same decisions).

With ``loose`` (one router), the rest of a key that outgrows the combiners holding it goes whole to the least
loaded other combiner when that stays within ``cap``, and a key that must still be split fills the combiners
with the most room first instead of its probe order: the fewest pieces, where routers sharing keys need the
probe order to agree.

Keys are decided in ``order`` (the caller puts held keys first, then new keys largest first). Returns the
pieces as ``(key index, combiner, tuples)`` rows, at most one per (key, combiner), grouped by key in the order
the keys were decided.

:func:`plan_homes` (compiled; :func:`plan_homes_py` uncompiled) plans one router's next scope on the closing
scope's counts: keys keep their homes and a combiner planned over ``target`` sheds as few keys as it can, unless
a largest-first packing (a key keeps its home while it fits, else goes to the least loaded combiner) ends with a
less loaded most loaded combiner. Few keys move, and the homes end at least as balanced as that packing.

:func:`fit_shares` (compiled; :func:`fit_shares_py` uncompiled) runs the rounds of the tail rule's share fit at
each scope's start (numpy over an ``n x n`` matrix took ~0.25 ms per scope; compiled, ~4 µs).
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import compile_loop

__all__ = [
    "fit_shares",
    "fit_shares_py",
    "greedy_homes",
    "greedy_homes_py",
    "place_keys",
    "place_keys_py",
    "plan_homes",
    "plan_homes_py",
    "shed_homes",
    "shed_homes_py",
    "warm",
]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def _piece_py(out: I64, first: int, rows: int, i: int, c: int, put: int, loads: F64) -> int:
    """Add ``put`` tuples of key ``i`` on combiner ``c`` (to its piece among ``out[first:rows]``, or a new row)."""
    loads[c] += put
    for r in range(first, rows):
        if out[r, 1] == c:
            out[r, 2] += put
            return rows
    out[rows, 0] = i
    out[rows, 1] = c
    out[rows, 2] = put
    return rows + 1


def place_keys_py(  # noqa: C901, PLR0912 - one loop, kept in one piece so the compiled twin is the same code
    order: IntP,
    counts: I64,
    c1: IntP,
    c2: IntP,
    held: npt.NDArray[np.bool_],
    loads: F64,
    cap: float,
    hold_cap: float,
    out: I64,
    least: bool = False,
    loose: bool = False,
) -> int:
    """Place the keys of ``order`` (see the module doc); writes pieces to ``out`` (rows), returns their number."""
    n = loads.shape[0]
    rows = 0
    probe = np.empty(n, np.intp)
    took = np.zeros(n, np.bool_)
    for idx in range(order.shape[0]):
        i = order[idx]
        rem = counts[i]
        a = c1[i]
        b = c2[i]
        probe[0] = a
        m = 1
        if b != a:
            probe[1] = b
            m = 2
        for j in range(1, n):
            c = a + j if a + j < n else a + j - n  # (a + j) % n, without a division per combiner
            if c != b:
                probe[m] = c
                m += 1
        first = rows
        nheld = 0
        for c in range(n):
            took[c] = False
            if held[i, c]:
                nheld += 1
        if nheld == 1:  # the common case: a key on one combiner stays there up to the hold cap
            for c in range(n):
                if held[i, c]:
                    put = rem if loads[c] + rem <= hold_cap else max(0, min(rem, int(hold_cap - loads[c])))
                    if put > 0:
                        loads[c] += put
                        out[rows, 0] = i
                        out[rows, 1] = c
                        out[rows, 2] = put
                        rows += 1
                        took[c] = True
                        rem -= put
        elif nheld > 1:  # a split key fills the combiners holding it first, in probe order
            for j in range(m):
                c = probe[j]
                if rem > 0 and held[i, c]:
                    put = max(0, min(rem, int(cap - loads[c])))
                    if put > 0:
                        loads[c] += put
                        out[rows, 0] = i
                        out[rows, 1] = c
                        out[rows, 2] = put
                        rows += 1
                        took[c] = True
                        rem -= put
            if rem > 0 and hold_cap > cap:  # then up to the hold cap, before the key reaches a further combiner
                for j in range(m):
                    c = probe[j]
                    if rem > 0 and held[i, c]:
                        put = max(0, min(rem, int(hold_cap - loads[c])))
                        if put > 0:
                            rows = _piece(out, first, rows, i, c, put, loads)
                            took[c] = True
                            rem -= put
        if least and m > 1 and loads[probe[1]] < loads[probe[0]]:  # the less loaded candidate first
            probe[0] = b
            probe[1] = a
        if rem > 0 and rows == first and nheld == 0:  # a new key: whole, on the first combiner with room
            for j in range(m):
                c = probe[j]
                if loads[c] + rem <= cap:
                    loads[c] += rem
                    out[rows, 0] = i
                    out[rows, 1] = c
                    out[rows, 2] = rem
                    rows += 1
                    rem = 0
                    break
            if rem > 0:
                low = 0
                for c in range(1, n):
                    if loads[c] < loads[low]:
                        low = c
                if loads[low] + rem <= hold_cap:
                    loads[low] += rem
                    out[rows, 0] = i
                    out[rows, 1] = low
                    out[rows, 2] = rem
                    rows += 1
                    rem = 0
        if loose and rem > 0 and nheld > 0:  # a held key's rest: whole on the least loaded other combiner
            low = -1
            for c in range(n):
                if not took[c] and not held[i, c] and (low < 0 or loads[c] < loads[low]):
                    low = c
            if low >= 0 and loads[low] + rem <= cap:
                rows = _piece(out, first, rows, i, low, rem, loads)
                took[low] = True
                rem = 0
        while loose and rem > 0:  # split: fill the combiners with the most room first (fewest pieces)
            low = -1
            for c in range(n):
                if not took[c] and not held[i, c] and loads[c] < cap and (low < 0 or loads[c] < loads[low]):
                    low = c
            put = 0 if low < 0 else max(0, min(rem, int(cap - loads[low])))
            if put <= 0:
                break
            rows = _piece(out, first, rows, i, low, put, loads)
            took[low] = True
            rem -= put
        if rem > 0:  # split: fill combiners in probe order (the ones not holding it yet)
            for j in range(m):
                c = probe[j]
                if rem > 0 and not took[c] and not held[i, c]:
                    put = max(0, min(rem, int(cap - loads[c])))
                    if put > 0:
                        loads[c] += put
                        out[rows, 0] = i
                        out[rows, 1] = c
                        out[rows, 2] = put
                        rows += 1
                        took[c] = True
                        rem -= put
        if rem > 0:  # every combiner full: the rest to the least loaded one it already reached, or any
            low = -1
            for c in range(n):
                if (took[c] or held[i, c]) and (low < 0 or loads[c] < loads[low]):
                    low = c
            if low < 0:
                low = 0
                for c in range(1, n):
                    if loads[c] < loads[low]:
                        low = c
            rows = _piece(out, first, rows, i, low, rem, loads)
    return rows


def greedy_homes_py(order: IntP, counts: F64, home: IntP, loads: F64, target: float) -> int:
    """:func:`plan_homes_py`'s packing: largest first, a key keeps ``home[i]`` while it fits under ``target``.

    A key that does not fit (``loads[home[i]] + counts[i] > target``), or has no home (``-1``), goes to the
    least loaded combiner. Returns how many keys moved.
    """
    n = loads.shape[0]
    moved = 0
    for idx in range(order.shape[0]):
        i = order[idx]
        h = home[i]
        if h < 0 or loads[h] + counts[i] > target:
            low = 0
            for c in range(1, n):
                if loads[c] < loads[low]:
                    low = c
            if low != h:
                moved += 1
            h = low
            home[i] = h
        loads[h] += counts[i]
    return moved


def shed_homes_py(order: IntP, counts: F64, home: IntP, loads: F64, target: float) -> int:
    """:func:`plan_homes_py`'s shedding: every key keeps ``home[i]`` but for what over-full combiners shed.

    The keys without a home (``-1``) go to the least loaded combiner first, largest first. Then each combiner
    above ``target`` sheds keys, one at a time, to the least loaded other combiner, while that lowers the
    higher of the two: the smallest of its keys at least as large as its excess that fits under ``target``
    there, else its largest key smaller than the excess, else its smallest key. Returns how many keys moved.
    """
    n = loads.shape[0]
    m = order.shape[0]
    start = np.zeros(n + 1, np.intp)  # each combiner's keys, largest first: a counting sort of order by home
    for idx in range(m):
        h = home[order[idx]]
        if h >= 0:
            start[h + 1] += 1
            loads[h] += counts[order[idx]]
    for c in range(n):
        start[c + 1] += start[c]
    by_home = np.empty(start[n], np.intp)
    fill = start[:n].copy()
    for idx in range(m):
        h = home[order[idx]]
        if h >= 0:
            by_home[fill[h]] = idx
            fill[h] += 1
    moved = 0
    for idx in range(m):  # keys without a home, largest first
        i = order[idx]
        if home[i] < 0:
            low = 0
            for c in range(1, n):
                if loads[c] < loads[low]:
                    low = c
            home[i] = low
            loads[low] += counts[i]
            moved += 1
    left = np.zeros(m, np.bool_)
    for c in range(n):
        while loads[c] > target:
            low = -1
            for d in range(n):
                if d != c and (low < 0 or loads[d] < loads[low]):
                    low = d
            if low < 0:
                break
            excess = loads[c] - target
            room = target - loads[low]
            fits = -1  # the smallest key at least the excess that fits on low
            under = -1  # the largest key smaller than the excess
            last = -1  # the smallest key
            for j in range(start[c], start[c + 1]):
                idx = by_home[j]
                if left[idx]:
                    continue
                k = counts[order[idx]]
                last = idx
                if k >= excess and k <= room:
                    fits = idx
                if k < excess and under < 0:
                    under = idx
            pick = fits if fits >= 0 else under if under >= 0 else last
            if pick < 0:
                break
            i = order[pick]
            if loads[low] + counts[i] >= loads[c]:  # moving it would not lower the higher of the two
                break
            left[pick] = True
            loads[c] -= counts[i]
            loads[low] += counts[i]
            home[i] = low
            moved += 1
    return moved


greedy_homes = compile_loop(greedy_homes_py)
shed_homes = compile_loop(shed_homes_py)


def plan_homes_py(order: IntP, counts: F64, home: IntP, loads: F64, target: float) -> int:
    """Homes for the keys of ``order`` (largest first), in place in ``home``; returns how many keys moved.

    ``loads`` holds the load already planned per combiner (keys not in ``order``) and is raised by the keys'
    loads. Two plans: keys keep their homes and over-full combiners shed as few keys as they can
    (:func:`shed_homes_py`), or a largest-first packing in which a key keeps its home while it fits
    (:func:`greedy_homes_py`). The first is taken when its most loaded combiner is below the packing's, or as
    loaded with no more keys moved. A packing moves the small keys that come after a combiner's large ones
    once it is full; each key that moves between the slides of a Spark micro-batch (a backlog) costs one
    more partial there.
    """
    shed_home = home.copy()
    shed_loads = loads.copy()
    shed_moved = shed_homes(order, counts, shed_home, shed_loads, target)
    moved = greedy_homes(order, counts, home, loads, target)
    if shed_loads.max() < loads.max() or (shed_loads.max() == loads.max() and shed_moved <= moved):
        home[:] = shed_home
        loads[:] = shed_loads
        return int(shed_moved)
    return int(moved)


def fit_shares_py(pairs: F64, own: F64, mean: float, accept: F64, rounds: int) -> None:
    """Damped rounds of :func:`~router.partitioners.dalton.partitioner.fit_accept`, in place in ``accept``.

    Per round, with the shares of the last round: ``load[b] = own[b] accept[b] + sum_a pairs[a, b] (1 -
    accept[a])``, then ``accept[b] -= 0.5 (load[b] - mean) / max(own[b], 1)``, kept in ``[0, 1]``. The sums run
    in the order numpy's reductions use, so the compiled loop and the numpy expression agree to the bit.
    """
    n = own.shape[0]
    load = np.empty(n, np.float64)
    for _ in range(rounds):
        for b in range(n):
            s = pairs[0, b] * (1.0 - accept[0])
            for a in range(1, n):
                s += pairs[a, b] * (1.0 - accept[a])
            load[b] = own[b] * accept[b] + s
        for b in range(n):
            x = accept[b] - 0.5 * (load[b] - mean) / max(own[b], 1.0)
            accept[b] = min(max(x, 0.0), 1.0)


_piece = compile_loop(_piece_py)
place_keys = compile_loop(place_keys_py)
plan_homes = compile_loop(plan_homes_py)
fit_shares = compile_loop(fit_shares_py)


@functools.cache
def warm() -> None:
    """Compile (or load from numba's cache) the loops for the argument types Dalton passes, once per process.

    Called when a Dalton partitioner is created, so the first scopes of a route do not pay it (~0.2 s even
    from the cache, several seconds when compiling).
    """
    n = 2
    order = np.zeros(1, np.intp)
    place_keys(order, np.ones(1, np.int64), order, order + 1, np.zeros((1, n), np.bool_), np.zeros(n), 1.0, 1.0,
               np.zeros((1 + 4 * n, 3), np.int64), True, True)  # fmt: skip
    plan_homes(order, np.ones(1), np.full(1, -1, np.intp), np.zeros(n), 1.0)
    fit_shares(np.ones((n, n)), np.full(n, 2.0), 2.0, np.ones(n), 1)
