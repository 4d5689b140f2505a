"""Event-time alignment of a data plane's raw partitions (``router.align_ms``).

Spark reads the combiner topic in offset ranges: each micro-batch takes the same share of every combiner
partition's backlog. What a combiner partition holds at an offset is what the router routed at that moment, so when
the router reads one raw partition far ahead of another, each combiner partition interleaves long stretches of
event time from different raw partitions. A micro-batch then spans more event time per key: its keys fall into more
(window, key) pairs (more partials to shuffle), and records of one raw partition reach Spark after the watermark
moved on with another's (late records). Reading one partition ahead is the normal case under a backlog: a fetch
returns at least one whole record batch of the producer per partition (tens of thousands of small records; a broker
may ignore ``max.partition.fetch.bytes`` beyond that), the consumer's queue hands them over one partition after the
other, and a consume batch is one partition's stretch; it also happens live when producers write the raw partitions
unevenly.

:class:`EventTimeAlign` merges the raw partitions by event time, within ``align_ms``. Each turn it adds the batch
just consumed to the records it holds and computes the *floor*: the lowest event time reached (the newest record
consumed) over the partitions that count -- those assigned that delivered records within the last ``stale_s``
seconds (or were assigned within it) and have records waiting (the high watermark the consumer cached is above its
position): a partition caught up does not count (with ``idle_grace_s`` it still counts for that long after it
delivered, which also aligns a router that keeps up with producers writing the raw partitions unevenly, at the
price of holding live records up to that long; the data plane sets it to ``align_ms``). Per partition it routes the
records up to its first one past ``floor + align_ms`` and holds the rest (they are not routed, so their offsets are
not committed); what it routes goes out merged by event time in slices of a tenth of ``align_ms`` (each partition's
records keep their order). A partition holding a batch's worth (``cap``, the batch size) is paused (and sought to
just after its last consumed record, so the consumer drops what it had fetched ahead; it is fetched again after the
resume) and resumed once it holds less, with a seek to that position again when it delivered nothing meanwhile
(librdkafka otherwise took about 0.75 s to fetch it again). The partition at the floor never holds a record, so
the route always advances; a partition that delivered nothing yet but has records waiting holds every other one
back until it delivers (its event time is unknown), for at most ``stale_s``.

What it does not do: wait for a partition with nothing to read (live routing is held only to route records already
waiting in a partition behind before the newer ones of another), nor for one that stopped delivering with records
waiting beyond ``stale_s``, nor keep more than ``cap`` records plus one consume batch per partition, nor change
commits: offsets are the ones after the records routed, so a crash, a rebalance or an aborted transaction replays
held records like any other uncommitted ones. A partition that delivers at or below an offset it holds was
repositioned (a rebalance restarted it from its commit, which also clears the consumer's pause): the held records
from there on are dropped, since they are read again.

Across the workers of a route (``peers``, set under ``router.align_peers``; :mod:`router.plane_peers`): each turn
the bound is also at most ``align_ms`` past the lowest event time any other worker may still route, and the worker
publishes its own: its oldest record held or handed out and not yet acknowledged, or the front of a partition
with records waiting. A partition resumed counts as just assigned until it delivers again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from router.extract import Extracted, SourceRecord
from router.plane_held import Held, extend, first_offsets, partition_runs

__all__ = ["STALE_S", "UNKNOWN", "EventTimeAlign", "Peers"]

log = logging.getLogger("router.dataplane")

#: A partition that delivered nothing for this long no longer holds the others back.
STALE_S = 2.0
#: The event time of a partition that delivered nothing yet: below any other.
UNKNOWN = -(1 << 62)
#: At most this many slices (a tenth of ``align_ms`` each) in the merge of one turn (a wider span gets wider slices).
_MAX_SLICES = 256


class Peers(Protocol):
    """The other workers of a route, as one worker's alignment sees them (:mod:`router.plane_peers`)."""

    def lowest(self, own: set[int]) -> int | None:
        """The lowest event time any of them may still route (``None``: none holds this worker back).

        ``own``: the raw partitions this worker owns (partitions owned by no worker hold it back too).
        """

    def publish(self, low: int | None, owned: set[int]) -> None:
        """Tell them this worker's lowest event time still to route, and the raw partitions it owns.

        ``low`` ``None``: it holds nothing back.
        """

    def rewarm(self) -> None:
        """The group rebalanced: hold everything until every peer has had time to publish its new low."""


