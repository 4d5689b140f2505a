"""Sync overhead over a real broker: P routers, each with its own transport, for a few seconds.

Each router is a Dalton partitioner fed its own stream (router 0 uniform, the others Zipf 1.5 with their
own hot sets) at a fixed pace, its :class:`~router.sync.kafka.KafkaSyncTransport` pumped on the same
thread between batches (the worker's transport thread does the same). Measures control messages and
bytes per second, rounds, the SYNC -> GLOBAL latency and the DSYNC the routers end with.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np

from benchmarks.workloads import zipf_probabilities
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from router.partitioners import create
from router.sync.kafka import KafkaSyncTransport, wall_ms
from router.sync.node import NodeConfig, SyncNode
from router.sync.port import DirectPort, as_syncable
from router.sync.reducer import DsyncPolicy
from schemas.settings import KafkaSettings

__all__ = ["kafka_overhead"]


def kafka_overhead(
    kafka: KafkaSettings,
    *,
    routers: int = 3,
    seconds: float = 10.0,
    dsync_ms: int = 100,
    n: int = 8,
    rate: float = 10_000.0,
    batch: int = 250,
    keys: int = 10_000,
) -> dict[str, Any]:
    """Run ``routers`` synced Dalton routers for ``seconds`` over ``kafka`` (a fresh control topic)."""
    topic = f"skewroute-sync-overhead-{uuid.uuid4().hex[:8]}"
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 1)])
    rng = np.random.default_rng(0)
    cdf = np.cumsum(zipf_probabilities(keys, 1.5))
    perms = [rng.permutation(keys) for _ in range(routers)]
    parts = [
        create("dalton", n, window=60_000, slide=1_000, seed=i, placement="bandit", tail="hash") for i in range(routers)
    ]
    nodes = [
        SyncNode(
            DirectPort(as_syncable(p)),
            NodeConfig(
                deployment="overhead",
                route="r",
                instance=f"w{i:02d}",
                combiners=n,
                dsync=dsync_ms,
                policy=DsyncPolicy(dsync_ms, 16 * dsync_ms),
                liveness_floor=1_000,
                stale_before=wall_ms(),
                measure_compute=True,
            ),  # fmt: skip
        )
        for i, p in enumerate(parts)
    ]
    transports = [KafkaSyncTransport(kafka, topic, [node]).open() for node in nodes]
    step_s = batch * routers / rate
    clock = 0
    t0 = time.monotonic()
    try:
        step = 0
        while time.monotonic() - t0 < seconds:
            for i, p in enumerate(parts):
                if i == 0:
                    batch_keys = rng.integers(0, keys, batch)
                else:
                    batch_keys = perms[i][np.minimum(np.searchsorted(cdf, rng.random(batch)), keys - 1)]
                p.assign(batch_keys, np.arange(clock, clock + batch))
                clock += batch
                transports[i].pump(0.0)
            step += 1
            while time.monotonic() < t0 + step * step_s:
                for t in transports:
                    t.pump(0.002)
        elapsed = time.monotonic() - t0
    finally:
        for t in transports:
            t.stop()
    sent = sum(sum(t.sent.values()) for t in transports)
    sent_bytes = sum(sum(t.sent_bytes.values()) for t in transports)
    lat = [x for node in nodes for x in node.stats.latencies]
    return {
        "routers": routers,
        "dsync_ms": dsync_ms,
        "seconds": elapsed,
        "tuples": clock,
        "msgs_per_s": sent / elapsed,
        "bytes_per_s": sent_bytes / elapsed,
        "sync_bytes_mean": _mean_size(transports, "sync"),
        "global_bytes_mean": _mean_size(transports, "global"),
        "rounds": max(node.reducer.round for node in nodes) + 1,
        "latency_p50_ms": float(np.median(lat)) if lat else float("nan"),
        "latency_p95_ms": float(np.percentile(lat, 95)) if lat else float("nan"),
        "dsync_end_ms": nodes[-1].dsync,
    }


def _mean_size(transports: list[KafkaSyncTransport], kind: str) -> float:
    return sum(t.sent_bytes[kind] for t in transports) / max(1, sum(t.sent[kind] for t in transports))
