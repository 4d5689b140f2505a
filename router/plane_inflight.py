"""The batches of a route's data plane that were produced and are not yet committed (``at_least_once``).

:class:`InFlight` owns them for :class:`router.dataplane.RouteDataPlane`, in produce order, at most
``router.max_in_flight`` at a time. It only keeps the books; the plane decides when to commit, under one rule:
the offsets of the batches in flight (:meth:`InFlight.offsets`) are committed only after *every* record the
producer was given so far is acknowledged (librdkafka's queue is empty, failures re-sent or dead-lettered and
those acknowledged too), and then all of them at once (:meth:`InFlight.take`). Such a commit never passes an
unacknowledged record of its batches or of earlier ones, whatever order Kafka acknowledges records in.
"""

from __future__ import annotations

from collections import deque

from confluent_kafka import TopicPartition

from router.plane_parts import PendingBatch

__all__ = ["InFlight"]


class InFlight:
    """Batches between produce and commit, oldest first (used on the data-plane thread only)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {limit}")
        self.limit = limit
        self._batches: deque[PendingBatch] = deque()

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def full(self) -> bool:
        """``limit`` batches are in flight: the next one may be produced only after these are committed."""
        return len(self._batches) >= self.limit

    @property
    def oldest_consumed_at(self) -> float | None:
        """``monotonic()`` when the oldest batch in flight was consumed (``None`` when none is)."""
        return self._batches[0].consumed_at if self._batches else None

    def add(self, batch: PendingBatch) -> None:
        """A batch whose records were all handed to the producer."""
        self._batches.append(batch)

    def offsets(self) -> list[TopicPartition]:
        """The raw offsets that commit every batch in flight: per raw partition, the newest batch's.

        A partition's offsets only grow from one batch to the next (the consumer reads it in order and nothing
        rewinds while batches are in flight), so the newest batch that read a partition has its highest offset.
        """
        last: dict[tuple[str, int], TopicPartition] = {}
        for b in self._batches:
            for tp in b.offsets:
                last[(tp.topic, tp.partition)] = tp
        return list(last.values())

    def merged(self) -> PendingBatch | None:
        """All batches in flight as one (counts summed, times of the oldest); ``None`` when none is."""
        if not self._batches:
            return None
        bs = self._batches
        return PendingBatch(
            self.offsets(), sum(b.consumed for b in bs), sum(b.routed for b in bs), sum(b.dead for b in bs),
            bs[0].started, bs[0].consumed_at,
        )  # fmt: skip

    def take(self, refused: int = 0) -> list[PendingBatch]:
        """Remove and return every batch in flight, oldest first (they were committed, or are dropped).

        ``refused`` routed records were dead-lettered while the batches were delivered; they are moved from
        ``routed`` to ``dead``, newest batch first (which batch they came from is not tracked).
        """
        out = list(self._batches)
        self._batches.clear()
        for b in reversed(out):
            moved = min(refused, b.routed)
            b.routed -= moved
            b.dead += moved
            refused -= moved
        return out
