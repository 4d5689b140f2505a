"""The sync service on real router data planes, and a worker joining a running sync group."""

from __future__ import annotations

import time

import pytest

from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_route_topics, ensure_topics
from connectors.kafka import make_admin
from router.dataplane import RouteDataPlane
from router.observability import RouterMetrics
from router.partitioners.dalton import DaltonPartitioner
from router.sync import DirectPort, DsyncPolicy, NodeConfig, SyncNode
from router.sync.kafka import KafkaSyncTransport, wall_ms
from router.sync.service import PlanePort, start_sync
from schemas.control import SyncMessage, parse_control
from schemas.settings import KafkaSettings
from tests.integration.router_support import produce, settings, wait_for, zipf_records

pytestmark = pytest.mark.kafka


@pytest.mark.both_brokers
def test_two_workers_sync_their_dalton_routes(kafka: KafkaSettings, topic: str, broker_kind: str) -> None:
    records = zipf_records(40_000, seed=3)
    produce(kafka, topic, records)
    s = settings(kafka, topic, f"app-{topic}", partitioner={"name": "dalton", "placement": "bandit", "tail": "hash"},
                 router={"dsync_ms": 400, "control_topic": f"{topic}.control"})  # fmt: skip
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
        nodes = [t.nodes[s.routes[0].route_name] for t in transports]
        assert all(isinstance(n.port, PlanePort) for n in nodes)
        # control_fetch_wait_ms auto: a short fetch wait only where the broker holds a fetch to its end (Tansu)
        assert {t.fetch_wait_ms for t in transports} == {50 if broker_kind == "tansu" else 500}
        wait_for(lambda: sum(p.stats.consumed for p in planes) >= len(records), 60, "all records routed")
        # a GLOBAL with the hot keys follows the records by a round or two (not there at once on a loaded host)
        wait_for(lambda: all(n.stats.globals_applied >= 5 and n.stats.hot_seen for n in nodes), 20, "hot rounds")
        g = [n.last_global for n in nodes]
        assert g[0] is not None and g[1] is not None
        assert {g[0].reducer, g[1].reducer} == {"w1"}  # the lowest id reduces
        assert set(g[0].members) <= {"w1", "w2"}
        assert nodes[0].stats.hot_seen and nodes[0].stats.hot_seen == nodes[1].stats.hot_seen
        # every record routed, so the rounds carry none: DSYNC is back to router.dsync_ms or above (a router that
        # asks doubles it), not at an idle reducer's floor of a quarter of it
        wait_for(lambda: all(n.last_global is not None and n.last_global.global_load == 0 for n in nodes), 20, "idle")
        time.sleep(2)  # idle rounds
        assert all(n.last_global is not None and n.last_global.global_load == 0 for n in nodes)
        assert all(n.dsync >= 400 for n in nodes), [n.dsync for n in nodes]
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


def test_late_joiner_learns_the_rounds_from_history_and_takes_over(kafka: KafkaSettings, topic: str) -> None:
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 1)])

    def transport(name: str) -> KafkaSyncTransport:
        cfg = NodeConfig(deployment="late", route="r", instance=name, combiners=4, dsync=100,
                         policy=DsyncPolicy(100, 1600), liveness_floor=1_000, stale_before=wall_ms())  # fmt: skip
        return KafkaSyncTransport(
            kafka,
            topic,
            [SyncNode(DirectPort(DaltonPartitioner(4, window=60_000, slide=1_000, placement="bandit")), cfg)],
            poll_s=0.005,
        )

    early = [transport("w5").start(), transport("w7").start()]
    late: KafkaSyncTransport | None = None
    try:
        wait_for(lambda: early[0].nodes["r"].reducer.round >= 10, 20, "rounds by w5")
        joined = wall_ms()
        late = transport("w0").start()  # the lowest id: it becomes the reducer once its SYNCs are seen
        node = late.nodes["r"]
        wait_for(lambda: node.stats.globals_applied >= 30, 20, "rounds applied by the late joiner")
        rounds = early[1].nodes["r"].stats.rounds
        after = [x for x in rounds if x[0] > joined + 2_000]
        assert after and {red for *_, red in after} == {"w0"}
        numbers = [r for _, r, _ in rounds]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # no restart, no duplicate
        assert node.client.stale_before >= joined - 1 and node.last_global is not None
        assert node.last_global.sent_ms >= joined and node.last_global.members == ["w0", "w5", "w7"]
    finally:
        for t in [*early, *([late] if late else [])]:
            t.stop()
