"""The paper's placement of one segment (``placement="bandit"``): the tail rule, then the hot keys by the bandit.

Functions on a :class:`~router.partitioners.dalton.partitioner.DaltonPartitioner` (its state, read and
updated here), called from its segment loop when ``placement`` is ``"bandit"``. Hot keys (frequency
``>= L / n`` in the statistics window, or still in the Q-table) are routed in chunks by the epsilon-greedy
contextual bandit (:mod:`.bandit`); the other keys by ``tail``: ``hash`` (the paper) or the two-choice
``affinity`` rule of :mod:`.tail`. With ``pack`` the hot keys go first, up to the mean level, and the tail
fills around them; otherwise the tail goes first and the hot tuples fill up to their water level (the
paper's order).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from router.partitioners.dalton import sync
from router.partitioners.dalton.bandit import run_chunks
from router.partitioners.dalton.sync import Learner
from router.partitioners.dalton.tail import affinity_fill

__all__ = ["BanditPlacer", "draw", "place_segment", "route_hot"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class BanditPlacer(Learner, Protocol):
    """What this placement uses of a Dalton partitioner (so this module does not import the partitioner)."""

    scope: Any
    tail: Any
    cand: Any
    pack: Any
    quantum: Any
    rng: Any


def place_segment(
    p: BanditPlacer, slots: IntP, ids: npt.NDArray[np.uint64], counts: I64, inv: IntP, hot: npt.NDArray[np.bool_]
) -> IntP:
    """Route one segment (distinct keys ``slots``/``ids`` with ``counts``; ``inv`` per tuple); tuple combiners."""
    n = p.n
    rows = p.qtable.rows
    base: F64 = (p.win.head_load if p.scope == "slide" else p.win.window_load).astype(np.float64)
    any_hot = bool(rows) and bool(hot.any())
    t = np.flatnonzero(~hot) if any_hot else None
    st = slots if t is None else slots[t]
    ct = counts if t is None else counts[t]
    level = (float(base.sum()) + inv.shape[0]) / n  # the mean load once the segment is routed
    affinity = p.tail == "affinity" and st.size > 0
    held = c1 = c2 = None
    if affinity:
        cand = p.cand[st]
        c1, c2 = cand[:, 1].astype(np.intp), cand[:, 2].astype(np.intp)
        if p.scope == "window" or not p.win.head_empty:  # a fresh slide holds nothing yet
            held = np.where(p.win.held(st, c1, p.scope), c1, np.where(p.win.held(st, c2, p.scope), c2, -1))
    hot_out: IntP | None = None
    if any_hot and p.pack:  # hot keys first (after the tail keys bound to a combiner), up to the level
        fixed = np.zeros(n) if held is None else np.bincount(held[held >= 0], ct[held >= 0], minlength=n)
        choice = p.cand[slots, 0].astype(np.intp)
        loads = (base + fixed).tolist()
        hot_out = np.empty(inv.shape[0], dtype=np.intp)
        pslots, pcombs, pcounts = route_hot(p, hot, slots, ids, choice, counts, inv, loads, hot_out, level)
        base = np.asarray(loads, dtype=np.float64) - fixed
    if affinity:
        assert c1 is not None and c2 is not None
        tail = affinity_fill(c1, c2, held, ct, base, n, level if p.pack else None)
    else:
        tail = p.cand[st, 0].astype(np.intp)
    if t is None:
        p.win.add(slots, tail, counts)
        return tail[inv]
    choice = p.cand[slots, 0].astype(np.intp)
    choice[t] = tail
    tuple_out = choice[inv]
    if hot_out is None:  # tail first, then the hot tuples up to their water level (the paper's order)
        loads = (base + np.bincount(tail, weights=ct, minlength=n)).tolist()
        pslots, pcombs, pcounts = route_hot(p, hot, slots, ids, choice, counts, inv, loads, tuple_out)
    else:
        on = hot[inv]
        tuple_out[on] = hot_out[on]
    p.win.add(np.concatenate([st, pslots]), np.concatenate([tail, pcombs]), np.concatenate([ct, pcounts]))
    return tuple_out


def route_hot(
    p: BanditPlacer,
    hot: npt.NDArray[np.bool_],
    slots: IntP,
    ids: npt.NDArray[np.uint64],
    home: IntP,
    counts: I64,
    inv: IntP,
    loads: list[float],
    out: IntP,
    level: float | None = None,
) -> tuple[IntP, IntP, I64]:
    """Route the hot tuples chunk by chunk (writes ``out``); returns distinct (slot, combiner, tuples)."""
    n = p.n
    hk = np.flatnonzero(hot)
    gmap = np.full(hot.shape[0], -1, dtype=np.int16)  # hot key index per distinct key (at most ~2n)
    gmap[hk] = np.arange(hk.shape[0])
    hot_counts = counts[hk].tolist()
    order = np.argsort(gmap[inv], kind="stable")  # non-hot tuples first, then each hot key in order
    tpos = order[inv.shape[0] - sum(hot_counts) :]
    keys_u = ids[hk].tolist()
    rows = p.qtable.rows
    for key, h in zip(keys_u, home[hk].tolist(), strict=True):
        rows[key].home = h
    held = p.win.head[slots[hk]] if p.scope == "slide" else p.win.refcount[slots[hk]] > 0
    masks = dict(zip(keys_u, (sum(1 << c for c in range(n) if r[c]) for r in held.tolist()), strict=True))
    adaptive = p.quantum is None
    quantum = max(1, inv.shape[0] // (32 * n)) if p.quantum is None else p.quantum
    chunks = run_chunks(
        p.qtable, p.cfg, keys_u, hot_counts, loads, masks, quantum, adaptive,
        partial(draw, p), p.buffer if p.awaiting else None, level,
    )  # fmt: skip
    if p.awaiting and len(p.buffer) > sync.MAX_BUFFER:
        sync.leave_await(p)  # no GLOBAL for too long: bounded memory, local learning goes on
    chunks.sort(key=lambda c: c[0])  # per key, in the order decided (the sort is stable)
    out[tpos] = np.repeat([c[1] for c in chunks], [c[2] for c in chunks])
    pairs: dict[tuple[int, int], int] = {}
    for j, a, m in chunks:
        pairs[j, a] = pairs.get((j, a), 0) + m
    hslots = slots[hk].tolist()
    return (
        np.asarray([hslots[j] for j, _ in pairs], dtype=np.intp),
        np.asarray([a for _, a in pairs], dtype=np.intp),
        np.asarray(list(pairs.values()), dtype=np.int64),
    )


def draw(p: BanditPlacer) -> tuple[list[float], list[int]]:
    """Exploration draws for the bandit (none when epsilon = 0: deterministic, seed-independent)."""
    size = 4 * p.n
    if p.cfg.epsilon <= 0:
        return [1.0] * size, [0] * size
    u = np.asarray(p.rng.random(size), dtype=np.float64).tolist()
    r = np.asarray(p.rng.integers(0, p.n, size), dtype=np.int64).tolist()
    return u, r
