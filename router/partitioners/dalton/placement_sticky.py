"""The sticky placement of one segment (``placement="sticky"``, the default) and one router's plan of a scope.

Functions on a :class:`~router.partitioners.dalton.partitioner.DaltonPartitioner` (its state, read and updated
here), called from its segment loop; the rule is described in that module's docstring, the compiled loops are in
:mod:`.sticky`. :func:`place_sticky` places a segment's keys against the scope-to-date mean;
:func:`plan_next_scope` is one router's plan of the next scope, made when a scope closes.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from router.partitioners.dalton.sticky import place_keys, plan_homes

__all__ = [
    "HOLD_ONE",
    "PLAN_SMALL",
    "PLAN_SPLIT",
    "SCOPE_SEGMENTS",
    "StickyPlacer",
    "key_uniform",
    "place_sticky",
    "plan_next_scope",
    "scope_counts",
]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: One router keeps a held key on its combiner up to the scope's mean times ``1 + HOLD_ONE * balance``
#: (cooperating routers: ``1 + 2 balance``); with the default balance, 1.05.
HOLD_ONE = 2.5
#: One router's plan moves keys of at least ``1 / PLAN_SMALL`` of a combiner's mean; smaller ones keep their homes.
PLAN_SMALL = 64.0
#: One router's plan gives a key of more than this many combiner means a combiner set of its own (filled to
#: the mean, largest key first) that it holds from the first tuple of the next scope.
PLAN_SPLIT = 1.0
#: One router's scope is added up into one entry per key every this many segments (bounded memory).
SCOPE_SEGMENTS = 64


def key_uniform(ids: npt.NDArray[np.uint64]) -> F64:
    """A uniform number in [0, 1) per key id, the same on every router (bits the candidates do not use)."""
    return ((ids >> np.uint64(40)) & np.uint64(0xFFFFFF)).astype(np.float64) / float(1 << 24)


class StickyPlacer(Protocol):
    """What this placement uses of a Dalton partitioner (so this module does not import the partitioner)."""

    n: int
    cooperative: bool
    balance: float
    scope_segments: list[tuple[IntP, I64]]
    win: Any
    slots: Any
    cand: Any
    accept: F64
    last_comb: Any
    own_keys: Any
    last_total: float
    tail_pairs: F64
    shared_ids: npt.NDArray[np.uint64]
    shared_rows: npt.NDArray[np.bool_]
    shared_block: int


def place_sticky(
    p: StickyPlacer, slots: IntP, ids: npt.NDArray[np.uint64], counts: I64, inv: IntP, hot: npt.NDArray[np.bool_]
) -> IntP:
    """Sticky placement of one segment (see :mod:`.sticky`); updates the window, returns tuple combiners."""
    n = p.n
    k = slots.shape[0]
    if not p.cooperative:
        p.scope_segments.append((slots, counts))
        if len(p.scope_segments) >= SCOPE_SEGMENTS:  # bounded: at most one entry per key of the scope
            s_slots, s_counts = scope_counts(p)
            p.scope_segments = [(s_slots, s_counts.astype(np.int64))]
    held = p.win.head[slots] if not p.win.head_empty else np.zeros((k, n), dtype=bool)
    if p.shared_ids.size and p.shared_block == p.win.block:
        pos = np.minimum(np.searchsorted(p.shared_ids, ids), p.shared_ids.shape[0] - 1)
        hit = np.flatnonzero(p.shared_ids[pos] == ids)
        if hit.size:
            held[hit] |= p.shared_rows[pos[hit]]
    nheld = held.sum(axis=1)
    loads = p.win.head_load.astype(np.float64)
    level = (float(loads.sum()) + inv.shape[0]) / n  # the scope's mean once the segment is routed
    cap = level * (1.0 + p.balance)
    hold_cap = level * (1.0 + (2.0 if p.cooperative else HOLD_ONE) * p.balance)
    cand = p.cand[slots]
    c1, c2 = cand[:, 1].astype(np.intp), cand[:, 2].astype(np.intp)
    swap = key_uniform(ids) >= p.accept[c1]  # the tail's first choice, the same on every router
    c1, c2 = np.where(swap, c2, c1), np.where(swap, c1, c2)
    # unsplit keys first (held ones, then new ones largest first), up to the hold cap: their rule is the
    # same on every router; then split and hot keys, largest first, fill around them up to the cap
    big = hot | (nheld > 1)
    held1 = np.flatnonzero(~big & (nheld == 1))
    held1 = held1[np.argsort(counts[held1], kind="stable")]  # a full combiner splits its largest key only
    new = np.flatnonzero(~big & (nheld == 0))
    rest = np.flatnonzero(big)
    new = new[np.argsort(-counts[new], kind="stable")]
    last = p.last_comb[slots].astype(np.intp)
    # new to this scope, whole on one combiner in the last one: try that first. Cooperating routers keep the
    # first choice they share, which carries over from scope to scope by itself; a key one spilled to its
    # second choice goes back there only when no peer sees the key (raw_keys=partitioned), else routers that
    # spilled it differently would keep it apart
    lastn = last[new]
    again = lastn >= 0
    if p.cooperative:
        again &= (lastn == c2[new]) & p.own_keys
    back = new[again]
    if back.size:
        c1, c2 = c1.copy(), c2.copy()
        prev = last[back]
        c2[back] = np.where(prev == c1[back], c2[back], c1[back])
        c1[back] = prev
    rest = rest[np.argsort(-counts[rest], kind="stable")].astype(np.intp)
    buf = np.empty((k + int(nheld.sum()) + 4 * n + 2, 3), dtype=np.int64)
    c64 = counts.astype(np.int64)
    rows = 0
    one = not p.cooperative
    if back.size:  # keys back in a new scope: where they were (one router: planned), when there is room
        # (micro-batches that span several slides, as under a backlog, then ship one partial for them, not
        # one per slide). One router's plan is for the whole scope: room against the scope's expected mean
        basis = max(level, p.last_total / n)
        room, hold = (cap, hold_cap) if p.cooperative else (basis * (1 + p.balance), basis * (1 + 2 * p.balance))
        rows = place_keys(back.astype(np.intp), c64, c1, c2, held, loads, room, hold, buf, False, one)
    if p.cooperative:  # the first choice every router shares, and room for the routers' differences
        # against the mean the scope is expected to reach (the last scope's): early in a scope, when a
        # router's loads differ from its peers' most, a key spills only when far from its fitted share
        spill = max(level, p.last_total / n) * (1.0 + 2.0 * p.balance)
        tail = np.concatenate([held1, new[~again]]).astype(np.intp)
        rows += place_keys(tail, c64, c1, c2, held, loads, spill, spill, buf[rows:], False, False)
        rows += place_keys(rest, c64, c1, c2, held, loads, cap, cap, buf[rows:], False, False)
    else:  # one router: held keys, then split and hot keys, then new keys on the less loaded candidate; a
        # key that outgrows the combiners holding it takes them up to the hold cap, then one more (whole on
        # the least loaded, or on the ones with the most room): a large key reaches as few combiners as its
        # size needs, where filling the few tuples of room that other keys leave would spread it over many
        fresh = new[~again].astype(np.intp)
        rows += place_keys(held1.astype(np.intp), c64, c1, c2, held, loads, cap, hold_cap, buf[rows:], True, True)
        rows += place_keys(rest, c64, c1, c2, held, loads, cap, hold_cap, buf[rows:], False, True)
        rows += place_keys(fresh, c64, c1, c2, held, loads, cap, hold_cap, buf[rows:], True, True)
    pk, pc, pn = buf[:rows, 0], buf[:rows, 1], buf[:rows, 2]
    comb = np.zeros(k, dtype=np.intp)
    comb[pk] = pc
    out = comb[inv]
    if rows > k:  # some keys were split: their tuples, in arrival order, fill their pieces in order
        multi = np.bincount(pk, minlength=k) > 1
        pos = np.flatnonzero(multi[inv])
        pos = pos[np.argsort(inv[pos], kind="stable")]
        r = np.flatnonzero(multi[pk])
        r = r[np.argsort(pk[r], kind="stable")]
        out[pos] = np.repeat(pc[r], pn[r])
    p.win.add(slots[pk], pc.astype(np.intp), pn)
    whole = np.bincount(pk, minlength=k) == 1
    p.last_comb[slots] = -1
    p.last_comb[slots[pk[whole[pk]]]] = pc[whole[pk]]
    if whole.any():  # unsplit keys, by their (hash) candidates: what the next scope's tail rule is fit on
        cand1, cand2 = cand[whole, 1].astype(np.intp), cand[whole, 2].astype(np.intp)
        p.tail_pairs += np.bincount(cand1 * n + cand2, weights=counts[whole], minlength=n * n).reshape(n, n)
    return out


def plan_next_scope(p: StickyPlacer, block: int) -> None:
    """One router, at the end of a scope: each key's place in the next one (scope ``block``).

    The closing scope's counts stand for the next scope's. Keys of more than ``PLAN_SPLIT`` means, largest
    first, get combiner sets: the least loaded combiners, each filled to the mean (the last one partly).
    The key holds that set from its first tuple of the next scope (as a peer's set would, see
    :func:`place_sticky`), so it reaches the combiners its size needs and the other keys are planned around
    it; placed online, segment by segment, it reached about twice as many. Then every other key gets a
    home (``last_comb``): it keeps its home while the home's planned load stays within the mean;
    otherwise, and for a key without one (split in the closing scope), the least loaded combiner is its
    home. Keys under ``1 / PLAN_SMALL`` of the mean keep their homes and count as planned load.
    """
    if not p.scope_segments:
        return
    slots, counts = scope_counts(p)
    home = p.last_comb[slots].astype(np.intp)
    mean = float(counts.sum()) / p.n
    large = np.flatnonzero(counts > PLAN_SPLIT * mean)
    large = large[np.argsort(-counts[large], kind="stable")]
    planned = [0.0] * p.n
    sets = np.zeros((large.shape[0], p.n), dtype=bool)
    for row, rem in enumerate(counts[large].tolist()):  # a few keys (at most n / PLAN_SPLIT)
        while rem > 0:
            low = min(range(p.n), key=planned.__getitem__)
            put = min(rem, mean - planned[low]) if planned[low] < mean else rem
            planned[low] += put
            sets[row, low] = True
            rem -= put
    loads = np.asarray(planned, dtype=np.float64)
    if large.size:
        ids = p.slots.ids[slots[large]]
        by_id = np.argsort(ids)
        p.shared_ids, p.shared_rows, p.shared_block = ids[by_id], sets[by_id], block
    moving = (counts >= mean / PLAN_SMALL) | (home < 0)
    moving[large] = False
    fixed = ~moving
    fixed[large] = False
    order = np.flatnonzero(moving)
    order = order[np.argsort(-counts[order], kind="stable")].astype(np.intp)
    loads += np.bincount(home[fixed], weights=counts[fixed], minlength=p.n)
    plan_homes(order, counts, home, loads, mean)
    home[large] = -1
    p.last_comb[slots] = home


def scope_counts(p: StickyPlacer) -> tuple[IntP, F64]:
    """The current scope's distinct slots and their tuples (its segments added up)."""
    segments = p.scope_segments
    slots, inv = np.unique(np.concatenate([s for s, _ in segments]), return_inverse=True)
    counts = np.bincount(inv.reshape(-1), weights=np.concatenate([c for _, c in segments]))
    return slots.astype(np.intp), counts.astype(np.float64, copy=False)
