"""Decoding routed records into typed Arrow columns (the Spark source's ``decode=routed``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from connectors.routed_decode import ROUTED_ARROW_SCHEMA, decode_routed
from schemas.records import RoutedRecord, encode_routed


def _value(i: int, measure: float | None = 1.5, raw: bytes = b'{"i":1}') -> bytes:
    return encode_routed(f"k{i}", 1_700_000_000_000 + i, i % 4, "clicks", 2, 1000 + i, measure, raw)


def test_fast_path_matches_the_record_model() -> None:
    values = [_value(i, None if i % 3 == 0 else float(i)) for i in range(500)]
    batch = decode_routed(values, 5)
    assert batch.schema == ROUTED_ARROW_SCHEMA
    rows = batch.to_pylist()
    for v, row in zip(values, rows, strict=True):
        rec = RoutedRecord.from_json(v)
        assert row["key"] == rec.key
        assert row["event_time"] == datetime.fromtimestamp(rec.event_time / 1000, UTC)
        assert row["measure"] == rec.measure
        assert (row["src_topic"], row["src_partition"], row["src_offset"]) == (rec.topic, rec.partition, rec.offset)
        assert row["combiner"] == 5  # the partition read, not the field


def test_bad_values_become_null_rows_and_good_ones_survive() -> None:
    values = [_value(1), b"not json", None, b'{"k": 5, "t": 1}', b"[1, 2]", _value(2)]
    rows = decode_routed(values, 0).to_pylist()
    assert [r["key"] for r in rows] == ["k1", None, None, None, None, "k2"]
    assert [r["src_offset"] for r in rows] == [1001, None, None, None, None, 1002]
    assert all(r["combiner"] == 0 for r in rows)


@pytest.mark.parametrize("raw", [b'{\n  "pretty": true\n}', b'"line\\nbreak"'])
def test_raw_payload_with_newlines_is_decoded(raw: bytes) -> None:
    rows = decode_routed([_value(1, raw=raw), _value(2, raw=raw)], 3).to_pylist()
    assert [(r["key"], r["src_offset"]) for r in rows] == [("k1", 1001), ("k2", 1002)]


def test_integer_measure_and_empty_batch() -> None:
    v = b'{"v":1,"k":"a","t":5,"c":0,"tp":"r","p":0,"o":7,"x":3,"d":{}}'
    assert decode_routed([v], 1).to_pylist()[0]["measure"] == 3.0
    assert decode_routed([], 1).num_rows == 0
