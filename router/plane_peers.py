"""Event-time alignment across the workers of a route (``router.align_ms`` with ``router.align_peers``).

:class:`router.plane_align.EventTimeAlign` merges the raw partitions of one worker by event time. The workers of a
route read different raw partitions, each at its own pace, and a combiner partition holds their outputs in the
order they were produced. Under a backlog one worker can run minutes of event time ahead of another: each
micro-batch of the Spark job then spans that much event time, its keys fall into more (window, key) pairs, and
records of the worker behind reach Spark after the watermark has moved on with the one ahead (late records, or
wrong results when the backlog spans more than the watermark delay).

So every worker publishes its *low*: the lowest event time it may still route, over its partitions that count
(see :mod:`router.plane_align`): per partition, its oldest record held back, or when it holds none, the newest
event time consumed from it (what it reads next comes after). Each worker routes only records up to ``align_ms``
past the lowest low of its peers (and past its own partitions' floor, as before). Whatever one worker routes in a
turn then lies within ``align_ms`` of what every other worker still has to route: the combiner partitions fill
in event-time order within ``align_ms``, across workers. The worker holding the lowest low routes at least up to
``align_ms`` past it each turn, so the route always advances, by ``align_ms`` of event time per exchange at least:
a backlog is caught up at no less than ``align_ms`` of event time per ``every_s`` (and per turn), faster where
the workers' own data allow. A worker held back fills its partitions to the batch size and pauses them, so memory
stays bounded. What a worker holds is not routed, so not committed: a crash or a rebalance replays it like any
record not committed.

A worker publishes its low when it changes (at most every ``every_s``), repeats it every ``stale_s / 4`` while it
has one, and publishes "none" at once when it has none any more (caught up, idle, stopping). A peer not heard from
for ``stale_s`` holds nothing back: a crashed worker, or one cut off from the broker, stops counting after that
long, as a partition that stops delivering does in one worker. A worker whose channel has just opened, or whose
group has just rebalanced (every partition moved restarts from its commit), holds everything for
``stale_s / 4 + 2 every_s``: by then it has heard every peer that has a low.

The channel is one partition of ``router.align_topic``, shared by every route (a message names the route's
consumer group), written by a producer of its own (never the data plane's, which may be transactional) and read
by a consumer assigned to the partition (no group: no join, no rebalance), from ``stale_s`` ago. A message is
JSON: ``{"g": group, "w": worker, "f": low or null, "at": wall-clock ms}``; one older than ``stale_s`` by its
wall time is skipped (the hosts' clocks must agree to well within that). A failure of the channel never stops
the route: it is logged, counted in ``errors``, the worker aligns its own partitions alone, and the channel is
opened again after a back-off.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from router.plane_align import STALE_S, UNKNOWN

if TYPE_CHECKING:
    from schemas.settings import KafkaSettings

__all__ = ["AlignChannel", "PeerLows"]

log = logging.getLogger("router.dataplane")

#: The longest wait before a failed channel is opened again (it doubles from half a second).
_BACKOFF_S = (0.5, 30.0)
#: The reader's settings: no group offsets, a small bounded prefetch queue.
_READER: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "fetch.wait.max.ms": 10,
    "queued.max.messages.kbytes": 1024,
}
_WRITER: dict[str, Any] = {"linger.ms": 1, "enable.idempotence": False, "acks": 1}
#: Topic configs when the channel creates the topic: its messages matter for ``stale_s`` only.
TOPIC_CONFIG = (("retention.ms", str(3_600_000)),)


#: Raw partitions that a worker owned and none owns now (a rebalance under way, a worker gone) hold every worker back
#: for at most this long: their records, when someone reads them again, start from their commits.
UNOWNED_S = 10.0


class PeerLows:
    """The low and raw partitions last heard from each other worker of one route, and when (``clock`` seconds)."""

    def __init__(
        self,
        me: str,
        stale_s: float = STALE_S,
        clock: Callable[[], float] = time.monotonic,
        unowned_s: float = UNOWNED_S,
    ) -> None:
        self.me, self.stale_s, self.unowned_s, self._clock = me, stale_s, unowned_s, clock
        self._heard: dict[str, tuple[int | None, frozenset[int], float]] = {}
        self.known: set[int] = set()  # every raw partition some worker (this one included) owned
        self._unowned_since: float | None = None

    def heard(self, worker: str, low: int | None, owned: frozenset[int] = frozenset()) -> None:
        """``worker`` published ``low`` (``None``: it holds nothing back), owning ``owned``.

        This worker's own messages (the topic gives them back) are ignored.
        """
        if worker != self.me:
            self._heard[worker] = (low, owned, self._clock())
            self.known |= owned

    def lowest(self, own: set[int] | frozenset[int] = frozenset()) -> int | None:
        """The lowest low of the peers heard from within ``stale_s``; ``None`` when none has one.

        Below any event time while a raw partition some worker owned is owned by none (this worker owns ``own``),
        for at most ``unowned_s``.
        """
        now = self._clock()
        self._heard = {w: h for w, h in self._heard.items() if now - h[2] <= self.stale_s}
        self.known |= own
        owned = set(own).union(*(h[1] for h in self._heard.values()))
        if self.known - owned:
            self._unowned_since = now if self._unowned_since is None else self._unowned_since
            if now - self._unowned_since < self.unowned_s:
                return UNKNOWN
        else:
            self._unowned_since = None
        return min((low for low, _, _ in self._heard.values() if low is not None), default=None)

    @property
    def holding(self) -> list[str]:
        """The peers whose low counts now (heard within ``stale_s``, with a low)."""
        now = self._clock()
        return sorted(w for w, (low, _, at) in self._heard.items() if low is not None and now - at <= self.stale_s)


class AlignChannel:
    """One worker's side of a route's exchange of lows on ``topic`` (see the module docstring).

    :class:`~router.plane_align.EventTimeAlign` calls :meth:`lowest` at the start of each turn (what the peers
    published) and :meth:`publish` at its end (this worker's low).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        group: str,
        me: str,
        *,
        stale_s: float = STALE_S,
        every_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], float] = lambda: time.time() * 1000,
    ) -> None:
        self.kafka, self.topic, self.group, self.me = kafka, topic, group, me
        self.stale_s, self.every_s, self._clock, self._wall_ms = stale_s, every_s, clock, wall_ms
        self.peers = PeerLows(me, stale_s, clock)
        self.sent = self.received = self.errors = 0  # messages published, heard from peers; failures
        self._producer: Any = None
        self._reader: Any = None
        self._last: tuple[int | None, frozenset[int], float] | None = None  # (low, owned, clock) last published
        self._retry_at = 0.0
        self._backoff = _BACKOFF_S[0]
        self._ready_at = 0.0  # until then (just opened) it holds everything: the peers are not all heard yet

    # -- clients ---------------------------------------------------------------------------------
    def open(self) -> AlignChannel:
        """Create the topic if missing, the producer and the reader; a failure is logged and retried later."""
        try:
            self._open()
        except Exception as exc:  # noqa: BLE001 - the route goes on, aligned per worker, until it opens
            self._failed("opening", exc)
        return self

    def _open(self) -> None:
        from confluent_kafka import OFFSET_END, TopicPartition

        from connectors.admin import TopicSpec, ensure_topics
        from connectors.kafka import make_admin, make_consumer, make_producer

        ensure_topics(make_admin(self.kafka), [TopicSpec(self.topic, 1, config=TOPIC_CONFIG)])
        self._producer = make_producer(self.kafka, **_WRITER)
        self._reader = make_consumer(self.kafka, f"skewroute-align-reader-{uuid.uuid4().hex[:12]}", **_READER)
        since = int(self._wall_ms() - self.stale_s * 1000)
        start = OFFSET_END
        try:
            got = self._reader.offsets_for_times([TopicPartition(self.topic, 0, since)], timeout=5)
            if got and got[0].error is None and got[0].offset >= 0:
                start = got[0].offset
        except Exception as exc:  # noqa: BLE001 - from the end: the peers repeat their lows within stale_s / 4
            log.info("align topic %s: no offset by time (%s); reading from the end", self.topic, exc)
        self._reader.assign([TopicPartition(self.topic, 0, start)])
        self._last = None  # publish at once
        self._ready_at = self._clock() + self.warm_up_s

    def close(self) -> None:
        """Close both clients (errors are logged, never raised)."""
        producer, reader = self._producer, self._reader
        self._producer = self._reader = None
        for what, client, step in (("producer", producer, "flush"), ("reader", reader, "close")):
            if client is None:
                continue
            try:
                getattr(client, step)(*((2,) if step == "flush" else ()))
            except Exception as exc:  # noqa: BLE001 - closing: report and go on
                log.warning("align topic %s: closing the %s failed: %s", self.topic, what, exc)

    def leave(self) -> None:
        """Publish "none" (this worker holds nothing back any more) and close."""
        if self._producer is not None and self._last is not None and (self._last[0] is not None or self._last[1]):
            try:
                self._send(None, frozenset())
            except Exception as exc:  # noqa: BLE001 - its peers stop counting it after stale_s anyway
                log.warning("align topic %s: publishing the leave failed: %s", self.topic, exc)
        self.close()

    # -- the exchange ------------------------------------------------------------------------------
    @property
    def warm_up_s(self) -> float:
        """How long a channel just opened holds this worker back: every peer with a low is heard by then."""
        return self.stale_s / 4 + 2 * self.every_s

    def lowest(self, own: set[int] | frozenset[int] = frozenset()) -> int | None:
        """Read what the peers published; the lowest low heard within ``stale_s`` (``None``: none holds back).

        ``own``: the raw partitions this worker owns (see :meth:`PeerLows.lowest`).

        For :attr:`warm_up_s` after the channel opens it returns a low below any event time: a worker that starts
        (or restarts) under a backlog routes nothing before it has heard its peers, which repeat their lows
        every ``stale_s / 4``.
        """
        if not self._usable():
            return None
        try:
            self._read()
        except Exception as exc:  # noqa: BLE001 - the route goes on, aligned per worker, until it opens again
            self._failed("reading", exc)
            return None
        return UNKNOWN if self._clock() < self._ready_at else self.peers.lowest(own)

    def publish(self, low: int | None, owned: set[int] | frozenset[int] = frozenset()) -> None:
        """Publish this worker's low and the raw partitions it owns, when due.

        That is on a change of the low (at most every ``every_s``; at once to or from none) or of ``owned`` (at
        once), and every ``stale_s / 4`` while it has a low or partitions.
        """
        owned = frozenset(owned)
        if not self._usable() or not self._due(low, owned):
            return
        try:
            self._send(low, owned)
            self._producer.poll(0)
        except Exception as exc:  # noqa: BLE001 - the route goes on, aligned per worker, until it opens again
            self._failed("publishing", exc)
            return
        self._backoff = _BACKOFF_S[0]

    def rewarm(self) -> None:
        """Hold everything for :attr:`warm_up_s` from now (a rebalance: every worker's low starts again)."""
        self._ready_at = self._clock() + self.warm_up_s

    def _usable(self) -> bool:
        """Whether the clients are open (opened again here once the back-off after a failure is over)."""
        if self._producer is None and self._clock() >= self._retry_at:
            self.open()
        return self._producer is not None

    def _due(self, low: int | None, owned: frozenset[int]) -> bool:
        if self._last is None:
            return True
        last, last_owned, at = self._last
        since = self._clock() - at
        if owned != last_owned:
            return True
        if low != last:
            return since >= self.every_s or last is None or low is None
        return (low is not None or bool(owned)) and since >= self.stale_s / 4

    def _send(self, low: int | None, owned: frozenset[int]) -> None:
        doc = {"g": self.group, "w": self.me, "f": low, "a": sorted(owned), "at": int(self._wall_ms())}
        self._producer.produce(self.topic, orjson.dumps(doc), self.group.encode())
        self._last = (low, owned, self._clock())
        self.sent += 1

    def _read(self) -> None:
        oldest = self._wall_ms() - self.stale_s * 1000
        for m in self._reader.consume(1000, 0):
            if m.error() is not None:
                log.warning("align topic %s: %s", self.topic, m.error())
                continue
            try:
                doc = orjson.loads(m.value() or b"")
                if doc["g"] != self.group or doc["at"] < oldest:
                    continue
                low, owned = doc["f"], doc.get("a", [])
                if low is not None and type(low) is not int:
                    raise TypeError(f"low {low!r}")
                if type(owned) is not list or not all(type(p) is int for p in owned):
                    raise TypeError(f"partitions {owned!r}")
                self.peers.heard(str(doc["w"]), low, frozenset(owned))
                self.received += doc["w"] != self.me
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:  # not ours to trust: skipped
                log.warning("align topic %s: skipping a message at offset %s: %s", self.topic, m.offset(), exc)

    def _failed(self, what: str, exc: BaseException) -> None:
        self.errors += 1
        log.warning("align topic %s: %s failed (%s); aligning this worker's partitions alone for %.1f s",
                    self.topic, what, exc, self._backoff)  # fmt: skip
        self.close()
        self._retry_at = self._clock() + self._backoff
        self._backoff = min(self._backoff * 2, _BACKOFF_S[1])
