"""Event-time alignment of a data plane's raw partitions (``router.align_ms``).

Spark reads the combiner topic in offset ranges: each micro-batch takes the same share of every combiner
partition's backlog. What a combiner partition holds at an offset is what the router routed at that moment, so
when the router reads one raw partition far ahead of another, each combiner partition interleaves long stretches
of event time from different raw partitions. A micro-batch then spans more event time per key: its keys fall
into more (window, key) pairs (more partials to shuffle), and records of one raw partition reach Spark after
the watermark moved on with another's (late records). Reading one partition ahead is the normal case under a
backlog: a fetch returns at least one whole record batch of the producer per partition (tens of thousands of
small records; a broker may ignore ``max.partition.fetch.bytes`` beyond that), the consumer's queue hands them
over one partition after the other, and a consume batch is one partition's stretch; it also happens live when
producers write the raw partitions unevenly.

:class:`EventTimeAlign` merges the raw partitions by event time, within ``align_ms``. Each turn it adds the
batch just consumed to the records it holds and computes the *floor*: the lowest event time reached (the newest
record consumed) over the partitions that count -- those assigned that delivered records within the last
``stale_s`` seconds (or were assigned within it and have records waiting). Per partition it routes the records
up to its first one past ``floor + align_ms`` and holds the rest (they are not routed, so their offsets are not
committed); what it routes goes out merged by event time (each partition's records keep their order). A
partition with held records is paused (and sought to just after its last consumed record, so the consumer drops
what it had fetched ahead) and resumed once its held records are routed. The partition at the floor never holds
a record, so the route always advances; a partition that delivered nothing yet but has records waiting holds
every other one back until it delivers (its event time is unknown), for at most ``stale_s``.

What it does not do: stall on a partition with nothing to read for more than ``stale_s`` (after that it does not
count; under live traffic with event time close to wall-clock time the others reach ``floor + align_ms`` only
``align_ms`` after it went quiet, so with ``stale_s`` below ``align_ms`` live routing is never held), nor keep
more than one consume batch per partition (the pause stops the partition), nor change commits: offsets are the
ones after the records routed, so a crash, a rebalance or an aborted transaction replays held records like any
other uncommitted ones. A partition that delivers at or below an offset it holds was repositioned (a rebalance
restarted it from its commit, which also clears the consumer's pause): the held records from there on are
dropped, since they are read again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from router.extract import Extracted, SourceRecord

__all__ = ["STALE_S", "EventTimeAlign"]

log = logging.getLogger("router.dataplane")

#: A partition that delivered nothing for this long no longer holds the others back.
STALE_S = 2.0
_UNKNOWN = -(1 << 62)  # the event time of a partition that delivered nothing yet: below any other


class EventTimeAlign:
    """The alignment rule of one data plane (see the module docstring); ``align_ms <= 0`` turns it off."""

    def __init__(
        self, raw_topic: str, align_ms: int, stale_s: float = STALE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.raw_topic, self.align_ms, self.stale_s, self._clock = raw_topic, align_ms, stale_s, clock
        self.pool = Extracted()  # records consumed and not routed yet (held), in consume order
        self.front: dict[int, int] = {}  # raw partition -> newest event time consumed from it
        self.seen: dict[int, float] = {}  # raw partition -> clock() when it last delivered (or was assigned)
        self.start: dict[int, int] = {}  # raw partition -> committed offset when assigned (-1: none)
        self.paused: set[int] = set()
        self.pauses = 0  # partitions paused so far
        self.held = 0  # records held over a turn so far (counted once per turn they stay)

    @property
    def enabled(self) -> bool:
        """Whether the rule runs."""
        return self.align_ms > 0

    @property
    def holding(self) -> bool:
        """Whether records are held (a turn with nothing consumed may still route some)."""
        return bool(self.pool.keys or self.pool.bad)

    def admit(self, consumer: Any, ext: Extracted, assignment: set[int]) -> Extracted:
        """The records to route this turn (``ext`` just consumed, plus held ones); pauses and resumes partitions."""
        if not self.enabled:
            return ext
        now = self._track(assignment)
        delivered = _first_offsets(ext)
        for p in delivered:
            self.seen[p] = now
        if self.holding:  # a partition delivering at or below a held offset was repositioned: those are read again
            self.pool = _drop(self.pool, delivered | _gone(self.pool, assignment))
        pool = _concat(self.pool, ext) if self.holding else ext
        parts = np.asarray(pool.partitions, dtype=np.int64)
        times = np.asarray(pool.times, dtype=np.int64)
        newest = {p: int(times[parts == p].max()) for p in np.unique(parts).tolist()}
        for p, t in newest.items():
            self.front[p] = max(t, self.front.get(p, t))
        fresh = [p for p in sorted(assignment) if now - self.seen[p] <= self.stale_s]
        known = [self.front[p] for p in fresh if p in self.front]
        spread = max(known) - min(known) if known else 0
        if not self.holding and not self.paused and len(known) == len(fresh) and spread <= self.align_ms:
            return ext  # nothing to hold, nothing to resume: the batch as consumed
        bound = self._bound(consumer, fresh)
        cuts: dict[int, int] = {}
        if bound is not None:
            for p, t in newest.items():
                if t > bound:
                    cuts[p] = int(pool.offsets[int(np.flatnonzero((parts == p) & (times > bound))[0])])
        out, self.pool = _split(pool, cuts)
        self.held += len(self.pool) + len(self.pool.bad)
        last = _last_offsets(self.pool)
        # pause what holds records (again if it delivered while paused: a rebalance cleared the consumer's pause)
        self._pause(consumer, {p: o for p, o in last.items() if p not in self.paused or p in delivered})
        self._resume(consumer, self.paused - set(last))
        return _merged(out)

    def rewound(self, ext: Extracted, msgs: list[Any]) -> list[Any]:
        """A batch was not committed and is read again: where to seek each partition; held records are dropped.

        The positions are the first offsets of the batch's records, of ``msgs`` (just consumed) and of the held
        records, per partition (for :meth:`router.plane_rebalance.PlaneMembership.rewind`).
        """
        first: dict[int, int] = {}
        for src in (_first_offsets(ext), _first_offsets(self.pool), {m.partition() or 0: m.offset() or 0 for m in
                                                                      reversed(msgs)}):  # fmt: skip
            for p, o in src.items():
                first[p] = min(o, first.get(p, o))
        self.pool = Extracted()
        return [SourceRecord(self.raw_topic, p, o, None, None) for p, o in first.items()]

    # -- the rule --------------------------------------------------------------------------------
    def _track(self, assignment: set[int]) -> float:
        """Forget partitions no longer assigned (their pause went with them), note new ones; the clock."""
        now = self._clock()
        for d in (self.front, self.seen, self.start):
            for p in [p for p in d if p not in assignment]:
                del d[p]
        self.paused &= assignment
        for p in assignment:
            self.seen.setdefault(p, now)  # assigned now: it counts (if records wait) for stale_s before delivering
        return now

    def _bound(self, consumer: Any, fresh: list[int]) -> int | None:
        """``floor + align_ms`` over the partitions that count; ``None`` when none does."""
        unknown = [p for p in fresh if p not in self.front]
        waiting = [p for p, w in zip(unknown, self._waiting(consumer, unknown), strict=True) if w]
        floor = [self.front[p] for p in fresh if p in self.front] + [_UNKNOWN] * len(waiting)
        return min(floor) + self.align_ms if floor else None

    def _waiting(self, consumer: Any, parts: list[int]) -> list[bool]:
        """Per partition that delivered nothing yet: whether records wait.

        That is, the high watermark the consumer cached is above the committed offset (unknown counts as waiting).
        """
        from confluent_kafka import TopicPartition

        if not parts:
            return []
        tps = [TopicPartition(self.raw_topic, p) for p in parts]
        asked = [tp for tp in tps if tp.partition not in self.start]
        if asked:
            with contextlib.suppress(Exception):
                self.start.update({tp.partition: tp.offset for tp in consumer.committed(asked, timeout=5)})
        out = []
        for tp in tps:
            try:
                low, high = consumer.get_watermark_offsets(tp, cached=True)
            except Exception:  # noqa: BLE001 - unknown: it counts
                low, high = -1, -1
            pos = self.start.get(tp.partition, -1)
            out.append(high < 0 or high > (pos if pos >= 0 else max(low, 0)))
        return out

    def _pause(self, consumer: Any, last: dict[int, int]) -> None:
        """Pause the partitions holding records; the consumer drops what it fetched past ``last[p]``."""
        from confluent_kafka import KafkaException, TopicPartition

        for p, o in last.items():
            tp = TopicPartition(self.raw_topic, p, o + 1)
            with contextlib.suppress(KafkaException):  # no longer ours: its new owner starts from the commit
                consumer.pause([tp])
                consumer.seek(tp)
            self.paused.add(p)
            self.pauses += 1

    def _resume(self, consumer: Any, parts: set[int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        if not parts:
            return
        with contextlib.suppress(KafkaException):
            consumer.resume([TopicPartition(self.raw_topic, p) for p in sorted(parts)])
        self.paused -= parts


def _first_offsets(ext: Extracted) -> dict[int, int]:
    """The lowest offset per partition of a batch's records (good and bad)."""
    first: dict[int, int] = {}
    for p, o in zip(ext.partitions, ext.offsets, strict=True):
        if o < first.get(p, o + 1):
            first[p] = o
    for b in ext.bad:
        p, o = b.message.partition() or 0, b.message.offset() or 0
        if o < first.get(p, o + 1):
            first[p] = o
    return first


