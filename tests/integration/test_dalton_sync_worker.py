"""The sync service on real router data planes: two workers of one deployment share a raw topic."""

from __future__ import annotations

import pytest

from connectors.admin import ensure_route_topics
from connectors.topic_reader import read_topic
from router.dataplane import RouteDataPlane
from router.observability import RouterMetrics
from router.sync.service import PlanePort, start_sync
from schemas.control import SyncMessage, parse_control
from schemas.settings import KafkaSettings
from tests.integration.router_support import produce, settings, wait_for, zipf_records

pytestmark = pytest.mark.kafka


def test_two_workers_sync_their_dalton_routes(kafka: KafkaSettings, topic: str) -> None:
    records = zipf_records(40_000, seed=3)
    produce(kafka, topic, records)
    s = settings(kafka, topic, f"app-{topic}", partitioner={"name": "dalton", "tail": "hash"},
                 router={"dsync_ms": 100, "control_topic": f"{topic}.control"})  # fmt: skip
    ensure_route_topics(s.kafka, s.routes[0])
    planes = [
        RouteDataPlane(s.kafka, s.router, s.routes[0], RouterMetrics(w), instance_id=w).start() for w in ("w1", "w2")
    ]
    transports = []
    try:
        for w, plane in zip(("w1", "w2"), planes, strict=True):
            t = start_sync(s.kafka, s.router, w, {s.routes[0].route_name: plane})
            assert t is not None
            transports.append(t)
        nodes = [p.sync for p in planes]
        assert all(isinstance(n.port, PlanePort) for n in nodes)
        wait_for(lambda: sum(p.stats.consumed for p in planes) >= len(records), 60, "all records routed")
        wait_for(lambda: all(n.stats.globals_applied >= 5 for n in nodes), 20, "rounds applied by both")
        g = [n.last_global for n in nodes]
        assert g[0] is not None and g[1] is not None
        assert {g[0].reducer, g[1].reducer} == {"w1"}  # the lowest id reduces
        assert set(g[0].members) <= {"w1", "w2"}
        assert nodes[0].stats.hot_seen and nodes[0].stats.hot_seen == nodes[1].stats.hot_seen
        assert all(p.error is None for p in planes)
        assert all(t.failed is None for t in transports)
    finally:
        for t in transports:
            t.stop()
        for p in planes:
            p.stop()
        for p in planes:
            assert p.join(30)
    # the leaving SYNCs were published: a fresh reader of the control topic sees both
    msgs = [parse_control(r.value) for r in read_topic(kafka, f"{topic}.control", idle_s=1.0)]
    leaving = {m.instance for m in msgs if isinstance(m, SyncMessage) and m.leaving}
    assert leaving == {"w1", "w2"}
