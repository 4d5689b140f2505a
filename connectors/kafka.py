"""Kafka client factories: every client gets the connection (and security) settings from one place."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from schemas.settings import KafkaSettings

__all__ = ["make_admin", "make_consumer", "make_producer", "produce_waiting"]

#: Our producer defaults: idempotent, batched. Route throughput depends on large batches.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 1_000_000,
    "compression.type": "none",
}
#: Our consumer defaults: manual commits, a short session timeout (a group join waits for it; BENCHMARKS.md).
CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 50,
    # librdkafka waits this long before fetching again once its prefetch queue is full (default 1,000 ms): a
    # reader of a large topic stalled for a second at a time (BENCHMARKS.md, "What the worker waited for")
    "fetch.queue.backoff.ms": 20,
}


def make_producer(kafka: KafkaSettings, **overrides: Any) -> Producer:
    """A confluent-kafka producer: our defaults < ``kafka.producer`` < ``overrides``."""
    conf = {**PRODUCER_DEFAULTS, **kafka.librdkafka("producer"), **overrides}
    return Producer(conf)


def make_consumer(kafka: KafkaSettings, group_id: str, **overrides: Any) -> Consumer:
    """A confluent-kafka consumer in ``group_id``: our defaults < ``kafka.consumer`` < ``overrides``."""
    conf = {**CONSUMER_DEFAULTS, "group.id": group_id, **kafka.librdkafka("consumer"), **overrides}
    return Consumer(conf)


def make_admin(kafka: KafkaSettings, **overrides: Any) -> AdminClient:
    """A confluent-kafka admin client."""
    return AdminClient({**kafka.librdkafka("admin"), **overrides})


def produce_waiting(producer: Producer, topic: str, value: bytes | None, key: bytes | None = None, **kw: Any) -> None:
    """``producer.produce``, waiting (serving delivery callbacks) while the local queue is full.

    For feeders that must not drop a record (benchmarks, the demo, tests); the router's data plane has its own
    bounded retry.
    """
    while True:
        try:
            producer.produce(topic, value, key, **kw)
            return
        except BufferError:
            producer.poll(0.05)