def _last_offsets(ext: Extracted) -> dict[int, int]:
    """The highest offset per partition of a batch's records (good and bad)."""
    last: dict[int, int] = {}
    for p, o in zip(ext.partitions, ext.offsets, strict=True):
        last[p] = max(o, last.get(p, o))
    for b in ext.bad:
        p, o = b.message.partition() or 0, b.message.offset() or 0
        last[p] = max(o, last.get(p, o))
    return last


def _gone(ext: Extracted, assignment: set[int]) -> dict[int, int]:
    """Cut points dropping every record of the partitions no longer assigned."""
    parts = set(ext.partitions) | {b.message.partition() or 0 for b in ext.bad}
    return {p: -1 for p in parts if p not in assignment}


def _split(ext: Extracted, cuts: dict[int, int]) -> tuple[Extracted, Extracted]:
    """``ext`` cut per partition ``p`` at offset ``cuts[p]``: (the records below, the records at or after)."""
    if not cuts:
        return ext, Extracted()
    below = [o < cuts.get(p, o + 1) for p, o in zip(ext.partitions, ext.offsets, strict=True)]
    bad_below = [(b.message.offset() or 0) < cuts.get(b.message.partition() or 0, 1 << 62) for b in ext.bad]
    return _take(ext, below, bad_below, True), _take(ext, below, bad_below, False)


