import math

import orjson
import pytest

from schemas.control import ControlMessageError, GlobalMessage, SyncMessage, encode_control, parse_control
from schemas.records import (
    V2_HEADS,
    V2_MEASURE,
    RoutedRecord,
    decode_routed_record,
    encode_routed,
    encode_routed_v2,
    encode_routed_v2_batch,
    routed_spark_schema,
    routed_version,
    source_topic,
    v2_layout,
)


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


def test_format_2_batch_encoder_decodes_back_in_every_layout() -> None:
    raws = [b'{"a":1}', b"", b"\x00binary"]
    parts = [0, 7, 65_535]
    cases = [  # (compact, times, offsets, measures, the batch's tag)
        (False, [1, 2**52, 0], [0, 2**62, 5], [None, None, None], 0x02),
        (False, [1, 2**52, 0], [0, 2**62, 5], [None, -0.5, 1e300], 0x12),
        (False, [1, 2, 3], [0, 1, 5], [None, -0.5, 7.0], 0x12),
        (True, [1, 2**52, 0], [0, 2**62, 5], [None, None, None], 0x02),
        (True, [1, 2**48 - 1, 0], [0, 2**48 - 1, 5], [None, None, None], 0x22),
        (True, [1, 2**48, 0], [0, 5, 5], [None, None, None], 0x02),
        (True, [1, 2, 3], [0, 2**48, 5], [None, -0.5, 7.0], 0x52),
        (True, [1, 2, 3], [0, 1, 5], [None, -0.5, 7.0], 0x72),
        (True, [1, 2, 3], [0, 1, 5], [None, -0.5, 0.1], 0xB2),
        (True, [1, 2, 3], [0, 2**48, 5], [None, -0.5, 0.1], 0x92),
        (True, [1, 2, 3], [0, 1, 5], [None, 12.34, -21_474_836.47], 0xB2),
        (True, [1, 2, 3], [0, 1, 5], [None, 1e-9, -0.000_000_001], 0xB2),
        (True, [1, 2, 3], [0, 1, 5], [None, 2.0**31 - 1, -(2.0**31) + 1], 0xB2),
        (True, [1, 2, 3], [0, 1, 5], [None, 16_777_217.0, 0.0], 0xB2),
        (True, [1, 2, 3], [0, 1, 5], [None, -0.5, 1e300], 0x32),
        (True, [1, 2, 3], [0, 1, 5], [None, -0.5, 5e-324], 0x32),
        (True, [1, 2, 3], [0, 1, 5], [None, -0.5, 0.1 + 0.2], 0x32),
        (True, [1, 2, 3], [0, 1, 5], [None, 2.0**31, 0.1], 0x32),
        (True, [1, 2, 3], [0, 1, 5], [None, -(2.0**31), 0.1], 0x32),
        (True, [1, 2, 3], [0, 1, 5], [None, 1e-10, 0.1], 0x32),
        (True, [1, 2, 3], [0, 1, 5], [None, -0.0, 0.1], 0x32),
        (True, [1, 2, 3], [0, 1, 5], [None, 16_777_216.0, -0.0], 0x72),
        (False, [1, 2, 3], [0, 1, 5], [None, -0.5, 0.1], 0x12),
    ]
    for compact, times, offs, measures, tag in cases:
        batch = encode_routed_v2_batch(times, parts, offs, measures, raws, compact=compact)
        head = V2_HEADS[tag]
        for v, raw, t, p, o, x in zip(batch, raws, times, parts, offs, measures, strict=True):
            assert v[0] == tag and len(v) == head + len(raw) and v[head:] == raw and routed_version(v) == 2
            d = decode_routed_record(v, b"key", "clicks.combiners", 3)
            assert d is not None
            assert (d["k"], d["t"], d["c"], d["tp"], d["p"], d["o"], d["x"]) == ("key", t, 3, "clicks", p, o, x)
            assert x is None or math.copysign(1.0, d["x"]) == math.copysign(1.0, x)
            single = encode_routed_v2(t, p, o, x if x is not None or tag & V2_MEASURE == 0 else math.nan, raw,
                                      compact=compact)  # fmt: skip
            assert single == v or v2_layout(single[0]) != v2_layout(tag)  # alone, a record may fit a smaller layout
    assert V2_HEADS == {0x02: 19, 0x12: 27, 0x22: 15, 0x32: 23, 0x52: 23, 0x72: 19, 0x92: 24, 0xB2: 20}


