"""Helpers of the router integration tests: preload raw topics, run data planes, read the results back."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
from confluent_kafka import TopicPartition

from benchmarks.topic_reader import TopicRecord, read_topic
from connectors.admin import TopicSpec, ensure_route_topics, ensure_topics
from connectors.kafka import make_admin, make_consumer, make_producer
from router.dataplane import RouteDataPlane
from router.observability import RouterMetrics
from router.plane_parts import make_partitioner
from schemas.records import decode_routed_record
from schemas.settings import KafkaSettings, SkewrouteSettings

RAW_PARTITIONS = 4


def settings(kafka: KafkaSettings, raw: str, app_id: str, **route: Any) -> SkewrouteSettings:
    """Settings with one route over ``raw`` (fresh app id per test)."""
    router = route.pop("router", {})
    return SkewrouteSettings.load(
        kafka=kafka.model_dump(),
        routes=[{"raw_topic": raw, "combiners": 4, **route}],
        router={"app_id": app_id, "batch_max_records": 2000, "log_format": "text", **router},
    )


def zipf_records(n: int, seed: int = 0, start: int = 0) -> list[tuple[bytes, bytes]]:
    """``n`` (Kafka key, JSON value) pairs with Zipf-distributed keys; values carry a unique ``i``."""
    rng = np.random.default_rng(seed)
    keys = (rng.zipf(1.5, n) % 500).tolist()
    return [(f"k{k}".encode(), orjson.dumps({"key": f"k{k}", "i": start + i})) for i, k in enumerate(keys)]


def produce(kafka: KafkaSettings, topic: str, records: Sequence[tuple[bytes | None, bytes | None]]) -> None:
    """Write records round-robin over the raw partitions (creating the topic first)."""
    ensure_topics(make_admin(kafka), [TopicSpec(topic, RAW_PARTITIONS)])
    p = make_producer(kafka)
    for i, (k, v) in enumerate(records):
        p.produce(topic, v, k, partition=i % RAW_PARTITIONS)
    assert p.flush(30) == 0


def run_plane(
    s: SkewrouteSettings, expected: int, *, instance: str = "w1", timeout: float = 60.0, partitioner: str | None = None
) -> RouteDataPlane:
    """Run one route's data plane in this process until it handled ``expected`` records, then stop it.

    ``partitioner`` overrides the route's (with that partitioner's default parameters).
    """
    route = s.routes[0]
    ensure_route_topics(s.kafka, route)
    part = None if partitioner is None else make_partitioner(route, partitioner)
    plane = RouteDataPlane(s.kafka, s.router, route, RouterMetrics(instance), instance_id=instance, partitioner=part)
    plane.start()
    try:
        wait_for(lambda: plane.stats.consumed >= expected or plane.error is not None, timeout)
    finally:  # also when the wait fails: a plane left running keeps its clients after the broker stops
        plane.stop()
        assert plane.join(30)
    assert plane.error is None, plane.error
    return plane


def wait_for(cond: Any, timeout: float, what: str = "condition") -> None:
    """Poll ``cond()`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def routed(kafka: KafkaSettings, topic: str, expected: int | None = None) -> list[tuple[TopicRecord, dict[str, Any]]]:
    """The combiner topic's records with their decoded routed values."""
    recs = read_topic(kafka, topic, expected=expected, idle_s=2.0)
    return [(r, decode_routed_record(r.value, r.key, topic, r.partition) or {}) for r in recs]


def multiset_in(records: Sequence[tuple[bytes | None, bytes | None]]) -> Counter[tuple[str, bytes]]:
    """(key, raw value) multiset of the input."""
    return Counter((orjson.loads(v or b"{}")["key"], v or b"") for k, v in records)


def multiset_out(out: list[tuple[TopicRecord, dict[str, Any]]]) -> Counter[tuple[str, bytes]]:
    """(key, embedded raw value) multiset of the output (``d`` re-serialised compactly)."""
    return Counter((d["k"], orjson.dumps(d["d"])) for _, d in out)


def lateness(out: list[tuple[TopicRecord, dict[str, Any]]], combiner: int) -> int:
    """How far the most out-of-order record of one combiner partition lies behind the newest before it (ms)."""
    newest, worst = None, 0
    for rec, d in sorted(out, key=lambda x: x[0].offset):
        if rec.partition != combiner:
            continue
        t = int(d["t"])
        newest = t if newest is None else max(newest, t)
        worst = max(worst, newest - t)
    return worst


def committed(kafka: KafkaSettings, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per raw partition."""
    c = make_consumer(kafka, group)
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(RAW_PARTITIONS)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps}


def end_offsets(records: int) -> dict[int, int]:
    """The next offset per raw partition after ``records`` round-robin records (fresh topic)."""
    return {p: len(range(p, records, RAW_PARTITIONS)) for p in range(RAW_PARTITIONS)}
