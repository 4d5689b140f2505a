"""The data plane of one route: a thread running the batch loop on confluent-kafka clients.

Per batch (STYLE.md §5): take up to ``batch_max_records`` raw records, extract keys/times
(:mod:`router.extract`), ``assign`` them with the route's partitioner, produce each routed record to
partition ``c`` of the combiner topic and each bad record to the DLQ, wait until Kafka acknowledged all of
them, then commit the raw offsets. Nothing is committed before its outputs are acknowledged, so a crash
replays (at-least-once; consumers deduplicate on the source position ``(tp, p, o)``). With
``delivery=exactly_once`` the batch's outputs and its offsets go in one Kafka transaction instead.

One batch is in flight at a time and its delivery overlaps the next batch's CPU work::

    consume N+1 -> extract + assign N+1 -> wait for N's acks, commit N -> produce N+1 -> consume N+2 ...

(batch N+1 is produced only after N is committed, so a failure never commits past an unacknowledged record).

Several workers of a deployment share the raw partitions through the consumer group
``<app_id>.<route>``. A rebalance happens inside ``consume()``, i.e. between batches; the revoke callback
first delivers and commits the batch in flight, so no partition moves with uncommitted work. The partitioner
instance is kept across rebalances: its state is this worker's local view of the load it sent to the
combiners (which is still true), and keys of newly assigned raw partitions are simply new input.
Other threads (e.g. a Dalton sync service) touch the partitioner only through :meth:`RouteDataPlane.submit`,
which runs the call on the data-plane thread between two batches.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from connectors.kafka import make_consumer, make_producer
from router.extract import BadRecord, Extracted, Extractor
from router.observability import RouteMetrics, RouterMetrics, WindowTracker, key_hashes
from router.plane_parts import (
    ATTEMPTS,
    CONSUMER_TUNING,
    PASSTHROUGH,
    PRODUCER_TUNING,
    DataPlaneStats,
    DeliveryError,
    dead_letter,
    make_partitioner,
    next_offsets,
    passthrough,
    records_readable,
    window_clock,
)
from schemas.exceptions import BrokerError
from schemas.records import encode_routed
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings

__all__ = ["PASSTHROUGH", "DataPlaneStats", "DeliveryError", "RouteDataPlane", "make_partitioner"]

log = logging.getLogger("router.dataplane")


@dataclass(slots=True)
class _Batch:
    """A batch between produce and commit."""

    offsets: list[TopicPartition]
    consumed: int
    routed: int
    dead: int
    started: float  # perf_counter() when it was consumed


class RouteDataPlane:
    """The batch loop of one route on a dedicated thread (start/stop from any thread).

    ``partitioner`` is public for the sync service; ``sync`` is where such a service attaches itself.
    ``stop_after`` (benchmarks) stops the loop once that many records were handled.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        router: RouterSettings,
        route: RouteSettings,
        metrics: RouterMetrics,
        *,
        instance_id: str,
        partitioner: str | None = None,
        stop_after: int | None = None,
    ) -> None:
        self.kafka, self.router, self.route = kafka, router, route
        self.instance_id = instance_id
        self.partitioner = make_partitioner(route, partitioner)
        self.partitioner_name = partitioner or route.partitioner.name
        self.sync: Any = None  # attach point for a partitioner sync service (Dalton)
        self.metrics: RouteMetrics = metrics.route(route.route_name, self.partitioner_name, route.combiners)
        self.stats = DataPlaneStats()
        self.stop_after = stop_after
        self.group_id = f"{router.app_id}.{route.route_name}"
        self.extractor = Extractor(route, router.max_key_bytes)
        self.exactly_once = router.delivery == "exactly_once"
        self.window = WindowTracker(route.combiners, route.window.slide) if router.window_metrics else None
        self._count_window = route.window.kind == "count"
        self._clock = 0  # window clock (see plane_parts.window_clock; partitioners need non-decreasing times)
        self._stop = threading.Event()
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        self._failed: list[Message] = []
        self._pending: _Batch | None = None  # produced, not yet acknowledged/committed
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.assignment: set[int] = set()
        self._committed: dict[int, int] = {}  # raw partition -> the offset this worker committed last

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> RouteDataPlane:
        """Create the clients and start the loop thread."""
        self._thread = threading.Thread(target=self._main, name=f"dataplane-{self.route.route_name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the loop to finish its batch, commit, and leave the group (returns at once)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the loop to end; ``True`` when it did."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def alive(self) -> bool:
        """Whether the loop thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn`` on the data-plane thread between two batches (safe access to the partitioner)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls.put((fn, fut))
        return fut

    # -- the loop ------------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self._setup()
            try:
                while not self._stop.is_set():
                    self._run_calls()
                    self._batch()
                self._complete()  # clean stop: the last batch is delivered and committed
            finally:
                self._close()  # after a failure: the batch in flight stays uncommitted (replayed)
        except BaseException as exc:  # reported to the supervising service, which stops the worker
            self.error = exc
            log.exception(
                "data plane of route %s failed", self.route.route_name, extra={"route": self.route.route_name}
            )

    def _setup(self) -> None:
        # our tuning < the user's kafka.producer / kafka.consumer properties < what correctness needs
        producer_conf: dict[str, Any] = {**PRODUCER_TUNING, **self.kafka.producer, "on_delivery": self._on_error}
        if self.exactly_once:
            producer_conf["transactional.id"] = f"{self.group_id}.{self.instance_id}"
        self.producer = make_producer(self.kafka, **producer_conf)
        if self.exactly_once:
            self.producer.init_transactions(30)
        consumer_conf = {**CONSUMER_TUNING, **self.kafka.consumer, "enable.auto.commit": False}
        self.consumer = make_consumer(self.kafka, self.group_id, **consumer_conf)
        self.consumer.subscribe(
            [self.route.raw_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        log.info(
            "route %s: consuming %s in group %s (%s, %s)",
            self.route.route_name,
            self.route.raw_topic,
            self.group_id,
            self.partitioner_name,
            self.router.delivery,
            extra={"route": self.route.route_name, "instance": self.instance_id},
        )

    def _close(self) -> None:
        self._run_calls()
        try:
            self.producer.flush(self.router.shutdown_timeout_s)
        finally:
            self.consumer.close()  # leaves the group: the others take over the partitions at once
        log.info("route %s: stopped after %d records", self.route.route_name, self.stats.consumed)

    def _run_calls(self) -> None:
        while True:
            try:
                fn, fut = self._calls.get_nowait()
            except queue.Empty:
                return
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except Exception as exc:
                    fut.set_exception(exc)

    def _on_assign(self, consumer: Any, parts: list[TopicPartition]) -> None:
        self._check_committed(consumer, parts)
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
        mine = {p.partition: self._committed[p.partition] for p in parts if p.partition in self._committed}
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
                self._committed.pop(p, None)
            return
        if lost:
            p, (o, n) = next(iter(lost.items()))
            raise BrokerError(
                f"route {self.route.route_name}: the broker lost the committed offsets of group {self.group_id} "
                f"on {self.route.raw_topic} (partition {p}: committed {o}, the broker now has "
                f"{'none' if n is None or n < 0 else n}; {len(lost)} partition(s)): it lost its state (a restart of "
                f"an in-memory broker?); routed records acknowledged before may be lost. Stopping the worker"
            )

    def _on_revoke(self, consumer: Any, parts: list[TopicPartition]) -> None:
        # called inside consume(), between batches: commit the batch in flight before the partitions move
        self._complete()
        self.assignment -= {p.partition for p in parts}
        self.metrics.assigned.set(len(self.assignment))
        self.metrics.rebalances.inc()
        log.info("route %s: revoked %s", self.route.route_name, sorted(p.partition for p in parts))

    def _on_error(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:  # delivery.report.only.error: only failures reach this callback
            self._failed.append(msg)

    def _batch(self) -> None:
        """One turn of the loop; the previous batch's delivery overlaps this batch's extract + assign."""
        msgs = self.consumer.consume(self.router.batch_max_records, self.router.batch_timeout_ms / 1000)
        if not msgs:
            self._complete()  # idle: finish the batch in flight now
            return
        t0 = time.perf_counter()
        if any(m.error() is not None for m in msgs):
            for m in msgs:
                if m.error() is not None:
                    log.warning("route %s: consumer error %s", self.route.route_name, m.error())
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                return
        st = self.stats
        if st.first_consumed is None:
            st.first_consumed = time.monotonic()
            st.first_cpu = time.process_time()
        ext = self.extractor.extract(msgs)
        t1 = time.perf_counter()
        combiners = self._assign(ext)
        batch = _Batch(next_offsets(self.route.raw_topic, ext), len(msgs), len(ext), len(ext.bad), t0)
        t2 = time.perf_counter()
        self._complete()  # the previous batch was in flight until now: wait for its acks, commit its offsets
        t3 = time.perf_counter()
        if self.exactly_once:
            self._transact(ext, combiners, batch.offsets)
            self._done(batch)
        else:
            self._produce(ext, combiners)
            self._dead_letter(ext.bad)
            self._pending = batch
        st.extract_s += t1 - t0
        st.assign_s += t2 - t1
        st.produce_s += time.perf_counter() - t3

    def _complete(self) -> None:
        """Deliver and commit the batch in flight, if any (also on revoke and on a clean stop)."""
        batch = self._pending
        if batch is None:
            return
        t = time.perf_counter()
        self._deliver(batch.offsets)
        self._pending = None
        self.stats.deliver_s += time.perf_counter() - t
        self._done(batch)

    def _done(self, batch: _Batch) -> None:
        """Account for a batch whose outputs are acknowledged and whose offsets are committed."""
        st, rm = self.stats, self.metrics
        st.consumed += batch.consumed
        st.routed += batch.routed
        st.dead += batch.dead
        st.batches += 1
        st.last_acked = time.monotonic()
        st.last_cpu = time.process_time()
        rm.tuples_in.inc(batch.consumed)
        rm.tuples_out.inc(batch.routed)
        rm.batches.inc()
        rm.batch_seconds.observe(time.perf_counter() - batch.started)
        if self.stop_after is not None and st.consumed >= self.stop_after:
            self._stop.set()

    def _assign(self, ext: Extracted) -> np.ndarray:
        if not ext.keys:
            return np.zeros(0, dtype=np.int32)
        times = np.asarray(ext.times, dtype=np.int64)
        if self._count_window:
            clock = np.arange(self._clock, self._clock + times.size, dtype=np.int64)
            self._clock += int(times.size)
        else:
            clock = window_clock(times, self._clock)  # arrival order at the batch's event-time pace
            self._clock = int(clock[-1])
        t0 = time.perf_counter()
        if self.partitioner is None:
            combiners = passthrough(ext, self.route.combiners)
        else:
            combiners = self.partitioner.assign(ext.keys, None if self._count_window else clock)
        dt = time.perf_counter() - t0
        self.stats.partitioner_s += dt
        self.metrics.partitioner_seconds.inc(dt)
        self.metrics.partitioner_per_tuple.set(dt / len(ext.keys))
        if self.window is not None:
            for w in self.window.observe(key_hashes(ext.keys), combiners, clock):
                self.metrics.window_done(w)
        return combiners

    def _produce(self, ext: Extracted, combiners: np.ndarray) -> None:
        produce, poll = self.producer.produce, self.producer.poll
        out, src = self.route.combiner_topic_name, self.route.raw_topic
        rows = zip(
            ext.keys, ext.times, combiners.tolist(), ext.partitions, ext.offsets, ext.measures, ext.values, strict=True
        )
        for k, t, c, p, o, x, v in rows:
            value = encode_routed(k, t, c, src, p, o, x, v)
            try:
                produce(out, value, k, partition=c)
            except BufferError:  # local queue full: let librdkafka send, then retry once more
                poll(0.1)
                produce(out, value, k, partition=c)

    def _dead_letter(self, bad: list[BadRecord]) -> None:
        dlq, route = self.route.dlq_topic_name, self.route.route_name
        for b in bad:
            e = b.error
            dl = dead_letter(route, self.route.raw_topic, b)
            self.producer.produce(dlq, dl.model_dump_json().encode(), b.message.key(), partition=0)
            self.metrics.dead_lettered(e.field)
            log.debug("route %s: dead-lettered %s", route, dl.error, extra={"route": route, "offset": dl.offset})

    def _deliver(self, offsets: list[TopicPartition]) -> None:
        """Wait until Kafka acknowledged the batch (re-sending failures), then commit its offsets."""
        deadline = time.monotonic() + self.router.shutdown_timeout_s
        for attempt in range(ATTEMPTS):
            while self.producer.flush(1.0) > 0:
                if self._stop.is_set() and time.monotonic() > deadline:
                    raise DeliveryError("stopping with undelivered records; their offsets stay uncommitted")
            if not self._failed:
                self.consumer.commit(offsets=offsets, asynchronous=False)
                self._committed.update((tp.partition, tp.offset) for tp in offsets)
                return
            failed, self._failed = self._failed, []
            self.metrics.retries.inc()
            log.warning("route %s: %d records not acknowledged (%s), re-sending", self.route.route_name,
                        len(failed), failed[0].error())  # fmt: skip
            time.sleep(0.1 * (attempt + 1))
            for m in failed:
                self.producer.produce(m.topic(), m.value(), m.key(), partition=m.partition())  # type: ignore[arg-type]
        raise DeliveryError(f"route {self.route.route_name}: records not acknowledged after {ATTEMPTS} attempts")

    def _transact(self, ext: Extracted, combiners: np.ndarray, offsets: list[TopicPartition]) -> None:
        """One Kafka transaction: the routed records, the dead letters and the raw offsets."""
        for _ in range(ATTEMPTS):
            self.producer.begin_transaction()
            try:
                self._produce(ext, combiners)
                self._dead_letter(ext.bad)
                self.producer.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata(), 30)
                self.producer.commit_transaction(self.router.shutdown_timeout_s)
                self._committed.update((tp.partition, tp.offset) for tp in offsets)
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal() or not (err.txn_requires_abort() or err.retriable()):
                    raise
                self.metrics.retries.inc()
                log.warning("route %s: transaction failed (%s), aborting and retrying", self.route.route_name, err)
                self.producer.abort_transaction(30)
                self._failed.clear()
                continue
            if self._failed:  # cannot happen after a successful commit; never silently drop
                raise DeliveryError(f"{len(self._failed)} records failed inside a committed transaction")
            return
        raise DeliveryError(f"route {self.route.route_name}: transaction failed {ATTEMPTS} times")
