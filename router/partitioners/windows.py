"""Batch plumbing shared by the load-aware partitioners: window blocks and key-grouped batch order.

**Key-grouped batch order.** The load-aware partitioners (PKG, CM, AM, cAM, LM) decide per distinct key
of a batch, not per tuple: a batch is processed *as if* its tuples arrived stably grouped by key, the keys
in order of first appearance (``[a, b, a, c, b]`` is processed as ``[a, a, b, b, c]``). Applied to that
order, each algorithm follows its paper exactly; the only approximation is the reordering inside one
batch (a router-sized batch, e.g. 1000 tuples), which is what makes the hooks fast (work per distinct key,
vectorised per tuple). The *k*-th tuple of a key in the input gets the key's *k*-th decision.

**Blocks.** Windowed state advances in blocks of ``span`` time units: block ``floor(t / span)``. A
tumbling window is one block of ``span = window``; a sliding window keeps the last ``ceil(window / slide)``
blocks of ``span = slide``. Block boundaries may fall inside a batch: :func:`segments` cuts the batch
there, and each segment is grouped on its own.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from router.partitioners.base import Partitioner
from router.partitioners.keys import KeyBatch, distinct_candidates

__all__ = ["Group", "GroupedPartitioner", "block_ids", "group", "segments"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]


def block_ids(times: np.ndarray, span: float) -> I64:
    """Block index ``floor(t / span)`` of every time (times in the unit of ``span``)."""
    return np.floor_divide(np.asarray(times, dtype=np.float64), float(span)).astype(np.int64)


def segments(blocks: I64) -> list[tuple[int, int, int]]:
    """Cut a batch where its block index changes: ``(start, stop, block)`` runs, in input order."""
    size = int(blocks.shape[0])
    if size == 0:
        return []
    if blocks[0] == blocks[-1]:
        return [(0, size, int(blocks[0]))]
    cuts = np.flatnonzero(blocks[1:] != blocks[:-1]) + 1
    starts = [0, *cuts.tolist()]
    stops = [*cuts.tolist(), size]
    return [(a, b, int(blocks[a])) for a, b in zip(starts, stops, strict=True)]


@dataclass(frozen=True, slots=True)
class Group:
    """One batch segment in key-grouped order.

    ``keys[g]`` is the batch's distinct-key index of the segment's ``g``-th key (first-appearance order),
    ``counts[g]`` its tuples in the segment, and ``order`` the segment's tuple positions in key-grouped
    order (so ``out[order] = sequence`` scatters decisions made in grouped order back to input order).
    """

    keys: IntP
    counts: I64
    order: IntP


def group(inverse: IntP, distinct: int | None = None) -> Group:
    """Group a segment's tuples by key; ``inverse`` holds each tuple's distinct-key index.

    Pass ``distinct`` when ``inverse`` is a whole batch's inverse index (its indices are already in
    first-appearance order), which skips the re-ranking.
    """
    if distinct is not None:
        keys = np.arange(distinct, dtype=np.intp)
        counts = np.bincount(inverse, minlength=distinct).astype(np.int64)
        return Group(keys, counts, np.argsort(inverse, kind="stable"))
    uniq, first, local = np.unique(inverse, return_index=True, return_inverse=True)
    rank_order = np.argsort(first, kind="stable")
    rank = np.empty_like(rank_order)
    rank[rank_order] = np.arange(rank_order.shape[0])
    local_ranked = rank[local.reshape(-1)]
    counts = np.bincount(local_ranked, minlength=uniq.shape[0]).astype(np.int64)
    return Group(uniq[rank_order].astype(np.intp), counts, np.argsort(local_ranked, kind="stable"))


class GroupedPartitioner(Partitioner):
    """A partitioner over ``d`` distinct hash candidates that decides in key-grouped batch order.

    Subclasses set ``self.d`` before calling ``super().__init__`` and implement :meth:`_decide`; windowed
    ones return a block length from :meth:`_span` and move their state in :meth:`_advance`.
    """

    d: int = 2

    def _hash_count(self) -> int:
        return self.d

    def _span(self) -> float | None:
        """Block length in the unit of ``times``, or ``None`` when the state never expires."""
        return None

    def _advance(self, block: int) -> None:  # noqa: B027 - optional hook
        """Called before each segment with its block index; expire state here.

        Times should be non-decreasing; a block earlier than the current one must leave the state as it
        is (late tuples count in the current block).
        """

    @abstractmethod
    def _decide(self, ids: U64, cand: I64, counts: I64) -> npt.ArrayLike:
        """Decide a segment in key-grouped order.

        ``ids[g]`` (key id), ``cand[g]`` (its ``d`` distinct candidates, in priority order) and
        ``counts[g]`` describe the segment's ``g``-th key. Must return the combiner of every tuple in
        key-grouped order (``counts.sum()`` entries), and update the state as the tuples go.
        """

    def _assign(self, batch: KeyBatch, times: np.ndarray) -> np.ndarray:
        size = batch.size
        cand = distinct_candidates(batch.hashes, self.n, self.d)
        span = self._span()
        segs = [(0, size, 0)] if span is None else segments(block_ids(times, span))
        out = np.empty(size, dtype=np.int64)
        for a, b, blk in segs:
            if span is not None:
                self._advance(blk)
            whole = a == 0 and b == size
            g = group(batch.inverse, batch.distinct) if whole else group(batch.inverse[a:b])
            out[a:b][g.order] = self._decide(batch.ids[g.keys], cand[g.keys], g.counts)
        return out
