"""Read a whole topic with manual ``assign()`` (no group join), for tests, benchmarks and checks.

Tansu advertises a partition's end offset as the start of its last record batch + 1, so the high watermark
cannot tell when a partition has been read completely: this reader stops when an expected count is reached,
or when every partition has reached its advertised end and no record arrived for ``idle_s`` seconds after
that (a slow first fetch on a loaded host is not mistaken for the end of the topic).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from connectors.admin import partition_count
from connectors.kafka import make_admin, make_consumer
from schemas.exceptions import BrokerError
from schemas.settings import KafkaSettings

__all__ = ["TopicRecord", "read_topic"]


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """One record as read back."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def read_topic(
    kafka: KafkaSettings,
    topic: str,
    *,
    expected: int | None = None,
    idle_s: float = 2.0,
    timeout_s: float = 120.0,
) -> list[TopicRecord]:
    """Every record of ``topic`` from the beginning (all partitions), in per-partition offset order."""
    n = partition_count(make_admin(kafka), topic)
    if n is None:
        raise BrokerError(f"topic {topic!r} does not exist")
    consumer = make_consumer(kafka, group_id=f"skewroute-reader-{time.monotonic_ns()}", **{"fetch.wait.max.ms": 20})
    out: list[TopicRecord] = []
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10.0)[1] for p in range(n)}
        behind = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(n)])
        start = last = time.monotonic()
        while True:
            now = time.monotonic()
            if expected is not None and len(out) >= expected:
                break
            if now - start > timeout_s or (not behind and now - last > idle_s):
                break
            for m in consumer.consume(10_000, timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise BrokerError(f"reading {topic!r}: {err.str()}")
                rec = TopicRecord(m.partition() or 0, m.offset() or 0, m.key(), m.value(), m.timestamp()[1])
                out.append(rec)
                if rec.offset + 1 >= ends[rec.partition]:
                    behind.discard(rec.partition)
                last = time.monotonic()
    finally:
        consumer.close()
    return out
