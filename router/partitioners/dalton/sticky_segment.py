"""Dalton's sticky placement of one segment, compiled in one piece (:func:`place_sticky_segment`).

:func:`~router.partitioners.dalton.placement_sticky.place_sticky` gathers the partitioner's state and calls
:func:`place_sticky_segment` (:func:`place_sticky_segment_py` is the same code, uncompiled). The rule is described in
:mod:`.partitioner` and :mod:`.placement_sticky`; here it is one loop per step, in the order the numpy
version took them: the keys' rows held in the slide (and the sets a plan or the peers shared), the
candidates (the tail rule's first choice first, a key back in a new scope on its last combiner first), the
three groups of keys in their orders (stable sorts, so every implementation agrees), :func:`.sticky.place_keys`
on each, then each tuple's combiner (a split key's tuples, in arrival order, fill its pieces in order), the
keys' last whole combiners and the tail rule's pairs. A segment of a thousand tuples took ~0.3 ms as some
sixty numpy calls; compiled, a few tens of microseconds.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import compile_loop
from router.partitioners.dalton.sticky import place_keys

__all__ = [
    "order_by",
    "order_by_py",
    "place_sticky_segment",
    "place_sticky_segment_py",
    "stable_order",
    "stable_order_py",
]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


def stable_order_py(v: npt.NDArray[np.uint64]) -> IntP:
    """The permutation that sorts ``v`` ascending, equal values in their order (``np.argsort(kind="stable")``).

    A least-significant-digit radix sort on bytes that skips the bytes all values share: one or two passes
    for the tuple counts and slots it orders. Compiled comparison sorts mispredict a branch per comparison on
    shuffled input (~40 µs for a thousand values, where this takes a few).
    """
    m = v.shape[0]
    perm = np.arange(m)
    hi = v.max() if m else np.uint64(0)
    if m < 2 or v.min() == hi:
        return perm
    tmp = np.empty(m, np.intp)
    shift = np.uint64(0)
    while shift < np.uint64(64) and (hi >> shift) != np.uint64(0):
        counts = np.zeros(257, np.intp)
        first = (v[0] >> shift) & np.uint64(0xFF)
        same = True
        for j in range(m):
            d = (v[j] >> shift) & np.uint64(0xFF)
            counts[d + np.uint64(1)] += 1
            if d != first:
                same = False
        if not same:
            for d in range(256):
                counts[d + 1] += counts[d]
            for j in range(m):
                d = (v[perm[j]] >> shift) & np.uint64(0xFF)
                tmp[counts[d]] = perm[j]
                counts[d] += 1
            perm, tmp = tmp, perm
        shift += np.uint64(8)
    return perm


stable_order = compile_loop(stable_order_py)


def order_by_py(idx: IntP, key: I64, descending: bool) -> IntP:
    """``idx`` sorted by ``key[idx]`` (ascending, or descending), ties in ``idx`` order (a stable sort)."""
    m = idx.shape[0]
    if m == 0:
        return idx
    top = key[idx[0]]
    low = key[idx[0]]
    for j in range(m):
        top = max(top, key[idx[j]])
        low = min(low, key[idx[j]])
    v = np.empty(m, np.uint64)
    for j in range(m):
        v[j] = np.uint64(top - key[idx[j]]) if descending else np.uint64(key[idx[j]] - low)
    return idx[stable_order(v)]


order_by = compile_loop(order_by_py)


def place_sticky_segment_py(  # noqa: C901, PLR0912, PLR0913, PLR0915 - one compiled piece, see the module doc
    slots: IntP,
    ids: npt.NDArray[np.uint64],
    counts: I64,
    inv: IntP,
    hot: Bools,
    head: Bools,
    head_rows: IntP,
    head_empty: bool,
    shared_ids: npt.NDArray[np.uint64],
    shared_rows: Bools,
    head_load: I64,
    others: F64,
    cand: npt.NDArray[np.int16],
    accept: F64,
    last_comb: npt.NDArray[np.int16],
    tail_pairs: F64,
    balance: float,
    hold_one: float,
    last_total: float,
    forecast: float,
    ahead: float,
    cooperative: bool,
) -> tuple[IntP, I64, int]:
    """Place one segment; returns each tuple's combiner, the pieces ``(key, combiner, tuples)`` and their number.

    ``head[head_rows[i]]`` marks the combiners that hold key ``i`` (the slide's pairs, rows by slot; or, for a
    router catching up, the window's, one row per key). Updates ``last_comb`` (the keys' last whole combiners) and
    ``tail_pairs`` in place. ``shared_ids`` (sorted)
    and ``shared_rows`` are the combiner sets valid in this scope (empty when none are). ``others[c]`` is the
    load the other routers are expected to put on combiner ``c`` per tuple of this router (zeros: it balances
    its own tuples; see :mod:`.joint`): each combiner counts as loaded by them too, in step with this router's
    tuples. ``forecast`` is the tuples the scope is expected to hold in all, theirs included (0: unknown); one
    router measures a held key's allowance against it, at most ``ahead`` times the level (see
    :mod:`.placement_sticky`).
    """
    n = head_load.shape[0]
    k = slots.shape[0]
    held = np.zeros((k, n), np.bool_)
    if not head_empty:
        for i in range(k):
            for c in range(n):
                held[i, c] = head[head_rows[i], c]
    m_shared = shared_ids.shape[0]
    if m_shared:
        for i in range(k):
            pos = min(np.searchsorted(shared_ids, ids[i]), m_shared - 1)
            if shared_ids[pos] == ids[i]:
                for c in range(n):
                    held[i, c] = held[i, c] or shared_rows[pos, c]
    nheld = np.zeros(k, np.int64)
    for i in range(k):
        for c in range(n):
            if held[i, c]:
                nheld[i] += 1
    routed = float(inv.shape[0])  # this router's tuples in the scope once the segment is routed
    for c in range(n):
        routed += float(head_load[c])
    loads = np.empty(n, np.float64)
    total = 0.0
    for c in range(n):  # the other routers' expected load in step with this router's (0 when it is alone)
        loads[c] = float(head_load[c]) + others[c] * routed
        total += loads[c]
    level = (total + inv.shape[0]) / n  # the scope's mean once the segment is routed
    cap = level * (1.0 + balance)
    c1 = np.empty(k, np.intp)
    c2 = np.empty(k, np.intp)
    last = np.empty(k, np.intp)
    for i in range(k):
        a = np.intp(cand[slots[i], 1])
        b = np.intp(cand[slots[i], 2])
        # a uniform number in [0, 1) per key id, the same on every router (bits the candidates do not use)
        u = float((ids[i] >> np.uint64(40)) & np.uint64(0xFFFFFF)) / float(1 << 24)
        if u >= accept[a]:  # the tail's first choice, the same on every router
            a, b = b, a
        c1[i] = a
        c2[i] = b
        last[i] = last_comb[slots[i]]
    n_held1 = n_new = n_rest = 0
    for i in range(k):
        if hot[i] or nheld[i] > 1:
            n_rest += 1
        elif nheld[i] == 1:
            n_held1 += 1
        else:
            n_new += 1
    held1 = np.empty(n_held1, np.intp)
    new = np.empty(n_new, np.intp)
    rest = np.empty(n_rest, np.intp)
    n_held1 = n_new = n_rest = 0
    for i in range(k):
        if hot[i] or nheld[i] > 1:
            rest[n_rest] = i
            n_rest += 1
        elif nheld[i] == 1:
            held1[n_held1] = i
            n_held1 += 1
        else:
            new[n_new] = i
            n_new += 1
    held1 = order_by(held1, counts, False)  # a full combiner splits its largest key only
    new = order_by(new, counts, True)
    rest = order_by(rest, counts, True)
    # keys new to the scope that were whole on one combiner in the last one try it first (see placement_sticky)
    again = np.zeros(new.shape[0], np.bool_)
    n_back = 0
    for j in range(new.shape[0]):
        i = new[j]
        ok = last[i] >= 0 and not cooperative  # peers that see the key may have put it elsewhere
        again[j] = ok
        if ok:
            n_back += 1
    back = np.empty(n_back, np.intp)
    fresh = np.empty(new.shape[0] - n_back, np.intp)
    n_back = n_fresh = 0
    for j in range(new.shape[0]):
        if again[j]:
            back[n_back] = new[j]
            n_back += 1
        else:
            fresh[n_fresh] = new[j]
            n_fresh += 1
    for j in range(n_back):
        i = back[j]
        prev = last[i]
        if prev != c1[i]:
            c2[i] = c1[i]
        c1[i] = prev
    buf = np.empty((k + int(nheld.sum()) + 4 * n + 2, 3), np.int64)
    rows = 0
    if n_back:  # one router only (cooperating routers never go back, above)
        basis = max(level, last_total / n)
        room, hold = basis * (1 + balance), basis * (1 + 2 * balance)
        rows = place_keys(back, counts, c1, c2, held, loads, room, hold, buf, False, True)
    # the mean the scope is expected to end with: early in a scope the counts' noise is large next to the
    # level, and a key split (or spilled) then stays so for the whole scope
    expected = min(max(level, forecast / n), ahead * level)
    if cooperative:
        # the tail against the previous scope's mean, else (a first scope) the expected one: the level of the
        # first small segments differs between routers, and tail keys they spilled differently stay split
        spill = (max(level, last_total / n) if last_total > 0 else expected) * (1.0 + 2.0 * balance)
        tail = np.concatenate((held1, fresh))
        rows += place_keys(tail, counts, c1, c2, held, loads, spill, spill, buf[rows:], False, False)
        # split and hot keys fill the combiners holding them up to (1 + 2 balance) times the level, and early in
        # the scope by a share of what it has still to come: small segments (a live router's polls) left each
        # router's held combiners full by a tuple or two, and the key reached a further combiner
        hold_rest = level * (1.0 + 2.0 * balance) + hold_one * balance * (expected - level)
        rows += place_keys(rest, counts, c1, c2, held, loads, cap, hold_rest, buf[rows:], False, False)
    else:
        hold_cap = level + hold_one * balance * expected  # one router's allowance over the level
        rows += place_keys(held1, counts, c1, c2, held, loads, cap, hold_cap, buf[rows:], True, True)
        rows += place_keys(rest, counts, c1, c2, held, loads, cap, hold_cap, buf[rows:], False, True)
        rows += place_keys(fresh, counts, c1, c2, held, loads, cap, hold_cap, buf[rows:], True, True)
    pieces = np.zeros(k, np.int64)  # rows per key; a key's rows are consecutive
    first = np.empty(k, np.intp)
    for r in range(rows):
        i = buf[r, 0]
        if pieces[i] == 0:
            first[i] = r
        pieces[i] += 1
    out = np.empty(inv.shape[0], np.intp)
    cur = first.copy()  # a split key's current piece, and its tuples still to come on it
    left = np.full(k, -1, np.int64)
    for t in range(inv.shape[0]):
        i = inv[t]
        if pieces[i] > 1:  # split: its tuples, in arrival order, fill its pieces in order
            if left[i] < 0:
                left[i] = buf[cur[i], 2]
            elif left[i] == 0:
                cur[i] += 1
                left[i] = buf[cur[i], 2]
            left[i] -= 1
            out[t] = buf[cur[i], 1]
        else:
            out[t] = buf[first[i], 1]
    for i in range(k):
        last_comb[slots[i]] = -1 if pieces[i] != 1 else buf[first[i], 1]
        if pieces[i] == 1:  # unsplit keys, by their (hash) candidates: what the next scope's tail rule is fit on
            tail_pairs[cand[slots[i], 1], cand[slots[i], 2]] += counts[i]
    return out, buf, rows


place_sticky_segment = compile_loop(place_sticky_segment_py)
