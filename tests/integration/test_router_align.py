"""A backlog routed with ``router.align_ms``: each combiner partition fills in event-time order, everything once."""

from __future__ import annotations

import orjson
import pytest

from schemas.settings import KafkaSettings
from tests.integration.router_support import (
    RAW_PARTITIONS,
    committed,
    end_offsets,
    lateness,
    multiset_in,
    multiset_out,
    produce,
    routed,
    run_plane,
    settings,
)

pytestmark = pytest.mark.kafka

T0 = 1_700_000_000_000


def test_a_backlog_is_routed_in_event_time_order_within_align_ms(kafka: KafkaSettings, topic: str) -> None:
    # record i is in raw partition i % 4 at event time T0 + i // 4 ms: every raw partition spans the same 10 s
    records = [(f"k{i % 97}".encode(), orjson.dumps({"key": f"k{i % 97}", "t": T0 + i // 4})) for i in range(40_000)]
    produce(kafka, topic, records)  # the whole backlog before the worker starts
    s = settings(kafka, topic, f"app-{topic}", time={"source": "field", "field": "t", "unit": "ms"},
                 router={"align_ms": 200, "batch_max_records": 4000})  # fmt: skip
    plane = run_plane(s, len(records))
    out = routed(kafka, s.routes[0].combiner_topic_name, expected=len(records))
    assert multiset_out(out) == multiset_in(records)  # every record exactly once
    assert committed(kafka, plane.group_id, topic) == end_offsets(len(records))
    assert max(lateness(out, c) for c in range(4)) <= 200
    assert plane.align.most <= RAW_PARTITIONS * 2 * 4000  # at most a batch's worth + one batch per partition
