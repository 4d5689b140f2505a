"""A hostile (or broken) control-topic writer: it cannot stop the rounds past the takeover timeout nor grow memory.

Without ACLs anyone who can write the control topic can send any well-formed message (see the sync section
of deploy/OPERATIONS.md); these tests hold the protocol to what it can promise on its own.
"""

from __future__ import annotations

import zlib

import orjson
import pytest

from router.sync.node import ControlOut
from schemas.control import (
    ControlMessageError,
    GlobalMessage,
    SyncMessage,
    encode_control,
    fit_message,
    params_fingerprint,
    parse_control,
)
from tests.unit.test_sync_skew import DSYNC, N, SkewedCluster


def _hostile_sync(seq: int, instance: str = "0", sent: int = 0) -> SyncMessage:
    return SyncMessage(deployment="d", route="r", instance=instance, seq=seq, records=1, combiners=N, sent_ms=sent)


class HostileCluster(SkewedCluster):
    """Two honest workers (300 ms apart) and a writer that injects messages every ``every`` ms."""

    def __init__(self, inject: object, every: float = 500.0) -> None:
        super().__init__([0.0, 300.0])
        self.inject, self.every, self.next_at, self.count = inject, every, 0.0, 0

    def step(self, t: float, tuples: int = 80) -> None:
        if t >= self.next_at:
            self.next_at = t + self.every
            self.count += 1
            self.deliver(list(self.inject(self.count, t)))  # type: ignore[operator]
        super().step(t, tuples)


def _gaps(cluster: SkewedCluster, minutes: int) -> tuple[float, list[int]]:
    """Longest time without a GLOBAL applied at node 1 (simulated ms), and GLOBALs per minute."""
    node = cluster.nodes[1]
    last, worst, per_min = cluster.t, 0.0, []
    for _ in range(minutes):
        before = node.stats.globals_applied
        for _ in range(300):
            cluster.step(cluster.t + 200)
            if node.stats.last_global_at is not None and node.stats.last_global_at > last:
                worst = max(worst, node.stats.last_global_at - last)
                last = node.stats.last_global_at
        per_min.append(node.stats.globals_applied - before)
    return max(worst, cluster.t - last), per_min


def test_claiming_the_lowest_id_stalls_the_rounds_for_one_takeover_timeout_only() -> None:
    """SYNCs as instance "0" every 500 ms, never a GLOBAL: deposed after the takeover timeout, for good."""
    c = HostileCluster(lambda i, t: [_hostile_sync(i, sent=int(t))])
    worst, per_min = _gaps(c, 2)
    takeover = c.nodes[1].takeover_timeout()
    assert takeover == 2 * 3 * DSYNC
    assert worst <= takeover + 2 * DSYNC, f"rounds stopped for {worst} ms (takeover timeout {takeover} ms)"
    assert per_min[-1] >= 55  # after the takeover: a round per DSYNC again, "0" stays deposed
    assert all(n.leader(c.t) == "w0" and "0" in n.membership.deposed for n in c.nodes)
    assert all(n.reducer.pending_syncs() <= 2 * 8 for n in c.nodes)
    assert all(len(p.buffer) < 1_000 for p in c.parts)


def test_oversized_bombs_and_overfull_globals_are_ignored() -> None:
    """Over max_bytes, inflating past the cap, over the row cap, foreign fingerprint: ignored and counted."""
    c = SkewedCluster([0.0, 300.0])
    node = c.nodes[0]
    rows = {str(k): [0.0] * N for k in range(node.config.max_rows + 1)}
    big = GlobalMessage(deployment="d", route="r", combiners=N, reducer="0", round=10**6, dsync_ms=1, q_table=rows)
    bomb = b"\x01" + zlib.compress(b" " * (node.config.max_bytes * 9), 9)  # a few KB, 8 MB inflated
    assert len(bomb) < 20_000
    huge = orjson.dumps({"v": 1, "pad": "x" * (node.config.max_bytes + 1)})
    foreign = _hostile_sync(0, "z").model_copy(update={"fingerprint": "f" * 16})
    node.config = node.config.__class__(**{**node.config.__dict__, "fingerprint": "a" * 16})
    for raw in (encode_control(big), bomb, huge, encode_control(foreign)):
        assert node.receive_raw(raw, 0.0) == []
    assert node.stats.ignored["malformed"] == 3 and node.stats.ignored["incompatible parameters"] == 1
    assert node.reducer.round == -1 and node.reducer.hot_until == {} and node.membership.last_seen == {}
    with pytest.raises(ControlMessageError, match="row cap"):
        parse_control(encode_control(big))


