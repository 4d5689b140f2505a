"""The cooperative-Dalton protocol (router.sync) without a broker: reducer, client, membership."""

from __future__ import annotations

import itertools

import pytest

from router.partitioners.dalton import DaltonPartitioner
from router.sync import DsyncPolicy, Membership, QtableReducer, SyncClient, SyncState
from router.sync.port import DirectPort, forwarding_allowed
from schemas.control import GlobalMessage
from tests.unit.sync_support import N, reducer, sync


# -- the reducer ------------------------------------------------------------------------------------
def test_weighted_average_is_frequency_weighted_and_order_independent() -> None:
    msgs = [
        sync("a", rows={"7": [0.0, -1.0, -1.0, -1.0]}, weights={"7": 90}, top=[("7", 90)], records=100),
        sync("b", rows={"7": [-1.0, 0.0, -1.0, -1.0]}, weights={"7": 10}, top=[("7", 10)], records=100),
        sync("c", rows={"7": [-2.0, -2.0, -2.0, 0.0]}, weights={"7": 0}, top=[("7", 0)], records=100),
    ]
    results = []
    for order in itertools.permutations(msgs):
        red = reducer()
        for m in order:
            red.add(m)
        results.append(red.build(0, "a"))
    assert all(g.q_table == results[0].q_table for g in results)
    q = results[0].q_table["7"]
    assert q == pytest.approx([-0.1, -0.9, -1.0, -1.0])  # weights 0.9 / 0.1; c saw no reward: no dilution
    assert results[0].global_load == 300 and results[0].hot_keys == {"7": 100}  # 100 > 300 / 4


def test_hot_keys_gl_and_expiry() -> None:
    red = reducer()
    red.add(sync("a", records=400, rows={"1": [0.0] * N, "2": [0.0] * N}, weights={"1": 5, "2": 5},
                 top=[("1", 150), ("2", 60)]))  # fmt: skip
    red.add(sync("b", records=400, top=[("1", 10), ("2", 50), ("3", 300)]))
    g = red.build(0, "a")
    # GL = 800, threshold 200: key 1 (160) is not hot, key 3 (300) is; key 2 (110) neither.
    assert g.global_load == 800 and g.hot_keys == {"3": 300}
    assert g.expired == ["1", "2"] and g.q_table == {}  # locally frequent, globally cold: not split
    red.add(sync("a", 1, records=100, rows={"3": [-1.0] * N}, weights={"3": 4}, top=[("4", 10)]))
    red.add(sync("b", 1, records=100, top=[("4", 10)]))
    g2 = red.build(1, "a")
    assert g2.hot_keys == {} and "3" in g2.q_table  # hot last round: valid through this one
    red.add(sync("a", 2, rows={"3": [-1.0] * N}))
    red.add(sync("b", 2))
    assert red.build(2, "a").expired == ["3"]


def test_key_listed_twice_counts_once() -> None:
    red = reducer()
    red.add(sync("a", records=100, top=[("5", 20), ("5", 20)]))
    assert red.inputs().counts == {"5": 20}


def test_several_syncs_of_one_router_in_one_round_add_up() -> None:
    red = reducer()
    red.add(sync("a", 0, records=100, rows={"1": [0.0] * N}, weights={"1": 10}, top=[("1", 40)]))
    red.add(sync("a", 1, records=100, rows={"1": [-1.0] * N}, weights={"1": 10}, top=[("1", 40)]))
    g = red.build(0, "a")
    assert g.global_load == 200 and g.hot_keys == {"1": 80}
    assert g.q_table["1"] == [-1.0] * N and g.seqs == {"a": 1}  # the latest row


def test_follower_aligns_with_observed_global() -> None:
    leader, follower = reducer(), reducer()
    for red in (leader, follower):
        red.add(sync("a", 0, top=[("9", 90)]))
        red.add(sync("b", 0, top=[("9", 90)]))
    g = leader.build(0, "a")
    follower.add(sync("a", 1))  # arrived after the leader closed the round
    follower.observe(g, 5, own=False)
    assert follower.round == g.round and set(follower.pending) == {"a"} and follower.pending["a"][0].seq == 1
    assert follower.hot_until == {"9": g.round + 1} and follower.last_emit == 5


def test_dsync_policy() -> None:
    pol = DsyncPolicy(100, 800)
    assert pol.adapt(200, True, None, None) == 400
    assert pol.adapt(800, True, None, None) == 800  # bounded above
    assert pol.adapt(400, False, idle=300, processing=100) == 200  # idle > processing: shrink
    assert pol.adapt(100, False, idle=300, processing=10) == 100  # bounded below
    assert pol.adapt(400, False, idle=100, processing=300) == 400  # busy: keep
    with pytest.raises(ValueError):
        DsyncPolicy(0, 10)
    assert pol.adapt(400, False, idle=300, processing=100, records=0) == 200  # no rest: the paper's rule


