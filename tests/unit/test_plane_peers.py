"""Event-time alignment across the workers of a route (``router.align_peers``), on data planes with fake clients.

Two workers, each with its own raw partitions (the fake broker of ``test_plane_align``), exchange their floors
through an in-memory bus instead of the align topic; one runs three turns for each of the other's. The channel
itself, against a broker, is in ``tests/integration/test_router_align_peers.py``.
"""

from __future__ import annotations

import orjson

from router.dataplane import RouteDataPlane
from router.plane_align import UNKNOWN
from router.plane_peers import AlignChannel, PeerLows
from schemas.settings import KafkaSettings
from tests.unit.test_plane_align import T0, Clock, Logs, _plane
from tests.unit.test_plane_pipeline import Out


class Bus:
    """The lows every worker published last (what the align topic carries), read by the others at once."""

    def __init__(self) -> None:
        self.lows: dict[str, int | None] = {}

    def port(self, me: str) -> Port:
        return Port(self, me)


class Port:
    """One worker's side of the bus (what :class:`~router.plane_peers.AlignChannel` is on the align topic)."""

    def __init__(self, bus: Bus, me: str) -> None:
        self.bus, self.me = bus, me
        self.published: list[int | None] = []

    def lowest(self, own: set[int]) -> int | None:
        others = [f for w, f in self.bus.lows.items() if w != self.me and f is not None]
        return min(others) if others else None

    def publish(self, low: int | None, owned: set[int]) -> None:
        self.bus.lows[self.me] = low
        self.published.append(low)

    def rewarm(self) -> None:
        pass


def _two(
    align_ms: int, peers: bool, records: int = 3000
) -> tuple[tuple[RouteDataPlane, Logs], tuple[RouteDataPlane, Logs], Clock]:
    """Worker A reads raw partitions 0 and 1, worker B 2 and 3; the same backlog of event times in each."""
    log = [T0 + 2 * i for i in range(records)]
    a, a_broker, clock = _plane({0: log, 1: log}, align_ms)
    b, b_broker, _ = _plane({2: log, 3: log}, align_ms)
    b.align._clock = clock  # one clock for both
    if peers:
        bus = Bus()
        a.align.peers, b.align.peers = bus.port("A"), bus.port("B")
    return (a, a_broker), (b, b_broker), clock


def _run(a: tuple[RouteDataPlane, Logs], b: tuple[RouteDataPlane, Logs], clock: Clock) -> list[tuple[Logs, Out]]:
    """A takes three turns for each of B's; everything both produced, in the order they produced it."""
    seen = {id(a[1]): 0, id(b[1]): 0}
    merged: list[tuple[Logs, Out]] = []
    for turn in range(3000):
        clock.now += 0.01
        for plane, broker in (a, b) if turn % 3 == 0 else (a,):
            plane._batch()
            broker.flush(0)  # the broker acknowledges what it got (the next turn commits it)
            merged += [(broker, out) for out in broker.produced[seen[id(broker)] :]]
            seen[id(broker)] = len(broker.produced)
        done = all(br.done() and not p.align.holding and not p.align.paused for p, br in (a, b))
        if done:
            break
    for plane, broker in (a, b):
        plane._batch()
        plane._complete()
        merged += [(broker, out) for out in broker.produced[seen[id(broker)] :]]
    return merged


def _lateness(merged: list[tuple[Logs, Out]]) -> int:
    """How far the most out-of-order record of both workers' output lies behind the newest before it (ms)."""
    newest, worst = None, 0
    for broker, out in merged:
        p, o = out.source
        t = broker.logs[p][o]
        newest = t if newest is None else max(newest, t)
        worst = max(worst, newest - t)
    return worst


def _everything_once(merged: list[tuple[Logs, Out]], brokers: list[Logs]) -> None:
    got = sorted((id(br), out.source) for br, out in merged)
    want = sorted((id(br), (p, o)) for br in brokers for p, log in br.logs.items() for o in range(len(log)))
    assert got == want


