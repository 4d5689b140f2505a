"""The data plane's consumer keeps fetching while a backlog is drained (no 1-second stall between batches).

librdkafka postpones a partition's next fetch by ``fetch.queue.backoff.ms`` (default 1,000 ms) once its prefetch
queue holds ``queued.min.messages`` (100,000). A worker draining a backlog then emptied the queue in about half a
second and waited for the rest: it routed ~220k records/s while a bare consumer could fetch ~1M/s. The data plane
sets the backoff to 20 ms (``router.plane_parts.CONSUMER_TUNING``). This test drains a backlog the size that
triggered the stall with the data plane's consumer properties and with librdkafka's default, and measures the
longest wait for records: the default must show the stall (so the test can see it), ours must not.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin, make_consumer, make_producer, produce_waiting
from router.plane_parts import consumer_conf
from schemas.settings import KafkaSettings, RouterSettings

pytestmark = pytest.mark.kafka

PARTITIONS = 4
RECORDS = 300_000  # more than queued.min.messages: the fetcher backs off with records still to fetch


def _preload(kafka: KafkaSettings, topic: str) -> None:
    ensure_topics(make_admin(kafka), [TopicSpec(topic, PARTITIONS)])
    p = make_producer(kafka, **{"linger.ms": 20})
    for i in range(RECORDS):
        produce_waiting(p, topic, b'{"key":"k%d","v":%d}' % (i % 1000, i), partition=i % PARTITIONS)
    assert p.flush(120) == 0


def _longest_wait(kafka: KafkaSettings, topic: str, conf: dict[str, Any]) -> float:
    """Drain the topic in batches like the data plane; the longest time between two batches holding records."""
    c = make_consumer(kafka, f"fetch-{uuid.uuid4().hex[:8]}", **conf)
    c.subscribe([topic])
    try:
        got, last, longest = 0, None, 0.0
        deadline = time.monotonic() + 120
        while got < RECORDS and time.monotonic() < deadline:
            msgs = [m for m in c.consume(20_000, 0.05) if m.error() is None]
            if not msgs:
                continue
            now = time.monotonic()
            if last is not None:
                longest = max(longest, now - last)
            last, got = now, got + len(msgs)
        assert got == RECORDS
        return longest
    finally:
        c.close()


def test_draining_a_backlog_does_not_wait_for_the_fetch_backoff(kafka: KafkaSettings, topic: str) -> None:
    _preload(kafka, topic)
    ours = consumer_conf(kafka, RouterSettings())
    assert ours["fetch.queue.backoff.ms"] == 20
    default = {**ours, "fetch.queue.backoff.ms": 1000}  # librdkafka's default
    stalled = _longest_wait(kafka, topic, default)  # 0.72-0.87 s measured on an idle host
    waited = _longest_wait(kafka, topic, ours)  # 0.07-0.08 s
    assert waited < 0.4, f"the data plane's consumer waited {waited:.3f} s between batches of a backlog"
    assert stalled > waited + 0.3, f"the default backoff did not stall the drain ({stalled:.3f} s, ours {waited:.3f})"


def test_the_users_consumer_properties_win(kafka: KafkaSettings) -> None:
    user = kafka.model_copy(update={"consumer": {"fetch.queue.backoff.ms": 500, "enable.auto.commit": True}})
    conf = consumer_conf(user, RouterSettings())
    assert conf["fetch.queue.backoff.ms"] == 500
    assert conf["enable.auto.commit"] is False  # what correctness needs stays
