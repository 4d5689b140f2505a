"""Rebalance and commit handling of the data plane, with fake clients (the broker paths are in the integration
tests): on_lost drops the batch in flight, commit results count per partition, exactly_once retries retriable
errors in place, and the delivery wait has a deadline."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from router.dataplane import RouteDataPlane
from router.extract import SourceRecord
from router.observability import RouterMetrics
from router.plane_parts import DeliveryError, PendingBatch, offset_ranges
from schemas.records import DeadLetter
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings


class FakeConsumer:
    def __init__(self, refuse: set[int] | None = None) -> None:
        self.refuse = refuse or set()
        self.commits: list[list[TopicPartition]] = []
        self.seeks: list[tuple[int, int]] = []

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[Any]:
        self.commits.append(offsets)
        return [
            SimpleNamespace(
                partition=tp.partition,
                offset=tp.offset,
                error=KafkaError(KafkaError.REBALANCE_IN_PROGRESS) if tp.partition in self.refuse else None,
            )
            for tp in offsets
        ]

    def consumer_group_metadata(self) -> object:
        return object()

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))


class FakeProducer:
    def __init__(
        self,
        commit_errors: list[KafkaError] | None = None,
        unflushed: int = 0,
        offsets_errors: list[KafkaError] | None = None,
    ) -> None:
        self.commit_errors = commit_errors or []
        self.offsets_errors = offsets_errors or []
        self.calls: list[str] = []
        self.unflushed = unflushed
        self.produced: list[tuple[str, bytes]] = []

    def flush(self, timeout: float) -> int:
        return self.unflushed

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, *a: Any) -> None:
        self.calls.append("offsets")
        if self.offsets_errors:
            raise KafkaException(self.offsets_errors.pop(0))

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        if self.commit_errors:
            raise KafkaException(self.commit_errors.pop(0))

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")

    def produce(self, topic: str, value: bytes, *a: Any, **kw: Any) -> None:
        self.calls.append("produce")
        self.produced.append((topic, value))

    def poll(self, timeout: float) -> int:
        return 0

    def __len__(self) -> int:
        return self.unflushed


def _plane(delivery: str = "at_least_once", consumer: dict[str, Any] | None = None) -> RouteDataPlane:
    router = RouterSettings(delivery=delivery, instance_id="w1")  # type: ignore[arg-type]
    kafka = KafkaSettings(consumer=consumer or {})
    return RouteDataPlane(kafka, router, RouteSettings(raw_topic="raw"), RouterMetrics("w1"), instance_id="w1")


def _batch(parts: list[int]) -> PendingBatch:
    return PendingBatch([TopicPartition("raw", p, 10 + p) for p in parts], 5, 5, 0, 0.0, 0.0)


def test_lost_partitions_drop_the_batch_in_flight_without_committing() -> None:
    plane = _plane()
    plane.consumer, plane.producer = FakeConsumer(), FakeProducer()  # type: ignore[assignment]
    plane.membership.assignment = {0, 1}
    plane.output.in_flight.add(_batch([0, 1]))
    plane.membership.on_lost(plane.consumer, [TopicPartition("raw", 0), TopicPartition("raw", 1)])
    assert len(plane.output.in_flight) == 0 and plane.assignment == set()
    assert plane.consumer.commits == [] and plane.output.committed == {}  # type: ignore[attr-defined]
    plane.membership.on_revoke(plane.consumer, [])  # nothing left to commit
    assert plane.consumer.commits == []  # type: ignore[attr-defined]


def test_commit_results_count_per_partition() -> None:
    plane = _plane()
    plane.consumer, plane.producer = FakeConsumer(refuse={1}), FakeProducer()  # type: ignore[assignment]
    plane.output.in_flight.add(_batch([0, 1]))
    plane._complete()
    assert plane.output.committed == {0: 10}  # partition 1's commit was refused: not marked
    assert plane.health.last_commit is not None


def test_exactly_once_retries_a_retriable_commit_instead_of_aborting() -> None:
    plane = _plane("exactly_once")
    plane.consumer = FakeConsumer()  # type: ignore[assignment]
    plane.producer = FakeProducer([KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True)])  # type: ignore[assignment]
    ext = plane.extractor.extract([])
    batch = _batch([0])
    plane.output.transact(ext, plane._assign(ext, 0), batch)
    assert plane.producer.calls == ["begin", "offsets", "commit", "commit"]  # type: ignore[attr-defined]
    assert plane.output.committed == {0: 10}


def test_exactly_once_aborts_only_abortable_errors() -> None:
    plane = _plane("exactly_once")
    plane.consumer = FakeConsumer()  # type: ignore[assignment]
    abortable = KafkaError(KafkaError._OUTDATED, "abort me", txn_requires_abort=True)
    plane.producer = FakeProducer([abortable])  # type: ignore[assignment]
    ext = plane.extractor.extract([])
    plane.output.transact(ext, plane._assign(ext, 0), _batch([0]))
    calls = plane.producer.calls  # type: ignore[attr-defined]
    assert calls == ["begin", "offsets", "commit", "abort", "begin", "offsets", "commit"]


def test_exactly_once_aborts_and_rereads_the_batch_when_the_group_membership_is_gone() -> None:
    # A broker failover can expire the consumer's session mid-transaction: the offset commit then fails with
    # UNKNOWN_MEMBER_ID, which no retry of the same transaction can fix (found on a 3-node Apache Kafka).
    plane = _plane("exactly_once")
    plane.consumer = FakeConsumer()  # type: ignore[assignment]
    gone = KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "member gone", txn_requires_abort=True)
    plane.producer = FakeProducer(offsets_errors=[gone] * 10)  # type: ignore[assignment]
    ext = plane.extractor.extract([])
    assert plane.output.transact(ext, plane._assign(ext, 0), _batch([0])) is False
    assert plane.producer.calls == ["begin", "offsets", "abort"]  # type: ignore[attr-defined]
    assert plane.output.committed == {}
    msgs = [SimpleNamespace(partition=lambda p=p: p, offset=lambda o=o: o) for p, o in [(0, 7), (1, 3), (0, 8)]]
    plane.membership.rewind(plane.consumer, msgs)  # type: ignore[arg-type]
    assert plane.consumer.seeks == [(0, 7), (1, 3)]  # type: ignore[attr-defined]


def test_delivery_wait_has_a_deadline_below_max_poll_interval() -> None:
    plane = _plane(consumer={"max.poll.interval.ms": 2_000})
    assert plane.output.deliver_s == 1.0
    plane.consumer, plane.producer = FakeConsumer(), FakeProducer(unflushed=3)  # type: ignore[assignment]
    with pytest.raises(DeliveryError, match="not acknowledged within"):
        plane.output.deliver([TopicPartition("raw", 0, 1)])
    assert plane.consumer.commits == []  # type: ignore[attr-defined]


def test_a_routed_record_the_broker_refuses_goes_to_the_dlq_and_the_batch_commits() -> None:
    plane = _plane()
    plane.consumer, plane.producer = FakeConsumer(), FakeProducer()  # type: ignore[assignment]
    routed = b'{"v":1,"k":"a","t":1,"c":0,"tp":"raw","p":0,"o":7,"x":null,"d":{"pad":"' + b"x" * 5000 + b'"}}'
    refused = SimpleNamespace(
        topic=lambda: "raw.combiners", key=lambda: b"a", value=lambda: routed, partition=lambda: 0,
        error=lambda: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE),
    )  # fmt: skip
    plane.output.failed = [refused]  # type: ignore[list-item]
    plane.output.in_flight.add(_batch([0]))
    plane._complete()
    ((topic, value),) = plane.producer.produced  # type: ignore[attr-defined]
    dl = DeadLetter.model_validate_json(value)
    assert topic == "raw.dlq" and (dl.partition, dl.offset) == (0, 7) and dl.truncated
    assert "refused the routed record" in dl.error and "MSG_SIZE_TOO_LARGE" in dl.error
    assert plane.output.committed == {0: 10} and (plane.stats.routed, plane.stats.dead) == (4, 1)


class _PickyProducer(FakeProducer):
    """Refuses one value for its size, and has a full queue once."""

    def __init__(self, too_big: bytes) -> None:
        super().__init__()
        self.too_big, self.full_once, self.keys = too_big, True, []  # type: ignore[var-annotated]

    def produce(self, topic: str, value: bytes, key: Any = None, partition: int = -1) -> None:
        if self.too_big in value:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        if self.full_once:
            self.full_once = False
            raise BufferError("queue full")
        self.keys.append((key, partition))
        super().produce(topic, value)


@pytest.mark.parametrize("fmt", [1, 2])
def test_produce_writes_the_chosen_format_and_returns_refused_records(fmt: int) -> None:
    from router.extract import Extracted
    from schemas.records import decode_routed_record, routed_version

    router = RouterSettings(instance_id="w1", routed_format=fmt)  # type: ignore[arg-type]
    plane = RouteDataPlane(KafkaSettings(), router, RouteSettings(raw_topic="raw"), RouterMetrics("w1"),
                           instance_id="w1")  # fmt: skip
    big = b'{"big":"' + b"x" * 50 + b'"}'
    ext = Extracted(["a", "b", "c"], [5, 6, 7], [None, 1.5, None], [b"{}", big, b"[1]"], [0, 1, 2], [10, 11, 12])
    plane.producer = _PickyProducer(big[-20:])  # type: ignore[assignment]
    import numpy as np

    refused = plane.output.produce(ext, np.array([3, 1, 0], dtype=np.int32))
    assert [(b.message.offset(), b.message.value()) for b in refused] == [(11, big)]  # the raw record
    assert plane.producer.keys == [("a", 3), ("c", 0)]  # type: ignore[attr-defined]
    got = [decode_routed_record(v, b"k", "raw.combiners", 0) for _, v in plane.producer.produced]  # type: ignore[attr-defined]
    assert [routed_version(v) for _, v in plane.producer.produced] == [fmt, fmt]  # type: ignore[attr-defined]
    assert [(d["p"], d["o"], d["t"], d["d"]) for d in got if d] == [(0, 10, 5, {}), (2, 12, 7, [1])]


def test_debug_logs_name_each_batchs_offsets_and_each_committed_transaction(caplog: Any) -> None:
    """``router.log_level: DEBUG``: the offset ranges of every batch, and the offsets a transaction committed
    (what a lost batch is traced with)."""
    msgs = [SourceRecord("raw", p, o, b"k", b"{}") for p, o in [(1, 5), (0, 7), (1, 6), (0, 8), (0, 9)]]
    assert offset_ranges(msgs) == "0: 7..9, 1: 5..6"
    plane = _plane("exactly_once")
    plane.consumer, plane.producer = FakeConsumer(), FakeProducer()  # type: ignore[assignment]
    ext = plane.extractor.extract([])
    with caplog.at_level(logging.DEBUG, logger="router.dataplane"):
        plane.output.transact(ext, plane._assign(ext, 0), _batch([0, 2]))
    assert "transaction committed, next offsets [(0, 10), (2, 12)]" in caplog.text