def test_workers_that_share_their_lows_route_a_backlog_in_event_time_order() -> None:
    a, b, clock = _two(align_ms=200, peers=True)
    merged = _run(a, b, clock)
    _everything_once(merged, [a[1], b[1]])
    assert _lateness(merged) <= 200
    assert a[0].align.pauses > 0  # the faster worker was held back, its partitions paused...
    assert not a[1].paused and not b[1].paused  # ...and resumed

    # each worker aligned on its own: the faster one runs ahead, by most of the backlog's 6 s of event time
    a, b, clock = _two(align_ms=200, peers=False)
    merged = _run(a, b, clock)
    _everything_once(merged, [a[1], b[1]])
    assert _lateness(merged) >= 3_000


def test_a_peer_below_any_event_time_holds_everything_and_nothing_is_lost() -> None:
    a, _, clock = _two(align_ms=200, peers=False)
    plane, broker = a
    port = Bus().port("A")
    port.bus.lows["B"] = UNKNOWN  # a peer that delivered nothing yet (or a channel warming up)
    plane.align.peers = port
    for _ in range(5):
        clock.now += 0.01
        plane._batch()
    assert broker.produced == [] and plane.align.holding and broker.paused  # held, bounded, paused
    port.bus.lows["B"] = None  # the peer caught up (or went silent for stale_s)
    for _ in range(50):
        clock.now += 0.01
        plane._batch()
    plane._complete()
    assert sorted(out.source for out in broker.produced) == [(p, o) for p in (0, 1) for o in range(3000)]


def test_an_idle_worker_tells_its_peers_it_holds_nothing_back() -> None:
    a, _, clock = _two(align_ms=200, peers=False, records=10)
    plane, broker = a
    port = Bus().port("A")
    plane.align.peers = port
    for _ in range(5):
        clock.now += 0.01
        plane._batch()
    assert port.published[0] is not None and port.published[-1] is None  # lows while routing, then none once idle


def test_peer_lows_count_the_lowest_fresh_one_and_forget_the_silent() -> None:
    clock = Clock()
    peers = PeerLows("me", stale_s=2.0, clock=clock)
    peers.heard("me", 5)  # its own messages come back on the topic: ignored
    peers.heard("w1", 300)
    peers.heard("w2", 100)
    peers.heard("w3", None)  # caught up
    assert peers.lowest() == 100 and peers.holding == ["w1", "w2"]
    clock.now += 1.5
    peers.heard("w1", 400)
    clock.now += 1.0  # w2 silent for 2.5 s: crashed or cut off, it holds nothing back
    assert peers.lowest() == 400 and peers.holding == ["w1"]
    peers.heard("w1", None)
    assert peers.lowest() is None


def test_partitions_owned_by_no_worker_hold_everything_back_for_a_while() -> None:
    clock = Clock()
    peers = PeerLows("me", stale_s=2.0, clock=clock, unowned_s=10.0)
    peers.heard("w1", 300, frozenset({2, 3}))
    assert peers.lowest({0, 1}) == 300
    peers.heard("w1", None, frozenset())  # revoked: a rebalance under way, nobody owns 2 and 3 now
    assert peers.lowest(set()) == UNKNOWN  # this worker was revoked too: nothing owned by anyone
    clock.now += 1.0
    peers.heard("w1", 500, frozenset({0, 1}))  # assigned again, the halves swapped
    assert peers.lowest(set()) == UNKNOWN  # 2 and 3 are still nobody's
    assert peers.lowest({2, 3}) == 500
    peers.heard("w1", 600, frozenset({0, 1}))
    clock.now += 3.0  # w1 went silent: its partitions are nobody's until the group gives them out again...
    assert peers.lowest({2, 3}) == UNKNOWN
    clock.now += 10.0  # ...for at most unowned_s
    assert peers.lowest({2, 3}) is None


class FakeClients:
    """The channel's producer and reader: what is produced is read back by every channel on the same log."""

    def __init__(self, log: list[bytes], fail: list[bool]) -> None:
        self.log, self.fail, self.pos = log, fail, 0

    def produce(self, topic: str, value: bytes, key: bytes) -> None:
        if self.fail[0]:
            raise RuntimeError("broker down")
        self.log.append(value)

    def poll(self, timeout: float) -> int:
        return 0

    def consume(self, n: int, timeout: float) -> list[object]:
        out, self.pos = self.log[self.pos :], len(self.log)
        return [Msg(v) for v in out]

    def flush(self, timeout: float) -> int:
        return 0

    def close(self) -> None:
        pass


