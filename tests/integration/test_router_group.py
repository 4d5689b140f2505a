"""Two workers of one deployment share the raw partitions, rebalance, and together deliver everything once."""

from __future__ import annotations

import pytest

from connectors.admin import ensure_route_topics
from router.dataplane import RouteDataPlane
from router.observability import RouterMetrics
from schemas.settings import KafkaSettings
from tests.integration.router_support import (
    committed,
    end_offsets,
    multiset_in,
    multiset_out,
    produce,
    routed,
    settings,
    wait_for,
    zipf_records,
)

pytestmark = pytest.mark.kafka


@pytest.mark.both_brokers
def test_two_workers_share_partitions_and_deliver_everything(kafka: KafkaSettings, topic: str) -> None:
    first, second = zipf_records(4000, seed=1), zipf_records(4000, seed=2, start=4000)
    s = settings(kafka, topic, f"app-{topic}", partitioner={"name": "pkg"})
    route = s.routes[0]
    ensure_route_topics(s.kafka, route)
    produce(kafka, topic, first)

    def plane(instance: str) -> RouteDataPlane:
        return RouteDataPlane(s.kafka, s.router, route, RouterMetrics(instance), instance_id=instance).start()

    a = plane("a")
    wait_for(lambda: a.stats.consumed >= len(first), 30, "worker a to route the first half")
    b = plane("b")  # joins the group: the raw partitions are split between a and b
    try:
        wait_for(lambda: a.assignment and b.assignment and not a.assignment & b.assignment, 30, "a rebalance")
        assert a.assignment | b.assignment == {0, 1, 2, 3}
        produce(kafka, topic, second)
        total = len(first) + len(second)
        wait_for(lambda: a.stats.consumed + b.stats.consumed >= total, 30, "both halves")
    finally:
        a.stop()
        b.stop()
        assert a.join(30) and b.join(30)
    assert a.error is None and b.error is None
    assert b.stats.consumed > 0 and a.stats.consumed > len(first)  # both routed part of the second half

    out = routed(kafka, route.combiner_topic_name, expected=total)
    assert multiset_out(out) == multiset_in(first + second)  # every record exactly once
    assert all(rec.partition == d["c"] for rec, d in out)
    assert committed(kafka, a.group_id, topic) == end_offsets(total)
