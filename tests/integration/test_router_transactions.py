"""``delivery=exactly_once``: each batch's routed records, dead letters and raw offsets in one transaction."""

from __future__ import annotations

import pytest

from schemas.settings import KafkaSettings
from tests.integration.router_support import (
    committed,
    end_offsets,
    multiset_in,
    multiset_out,
    produce,
    routed,
    run_plane,
    settings,
    zipf_records,
)

pytestmark = pytest.mark.kafka


@pytest.mark.both_brokers
def test_exactly_once_route_commits_outputs_with_offsets(kafka: KafkaSettings, topic: str) -> None:
    records: list[tuple[bytes | None, bytes | None]] = list(zipf_records(5000, seed=9))
    records.insert(1234, (None, b"not json"))
    produce(kafka, topic, records)
    s = settings(
        kafka,
        topic,
        f"app-{topic}",
        partitioner={"name": "fish"},
        router={"delivery": "exactly_once", "instance_id": "w1"},
    )
    route = s.routes[0]
    plane = run_plane(s, len(records))
    assert (plane.stats.routed, plane.stats.dead) == (5000, 1)
    out = routed(kafka, route.combiner_topic_name, expected=5000)
    assert multiset_out(out) == multiset_in(records[:1234] + records[1235:])
    assert all(rec.partition == d["c"] for rec, d in out)
    assert len(routed(kafka, route.dlq_topic_name, expected=1)) == 1
    assert committed(kafka, plane.group_id, topic) == end_offsets(len(records))  # offsets went in the transactions
