"""Cooperative Dalton over the embedded broker: three routers, one control topic (Fig. 13 / 15 setup).

Three partitioners, each with its own Kafka transport (producer + broadcast reader of the control topic)
and the wall clock as protocol clock: router ``w0`` is fed uniform keys, ``w1`` and ``w2`` Zipf 1.5 with
different hot sets. Routing itself is not under test, so the test feeds the partitioners directly (one
thread, paced so that one slide of 1000 tuples takes 100 ms and DSYNC = 100 ms) and pumps the transports
between batches. Compared on the combined per-window load (1000-tuple windows, after warm-up): one Dalton
fed the merged stream, and the same three routers never syncing. Then the reducer (w0, the lowest id)
is killed without a word, and the rounds must go on under w1.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from benchmarks.workloads import zipf_probabilities
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from router.choose.measure import window_metrics
from router.partitioners.dalton import DaltonPartitioner
from router.sync import DirectPort, DsyncPolicy, NodeConfig, SyncNode
from router.sync.kafka import KafkaSyncTransport
from schemas.settings import KafkaSettings

pytestmark = pytest.mark.kafka

N, KEYS, BATCH, SLIDE = 8, 10_000, 250, 1000
STEPS, KILL_STEPS = 160, 40  # 40k tuples per router, then 10k more per survivor
STEP_S = 0.075  # 3 x 250 tuples per step: one slide per 100 ms
DSYNC_MS = 100


def streams(steps: int, seed: int = 0) -> list[list[np.ndarray]]:
    """Per router, ``steps`` batches: uniform, Zipf 1.5 (hot set A), Zipf 1.5 (hot set B)."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(zipf_probabilities(KEYS, 1.5))
    perms = [rng.permutation(KEYS), rng.permutation(KEYS)]
    out: list[list[np.ndarray]] = [[], [], []]
    for _ in range(steps):
        out[0].append(rng.integers(0, KEYS, BATCH))
        for j in (1, 2):
            ranks = np.minimum(np.searchsorted(cdf, rng.random(BATCH), side="right"), KEYS - 1)
            out[j].append(perms[j - 1][ranks])
    return out


def dalton(seed: int) -> DaltonPartitioner:
    return DaltonPartitioner(N, window=60_000, slide=SLIDE, seed=seed, placement="bandit", tail="hash")  # the paper's


class RecordingPort(DirectPort):
    """A direct port that remembers each applied round's rows of the global hot keys."""

    def __init__(self, partitioner: DaltonPartitioner, next_time: list[int]) -> None:
        # the stream's time runs at 1000 tuples per 100 ms of the wall clock (the protocol's)
        super().__init__(partitioner, clock=lambda: float(next_time[0]), window_per_clock=SLIDE / DSYNC_MS)
        self.next_time = next_time  # when this router's next batch starts
        self.rounds: dict[int, dict[int, list[float]]] = {}  # rows after the replay of buffered rewards
        self.messages: dict[int, dict[str, Any]] = {}
        self.node: SyncNode | None = None

    def apply(self, message: dict[str, Any], dsync: float, members: int = 2, period: float = 0.0) -> None:
        super().apply(message, dsync, members, period)
        assert self.node is not None and self.node.client.last_round >= 0
        rows = self.partitioner.qtable.rows
        assert all(k in rows for k in message["hot"])  # every global hot key is hot here
        self.rounds[self.node.client.last_round] = {k: list(rows[k].q) for k in message["hot"]}
        self.messages[self.node.client.last_round] = message


def imbalance(keys: list[np.ndarray], times: list[np.ndarray], out: list[np.ndarray], skip: int) -> dict[str, float]:
    """Per-window means after warm-up; ``cold_splits``: extra partials per window of globally cold keys.

    Globally cold: a share of the merged stream below half the hot threshold ``1 / n`` (the two Zipf
    sources' top keys have ~12.7% each and are hot; their second keys, ~4.5%, are cold).
    """
    k, t, a = np.concatenate(keys), np.concatenate(times), np.concatenate(out)
    w = window_metrics(k, a, t // SLIDE, SLIDE, N, 4, 1.0)
    win = t // SLIDE
    _, inv, counts = np.unique(k, return_inverse=True, return_counts=True)
    cold = (counts / k.size < 1 / (2 * N))[inv.reshape(-1)]
    late = win >= skip
    pairs = np.unique(np.stack([win[cold & late], k[cold & late], a[cold & late]]), axis=1)
    keys_w = np.unique(pairs[:2], axis=1).shape[1]
    return {
        "ratio": float(np.mean(w.ratio[skip:])),
        "imbalance": float(np.mean(w.imbalance[skip:])),
        "replication": float(np.mean(w.replication[skip:])),
        "cold_splits": (pairs.shape[1] - keys_w) / max(1, len(w.ratio) - skip),
    }


def run_offline(data: list[list[np.ndarray]], single: bool) -> tuple[list[np.ndarray], list[np.ndarray]]:
    parts = [dalton(0)] if single else [dalton(i) for i in range(3)]
    outs, times, clock = [], [], 0
    for step in range(STEPS):
        for i in range(3):
            ts = np.arange(clock, clock + BATCH)
            outs.append(parts[0 if single else i].assign(data[i][step], ts))
            times.append(ts)
            clock += BATCH
    return outs, times


def test_three_routers_converge_over_kafka_and_survive_a_dead_reducer(kafka: KafkaSettings, topic: str) -> None:
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 1)])
    names = ["w0-uniform", "w1-zipf", "w2-zipf"]
    parts = [dalton(i) for i in range(3)]
    ports = [RecordingPort(p, [0]) for p in parts]
    nodes = []
    for name, port in zip(names, ports, strict=True):
        cfg = NodeConfig(deployment="itest", route="words", instance=name, combiners=N, dsync=DSYNC_MS,
                         policy=DsyncPolicy(DSYNC_MS, 16 * DSYNC_MS), liveness_floor=1_000,
                         stale_before=time.time() * 1000)  # fmt: skip
        node = SyncNode(port, cfg)
        port.node = node
        nodes.append(node)
    transports = [KafkaSyncTransport(kafka, topic, [node]).open() for node in nodes]
    try:
        _run(transports, nodes, ports, parts)
    finally:
        for t in transports:
            t.close()


