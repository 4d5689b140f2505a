"""The scan-cost benchmark's premise: its raw and routed topics hold the same records in the same layout."""

from __future__ import annotations

import pytest

from benchmarks.spark.scan_cost import write_topics
from benchmarks.topic_reader import read_topic
from connectors.broker import EmbeddedBroker
from schemas.records import V2_HEADS, decode_routed_record
from schemas.settings import KafkaSettings

pytestmark = pytest.mark.kafka


def test_raw_and_routed_topics_hold_the_same_records_in_the_same_places(broker: EmbeddedBroker, topic: str) -> None:
    kafka = KafkaSettings(bootstrap_servers=broker.bootstrap)
    write_topics(kafka, 3_000, 2, prefix=f"{topic}.")
    raw = read_topic(kafka, f"{topic}.raw", expected=3_000)
    routed = read_topic(kafka, f"{topic}.routed", expected=3_000)
    assert len(raw) == len(routed) == 3_000
    assert {r.partition for r in raw} == {0, 1}  # both combiners hold records
    for a, b in zip(raw, routed, strict=True):
        assert (a.partition, a.offset, a.key) == (b.partition, b.offset, b.key)
        doc = decode_routed_record(b.value, b.key, "routed", b.partition)
        assert doc is not None and doc["v"] == 2 and b.value is not None and b.value[V2_HEADS[b.value[0]] :] == a.value
        assert (doc["k"], doc["t"], doc["x"]) == (doc["d"]["k"], doc["d"]["t"], doc["d"]["x"])
