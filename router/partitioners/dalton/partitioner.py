"""The Dalton partitioner ([Dalton] in docs/partitioners.md): state scoped to the consumer's micro-batch.

Contract. ``assign`` returns one combiner per tuple, in ``[0, n)``. The *scope* is the current slide
(``slide`` = the Spark trigger: Spark pre-aggregates each micro-batch per combiner task, so a key costs one
shuffled partial per combiner it reaches in the micro-batch). A batch that crosses a slide boundary is cut
there and each part is routed in its own scope. Everything below is deterministic given the seed and the
sequence of ``assign``/``merge``/``apply_global`` calls; :meth:`snapshot` and :meth:`restore` continue exactly.

``placement="sticky"`` (the default; :mod:`.placement_sticky`, compiled in :mod:`.sticky_segment`, :mod:`.sticky_plan`
and :mod:`.sticky`; a batch's segments are cut in :mod:`.segments`), per
segment of a batch, against the scope-to-date mean ``level`` (the scope's load once the segment is routed,
divided by ``n``):

1. keys not split and not hot: first the ones a combiner already holds in the scope, smallest first (they stay
   there up to ``level * (1 + 2 balance)``; with one router up to ``level + 2.5 balance * E``, ``E`` the
   mean the scope is expected to end with (:meth:`~DaltonPartitioner.scope_forecast`, between ``level`` and
   ``4 level``), so a full combiner splits its largest key), then the new ones largest first, each whole on
   the first combiner of its probe order with room. A key's probe order starts with its two hash candidates.
   One router plans each new scope on the closing one's counts (:func:`.sticky.plan_homes`): a key keeps the
   combiner it had, and a combiner planned over the mean sheds as few keys as it can to the least loaded ones.
   A key new to the scope tries its planned home first, with room under ``1 + balance`` times the larger of
   ``level`` and the previous scope's mean (the plan is for the whole scope), else the less loaded
   candidate with room under ``level * (1 + balance)`` (then the least loaded combiner within the hold cap).
   Cooperating routers (``routers > 1``, or after a sync or merge) put first the candidate chosen by a
   per-combiner share fitted on the previous scope's keys (:func:`fit_accept`) and a per-key number derived
   from the key id, the same on every router, with room under ``(1 + 2 balance)`` times the larger of
   ``level`` and the previous scope's mean (the mean the scope is expected to end with when the previous
   scope is unknown: a router's first scope is the part of one from its first tuple, and fits nothing);
2. then split and hot keys, largest first: each fills the combiners that already hold it up to
   ``level * (1 + balance)``, then up to the hold cap, before it reaches a further one (in its probe order;
   cooperating routers: ``level * (1 + 2 balance) + 2.5 balance * (E - level)``, so that early in a scope, in
   a live router's small segments, a filling key does not reach a further combiner because its own are full
   by a tuple or two). One router places them
   between its held keys and its new ones, so the new keys fill around them. Cooperating routers whose hot
   keys carried little of the last statistics window (``FILL_SHARE``) also count its largest keys as hot,
   so the tail they share has keys to fill around it (:mod:`.placement_sticky`).

So a key is split only when it is larger than the room left, and uniform keys behave like cAM (replication
about 1). What carries over from one scope to the next: the fitted shares, each key's last whole combiner
(one router: its planned home) and the hot-key statistics, nothing that would keep a drifted hot set split.
Cooperating routers also share the combiner sets of their split and hot keys and the fitted shares
(:mod:`.sync`): P routers fill one set per key instead of P. Routers that own their keys
(``raw_keys=partitioned``) each balance their own tuples, or with ``plan_together`` plan the combiners' load
together while they route in step (:mod:`.joint`).

``placement="bandit"`` (:mod:`.placement_bandit`): the paper's Algorithm 1 with the project's options. Hot
keys (frequency ``>= L / n`` in the statistics window) are routed by the epsilon-greedy contextual bandit
(:mod:`.bandit`) in chunks, the other keys by ``tail`` (``hash``, the paper, or the two-choice ``affinity``
rule of :mod:`.tail`); ``pack`` routes hot keys first up to the mean level; ``update``, ``quantum``,
``micro_batch`` as described on :class:`~schemas.partitioner_settings.DaltonSettings`. ``quantum=1,
update="chosen", pack=False, tail="hash", micro_batch=False`` is Algorithm 1 tuple by tuple.

The sliding window's fragmentation (with correct expiry) is kept in both placements; key forwarding uses it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from router.partitioners.base import Partitioner, PartitionerState
from router.partitioners.dalton import sync
from router.partitioners.dalton.bandit import BanditConfig, QTable, Reward
from router.partitioners.dalton.joint import NO_REPORT, Report, take_plan
from router.partitioners.dalton.placement_bandit import place_segment
from router.partitioners.dalton.placement_sticky import (
    FILL_DIV,
    FILL_MASS,
    FILL_MIN,
    FILL_SHARE,
    place_sticky,
    plan_next_scope,
    warm,
)
from router.partitioners.dalton.segments import segment_bounds, segment_keys
from router.partitioners.dalton.slots import KeySlots, SlotTable
from router.partitioners.dalton.stats import FrequencyStats
from router.partitioners.dalton.sticky import fit_shares
from router.partitioners.dalton.window import SlidingState
from router.partitioners.keys import KeyBatch
from schemas.partitioner_settings import DaltonSettings

__all__ = ["DEFAULT_TAIL", "DaltonPartitioner"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
TailRule = Literal["hash", "affinity"]
#: The bandit placement's default tail rule (declared on :class:`DaltonSettings`).
DEFAULT_TAIL: TailRule = DaltonSettings.model_fields["tail"].default
_INITIAL_SLOTS = 1 << 14
#: Most combiners: the per-slot candidate table is int16.
MAX_COMBINERS = 32767


def fit_accept(pairs: F64, rounds: int = 30) -> F64:
    """Per combiner, the share of the keys having it first that it keeps (the rest go to their second).

    ``pairs[a, b]``: tuples of keys with candidates ``(a, b)`` in the last scope. The shares are fit so that
    those keys would have loaded every combiner as evenly as they can (a few damped rounds of moving load
    from combiners above the mean to their keys' second candidates). Every router fits them on its own
    view of the last scope; with routers seeing the same stream they agree but for a few keys.
    """
    n = pairs.shape[0]
    accept = np.ones(n, dtype=np.float64)
    own = pairs.sum(axis=1)
    total = float(own.sum())
    if total <= 0:
        return accept
    fit_shares(np.ascontiguousarray(pairs, dtype=np.float64), own, total / n, accept, rounds)  # compiled rounds
    return accept


class DaltonPartitioner(KeySlots, Partitioner):
    """Dalton (Zapridou et al., PVLDB 2022) with the project's decisions of docs/partitioners.md.

    ``window`` and ``slide`` are in the unit of ``assign``'s times; ``slide`` is the scope (the consumer's
    micro-batch). The algorithm's settings are a :class:`~schemas.partitioner_settings.DaltonSettings`
    (``settings``) and/or its fields as keyword arguments (they override ``settings``); the model is the one
    place their defaults and bounds are written, and it validates them here.

    Cooperative learning: :meth:`sync_payload`, :meth:`apply_global`, :meth:`merge` (see :mod:`.sync`).
    """

    name = "dalton"
    splits_keys = True
    n_hashes = 2
    state_version = 6  # 3: sticky placement (shared combiner sets); 4: one router's planned homes; 5: agreed fits;
    # 6: the scope's first and latest times (its forecast)

    def __init__(
        self,
        n: int,
        *,
        window: float,
        slide: float,
        seed: int = 0,
        settings: DaltonSettings | None = None,
        **params: Any,
    ) -> None:
        base = settings.model_dump() if settings is not None else {}
        cfg = DaltonSettings.model_validate({**base, **params, "name": "dalton"})
        self.settings = cfg
        if n > MAX_COMBINERS:
            raise ValueError(f"n must be at most {MAX_COMBINERS}, got {n!r}")
        self.tail: TailRule = cfg.tail
        self.placement = cfg.placement
        if self.placement == "sticky":
            warm()  # the compiled loops, now rather than in the first scopes
        self.two_candidates = self.tail == "affinity" or self.placement == "sticky"
        super().__init__(n, window=window, slide=slide, seed=seed, hash_seed=cfg.hash_seed)
        self.stats_window = slide if cfg.stats_window is None else cfg.stats_window
        self._params.update(cfg.params())
        # a hashed tail cannot fill around hot keys placed first: with tail=hash the hot keys go last
        self.pack = cfg.pack and self.tail == "affinity"
        self.balance = cfg.balance
        self.cfg = BanditConfig(
            self.n, cfg.epsilon, cfg.gamma, cfg.p1, cfg.p2, cfg.initial_q,
            min(cfg.max_split or self.n, self.n), cfg.update,
        )  # fmt: skip
        self.max_split = self.cfg.max_split
        self.scope = "slide" if cfg.micro_batch or self.placement == "sticky" else "window"
        self.quantum = cfg.quantum
        self.key_forwarding = cfg.key_forwarding
        self.slots = SlotTable(_INITIAL_SLOTS)
        self.win = SlidingState(self.n, max(1, math.ceil(window / slide)), _INITIAL_SLOTS)
        self.stats = FrequencyStats(self.n, cfg.statistics, _INITIAL_SLOTS, exact_limit=cfg.exact_limit)
        self.qtable = QTable(self.n, cfg.initial_q)
        # cooperative learning (see sync.py)
        self.sync_counts: I64 = np.zeros(_INITIAL_SLOTS, dtype=np.int64)
        self._sync_pending: list[tuple[IntP, I64]] = []
        #: per slot: the key's hash combiner and its two distinct candidates
        self.cand: npt.NDArray[np.int16] = np.zeros((_INITIAL_SLOTS, 3), dtype=np.int16)
        self.records_since_sync = 0
        self.awaiting = False
        #: each router sees only its own keys (raw topic partitioned by the key; "auto" is resolved by the route)
        self.own_keys = cfg.raw_keys == "partitioned"
        #: such routers plan the combiners' load together while they route in step (see .joint)
        self.plan_together = cfg.plan_together and self.own_keys
        #: several routers read the same keys (also: a merge, a GLOBAL with peers): the tail takes a shared rule
        self.cooperative = cfg.routers > 1 and not self.independent
        self.sync_block = -1  # the scope of the last SYNC sent
        self.buffer: list[Reward] = []
        self.last_global_block = -1
        #: sticky placement: combiner sets of split keys learnt from peers (one router: planned for its large
        #: keys), valid in scope ``shared_block``
        self.shared_ids: npt.NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)
        self.shared_rows: npt.NDArray[np.bool_] = np.zeros((0, self.n), dtype=bool)
        self.shared_block = -1
        #: sticky placement with cooperating routers: tuples of unsplit keys per (first, second) candidate in
        #: the scope, and per combiner the share of its first-candidate keys it keeps (fit per scope)
        self.tail_pairs: F64 = np.zeros((self.n, self.n), dtype=np.float64)
        self.accept: F64 = np.ones(self.n, dtype=np.float64)
        #: this router's own fit at the start of the scope (what its SYNCs send), and the routers' shared rule
        #: for the next scope (the mean of their fits, from a GLOBAL or a merge during this scope)
        self.fit: F64 = np.ones(self.n, dtype=np.float64)
        self.next_accept: F64 | None = None
        #: per slot: the combiner holding the key whole when it was last routed (-1: split, or unknown)
        self.last_comb: npt.NDArray[np.int16] = np.full(_INITIAL_SLOTS, -1, dtype=np.int16)
        #: tuples this router routed in the previous scope (the expected size of the current one; 0: unknown)
        self.last_total = 0.0
        #: the block of this router's first scope (-1: none yet): it starts where the router does, mid-slide as a
        #: rule, and such a part of a scope says nothing of the next one's size
        self.first_block = -1
        #: the current scope's segments as (slots, tuples) pairs: what one router plans the next scope on
        self.scope_segments: list[tuple[IntP, I64]] = []
        #: routers that own their keys, planned together (:mod:`.joint`): per combiner, the load the other
        #: routers are expected to put there per tuple of this one (zeros: it balances its own tuples)
        self.others: F64 = np.zeros(self.n, dtype=np.float64)
        #: the plans made with peers, by the scope they hold from (each router switches at the same scope)
        self.others_plans: list[tuple[int, F64]] = []
        #: the scope the first plan made with peers holds from (-1: none), and whether planning was given up
        self.joint_from = -1
        self.joint_off = False
        #: this router's last closed scopes, added up (what its SYNCs report, see .joint), and each alone
        self.scope_report: Report = NO_REPORT
        self.scope_reports: list[Report] = []
        #: the router is catching up on a backlog (:meth:`set_backlog`): one router keeps keys where the window has them
        self.backlog = False
        #: the first and the latest time routed in the current scope (what :meth:`scope_forecast` projects from)
        self.scope_start = math.nan
        self.scope_now = math.nan
        self._forward: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)

    def _hash_count(self) -> int:
        return 2 if self.two_candidates else 1

    # -- time ----------------------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        block = int(t // self.slide)
        if block != self.win.block and self.placement == "sticky":  # a new scope: refit the shared tail rule
            nxt = block == self.win.block + 1
            if self.win.block < 0:
                self.first_block = block
            # the closing scope was this router's first and began after its slide's start: only part of one
            part = self.win.block == self.first_block and self.scope_start > self.win.block * self.slide
            whole = nxt and not part  # the closing scope, whole and just before this one: fit and size on it
            self.fit = fit_accept(self.tail_pairs) if whole else np.ones(self.n)
            # cooperating routers: the rule they agreed on during the closing scope (the same on every router
            # for the whole scope), else this router's own fit
            shared = self.next_accept if nxt and self.cooperative else None
            self.accept = self.fit if shared is None else shared
            self.next_accept = None
            self.tail_pairs[:] = 0
            self.last_total = float(self.win.head_load.sum()) if whole else 0.0
            while self.others_plans and self.others_plans[0][0] <= block:  # a plan made with peers holds from here
                self.others = self.others_plans.pop(0)[1]
            if nxt and not self.cooperative:
                plan_next_scope(self, block)
            self.scope_segments = []
            self.scope_start = self.scope_now = t
        self.win.advance(block)
        mass = FILL_MASS if self.placement == "sticky" and self.cooperative else 0.0  # its largest keys' count
        if self.stats.advance(int(t // self.stats_window), mass, FILL_SHARE, int(FILL_DIV * self.n)):
            self.qtable.expire(self.stats.index)

    def scope_forecast(self, segment: int) -> float:
        """The tuples this router is expected to route in the current scope, ``segment`` more included (0: unknown).

        The scope's tuples so far projected to the scope's end at the rate of its elapsed time (times never
        decrease within a batch), and no more than the previous scope held: the smaller is the safer, since
        one router lets a held key's combiner run ahead of the level by a share of it. At the scope's end the
        projection is what the scope holds.
        """
        routed = float(self.win.head_load.sum()) + segment
        elapsed = self.scope_now - self.scope_start
        span = (self.win.block + 1) * self.slide - self.scope_start  # from the scope's first time to its end
        projected = routed * span / elapsed if elapsed > 0 else math.inf
        expected = min(projected, self.last_total if self.last_total > 0 else math.inf)
        return 0.0 if math.isinf(expected) else expected

    def _segments(self, times: np.ndarray) -> list[tuple[int, int]]:
        size = times.shape[0]
        first, last = float(times[0]), float(times[-1])
        if first // self.slide == last // self.slide and first // self.stats_window == last // self.stats_window:
            return [(0, size)]
        bounds = segment_bounds(np.asarray(times, dtype=np.float64), float(self.slide), float(self.stats_window))
        return list(itertools.pairwise(bounds.tolist()))

    # -- the data path -------------------------------------------------------------------------
    def _assign(self, batch: KeyBatch, times: np.ndarray) -> npt.ArrayLike:
        slots = self._slots_for(batch.ids, batch.hashes)
        segments = self._segments(times)
        if len(segments) == 1:  # the common case: the batch lies inside one slide
            self._advance(float(times[0]))
            self.scope_now = float(times[-1])
            out, hot = self._segment(slots, batch.ids, np.bincount(batch.inverse), batch.inverse)
            if self.key_forwarding:
                self._forward = self._forwardable(slots, hot)[batch.inverse]
            return out
        out = np.empty(batch.size, dtype=np.intp)
        forward = np.zeros(batch.size, dtype=bool)
        seen = np.full(slots.shape[0], -1, dtype=np.intp)  # segment_keys' scratch
        for a, b in segments:
            self._advance(float(times[a]))
            self.scope_now = float(times[b - 1])
            u, inv, counts = segment_keys(batch.inverse[a:b], seen)
            seg_out, hot = self._segment(slots[u], batch.ids[u], counts, inv)
            out[a:b] = seg_out
            if self.key_forwarding:
                forward[a:b] = self._forwardable(slots[u], hot)[inv]
        if self.key_forwarding:
            self._forward = forward
        return out

    def _segment(
        self, slots: IntP, ids: npt.NDArray[np.uint64], counts: I64, inv: IntP
    ) -> tuple[IntP, npt.NDArray[np.bool_]]:
        freq = self.stats.observe(slots, ids, counts, inv.shape[0])
        self._sync_pending.append((slots, counts))  # added up lazily (flush_sync_counts)
        if len(self._sync_pending) >= 32:
            self.flush_sync_counts()
        self.records_since_sync += inv.shape[0]
        rows = self.qtable.rows
        hot_now = freq >= self.stats.threshold()
        own = self.stats.own_threshold()
        self.stats.note_hot(int(counts[freq >= own].sum()))
        if self.placement == "sticky" and self.cooperative and self.stats.hot_share() < FILL_SHARE:
            fill = min(own / FILL_DIV, self.stats.prev_mass_count or own)  # keys to fill around the shared tail
            hot_now |= freq >= max(fill, min(own, FILL_MIN))
        for i in np.flatnonzero(hot_now).tolist():
            self.qtable.mark_hot(int(ids[i]), self.stats.index)  # hot now: valid through the next window
        hot = np.zeros(ids.shape[0], dtype=bool)
        if rows:  # hot now, or still in the Q-table (hot in the previous statistics window)
            hot = (ids[:, None] == np.fromiter(rows, dtype=np.uint64, count=len(rows))[None, :]).any(axis=1)
        if self.placement == "sticky":
            return place_sticky(self, slots, ids, counts, inv, hot), hot
        return place_segment(self, slots, ids, counts, inv, hot), hot

    def plan_with(self, peers: Sequence[Report] | None, own: Report | None = None) -> None:
        """Plan the combiners' load with the peers' reports, and its own as they have it (:func:`.joint.take_plan`)."""
        take_plan(self, peers, own)

    def set_backlog(self, behind: bool) -> None:
        """Whether the router is catching up on a backlog: then Spark's micro-batches span many slides.

        A key that moves between the slides of one micro-batch costs a partial there. So one router then
        counts a key as held by the combiners it reached in the sliding window, not in the slide alone (see
        :func:`.placement_sticky.place_sticky`), and its plan keeps a key at home while its combiner stays
        within ``1 + balance`` times the mean (else within the mean). Live, each micro-batch is one slide: keys
        are free to move between slides, and the placement follows the last slide's counts more closely.
        """
        self.backlog = bool(behind)

    # -- key forwarding (Sec. 4.2) -------------------------------------------------------------
    def _forwardable(self, slots: IntP, hot: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        ok = ~hot & (self.win.fragmentation(slots, "window") == 1)
        if self.cooperative and self.last_global_block != self.win.block:
            ok[:] = False  # several routers: only when a GLOBAL arrived within this slide
        return ok

    def forwardable(self) -> npt.NDArray[np.bool_]:
        """Per tuple of the last batch, whether its partial may skip the reducers (key forwarding, Sec. 4.2).

        True for a non-hot key held by exactly one combiner in the whole sliding window, when
        ``key_forwarding`` is on; with cooperating routers only if a GLOBAL message was applied during the
        current slide. All False when ``key_forwarding`` is off.
        """
        return self._forward.copy()

    # -- introspection -------------------------------------------------------------------------
    def hot_keys(self) -> list[int]:
        """Key ids currently in the Q-table (hot now or in the previous statistics window)."""
        return list(self.qtable.rows)

    def fragmentation(self, keys: Sequence[Any], scope: Literal["window", "slide"] = "window") -> list[int]:
        """Combiners each key reaches in the sliding window (or the current slide)."""
        if not len(keys):
            return []
        enc = self.codec.encode(keys)
        ids = enc.ids[enc.inverse]
        slots = self.slots.find(ids)
        frag = self.win.fragmentation(np.maximum(slots, 0), scope)
        return np.where(slots >= 0, frag, 0).tolist()

    @property
    def independent(self) -> bool:
        """Sticky placement of keys no other router sees: placed as one router does, whatever peers share.

        The router balances its own tuples on its own load (see :mod:`.sync`).
        """
        return bool(self.own_keys) and self.placement == "sticky"

    def _load_state(self, state: dict[str, Any]) -> None:
        super()._load_state(state)
        # a snapshot of a release whose routers owning their keys cooperated (before 2026-11-30) continues alone
        self.cooperative = self.cooperative and not self.independent

    # -- cooperative learning (sync.py) --------------------------------------------------------
    def sync_payload(self) -> dict[str, Any]:
        """SYNC message body for the Q-table reducer; enters the AWAIT state (see :mod:`.sync`)."""
        return sync.make_payload(self)

    def leave_await(self) -> None:
        """No GLOBAL came in time: drop the buffered rewards and leave AWAIT (see :mod:`.sync`)."""
        sync.leave_await(self)

    def apply_global(self, message: Mapping[str, Any]) -> None:
        """Apply a GLOBAL message from the Q-table reducer and replay buffered rewards (see :mod:`.sync`)."""
        sync.apply_global(self, message)

    def merge(self, peers: Sequence[PartitionerState]) -> None:
        """Replace the Q-table by the frequency-weighted average of this router's and ``peers``' tables."""
        sync.merge_states(self, peers)
