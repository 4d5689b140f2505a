"""Sync rounds under clock skew, dead members and long runs: real Dalton partitioners, simulated clocks.

Each node's clock is the shared simulated time plus its own offset (0, 300 ms, 2 x DSYNC): every node
sends its SYNCs on the grid of its own clock, and every time it hands to the protocol is its own. The
control topic is an ordered in-memory log delivered to every node (its own messages included), like the
Kafka transport. Ten minutes of rounds are simulated in a few seconds (no sleeping).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from router.partitioners.dalton import DaltonPartitioner
from router.partitioners.dalton.sync import MAX_BUFFER
from router.sync import DirectPort, NodeConfig, SyncNode
from router.sync.node import HISTORY, ControlOut
from router.sync.reducer import DsyncPolicy
from schemas.control import encode_control

N = 8
DSYNC = 1_000.0


@dataclass
class Trace:
    """Per simulated minute: GLOBALs applied by node 0, and the largest buffers seen."""

    globals_per_min: list[int] = field(default_factory=list)
    reward_buffer: list[int] = field(default_factory=list)  # max over the nodes' partitioners
    pending: list[int] = field(default_factory=list)  # max over the nodes' reducers
    members: list[int] = field(default_factory=list)


class SkewedCluster:
    """Nodes whose clocks differ by ``offsets``; one ordered control log; a Zipf stream per router."""

    def __init__(
        self,
        offsets: Sequence[float],
        *,
        seed: int = 7,
        policy: DsyncPolicy | None = None,
        loop_ms: Sequence[float] | None = None,
    ) -> None:
        self.offsets = list(offsets)
        # a node whose loop runs only every loop_ms[i] (a loaded worker): between its turns, messages wait
        self.loop_ms = list(loop_ms) if loop_ms is not None else [0.0] * len(offsets)
        self.inbox: list[list[bytes]] = [[] for _ in offsets]
        self._turn = [0.0] * len(offsets)  # a slow node's next turn
        self.parts = [
            DaltonPartitioner(N, window=10_000, slide=1_000, seed=i, placement="bandit") for i in range(len(offsets))
        ]
        self.t = 0.0
        self.nodes = [
            SyncNode(
                DirectPort(p, clock=lambda: self.t),
                NodeConfig(
                    deployment="d",
                    route="r",
                    instance=f"w{i}",
                    combiners=N,
                    dsync=DSYNC,
                    policy=policy or DsyncPolicy(DSYNC, 16 * DSYNC),
                    liveness_floor=2_000,
                ),
            )
            for i, p in enumerate(self.parts)
        ]
        self.dead: set[int] = set()
        self.rng = np.random.default_rng(seed)
        self.bytes = 0

    def now(self, i: int) -> float:
        return self.t + self.offsets[i]

    def _active(self, i: int) -> bool:
        return i not in self.dead and (self.loop_ms[i] <= 0 or self.t >= self._turn[i])

    def deliver(self, queue: list[ControlOut]) -> None:
        while queue:
            raw = encode_control(queue.pop(0))
            self.bytes += len(raw)
            for i, node in enumerate(self.nodes):
                if self._active(i):
                    queue.extend(node.receive_raw(raw, self.now(i)))
                elif i not in self.dead:
                    self.inbox[i].append(raw)  # read at its next turn

    def step(self, t: float, tuples: int = 80) -> None:
        self.t = t
        for i, part in enumerate(self.parts):
            if i not in self.dead:
                keys = self.rng.zipf(1.4, tuples) % 5_000
                part.assign(keys, np.full(tuples, t))
        queue: list[ControlOut] = []
        for i, node in enumerate(self.nodes):
            if not self._active(i):
                continue
            for raw in self.inbox[i]:
                queue.extend(node.receive_raw(raw, self.now(i)))
            self.inbox[i].clear()
            queue.extend(node.tick(self.now(i)))
        self.deliver(queue)
        for i, every in enumerate(self.loop_ms):
            if every > 0 and t >= self._turn[i]:
                self._turn[i] = t + every

    def run(self, minutes: float, step: float = 200.0) -> Trace:
        trace = Trace()
        start = self.t
        per_min = int(60_000 / step)
        for m in range(int(minutes)):
            before = self.nodes[0].stats.globals_applied
            buf = pend = mem = 0
            for k in range(per_min):
                self.step(start + (m * per_min + k + 1) * step)
                live = [i for i in range(len(self.nodes)) if i not in self.dead]
                buf = max(buf, *(len(self.parts[i].buffer) for i in live))
                pend = max(pend, *(self.nodes[i].reducer.pending_syncs() for i in live))
                mem = max(mem, *(len(self.nodes[i].membership.last_seen) for i in live))
            trace.globals_per_min.append(self.nodes[0].stats.globals_applied - before)
            trace.reward_buffer.append(buf)
            trace.pending.append(pend)
            trace.members.append(mem)
        return trace


def _flat(series: list[int], slack: int) -> bool:
    """No growth: the second half never exceeds the first half's maximum by more than ``slack``."""
    half = len(series) // 2
    return max(series[half:]) <= max(series[:half]) + slack


