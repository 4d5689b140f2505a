"""The reliability tests' verifier checks what the combiner topic holds, not what one streaming read saw.

On Tansu a reader fetching while several transactional producers write one partition can step past a batch that
the topic does hold (reproduced in router/DATAPLANE.md, "What Tansu does with transactions"). The verifier then
asks a fresh reader once; here its streaming view is made to miss records on purpose, and records that were never
written must stay missing.
"""

from __future__ import annotations

import pytest

from benchmarks.soak_parts import Verifier
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin, make_producer
from schemas.records import encode_routed_v2
from schemas.settings import KafkaSettings

pytestmark = [pytest.mark.kafka]


def test_positions_only_a_fresh_reader_sees_are_recovered_and_absent_ones_stay_missing(
    kafka: KafkaSettings, topic: str
) -> None:
    combiners = f"{topic}.combiners"
    ensure_topics(make_admin(kafka), [TopicSpec(combiners, 2)])
    producer = make_producer(kafka)
    for o in range(100):
        producer.produce(combiners, encode_routed_v2(1_700_000_000_000 + o, 0, o, None, b'{"i": %d}' % o),
                         f"k{o % 7}", o % 2)  # fmt: skip
    assert producer.flush(30) == 0
    written = {(topic, 0, o) for o in range(100)}
    verifier = Verifier(kafka, combiners, 2).keep_values()
    try:
        assert verifier.wait_for(written, 30) and verifier.stepped_past == 0
        for o in range(10, 20):  # as if the streaming read had stepped past these
            del verifier.seen[(topic, 0, o)]
            del verifier.first[(topic, 0, o)]
            verifier.records -= 1
        assert verifier.wait_for(written, 0)  # the fresh reader finds them in the topic
        assert verifier.stepped_past == 10 and set(verifier.seen) == written
        assert verifier.first[(topic, 0, 15)]["d"] == {"i": 15}
        assert not verifier.wait_for(written | {(topic, 0, 100), (topic, 1, 0)}, 0)  # never written: missing
        assert verifier.stepped_past == 10 and verifier.duplicates == 0  # fresh reads add no copies of seen ones
    finally:
        verifier.close()
