"""Every registered partitioner delivers every record exactly once, to the combiner it chose."""

from __future__ import annotations

import pytest

from router.partitioners import available, create
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

N = 3000


@pytest.mark.parametrize("name", available())
def test_route_delivers_every_record_once_to_the_chosen_combiner(kafka: KafkaSettings, topic: str, name: str) -> None:
    records = zipf_records(N, seed=3)
    produce(kafka, topic, records)
    s = settings(kafka, topic, f"app-{topic}", window={"kind": "count", "size": 2000, "slide": 500})
    route = s.routes[0]
    plane = run_plane(s, N, partitioner=name)  # the algorithm with its default parameters
    assert plane.stats.routed == N and plane.stats.dead == 0

    out = routed(kafka, route.combiner_topic_name, expected=N)
    assert multiset_out(out) == multiset_in(records)  # nothing lost, nothing duplicated
    assert len({(d["tp"], d["p"], d["o"]) for _, d in out}) == N
    for rec, d in out:
        assert rec.partition == d["c"]  # produced to the partition the partitioner chose
        assert rec.key == d["k"].encode()
        assert 0 <= d["c"] < route.combiners
    if name == "hash":  # deterministic: recompute the choice per key
        ref = create("hash", route.combiners)
        keys = [d["k"] for _, d in out]
        assert ref.assign(keys).tolist() == [d["c"] for _, d in out]
    assert committed(kafka, plane.group_id, topic) == end_offsets(N)
    assert routed(kafka, route.dlq_topic_name) == []