def _drop(ext: Extracted, cuts: dict[int, int]) -> Extracted:
    """``ext`` without the records at or after ``cuts[p]`` of each partition ``p``."""
    return _split(ext, cuts)[0] if cuts else ext


def _take(ext: Extracted, mask: list[bool], bad_mask: list[bool], want: bool) -> Extracted:
    idx = [i for i, m in enumerate(mask) if m is want]
    return Extracted(
        keys=[ext.keys[i] for i in idx],
        times=[ext.times[i] for i in idx],
        measures=[ext.measures[i] for i in idx],
        values=[ext.values[i] for i in idx],
        partitions=[ext.partitions[i] for i in idx],
        offsets=[ext.offsets[i] for i in idx],
        bad=[b for b, m in zip(ext.bad, bad_mask, strict=True) if m is want],
    )


def _concat(a: Extracted, b: Extracted) -> Extracted:
    return Extracted(
        keys=a.keys + b.keys,
        times=a.times + b.times,
        measures=a.measures + b.measures,
        values=a.values + b.values,
        partitions=a.partitions + b.partitions,
        offsets=a.offsets + b.offsets,
        bad=a.bad + b.bad,
    )


def _merged(ext: Extracted) -> Extracted:
    """``ext``'s records merged by event time across partitions, each partition's records in their order.

    The sort key is each partition's running maximum of event time: non-decreasing within a partition, so a
    stable sort keeps every partition's order (the offsets to commit are each partition's last record).
    """
    if len(set(ext.partitions)) < 2:
        return ext
    parts = np.asarray(ext.partitions, dtype=np.int64)
    times = np.asarray(ext.times, dtype=np.int64)
    key = np.empty_like(times)
    for p in np.unique(parts).tolist():
        sel = np.flatnonzero(parts == p)
        key[sel] = np.maximum.accumulate(times[sel])
    order: npt.NDArray[np.intp] = np.argsort(key, kind="stable")
    if bool((order[1:] > order[:-1]).all()):
        return ext
    idx = order.tolist()
    return Extracted(
        keys=[ext.keys[i] for i in idx],
        times=[ext.times[i] for i in idx],
        measures=[ext.measures[i] for i in idx],
        values=[ext.values[i] for i in idx],
        partitions=[ext.partitions[i] for i in idx],
        offsets=[ext.offsets[i] for i in idx],
        bad=ext.bad,
    )
