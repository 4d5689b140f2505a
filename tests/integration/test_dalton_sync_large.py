"""Cooperative Dalton over the embedded broker at n = 256, and a sync transport that fails and restarts.

n = 256: three routers whose Q-tables hold a few hundred hot keys. A full-precision SYNC of such a table
is about 1.8 MB of JSON (the producer refuses anything over 1,000,000 B); compressed, with 6 decimals,
it is ~300 KB, and :func:`~schemas.control.fit_message` would cut rows of least weight before going over
``control_max_bytes``. The rounds must go on with no transport error and every message under the limit.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from router.partitioners.dalton import DaltonPartitioner
from router.sync import DirectPort, DsyncPolicy, NodeConfig, SyncNode
from router.sync.client import sync_from_payload
from router.sync.kafka import KafkaSyncTransport
from router.sync.metrics import register_sync_metrics
from schemas.control import DEFAULT_MAX_BYTES, encode_control
from schemas.settings import KafkaSettings

pytestmark = pytest.mark.kafka

DSYNC_MS = 250


def _warm(n: int, windows: int, seed: int = 0) -> DaltonPartitioner:
    """A partitioner whose Q-table holds rows of ~200 hot keys per window, the hot set drifting."""
    p = DaltonPartitioner(n, window=10_000, slide=1_000, placement="bandit", tail="hash", seed=seed)
    rng = np.random.default_rng(seed)
    for w in range(windows):
        for b in range(2):
            p.assign(rng.integers(w * 150, w * 150 + 200, 4_000), np.full(4_000, float(w * 1000 + b * 500)))
    return p


class CountingPort(DirectPort):
    """Remembers the round size of every GLOBAL applied."""

    def __init__(self, partitioner: DaltonPartitioner) -> None:
        super().__init__(partitioner, window_per_clock=None)
        self.sizes: list[int] = []

    def apply(self, message: dict[str, Any], dsync: float, members: int = 2, period: float = 0.0) -> None:
        super().apply(message, dsync, members, period)
        self.sizes.append(members)


def _nodes(parts: list[DaltonPartitioner], n: int) -> list[SyncNode]:
    start = time.time() * 1000
    return [
        SyncNode(
            CountingPort(p),
            NodeConfig(
                deployment="big",
                route="r",
                instance=f"w{i}",
                combiners=n,
                dsync=DSYNC_MS,
                policy=DsyncPolicy(DSYNC_MS, 8 * DSYNC_MS),
                liveness_floor=2_000,
                stale_before=start,
                fingerprint="fp",
            ),  # fmt: skip
        )
        for i, p in enumerate(parts)
    ]


@pytest.mark.slow
def test_n256_syncs_over_the_broker(kafka: KafkaSettings, topic: str) -> None:
    n = 256
    base = _warm(n, 4)
    full = sync_from_payload(copy.deepcopy(base).sync_payload(), deployment="big", route="r", instance="x", seq=0,
                             combiners=n, sent_ms=0)  # fmt: skip
    old = len(
        orjson.dumps({**full.model_dump(), "q_table": {k: [x + 1e-13 for x in r] for k, r in full.q_table.items()}})
    )
    now = len(encode_control(full))
    assert len(full.q_table) >= 250 and old > 1_000_000 and 100_000 < now < DEFAULT_MAX_BYTES
    parts = [copy.deepcopy(base) for _ in range(3)]
    nodes = _nodes(parts, n)
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 1)])
    transports = [KafkaSyncTransport(kafka, topic, [node], poll_s=0.01) for node in nodes]
    try:  # each worker's sync on its own thread, as in a router worker (the partitioners are idle)
        for t in transports:
            t.start()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and min(nd.stats.globals_applied for nd in nodes) < 10:
            time.sleep(0.1)
    finally:
        for t in transports:
            t.stop()
    sizes = [nd.port.sizes for nd in nodes]  # type: ignore[attr-defined]
    print(f"\nn=256: first SYNC {now:,} B (full-precision JSON {old:,} B, {len(full.q_table)} rows); "
          f"GLOBALs applied {[nd.stats.globals_applied for nd in nodes]}, "
          f"SYNCs {[t.sent['sync'] for t in transports]}, SYNC bytes {[t.sent_bytes['sync'] for t in transports]}, "
          f"rows cut {[nd.stats.rows_cut for nd in nodes]}, errors {[t.errors for t in transports]}, "
          f"ignored {[dict(nd.stats.ignored) for nd in nodes]}, round sizes {sizes}")  # fmt: skip
    assert all(t.errors == 0 and t.restarts == 0 for t in transports)
    assert all(nd.stats.globals_applied >= 10 for nd in nodes)
    assert all(nd.stats.ignored["malformed"] == 0 for nd in nodes)
    assert all(s.count(3) >= 5 for s in sizes), sizes  # rounds with all three


def test_a_failing_transport_is_counted_logged_and_restarted(kafka: KafkaSettings, topic: str) -> None:
    parts = [_warm(8, 1, seed=i) for i in range(2)]
    nodes = _nodes(parts, 8)
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 1)])
    transports = [KafkaSyncTransport(kafka, topic, [node], poll_s=0.01) for node in nodes]
    registry = CollectorRegistry()
    register_sync_metrics(registry, lambda: transports[1])
    broken = {"left": 3}
    tick = nodes[1].tick

    def flaky(now: float) -> list:  # type: ignore[type-arg]
        if broken["left"] > 0:
            broken["left"] -= 1
            raise RuntimeError("injected sync failure")
        return tick(now)

    nodes[1].tick = flaky  # type: ignore[method-assign]
    try:
        for t in transports:
            t.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and nodes[1].stats.globals_applied < 5:
            time.sleep(0.1)
        metrics = generate_latest(registry).decode()
    finally:
        for t in transports:
            t.stop()
    assert transports[1].restarts == 3 and "injected sync failure" in (transports[1].last_error or "")
    assert nodes[1].stats.globals_applied >= 5  # restarted: the rounds go on
    assert "skewroute_sync_transport_restarts_total 3.0" in metrics
    assert 'skewroute_sync_round_size{route="r"}' in metrics, metrics
    assert 'skewroute_sync_members{route="r"}' in metrics and "skewroute_sync_pending" in metrics
    assert "skewroute_sync_last_global_age_seconds" in metrics
