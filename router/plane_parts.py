"""Building blocks of the data plane: client tuning, the partitioner factory, statistics, dead letters, probes."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from connectors.kafka_offsets import make_probe_consumer
from router.extract import BadRecord, Extracted
from router.partitioners import Partitioner, create
from schemas.records import DeadLetter
from schemas.settings import KafkaSettings, RouteSettings

__all__ = [
    "ATTEMPTS",
    "CONSUMER_TUNING",
    "PRODUCER_TUNING",
    "DataPlaneStats",
    "DeliveryError",
    "dead_letter",
    "make_partitioner",
    "next_offsets",
    "records_readable",
]

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


def make_partitioner(route: RouteSettings, name: str | None = None) -> Partitioner:
    """The route's partitioner; ``name`` builds another registered one with its defaults instead."""
    name = name or route.partitioner.name
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
