"""The data plane of one route: a thread running the batch loop on confluent-kafka clients.

Per batch: take up to ``batch_max_records`` raw records, extract keys/times
(:mod:`router.extract`), ``assign`` them with the route's partitioner, produce each routed record to
partition ``c`` of the combiner topic and each bad record to the DLQ; the raw offsets are committed once Kafka
acknowledged those records and every record produced before them. Nothing is committed before its outputs are
acknowledged, so a crash replays (at-least-once; consumers deduplicate on the source position ``(tp, p, o)``).
With ``delivery=exactly_once`` the batch's outputs and its offsets go in one Kafka transaction instead (one
batch at a time).

With ``at_least_once`` up to ``router.max_in_flight`` batches are produced and not yet committed
(:class:`~router.plane_inflight.InFlight`, kept by the delivery side): batch N+1 is consumed, extracted,
assigned *and produced* while N's records are still being acknowledged::

    consume N+1 -> extract + assign N+1 -> poll(0): everything acknowledged? commit all in flight
                -> max_in_flight batches out? wait for all of them, commit -> produce N+1 -> consume N+2 ...

A commit covers every batch in flight and happens only when librdkafka holds no unacknowledged record at all
(its queue length is 0 after the failures were re-sent or dead-lettered and acknowledged too), so it never
passes an unacknowledged record, in whatever order Kafka acknowledges. That needs no delivery callback per
record: the producer keeps ``delivery.report.only.error`` (the callback runs for failures only). Per-batch
completion ("markers": a success callback on each batch's last record per output partition) was not used:
librdkafka reports successes of *all* records or of none, and with success reports on, confluent-kafka calls
the global (failure) callback for every record, the per-record Python cost this design avoids. The price: when
``max_in_flight`` batches are out, the loop waits until all of them are acknowledged (not only the oldest); with
``max_in_flight: 1`` the loop is the earlier one-batch pipeline (N+1 produced only after N is committed).

Several workers of a deployment share the raw partitions through the consumer group
``<app_id>.<route>``. A rebalance happens inside ``consume()``, i.e. between batches; the revoke callback
first delivers and commits every batch in flight, so no partition moves with uncommitted work. The partitioner
instance is kept across rebalances: its state is this worker's local view of the load it sent to the
combiners (which is still true), and keys of newly assigned raw partitions are simply new input.
Other threads (e.g. a Dalton sync service) touch the partitioner only through :meth:`RouteDataPlane.submit`,
which runs the call on the data-plane thread between two batches.

No single record stops a route: whatever fails for one record (extraction, an event time too far ahead, the
routed record's encoding, the producer or the broker refusing it) sends that record to the DLQ, as an envelope
with a bounded prefix when the whole record would not fit there. A lost partition (``on_lost``: the session
expired) drops the batches in flight without committing; commit results are checked per partition; waiting for
acknowledgements has a deadline below ``max.poll.interval.ms``; with ``exactly_once`` retriable errors of
``send_offsets_to_transaction``/``commit_transaction`` are retried (only abortable ones abort the transaction).

This module holds the loop (consume, extract, assign, then hand over). :class:`RouteDataPlane` composes
collaborators that own their state: the delivery side :class:`~router.plane_output.PlaneOutput` (producer,
failures, batches in flight, produce, dead-letter, deliver, commit), the group membership
:class:`~router.plane_rebalance.PlaneMembership` (assignment, rebalance callbacks) and
:class:`~router.plane_health.PlaneHealth` (readiness, lag).
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from confluent_kafka import KafkaException, Producer

from connectors.kafka import make_consumer, make_producer
from router.extract import BadRecord, Extracted, Extractor, RawMessage
from router.observability import RouteMetrics, RouterMetrics, WindowTracker
from router.partitioners import Partitioner
from router.plane_align import EventTimeAlign
from router.plane_clock import CatchUp, WindowClock
from router.plane_health import PlaneHealth
from router.plane_output import PlaneOutput
from router.plane_parts import (
    PRODUCER_TUNING,
    DataPlaneStats,
    DeliveryError,
    PendingBatch,
    consumer_conf,
    make_partitioner,
    next_offsets,
    offset_ranges,
)
from router.plane_peers import AlignChannel
from router.plane_rebalance import PlaneMembership
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings

__all__ = ["DataPlaneStats", "DeliveryError", "RouteDataPlane", "make_partitioner"]

log = logging.getLogger("router.dataplane")
#: Longest wait for records while the peers hold records of this worker back (router.align_peers): a round of
#: the exchange is a turn of each worker, and a backlog advances by at least align_ms of event time per round.
PEER_WAIT_S = 0.01
#: A batch whose latest event time is more than this many slides behind wall clock, routed while the window
#: clock runs at least ``BACKLOG_PACE`` times as fast as wall clock, is a backlog being caught up: the
#: partitioner is told (``set_backlog``), since Spark then reads micro-batches that span many slides
#: (:class:`~router.plane_clock.CatchUp`).
BACKLOG_SLIDES = 2.0
BACKLOG_PACE = 2.0


class RouteDataPlane:
    """The batch loop of one route on a dedicated thread (start/stop from any thread).

    Its collaborators: ``output`` (:class:`PlaneOutput`), ``membership`` (:class:`PlaneMembership`), ``health``
    (:class:`PlaneHealth`). ``assignment``, ``producer`` and ``consumer`` are theirs, reachable from here.

    ``partitioner`` is public for the sync service (it reaches it through :meth:`submit`). Pass a
    :class:`Partitioner` instance as ``partitioner`` to route with it instead of the route's configured one.
    ``watermark_ms``: the Spark job's watermark delay, if known: an event-time spread above it is warned of
    (:mod:`router.plane_health`).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        router: RouterSettings,
        route: RouteSettings,
        metrics: RouterMetrics,
        *,
        instance_id: str,
        partitioner: Partitioner | None = None,
        watermark_ms: int | None = None,
    ) -> None:
        self.kafka, self.router, self.route = kafka, router, route
        self.instance_id = instance_id
        self.partitioner = partitioner if partitioner is not None else make_partitioner(route)
        self.partitioner_name = self.partitioner.name
        self.metrics: RouteMetrics = metrics.route(route.route_name, self.partitioner_name, route.combiners)
        self.stats = DataPlaneStats()
        self.group_id = f"{router.app_id}.{route.route_name}"
        # format 2 carries the raw value as opaque bytes: its batches may be read whole (see router.extract)
        self.extractor = Extractor(route, router.max_key_bytes, vectorized=router.routed_format == 2)
        self.exactly_once = router.delivery == "exactly_once"
        self.window = WindowTracker(route.combiners, route.window.slide) if router.window_metrics else None
        self._count_window = route.window.kind == "count"
        self._clock = 0  # the count window's clock (tuples routed)
        self._event_clock = WindowClock()  # see plane_clock: partitioners need non-decreasing times
        self._ahead_ms = route.time.max_ahead_ms  # event times above wall clock + this are dead-lettered/clamped
        self._clamp = route.time.too_far_ahead == "clamp"
        self._catch_up = CatchUp(BACKLOG_SLIDES * float(self.partitioner.slide), BACKLOG_PACE)
        # a worker whose partitions drift further apart in event time than Spark's watermark delay warns (plane_health)
        self.health = PlaneHealth(self.metrics, route.raw_topic, router.ready_stale_s, spread_warn_ms=watermark_ms)
        self._pauses_seen = 0  # align.pauses already counted in the metrics
        self.align = EventTimeAlign(  # see plane_align
            route.raw_topic, router.align_ms, router.batch_max_records, idle_grace_s=router.align_ms / 1000
        )
        self.peers: AlignChannel | None = None  # set by _setup under router.align_peers
        self._stop = threading.Event()
        self.output = PlaneOutput(kafka, router, route, self.metrics, self.stats, self.health, self._stop)
        self.membership = PlaneMembership(
            kafka, router, route, self.metrics, self.health, self.group_id, self.output, self._complete,
            forget_held=self.align.forget,
        )  # fmt: skip
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def assignment(self) -> set[int]:
        """The raw partitions this worker consumes now."""
        return self.membership.assignment

    @property
    def producer(self) -> Producer:
        """The route's producer (the delivery side's; set by :meth:`start`, or by a caller driving the loop)."""
        return self.output.producer

    @producer.setter
    def producer(self, producer: Producer) -> None:
        self.output.producer = producer

    @property
    def consumer(self) -> Any:
        """The route's consumer in group ``group_id`` (offsets are committed through it)."""
        return self.output.consumer

    @consumer.setter
    def consumer(self, consumer: Any) -> None:
        self.output.consumer = consumer

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
                self._complete()  # clean stop: the batches in flight are delivered and committed
            finally:
                self._close()  # after a failure: the batches in flight stay uncommitted (replayed)
        except BaseException as exc:  # reported to the supervising service, which stops the worker
            self.error = exc
            log.exception(
                "data plane of route %s failed", self.route.route_name, extra={"route": self.route.route_name}
            )

    def _setup(self) -> None:
        # our tuning < the user's kafka.producer / kafka.consumer properties < what correctness needs
        producer_conf: dict[str, Any] = {**PRODUCER_TUNING, **self.kafka.producer, "on_delivery": self.output.on_error}
        if "message.timeout.ms" not in self.kafka.producer:  # a record's own delivery gives up before our wait
            txn_ms = int(self.kafka.producer.get("transaction.timeout.ms", 60_000))
            wait_ms = int(self.output.deliver_s * 800)
            cap = min(wait_ms, txn_ms) if self.exactly_once else wait_ms
            producer_conf["message.timeout.ms"] = max(1000, cap)
        if self.exactly_once:  # a stable id (checked by the settings): a restarted worker fences its zombie
            producer_conf["transactional.id"] = f"{self.group_id}.{self.instance_id}"
        self.producer = make_producer(self.kafka, **producer_conf)
        if self.exactly_once:
            self.producer.init_transactions(30)
        self.consumer = make_consumer(self.kafka, self.group_id, **consumer_conf(self.kafka, self.router))
        if self.align.enabled and self.router.align_peers:  # the other workers of the route: see plane_peers
            self.peers = AlignChannel(self.kafka, self.router.align_topic, self.group_id, self.instance_id).open()
            self.align.peers = self.peers
        self.consumer.subscribe(
            [self.route.raw_topic],
            on_assign=self.membership.on_assign,
            on_revoke=self.membership.on_revoke,
            on_lost=self.membership.on_lost,
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
        if self.peers is not None:
            self.peers.leave()
        try:
            self.producer.flush(self.router.shutdown_timeout_s)
        finally:
            self.membership.closing = True
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

    def _batch(self) -> None:
        """One turn of the loop; earlier batches are acknowledged while this one is extracted, assigned, produced."""
        wait_s = self.router.batch_timeout_ms / 1000
        if self.peers is not None and (self.align.holding or self.align.paused):
            wait_s = min(wait_s, PEER_WAIT_S)  # held back by the peers: look at their progress again soon
        msgs = self.consumer.consume(self.router.batch_max_records, wait_s)
        self.health.looped()
        self.health.sample(self.consumer, self.assignment)
        if not msgs and not (self.align.holding or self.align.paused):
            self._complete()  # idle: finish the batches in flight now
            self.align.idle(self.consumer, self.assignment)
            return
        t0 = time.perf_counter()
        if any(m.error() is not None for m in msgs):
            for m in msgs:
                if m.error() is not None:
                    log.warning("route %s: consumer error %s", self.route.route_name, m.error())
            fatal = [m.error() for m in msgs if m.error() is not None and m.error().fatal()]
            if fatal:  # e.g. FENCED_INSTANCE_ID: another worker runs with this instance id
                raise KafkaException(fatal[0])
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("route %s: consumed %s", self.route.route_name, offset_ranges(msgs))
        st = self.stats
        if st.first_consumed is None:
            st.first_consumed = time.monotonic()
            st.first_cpu = time.process_time()
        ext, limit_ms = self._extract(msgs)
        ext = self.align.admit(self.consumer, ext, self.assignment)  # held records too far ahead, merged by time
        if self.align.enabled:
            self.metrics.aligned_held.set(self.align.held_records)
            self.metrics.aligned_pauses.inc(self.align.pauses - self._pauses_seen)
            self._pauses_seen = self.align.pauses
        if not ext.keys and not ext.bad:  # all held: commit what is acknowledged (no wait: the backlog goes on)
            self._settle()
            return
        self.health.observe(ext)
        t1 = time.perf_counter()
        combiners = self._assign(ext, limit_ms)
        batch = PendingBatch(
            next_offsets(self.route.raw_topic, ext), len(ext) + len(ext.bad), len(ext), len(ext.bad), t0,
            time.monotonic(),
        )  # fmt: skip
        t2 = time.perf_counter()
        self._settle()  # commit what is acknowledged; wait only when max_in_flight batches are out
        t3 = time.perf_counter()
        if self.exactly_once:
            if self.output.transact(ext, combiners, batch):
                self._done(batch)
            else:
                self.membership.rewind(self.consumer, self.align.rewound(ext, msgs))
        else:
            self.output.hand_over(ext, combiners, batch)
        st.extract_s += t1 - t0
        st.assign_s += t2 - t1
        st.produce_s += time.perf_counter() - t3

    def _extract(self, msgs: Sequence[RawMessage]) -> tuple[Extracted, int]:
        limit_ms = int(time.time() * 1000) + self._ahead_ms  # wall clock + tolerance
        return self.extractor.extract(msgs, None if self._clamp else limit_ms), limit_ms

    def _settle(self) -> None:
        """Commit the batches in flight if everything is acknowledged, or wait when they are full (the output's)."""
        for batch in self.output.settle():
            self._done(batch)

    def _complete(self) -> None:
        """Deliver and commit every batch in flight, if any (also idle, on revoke and on a clean stop)."""
        for batch in self.output.complete():
            self._done(batch)

    def _produce(self, ext: Extracted, combiners: np.ndarray) -> list[BadRecord]:
        """Produce a batch's routed records; the refused ones (benchmarks drive this half of the loop alone)."""
        return self.output.produce(ext, combiners)

    @property
    def _pending(self) -> PendingBatch | None:
        """The batches in flight as one (``None`` when none is); the benchmark that drives the loop reads it."""
        return self.output.in_flight.merged()

    def _done(self, batch: PendingBatch) -> None:
        """Account for a batch whose outputs are acknowledged and whose offsets are committed."""
        self.align.delivered()
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

    def _assign(self, ext: Extracted, limit_ms: int) -> np.ndarray:
        if not ext.keys:
            return np.zeros(0, dtype=np.int32)
        times = np.asarray(ext.times, dtype=np.int64)
        if self._clamp:  # too far ahead: routed, but the window clock moves at most to wall clock + tolerance
            ahead = times > limit_ms
            if ahead.any():
                self.metrics.clamped.inc(int(ahead.sum()))
                times = np.minimum(times, limit_ms)
        if self._count_window:
            clock = np.arange(self._clock, self._clock + times.size, dtype=np.int64)
            self._clock += int(times.size)
        else:
            # arrival order at the raw partitions' mean pace in event time
            parts = np.fromiter(ext.partitions, np.int64, len(ext.partitions))
            clock = self._event_clock.stamp(times, parts, time.monotonic())
            self.metrics.event_clock.set(self._event_clock.now)
        times_or_none = None if self._count_window else clock
        if not self._count_window:
            self.partitioner.set_backlog(self._catch_up.update(limit_ms - self._ahead_ms, int(clock[-1])))
        t0 = time.perf_counter()
        keys = ext.keys if ext.key_buffer is None else ext.key_buffer  # the scan's buffer: hashed whole
        if self.window is None:
            combiners = self.partitioner.assign(keys, times_or_none)
        else:  # the key ids the partitioner computed anyway: the window metrics count distinct keys by them
            combiners, key_ids = self.partitioner.assign_with_ids(keys, times_or_none)
        dt = time.perf_counter() - t0
        self.stats.partitioner_s += dt
        self.metrics.partitioner_seconds.inc(dt)
        self.metrics.partitioner_per_tuple.set(dt / len(ext.keys))
        if self.window is not None:
            self.metrics.windows_done(self.window.observe(key_ids, combiners, clock))
        return combiners
