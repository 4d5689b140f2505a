"""Event-time alignment of the raw partitions (``router.align_ms``), on the data plane with fake clients.

The fake consumer hands out a backlog the way librdkafka does under one: a consume batch is one partition's
chunk, partitions in turn, and it honours pause, resume and seek. Every commit is still checked against the
delivery contract by the fake broker of ``test_plane_pipeline``.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from confluent_kafka import TopicPartition

from router.dataplane import RouteDataPlane
from router.extract import Extracted, SourceRecord
from router.observability import RouterMetrics
from router.plane_align import EventTimeAlign
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings
from tests.unit.test_plane_pipeline import RAW, Broker, Raw

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Logs(Broker):
    """Raw partitions as logs of event times; one partition's chunk per consume, partitions in turn."""

    def __init__(self, plane: RouteDataPlane, logs: dict[int, list[int]], chunk: int) -> None:
        super().__init__(plane, [])
        self.logs, self.chunk = logs, chunk
        self.pos = dict.fromkeys(logs, 0)
        self.paused: set[int] = set()
        self.silent: set[int] = set()  # partitions that have records but deliver none (a stuck fetch)
        self.turn = 0
        self.seeks: list[tuple[int, int]] = []

    def consume(self, n: int, timeout: float) -> list[Raw]:
        self.before_consume()
        order = sorted(self.logs)
        for _ in order:
            p = order[self.turn % len(order)]
            self.turn += 1
            if p in self.paused or p in self.silent or self.pos[p] >= len(self.logs[p]):
                continue
            a = self.pos[p]
            b = min(a + min(n, self.chunk), len(self.logs[p]))
            self.pos[p] = b
            return [Raw(RAW, p, o, None, b'{"key":"k%d"}' % (o % 5), self.logs[p][o]) for o in range(a, b)]
        return []

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {tp.partition for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in tps}

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))
        self.pos[tp.partition] = tp.offset

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(RAW, tp.partition, self.pos[tp.partition]) for tp in tps]

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(RAW, tp.partition, -1001) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool) -> tuple[int, int]:
        return 0, len(self.logs[tp.partition])

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(cluster_id="Yq3Xb1aJT8uR0nZ2oWcE4g")  # an Apache Kafka cluster: not Tansu

    def done(self) -> bool:
        return all(self.pos[p] >= len(log) for p, log in self.logs.items())


def _plane(
    logs: dict[int, list[int]],
    align_ms: int,
    chunk: int = 1500,
    cap: int = 1500,
    grace: float = 0.0,
    watermark_ms: int | None = None,
) -> tuple[RouteDataPlane, Logs, Clock]:
    router = RouterSettings(instance_id="w1", window_metrics=False, align_ms=align_ms, batch_max_records=5000)
    route = RouteSettings(raw_topic=RAW, combiners=2, time={"source": "kafka_timestamp"})
    plane = RouteDataPlane(
        KafkaSettings(), router, route, RouterMetrics("w1"), instance_id="w1", watermark_ms=watermark_ms
    )
    broker = Logs(plane, logs, chunk)
    plane.producer = plane.consumer = broker  # type: ignore[assignment]
    clock = Clock()
    plane.align = EventTimeAlign(RAW, align_ms, cap=cap, clock=clock, idle_grace_s=grace)
    plane.membership._forget_held = plane.align.forget  # the rebalance callbacks forget through this one
    plane.membership.assignment = set(logs)
    return plane, broker, clock


def _drain(plane: RouteDataPlane, broker: Logs, clock: Clock, turns: int = 500) -> None:
    for _ in range(turns):
        clock.now += 0.01
        plane._batch()
        if broker.done() and not plane.align.holding and not plane.align.paused:
            break
    plane._batch()
    plane._complete()


def _lateness(broker: Logs) -> int:
    """How far the most out-of-order routed record lies behind the newest event time routed before it (ms)."""
    newest, worst = None, 0
    for out in broker.produced:
        if out.topic() == "raw.dlq":
            continue
        p, o = out.source
        t = broker.logs[p][o]
        newest = t if newest is None else max(newest, t)
        worst = max(worst, newest - t)
    return worst


def _backlog(parts: int = 3, records: int = 3000, step_ms: int = 2) -> dict[int, list[int]]:
    return {p: [T0 + i * step_ms for i in range(records)] for p in range(parts)}