def test_a_flood_of_new_instances_and_syncs_is_bounded() -> None:
    """Thousands of fake members and SYNCs: membership and pending SYNCs stay under their caps."""

    def flood(i: int, t: float) -> list[ControlOut]:
        return [_hostile_sync(i, f"x{i:05d}-{j}", int(t)) for j in range(40)]

    c = HostileCluster(flood, every=200.0)
    cfg = c.nodes[0].config
    for node in c.nodes:  # smaller caps to reach them quickly
        node.config = cfg.__class__(**{**cfg.__dict__, "instance": node.instance, "max_members": 64})
        node.membership.max_members = node.reducer.max_members = 64
    for _ in range(150):  # 30 s: 6,000 fake SYNCs
        c.step(c.t + 200)
    for node in c.nodes:
        assert len(node.membership.last_seen) <= 64 and len(node.reducer.pending) <= 64
        assert node.reducer.pending_syncs() <= 64 * 8 and node.stats.ignored["too many members"] > 1_000


def test_globals_from_a_hostile_reducer_cannot_grow_the_hot_key_state() -> None:
    """GLOBALs with 1,000 new hot keys each second: the validity map keeps only the live rounds' keys."""

    def hot(i: int, t: float) -> list[ControlOut]:
        keys = {str(10**9 * i + k): 1 for k in range(1_000)}
        return [GlobalMessage(deployment="d", route="r", combiners=N, reducer="evil", round=i, dsync_ms=1000,
                              hot_keys=keys, sent_ms=int(t))]  # fmt: skip

    c = HostileCluster(hot, every=1_000.0)
    for _ in range(60):
        c.step(c.t + 200)
        assert all(len(n.reducer.hot_until) <= 3 * 1_000 + 100 for n in c.nodes)
    assert sum(r == "w0" for *_, r in c.nodes[1].stats.rounds) >= 8  # the honest rounds go on meanwhile


def test_messages_are_cut_to_fit_and_carry_the_fingerprint() -> None:
    rows = {str(k): [float(k % 7) / 7 - 1.0] * 1024 for k in range(3_000)}
    msg = SyncMessage(deployment="d", route="r", instance="w", seq=0, records=1, combiners=1024, q_table=rows,
                      weights={k: int(k) for k in rows}, fingerprint=params_fingerprint({"n": 1024}))  # fmt: skip
    fitted, cut = fit_message(msg, max_bytes=50_000, max_rows=2_000)
    assert cut > 1_000 and len(encode_control(fitted)) <= 50_000
    kept = set(fitted.q_table)
    assert kept == set(sorted(rows, key=int, reverse=True)[: len(kept)])  # the heaviest rows stay
    back = parse_control(encode_control(fitted), max_bytes=50_000, max_rows=2_000)
    assert back.fingerprint == msg.fingerprint and len(back.q_table) == len(kept)


def test_a_node_follows_another_that_deposed_the_reducer_it_waits_for() -> None:
    """Only node 0's timer ran out on "0" (deposed by hand here): node 1 follows once node 0 answers the rounds.

    Before, node 1 kept "0" elected for good: node 0's GLOBALs closed each round before node 1's own takeover
    timer could run out (seen on a loaded CI host in the broker test of the hostile writer).
    """
    c = SkewedCluster([0.0, 0.0])
    takeover = c.nodes[0].takeover_timeout()
    t, seq = 0.0, 0
    while t < 5 * takeover:
        t += 50
        if t % 100 == 0:  # "0" claims the lowest id with a SYNC every 100 ms and never publishes a GLOBAL
            seq += 1
            c.deliver([_hostile_sync(seq, sent=int(t))])
        if t == 1_500:
            assert [n.leader(t) for n in c.nodes] == ["0", "0"]
            c.nodes[0].membership.depose("0", t, 10 * takeover)
        c.step(t)
    assert [n.leader(c.t) for n in c.nodes] == ["w0", "w0"]
    assert [n.stats.deposed for n in c.nodes] == [0, 1]
    assert c.nodes[1].stats.globals_applied >= 4 * takeover / DSYNC  # the rounds went on meanwhile