@pytest.mark.extended
def test_clock_skew_changes_neither_the_global_rate_nor_the_buffers() -> None:
    """0, 300 ms and 2 x DSYNC apart: GLOBAL rate within 20% of the no-skew run; 10 simulated minutes flat.

    Three workers, the second ``skew`` ahead and the third ``skew`` behind the first (so the largest
    difference is 2 x skew). About a minute of CPU: ``-m extended``; test_skew_short_run is its
    default-run version.
    """
    traces = {skew: SkewedCluster([0.0, skew, -skew]).run(10) for skew in (0.0, 300.0, 2 * DSYNC)}
    base = sum(traces[0.0].globals_per_min)
    assert base >= 0.8 * 600 * 1000 / DSYNC / 2  # rounds happen (at least one per 2 x DSYNC)
    for skew, tr in traces.items():
        rate = sum(tr.globals_per_min)
        assert abs(rate - base) <= 0.2 * base, f"skew {skew}: {rate} GLOBALs vs {base} without skew"
        assert min(tr.globals_per_min[1:]) > 0, f"skew {skew}: a minute without rounds {tr.globals_per_min}"
        assert _flat(tr.reward_buffer, 50) and max(tr.reward_buffer) < MAX_BUFFER, (skew, tr.reward_buffer)
        assert _flat(tr.pending, 2) and max(tr.pending) <= 3 * 8, (skew, tr.pending)
        assert max(tr.members) == 3


@pytest.mark.extended
@pytest.mark.parametrize("step", [20.0, 200.0])
def test_clock_skew_with_the_workers_adaptive_dsync(step: float) -> None:
    """The workers' policy (DSYNC may halve to DSYNC / 4 = 250 ms): 0, 240, 300 ms, 2 x DSYNC apart, 3 minutes.

    ``step``: how often every worker's loop runs (the transport pumps every 20 ms; a loaded worker can stall
    for 200 ms). With each member's SYNCs on its own clock's grid, the members were out of phase by their
    skew modulo DSYNC; in 1 minute: 200 ms loops, 300 ms apart: 82 GLOBALs against 233 without skew; 20 ms
    loops, 240 ms apart (phases 0, 240 and 10 ms of a 250 ms DSYNC): 175 against 233. On the reducer's grid
    the rates match (233-234).
    """
    policy = DsyncPolicy.around(DSYNC)
    rates = {}
    for skew in (0.0, 240.0, 300.0, 2 * DSYNC):
        c = SkewedCluster([0.0, skew, -skew], policy=policy)
        tr = c.run(3, step=step)
        rates[skew] = sum(tr.globals_per_min)
        assert _flat(tr.reward_buffer, 150) and max(tr.pending) <= 3 * 8, (skew, tr)
    assert all(abs(r - rates[0.0]) <= 0.2 * rates[0.0] for r in rates.values()), rates


@pytest.mark.extended
def test_clock_skew_with_one_loaded_worker() -> None:
    """One worker's loop runs every 200 ms, the others' every 50 ms; 0, 300 ms, 2 x DSYNC apart, 3 minutes."""
    policy = DsyncPolicy.around(DSYNC)
    rates = {}
    for skew in (0.0, 300.0, 2 * DSYNC):
        tr = SkewedCluster([0.0, skew, -skew], policy=policy, loop_ms=[0.0, 200.0, 0.0]).run(3, step=50.0)
        rates[skew] = sum(tr.globals_per_min)
        assert _flat(tr.reward_buffer, 150) and max(tr.pending) <= 3 * 8, (skew, tr)
    assert all(abs(r - rates[0.0]) <= 0.2 * rates[0.0] for r in rates.values()), rates


def test_skew_with_adaptive_dsync_and_slow_loops() -> None:
    """Default-run version of the two above: adaptive DSYNC, every loop at 200 ms, 300 ms apart, 1 simulated
    minute: GLOBAL rate within 20% of the no-skew run (before the shared grid: 82 against 233)."""
    policy = DsyncPolicy.around(DSYNC)
    calm = SkewedCluster([0.0, 0.0, 0.0], policy=policy).run(1, step=200.0)
    skewed = SkewedCluster([0.0, 300.0, -300.0], policy=policy).run(1, step=200.0)
    base, rate = sum(calm.globals_per_min), sum(skewed.globals_per_min)
    assert base >= 150, base  # DSYNC shrank towards 250 ms: adaptive rounds, not one per second
    assert abs(rate - base) <= 0.2 * base, f"{rate} GLOBALs vs {base} without skew"
    assert max(skewed.reward_buffer) < 1_000 and max(skewed.pending) <= 3 * 8