def _everything_once(broker: Logs) -> None:
    sources = [o.source for o in broker.produced]
    assert sorted(sources) == sorted((p, o) for p, log in broker.logs.items() for o in range(len(log)))
    committed: dict[int, int] = {}
    for c in broker.commits:
        committed.update(c)
    assert committed == {p: len(log) for p, log in broker.logs.items() if log}


def test_a_backlog_is_routed_merged_by_event_time_within_align_ms() -> None:
    plane, broker, clock = _plane(_backlog(), align_ms=500)
    _drain(plane, broker, clock)
    _everything_once(broker)  # and every commit was checked against the acknowledgements
    assert _lateness(broker) <= 500
    assert plane.align.pauses > 0 and not broker.paused  # partitions were paused, all resumed at the end

    off, off_broker, off_clock = _plane(_backlog(), align_ms=0)  # consume order: one partition's chunk after another
    _drain(off, off_broker, off_clock)
    _everything_once(off_broker)
    assert _lateness(off_broker) >= 2_900 and off.align.pauses == 0


def test_a_spread_wider_than_the_watermark_delay_is_measured_and_warned_of_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: dict[int, tuple[int, int, list[str]]] = {}
    for align_ms in (0, 500):
        plane, broker, clock = _plane(_backlog(), align_ms=align_ms, watermark_ms=1000)
        plane.health.sample_s = 0.0  # sample at every turn (the worker samples once a second)
        spreads = []
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="router.plane_health"):
            for _ in range(500):
                clock.now += 0.01
                plane._batch()
                spreads.append(plane.health.spread_ms())
                if broker.done() and not plane.align.holding and not plane.align.paused:
                    break
            plane._batch()
            plane._complete()
        _everything_once(broker)
        warned = [r.getMessage() for r in caplog.records if r.name == "router.plane_health"]
        seen[align_ms] = (max(spreads), _lateness(broker), warned)
        assert plane.health.spread_ms() == 0 and plane.health.snapshot()["event_time_spread_s"] == 0  # none waiting
    spread, late, warnings = seen[0]  # one partition's chunk after another: 3 s apart
    assert spread >= 2_900 and late <= spread  # the spread bounds how late a routed record lands
    assert len(warnings) == 1  # at most once a minute
    assert "raw partitions [2] of raw are 3.0 s behind" in warnings[0] and "watermark delay (1.0 s)" in warnings[0]
    assert "router.align_ms" in warnings[0]
    spread, late, warnings = seen[500]
    assert spread <= 500 and late <= 500 and warnings == []


def test_held_records_are_bounded_and_each_partition_keeps_its_order() -> None:
    plane, broker, clock = _plane(_backlog(parts=4), align_ms=200, chunk=1000, cap=2000)
    _drain(plane, broker, clock)
    _everything_once(broker)
    assert 0 < plane.align.most <= 4 * (2000 + 1000)  # at most cap + one chunk per partition
    for p in broker.logs:
        offsets = [o for q, o in (out.source for out in broker.produced) if q == p]
        assert offsets == sorted(offsets)


def test_a_partition_with_nothing_to_read_holds_nothing_back() -> None:
    logs = _backlog(parts=2) | {2: []}  # partition 2 is empty (its high watermark is its committed offset)
    plane, broker, clock = _plane(logs, align_ms=500)
    _drain(plane, broker, clock)
    _everything_once(broker)
    assert _lateness(broker) <= 500


def test_a_partition_that_stops_delivering_holds_the_others_for_stale_s_only() -> None:
    plane, broker, clock = _plane(_backlog(parts=2), align_ms=500)
    plane._batch()  # partition 0's first chunk: partition 1 has records waiting and no event time yet
    assert plane.align.holding and 0 in broker.paused and broker.commits == []
    broker.silent = {1}  # partition 1 delivers nothing any more
    for _ in range(3):
        clock.now += 0.5
        plane._batch()
    assert plane.align.holding  # held within the 2 s
    clock.now += 1.0
    for _ in range(20):
        plane._batch()
    plane._complete()
    routed = {o.source for o in broker.produced}
    assert {(0, o) for o in range(3000)} <= routed  # partition 0 went on alone
    assert not broker.paused