def test_a_round_with_no_records_returns_dsync_to_rest() -> None:
    pol = DsyncPolicy.around(1000)
    assert (pol.minimum, pol.maximum, pol.rest) == (250, 16_000, 1000)
    assert pol.adapt(250, False, idle=300, processing=1, records=0) == 1000  # every router idle: back to rest
    assert pol.adapt(250, False, idle=300, processing=1, records=5) == 250  # traffic: halved, at the floor
    assert pol.adapt(4000, False, idle=300, processing=1, records=0) == 1000  # doubled before: back to rest too
    assert pol.adapt(250, True, idle=300, processing=1, records=0) == 500  # a router asked: doubled first
    with pytest.raises(ValueError, match="rest"):
        DsyncPolicy(100, 800, rest=50)
    # in the reducer: the GLOBAL of an empty round carries the rest DSYNC; traffic halves it again
    red = QtableReducer(deployment="d", route="r", combiners=N, dsync=250, policy=pol)
    red.add(sync("a", records=0))
    red.add(sync("b", records=0))
    red.emitted(0, 1)
    assert red.build(500, "a").dsync_ms == 1000
    red.emitted(500, 501)
    red.add(sync("a", 1, records=10))
    assert red.build(1500, "a").dsync_ms == 500


# -- the client ---------------------------------------------------------------------------------------
def test_client_prepare_await_and_rounds() -> None:
    c = SyncClient(deployment="d", route="r", instance="a", combiners=N, dsync=100, stale_before=50)
    assert not c.due(30) and c.next_due == 100  # on the DSYNC grid
    assert c.due(100)
    msg = c.build_sync({"records": 5, "qtable": {7: [0.0] * N}, "top_keys": [[7, 5]], "request_double": False}, 100)
    assert c.state is SyncState.AWAIT and msg.seq == 0 and msg.q_table == {"7": [0.0] * N} and c.next_due == 200
    g = GlobalMessage(deployment="d", route="r", reducer="a", round=3, dsync_ms=200, hot_keys={"7": 5},
                      sent_ms=120, seqs={"a": 0}, global_load=9)  # fmt: skip
    upd = c.accept_global(g, 130)
    assert upd == {"qtable": {}, "hot": [7], "expire": [], "global_load": 9, "peer_scopes": [], "own_scope": None}
    assert c.state is SyncState.PREPARE and c.dsync == 200 and c.last_latency == 30
    assert c.grid_offset == 10 and c.next_due == 210  # the reducer's DSYNC grid (sent 120, read at 130)
    assert c.accept_global(g, 140) is None  # same round again
    assert c.accept_global(g.model_copy(update={"round": 4, "sent_ms": 10}), 140) is None  # sent before start-up
    assert c.accept_global(g.model_copy(update={"round": 4, "route": "x"}), 140) is None
    c.accept_global(g.model_copy(update={"round": 9, "sent_ms": 10**18}), 150)  # any sender time: the next SYNC
    assert 150 < c.next_due <= 350 and not c.due(151)  # is within one DSYNC, never due at once


def test_key_forwarding_only_with_a_sync_per_slide() -> None:
    assert forwarding_allowed(500, 1000) and not forwarding_allowed(2000, 1000)
    assert not forwarding_allowed(10, 1000, comparable=False)
    part = DaltonPartitioner(N, window=60_000, slide=1000, key_forwarding=True)
    port = DirectPort(part)
    port.payload()
    port.apply({}, 2000)
    assert not part.key_forwarding  # several routers, a sync less than once per slide
    port.apply({}, 500)
    assert part.key_forwarding
    port.apply({}, 2000, members=1)
    assert part.key_forwarding  # a lone router keeps its setting (the partitioner's own per-slide rule applies)


# -- membership -----------------------------------------------------------------------------------------
def test_membership_timeout_leaving_and_election() -> None:
    m = Membership("b", timeout=10)
    assert m.leader(0) is None  # its own SYNC not seen yet
    m.seen("b", 0)
    assert m.leader(0) == "b"  # alone: elects itself
    m.seen("a", 0)
    m.seen("c", 0)
    assert m.live(5) == {"a", "b", "c"} and m.leader(5) == "a"
    m.seen("c", 8)
    m.seen("b", 8)
    assert m.live(15) == {"b", "c"} and m.leader(15) == "b"  # a timed out: the next lowest takes over
    m.seen("c", 16, leaving=True)
    assert m.live(16) == {"b"}
    m.self_leaving = True
    assert m.leader(16) is None