class Msg:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def value(self) -> bytes:
        return self._value

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return 0


def _channel(me: str, log: list[bytes], fail: list[bool], clock: Clock, wall: list[float]) -> AlignChannel:
    ch = AlignChannel(KafkaSettings(), "skewroute.align", "app.route", me, clock=clock, wall_ms=lambda: wall[0])

    def open_fake() -> None:
        ch._producer = ch._reader = FakeClients(log, fail)
        ch._last = None
        ch._ready_at = clock() + ch.warm_up_s

    ch._open = open_fake  # type: ignore[method-assign]
    return ch.open()


def _swap(ch: AlignChannel, low: int | None) -> int | None:
    """One turn of a worker: what its peers published, then its own low (as the alignment calls them)."""
    peer = ch.lowest({0})
    ch.publish(low, {0} if ch.me == "A" else {1})
    return peer


def test_the_channel_publishes_on_change_repeats_while_it_has_a_low_and_warms_up() -> None:
    clock, wall, fail = Clock(), [1e12], [False]
    log: list[bytes] = []
    a, b = _channel("A", log, fail, clock, wall), _channel("B", log, fail, clock, wall)
    assert _swap(a, 1000) == UNKNOWN  # just opened: holds everything until every peer could have been heard
    assert _swap(b, 5000) == UNKNOWN
    clock.now += a.warm_up_s
    assert _swap(a, 1000) == 5000 and _swap(b, 5000) == 1000
    sent = a.sent
    a.publish(1001, {0})  # changed, but within every_s of the last message: not yet
    assert a.sent == sent
    clock.now += 1.5 * a.every_s
    a.publish(1002, {0})
    assert a.sent == sent + 1 and b.lowest({1}) == 1002
    clock.now += a.stale_s / 4  # unchanged: repeated every stale_s / 4
    a.publish(1002, {0})
    assert a.sent == sent + 2
    a.publish(None, {0})  # caught up: "none" at once
    assert b.lowest({1}) is None
    # a message of another route, or from more than stale_s ago, or not ours: skipped
    log += [b'{"g": "other.route", "w": "C", "f": 1, "at": 1000000000000}',
            b'{"g": "app.route", "w": "D", "f": 1, "at": 1}', b"not json", b'{"g": "app.route"}',
            b'{"g": "app.route", "w": "E", "f": "soon", "at": 1000000000000}']  # fmt: skip
    received = b.received
    assert b.lowest({1}) is None and b.received == received
    b.leave()  # B had a low: it retracts it (and its partition: A sees partition 1 owned by none, and holds)
    assert _lows(log)[-1] == ("B", None) and a.lowest({0}) == UNKNOWN


def _lows(log: list[bytes]) -> list[tuple[str, int | None]]:
    out = []
    for v in log:
        try:
            d = orjson.loads(v)
            out.append((d["w"], d["f"]))
        except (orjson.JSONDecodeError, KeyError):
            continue
    return out


def test_a_failing_channel_is_reported_and_the_worker_aligns_alone_until_it_reopens() -> None:
    clock, wall, fail = Clock(), [1e12], [False]
    log: list[bytes] = []
    a, b = _channel("A", log, fail, clock, wall), _channel("B", log, fail, clock, wall)
    clock.now += a.warm_up_s
    b.publish(100, {1})
    assert _swap(a, 900) == 100
    fail[0] = True
    clock.now += 0.2
    assert _swap(a, 901) == 100 and a.errors == 1  # read before the publish failed; then closed
    assert _swap(a, 902) is None and a.errors == 1  # backing off: no peer low, this worker's own alignment only
    fail[0] = False
    clock.now += 0.6
    assert _swap(a, 903) == UNKNOWN  # opened again: warming up
    clock.now += a.warm_up_s
    b.publish(100, {1})
    assert _swap(a, 903) == 100