def test_skew_short_run() -> None:
    """The default-run version: 1 simulated minute, 0 and 2 x DSYNC + 300 ms apart."""
    calm = SkewedCluster([0.0, 0.0, 0.0]).run(1)
    skewed = SkewedCluster([0.0, 2 * DSYNC + 300, -300.0]).run(1)
    assert abs(sum(skewed.globals_per_min) - sum(calm.globals_per_min)) <= 0.2 * sum(calm.globals_per_min)
    assert sum(calm.globals_per_min) >= 50  # about one round per DSYNC (60 s / 1 s)
    assert max(skewed.reward_buffer) < 1_000 and max(skewed.pending) <= 3 * 8


def test_dead_member_leaves_the_round_set_and_awaits_end() -> None:
    """A silent member: rounds close at the deadline, then without waiting; nobody's buffer grows."""
    c = SkewedCluster([0.0, 300.0, 700.0])
    c.run(1)
    c.dead.add(2)
    tr = c.run(1)
    assert min(tr.globals_per_min) >= 30 and max(tr.reward_buffer) < 1_000
    node = c.nodes[0]
    assert node.last_global is not None and node.last_global.members == ["w0", "w1"]
    assert "w2" not in node.membership.last_seen and node.reducer.pending_syncs() <= 4


def test_partitioner_leaves_await_without_a_global() -> None:
    """No reducer answers (the others are gone): after 3 x DSYNC the partitioner routes locally again."""
    c = SkewedCluster([0.0])
    c.nodes[0].reducer.build = lambda *a, **k: (_ for _ in ()).throw(AssertionError("no reducer"))  # type: ignore[method-assign]
    c.nodes[0].membership.self_leaving = True  # never elects itself: nobody reduces
    c.run(1)
    part = c.parts[0]
    assert c.nodes[0].stats.await_timeouts >= 10 and c.nodes[0].stats.globals_applied == 0
    assert len(part.buffer) < 2_000  # dropped at every timeout, not growing for a minute


def test_reward_buffer_is_capped_inside_the_partitioner() -> None:
    part = DaltonPartitioner(N, window=10_000, slide=1_000, placement="bandit")
    rng = np.random.default_rng(1)
    part.sync_payload()  # AWAIT, and nobody answers or times out
    import router.partitioners.dalton.sync as dsync

    cap, dsync.MAX_BUFFER = dsync.MAX_BUFFER, 500
    try:
        for t in range(200):
            part.assign(rng.zipf(1.3, 500) % 100, np.full(500, float(t)))
            assert len(part.buffer) <= 500 + 4 * N * 64
    finally:
        dsync.MAX_BUFFER = cap
    assert not part.awaiting


def test_node_statistics_are_bounded() -> None:
    c = SkewedCluster([0.0, 0.0])
    for node in c.nodes:
        node.stats.rounds.extend((0.0, i, "x") for i in range(HISTORY + 10))
        node.stats.hot_seen.update_keys(str(i) for i in range(HISTORY + 10))
    assert all(len(n.stats.rounds) == HISTORY and len(n.stats.hot_seen) == HISTORY for n in c.nodes)


def test_worker_exports_sync_health() -> None:
    """The sync service registers its collector in the worker's registry: health per route at /metrics."""
    from types import SimpleNamespace

    from router.observability import RouterMetrics
    from router.sync.service import DaltonSyncService

    metrics = RouterMetrics("w0")
    service = DaltonSyncService(SimpleNamespace(metrics=metrics))
    assert "skewroute_sync_transport_up 0.0" in metrics.exposition().decode()  # before the sync starts
    c = SkewedCluster([0.0, 300.0])
    for k in range(40):  # 8 s: a few rounds
        c.step(200.0 * (k + 1))
    service.transport = SimpleNamespace(healthy=True, errors=0, restarts=0, nodes={"r": c.nodes[0]})  # type: ignore[assignment]
    text = metrics.exposition().decode()
    for line in ('skewroute_sync_round_size{route="r"} 2.0', 'skewroute_sync_members{route="r"} 2.0',
                 "skewroute_sync_transport_up 1.0", 'skewroute_sync_pending{route="r"}',
                 'skewroute_sync_last_global_age_seconds{route="r"}'):  # fmt: skip
        assert line in text, line