class EventTimeAlign:
    """The alignment rule of one data plane (see the module docstring); ``align_ms <= 0`` turns it off.

    ``cap`` is the number of records a partition may hold before it is paused (the batch size).
    """

    def __init__(
        self,
        raw_topic: str,
        align_ms: int,
        cap: int = 20_000,
        stale_s: float = STALE_S,
        clock: Callable[[], float] = time.monotonic,
        idle_grace_s: float = 0.0,
        peers: Peers | None = None,
    ) -> None:
        self.raw_topic, self.align_ms, self.cap, self.stale_s, self._clock = raw_topic, align_ms, cap, stale_s, clock
        #: The other workers of the route (``router.align_peers``, :mod:`router.plane_peers`), or ``None``.
        self.peers = peers
        #: With peers: per batch handed out and not yet acknowledged (oldest first), its lowest event time. Peers
        #: go past it only once it is acknowledged, i.e. in the combiner partitions before what they route next.
        self.inflight: deque[int | None] = deque()
        self.idle_grace_s = min(idle_grace_s, stale_s)
        self.held: dict[int, Held] = {}  # raw partition -> its records consumed and not routed yet
        self.front: dict[int, int] = {}  # raw partition -> newest event time consumed from it
        self.seen: dict[int, float] = {}  # raw partition -> clock() when it last delivered (or was assigned)
        self.start: dict[int, int] = {}  # raw partition -> committed offset when assigned (-1: none)
        self.paused: set[int] = set()
        self.stale_pauses: set[int] = set()  # paused when they were revoked: resumed if assigned again
        #: raw partition -> the offset it was paused (and sought) at, while it has delivered nothing since: where
        #: the consumer stands, sought again at the resume
        self.resume_at: dict[int, int] = {}
        self.pauses = 0  # partitions paused so far
        self.most = 0  # the most records held at once

    @property
    def enabled(self) -> bool:
        """Whether the rule runs."""
        return self.align_ms > 0

    @property
    def holding(self) -> bool:
        """Whether records are held (a turn with nothing consumed may still route some)."""
        return bool(self.held)

    @property
    def held_records(self) -> int:
        """Records held now."""
        return sum(len(h) for h in self.held.values())

    def admit(self, consumer: Any, ext: Extracted, assignment: set[int]) -> Extracted:
        """The records to route this turn (``ext`` just consumed, plus held ones); pauses and resumes partitions."""
        if not self.enabled:
            return ext
        now = self._track(consumer, assignment)
        runs = partition_runs(ext.partitions)
        delivered: dict[int, int] = {}
        for a, _ in runs:
            delivered.setdefault(ext.partitions[a], ext.offsets[a])  # offsets ascend per partition
        for bad in ext.bad:
            p, o = bad.message.partition() or 0, bad.message.offset() or 0
            delivered[p] = min(o, delivered.get(p, o))
        for p, o in delivered.items():
            self.seen[p] = now
            self.resume_at.pop(p, None)  # it moved on from where it was paused
            h = self.held.get(p)
            last = h.last() if h is not None else None
            if h is not None and last is not None and o <= last:  # repositioned (a rebalance): read again
                h.drop_from(o)
                self.front.pop(p, None)
        times = np.fromiter(ext.times, dtype=np.int64, count=len(ext.times))
        for a, b in runs:
            t, p = int(times[a:b].max()), ext.partitions[a]
            self.front[p] = max(t, self.front.get(p, t))
        fresh = self._fresh(assignment, now)
        known = [self.front[p] for p in fresh if p in self.front]
        spread = max(known) - min(known) if known else 0
        peer = self.peers.lowest(assignment) if self.peers is not None else None
        behind = peer is not None and bool(known) and max(known) > peer + self.align_ms  # a peer is far behind
        if not self.held and not self.paused and len(known) == len(fresh) and spread <= self.align_ms and not behind:
            if self.peers is not None:  # all handed out now: what comes next starts at the fronts
                self._handed_out(ext)
                self.peers.publish(self._low(self._counting(consumer, fresh)), assignment)
            return ext  # nothing to hold, nothing to resume: the batch as consumed
        for a, b in runs:
            self.held.setdefault(ext.partitions[a], Held()).add(ext, a, b, times[a:b])
        for bad in ext.bad:
            self.held.setdefault(bad.message.partition() or 0, Held()).bad.append(bad)
        self.most = max(self.most, self.held_records)
        counting = self._counting(consumer, fresh)
        out = self._release(self._bound(self._floor(counting), peer))
        self.held = {p: h for p, h in self.held.items() if len(h)}
        full = {p: h.last() or 0 for p, h in self.held.items() if len(h) >= self.cap}
        # pause what holds a batch's worth (again if it delivered while paused: a rebalance cleared the pause)
        self._pause(consumer, {p: o for p, o in full.items() if p not in self.paused or p in delivered})
        self._resume(consumer, self.paused - set(full))
        if self.peers is not None:
            self._handed_out(out)
            self.peers.publish(self._low(counting), assignment)
        return out

    def delivered(self) -> None:
        """The oldest batch handed out is acknowledged (its records are in the combiner partitions)."""
        if self.inflight:
            self.inflight.popleft()

    def _handed_out(self, out: Extracted) -> None:
        """``out`` goes to the data plane as one batch (when it has records): its lowest event time is in flight."""
        if out.keys or out.bad:
            self.inflight.append(min(out.times) if out.times else None)

    def forget(self, parts: list[int]) -> None:
        """Partitions were assigned, revoked or lost: drop what is held of them, and their pause and positions.

        Whatever the rebalance, a partition held here is read again from the group's committed offset (by this
        worker or its new owner), so its held records must never be routed after it: under ``exactly_once`` they
        would be routed twice and their offsets committed past a position read again. (An eager rebalance revokes
        and assigns the same partitions inside one ``consume()``: the assignment looks unchanged afterwards.)
        """
        for p in parts:
            for d in (self.held, self.front, self.seen, self.start):
                d.pop(p, None)
        self.stale_pauses |= self.paused & set(parts)  # librdkafka keeps them paused if they come back (_track)
        self.paused -= set(parts)
        self.resume_at.clear()  # positions may have moved: the consumer's own are the ones to fetch from
        self.inflight.clear()  # the batches in flight were completed, or are dropped: read again
        if self.peers is not None:  # the peers' partitions restart from their commits too
            self.peers.rewarm()

    def rewound(self, ext: Extracted, msgs: list[Any]) -> list[Any]:
        """A batch was not committed and is read again: where to seek each partition; held records are dropped.

        The positions are the first offsets, per partition, of the batch's records, of ``msgs`` (just consumed)
        and of the held records (for :meth:`router.plane_rebalance.PlaneMembership.rewind`).
        """
        first = first_offsets(ext)
        for p, o in [(m.partition() or 0, m.offset() or 0) for m in msgs] + [
            (p, o) for p, o in ((p, h.first()) for p, h in self.held.items()) if o is not None
        ]:
            first[p] = min(o, first.get(p, o))
        self.held = {}
        self.resume_at.clear()  # the partitions are sought back: never to where they were paused
        self.inflight.clear()
        return [SourceRecord(self.raw_topic, p, o, None, None) for p, o in first.items()]

    # -- the rule --------------------------------------------------------------------------------
    def _release(self, bound: int | None) -> Extracted:
        """The held records up to ``bound`` (all when ``None``), merged by event time in slices of ``align_ms // 10``.

        Per partition the records released are a prefix (offset order) up to its first record past ``bound``:
        the running maximum of its event times is non-decreasing, so that prefix is found by bisection, and so are
        the slices the merge interleaves (each partition's records keep their order).
        """
        take: dict[int, tuple[npt.NDArray[np.int64], int]] = {}
        for p, h in self.held.items():
            cm = np.maximum.accumulate(h.ts) if h.ts.size else h.ts
            k = int(np.searchsorted(cm, bound, side="right")) if bound is not None else int(cm.size)
            take[p] = (cm, k)
        out = Extracted()
        with_records = [p for p, (_, k) in take.items() if k > 0]
        if len(with_records) > 1:
            lo = min(int(take[p][0][0]) for p in with_records)
            hi = max(int(take[p][0][take[p][1] - 1]) for p in with_records)
            step = max(self.align_ms // 10, (hi - lo) // _MAX_SLICES + 1, 1)
            edges = np.arange(lo + step, hi + step + 1, step, dtype=np.int64)
            bounds = {p: [0, *np.searchsorted(take[p][0][: take[p][1]], edges, side="left").tolist()]
                      for p in with_records}  # fmt: skip
            for j in range(len(edges)):
                for p in with_records:
                    a, b = bounds[p][j], bounds[p][j + 1]
                    if b > a:
                        extend(out, self.held[p], a, b, p)
        elif with_records:
            p = with_records[0]
            extend(out, self.held[p], 0, take[p][1], p)
        for p, (_, k) in take.items():
            bad, _ = self.held[p].take(k)
            out.bad += bad
        return out

    def _track(self, consumer: Any, assignment: set[int]) -> float:
        """Forget partitions no longer assigned (their pause and held records went with them); note new ones.

        A partition paused when it was revoked is resumed when it is assigned again: librdkafka keeps the pause
        through a rebalance that gives the partition back to the same consumer, while here it went with the
        revocation, so the partition would deliver nothing again (the route stalled with its records waiting).
        """
        now = self._clock()
        for d in (self.front, self.seen, self.start, self.held):
            for p in [p for p in d if p not in assignment]:
                del d[p]
        self.stale_pauses |= self.paused - assignment
        self.paused &= assignment
        again = sorted(p for p in assignment if p in self.stale_pauses and p not in self.seen)
        if again:  # rare: a rebalance gave back a partition paused before it
            from confluent_kafka import KafkaException, TopicPartition

            with contextlib.suppress(KafkaException):  # revoked again meanwhile: its next owner reads it
                consumer.resume([TopicPartition(self.raw_topic, p) for p in again])
            self.stale_pauses -= set(again)
        for p in assignment:
            self.seen.setdefault(p, now)  # assigned now: it counts (if records wait) for stale_s before delivering
        return now

    def idle(self, consumer: Any, assignment: set[int]) -> None:
        """A turn with nothing consumed and nothing held: tell the peers where this worker stands.

        Nothing, once it is caught up; but a partition assigned that has records waiting and delivered nothing
        yet (just after a rebalance) still holds the peers back.
        """
        now = self._track(consumer, assignment)  # resumes a partition paused before a rebalance gave it back
        if self.peers is None:
            return
        fresh = self._fresh(assignment, now)
        self.peers.publish(self._low(self._counting(consumer, fresh)), assignment)

    def _fresh(self, assignment: set[int], now: float) -> list[int]:
        """The partitions assigned that delivered (or were assigned) within ``stale_s``, in order."""
        return [p for p in sorted(assignment) if now - self.seen[p] <= self.stale_s]

    def _bound(self, floor: int | None, peer: int | None) -> int | None:
        """``align_ms`` past the lower of this worker's floor and its peers' low; ``None`` when neither has one."""
        floors = [f for f in (floor, peer) if f is not None]
        return min(floors) + self.align_ms if floors else None

    def _counting(self, consumer: Any, fresh: list[int]) -> list[int]:
        """The partitions that count.

        Of the partitions that delivered within ``stale_s`` (or were assigned within it), those count that have
        records waiting, or that delivered within ``idle_grace_s`` (a partition caught up a moment ago).
        """
        grace = self.idle_grace_s
        now = self._clock()
        return [
            p
            for p, waiting in zip(fresh, self._waiting(consumer, fresh), strict=True)
            if waiting or (p in self.front and grace > 0 and now - self.seen[p] <= grace)
        ]

    def _floor(self, counting: list[int]) -> int | None:
        """The lowest event time reached (newest consumed) over ``counting``; ``None`` when it is empty.

        A partition that delivered nothing yet counts below any event time (its own is not known yet).
        """
        return min((self.front.get(p, UNKNOWN) for p in counting), default=None)

    def _low(self, counting: list[int]) -> int | None:
        """The lowest event time this worker may still route from ``counting``: what it publishes to its peers.

        Per partition, its oldest record held, or when it holds none, its front (what it reads next comes after);
        a partition holding records counts whether or not more are waiting. Records handed out count until they
        are acknowledged: a peer that heard the low must route after them.
        """
        lows = [t for t in self.inflight if t is not None]
        lows += [int(h.ts.min()) for h in self.held.values() if h.ts.size]
        lows += [self.front.get(p, UNKNOWN) for p in counting if p not in self.held or not self.held[p].ts.size]
        return min(lows, default=None)

    def _waiting(self, consumer: Any, parts: list[int]) -> list[bool]:
        """Per partition: whether records wait to be consumed (unknown counts as waiting).

        That is, the high watermark the consumer cached from its fetches is above its position, or, for a
        partition that delivered nothing since it was assigned, above the committed offset.
        """
        from confluent_kafka import TopicPartition

        if not parts:
            return []
        tps = [TopicPartition(self.raw_topic, p) for p in parts]
        try:
            positions = {tp.partition: tp.offset for tp in consumer.position(tps)}
        except Exception:  # noqa: BLE001 - unknown: every partition counts
            return [True] * len(parts)
        asked = [tp for tp in tps if positions.get(tp.partition, -1) < 0 and tp.partition not in self.start]
        if asked:  # nothing consumed since the assignment: the committed offset is where it starts
            with contextlib.suppress(Exception):
                self.start.update({tp.partition: tp.offset for tp in consumer.committed(asked, timeout=5)})
        out = []
        for tp in tps:
            try:
                low, high = consumer.get_watermark_offsets(tp, cached=True)
            except Exception:  # noqa: BLE001 - unknown: it counts
                low, high = -1, -1
            pos = positions.get(tp.partition, -1)
            if pos < 0:
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
            self.resume_at[p] = o + 1
            self.paused.add(p)
            self.pauses += 1

    def _resume(self, consumer: Any, parts: set[int]) -> None:
        """Resume ``parts``; each one that delivered nothing since its pause is sought again where it stands.

        librdkafka fetched partitions resumed after a pause of every partition only 0.75 s later; a seek starts
        the fetch at once (BENCHMARKS.md, "What ``align_ms`` costs a worker's catch-up").
        """
        from confluent_kafka import KafkaException, TopicPartition

        if not parts:
            return
        with contextlib.suppress(KafkaException):
            consumer.resume([TopicPartition(self.raw_topic, p) for p in sorted(parts)])
        for p in sorted(parts):
            at = self.resume_at.pop(p, None)
            if at is not None:
                with contextlib.suppress(KafkaException):  # no longer ours: its new owner starts from the commit
                    consumer.seek(TopicPartition(self.raw_topic, p, at))
        self.paused -= parts
        now = self._clock()
        for p in parts:  # it delivers again after a fetch: until then it counts as if just assigned
            self.seen[p] = now
