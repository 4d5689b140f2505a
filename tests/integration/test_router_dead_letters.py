"""Bad raw records land in the DLQ with the field and reason; the good records around them are all routed."""

from __future__ import annotations

import base64

import orjson
import pytest

from schemas.records import V2_HEADS, DeadLetter, RoutedRecord
from schemas.settings import KafkaSettings
from tests.integration.router_support import committed, end_offsets, produce, routed, run_plane, settings

pytestmark = pytest.mark.kafka

GOOD = b'{"user":{"id":"u%d"},"ts":%d,"amount":%d.5}'
#: (raw value, field the DLQ must name, words its error must contain)
BAD: list[tuple[bytes | None, str, str]] = [
    (b'{"user": ', "value", "not valid JSON"),
    (b'{"ts": 1, "amount": 1}', "user.id", "missing"),
    (b'{"user": {"id": "u9"}, "amount": 1}', "ts", "missing"),
    (b'{"user": {"id": "u9"}, "ts": "yesterday"}', "ts", "must be a number"),
    (b'{"user": {"id": "u9"}, "ts": 5, "pad": "' + b"x" * 400 + b'"}', "value", "limit 300"),
    (b'{"user": {"id": "\xff\xfe"}, "ts": 5}', "value", "not valid UTF-8"),
    (b"[1, 2, 3]", "value", "must be a JSON object"),
    (b'{"user": {"id": "u9"}, "ts": 6, "amount": "12"}', "amount", "must be a number"),
    (b'{"user": {"id": 1.5}, "ts": 6}', "user.id", "string or an integer"),
    (None, "value", "missing"),
]


def test_bad_records_are_dead_lettered_and_good_ones_kept(kafka: KafkaSettings, topic: str) -> None:
    records: list[tuple[bytes | None, bytes | None]] = []
    good: list[bytes] = []
    for i in range(400):
        if i % 20 == 7:
            records.append((b"kk", BAD[(i // 20) % len(BAD)][0]))
        else:
            v = GOOD % (i % 13, 1_000 + i, i)
            good.append(v)
            records.append((None, v))
    records.append((None, b'{"user": {"id": 42}, "ts": 1.7e3}'))  # integer key, float ms: fine, no measure
    good.append(records[-1][1])  # type: ignore[arg-type]
    produce(kafka, topic, records)
    s = settings(
        kafka,
        topic,
        f"app-{topic}",
        key={"source": "field", "field": "user.id"},
        time={"source": "field", "field": "ts", "unit": "ms"},
        value_field="amount",
        max_record_bytes=300,
        partitioner={"name": "hash"},
    )
    route = s.routes[0]
    plane = run_plane(s, len(records))
    n_bad = len(records) - len(good)
    assert (plane.stats.routed, plane.stats.dead) == (len(good), n_bad)

    out = [RoutedRecord.model_validate(d) for _, d in routed(kafka, route.combiner_topic_name, expected=len(good))]
    assert sorted(orjson.dumps(r.value) for r in out) == sorted(orjson.dumps(orjson.loads(v)) for v in good)
    by_value = {orjson.dumps(r.value): r for r in out}
    r = by_value[orjson.dumps(orjson.loads(GOOD % (3, 1_003, 3)))]
    assert (r.key, r.event_time, r.measure) == ("u3", 1_003, 3.5)
    r = by_value[b'{"user":{"id":42},"ts":1700.0}']
    assert (r.key, r.event_time, r.measure) == ("42", 1700, None)

    dlq = routed(kafka, route.dlq_topic_name, expected=n_bad)
    assert len(dlq) == n_bad
    sent = {(i % 4, i // 4): v for i, (_, v) in enumerate(records)}  # round-robin: (partition, offset) -> value
    for _, doc in dlq:
        dl = DeadLetter.model_validate(doc)
        original = sent[(dl.partition, dl.offset)]
        expect = next(b for b in BAD if b[0] == original)
        assert dl.field == expect[1] and expect[2] in dl.error, (dl.error, original)
        assert dl.error.startswith(f"{dl.field}: ")
        assert dl.route == route.route_name and dl.topic == topic
        assert (base64.b64decode(dl.value_b64) if dl.value_b64 is not None else None) == original
        assert dl.key_b64 == base64.b64encode(b"kk").decode()
    assert committed(kafka, plane.group_id, topic) == end_offsets(len(records))


def test_kafka_key_source_rejects_missing_and_non_utf8_keys(kafka: KafkaSettings, topic: str) -> None:
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"a", b'{"x": 1}'),
        (None, b'{"x": 2}'),
        (b"\xc3\x28", b'{"x": 3}'),
        (b"b", b"17"),  # any JSON value is fine when nothing is read from it
        (b"a", b'"text"'),
    ]
    produce(kafka, topic, records)
    s = settings(kafka, topic, f"app-{topic}", key={"source": "kafka_key"}, partitioner={"name": "pkg"})
    route = s.routes[0]
    run_plane(s, len(records))
    out = routed(kafka, route.combiner_topic_name, expected=3)
    assert sorted((d["k"], orjson.dumps(d["d"])) for _, d in out) == [("a", b'"text"'), ("a", b'{"x":1}'), ("b", b"17")]
    dlq = sorted(DeadLetter.model_validate(d).error for _, d in routed(kafka, route.dlq_topic_name, expected=2))
    assert dlq == ["key: the Kafka key is missing", "key: the Kafka key is not valid UTF-8"]


def test_kafka_key_route_under_format_2_routes_values_that_are_not_json(kafka: KafkaSettings, topic: str) -> None:
    """Key and time from Kafka, no measure: format 2 carries the value as opaque bytes, so Avro-like or text
    values are routed byte for byte (format 1, which embeds them in JSON, dead-letters them)."""
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"a", b"\x00\x00\x00\x00\x01\x02avro"), (b"b", b"plain text"), (b"a", b'{"x": 1}'), (None, b"no key"),
    ]  # fmt: skip
    produce(kafka, topic, records)
    s = settings(kafka, topic, f"app-{topic}", key={"source": "kafka_key"}, router={"routed_format": 2})
    route = s.routes[0]
    run_plane(s, len(records))
    out = routed(kafka, route.combiner_topic_name, expected=3)
    got = sorted((d["k"], r.value[V2_HEADS[r.value[0]] :], (d["p"], d["o"])) for r, d in out)
    sent = {v: (i % 4, i // 4) for i, (_, v) in enumerate(records)}  # round-robin: value -> (partition, offset)
    assert got == sorted((k.decode(), v, sent[v]) for k, v in records[:3])  # type: ignore[union-attr,index]
    dlq = [DeadLetter.model_validate(d).error for _, d in routed(kafka, route.dlq_topic_name, expected=1)]
    assert dlq == ["key: the Kafka key is missing"]
