"""Read a whole topic with manual ``assign()`` (no group join), for tests, benchmarks and checks.

The reader finishes a partition on librdkafka's partition-EOF event, whose offset is the partition's true end
when the event is raised. The advertised end (high watermark) is not enough: Tansu reports it as the start of
the last record batch + 1, and a partition that looked complete there could still have records to fetch. The
read stops when an expected count is reached, or when every partition has reported its end and no record
arrived for ``idle_s`` seconds after that (records still being written when the read began), or after
``timeout_s``.

It starts at offset 0, not at ``OFFSET_BEGINNING``: Tansu answers "earliest" with the first offset of the batch
it wrote first, which with several producers on a partition can lie past records it holds
(:func:`connectors.kafka_offsets.watermarks`). On Apache Kafka an offset 0 that retention deleted is reset to
the log start (``auto.offset.reset=earliest``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, TopicPartition

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
    isolation_level: str | None = None,
) -> list[TopicRecord]:
    """Every record of ``topic`` from the beginning (all partitions), in per-partition offset order.

    ``isolation_level`` overrides the consumer's (``make_consumer``'s default when ``None``).
    """
    n = partition_count(make_admin(kafka), topic)
    if n is None:
        raise BrokerError(f"topic {topic!r} does not exist")
    consumer = make_consumer(
        kafka,
        group_id=f"skewroute-reader-{time.monotonic_ns()}",
        **{"fetch.wait.max.ms": 20, "enable.partition.eof": True},
        **({"isolation.level": isolation_level} if isolation_level else {}),
    )
    out: list[TopicRecord] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])  # see the module docstring
        behind = set(range(n))  # partitions whose partition-EOF event has not arrived since their last record
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
                        behind.discard(m.partition() or 0)
                        continue
                    raise BrokerError(f"reading {topic!r}: {err.str()}")
                rec = TopicRecord(m.partition() or 0, m.offset() or 0, m.key(), m.value(), m.timestamp()[1])
                out.append(rec)
                behind.add(rec.partition)  # a record after an EOF: the partition is being written, read on
                last = time.monotonic()
    finally:
        consumer.close()
    return out
