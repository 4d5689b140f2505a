"""The Kafka transport: SYNC and GLOBAL on one control-topic partition, a broadcast reader per worker.

Every worker has one producer and one *broadcast reader*: a consumer that ``assign()``s partition 0 of
the control topic (no group membership, so no join delay and no rebalance when workers come and go) and
reads every message, its own included, in the topic's order. The messages go to the worker's
:class:`~router.sync.node.SyncNode` of their route; a node returns what to publish.

Start-up: the reader starts ``history_ms`` before now (by timestamp; from the beginning when the broker
cannot say), so a new worker learns the live members, the round number and the hot-key validity from
recent messages, while stale rounds are skipped (nodes ignore SYNCs older than the liveness timeout and
never apply GLOBALs sent before they started). Tansu answers the time lookup with offset 0 when no
message is that recent; the reader then reads from the beginning and the same filters skip the stale
part. The partition's end offset is never used to decide that the reader is caught up (Tansu reports
the start of the last batch + 1).

:meth:`KafkaSyncTransport.pump` does one step (read what is there, tick, publish) and is what tests
drive; :meth:`KafkaSyncTransport.start` runs it on a thread.

Failures are never silent: a message that cannot be produced (too large, queue full) or delivered is
counted in ``errors`` and logged; an exception out of a step closes both clients, is counted in
``restarts`` and logged, and the thread opens new clients after a back-off (0.5 s doubling up to 30 s)
and goes on. The reader's fetch sizes and local queue are bounded (a flood of the control topic does not
grow the worker's memory; oversized values are skipped by the nodes). The reader's ``fetch.wait.max.ms`` is
``router.control_fetch_wait_ms`` (``auto``: short on Tansu, which holds an empty fetch for its whole wait;
librdkafka's 500 ms on Apache Kafka, which answers as soon as a message arrives), and the pump wakes on a
message (``poll``), not at the end of a wait.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from connectors.kafka import make_consumer, make_producer
from router.sync.node import ControlOut, SyncNode
from schemas.control import DEFAULT_MAX_BYTES, ControlMessageError, decode_raw, encode_control
from schemas.settings import KafkaSettings

__all__ = ["KAFKA_FETCH_WAIT_MS", "TANSU_FETCH_WAIT_MS", "KafkaSyncTransport", "wall_ms"]

log = logging.getLogger("router.sync.kafka")
_READER: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "fetch.min.bytes": 1,
    "queued.max.messages.kbytes": 8192,  # the reader's prefetch queue: bounded memory under a flood
}
_BACKOFF_S = (0.5, 30.0)
#: The control reader's ``fetch.wait.max.ms`` on Tansu, which holds a fetch that found nothing for much of its
#: wait: a message reached an idle reader within 16 ms at 10-50 ms, 53 ms at 100 ms and 241 ms at 500 ms. Apache
#: Kafka answers as soon as a message arrives (median 5-6 ms at any wait), so there the default is librdkafka's
#: 500 ms. Every idle reader sends a fetch per wait: 50 ms halved the Tansu broker's CPU for two idle Dalton
#: workers against 10 ms (BENCHMARKS.md, "Idle Dalton routers").
TANSU_FETCH_WAIT_MS = 50
KAFKA_FETCH_WAIT_MS = 500

_WRITER: dict[str, Any] = {"linger.ms": 1, "enable.idempotence": False, "acks": 1}


def wall_ms() -> float:
    """Wall-clock milliseconds (the protocol clock of the Kafka transport)."""
    return time.time() * 1000.0


class KafkaSyncTransport:
    """A worker's producer and broadcast reader of ``topic`` for its sync ``nodes`` (one per Dalton route).

    ``clock`` is the protocol clock (milliseconds; injectable for tests). Counters: ``sent`` / ``received``
    messages and bytes per message type, ``errors`` (produce, delivery and read errors), ``restarts``.
    ``max_bytes``: the largest control value written or read.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        nodes: Sequence[SyncNode],
        *,
        clock: Callable[[], float] = wall_ms,
        history_ms: float = 30_000,
        poll_s: float | None = None,
        fetch_wait_ms: int = TANSU_FETCH_WAIT_MS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.kafka, self.topic = kafka, topic
        self.nodes: dict[str, SyncNode] = {}
        for node in nodes:
            self.nodes[node.config.route] = node
        self.clock = clock
        self.history_ms = history_ms
        self.poll_s = poll_s
        self.fetch_wait_ms = fetch_wait_ms
        self.sent: Counter[str] = Counter()
        self.sent_bytes: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self.received_bytes = 0
        self.max_bytes = max_bytes
        self.errors = 0
        self.restarts = 0
        self.last_error: str | None = None
        self._producer: Any = None
        self._reader: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failed: BaseException | None = None

    # -- clients ---------------------------------------------------------------------------------
    def open(self) -> KafkaSyncTransport:
        """Create the producer and the broadcast reader (assigned, not subscribed)."""
        limit = max(1_000_000, self.max_bytes + 4096)
        self._producer = make_producer(self.kafka, **_WRITER, **{"message.max.bytes": limit})
        group = f"skewroute-sync-reader-{uuid.uuid4().hex[:12]}"  # never joined: assign() only
        fetch = {
            "max.partition.fetch.bytes": limit,
            "fetch.max.bytes": 4 * limit,
            "receive.message.max.bytes": 8 * limit,
        }
        self._reader = make_consumer(self.kafka, group, **_READER, **fetch, **{"fetch.wait.max.ms": self.fetch_wait_ms})
        self._reader.assign([TopicPartition(self.topic, 0, self._start_offset())])
        return self

    def _start_offset(self) -> int:
        since = int(wall_ms() - self.history_ms)
        try:
            got = self._reader.offsets_for_times([TopicPartition(self.topic, 0, since)], timeout=5)
            off = int(got[0].offset) if got and got[0].error is None else -1
        except KafkaException as exc:
            log.info("control topic %s: no offset by time (%s); reading from the beginning", self.topic, exc)
            return int(OFFSET_BEGINNING)
        return off if off >= 0 else int(OFFSET_BEGINNING)

    def close(self) -> None:
        """Flush what is pending and close both clients (errors while closing are logged, not raised)."""
        producer, reader = self._producer, self._reader
        self._producer = self._reader = None
        try:
            if producer is not None:
                producer.flush(5)
        except Exception as exc:  # noqa: BLE001 - closing after a failure: report and go on
            log.warning("control topic %s: flushing the sync producer failed: %s", self.topic, exc)
        try:
            if reader is not None:
                reader.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("control topic %s: closing the sync reader failed: %s", self.topic, exc)

    def _error(self, what: str, exc: object) -> None:
        self.errors += 1
        self.last_error = f"{what}: {exc}"
        level = logging.WARNING if self.errors == 1 or self.errors % 100 == 0 else logging.DEBUG
        log.log(level, "control topic %s: %s failed (%d errors so far): %s", self.topic, what, self.errors, exc)

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._error("delivery", err)

    # -- one step ----------------------------------------------------------------------------------
    def publish(self, msgs: Sequence[ControlOut]) -> None:
        """Produce control messages to partition 0 (key: the route); a refused one is counted and logged."""
        for msg in msgs:
            raw = encode_control(msg)
            try:
                self._producer.produce(self.topic, raw, msg.route.encode(), partition=0, on_delivery=self._delivered)
            except (KafkaException, BufferError) as exc:
                self._error(f"producing a {len(raw)} B {msg.type}", exc)
                continue
            self.sent[msg.type] += 1
            self.sent_bytes[msg.type] += len(raw)
        self._producer.poll(0)

    def pump(self, timeout: float = 0.0, max_messages: int = 500) -> int:
        """Wait up to ``timeout`` s for a message, read what is there, deliver it, tick every node, publish.

        Returns as soon as a message arrives (``poll``: a ``consume`` of several messages waits its whole
        timeout). Returns the number of messages read.
        """
        out: list[ControlOut] = []
        msgs = []
        if timeout > 0:
            first = self._reader.poll(timeout)
            if first is not None:
                msgs.append(first)
        if timeout <= 0 or 0 < len(msgs) < max_messages:  # the rest already queued, without a wait
            msgs.extend(self._reader.consume(max_messages - len(msgs), 0))
        now = self.clock()
        for m in msgs:
            if m.error() is not None:
                self._error("reading", m.error())
                continue
            raw = m.value()
            self.received_bytes += len(raw or b"")
            node = self.nodes.get((m.key() or b"").decode("utf-8", "replace"))
            if node is None:
                node = next(iter(self.nodes.values()), None)
                if node is None or not _foreign(raw, node.config.deployment, self.max_bytes):
                    continue  # another route of this deployment
                # not ours (or garbage): the node logs and ignores it
            self.received["all"] += 1
            out.extend(node.receive_raw(raw, now))
        for node in self.nodes.values():
            out.extend(node.tick(now))
        if out:
            self.publish(out)
        else:
            self._producer.poll(0)
        return len(msgs)

    # -- on a thread ---------------------------------------------------------------------------------
    def start(self) -> KafkaSyncTransport:
        """Open the clients (if needed) and pump on a daemon thread until :meth:`stop`."""
        if self._reader is None:
            self.open()
        self._thread = threading.Thread(target=self._loop, name=f"dalton-sync-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        backoff = _BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                if self._reader is None:
                    self.open()
                self.pump(self.tick_s())
                backoff = _BACKOFF_S[0]
            except Exception as exc:  # counted, logged, clients reopened; routing goes on meanwhile
                self.failed = exc
                self.restarts += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("dalton sync transport on %s failed (restart %d in %.1f s)", self.topic,
                              self.restarts, backoff)  # fmt: skip
                self.close()
                self._stop.wait(backoff)
                backoff = min(2 * backoff, _BACKOFF_S[1])

    def tick_s(self) -> float:
        """The longest the pump thread waits for a message before it ticks the nodes again.

        ``poll_s`` if given; else a tenth of the shortest DSYNC of the nodes, between 5 and 50 ms (a message
        wakes the thread at once: this only bounds how late a SYNC or a deadline can be).
        """
        if self.poll_s is not None:
            return self.poll_s
        dsync_ms = min((node.dsync for node in self.nodes.values()), default=1000.0)
        return min(max(dsync_ms / 10_000, 0.005), 0.05)

    @property
    def healthy(self) -> bool:
        """The pump thread runs and its clients are open."""
        return self._thread is not None and self._thread.is_alive() and self._reader is not None

    def stop(self, *, leave: bool = True, timeout: float = 10.0) -> None:
        """Stop pumping; with ``leave`` every node says so (nobody waits for it); close the clients."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._producer is None:
            return
        if leave:
            now = self.clock()
            for node in self.nodes.values():
                self.publish(node.leave(now, with_payload=False))
        self.close()


def _foreign(raw: bytes | None, deployment: str, max_bytes: int) -> bool:
    """Whether a message for no local route is not simply another route's of ``deployment``."""
    try:
        data = decode_raw(raw, max_bytes)
    except ControlMessageError:
        return True
    return not isinstance(data, dict) or data.get("deployment") != deployment
