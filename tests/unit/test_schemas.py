import orjson
import pytest

from schemas.control import ControlMessageError, GlobalMessage, SyncMessage, encode_control, parse_control
from schemas.records import RoutedRecord, encode_routed, routed_spark_schema


def test_fast_encoder_matches_model() -> None:
    raw = b'{"user":"u1","amount":2.5,"tags":["a"]}'
    fast = encode_routed("u1", 1_700_000_000_000, 3, "raw", 2, 41, 2.5, raw)
    model = RoutedRecord(
        key="u1",
        event_time=1_700_000_000_000,
        combiner=3,
        topic="raw",
        partition=2,
        offset=41,
        measure=2.5,
        value=orjson.loads(raw),
    )
    assert fast == model.to_json()
    back = RoutedRecord.from_json(fast)
    assert (back.key, back.combiner, back.offset, back.measure) == ("u1", 3, 41, 2.5)


def test_spark_schema_covers_every_wire_field() -> None:
    fields = [f.name for f in routed_spark_schema().fields]
    wire = list(orjson.loads(encode_routed("k", 1, 0, "t", 0, 0, None, b"null")))
    assert fields == wire


def test_control_round_trip() -> None:
    s = SyncMessage(
        deployment="d", route="r", instance="i1", seq=3, records=10, q_table={"7": [0.1, -2.0]}, top_keys=[("7", 9)]
    )
    assert parse_control(encode_control(s)) == s
    g = GlobalMessage(deployment="d", route="r", reducer="i1", round=1, dsync_ms=500, hot_keys={"7": 9})
    assert parse_control(encode_control(g)) == g


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[1]",
        b'{"v":2,"type":"sync"}',
        b'{"v":1,"type":"other","deployment":"d","route":"r"}',
        b'{"v":1,"type":"sync","deployment":"d","route":"r","instance":"i","seq":-1,"records":0}',
    ],
)
def test_malformed_control_rejected(raw: bytes) -> None:
    with pytest.raises(ControlMessageError):
        parse_control(raw)


def test_control_sync_fields_match_the_partitioner_payload() -> None:
    s = SyncMessage(deployment="d", route="r", instance="i1", seq=0, records=5, combiners=2,
                    q_table={"18446744073709551615": [0.0, -1.0]}, weights={"18446744073709551615": 4},
                    stats_window=12, due_ms=1000)  # fmt: skip
    back = parse_control(encode_control(s))
    assert back == s and isinstance(back, SyncMessage) and back.weights == {"18446744073709551615": 4}
    g = GlobalMessage(deployment="d", route="r", reducer="i1", round=0, dsync_ms=500, seqs={"i1": 0}, expired=["3"])
    assert parse_control(encode_control(g)) == g


@pytest.mark.parametrize(
    "change",
    [
        {"q_table": {"k7": [0.0, 0.0]}},
        {"q_table": {"18446744073709551616": [0.0, 0.0]}},
        {"q_table": {"7": [0.0]}},
        {"top_keys": [["x", 1]]},
        {"weights": {"-1": 3}},
    ],
)
def test_control_rejects_bad_key_ids_and_rows(change: dict[str, object]) -> None:
    base = orjson.loads(encode_control(SyncMessage(deployment="d", route="r", instance="i", seq=0, records=0,
                                                   combiners=2)))  # fmt: skip
    with pytest.raises(ControlMessageError):
        parse_control(orjson.dumps({**base, **change}))