def test_without_the_grace_a_caught_up_partition_holds_nothing_back() -> None:
    logs = {0: [T0 + 2 * i for i in range(10)], 1: _backlog(parts=1)[0]}  # partition 0: 18 ms, then nothing
    plane, broker, clock = _plane(logs, align_ms=500)
    plane._batch()  # partition 0, all of it: held while partition 1 (records waiting) has no event time yet
    plane._batch()  # partition 1's first 3 s: partition 0 is caught up, so it does not count
    assert {o.source for o in broker.produced} == {(0, o) for o in range(10)} | {(1, o) for o in range(1500)}


def test_a_caught_up_partition_holds_the_others_for_the_idle_grace_only() -> None:
    logs = {0: [T0 + 2 * i for i in range(10)], 1: _backlog(parts=1)[0]}  # partition 0: 18 ms, then nothing
    plane, broker, clock = _plane(logs, align_ms=500)
    plane.align = EventTimeAlign(RAW, 500, cap=1500, clock=clock, idle_grace_s=0.5)
    plane.membership._forget_held = plane.align.forget
    plane._batch()  # partition 0, all of it: held while partition 1 (records waiting) has no event time yet
    plane._batch()  # partition 1's first 3 s: what lies past partition 0's 18 ms + 500 waits
    routed = {o.source for o in broker.produced}
    assert {(0, o) for o in range(10)} <= routed and (1, 259) in routed and (1, 260) not in routed
    assert plane.align.holding
    clock.now += 0.6  # partition 0 delivered nothing for longer than the grace
    _drain(plane, broker, clock)
    _everything_once(broker)


def test_no_pause_while_partitions_stay_within_align_ms() -> None:
    plane, broker, clock = _plane(_backlog(parts=2), align_ms=60_000)
    _drain(plane, broker, clock)
    _everything_once(broker)
    # once only: the first chunk waited for partition 1's first records (its event time was not known yet); it was
    # sought where it stood at the pause, and there again at the resume (librdkafka fetches it again at once)
    assert plane.align.pauses == 1 and broker.seeks == [(0, 1500), (0, 1500)]


def test_a_rebalance_that_restarts_a_partition_drops_its_held_records() -> None:
    align = EventTimeAlign(RAW, 100, cap=10, clock=Clock())
    consumer = Logs.__new__(Logs)
    consumer.paused, consumer.seeks, consumer.pos, consumer.logs = set(), [], {0: 0, 1: 0}, {0: [T0], 1: [T0]}

    def batch(*runs: tuple[int, range, int]) -> Extracted:
        ext = Extracted()
        for p, offsets, t0 in runs:
            ext.keys += ["k"] * len(offsets)
            ext.times += [t0 + 10 * i for i in range(len(offsets))]
            ext.measures += [None] * len(offsets)
            ext.values += [b"{}"] * len(offsets)
            ext.partitions += [p] * len(offsets)
            ext.offsets += list(offsets)
        return ext

    out = align.admit(consumer, batch((0, range(0, 10), T0), (1, range(0, 50), T0)), {0, 1})
    assert [o for p, o in zip(out.partitions, out.offsets, strict=True) if p == 1] == list(range(0, 20))
    newest = [max(out.times[: i + 1]) for i in range(len(out.times))]
    assert max(n - t for n, t in zip(newest, out.times, strict=True)) < 10  # merged in slices of a tenth of align_ms
    assert 1 in consumer.paused and (1, 50) in consumer.seeks  # 30 held (>= cap): paused, fetched past them dropped
    # the group rebalanced: partition 1 starts again from its commit (10) and the consumer's pause is gone
    out = align.admit(consumer, batch((1, range(10, 15), T0 + 100)), {0, 1})
    assert [o for p, o in zip(out.partitions, out.offsets, strict=True) if p == 1] == list(range(10, 15))
    assert not align.holding and not consumer.paused
    rewind = align.rewound(out, [SourceRecord(RAW, 1, 10, None, None)])
    assert {(r.partition(), r.offset()) for r in rewind} == {(1, 10)}


