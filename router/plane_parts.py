"""Building blocks of the data plane: client tuning, the partitioner factory, statistics, dead letters, probes."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from confluent_kafka import KafkaError, TopicPartition

from connectors.kafka_offsets import make_probe_consumer
from router.extract import BadRecord, Extracted
from router.partitioners import Partitioner, create
from schemas.records import DeadLetter
from schemas.settings import KafkaSettings, RouteSettings

__all__ = [
    "ATTEMPTS",
    "CONSUMER_TUNING",
    "PASSTHROUGH",
    "PRODUCER_TUNING",
    "DataPlaneStats",
    "DeliveryError",
    "dead_letter",
    "make_partitioner",
    "next_offsets",
    "passthrough",
    "records_readable",
    "window_clock",
]

#: Pseudo partitioner name for benchmarks: no partitioner work, the same output I/O (see :func:`passthrough`).
PASSTHROUGH = "passthrough"
#: Consumer settings of the data plane (large fetches: the loop wants whole batches at once).
CONSUMER_TUNING: dict[str, Any] = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "queued.max.messages.kbytes": 256 * 1024,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
}
ATTEMPTS = 5
PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "delivery.report.only.error": True,  # the delivery callback sees failures only: no per-record callback cost
}


class DeliveryError(RuntimeError):
    """Kafka did not acknowledge routed records after retries (the batch's offsets stay uncommitted)."""


@dataclass
class DataPlaneStats:
    """Counters the benchmark and the tests read (the metrics carry the same numbers)."""

    consumed: int = 0
    routed: int = 0
    dead: int = 0
    batches: int = 0
    first_consumed: float | None = None  # time.monotonic() when the first record arrived
    last_acked: float | None = None  # time.monotonic() after the last batch was acknowledged
    first_cpu: float | None = None  # time.process_time() (all threads of the process) at first_consumed
    last_cpu: float | None = None  # time.process_time() at last_acked
    partitioner_s: float = 0.0  # inside Partitioner.assign
    # wall time per phase of the batch loop (per batch, not per record: cheap to keep)
    extract_s: float = 0.0
    assign_s: float = 0.0  # assign + window metrics + offsets to commit
    produce_s: float = 0.0  # encode + produce() (the transaction's whole time goes to deliver_s)
    deliver_s: float = 0.0  # flush + commit


def passthrough(ext: Extracted, n: int) -> npt.NDArray[np.int32]:
    """Combiners of the :data:`PASSTHROUGH` route: ``(source partition + offset) mod n``.

    Every combiner partition gets an equal share of the records, as under a balancing partitioner, so the
    pass-through run does the same output I/O (``n`` partitions, not only as many as the raw topic has)
    with no key work at all.
    """
    parts = np.asarray(ext.partitions, dtype=np.int64)
    return ((parts + np.asarray(ext.offsets, dtype=np.int64)) % n).astype(np.int32)


def make_partitioner(route: RouteSettings, name: str | None = None) -> Partitioner | None:
    """The route's partitioner (``None`` for :data:`PASSTHROUGH`)."""
    name = name or route.partitioner.name
    if name == PASSTHROUGH:
        return None
    params = route.partitioner.params()
    if route.partitioner.name == "custom":
        name = getattr(route.partitioner, "plugin", name)
    elif name != route.partitioner.name:
        params = {}
    return create(name, route.combiners, window=route.window.size, slide=route.window.slide, seed=route.seed, **params)


def dead_letter(route: str, raw_topic: str, bad: BadRecord) -> DeadLetter:
    """The DLQ value of a bad record: the error naming the field, the source position, the original bytes."""
    m, e = bad.message, bad.error
    kind, ts = m.timestamp()
    key, value = m.key(), m.value()
    return DeadLetter(
        route=route,
        error=str(e),
        field=e.field,
        topic=m.topic() or raw_topic,
        partition=m.partition() or 0,
        offset=m.offset() or 0,
        timestamp=ts if kind != 0 else None,
        key_b64=base64.b64encode(key).decode() if key is not None else None,
        value_b64=base64.b64encode(value).decode() if value is not None else None,
    )


def next_offsets(raw_topic: str, ext: Extracted) -> list[TopicPartition]:
    """The offsets to commit after a batch: one past its last record (good or bad) in each raw partition."""
    last = dict(zip(ext.partitions, ext.offsets, strict=True))  # offsets ascend per partition: last = max
    for b in ext.bad:
        p, o = b.message.partition(), b.message.offset()
        if p is not None and o is not None and o > last.get(p, -1):
            last[p] = o
    return [TopicPartition(raw_topic, p, o + 1) for p, o in last.items()]


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


def window_clock(times: npt.NDArray[np.int64], last: int) -> npt.NDArray[np.int64]:
    """The partitioner's window clock for one batch, in event-time ms, following *arrival order*.

    A partitioner's windows (Dalton's statistics window, the window metrics) need a non-decreasing clock, and
    the consumer downstream works in arrival order: Spark's micro-batches are offset ranges of the combiner
    topic, so a record's micro-batch depends on when it was routed, not on its event time. Under a backlog a
    batch holds one chunk per raw partition, each spanning the same stretch of event time; a running maximum
    of event times then stamps every chunk after the first with the newest time, and whole chunks land in
    one statistics window (Dalton balanced the wrong windows: per-window max/mean 1.03 -> 1.39 for chunks of
    5,000 records on 4 partitions). Here the batch's records instead share the batch's advance of the event
    time evenly in arrival order: from ``base = max(last, min(times) - 1)`` (so the first batch, or one after
    a gap in event time, starts at its own earliest time) to ``max(base, max(times))``, record ``i`` of ``m``
    getting ``base + (i + 1) * advance // m``. A batch in time order keeps nearly its own times; a chunked
    batch spreads over the same span in the order Spark will read it.
    """
    m = int(times.size)
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    base = max(int(last), int(times.min()) - 1)
    advance = max(0, int(times.max()) - base)
    steps = np.arange(1, m + 1, dtype=np.int64)
    return np.asarray(base + (steps * advance) // m, dtype=np.int64)
