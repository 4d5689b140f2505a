"""A bounded sample of a live topic: its most recent records, then new ones, up to a count or a time limit.

Used to look at a raw topic before routing it (``skewroute advise --config``, ``skewroute init``). Every
partition contributes at most ``records / partitions`` records, starting that many offsets before its end (the
recent stream is what a router will see next), read with manual ``assign()`` (no consumer group joins, nothing
is committed). The read stops at ``records`` records or after ``seconds``, whichever comes first; on a topic
that is not being written to, it also stops once every partition reached the end it had at the start and
nothing arrived for ``idle_s``. (Tansu reports a partition's end as the start of its last record batch + 1,
so there the sample starts earlier than the last records; it stays balanced over the partitions.)
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, Message, TopicPartition

from connectors.admin import partition_count
from connectors.kafka import make_admin, make_consumer
from schemas.exceptions import BrokerError, MissingTopicError
from schemas.settings import KafkaSettings

__all__ = ["sample_topic"]


def _start_offsets(consumer: Any, topic: str, partitions: int, records: int) -> tuple[dict[int, int], dict[int, int]]:
    """Per partition: where to start (``records / partitions`` before the end, not before the start) and the end."""
    quota = max(1, -(-records // partitions))  # ceil
    starts, ends = {}, {}
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10.0)
        starts[p], ends[p] = max(low, high - quota), high
    return starts, ends


def sample_topic(
    kafka: KafkaSettings,
    topic: str,
    *,
    records: int = 50_000,
    seconds: float = 10.0,
    idle_s: float = 1.0,
) -> list[Message]:
    """At most ``records`` recent records of ``topic`` (all partitions), read for at most ``seconds``.

    :class:`BrokerError` when the topic does not exist or cannot be read.
    """
    if records < 1:
        raise ValueError(f"records must be >= 1, got {records}")
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    n = partition_count(make_admin(kafka), topic)
    if n is None:
        raise MissingTopicError(f"topic {topic!r} does not exist (bootstrap {kafka.bootstrap_servers})")
    consumer = make_consumer(
        kafka,
        group_id=f"skewroute-sample-{time.monotonic_ns()}",
        **{"fetch.wait.max.ms": 50, "enable.auto.commit": False},
    )
    out: list[Message] = []
    try:
        starts, ends = _start_offsets(consumer, topic, n, records)
        quota = max(1, -(-records // n))
        taken = dict.fromkeys(range(n), 0)
        behind = {p for p in range(n) if ends[p] > starts[p]}
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in range(n)])
        deadline = time.monotonic() + seconds
        last = time.monotonic()
        while len(out) < records:
            now = time.monotonic()
            if now >= deadline or (not behind and now - last > idle_s):
                break
            for m in consumer.consume(min(10_000, records - len(out)), timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise BrokerError(f"reading {topic!r}: {err.str()}")
                p = m.partition() or 0
                last = time.monotonic()
                if taken[p] >= quota:
                    continue  # fetched before the pause took effect
                out.append(m)
                taken[p] += 1
                if taken[p] >= quota:
                    consumer.pause([TopicPartition(topic, p)])
                if taken[p] >= quota or (m.offset() or 0) + 1 >= ends[p]:
                    behind.discard(p)
    finally:
        consumer.close()
    return out[:records]