def test_the_data_plane_gives_a_caught_up_partition_align_ms_of_grace() -> None:
    router = RouterSettings(instance_id="w1", align_ms=1500)
    plane = RouteDataPlane(KafkaSettings(), router, RouteSettings(raw_topic=RAW), RouterMetrics("w1"), instance_id="w1")
    assert plane.align.idle_grace_s == 1.5 and plane.align.cap == router.batch_max_records
    off = RouteDataPlane(KafkaSettings(), RouterSettings(instance_id="w1"), RouteSettings(raw_topic=RAW),
                         RouterMetrics("w1"), instance_id="w1")  # fmt: skip
    assert not off.align.enabled


@pytest.mark.parametrize(
    ("value", "message"),
    [(-1, r"router\.align_ms: Input should be greater than or equal to 0 \(got -1\)"),
     ("soon", r"router\.align_ms: Input should be a valid integer.*\(got 'soon'\)")],
)  # fmt: skip
def test_align_ms_names_the_field_and_the_value(value: Any, message: str) -> None:
    from schemas.exceptions import ConfigError
    from schemas.settings import SkewrouteSettings

    with pytest.raises(ConfigError, match=message):
        SkewrouteSettings.load(router={"align_ms": value})
    assert SkewrouteSettings.load(router={"align_ms": 0}).router.align_ms == 0
    assert SkewrouteSettings.load().router.align_ms == 0  # off by default


def test_a_rebalance_callback_drops_the_held_records_of_its_partitions() -> None:
    """Revoked and assigned again inside one consume() (eager): the assignment looks the same afterwards, but the
    partition restarts from its commit, so what was held of it must never be routed (exactly_once: twice)."""
    plane, broker, clock = _plane(_backlog(parts=2, records=3000), align_ms=100, chunk=1500, cap=1500)
    for _ in range(3):
        clock.now += 0.01
        plane._batch()
    held = sorted(plane.align.held)
    assert held  # one partition ran ahead: its records are held
    tps = [TopicPartition(RAW, p) for p in sorted(broker.logs)]
    skip = lambda consumer, parts: None  # noqa: E731 - the in-memory broker keeps no group offsets to check
    plane.membership._check_committed = plane.membership._check_retention = skip  # type: ignore[method-assign]
    plane.membership.on_revoke(broker, tps)  # the callbacks the plane subscribes with
    plane.membership.on_assign(broker, tps)
    assert plane.membership.assignment == set(broker.logs)
    assert not plane.align.holding and not plane.align.paused
    assert all(p not in plane.align.front for p in held)


def test_the_route_metrics_count_pauses_and_show_the_records_held() -> None:
    plane, broker, clock = _plane(_backlog(parts=3), align_ms=100, chunk=1000, cap=500)
    held = []
    for _ in range(4):
        clock.now += 0.01
        plane._batch()
        held.append(plane.metrics.aligned_held._value.get())  # type: ignore[attr-defined]
    assert max(held) > 0 and held[-1] == plane.align.held_records
    _drain(plane, broker, clock)
    _everything_once(broker)
    assert plane.align.pauses > 0
    assert plane.metrics.aligned_pauses._value.get() == plane.align.pauses  # type: ignore[attr-defined]
    assert plane.metrics.aligned_held._value.get() == 0  # type: ignore[attr-defined]


def test_records_taken_in_small_steps_out_of_a_large_hold_come_out_whole_and_in_order() -> None:
    from router.plane_held import Held

    ext = Extracted()
    n = 1000
    ext.keys, ext.times, ext.measures = [f"k{i}" for i in range(n)], [T0 + i for i in range(n)], [None] * n
    ext.values, ext.partitions, ext.offsets = [b"{}"] * n, [0] * n, list(range(100, 100 + n))
    held = Held()
    held.add(ext, 0, 600, np.asarray(ext.times[:600], dtype=np.int64))
    got: list[int] = []
    for step in (1, 7, 50, 200):  # the first steps leave the taken records in place, a later one compacts
        assert held.first() == 100 + len(got) and held.last() == 699
        got += held.records(0, step)[4]
        held.take(step)
        assert len(held) == 600 - len(got) and held.ts[0] == T0 + len(got)
    held.add(ext, 600, n, np.asarray(ext.times[600:], dtype=np.int64))
    held.drop_from(900)  # a rebalance: from offset 900 on it is read again
    got += held.records(0, len(held))[4]
    assert got == list(range(100, 900)) and held.last() == 899
