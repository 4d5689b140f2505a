"""The Dalton partitioner ([Dalton] in docs/partitioners.md): bandit routing of hot keys, affinity for the tail.

How a batch is processed. The batch is a look-ahead buffer (a legitimate micro-batch technique, Sec.
3.4): its key counts are known before any tuple is routed.

1. The batch is cut where the slide block or the statistics window changes; each segment is routed on
   its own, after the window state has advanced to the segment's time (expiry is exact).
2. The segment's distinct keys are counted into the statistics window; keys reaching ``L / n`` enter the
   Q-table (valid through the next statistics window); the Q-table's keys are the hot keys.
3. With ``pack=True`` (default) the hot tuples (at most ~2n keys) are routed first, after the tail keys
   already bound to a combiner in the scope: in chunks by the epsilon-greedy bandit
   (:func:`~.bandit.run_chunks`), one decision and one reward per chunk, each chunk filling the chosen
   combiner up to the segment's final mean load ``level`` at most, the choice restricted to combiners still
   below it. So a hot key reaches about ``count / level`` combiners (the fewest that hold it without
   exceeding the mean) instead of a piece on every combiner.
4. Then the non-hot keys, per distinct key, vectorised (``tail="affinity"`` or ``"hash"``): affinity puts
   the largest keys first on the less loaded of their two candidates and spills a key whose candidates
   are both full to the least loaded combiner (:mod:`.tail`); all tuples of a non-hot key in the segment
   go to one combiner.

``pack=False`` is the paper's order: the tail first, then the hot tuples up to their water level (the
level the hot tuples would fill the load vector to), so every combiner below it gets hot pieces. By
default a chunk fills the chosen combiner up to the level, so a decision is taken when a combiner
crosses it: about ``n`` + (hot keys) decisions per batch, i.e. the paper's load quantisation (Sec. 3.1,
key idea 2) with an adaptive quantum. ``quantum=q`` gives fixed chunks of ``q`` tuples; ``quantum=1,
update="chosen", pack=False, tail="hash"`` is Algorithm 1 tuple by tuple. Tuples get their chunk's
combiner with one ``np.repeat``.

Why ``pack``: on a sweep of Zipf s 0.6-2.0 x n 2-32 x 1k-100k keys (mean per-1,000-tuple-window max/mean,
replication), the tail-first order split hot keys over every combiner (Zipf 1.5, n = 32: 1.31 / 1.33,
dominated by Prompt's 1.02 / 1.24); hot-first measures 1.08 / 1.20 there and 1.00 / 1.03 at n = 8.

Learning. ``update="all"`` (default): the reward is a model the router computes itself (Eq. 3-4), so
after each chunk every action's Q value moves towards the reward the *next* tuple would get there
(a full-information bandit update); the greedy choice then tracks the current load instead of stale
values. ``update="chosen"`` updates only the chosen action (Eq. 5 as in the paper). Measured on the
zipf15 stream (mean per-window max/mean, replication): all 1.05 / 1.07, chosen 1.39 / 1.04.

Scopes. ``micro_batch=True`` (default) counts fragmentation *and* the reward's load vector per slide:
with Spark consumers the slide is the trigger interval, each combiner task computes one partial per key
per micro-batch, and a micro-batch's straggler is its most loaded task (Sec. 3.4). Fragmentation is
counted per slide, not per ``assign`` call, because router batches may be smaller than a trigger.
``micro_batch=False`` is the paper's tuple-at-a-time model: both over the sliding window ``W``. The
window's fragmentation (with correct expiry) is maintained in both modes; key forwarding uses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from router.partitioners.base import Partitioner, PartitionerState
from router.partitioners.dalton import sync
from router.partitioners.dalton.bandit import BanditConfig, QTable, Reward, run_chunks
from router.partitioners.dalton.slots import KeySlots, SlotTable
from router.partitioners.dalton.stats import FrequencyStats, StatsMode
from router.partitioners.dalton.tail import affinity_fill
from router.partitioners.dalton.window import SlidingState
from router.partitioners.keys import DEFAULT_HASH_SEED, KeyBatch

__all__ = ["DEFAULT_TAIL", "DaltonPartitioner"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
TailRule = Literal["hash", "affinity"]
#: Chosen by measurement (mean per-window max/mean, n=8, 1000-tuple windows; affinity vs hash tail, with
#: the earlier flow-plan affinity rule): uniform 1.00 vs 1.13, Zipf 1.0 1.25 vs 1.77, Zipf 1.0 over 100k
#: keys 1.29 vs 1.66, changing hot set 1.10 vs 1.22, zipf15 1.05 vs 1.06, flights (dest) 1.23 vs 1.63,
#: words 1.07 vs 1.27; replication equal (a non-hot key is never split within a slide). The largest-first
#: rule now in :mod:`.tail` measures 1.00 on the Zipf 1.0 cells at n = 8.
DEFAULT_TAIL: TailRule = "affinity"
_INITIAL_SLOTS = 1 << 14


class DaltonPartitioner(KeySlots, Partitioner):
    """Dalton (Zapridou et al., PVLDB 2022) with the project's decisions of docs/partitioners.md.

    Parameters (besides ``n``, ``window``, ``slide``, ``seed``, ``hash_seed``):
    ``epsilon``, ``gamma``, ``p1``, ``p2``, ``initial_q``: the bandit (paper defaults);
    ``statistics``: ``exact`` | ``countmin`` | ``hybrid`` (per statistics window; ``exact_limit`` distinct
    keys is the hybrid's switch); ``stats_window``: the statistics window (default one slide);
    ``max_split``: most combiners a key may reach in the fragmentation scope (default ``n``);
    ``tail``: ``hash`` (paper) or ``affinity`` (default); ``micro_batch``: see the module doc;
    ``quantum``: fixed tuples per bandit decision (default: fill to the water level, at least
    ``max(1, segment // (32 n))``); ``update``: ``all`` (default) or ``chosen`` (see the module doc);
    ``key_forwarding``: compute :meth:`forwardable` (Sec. 4.2); ``pack``: hot keys first, up to the mean
    level (default; only with the affinity tail, a hashed tail cannot fill around them; ``False``: the
    paper's tail-first order, see the module doc).

    Cooperative learning: :meth:`sync_payload`, :meth:`apply_global`, :meth:`merge` (see :mod:`.sync`).
    """

    name = "dalton"
    splits_keys = True
    n_hashes = 2
    state_version = 2  # 2: ``pack``

    def __init__(
        self,
        n: int,
        *,
        window: float = 60_000,
        slide: float = 1_000,
        seed: int = 0,
        hash_seed: int = DEFAULT_HASH_SEED,
        epsilon: float = 0.1,
        gamma: float = 0.1,
        p1: float = 0.5,
        p2: float = 0.5,
        initial_q: float = -2.0,
        statistics: StatsMode = "exact",
        exact_limit: int = 1 << 16,
        stats_window: float | None = None,
        max_split: int | None = None,
        tail: TailRule | None = None,
        micro_batch: bool = True,
        quantum: int | None = None,
        key_forwarding: bool = False,
        update: Literal["chosen", "all"] = "all",
        pack: bool = True,
    ) -> None:
        self.tail: TailRule = DEFAULT_TAIL if tail is None else tail
        if self.tail not in ("hash", "affinity"):
            raise ValueError(f"tail must be 'hash' or 'affinity', got {tail!r}")
        super().__init__(n, window=window, slide=slide, seed=seed, hash_seed=hash_seed)
        if n > 32767:
            raise ValueError(f"n must be at most 32767, got {n!r}")
        if not 0 <= epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma!r}")
        if min(p1, p2) < 0:
            raise ValueError(f"p1 and p2 must be >= 0, got {p1!r}, {p2!r}")
        if max_split is not None and max_split < 1:
            raise ValueError(f"max_split must be >= 1, got {max_split!r}")
        if quantum is not None and quantum < 1:
            raise ValueError(f"quantum must be >= 1, got {quantum!r}")
        self.stats_window = slide if stats_window is None else stats_window
        if not self.stats_window > 0:
            raise ValueError(f"stats_window must be > 0, got {stats_window!r}")
        self._params.update(
            epsilon=epsilon, gamma=gamma, p1=p1, p2=p2, initial_q=initial_q, statistics=statistics,
            exact_limit=exact_limit, stats_window=stats_window, max_split=max_split, tail=tail,
            micro_batch=micro_batch, quantum=quantum, key_forwarding=key_forwarding, update=update, pack=pack,
        )  # fmt: skip
        # a hashed tail cannot fill around hot keys placed first: with tail=hash the hot keys go last
        self.pack = bool(pack) and self.tail == "affinity"
        if update not in ("chosen", "all"):
            raise ValueError(f"update must be 'chosen' or 'all', got {update!r}")
        self.cfg = BanditConfig(self.n, epsilon, gamma, p1, p2, initial_q, min(max_split or self.n, self.n), update)
        self.scope = "slide" if micro_batch else "window"
        self.quantum = quantum
        self.key_forwarding = key_forwarding
        self.slots = SlotTable(_INITIAL_SLOTS)
        self.win = SlidingState(self.n, max(1, math.ceil(window / slide)), _INITIAL_SLOTS)
        self.stats = FrequencyStats(self.n, statistics, _INITIAL_SLOTS, exact_limit=exact_limit)
        self.qtable = QTable(self.n, initial_q)
        # cooperative learning (see sync.py)
        self.sync_counts: I64 = np.zeros(_INITIAL_SLOTS, dtype=np.int64)
        self._sync_pending: list[tuple[IntP, I64]] = []
        #: per slot: the key's hash combiner and its two distinct affinity candidates
        self.cand: npt.NDArray[np.int16] = np.zeros((_INITIAL_SLOTS, 3), dtype=np.int16)
        self.records_since_sync = 0
        self.awaiting = False
        self.cooperative = False
        self.buffer: list[Reward] = []
        self.last_global_block = -1
        self._forward: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)

    def _hash_count(self) -> int:
        return 2 if self.tail == "affinity" else 1

    # -- time ----------------------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        self.win.advance(int(t // self.slide))
        if self.stats.advance(int(t // self.stats_window)):
            self.qtable.expire(self.stats.index)

    def _segments(self, times: np.ndarray) -> list[tuple[int, int]]:
        size = times.shape[0]
        first, last = float(times[0]), float(times[-1])
        if first // self.slide == last // self.slide and first // self.stats_window == last // self.stats_window:
            return [(0, size)]
        b = np.floor_divide(times, self.slide)
        w = np.floor_divide(times, self.stats_window)
        cuts = (np.flatnonzero((np.diff(b) != 0) | (np.diff(w) != 0)) + 1).tolist()
        bounds = [0, *cuts, size]
        return list(zip(bounds[:-1], bounds[1:], strict=True))

    # -- the data path -------------------------------------------------------------------------
    def _assign(self, batch: KeyBatch, times: np.ndarray) -> npt.ArrayLike:
        slots = self._slots_for(batch.ids, batch.hashes)
        segments = self._segments(times)
        if len(segments) == 1:  # the common case: the batch lies inside one slide
            self._advance(float(times[0]))
            out, hot = self._segment(slots, batch.ids, np.bincount(batch.inverse), batch.inverse)
            if self.key_forwarding:
                self._forward = self._forwardable(slots, hot)[batch.inverse]
            return out
        out = np.empty(batch.size, dtype=np.intp)
        forward = np.zeros(batch.size, dtype=bool)
        for a, b in segments:
            self._advance(float(times[a]))
            u, inv = np.unique(batch.inverse[a:b], return_inverse=True)
            inv = inv.reshape(-1)
            counts = np.bincount(inv, minlength=u.shape[0])
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
        n = self.n
        freq = self.stats.observe(slots, ids, counts, inv.shape[0])
        self._sync_pending.append((slots, counts))  # added up lazily (flush_sync_counts)
        if len(self._sync_pending) >= 32:
            self.flush_sync_counts()
        self.records_since_sync += inv.shape[0]
        rows = self.qtable.rows
        for i in np.flatnonzero(freq >= self.stats.threshold()).tolist():
            self.qtable.mark_hot(int(ids[i]), self.stats.index)  # hot now: valid through the next window
        hot = np.zeros(ids.shape[0], dtype=bool)
        if rows:  # hot now, or still in the Q-table (hot in the previous statistics window)
            hot = (ids[:, None] == np.fromiter(rows, dtype=np.uint64, count=len(rows))[None, :]).any(axis=1)
        base: F64 = (self.win.head_load if self.scope == "slide" else self.win.window_load).astype(np.float64)
        any_hot = bool(rows) and bool(hot.any())
        t = np.flatnonzero(~hot) if any_hot else None
        st = slots if t is None else slots[t]
        ct = counts if t is None else counts[t]
        level = (float(base.sum()) + inv.shape[0]) / n  # the mean load once the segment is routed
        affinity = self.tail == "affinity" and st.size > 0
        held = c1 = c2 = None
        if affinity:
            cand = self.cand[st]
            c1, c2 = cand[:, 1].astype(np.intp), cand[:, 2].astype(np.intp)
            if self.scope == "window" or not self.win.head_empty:  # a fresh slide holds nothing yet
                held = np.where(
                    self.win.held(st, c1, self.scope), c1, np.where(self.win.held(st, c2, self.scope), c2, -1)
                )
        hot_out: IntP | None = None
        if any_hot and self.pack:  # hot keys first (after the tail keys bound to a combiner), up to the level
            fixed = np.zeros(n) if held is None else np.bincount(held[held >= 0], ct[held >= 0], minlength=n)
            choice = self.cand[slots, 0].astype(np.intp)
            loads = (base + fixed).tolist()
            hot_out = np.empty(inv.shape[0], dtype=np.intp)
            pslots, pcombs, pcounts = self._route_hot(hot, slots, ids, choice, counts, inv, loads, hot_out, level)
            base = np.asarray(loads, dtype=np.float64) - fixed
        if affinity:
            assert c1 is not None and c2 is not None
            tail = affinity_fill(c1, c2, held, ct, base, n, level if self.pack else None)
        else:
            tail = self.cand[st, 0].astype(np.intp)
        if t is None:
            self.win.add(slots, tail, counts)
            return tail[inv], hot
        choice = self.cand[slots, 0].astype(np.intp)
        choice[t] = tail
        tuple_out = choice[inv]
        if hot_out is None:  # tail first, then the hot tuples up to their water level (the paper's order)
            loads = (base + np.bincount(tail, weights=ct, minlength=n)).tolist()
            pslots, pcombs, pcounts = self._route_hot(hot, slots, ids, choice, counts, inv, loads, tuple_out)
        else:
            on = hot[inv]
            tuple_out[on] = hot_out[on]
        self.win.add(np.concatenate([st, pslots]), np.concatenate([tail, pcombs]), np.concatenate([ct, pcounts]))
        return tuple_out, hot

    def _route_hot(
        self,
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
        n = self.n
        hk = np.flatnonzero(hot)
        gmap = np.full(hot.shape[0], -1, dtype=np.int16)  # hot key index per distinct key (at most ~2n)
        gmap[hk] = np.arange(hk.shape[0])
        hot_counts = counts[hk].tolist()
        order = np.argsort(gmap[inv], kind="stable")  # non-hot tuples first, then each hot key in order
        tpos = order[inv.shape[0] - sum(hot_counts) :]
        keys_u = ids[hk].tolist()
        rows = self.qtable.rows
        for key, h in zip(keys_u, home[hk].tolist(), strict=True):
            rows[key].home = h
        held = self.win.head[slots[hk]] if self.scope == "slide" else self.win.refcount[slots[hk]] > 0
        masks = dict(zip(keys_u, (sum(1 << c for c in range(n) if r[c]) for r in held.tolist()), strict=True))
        adaptive = self.quantum is None
        quantum = max(1, inv.shape[0] // (32 * n)) if self.quantum is None else self.quantum
        chunks = run_chunks(
            self.qtable, self.cfg, keys_u, hot_counts, loads, masks, quantum, adaptive,
            self._draw, self.buffer if self.awaiting else None, level,
        )  # fmt: skip
        if self.awaiting and len(self.buffer) > sync.MAX_BUFFER:
            sync.leave_await(self)  # no GLOBAL for too long: bounded memory, local learning goes on
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

    def _draw(self) -> tuple[list[float], list[int]]:
        """Exploration draws for the bandit (none when epsilon = 0: deterministic, seed-independent)."""
        size = 4 * self.n
        if self.cfg.epsilon <= 0:
            return [1.0] * size, [0] * size
        u = np.asarray(self.rng.random(size), dtype=np.float64).tolist()
        r = np.asarray(self.rng.integers(0, self.n, size), dtype=np.int64).tolist()
        return u, r

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
