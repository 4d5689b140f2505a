"""The end probe: a micro-batch's plan settles a partition on the broker's first answer; a whole read waits for EOF.

``connectors.kafka_offsets.probe_partitions`` against a scripted consumer: a partition still being written
delivers new records on every call and never its EOF event (Tansu's EOF needs the probe caught up while the
last batch holds one record). With ``settle`` (a streaming micro-batch) the first records past the start settle
it. Without (the target of an ``availableNow`` query, a batch read) the probe reads to the EOF event, even when
the first answer holds records past the start: the first answer is not always the whole partition. A partition
whose records stay below its start waits for the EOF event either way.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from connectors.kafka_offsets import probe_partitions

TOPIC = "t.combiners"


class Msg:
    """The part of ``confluent_kafka.Message`` the probe reads."""

    def __init__(self, partition: int, offset: int, eof: bool = False) -> None:
        self._p, self._o, self._eof = partition, offset, eof

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def error(self) -> KafkaError | None:
        return KafkaError(KafkaError._PARTITION_EOF) if self._eof else None


class WrittenConsumer:
    """Watermarks as Tansu gives them; each ``consume()`` returns the next scripted answer (then the writers' next
    records, forever: the partitions are being written while the probe runs)."""

    def __init__(self, marks: dict[int, tuple[int, int]], answers: list[list[Msg]]) -> None:
        self.marks, self.answers, self.calls = marks, answers, 0
        self.assigned: list[TopicPartition] = []

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(cluster_id="tansu_cluster", topics={})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        return self.marks[tp.partition]

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = tps

    def unassign(self) -> None:
        self.assigned = []

    def consume(self, num_messages: int, timeout: float) -> list[Msg]:
        self.calls += 1
        if self.calls <= len(self.answers):
            return self.answers[self.calls - 1]
        base = 1_000 + 10 * self.calls  # still written: ten more records per partition per call, never an EOF
        return [Msg(p, base + i) for p in self.marks for i in range(10)]


def test_a_partition_still_written_is_settled_by_the_first_records_past_its_start() -> None:
    # the last batches start at 400 and 380 (Tansu's watermark: their start + 1); the first answer holds them
    first = [Msg(0, o) for o in range(400, 520)] + [Msg(1, o) for o in range(380, 505)]
    c = WrittenConsumer({0: (0, 401), 1: (0, 381)}, [first])
    res = probe_partitions(c, {TOPIC: {"0": 300, "1": 300}}, timeout=2.0, settle=True)  # type: ignore[arg-type]
    assert res.ends == {TOPIC: {"0": 520, "1": 505}}  # what the broker held when the probe asked
    assert c.calls == 1 and c.assigned == []  # no chase after the writers, and the consumer is released
    assert res.exact == set()


def test_without_settle_a_partition_is_read_to_its_eof_event() -> None:
    # the first answer stops short of the partition's end (1,280 records were missed this way by an availableNow
    # query that took it for the end); the EOF event comes with the third answer
    answers = [[Msg(0, o) for o in range(400, 520)], [Msg(0, o) for o in range(520, 1800)], [Msg(0, 1800, eof=True)]]
    c = WrittenConsumer({0: (0, 401)}, answers)
    res = probe_partitions(c, {TOPIC: {"0": 300}}, timeout=2.0)  # type: ignore[arg-type]
    assert res.ends == {TOPIC: {"0": 1800}} and res.exact == {(TOPIC, "0")}
    assert c.calls == 3


def test_an_end_below_the_start_still_waits_for_the_eof_event() -> None:
    # a recreated partition: 50 records, the checkpoint is at 300; only the EOF event says the end for certain
    answers = [[Msg(0, o) for o in range(49, 50)], [], [Msg(0, 50, eof=True)]]
    c = WrittenConsumer({0: (0, 50)}, answers)
    res = probe_partitions(c, {TOPIC: {"0": 300}}, timeout=2.0, settle=True)  # type: ignore[arg-type]
    assert res.ends == {TOPIC: {"0": 50}} and res.exact == {(TOPIC, "0")}
    assert c.calls == 3


def test_an_idle_partition_settles_on_its_eof_event_as_before() -> None:
    answers = [[Msg(0, 99), Msg(0, 100, eof=True)]]
    c = WrittenConsumer({0: (0, 100)}, answers)
    res = probe_partitions(c, {TOPIC: {"0": 100}}, timeout=2.0)  # type: ignore[arg-type]
    assert res.ends == {TOPIC: {"0": 100}} and res.exact == {(TOPIC, "0")}
