"""Two workers of a route, one much slower, route a backlog with ``router.align_peers``: the combiner partitions
fill in event-time order across both, within ``align_ms``, and every record is routed."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from connectors.admin import ensure_route_topics
from connectors.kafka import make_consumer
from router.dataplane import RouteDataPlane
from router.extract import Extracted
from router.observability import RouterMetrics
from router.plane_align import UNKNOWN, EventTimeAlign
from router.plane_parts import make_partitioner
from router.plane_peers import AlignChannel
from schemas.settings import KafkaSettings
from tests.integration.router_support import (
    RAW_PARTITIONS,
    committed,
    end_offsets,
    lateness,
    multiset_in,
    multiset_out,
    produce,
    routed,
    settings,
    wait_for,
)

pytestmark = pytest.mark.kafka

T0 = 1_700_000_000_000
ALIGN_MS = 200


def _plane(s: Any, instance: str, slow_s: float = 0.0) -> RouteDataPlane:
    route = s.routes[0]
    part = make_partitioner(route, "hash")
    if slow_s:  # a worker on a busier host: every batch costs it slow_s more
        assign_with_ids = part.assign_with_ids

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(slow_s)
            return assign_with_ids(*args, **kwargs)

        part.assign_with_ids = slow  # type: ignore[method-assign]
    return RouteDataPlane(s.kafka, s.router, route, RouterMetrics(instance), instance_id=instance, partitioner=part)


def test_two_workers_route_a_backlog_in_event_time_order_across_both(kafka: KafkaSettings, topic: str) -> None:
    # record i is in raw partition i % 4 at event time T0 + i // 4 ms: every raw partition spans the same 10 s
    records = [(f"k{i % 97}".encode(), orjson.dumps({"key": f"k{i % 97}", "t": T0 + i // 4})) for i in range(40_000)]
    produce(kafka, topic, records)  # the whole backlog before the workers start
    s = settings(kafka, topic, f"app-{topic}", time={"source": "field", "field": "t", "unit": "ms"},
                 router={"align_ms": ALIGN_MS, "batch_max_records": 1000, "align_topic": f"{topic}.align"})  # fmt: skip
    ensure_route_topics(s.kafka, s.routes[0])
    slow = _plane(s, "slow", slow_s=0.02).start()  # alone first: all four raw partitions, then two
    fast: RouteDataPlane | None = None
    try:
        wait_for(lambda: slow.stats.consumed > 0 or slow.error is not None, 30, "the first worker's first batch")
        fast = _plane(s, "fast").start()
        wait_for(lambda: committed(kafka, slow.group_id, topic) == end_offsets(len(records)), 90, "the backlog routed")
    finally:
        for plane in (slow, fast):
            if plane is not None:
                plane.stop()
                assert plane.join(30)
    assert slow.error is None and fast is not None and fast.error is None
    out = routed(kafka, s.routes[0].combiner_topic_name)
    assert set(multiset_out(out)) == set(multiset_in(records))  # every record (a rebalance may repeat a few)
    assert max(lateness(out, c) for c in range(4)) <= ALIGN_MS
    assert fast.stats.consumed > 0 and slow.peers is not None and fast.peers is not None
    assert slow.peers.received > 0 and fast.peers.received > 0  # they heard each other
    assert fast.align.pauses > 0  # the fast one was held back


def test_align_channels_exchange_lows_through_the_broker(kafka: KafkaSettings, topic: str) -> None:
    a = AlignChannel(kafka, f"{topic}.align", "app.route", "A").open()
    b = AlignChannel(kafka, f"{topic}.align", "app.route", "B").open()
    other = AlignChannel(kafka, f"{topic}.align", "app.other", "C").open()  # another route on the same topic
    try:
        assert a.lowest({0}) == UNKNOWN  # just opened: warming up
        deadline = time.monotonic() + 10
        seen: tuple[int | None, int | None] = (None, None)
        while time.monotonic() < deadline and seen != (2_000, 1_000):
            a.publish(1_000, {0})
            b.publish(2_000, {1})
            other.publish(5, {7})
            time.sleep(0.05)
            seen = (a.lowest({0}), b.lowest({1}))
        assert seen == (2_000, 1_000)  # each hears the other, never itself nor another route
        assert a.peers.known == b.peers.known == {0, 1}
        a.leave()  # "none": it holds nothing back any more
        # "none", and partition 0 owned by nobody now: B holds back until the group gives it out again
        wait_for(lambda: b.lowest({1}) == UNKNOWN and b.peers.holding == [], 10, "the leave heard")
        assert a.errors == b.errors == 0
    finally:
        for ch in (a, b, other):
            ch.close()


def test_a_partition_paused_when_revoked_delivers_again_when_it_comes_back(kafka: KafkaSettings, topic: str) -> None:
    """librdkafka keeps a partition paused through a rebalance that gives it back to the same consumer. The rule's
    pause goes with the revocation, so it resumes such a partition (a route stalled on CI before it did)."""
    produce(kafka, topic, [(None, b"{}")] * 400 * RAW_PARTITIONS)
    assignment: set[int] = set()
    align = EventTimeAlign(topic, ALIGN_MS, cap=1)

    def on_assign(_c: Any, parts: list[Any]) -> None:
        align.forget([p.partition for p in parts])  # as the data plane does (router/plane_rebalance.py)
        assignment.update(p.partition for p in parts)

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        align.forget([p.partition for p in parts])
        assignment.difference_update(p.partition for p in parts)

    group = f"g-{topic}"
    a = make_consumer(kafka, group, **{"auto.offset.reset": "earliest", "enable.auto.commit": False})
    b = make_consumer(kafka, group, **{"auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        a.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

        def assigned_all() -> bool:
            a.consume(10, 0.2)  # the group assigns inside consume()
            return len(assignment) == RAW_PARTITIONS

        wait_for(assigned_all, 30, "the assignment")
        # one record per partition, each 5 s of event time past the one before: all but the first are held back
        parts = list(range(RAW_PARTITIONS))
        ext = Extracted([f"k{p}" for p in parts], [T0 + 5_000 * p for p in parts], [None] * len(parts),
                        [b"{}"] * len(parts), parts, [0] * len(parts))  # fmt: skip
        align.admit(a, ext, set(assignment))
        assert align.paused == set(parts[1:])
        b.subscribe([topic])
        got: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a's turns after the rebalance: nothing held, nothing paused: idle
            for m in a.consume(500, 0.2):
                got[m.partition()] = got.get(m.partition(), 0) + 1
            b.consume(500, 0.05)
            align.idle(a, set(assignment))
            if 0 < len(assignment) < RAW_PARTITIONS and all(got.get(p, 0) >= 400 for p in assignment):
                break
        assert 0 < len(assignment) < RAW_PARTITIONS, assignment
        assert assignment & set(parts[1:])  # a partition it had paused came back to it ...
        # ... and delivered all its records (one read before the rebalance too is read again: no commits here)
        assert all(got.get(p, 0) >= 400 for p in assignment), (assignment, got)
    finally:
        a.close()
        b.close()
