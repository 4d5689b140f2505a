"""The cooperative-Dalton protocol on the in-process bus: nodes, real partitioners, the benchmark's sync path."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import numpy as np
import orjson
import pytest

from benchmarks.sync_bench.slow_reducer import SlowReducerNode
from benchmarks.workloads import zipf_keys
from router.choose.inprocess import InProcessBus, SyncOptions, make_bus
from router.partitioners.dalton import DaltonPartitioner
from router.partitioners.metrics import measure as measure_windows
from router.sync import DsyncPolicy, NodeConfig, SyncNode
from router.sync.port import DirectPort
from schemas.control import encode_control
from tests.unit.sync_support import N, sync


# -- nodes on the in-process bus -------------------------------------------------------------------------
class FakePort:
    """A partitioner stand-in: one hot key, records on demand, remembers what it was given."""

    def __init__(self, key: str = "42", count: int = 100) -> None:
        self.key, self.count = key, count
        self.awaiting = False
        self.applied: list[dict[str, object]] = []

    def payload(self) -> dict[str, object]:
        p = {"records": 400, "qtable": {int(self.key): [-1.0] * N}, "weights": {int(self.key): self.count},
             "top_keys": [[int(self.key), self.count]], "request_double": self.awaiting}  # fmt: skip
        self.awaiting = True
        return p

    def apply(self, message: dict[str, object], dsync: float, members: int = 2, period: float = 0.0) -> None:
        self.awaiting = False
        self.applied.append(message)

    def refresh(self) -> None:
        pass

    def abandon(self) -> None:
        self.awaiting = False

    def buffered(self) -> int:
        return 0


def fake_bus(
    p: int,
    *,
    dsync: float = 100,
    delay: float | Callable[[float], float] = 0.0,
    policy: DsyncPolicy | None = None,
    floor: float = 0.0,
) -> tuple[InProcessBus, list[FakePort]]:
    ports = [FakePort() for _ in range(p)]
    nodes = [
        SlowReducerNode(
            port,
            NodeConfig(
                deployment="d",
                route="r",
                instance=f"w{i}",
                combiners=N,
                dsync=dsync,
                policy=policy or DsyncPolicy(dsync, dsync),
                liveness_floor=floor,
            ),
            delay=delay,
        )  # fmt: skip
        for i, port in enumerate(ports)
    ]
    return InProcessBus(nodes), ports


def run(bus: InProcessBus, start: float, stop: float, step: float = 10) -> None:
    for t in np.arange(start, stop, step):
        bus.tick(float(t))


def test_rounds_answer_every_router() -> None:
    bus, ports = fake_bus(3)
    run(bus, 0, 1000)
    rounds = [r for _, r, _ in bus.stats.rounds]
    assert len(rounds) >= 8 and rounds == sorted(rounds) and {red for *_, red in bus.stats.rounds} == {"w0"}
    assert all(len(p.applied) == len(rounds) for p in ports)
    assert all(n.last_global is not None and n.last_global.members == ["w0", "w1", "w2"] for n in bus.nodes)


def test_dsync_doubles_when_reducer_is_slow_and_shrinks_when_idle() -> None:
    slow = [True]
    bus, _ = fake_bus(2, dsync=100, delay=lambda t: 250.0 if slow[0] else 0.0, policy=DsyncPolicy(100, 1600))
    run(bus, 0, 3000)
    grown = bus.nodes[1].dsync
    assert 400 <= grown <= 800  # replies took 250 > DSYNC: doubled (100 -> 200 -> 400, one more in flight)
    slow[0] = False
    run(bus, 3000, 12_000)
    assert bus.nodes[1].dsync == 100  # idle > processing: halved back to the lower bound
    series = [d for _, d in bus.stats.dsync]
    assert max(series) >= grown and series[-1] == 100


def test_dead_member_is_dropped_after_timeout() -> None:
    bus, ports = fake_bus(3, dsync=100)  # liveness: 3 * DSYNC
    run(bus, 0, 500)
    before = len(ports[0].applied)
    bus.kill(2)
    run(bus, 500, 640)
    assert len(ports[0].applied) == before  # waiting for w2 (the round's deadline, 1.5 x DSYNC, not reached)
    run(bus, 640, 700)
    assert len(ports[0].applied) == before + 1  # closed at the deadline without w2 (not the liveness timeout)
    run(bus, 700, 1500)
    assert len(ports[0].applied) > before + 5
    assert bus.nodes[0].last_global is not None and bus.nodes[0].last_global.members == ["w0", "w1"]
    assert [i for i, _ in bus.nodes[0].membership.dropped] == ["w2"]


def test_leaving_member_is_not_waited_for() -> None:
    bus, ports = fake_bus(3, dsync=100)
    run(bus, 0, 500)
    bus.leave(2, 500)
    before = len(ports[0].applied)
    run(bus, 500, 600)
    assert len(ports[0].applied) == before + 1  # the next round closes on time, with w2's last SYNC
    run(bus, 600, 700)
    assert len(ports[0].applied) == before + 2
    g = bus.nodes[0].last_global
    assert g is not None and g.members == ["w0", "w1"]


def test_reducer_takeover() -> None:
    bus, ports = fake_bus(3, dsync=100)
    run(bus, 0, 500)
    assert {r for *_, r in bus.stats.rounds} == {"w0"}
    last_round = bus.stats.rounds[-1][1]
    bus.kill(0)  # the reducer dies mid-stream
    run(bus, 500, 1500)
    after = [(t, r, red) for t, r, red in bus.stats.rounds if t >= 500]
    assert after and {red for *_, red in after} == {"w1"}
    assert after[0][1] == last_round + 1  # the rounds continue where w0 stopped
    assert after[0][0] - 500 <= 3 * 100 + 2 * 100  # within liveness timeout + a round
    assert [r for _, r, _ in bus.stats.rounds] == sorted({r for _, r, _ in bus.stats.rounds})


def test_malformed_and_foreign_messages_are_ignored() -> None:
    bus, ports = fake_bus(2)
    node = bus.nodes[0]
    bad = [b"", b"garbage", b"[1]", orjson.dumps({"v": 2, "type": "sync"}),
           encode_control(sync("x", deployment="other")), encode_control(sync("x", route="other")),
           encode_control(sync("x").model_copy(update={"combiners": N + 1})),
           orjson.dumps({**orjson.loads(encode_control(sync("x"))), "q_table": {"k1": [0.0] * N}})]  # fmt: skip
    for raw in bad:
        assert node.receive_raw(raw, 0) == []
    assert sum(node.stats.ignored.values()) == len(bad)
    assert node.reducer.pending == {} and node.membership.live(0) == set()
    run(bus, 0, 500)
    assert ports[0].applied  # still works


def test_stale_sync_from_history_is_ignored() -> None:
    cfg = NodeConfig(deployment="d", route="r", instance="w0", combiners=N, dsync=100, stale_before=9_950)
    node = SyncNode(FakePort(), cfg)
    node.receive_raw(encode_control(sync("ghost", sent=1)), 10_000)  # long before this node started
    assert node.stats.ignored["stale sync"] == 1 and node.reducer.pending == {}
    node.receive_raw(encode_control(sync("recent", sent=9_800)), 10_000)  # history within the timeout
    assert node.membership.last_seen == {"recent": 9_800}
    node.receive_raw(encode_control(sync("skewed", sent=9_960)), 10_100)  # after start, a clock 140 behind
    assert node.membership.last_seen["skewed"] == 10_100  # liveness by arrival, not by the sender's clock


# -- real partitioners ------------------------------------------------------------------------------------
def test_dalton_routers_agree_on_global_hot_keys_and_rows() -> None:
    rng = np.random.default_rng(1)
    parts = [
        DaltonPartitioner(8, window=60_000, slide=1_000, seed=i, tail="hash", placement="bandit") for i in range(3)
    ]
    bus = make_bus(parts, SyncOptions(dsync=1000))
    assert bus is not None
    perms = [np.arange(500), rng.permutation(500), rng.permutation(500)]
    clock = 0
    for _ in range(40):
        for i, p in enumerate(parts):
            keys = perms[i][np.minimum(rng.zipf(2.0, 250) - 1, 499)] if i else rng.integers(0, 500, 250)
            p.assign(keys, np.arange(clock, clock + 250))
            clock += 250
        bus.tick(float(clock))
    g = bus.nodes[0].last_global
    assert g is not None and g.hot_keys
    hot = {int(k) for k in g.hot_keys}
    for p in parts:
        assert hot <= set(p.hot_keys())
        for k, row in g.q_table.items():
            assert p.qtable.rows[int(k)].q == pytest.approx(row)  # applied at the round, nothing buffered since
    assert bus.summary()["rounds"] == g.round + 1


@pytest.mark.parametrize("routers", [1, 2])
def test_a_lone_dalton_router_that_syncs_keeps_its_own_placement(routers: int) -> None:
    # One worker runs the protocol too: its rounds list it alone, and it keeps planning its scopes as one router.
    # Two workers' rounds list both, and each takes the rule routers share.
    parts = [DaltonPartitioner(8, window=12_000, slide=1_000, seed=i) for i in range(routers)]
    bus = make_bus(parts, SyncOptions(dsync=1000))
    assert bus is not None
    keys = zipf_keys(40_000, 1.0, 1_000, 5)
    clock = 0
    for a in range(0, keys.size, 500):
        for p in parts:
            p.assign(keys[a : a + 500], np.arange(clock, clock + 500))
        clock += 500
        bus.tick(float(clock))
    g = bus.nodes[0].last_global
    assert g is not None and len(g.members) == routers and bus.summary()["rounds"] >= 5
    assert [p.cooperative for p in parts] == [routers > 1] * routers


@pytest.mark.parametrize("routers", [2, 4])
def test_dalton_routers_that_own_their_keys_place_them_alone_while_they_sync(routers: int) -> None:
    # Each router sees only its own keys (a raw topic keyed by the routing key): the peers' sets, first-choice
    # rule, hot keys and load in a GLOBAL are about keys it never routes. Each places its keys as one router does,
    # so the protocol changes no assignment: routers that sync route exactly as the same routers alone.
    keys = zipf_keys(60_000, 0.8, 1_000, 5)
    owner = keys % routers
    outs = []
    for synced in (True, False):
        opts = {"routers": routers, "raw_keys": "partitioned"} if synced else {}
        parts = [DaltonPartitioner(8, window=12_000, slide=1_000, seed=i, **opts) for i in range(routers)]
        bus = make_bus(parts, SyncOptions(dsync=1000)) if synced else None
        out = np.full(keys.size, -1)
        for a in range(0, keys.size, 2_000):
            for r, p in enumerate(parts):
                mine = a + np.flatnonzero(owner[a : a + 2_000] == r)
                p.set_backlog(True)
                out[mine] = p.assign(keys[mine], mine // 5)
            if bus is not None:
                bus.tick(float(a // 5 + 400))
        if bus is not None:
            g = bus.nodes[0].last_global
            assert g is not None and len(g.members) == routers and bus.summary()["rounds"] >= 5
            assert not any(p.cooperative for p in parts)
        outs.append(out)
    assert outs[0].tolist() == outs[1].tolist()


# -- the benchmark's sync path ------------------------------------------------------------------------------
def test_bench_runs_the_protocol_in_process() -> None:
    from benchmarks.bench import BenchSpec, run_bench
    from benchmarks.workloads import make_workload

    wl = make_workload("multi:kinds=uniform+zipf+zipf,s=1.5,keys=2000,tuples=30000,batch=500")
    runs = {}
    for mode in ("protocol", "never", "merge"):
        paper = "dalton:placement=bandit,tail=hash"  # the Q-table protocol; a sync per 500-tuple batch
        spec = BenchSpec(
            partitioners=(paper,), routers=3, dsync=1000, sync=mode, n=8, window=60_000, slide=1_000, batches=None
        )
        runs[mode] = run_bench(wl, spec).run(paper)
    proto = runs["protocol"]
    assert proto.ok and proto.sync_stats["rounds"] >= 25 and proto.sync_stats["messages"]["sync"] >= 75
    assert runs["never"].sync_stats == {} and runs["never"].sync_seconds == 0.0
    assert runs["merge"].sync_stats == {} and runs["merge"].sync_seconds > 0
    assert proto.summary["replication_mean"] < runs["never"].summary["replication_mean"]
    with pytest.raises(ValueError):
        run_bench(wl, BenchSpec(partitioners=("dalton",), routers=2, sync="sometimes"))


def test_sync_experiments_and_report(tmp_path: pathlib.Path) -> None:
    from benchmarks.sync_bench.experiments import convergence, dsync_trace, settle_time
    from benchmarks.sync_bench.report import write_sync_report

    runs = convergence(20_000, (1, 2))
    assert {(r.routers, r.mode) for r in runs} == {(1, "synced"), (1, "pkg"), (2, "synced"), (2, "pkg"), (2, "never")}
    synced2 = next(r for r in runs if (r.routers, r.mode) == (2, "synced"))
    assert synced2.sync["rounds"] >= 15 and synced2.converged_at is not None
    trace = dsync_trace(80_000, base_delay=600, initial=4000, minimum=1000, maximum=64_000)
    assert [p["dsync_median"] for p in trace.per_phase] == [1000, 2000, 4000, 1000]  # Fig. 14b's shape
    paths = write_sync_report(runs, trace, tmp_path, {"tuples": 20_000, "n": 8, "dsync": 1000,
                              "dsync_initial": 4000, "dsync_min": 1000, "dsync_max": 64_000})  # fmt: skip
    assert all(p.exists() and p.stat().st_size > 0 for p in paths.values())
    assert "| 2 | Dalton, never synced |" in paths["markdown"].read_text()
    t = np.arange(10, dtype=np.float64)
    assert settle_time(t, np.array([3.0, 2.5, 2.0, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2]), 0.25, excess_over=1.0) == 5


def test_lower_id_joining_takes_over_without_duplicate_rounds() -> None:
    bus, _ = fake_bus(2, dsync=100)
    bus.nodes = [SyncNode(n.port, n.config.__class__(**{**n.config.__dict__, "instance": f"w{i + 5}"}))
                 for i, n in enumerate(bus.nodes)]  # fmt: skip
    run(bus, 0, 500)
    late = SyncNode(FakePort(), NodeConfig(deployment="d", route="r", instance="w0", combiners=N, dsync=100,
                                           policy=DsyncPolicy(100, 100)))  # fmt: skip
    bus.nodes.append(late)
    run(bus, 500, 1500)
    rounds = [r for _, r, _ in bus.stats.rounds]
    assert rounds == list(range(len(rounds)))  # one GLOBAL per round, no gap, no duplicate
    assert bus.stats.rounds[-1][2] == "w0" and {red for *_, red in bus.stats.rounds[:4]} == {"w5"}


def test_round_held_by_a_dead_reducer_is_closed_again() -> None:
    bus, ports = fake_bus(3, dsync=100, delay=50.0)  # w0 sends each GLOBAL 50 after the round closed
    run(bus, 0, 510)  # w0 closed the round of t=500 and dies before sending it
    assert bus.nodes[0]._outbox and bus.nodes[1].reducer.inflight
    bus.kill(0)
    run(bus, 510, 1500)
    g = bus.nodes[1].last_global
    assert g is not None and g.reducer == "w1"
    takeover = next(x for x in bus.stats.rounds if x[2] == "w1")
    assert takeover[1] == 4 and 500 <= takeover[0] <= 500 + 3 * 100 + 150  # the lost round, after the timeout
    assert all(r == i for i, (_, r, _) in enumerate(bus.stats.rounds))


def test_port_keeps_the_global_load_per_statistics_window() -> None:
    part = DaltonPartitioner(N, window=60_000, slide=1000)
    clock = [0.0]
    port = DirectPort(part, clock=lambda: clock[0])
    part.assign(np.arange(100) % 7, np.arange(100))
    port.payload()
    port.apply({"global_load": 8000}, 4000, members=3, period=4000)  # 8000 records in 4000 time units
    assert part.stats.prev_load == 2000  # per statistics window of 1000
    part.assign(np.arange(100) % 7, np.arange(1000, 1100))  # the next window: the partitioner resets L ...
    assert part.stats.prev_load == 100
    clock[0] = 2000.0
    port.refresh()  # ... and the port sets it back, from the next window on
    assert part.stats.index == 2 and part.stats.prev_load == 2000
    unscaled = DirectPort(DaltonPartitioner(N, window=60_000, slide=1_000), window_per_clock=None)
    unscaled.payload()
    unscaled.apply({"global_load": 8000}, 4000, period=4000)
    assert unscaled.partitioner.stats.prev_load == 8000  # units not comparable: L = GL


def test_port_takes_the_global_load_at_the_routers_own_pace_not_the_clocks() -> None:
    # A backlog: the router routes 10 statistics windows of event time per DSYNC period of wall clock, so the
    # clocks say nothing about how many records a window holds. Its own records say it: it routed 1,000 of the
    # period's 4,000 (four routers), and 100 in its last whole window, so the routers' load per window is 400.
    part = DaltonPartitioner(N, window=60_000, slide=1000)
    port = DirectPort(part)
    for w in range(10):
        part.assign(np.arange(100) % 7, np.arange(w * 1000, w * 1000 + 100))
    port.payload()  # counts the 1,000 records routed since the start
    port.apply({"global_load": 4000}, 1000, members=4, period=1000)
    assert part.stats.prev_load == 400  # the clocks would say 4,000 (one window per period)
    part.assign(np.arange(50) % 7, np.arange(10_000, 10_050))  # the next window: own load 100 -> L from it
    part.assign(np.arange(50) % 7, np.arange(11_000, 11_050))
    port.refresh()
    assert part.stats.prev_load == 200  # this router's 50 of the last window, four times
    assert part.stats.threshold() == 200 / N


def test_dalton_routers_that_own_their_keys_plan_together_through_the_sync_rounds() -> None:
    # Zipf 2.0: the hottest key is about 60 % of the tuples, all on one router. Alone, that router balances its
    # own tuples and splits the key over every combiner; planned together, the routers' SYNCs report their last
    # scopes, the GLOBAL carries every report, and the key reaches the combiners the sum needs.
    routers, n, per_slide = 4, 8, 5_000
    keys = zipf_keys(200_000, 2.0, 10_000, 5)
    owner = keys % routers
    index = np.arange(keys.size) // per_slide  # one micro-batch per slide: live, the shipped rule
    quality = {}
    for together in (False, True):
        opts = {"routers": routers, "raw_keys": "partitioned", "plan_together": together}
        parts = [DaltonPartitioner(n, window=12_000, slide=1_000, seed=i, **opts) for i in range(routers)]
        bus = make_bus(parts, SyncOptions(dsync=1000))
        assert bus is not None
        out = np.full(keys.size, -1)
        for a in range(0, keys.size, 2_000):  # the routers read in step, as live
            for r, p in enumerate(parts):
                mine = a + np.flatnonzero(owner[a : a + 2_000] == r)
                out[mine] = p.assign(keys[mine], mine // 5)
            bus.tick(float(a // 5 + 400))
        g = bus.nodes[0].last_global
        assert g is not None and len(g.scopes) == (routers if together else 0)
        assert all(p.others.any() for p in parts) == together
        late = index >= 10  # from the tenth slide on: the plan holds
        series = measure_windows(keys[late], out[late], index[late], n)
        quality[together] = (float(series.ratio.mean()), float(series.replication.mean()))
    # measured: max/mean 1.021 alone, 1.042 together; partials per key 1.27 alone, 1.12 together
    assert quality[True][0] <= 1.05, quality
    assert quality[True][1] < quality[False][1] - 0.1, quality
