"""Pipelined data plane (``router.max_in_flight``), with fake clients that acknowledge records when a test says so.

Every commit is checked against the delivery contract: each raw record below a committed offset was routed and its
routed record (or its dead letter) acknowledged, whatever order Kafka acknowledged records in."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from router.dataplane import RouteDataPlane
from router.extract import SourceRecord
from router.observability import RouterMetrics
from router.plane_inflight import InFlight
from router.plane_parts import DeliveryError, PendingBatch
from schemas.records import decode_routed_record
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings

RAW = "raw"


class Raw(SourceRecord):
    """A consumed raw record (no consumer error)."""

    def error(self) -> None:
        return None


class Out:
    """One record handed to the fake producer."""

    def __init__(self, topic: str, value: bytes, key: Any, partition: int) -> None:
        self._t, self._v, self._k, self._p = topic, value, key, partition
        self.err: KafkaError | None = None
        if topic == "raw.dlq":
            doc = orjson.loads(value)
            self.source = (doc["partition"], doc["offset"])
        else:
            d = decode_routed_record(value, key.encode() if isinstance(key, str) else key, RAW, 0) or {}
            self.source = (d["p"], d["o"])

    def topic(self) -> str:
        return self._t

    def value(self) -> bytes:
        return self._v

    def key(self) -> bytes:
        return self._k.encode() if isinstance(self._k, str) else self._k

    def partition(self) -> int:
        return self._p

    def error(self) -> KafkaError | None:
        return self.err


class Broker:
    """Fake producer + consumer sharing one ledger: what was produced, acknowledged, committed, in order."""

    def __init__(self, plane: RouteDataPlane, batches: list[list[tuple[int, int]]]) -> None:
        self.plane = plane
        self.batches = list(batches)
        self.outstanding: list[Out] = []
        self.produced: list[Out] = []
        self.acked: set[tuple[int, int]] = set()  # source positions whose routed record or dead letter is acked
        self.events: list[tuple[str, Any]] = []
        self.commits: list[dict[int, int]] = []
        self.stuck = False  # flush() acknowledges nothing
        self.before_consume: Callable[[], None] = lambda: None

    # -- consumer --------------------------------------------------------------------------------
    def consume(self, n: int, timeout: float) -> list[Raw]:
        self.before_consume()
        if not self.batches:
            return []
        now = int(time.time() * 1000)
        return [Raw(RAW, p, o, None, b'{"key":"k%d"}' % (o % 3), now) for p, o in self.batches.pop(0)]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[Any]:
        for tp in offsets:  # the contract: nothing below a committed offset is unacknowledged
            missing = [o for o in range(tp.offset) if (tp.partition, o) not in self.acked]
            assert not missing, f"commit of partition {tp.partition} at {tp.offset} passes unacked {missing}"
        self.commits.append({tp.partition: tp.offset for tp in offsets})
        self.events.append(("commit", self.commits[-1]))
        return [SimpleNamespace(partition=tp.partition, offset=tp.offset, error=None) for tp in offsets]

    # -- producer --------------------------------------------------------------------------------
    def produce(self, topic: str, value: bytes, key: Any = None, partition: int = -1) -> None:
        out = Out(topic, value, key, partition)
        self.produced.append(out)
        self.outstanding.append(out)
        self.events.append(("produce", out.source))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        if not self.stuck:
            self.ack(lambda o: True)
        return len(self.outstanding)

    def __len__(self) -> int:
        return len(self.outstanding)

    def ack(self, which: Callable[[Out], bool], error: KafkaError | None = None) -> None:
        """Kafka answers for the outstanding records ``which`` selects: success, or ``error`` (reported)."""
        for out in [o for o in self.outstanding if which(o)]:
            self.outstanding.remove(out)
            if error is None:
                self.acked.add(out.source)
                self.events.append(("ack", out.source))
            else:
                out.err = error
                self.plane.output.on_error(error, out)  # type: ignore[arg-type]


def _plane(max_in_flight: int, batches: list[list[tuple[int, int]]]) -> tuple[RouteDataPlane, Broker]:
    router = RouterSettings(instance_id="w1", max_in_flight=max_in_flight, window_metrics=False)
    plane = RouteDataPlane(KafkaSettings(), router, RouteSettings(raw_topic=RAW), RouterMetrics("w1"), instance_id="w1")
    broker = Broker(plane, batches)
    plane.producer = plane.consumer = broker  # type: ignore[assignment]
    return plane, broker


def _of(*batches: list[tuple[int, int]]) -> Callable[[Out], bool]:
    """Selects the outputs of the raw records of the given batches."""
    positions = {pos for b in batches for pos in b}
    return lambda o: o.source in positions


B1 = [(0, 0), (0, 1), (1, 0)]
B2 = [(0, 2), (1, 1), (2, 0)]
B3 = [(0, 3), (2, 1)]


def test_a_later_batch_acknowledged_first_is_not_committed_before_the_earlier_one() -> None:
    plane, broker = _plane(3, [B1, B2, B3])
    plane._batch()  # B1 produced, nothing acknowledged
    plane._batch()  # B2 produced while B1 is in flight (no wait: 2 < max_in_flight)
    assert len(plane.output.in_flight) == 2 and broker.commits == []
    broker.ack(_of(B2))  # B2 acknowledged, B1 still not
    plane._batch()  # B3: B1 outstanding, so nothing is committed; B3 produced too
    assert broker.commits == [] and len(plane.output.in_flight) == 3
    broker.ack(_of(B1, B3))
    plane._batch()  # idle: everything acknowledged -> one commit covering B1..B3
    assert broker.commits == [{0: 4, 1: 2, 2: 2}]
    assert (plane.stats.consumed, plane.stats.routed, plane.stats.batches) == (8, 8, 3)
    assert plane.health.waiting_since is None and plane.output.committed == {0: 4, 1: 2, 2: 2}


def test_each_turn_commits_what_is_acknowledged_without_waiting() -> None:
    plane, broker = _plane(4, [B1, B2, B3])
    broker.stuck = True  # a flush would not help: the test fails if the loop waits
    broker.before_consume = lambda: broker.ack(lambda o: True)  # the broker keeps up
    plane._batch()
    plane._batch()  # B1 acknowledged: committed before B2 is produced
    plane._batch()
    assert broker.commits == [{0: 2, 1: 1}, {0: 3, 1: 2, 2: 1}]
    assert len(plane.output.in_flight) == 1  # B3, acknowledged at the next turn


def test_full_pipeline_waits_and_commits_before_producing_more() -> None:
    plane, broker = _plane(2, [B1, B2, B3])
    plane._batch()
    plane._batch()
    assert broker.commits == [] and len(plane.output.in_flight) == 2
    plane._batch()  # two batches out: wait for them (flush), commit, then produce B3
    assert broker.commits == [{0: 3, 1: 2, 2: 1}]
    first_b3 = broker.events.index(("produce", B3[0]))
    assert broker.events.index(("commit", broker.commits[0])) < first_b3
    assert len(plane.output.in_flight) == 1


def test_max_in_flight_one_is_the_one_batch_pipeline() -> None:
    plane, broker = _plane(1, [B1, B2])
    plane._batch()
    plane._batch()
    assert broker.commits == [{0: 2, 1: 1}]  # B1 committed before B2 was produced
    assert broker.events.index(("commit", {0: 2, 1: 1})) < broker.events.index(("produce", B2[0]))


def test_a_retriable_failure_in_an_earlier_batch_is_resent_and_acknowledged_before_any_commit() -> None:
    plane, broker = _plane(3, [B1, B2])
    plane._batch()
    plane._batch()
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT, "timed out", retriable=True)
    broker.ack(lambda o: o.source == (0, 1), error=timed_out)  # one record of B1 fails
    broker.ack(lambda o: True)  # all others acknowledged: the queue is empty
    assert (0, 1) not in broker.acked
    plane._batch()  # idle: deliver -> re-send (0, 1), wait for it, then commit B1 + B2
    assert [o.source for o in broker.produced].count((0, 1)) == 2
    assert broker.commits == [{0: 3, 1: 2, 2: 1}]  # the ledger checked (0, 1) was acked first
    assert broker.events.index(("ack", (0, 1))) < broker.events.index(("commit", broker.commits[0]))
    assert plane.metrics.retries._value.get() == 1  # type: ignore[attr-defined]


def test_a_record_the_broker_refuses_is_dead_lettered_and_acknowledged_before_the_commit() -> None:
    plane, broker = _plane(3, [B1, B2])
    plane._batch()
    plane._batch()
    broker.ack(lambda o: o.source == (1, 0), error=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))  # B1's record
    broker.ack(lambda o: True)
    plane._batch()
    letters = [o for o in broker.produced if o.topic() == "raw.dlq"]
    assert [o.source for o in letters] == [(1, 0)]
    assert broker.events.index(("ack", (1, 0))) < broker.events.index(("commit", broker.commits[0]))
    assert broker.commits == [{0: 3, 1: 2, 2: 1}]
    assert (plane.stats.consumed, plane.stats.routed, plane.stats.dead) == (6, 5, 1)


def test_the_wait_of_a_full_pipeline_has_the_delivery_deadline() -> None:
    plane, broker = _plane(2, [B1, B2, B3])
    plane.output.deliver_s = 0.5
    broker.stuck = True
    plane._batch()
    plane._batch()
    with pytest.raises(DeliveryError, match="not acknowledged within"):
        plane._batch()
    assert broker.commits == [] and len(plane.output.in_flight) == 2  # uncommitted: replayed after the restart


def test_revoke_delivers_and_commits_every_batch_in_flight_before_it_returns() -> None:
    plane, broker = _plane(4, [B1, B2, B3])
    for _ in range(3):
        plane._batch()
    assert len(plane.output.in_flight) == 3 and broker.commits == []
    plane.membership.assignment = {0, 1, 2}
    plane.membership.on_revoke(broker, [TopicPartition(RAW, p) for p in (0, 1, 2)])
    assert broker.commits == [{0: 4, 1: 2, 2: 2}] and len(plane.output.in_flight) == 0
    assert plane.assignment == set() and plane.stats.batches == 3


def test_lost_partitions_drop_every_batch_in_flight_uncommitted() -> None:
    plane, broker = _plane(4, [B1, B2, B3])
    for _ in range(3):
        plane._batch()
    plane.membership.on_lost(broker, [TopicPartition(RAW, p) for p in (0, 1, 2)])
    assert broker.commits == [] and len(plane.output.in_flight) == 0 and plane.output.committed == {}
    assert plane.metrics.dropped_batches._value.get() == 3  # type: ignore[attr-defined]
    plane._complete()  # nothing left to commit
    assert broker.commits == [] and plane.stats.consumed == 0


def test_clean_stop_commits_everything_in_flight() -> None:
    plane, broker = _plane(4, [B1, B2])
    plane._setup = lambda: None  # type: ignore[method-assign]
    plane._close = lambda: None  # type: ignore[method-assign]
    broker.before_consume = lambda: plane.stop() if len(plane.output.in_flight) == 2 else None
    plane._main()
    assert plane.error is None and broker.commits == [{0: 3, 1: 2, 2: 1}] and plane.stats.consumed == 6


def test_an_assignment_inside_close_checks_nothing_on_the_closing_consumer() -> None:
    """librdkafka can still assign partitions inside ``close()``; the checks would call a destroyed handle.

    Seen in CI (Apache Kafka): ``committed()`` failed with "Broker handle destroyed for termination", and
    confluent-kafka re-raised that out of ``close()`` as an object that is not an exception, which ended the
    data-plane thread past its error handling.
    """
    plane, broker = _plane(4, [B1, B2])
    plane._setup = lambda: None  # type: ignore[method-assign]
    broker.before_consume = lambda: plane.stop() if broker.commits else None
    destroyed = KafkaError(KafkaError._DESTROY, "Failed to get committed offsets: Local: Broker handle destroyed")

    def committed(parts: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        raise KafkaException(destroyed)

    def close() -> None:  # what librdkafka may do inside close(): serve one more assignment
        plane.membership.on_assign(broker, [TopicPartition(RAW, p) for p in (0, 1, 2)])

    broker.committed = committed  # type: ignore[attr-defined]
    broker.close = close  # type: ignore[attr-defined]
    plane._main()
    assert plane.error is None and plane.output.committed  # it ran, committed, then closed without a check
    assert plane.assignment == set()
    plane.membership.closing = False  # the same callback on an open consumer does check, and fails here
    with pytest.raises(KafkaException):
        plane.membership.on_assign(broker, [TopicPartition(RAW, p) for p in (0, 1, 2)])


def test_in_flight_books() -> None:
    inf = InFlight(2)
    assert inf.merged() is None and inf.oldest_consumed_at is None and not inf.full
    inf.add(PendingBatch([TopicPartition(RAW, 0, 5), TopicPartition(RAW, 1, 3)], 4, 4, 0, 1.0, 10.0))
    inf.add(PendingBatch([TopicPartition(RAW, 0, 9)], 2, 1, 1, 2.0, 11.0))
    assert inf.full and inf.oldest_consumed_at == 10.0
    assert sorted((tp.partition, tp.offset) for tp in inf.offsets()) == [(0, 9), (1, 3)]
    m = inf.merged()
    assert m is not None and (m.consumed, m.routed, m.dead, m.started) == (6, 5, 1, 1.0)
    a, b = inf.take(refused=2)  # the newest batch's only routed record, then one of the oldest's
    assert (a.routed, a.dead, b.routed, b.dead) == (3, 1, 0, 2) and len(inf) == 0
    with pytest.raises(ValueError, match="max_in_flight must be at least 1"):
        InFlight(0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, r"router\.max_in_flight: Input should be greater than or equal to 1 \(got 0\)"),
        (17, r"router\.max_in_flight: Input should be less than or equal to 16 \(got 17\)"),
    ],
)
def test_max_in_flight_bounds_name_the_field_and_the_value(value: int, message: str) -> None:
    from schemas.exceptions import ConfigError
    from schemas.settings import SkewrouteSettings

    with pytest.raises(ConfigError, match=message):
        SkewrouteSettings.load(router={"max_in_flight": value})
    assert SkewrouteSettings.load(router={"max_in_flight": 16}).router.max_in_flight == 16


def test_exactly_once_keeps_one_batch_in_flight_and_refuses_more() -> None:
    from schemas.exceptions import ConfigError
    from schemas.settings import SkewrouteSettings

    with pytest.raises(ConfigError, match=r"router: max_in_flight=3: exactly_once runs one transaction per batch"):
        SkewrouteSettings.load(router={"delivery": "exactly_once", "max_in_flight": 3})
    router = RouterSettings(delivery="exactly_once", instance_id="w1")  # the default applies to at_least_once only
    plane = RouteDataPlane(KafkaSettings(), router, RouteSettings(raw_topic=RAW), RouterMetrics("w1"), instance_id="w1")
    assert router.max_in_flight > 1 and plane.output.in_flight.limit == 1
    assert RouterSettings(delivery="exactly_once", instance_id="w1", max_in_flight=1).max_in_flight == 1


@pytest.mark.parametrize("strategy", ["", "cooperative-sticky"])
def test_tansu_partitions_never_committed_start_at_zero(strategy: str) -> None:
    """On Tansu, "earliest" can lie past records the partition holds (connectors.kafka_offsets.watermarks): a
    partition the group never committed is assigned at offset 0, a committed one at its committed offset."""
    plane, broker = _plane(2, [])
    if strategy:
        plane.membership.kafka = KafkaSettings(consumer={"partition.assignment.strategy": strategy})
    group = {0: 7, 2: 0}  # partition 1: nothing committed
    assigned: list[tuple[str, list[tuple[int, int]]]] = []

    def committed(parts: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(RAW, tp.partition, group.get(tp.partition, -1001)) for tp in parts]

    def record(how: str) -> Callable[[list[TopicPartition]], None]:
        return lambda parts: assigned.append((how, [(tp.partition, tp.offset) for tp in parts]))

    broker.committed = committed  # type: ignore[attr-defined]
    broker.assign = record("assign")  # type: ignore[attr-defined]
    broker.incremental_assign = record("incremental_assign")  # type: ignore[attr-defined]
    broker.get_watermark_offsets = lambda tp, timeout, cached: (0, 10)  # type: ignore[attr-defined]
    cluster = ["Yq3Xb1aJT8uR0nZ2oWcE4g"]
    broker.list_topics = lambda timeout: SimpleNamespace(cluster_id=cluster[0])  # type: ignore[attr-defined]
    parts = [TopicPartition(RAW, p) for p in (0, 1, 2)]
    plane.membership.on_assign(broker, parts)  # not on Tansu: librdkafka resolves the positions itself
    assert assigned == [] and plane.membership.start_at_zero is False
    cluster[0] = "tansu_cluster"
    plane.membership.on_assign(broker, parts)  # asked once, at the first assignment
    assert assigned == []
    plane.membership.start_at_zero = None  # a worker on Tansu
    plane.membership.on_assign(broker, parts)
    how = "incremental_assign" if strategy else "assign"
    assert assigned == [(how, [(0, 7), (1, 0), (2, 0)])]
    group[1] = 3  # every partition committed: nothing to set
    plane.membership.on_assign(broker, parts)
    assert len(assigned) == 1


@pytest.mark.parametrize(
    ("age_s", "advance_ms", "behind"),
    [(3_600.0, 60_000, True), (3_600.0, 100, False), (0.0, 100, False)],
    ids=["catching-up", "late-source-live", "live"],
)
def test_a_batch_far_behind_wall_clock_and_catching_up_tells_the_partitioner_it_is_a_backlog(
    age_s: float, advance_ms: int, behind: bool
) -> None:
    # Spark then reads micro-batches that span many slides, and one Dalton router keeps keys where they were. A
    # source whose event times lag wall clock but pass at its pace is live: its micro-batches are one slide.
    plane, broker = _plane(2, [B1, B1])
    told: list[bool] = []
    plane.partitioner.set_backlog = told.append  # type: ignore[method-assign]
    stamp = int((time.time() - age_s) * 1000) - advance_ms
    for step in (0, advance_ms):
        broker.consume = lambda n, timeout, t=stamp + step: [  # type: ignore[method-assign]
            Raw(RAW, p, o, None, b'{"key":"k%d"}' % o, t) for p, o in B1
        ]
        plane._batch()
        time.sleep(1.05)  # a pace slower than catching up is judged over a whole span of wall clock (1 s)
    assert told == [age_s > 0, behind] and len(broker.produced) == 2 * len(B1)  # first: behind is enough
