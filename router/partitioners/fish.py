"""FISH ([FISH] (docs/partitioners.md)): epoch-based hot-key counting with decay, CHK, heuristic worker assignment.

Per tuple, the paper (Alg. 1-3) does:

1. **Counting** (Alg. 1): a space-saving top-``K_max`` counter; a new key takes a free slot with count 1,
   or replaces the key with the smallest count and gets ``min + 1``; every ``N_epoch`` tuples all counters
   are multiplied by ``alpha``.
2. **CHK** (Alg. 2): with ``f_k = c_k / (decayed tuple count)``, a key with ``f_k > theta`` gets
   ``d = n / 2^floor(log2(f_top / f_k))`` candidates (floored to an integer, at least ``d_min``, at most
   ``n``), and ``d = M_k = max(M_k, d)``: ``M_k`` is the largest ``d`` the key got while it stayed tracked
   (it is forgotten when the key leaves the counter). Other keys get 2 candidates (PKG).
3. **Candidates**: the first ``d`` distinct combiners clockwise from the key on a consistent-hash ring with
   ``virtual_nodes`` points per combiner (:mod:`router.partitioners.ring`).
4. **Assignment** (Alg. 3): the candidate with the smallest estimated waiting time ``C_w * P_w`` (ties: the
   first candidate on the ring), then ``C_w += 1``. When more than ``interval`` time units passed since the
   last estimate, every backlog drains: ``C_w = max(0, C_w - elapsed / P_w)``.

Decisions where the paper is open (see docs/partitioners.md):

- ``N_w`` of Eq. 1 is already in ``C_w`` (Alg. 3 line 18 adds every assignment to ``C_w``), so the drain
  uses ``C_w`` alone, and subtracts the elapsed time (``>= T``) rather than exactly ``T``.
- ``P_w`` (time per tuple, in the unit of ``times``) comes from :meth:`FISHPartitioner.report_capacity`.
  Without feedback all ``P_w`` are equal and unknown: the combiners are assumed to keep pace with the input
  together, so each backlog drains by its fair share ``(tuples routed since the last drain) / n``; the
  choice is then least-loaded on that leaky backlog.
- ``d_min`` defaults to 2 (the paper ties it to the hot keys' total share without a formula); the ring uses
  64 virtual nodes per combiner (the paper gives none); ``interval`` defaults to 10,000 time units (the
  paper's 10 s in milliseconds).

Batching approximations (the router assigns batches, and the work is per distinct key, not per tuple):

- A batch is cut at epoch boundaries into segments; each segment is handled per *distinct key*.
- Counting: each distinct key of a segment updates the counter once with its segment count ``c``
  (``c_k += c``; a newcomer gets a free slot with ``c`` or replaces a victim with ``victim + c``).
  Newcomers replace the smallest counters among the keys *not* seen in this segment, all at once (which
  newcomer inherits which of those counters is left to ``argpartition``): a newcomer never evicts another
  key of the same segment. If a segment has more newcomers than evictable slots, those with the largest
  segment counts are tracked, the rest stay untracked (frequency 0) for this segment.
- CHK runs once per distinct key after the segment's counts are in (so a key's own later tuples of the
  segment count towards its hotness: a look-ahead of at most one segment).
- Assignment handles the segment's distinct keys one at a time and gives each key's ``c`` tuples to its
  candidates by water-filling the waiting times, i.e. what the per-tuple greedy does when the key's tuples
  arrive back to back (exact for two candidates and equal ``P``; otherwise up to ties, the rounding
  remainder placed greedily). Order: PKG keys (2 candidates) by descending count, then the hot keys by
  ascending ``d`` (descending count within), so the most flexible keys come last and level what the
  constrained ones left, as their tuples would when interleaved with the tail's (docs/partitioners.md
  compares it with top key first). Within a key, tuples go to its candidates
  in arrival order, candidate by candidate in ring order.
- The drain check runs once per segment, at the segment's first time.

Extras: :meth:`FISHPartitioner.degree` (the candidates CHK gives a key now) and
:meth:`FISHPartitioner.backlog` (the ``C_w`` estimate) for tests and metrics; snapshots leave out the ring
(rebuilt from ``n``, ``virtual_nodes`` and ``hash_seed``). ``window``/``slide`` are not used: FISH's own
clocks are the epoch (tuples) and ``interval`` (time). One-tuple PKG keys, most of the keys of a
tail-heavy batch, are decided one by one (:func:`~router.partitioners.waterfill.two_choice_many`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from router.partitioners.base import Partitioner
from router.partitioners.keys import KeyBatch, KeyCodec
from router.partitioners.ring import ConsistentRing
from router.partitioners.spacesaving import SpaceSaving
from router.partitioners.waterfill import level_fill, pair_fill, pkg_fill_many, two_choice_many
from schemas.partitioner_settings import FISHSettings

__all__ = ["FISHPartitioner"]

I64 = npt.NDArray[np.int64]
#: Pieces of the split keys of a segment: key indices, combiners, tuples (one entry per combiner used).
Split = tuple[list[int], list[int], list[int]]
#: Defaults (and, through ``create``, bounds) of every parameter.
_DEFAULTS = FISHSettings()


class FISHPartitioner(Partitioner):
    """FISH with the paper's defaults; every threshold is a constructor argument.

    ``alpha``: counter decay per epoch; ``theta``: hot share (default ``1/(4n)``); ``epoch``: tuples per
    epoch (``N_epoch``); ``k_max``: counters kept; ``d_min``: fewest candidates of a hot key;
    ``interval``: drain period ``T`` of the backlog estimate (unit of ``times``); ``virtual_nodes``: ring
    points per combiner. Defaults and bounds: :class:`~schemas.partitioner_settings.FISHSettings`.
    """

    name = "fish"
    splits_keys = True
    n_hashes = 1
    state_version = 2  # 2: the counter is a SpaceSaving object

    def __init__(
        self,
        n: int,
        *,
        alpha: float = _DEFAULTS.alpha,
        theta: float | None = _DEFAULTS.theta,
        epoch: int = _DEFAULTS.epoch,
        k_max: int = _DEFAULTS.k_max,
        d_min: int = _DEFAULTS.d_min,
        interval: float = _DEFAULTS.interval,
        virtual_nodes: int = _DEFAULTS.virtual_nodes,
        **kw: Any,
    ) -> None:
        super().__init__(n, **kw)
        self.alpha = float(alpha)
        self.theta = 1.0 / (4 * self.n) if theta is None else float(theta)
        self.epoch = int(epoch)
        self.k_max = int(k_max)
        self.d_min = int(d_min)
        self.interval = float(interval)
        self.virtual_nodes = int(virtual_nodes)
        self._params.update(
            alpha=alpha, theta=theta, epoch=epoch, k_max=k_max, d_min=d_min, interval=interval,
            virtual_nodes=virtual_nodes,
        )  # fmt: skip
        self.ring = ConsistentRing(range(self.n), self.virtual_nodes, self.hash_seed)
        # Space-saving counter (router.partitioners.spacesaving) and M_k per counter slot.
        self._ss = SpaceSaving(self.k_max)
        self._m = np.zeros(self.k_max, dtype=np.int64)
        self._in_epoch = 0
        # Worker state estimate (Alg. 3).
        self._backlog: list[float] = [0.0] * self.n
        self._ptime: list[float] | None = None
        self._t_prev: float | None = None
        self._since = 0

    # -- public extras ---------------------------------------------------------------------------
    def report_capacity(self, time_per_tuple: Sequence[float] | None) -> None:
        """Set each combiner's sampled processing time per tuple ``P_w`` (unit of ``times``).

        ``None`` returns to "no feedback" (all equal, fair-share drain). Takes effect immediately.
        """
        if time_per_tuple is None:
            self._ptime = None
            return
        p = [float(v) for v in time_per_tuple]
        if len(p) != self.n or not all(math.isfinite(v) and v > 0 for v in p):
            raise ValueError(f"time_per_tuple needs {self.n} positive finite values, got {p!r}")
        self._ptime = p

    def degree(self, keys: npt.ArrayLike | Sequence[bytes | str | int]) -> I64:
        """Candidates each key would get now (CHK on the current counters; read-only)."""
        batch = KeyCodec(0, self.hash_seed).encode(keys)
        return self._classify(self._lookup(batch.ids), store=False)[batch.inverse]

    def backlog(self) -> list[float]:
        """Current estimate of unprocessed tuples ``C_w`` per combiner."""
        return list(self._backlog)

    # -- state ---------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        """Everything but the ring (derived from ``n``, ``virtual_nodes`` and ``hash_seed``; MBs for large n)."""
        state = super()._state()
        del state["ring"]
        return state

    def _load_state(self, state: dict[str, Any]) -> None:
        super()._load_state(state)
        self.ring = ConsistentRing(range(self.n), self.virtual_nodes, self.hash_seed)

    # -- counting --------------------------------------------------------------------------------
    def _lookup(self, ids: npt.NDArray[np.uint64]) -> I64:
        """Slot of each id (-1 when untracked)."""
        return self._ss.lookup(ids)

    def _count(self, ids: npt.NDArray[np.uint64], cnt: I64) -> I64:
        """Add a segment's per-key counts (batched space-saving); returns each key's slot (-1: untracked)."""
        slots, placed = self._ss.add(ids, cnt)
        self._m[placed] = 0
        return slots

    def _end_epoch(self) -> None:
        self._ss.decay(self.alpha)
        self._in_epoch = 0

    def _classify(self, slots: I64, *, store: bool = True) -> I64:
        """CHK (Alg. 2) per key slot: number of candidates, updating ``M_k`` when ``store``."""
        d = np.full(slots.shape[0], min(2, self.n), dtype=np.int64)
        ss = self._ss
        if not ss.used or ss.mass <= 0:
            return d
        c = ss.counts(slots)
        hot = c / ss.mass > self.theta
        if hot.any():
            top = ss.top()
            index = np.floor(np.log2(top / c[hot]) + 1e-9).astype(np.int64)
            dh = np.right_shift(self.n, np.clip(index, 0, 62))
            dh = np.minimum(np.maximum(dh, self.d_min), self.n)
            hs = slots[hot]
            dh = np.maximum(dh, self._m[hs])
            if store:
                self._m[hs] = dh
            d[hot] = dh
        return d

    # -- assignment ------------------------------------------------------------------------------
    def _drain(self, now: float) -> None:
        if self._t_prev is None:
            self._t_prev = now
            return
        elapsed = now - self._t_prev
        if elapsed <= self.interval:
            return
        if self._ptime is None:
            share = self._since / self.n
            self._backlog = [max(0.0, b - share) for b in self._backlog]
        else:
            self._backlog = [max(0.0, b - elapsed / p) for b, p in zip(self._backlog, self._ptime, strict=True)]
        self._t_prev = now
        self._since = 0

    def _route(self, hashes: npt.NDArray[np.uint32], d: I64, cnt: I64) -> tuple[I64, Split]:
        """Water-fill each key's tuples over its candidates, largest keys first.

        Returns the combiner of every single-combiner key (-1 for split keys) and, for split keys,
        ``(key, combiners, tuples per combiner)``.
        """
        k = cnt.shape[0]
        loads, ptime = self._backlog, self._ptime
        cand = self.ring.candidates(hashes, int(d.max()))
        if cand.shape[1] == 1:  # n == 1
            loads[0] += float(cnt.sum())
            return cand[:, 0].copy(), ([], [], [])
        worker = np.full(k, -1, dtype=np.int64)
        split: Split = ([], [], [])
        # Order: PKG keys (d = 2) by descending count, then the hot keys by ascending d (descending count
        # within): the most flexible keys come last and level what the constrained ones left.
        top = int(cnt.max())
        desc = (top - cnt).astype(np.uint16) if top < 1 << 16 else -cnt
        two = np.flatnonzero(d == 2)
        two = two[np.argsort(desc[two], kind="stable")]
        rest = np.flatnonzero(d != 2)
        if rest.size:
            rest = rest[np.lexsort((desc[rest], d[rest]))]
        ones = two[cnt[two] == 1]  # last among the PKG keys (descending count)
        many = two[cnt[two] > 1]
        if ptime is None and many.size:  # closed form per key
            a, b, c2 = cand[many, 0], cand[many, 1], cnt[many]
            xa = pkg_fill_many(a, b, c2, loads)
            worker[many] = np.where(xa == c2, a, b)
            sp = np.flatnonzero((xa > 0) & (xa < c2))
            if sp.size:
                split[0].extend(np.repeat(many[sp], 2).tolist())
                split[1].extend(np.stack([a[sp], b[sp]], axis=1).ravel().tolist())
                split[2].extend(np.stack([xa[sp], c2[sp] - xa[sp]], axis=1).ravel().tolist())
        elif many.size:  # capacity feedback: per-key water-filling
            self._fill(many, cand, cnt, d, worker, split)
        if ones.size:
            worker[ones] = two_choice_many(cand[ones, 0], cand[ones, 1], loads, ptime)
        self._fill(rest, cand, cnt, d, worker, split)
        return worker, split

    def _fill(self, keys: I64, cand: I64, cnt: I64, d: I64, worker: I64, split: Split) -> None:
        """Water-fill the tuples of ``keys`` (in this order) over their candidates."""
        loads, ptime = self._backlog, self._ptime
        rows = cand.take(keys, axis=0).tolist()
        for u, row, c, du in zip(keys.tolist(), rows, cnt[keys].tolist(), d[keys].tolist(), strict=True):
            if du == 2 and ptime is None:
                a, b = row[0], row[1]
                xa = pair_fill(loads[a], loads[b], c)
                loads[a] += xa
                loads[b] += c - xa
                if xa == c or xa == 0:
                    worker[u] = a if xa else b
                else:
                    split[0].extend((u, u))
                    split[1].extend((a, b))
                    split[2].extend((xa, c - xa))
                continue
            cands = row[:du]
            x = level_fill(cands, c, loads, ptime)
            ws, xs = [], []
            for w, xi in zip(cands, x, strict=True):
                if xi:
                    loads[w] += xi
                    ws.append(w)
                    xs.append(xi)
            if len(ws) == 1:
                worker[u] = ws[0]
            else:
                split[0].extend([u] * len(ws))
                split[1].extend(ws)
                split[2].extend(xs)

    def _segment(self, batch: KeyBatch, inv: npt.NDArray[np.intp], whole: bool) -> I64:
        """Count, classify and assign one segment (within one epoch) of the batch."""
        if whole:
            present = np.arange(batch.distinct)
            cnt = batch.counts()
            local = inv
        else:
            full = np.bincount(inv, minlength=batch.distinct)
            present = np.flatnonzero(full)
            cnt = full[present].astype(np.int64)
            remap = np.zeros(batch.distinct, dtype=np.int64)
            remap[present] = np.arange(present.shape[0])
            local = remap[inv]
        slots = self._count(batch.ids if whole else batch.ids[present], cnt)
        d = self._classify(slots)
        worker, split = self._route(batch.hashes[:, 0] if whole else batch.hashes[present, 0], d, cnt)
        out = worker[local]
        if split[0]:
            # Tuples of split keys, grouped by key in arrival order, take their pieces in order.
            pk, pw, ps = (np.asarray(v, dtype=np.int64) for v in split)
            order = np.argsort(pk, kind="stable")
            is_split = np.zeros(cnt.shape[0], dtype=bool)
            is_split[pk] = True
            pos = np.flatnonzero(is_split[local])
            keys = local[pos]
            grouped = pos[np.argsort(keys.astype(np.uint16) if cnt.shape[0] <= 1 << 16 else keys, kind="stable")]
            out[grouped] = np.repeat(pw[order], ps[order])
        self._since += int(inv.shape[0])
        return out

    def _assign(self, batch: KeyBatch, times: np.ndarray) -> np.ndarray:
        size = batch.size
        out = np.empty(size, dtype=np.int64)
        start = 0
        while start < size:
            end = min(size, start + self.epoch - self._in_epoch)
            self._drain(float(times[start]))
            whole = start == 0 and end == size
            out[start:end] = self._segment(batch, batch.inverse[start:end], whole)
            self._in_epoch += end - start
            if self._in_epoch >= self.epoch:
                self._end_epoch()
            start = end
        return out
