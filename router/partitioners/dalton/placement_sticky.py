"""The sticky placement of one segment (``placement="sticky"``, the default) and one router's plan of a scope.

Functions on a :class:`~router.partitioners.dalton.partitioner.DaltonPartitioner` (its state, read and updated
here), called from its segment loop; the rule is described in that module's docstring. Each is one compiled
loop (:mod:`.sticky_segment`, :mod:`.sticky_plan`, with :mod:`.sticky`'s key placement); these functions hand
them the partitioner's state. :func:`place_sticky` places a segment's keys against the scope-to-date mean;
:func:`plan_next_scope` is one router's plan of the next scope, made when a scope closes.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from router.partitioners.dalton import sticky
from router.partitioners.dalton.joint import REPORT_SCOPES, Report, added_up, scope_report
from router.partitioners.dalton.segments import segment_bounds, segment_keys
from router.partitioners.dalton.slots import SlotTable
from router.partitioners.dalton.sticky_plan import plan_scope, sum_by_slot
from router.partitioners.dalton.sticky_segment import place_sticky_segment
from router.partitioners.dalton.window import add_pieces

__all__ = [
    "FILL_DIV",
    "FILL_MASS",
    "FILL_MIN",
    "FILL_SHARE",
    "HOLD_AHEAD",
    "HOLD_ONE",
    "PLAN_SMALL",
    "PLAN_SPLIT",
    "SCOPE_SEGMENTS",
    "StickyPlacer",
    "place_sticky",
    "plan_next_scope",
    "scope_counts",
    "warm",
]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: One router keeps a held key on its combiner up to ``level + HOLD_ONE * balance * E``; at a scope's end, with
#: the default balance, 1.05 times its mean. Cooperating routers keep a split or hot key on the combiners
#: holding it up to ``level * (1 + 2 balance) + HOLD_ONE * balance * (E - level)``: 1.04 times the mean at the
#: scope's end, where their tail's cap is.
HOLD_ONE = 2.5
#: ``E`` above is the mean the scope is expected to end with (the partitioner's ``scope_forecast``), at least
#: the level and at most this many levels. Early in a scope a combiner's count varies by far more than
#: ``balance`` of the scope-to-date level, and a key split then stays split until the scope ends.
HOLD_AHEAD = 4.0
#: Cooperating routers whose hot keys (at least ``L / n`` in the statistics window) carried less than this share
#: of the last statistics window's tuples also count as hot the keys of at least ``L / (FILL_DIV n)``, or fewer:
#: down to the least count among the last window's largest keys that held ``FILL_MASS`` of its tuples (a stream
#: of many small keys, such as Zipf 0.6 over 1k keys, has no key of a quarter of a mean), its ``FILL_DIV n``
#: largest at most (each segment checks its keys against the hot ones, and syncs carry their sets); and at least
#: ``FILL_MIN`` tuples (never more than ``L / n``). The tail they share is placed by a rule every router applies
#: alike; without large keys to fill around it, its combiners drift apart, tail keys spill to further choices
#: and routers spill them differently (on Zipf 1.0, 8 combiners, 4 routers: 1.07 partials per key per
#: micro-batch, against 1.00 for one router). Hot keys are placed after the tail, fill around it and share
#: their combiner sets. Streams with large keys already (Zipf 1.5) keep ``L / n`` alone: more hot keys there
#: are more keys split over routers.
FILL_SHARE = 0.15
FILL_DIV = 4.0
FILL_MASS = 0.25
#: Fewer tuples in a router's statistics window are too noisy to pick a filling key by.
FILL_MIN = 20.0
#: One router's plan moves keys of at least ``1 / PLAN_SMALL`` of a combiner's mean; smaller ones keep their homes.
PLAN_SMALL = 64.0
#: One router's plan gives a key of more than this many combiner means a combiner set of its own (filled to
#: the mean, largest key first) that it holds from the first tuple of the next scope.
PLAN_SPLIT = 1.0
#: One router's scope is added up into one entry per key every this many segments (bounded memory).
SCOPE_SEGMENTS = 64
_NO_IDS = np.zeros(0, dtype=np.uint64)


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
    last_total: float
    backlog: bool
    tail_pairs: F64
    shared_ids: npt.NDArray[np.uint64]
    shared_rows: npt.NDArray[np.bool_]
    shared_block: int
    others: F64
    scope_report: Report
    plan_together: bool
    scope_reports: list[Report]

    def scope_forecast(self, segment: int) -> float: ...


def place_sticky(
    p: StickyPlacer, slots: IntP, ids: npt.NDArray[np.uint64], counts: I64, inv: IntP, hot: npt.NDArray[np.bool_]
) -> IntP:
    """Sticky placement of one segment (see :mod:`.sticky_segment`); updates the window, returns tuple combiners.

    Per segment: a key the slide already holds (or that a plan or the peers gave a combiner set in this
    scope) stays on its combiners; keys not split and not hot are placed first (held ones, then new ones
    largest first), up to the hold cap, by a rule that is the same on every router; then split and hot keys,
    largest first, fill around them up to the cap. A key new to this scope that was whole on one combiner
    in the last one tries that combiner first (one router: its planned home), so a micro-batch that spans
    several slides, as under a backlog, ships one partial for it, not one per slide. Cooperating routers
    keep the first choice they share, which carries over from scope to scope by itself; a key one put
    elsewhere (its second choice, or a combiner it spilled to) does not go back there, else routers that
    placed it differently would keep it apart. Routers that own their keys (``raw_keys=partitioned``) do not
    cooperate here: each places its keys as one router does. One router places a key that outgrows the
    combiners holding it up to the hold cap, then on one more (whole on the least loaded, or on the ones
    with the most room): a large key reaches as few combiners as its size needs.

    One router catching up on a backlog (:meth:`~.partitioner.DaltonPartitioner.set_backlog`) counts a key as
    held by the combiners it reached anywhere in the sliding window, not in the slide alone: Spark's
    micro-batches then span many slides, and a key that comes back in a later slide of one goes where it already
    is. The caps stay per slide, so every slide, and any run of whole slides, stays as balanced as before.
    """
    if not p.cooperative:
        p.scope_segments.append((slots, counts))
        if len(p.scope_segments) >= SCOPE_SEGMENTS:  # bounded: at most one entry per key of the scope
            s_slots, s_counts = scope_counts(p)
            p.scope_segments = [(s_slots, s_counts.astype(np.int64))]
    shared = p.shared_ids.size and p.shared_block == p.win.block
    key_slots = slots.astype(np.intp, copy=False)
    if p.backlog and not p.cooperative:  # the window's pairs, one row per key of the segment
        head, head_rows, head_empty = p.win.refcount[key_slots] > 0, np.arange(key_slots.shape[0]), False
    else:
        head, head_rows, head_empty = p.win.head, key_slots, p.win.head_empty
    # routers planned together (:mod:`.joint`): the combiners count the others' expected load, and the
    # allowance over the level stays this router's own (its share of the routers' tuples times ``balance``)
    together = 1.0 + float(p.others.sum())
    out, buf, rows = place_sticky_segment(
        key_slots,
        ids,
        counts.astype(np.int64, copy=False),
        inv.astype(np.intp, copy=False),
        hot,
        head,
        head_rows,
        head_empty,
        p.shared_ids if shared else _NO_IDS,
        p.shared_rows if shared else np.zeros((0, p.n), dtype=bool),
        p.win.head_load,
        p.others,
        p.cand,
        p.accept,
        p.last_comb,
        p.tail_pairs,
        float(p.balance) / together,
        HOLD_ONE,
        float(p.last_total) * together,
        p.scope_forecast(inv.shape[0]) * together,
        HOLD_AHEAD,
        bool(p.cooperative),
    )
    p.win.add(slots[buf[:rows, 0]], buf[:rows, 1].astype(np.intp), buf[:rows, 2])
    return out


def plan_next_scope(p: StickyPlacer, block: int) -> None:
    """One router, at the end of a scope: each key's place in the next one (scope ``block``).

    The closing scope's counts stand for the next scope's. Keys of more than ``PLAN_SPLIT`` means, largest
    first, get combiner sets: the least loaded combiners, each filled to the mean (the last one partly).
    The key holds that set from its first tuple of the next scope (as a peer's set would, see
    :func:`place_sticky`), so it reaches the combiners its size needs and the other keys are planned around
    it; placed online, segment by segment, it reached about twice as many. Then every other key gets a
    home (``last_comb``): it keeps its home, and a combiner planned over the mean (``1 + balance`` times it
    under a backlog: :meth:`~.partitioner.DaltonPartitioner.set_backlog`) sheds as few keys as it can to the
    least loaded ones (:func:`.sticky.plan_homes`); a key without one (split in the closing scope) gets the
    least loaded combiner. Keys under ``1 / PLAN_SMALL`` of the mean keep their homes and count as
    planned load.
    """
    if not p.scope_segments:
        return
    slots, counts = scope_counts(p)
    if p.plan_together:  # what its SYNCs report (see .joint): its last few scopes added up
        closed = scope_report(p.n, block - 1, p.slots.ids[slots], counts, p.win.head_load, p.backlog)
        p.scope_reports = [*p.scope_reports[1 - REPORT_SCOPES :], closed]
        p.scope_report = added_up(p.scope_reports)
    together = 1.0 + float(p.others.sum())  # routers planned together: the allowance stays this router's own
    allow = float(p.balance) / together if p.backlog else 0.0  # a backlog's micro-batches span slides: keys stay put
    large, sets = plan_scope(slots, counts, p.last_comb, p.n, PLAN_SPLIT, PLAN_SMALL, allow, p.others)
    if large.size:
        ids = p.slots.ids[slots[large]]
        by_id = np.argsort(ids)
        p.shared_ids, p.shared_rows, p.shared_block = ids[by_id], sets[by_id], block


def scope_counts(p: StickyPlacer) -> tuple[IntP, F64]:
    """The current scope's distinct slots and their tuples (its segments added up)."""
    segments = p.scope_segments
    return sum_by_slot(np.concatenate([s for s, _ in segments]), np.concatenate([c for _, c in segments]))


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
                         one, True, np.zeros(0, np.uint64), np.zeros((0, n), np.bool_), np.zeros(n, np.int64),
                         np.zeros(n), np.zeros((1, 3), np.int16), np.ones(n), last, np.zeros((n, n)), 0.05, 2.5, 0.0,
                         0.0, 4.0, False)  # fmt: skip
    slots, counts = sum_by_slot(one, ones)
    plan_scope(slots, counts, last, n, 1.0, 64.0, 0.0, np.zeros(n))
    table = SlotTable(4)
    table.find(table.ids[table.insert(np.ones(1, np.uint64))])
    for rtype in (np.uint8, np.uint16):  # the window's reference counts (blocks < 255, < 65535)
        add_pieces(np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.bool_), np.zeros(n, rtype), one, one,
                   ones, True)  # fmt: skip
