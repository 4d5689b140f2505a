"""Group membership of a route's data plane: what happens when raw partitions are assigned, revoked or lost.

:class:`PlaneMembership` is the membership collaborator of :class:`router.dataplane.RouteDataPlane`: it owns
the set of raw partitions assigned to this worker; its callbacks run inside the consumer's ``consume()``, i.e. on
the data-plane thread between two batches. What it guarantees:

* on assignment, a partition whose group offset is below the one this worker committed last means the broker
  lost its state: the worker stops with a :class:`~schemas.exceptions.BrokerError` (with ``exactly_once``, a
  broker that kept the records but dropped a transactional offset commit is replayed from the group's offsets
  instead); committed offsets below the log start (retention deleted raw records unread) fail or are logged
  and skipped, as ``router.on_data_loss`` says;
* on Tansu (asked at the first assignment), a partition the group never committed starts at offset 0, not at
  librdkafka's ``earliest``: Tansu's earliest can lie past records it holds
  (:func:`connectors.kafka_offsets.watermarks`);
* on revoke, every batch in flight (up to ``router.max_in_flight``) is delivered and committed before the
  partitions move;
* on loss (the session expired: the partitions already belong to others), the batches in flight are dropped
  uncommitted: their new owners replay them and consumers deduplicate on the source position ``(tp, p, o)``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from connectors.kafka_offsets import is_tansu, make_probe_consumer
from connectors.retention import DataLossError, find_lost_ranges
from router.observability import RouteMetrics
from router.plane_health import PlaneHealth
from router.plane_output import PlaneOutput
from schemas.exceptions import BrokerError
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings

__all__ = ["PlaneMembership", "records_readable"]

log = logging.getLogger("router.dataplane")


class PlaneMembership:
    """The rebalance callbacks of :class:`~router.dataplane.RouteDataPlane` (assign, revoke, lost).

    ``output`` is the plane's delivery side (the offsets it committed, the batches in flight); ``complete``
    delivers and commits every batch in flight and accounts for them (the plane's, run on revoke);
    ``forget_held`` drops what the plane holds back of some raw partitions (its event-time alignment): every
    assign, revoke and loss calls it, since such a partition is read again from the group's committed offset.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        router: RouterSettings,
        route: RouteSettings,
        metrics: RouteMetrics,
        health: PlaneHealth,
        group_id: str,
        output: PlaneOutput,
        complete: Callable[[], None],
        forget_held: Callable[[list[int]], None],
    ) -> None:
        self.kafka, self.router, self.route, self.metrics, self.health = kafka, router, route, metrics, health
        self.group_id = group_id
        self.exactly_once = router.delivery == "exactly_once"
        self._output = output
        self._complete = complete
        self._forget_held = forget_held
        self.assignment: set[int] = set()  # the raw partitions this worker consumes now
        self.start_at_zero: bool | None = None  # on Tansu (see the module docstring); asked at the first assignment
        self.closing = False  # set just before the consumer is closed

    def on_assign(self, consumer: Any, parts: list[TopicPartition]) -> None:
        """Partitions were assigned: check their committed offsets, then consume them.

        Not while the consumer closes: an assignment can still arrive inside ``close()``, and the broker calls of
        the checks then fail on the handle being destroyed (confluent-kafka re-raised that out of ``close()`` as an
        object that is not an exception, which ended the data-plane thread past its error handling).
        """
        if self.closing:
            return
        self._forget_held([p.partition for p in parts])  # an eager rebalance revokes and assigns in one consume()
        self._check_committed(consumer, parts)
        if self.start_at_zero is None:  # the broker answers now: it just assigned partitions
            self.start_at_zero = is_tansu(consumer)
        self._check_retention(consumer, parts)
        if self.start_at_zero:
            self._start_uncommitted_at_zero(consumer, parts)
        self.health.joined = True
        self.assignment |= {p.partition for p in parts}
        self.metrics.assigned.set(len(self.assignment))
        self.metrics.rebalances.inc()
        log.info("route %s: assigned %s", self.route.route_name, sorted(p.partition for p in parts))

    def _check_committed(self, consumer: Any, parts: list[TopicPartition]) -> None:
        """Fail if the group's committed offset of a partition is below the one this worker committed.

        That happens when the broker lost its state (an in-memory broker restarted: topics, records and group
        offsets are gone, and the consumer would wait silently past the end of the new, empty partitions); the
        routed records acknowledged before may be gone too, so the worker must not go on as if nothing happened.
        """
        done = self._output.committed
        mine = {p.partition: done[p.partition] for p in parts if p.partition in done}
        if not mine:
            return
        asked = [TopicPartition(self.route.raw_topic, p) for p in mine]
        now = {tp.partition: tp.offset for tp in consumer.committed(asked, timeout=10)}
        lost = {p: (o, now.get(p)) for p, o in mine.items() if now.get(p, -1) < o}  # -1001: no offset at all
        want = {p: o - 1 for p, (o, _) in lost.items() if o > 0}  # the records just below this worker's commits
        if lost and self.exactly_once and records_readable(self.kafka, self.route.raw_topic, want):
            # the broker kept the records but not the offsets of a transaction committed during the rebalance
            # (Tansu): resume from the group's offsets; the replayed records carry the same (tp, p, o)
            log.warning(
                "route %s: the broker did not apply this worker's transactional offset commit on %s (partitions "
                "%s); replaying from the group's offsets (duplicates keep their source position)",
                self.route.route_name, self.route.raw_topic, sorted(lost),
            )  # fmt: skip
            for p in lost:
                done.pop(p, None)
            return
        if lost:
            p, (o, n) = next(iter(lost.items()))
            raise BrokerError(
                f"route {self.route.route_name}: the broker lost the committed offsets of group {self.group_id} "
                f"on {self.route.raw_topic} (partition {p}: committed {o}, the broker now has "
                f"{'none' if n is None or n < 0 else n}; {len(lost)} partition(s)): it lost its state (a restart of "
                f"an in-memory broker?); routed records acknowledged before may be lost. Stopping the worker"
            )

    def _check_retention(self, consumer: Any, parts: list[TopicPartition]) -> None:
        """Committed offsets below the log start: retention deleted raw records unread (connectors/retention.py)."""
        lost = find_lost_ranges(consumer, self.route.raw_topic, [p.partition for p in parts], tansu=self.start_at_zero)
        if lost and self.router.on_data_loss == "fail":
            raise DataLossError(self.group_id, lost)
        for r in lost:
            log.error(
                "route %s: data loss on %s partition %d: offsets %d..%d deleted before they were routed; "
                "skipped (router.on_data_loss: skip)",
                self.route.route_name, r.topic, r.partition, r.committed, r.log_start - 1,
            )  # fmt: skip

    def _start_uncommitted_at_zero(self, consumer: Any, parts: list[TopicPartition]) -> None:
        """Assign ``parts`` at the group's committed offsets, and at 0 where the group has none (Tansu only)."""
        committed = consumer.committed([TopicPartition(self.route.raw_topic, p.partition) for p in parts], timeout=10)
        if all(tp.offset >= 0 for tp in committed):
            return
        at = [TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)) for tp in committed]
        strategy = str(self.kafka.consumer.get("partition.assignment.strategy", ""))
        (consumer.incremental_assign if "cooperative" in strategy else consumer.assign)(at)

    def on_revoke(self, consumer: Any, parts: list[TopicPartition]) -> None:
        """Partitions are taken away: deliver and commit every batch in flight first (called inside consume())."""
        self._complete()
        self._forget(parts)
        log.info("route %s: revoked %s", self.route.route_name, sorted(p.partition for p in parts))

    def on_lost(self, consumer: Any, parts: list[TopicPartition]) -> None:
        """The partitions already belong to others (session expired): drop the batches in flight uncommitted.

        Committing is impossible and would be wrong; their new owners replay them (consumers deduplicate on
        ``(tp, p, o)``).
        """
        dropped = self._output.in_flight.take()
        self.health.waiting_since = None
        if dropped:
            self.metrics.dropped_batches.inc(len(dropped))
        self._forget(parts)
        log.warning(
            "route %s: lost %s; dropped %d batch(es) in flight (%d records) without committing",
            self.route.route_name, sorted(p.partition for p in parts), len(dropped), sum(b.consumed for b in dropped),
        )  # fmt: skip

    def rewind(self, consumer: Any, msgs: list[Message]) -> None:
        """Seek back to the first offset of each partition of an uncommitted batch (it is read again)."""
        first: dict[int, int] = {}
        for m in msgs:
            first.setdefault(m.partition() or 0, m.offset() or 0)
        for p, o in first.items():
            with contextlib.suppress(KafkaException):  # no longer ours: the new owner starts from the commit
                consumer.seek(TopicPartition(self.route.raw_topic, p, o))
        self.metrics.dropped_batches.inc()

    def _forget(self, parts: list[TopicPartition]) -> None:
        self._forget_held([p.partition for p in parts])
        gone = {p.partition for p in parts}
        self.assignment -= gone
        self.health.revoked(gone)
        self.metrics.assigned.set(len(self.assignment))
        self.metrics.rebalances.inc()


def records_readable(kafka: KafkaSettings, topic: str, want: dict[int, int], timeout: float = 10.0) -> bool:
    """Whether the record at offset ``want[p]`` of every partition ``p`` of ``topic`` can still be read."""
    probe = make_probe_consumer(kafka.librdkafka("consumer"))  # assign only, EOF events on
    try:
        probe.assign([TopicPartition(topic, p, o) for p, o in want.items()])
        found: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(found) < len(want) and time.monotonic() < deadline:
            msg = probe.poll(0.5)
            if msg is None:
                continue
            err, part = msg.error(), msg.partition()
            if err is None and part is not None and msg.offset() == want.get(part):
                found.add(part)
            elif err is not None and err.code() != KafkaError._PARTITION_EOF:
                return False
        return len(found) == len(want)
    finally:
        probe.close()
