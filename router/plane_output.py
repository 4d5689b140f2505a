"""The output side of a route's data plane: produce, dead-letter, deliver, commit (plain or transactional).

:class:`PlaneOutput` is the delivery collaborator of :class:`router.dataplane.RouteDataPlane`: it owns the
producer, the failures its callback collected, the batches in flight (:class:`~router.plane_inflight.InFlight`)
and what this worker committed last. It runs on the data-plane thread only. What it guarantees:

* one record never stops the route: a record whose encoding fails, or which the producer (``produce()``
  raising, e.g. ``MSG_SIZE_TOO_LARGE``) or the broker (a delivery report, e.g. the topic's smaller
  ``max.message.bytes``) refuses for good, goes to the DLQ; a dead letter that would itself be too large is
  sent as an envelope (reason, source position, size, a bounded prefix of the payload);
* a delivery wait ends after half of ``max.poll.interval.ms`` (the group would evict the worker after the
  whole), raising :class:`DeliveryError` with the offsets uncommitted;
* commit results are checked per partition: only what the broker accepted counts as committed;
* with ``at_least_once``, the batches in flight are committed together, and only once every record produced
  so far is acknowledged (:meth:`PlaneOutput.settle`, :meth:`PlaneOutput.complete`);
* with ``exactly_once``, retriable errors of ``send_offsets_to_transaction`` and ``commit_transaction`` are
  retried in place; abortable ones abort and re-run the transaction (records the broker refused are then
  dead-lettered); fatal ones (a newer instance with the same id fenced this one) stop the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from itertools import islice
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from router.extract import BadRecord, Extracted, SourceRecord, unexpected
from router.observability import RouteMetrics
from router.plane_health import PlaneHealth
from router.plane_inflight import InFlight
from router.plane_parts import (
    ATTEMPTS,
    GROUP_MEMBERSHIP_ERRORS,
    PER_RECORD_ERRORS,
    DataPlaneStats,
    DeliveryError,
    PendingBatch,
    check_sizes,
    dead_letter,
    dead_letter_bytes,
    refused_source,
)
from schemas.exceptions import RecordError
from schemas.records import encode_routed, encode_routed_v2_batch
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings

__all__ = ["PlaneOutput"]

log = logging.getLogger("router.dataplane")


class PlaneOutput:
    """Produce, dead-letter, deliver and commit for :class:`~router.dataplane.RouteDataPlane`.

    ``producer`` and ``consumer`` (whose group the offsets are committed in) are set by the plane once it made
    its clients; ``stop`` is the plane's stop event (a delivery wait is shorter once it is set).
    """

    producer: Producer
    consumer: Any

    def __init__(
        self,
        kafka: KafkaSettings,
        router: RouterSettings,
        route: RouteSettings,
        metrics: RouteMetrics,
        stats: DataPlaneStats,
        health: PlaneHealth,
        stop: threading.Event,
    ) -> None:
        self.router, self.route, self.metrics, self.stats, self.health = router, route, metrics, stats, health
        self._stop = stop
        self._msg_limit = check_sizes(kafka, router, route)  # refuses settings that cannot work
        poll_ms = int(kafka.consumer.get("max.poll.interval.ms", 300_000))
        self.deliver_s = poll_ms / 2000  # a delivery wait ends (the plane fails) before the group evicts us
        exactly_once = router.delivery == "exactly_once"
        self.in_flight = InFlight(1 if exactly_once else router.max_in_flight)  # produced, not committed
        self.failed: list[Message] = []  # what the producer's callback reported, handled by the next delivery
        self.committed: dict[int, int] = {}  # raw partition -> the offset this worker committed last
        self._skip: dict[tuple[int, int], str] = {}  # exactly_once: records the broker refused, dead-lettered next
        self._envelope: set[tuple[int, int]] = set()  # exactly_once: positions whose dead letter was refused

    def on_error(self, err: KafkaError | None, msg: Message) -> None:
        """The producer's delivery callback (``delivery.report.only.error``: only failures reach it)."""
        if err is not None:
            self.failed.append(msg)

    def settle(self) -> list[PendingBatch]:
        """Commit the batches in flight if Kafka acknowledged everything (no wait), or wait when they are full.

        ``poll(0)`` serves the failure callbacks; ``len(producer)`` counts the records librdkafka has not seen
        acknowledged yet (queued, in flight, or with a report not served): 0 means every batch in flight is
        delivered, up to failures, which :meth:`complete` re-sends or dead-letters before it commits. Returns
        the committed batches, oldest first.
        """
        if not self.in_flight:
            return []
        self.producer.poll(0)
        if self.in_flight.full or len(self.producer) == 0:
            return self.complete()
        return []

    def complete(self) -> list[PendingBatch]:
        """Deliver and commit every batch in flight; returns them, oldest first (also idle, revoke, clean stop)."""
        if not self.in_flight:
            return []
        t = time.perf_counter()
        refused = self.deliver(self.in_flight.offsets())
        batches = self.in_flight.take(refused)
        self.health.waiting_since = None
        self.stats.deliver_s += time.perf_counter() - t
        return batches

    def hand_over(self, ext: Extracted, combiners: np.ndarray, batch: PendingBatch) -> None:
        """Produce a batch's routed records and dead letters; it is in flight until a commit covers it."""
        refused = self.produce(ext, combiners)
        self.send_dead_letters(ext.bad + refused)
        batch.routed -= len(refused)
        batch.dead += len(refused)
        self.in_flight.add(batch)
        self.health.waiting_since = self.in_flight.oldest_consumed_at

    def produce(self, ext: Extracted, combiners: np.ndarray) -> list[BadRecord]:
        """Produce the routed records; returns those that failed on their own (to be dead-lettered)."""
        if self.router.routed_format == 1:
            return self._produce_v1(ext, combiners)
        return self._produce_v2(ext, combiners)

    def _produce_v2(self, ext: Extracted, combiners: np.ndarray) -> list[BadRecord]:
        """Wire format 2: the values built for the whole batch at once, then one ``produce()`` per record.

        Not ``produce_batch``: it wants one dict per record, and building those costs more than the per-record
        calls it saves; the partition is passed by position, which confluent-kafka parses faster than keywords
        (both measured in BENCHMARKS.md, "Router cost: routed wire format 2").
        """
        src, out = self.route.raw_topic, self.route.combiner_topic_name
        produce, poll, skip = self.producer.produce, self.producer.poll, self._skip
        refused: list[BadRecord] = []
        values = encode_routed_v2_batch(
            ext.times, ext.partitions, ext.offsets, ext.measures, ext.values, compact=self.router.routed_compact
        )
        keys, cs = ext.keys, combiners.tolist()
        start = 0
        if not skip:  # the common case: a bare loop (no index, no position check) until a record fails
            start = self._produce_all(out, keys, cs, values)
            if start == len(values):
                return refused
        for i, (k, c, v) in islice(enumerate(zip(keys, cs, values, strict=True)), start, None):
            try:
                if skip and (ext.partitions[i], ext.offsets[i]) in skip:  # exactly_once retry after an abort
                    raise _Refused(skip.pop((ext.partitions[i], ext.offsets[i])))
                try:
                    produce(out, v, k, c)
                except BufferError:  # local queue full: let librdkafka send, then retry once more
                    poll(0.1)
                    produce(out, v, k, c)
            except KafkaException as exc:
                if exc.args[0].code() not in PER_RECORD_ERRORS:
                    raise
                refused.append(_bad(src, ext, i, refused_source(src, out, k.encode(), v, exc.args[0]).error))
            except _Refused as why:
                refused.append(_bad(src, ext, i, why.error))
        return refused

    def _produce_all(self, out: str, keys: list[str], combiners: list[int], values: list[bytes]) -> int:
        """``produce()`` every record, with the local-queue-full retry; how many went before one raised.

        About 0.05 µs per record cheaper than the checked loop of :meth:`_produce_v2` (no ``enumerate``, no
        position check), which takes over from the record that raised (it gives that record its exact handling).
        """
        produce, poll = self.producer.produce, self.producer.poll
        done = 0
        try:
            for k, c, v in zip(keys, combiners, values, strict=True):
                try:
                    produce(out, v, k, c)
                except BufferError:  # local queue full: let librdkafka send, then retry once more
                    poll(0.1)
                    produce(out, v, k, c)
                done += 1
        except KafkaException:
            pass
        return done

    def _produce_v1(self, ext: Extracted, combiners: np.ndarray) -> list[BadRecord]:
        """Wire format 1 (JSON envelope), record by record."""
        produce, poll, skip = self.producer.produce, self.producer.poll, self._skip
        out, src = self.route.combiner_topic_name, self.route.raw_topic
        refused: list[BadRecord] = []
        rows = zip(
            ext.keys, ext.times, combiners.tolist(), ext.partitions, ext.offsets, ext.measures, ext.values, strict=True
        )
        for k, t, c, p, o, x, v in rows:
            try:
                if skip and (p, o) in skip:
                    raise _Refused(skip.pop((p, o)))
                value = encode_routed(k, t, c, src, p, o, x, v)
                try:
                    produce(out, value, k, c)
                except BufferError:  # local queue full: let librdkafka send, then retry once more
                    poll(0.1)
                    produce(out, value, k, c)
            except BufferError:
                raise
            except KafkaException as exc:
                if exc.args[0].code() not in PER_RECORD_ERRORS:
                    raise
                bad = refused_source(src, out, k.encode(), v, exc.args[0])
                refused.append(BadRecord(SourceRecord(src, p, o, k.encode(), v, t), bad.error))
            except _Refused as why:
                refused.append(BadRecord(SourceRecord(src, p, o, k.encode(), v, t), why.error))
            except Exception as exc:  # encoding failed for this record
                refused.append(BadRecord(SourceRecord(src, p, o, k.encode("utf-8", "replace"), v, t), unexpected(exc)))
        return refused

    def send_dead_letters(self, bad: list[BadRecord], envelope: bool = False, count: bool = True) -> None:
        """Send bad records to the DLQ (as envelopes when too large, or always with ``envelope``)."""
        dlq, route, raw = self.route.dlq_topic_name, self.route.route_name, self.route.raw_topic
        prefix = self.router.dead_letter_prefix_bytes
        for b in bad:
            small = envelope or (self._envelope and (b.message.partition(), b.message.offset()) in self._envelope)
            dl = dead_letter(route, raw, b, 0 if small else self._msg_limit, prefix)
            key = b.message.key()
            key = key[:prefix] if key is not None and dl.truncated else key
            try:
                self._send(dlq, dead_letter_bytes(dl), key)
            except KafkaException as exc:  # even the dead letter is refused: send its envelope
                if exc.args[0].code() not in PER_RECORD_ERRORS or dl.truncated:
                    raise
                dl = dead_letter(route, raw, b, 0, prefix)
                self._send(dlq, dead_letter_bytes(dl), key[:prefix] if key is not None else None)
            if count:
                self.metrics.dead_lettered(dl.field)
            log.debug("route %s: dead-lettered %s", route, dl.error, extra={"route": route, "offset": dl.offset})

    def _send(self, topic: str, value: bytes, key: bytes | None) -> None:
        try:
            self.producer.produce(topic, value, key, partition=0)
        except BufferError:
            self.producer.poll(0.1)
            self.producer.produce(topic, value, key, partition=0)

    def deliver(self, offsets: list[TopicPartition]) -> int:
        """Wait until Kafka acknowledged the batch (re-sending failures), then commit its offsets.

        Returns how many routed records Kafka refused for good (they went to the DLQ instead).

        Records the producer or broker refused for good (too large, invalid) go to the DLQ as envelopes. The
        wait ends after half of ``max.poll.interval.ms`` (or ``shutdown_timeout_s`` once stopping) with a
        :class:`DeliveryError`: the offsets stay uncommitted and the worker restarts.
        """
        start, lost_routed = time.monotonic(), 0
        for attempt in range(ATTEMPTS):
            while self.producer.flush(1.0) > 0:
                waited = time.monotonic() - start
                if waited > self.deliver_s or (self._stop.is_set() and waited > self.router.shutdown_timeout_s):
                    raise DeliveryError(
                        f"route {self.route.route_name}: records not acknowledged within {waited:.0f} s; their "
                        "offsets stay uncommitted"
                    )
            if not self.failed:
                self.commit(offsets)
                return lost_routed
            failed, self.failed = self.failed, []
            refused = [m for m in failed if m.error().code() in PER_RECORD_ERRORS]  # type: ignore[union-attr]
            if refused:
                raw, out = self.route.raw_topic, self.route.combiner_topic_name
                bad = [refused_source(raw, m.topic() or "", m.key(), m.value(), m.error()) for m in refused]
                routed = [b for b, m in zip(bad, refused, strict=True) if m.topic() == out]
                letters = [b for b, m in zip(bad, refused, strict=True) if m.topic() != out]
                self.send_dead_letters(routed, envelope=True)  # newly dead: counted
                self.send_dead_letters(letters, envelope=True, count=False)  # already counted as dead letters
                lost_routed += len(routed)
            retry = [m for m in failed if m.error().code() not in PER_RECORD_ERRORS]  # type: ignore[union-attr]
            if not retry:
                continue
            self.metrics.retries.inc()
            log.warning("route %s: %d records not acknowledged (%s), re-sending", self.route.route_name,
                        len(retry), retry[0].error())  # fmt: skip
            time.sleep(0.1 * (attempt + 1))
            for m in retry:
                self.producer.produce(m.topic(), m.value(), m.key(), partition=m.partition())  # type: ignore[arg-type]
        raise DeliveryError(f"route {self.route.route_name}: records not acknowledged after {ATTEMPTS} attempts")

    def commit(self, offsets: list[TopicPartition]) -> None:
        """Commit and check the result per partition; only what the broker accepted counts as committed."""
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False) or []
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal():
                raise
            self.metrics.commit_failures.inc()
            log.warning("route %s: offset commit failed (%s); those records are replayed after a rebalance or "
                        "restart", self.route.route_name, err)  # fmt: skip
            return
        ok = [tp for tp in result if tp.error is None]
        failed = [tp for tp in result if tp.error is not None]
        self.committed.update((tp.partition, tp.offset) for tp in ok)
        if failed:
            self.metrics.commit_failures.inc(len(failed))
            log.warning("route %s: commit refused for partitions %s (%s)", self.route.route_name,
                        sorted(tp.partition for tp in failed), failed[0].error)  # fmt: skip
        if ok:
            self.health.committed()

    def transact(self, ext: Extracted, combiners: np.ndarray, batch: PendingBatch) -> bool:
        """One Kafka transaction: the routed records, the dead letters and the raw offsets.

        ``False`` when the consumer lost its group membership meanwhile: the transaction was aborted and the
        caller must re-read the batch (it rewinds the consumer; the group may have moved the partitions).
        """
        for _ in range(ATTEMPTS):
            self.producer.begin_transaction()
            try:
                refused = self.produce(ext, combiners)
                self.send_dead_letters(ext.bad + refused)
                self._retrying(lambda: self.producer.send_offsets_to_transaction(
                    batch.offsets, self.consumer.consumer_group_metadata(), 30))  # fmt: skip
                self._retrying(lambda: self.producer.commit_transaction(self.router.shutdown_timeout_s))
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("route %s: transaction committed, next offsets %s", self.route.route_name,
                              [(tp.partition, tp.offset) for tp in batch.offsets])  # fmt: skip
                self.committed.update((tp.partition, tp.offset) for tp in batch.offsets)
                self.health.committed()
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() in GROUP_MEMBERSHIP_ERRORS and not err.fatal():
                    log.warning("route %s: %s; aborting the transaction, the batch is read again after the "
                                "consumer rejoins", self.route.route_name, err)  # fmt: skip
                    self.producer.abort_transaction(30)
                    self.failed.clear()
                    self._skip.clear()
                    self._envelope.clear()
                    return False
                if err.fatal() or not err.txn_requires_abort():
                    raise  # fatal (e.g. fenced by a newer instance with this id): the worker stops
                self.metrics.retries.inc()
                log.warning("route %s: transaction failed (%s), aborting and retrying", self.route.route_name, err)
                self.producer.abort_transaction(30)
                self._skip_refused()
                continue
            if self.failed:  # cannot happen after a successful commit; never silently drop
                raise DeliveryError(f"{len(self.failed)} records failed inside a committed transaction")
            batch.routed -= len(refused)
            batch.dead += len(refused)
            self._skip.clear()  # only meant for this batch's retries
            self._envelope.clear()
            return True
        raise DeliveryError(f"route {self.route.route_name}: transaction failed {ATTEMPTS} times")

    def _retrying(self, call: Callable[[], Any]) -> None:
        """Run a transactional call, retrying it while librdkafka says the error is retriable."""
        for attempt in range(ATTEMPTS):
            try:
                call()
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal() or err.txn_requires_abort() or not err.retriable() or attempt == ATTEMPTS - 1:
                    raise
                self.metrics.retries.inc()
                log.warning("route %s: retrying after %s", self.route.route_name, err)
                time.sleep(0.1 * (attempt + 1))

    def _skip_refused(self) -> None:
        """After an abort: the records the broker refused for good are dead-lettered in the next attempt."""
        failed, self.failed = self.failed, []
        for m in failed:
            err = m.error()
            if err is None or err.code() not in PER_RECORD_ERRORS:
                continue
            bad = refused_source(self.route.raw_topic, m.topic() or "", m.key(), m.value(), err)
            pos = (bad.message.partition() or 0, bad.message.offset() or 0)
            if m.topic() == self.route.combiner_topic_name:
                self._skip[pos] = str(bad.error.reason)
            else:  # its dead letter was refused: send an envelope next time
                self._envelope.add(pos)


def _bad(src: str, ext: Extracted, i: int, error: RecordError) -> BadRecord:
    """The bad record of good record ``i`` of a batch (its output was refused)."""
    k = ext.keys[i].encode("utf-8", "replace")
    return BadRecord(SourceRecord(src, ext.partitions[i], ext.offsets[i], k, ext.values[i], ext.times[i]), error)


class _Refused(Exception):
    """A record the broker refused in an aborted transaction (dead-lettered in the retry)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.error = RecordError("value", reason)
