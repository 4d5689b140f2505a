"""Where a partition's log starts: the low watermark on Apache Kafka, 0 on Tansu (whose low watermark can lie
past records it holds: ``connectors.kafka_offsets.watermarks``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import TopicPartition

from connectors.kafka_offsets import watermarks
from connectors.retention import LostRange, find_lost_ranges


class FakeConsumer:
    """The broker calls ``watermarks`` and ``find_lost_ranges`` make, on fixed answers."""

    def __init__(self, cluster_id: str, marks: dict[int, tuple[int, int]], committed: dict[int, int]) -> None:
        self.cluster_id, self.marks, self._committed = cluster_id, marks, committed
        self.cached: list[bool] = []

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(cluster_id=self.cluster_id, topics={})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        self.cached.append(cached)
        return self.marks[tp.partition]

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self._committed.get(tp.partition, -1001)) for tp in tps]


def test_tansu_log_starts_at_zero_whatever_its_low_watermark_says() -> None:
    c = FakeConsumer("tansu_cluster", {0: (1, 23), 1: (0, 17)}, {})
    assert watermarks(c, [TopicPartition("t", 0), TopicPartition("t", 1)]) == [(0, 23), (0, 17)]
    assert c.cached == [False, False]  # asked of the broker, never librdkafka's cache


def test_apache_kafka_log_starts_at_the_low_watermark() -> None:
    c = FakeConsumer("Yq3Xb1aJT8uR0nZ2oWcE4g", {0: (500, 900)}, {})
    assert watermarks(c, [TopicPartition("t", 0)]) == [(500, 900)]
    assert watermarks(c, []) == []


def test_retention_check_reports_loss_on_kafka_and_none_on_tansu() -> None:
    marks, committed = {0: (1, 40), 1: (0, 40), 2: (30, 40)}, {0: 0, 2: 12}  # partition 1: nothing committed
    kafka = FakeConsumer("Yq3Xb1aJT8uR0nZ2oWcE4g", marks, committed)
    assert find_lost_ranges(kafka, "raw", [0, 1, 2]) == [LostRange("raw", 0, 0, 1), LostRange("raw", 2, 12, 30)]
    # the same answers from Tansu: it has no retention, so a low watermark past a committed offset is its quirk
    assert find_lost_ranges(FakeConsumer("tansu_cluster", marks, committed), "raw", [0, 1, 2]) == []