def _run(transports: list[KafkaSyncTransport], nodes: list[SyncNode], ports: list[RecordingPort],
         parts: list[DaltonPartitioner]) -> None:  # fmt: skip
    data = streams(STEPS + KILL_STEPS)
    clock = [0]  # the merged stream's next tuple time
    keys: list[np.ndarray] = []
    times: list[np.ndarray] = []
    outs: list[np.ndarray] = []
    t_start = time.monotonic()
    killed_at: float | None = None
    for step in range(STEPS + KILL_STEPS):
        if step == STEPS:  # the reducer dies: no leaving message, its clients just go away
            transports[0].close()
            killed_at = time.time() * 1000
        alive = range(3) if step < STEPS else range(1, 3)
        for i in alive:
            ts = np.arange(clock[0], clock[0] + BATCH)
            ports[i].next_time[0] = clock[0] + len(alive) * BATCH
            batch = data[i][step]
            out = parts[i].assign(batch, ts)
            if step < STEPS:
                keys.append(batch)
                times.append(ts)
                outs.append(out)
            clock[0] += BATCH
            transports[i].pump(0.0)
        deadline = t_start + (step + 1) * STEP_S
        while time.monotonic() < deadline:  # the transports' threads would do this: keep reading
            for i in alive:
                transports[i].pump(0.002)
    for t in transports[1:]:
        t.pump(0.2)
    elapsed = time.monotonic() - t_start

    # -- synced vs one Dalton on the merged stream vs never syncing ------------------------------------
    skip = STEPS * 3 * BATCH // SLIDE // 4  # warm-up: the first quarter of the windows
    synced = imbalance(keys, times, outs, skip)
    single = imbalance(keys, times, run_offline(data, True)[0], skip)
    never = imbalance(keys, times, run_offline(data, False)[0], skip)

    # -- the routers agree on the global hot keys and their rows ------------------------------------
    common = sorted(set(ports[0].rounds) & set(ports[1].rounds) & set(ports[2].rounds))
    late = [r for r in common if r >= common[len(common) // 4]]
    diffs = []
    for r in late:
        assert ports[0].messages[r] == ports[1].messages[r] == ports[2].messages[r]  # one global policy
        views = [p.rounds[r] for p in ports]
        assert views[0].keys() == views[1].keys() == views[2].keys()
        for k in views[0]:
            for v in views[1:]:
                diffs.append(max(abs(a - b) for a, b in zip(views[0][k], v[k], strict=True)))
    hot_rounds = sum(1 for r in late if ports[0].rounds[r])

    # -- the reducer's death does not stall the rounds -------------------------------------------------
    rounds = nodes[1].stats.leaders
    assert killed_at is not None
    by_w1 = [g for g in [nodes[1].last_global, nodes[2].last_global] if g is not None]
    takeover = [t for t, leader in rounds if leader == "w1-zipf" and t >= killed_at]
    sent = {k: sum(t.sent[k] for t in transports) for k in ("sync", "global")}
    sent_bytes = sum(sum(t.sent_bytes.values()) for t in transports)
    print(
        f"\nsynced {synced}\nsingle {single}\nnever  {never}\n"
        f"rounds applied by all: {len(common)}, with hot keys: {hot_rounds}/{len(late)}, "
        f"row difference after replay p50 {np.median(diffs):.3f} p90 {np.percentile(diffs, 90):.3f}; "
        f"run {elapsed:.1f} s; "
        f"messages {sent}, {sent_bytes / elapsed:.0f} B/s, {sum(sent.values()) / elapsed:.1f} msg/s; "
        f"latency p50 {np.median(nodes[1].stats.latencies):.0f} ms; dsync {nodes[1].dsync:.0f} ms; "
        f"takeover after {(takeover[0] - killed_at) if takeover else float('nan'):.0f} ms; "
        f"last rounds {[g.round for g in by_w1]} by {[g.reducer for g in by_w1]}"
    )
    assert len(common) >= 0.5 * STEPS * STEP_S * 1000 / (4 * DSYNC_MS)  # rounds keep coming
    assert hot_rounds >= 0.5 * len(late) and np.median(diffs) < 0.1 and np.percentile(diffs, 90) < 0.5
    assert synced["ratio"] <= 1.10 * single["ratio"]  # within 10% of one Dalton on the merged stream
    assert never["cold_splits"] > 2 * synced["cold_splits"] + 1  # never syncing splits globally cold keys
    assert never["replication"] > synced["replication"]
    assert takeover and takeover[0] - killed_at < 1_000 + 4 * nodes[1].dsync + 500
    assert all(g.reducer == "w1-zipf" for g in by_w1)
    assert nodes[1].last_global is not None and nodes[1].last_global.members == ["w1-zipf", "w2-zipf"]
    assert nodes[1].last_global.sent_ms > killed_at + 1_000