def test_the_decimal_layout_takes_the_least_scale_the_whole_batch_needs() -> None:
    """Prices of 2 decimals need d = 2 even where some are whole; a measure of more places raises d for all."""
    for measures, scale in (([12.0, 3.5, 0.25], None), ([12.0, 0.05, 3.0], 2), ([1.0] * 70 + [0.001], 3)):
        batch = encode_routed_v2_batch([1] * len(measures), [0] * len(measures), [0] * len(measures), measures,
                                       [b"{}"] * len(measures))  # fmt: skip
        if scale is None:  # halves and quarters: a single
            assert batch[0][0] == 0x72
            continue
        assert {v[0] for v in batch} == {0xB2} and {v[19] for v in batch} == {scale}
        assert [decode_routed_record(v, None, "t", 0)["x"] for v in batch] == measures  # type: ignore[index]


def test_format_2_refuses_partitions_it_cannot_carry() -> None:
    with pytest.raises(ValueError, match="routed_format=1"):
        encode_routed_v2_batch([1], [65_536], [0], [None], [b"{}"])


def test_versions_are_told_apart_by_the_first_byte() -> None:
    v1 = encode_routed("k", 1, 0, "t", 0, 0, None, b"null")
    assert routed_version(v1) == 1 and decode_routed_record(v1, b"k", "x", 0) == orjson.loads(v1)
    assert [routed_version(v) for v in (b"", None, b"\x02short", b"[1]")] == [None, None, None, None]
    refused = (0x42, 0x62, 0x82, 0xA2, 0xD2, 0xF2, 0x03, 0x92 | 0x01)
    assert [routed_version(bytes([t]) + bytes(30)) for t in refused] == [None] * len(refused)
    assert [routed_version(bytes([t]) + bytes(30)) for t in (0x72, 0x92, 0xB2)] == [2, 2, 2]
    assert source_topic("raw.combiners") == "raw" and source_topic("out") == "out"


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


def test_control_carries_the_scope_reports_of_routers_planning_together() -> None:
    from router.sync.client import apply_dict, sync_from_payload

    body = {
        "first": 3,
        "last": 10,
        "records": 9_000,
        "keys": [[7, 4_000]],
        "loads": [4_600, 4_400],
        "scopes": 8,
        "behind": False,
    }
    s = sync_from_payload({"records": 5, "scope": body}, deployment="d", route="r", instance="i1", seq=0,
                          combiners=2, sent_ms=1)  # fmt: skip
    back = parse_control(encode_control(s))
    assert back == s and isinstance(back, SyncMessage) and back.scope is not None and back.scope.keys == [("7", 4_000)]
    g = GlobalMessage(
        deployment="d", route="r", reducer="i1", round=0, dsync_ms=500, scopes={"i1": back.scope, "i2": back.scope}
    )
    parsed = parse_control(encode_control(g))
    assert parsed == g and isinstance(parsed, GlobalMessage)
    update = apply_dict(parsed, "i1")
    assert update["peer_scopes"] == [{**body, "keys": [("7", 4_000)]}]  # the other member's only
    assert update["own_scope"] == update["peer_scopes"][0]  # and its own, as the round has it
    with pytest.raises(ControlMessageError, match="over the row cap"):
        parse_control(encode_control(g), max_rows=1)
    with pytest.raises(ControlMessageError):
        parse_control(orjson.dumps({**orjson.loads(encode_control(s)), "scope": {**body, "keys": [["x", 1]]}}))


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
