"""Decoding routed records into typed Arrow columns (the Spark source's ``decode=routed``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.routed_decode import ROUTED_ARROW_SCHEMA, decode_routed
from schemas.records import V2_HEADS, RoutedRecord, encode_routed, encode_routed_v2, encode_routed_v2_batch


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


def _v2(i: int, measure: float | None = 1.5, raw: bytes = b'{"i":1}') -> tuple[bytes, bytes]:
    return f"k{i}".encode(), encode_routed_v2(1_700_000_000_000 + i, 2, 1000 + i, measure, raw)


def test_format_2_decodes_like_format_1() -> None:
    pairs = [_v2(i, None if i % 3 == 0 else float(i)) for i in range(300)]
    v2 = decode_routed([v for _, v in pairs], 5, [k for k, _ in pairs], "clicks.combiners").to_pylist()
    v1 = decode_routed([_value(i, None if i % 3 == 0 else float(i)) for i in range(300)], 5).to_pylist()
    assert v2 == v1


def test_formats_1_and_2_mixed_in_one_batch_keep_their_order() -> None:
    values, keys = [], []
    for i in range(40):
        if i % 3:
            k, v = _v2(i, float(i) if i % 2 else None)
        else:
            k, v = b"ignored", _value(i, float(i) if i % 2 else None)
        keys.append(k)
        values.append(v)
    values.append(b"\x02short")  # a format-2 tag without a whole prefix: not a routed record, a row of nulls
    keys.append(b"x")
    rows = decode_routed(values, 1, keys, "clicks.combiners").to_pylist()
    assert [r["key"] for r in rows] == [f"k{i}" for i in range(40)] + [None]
    assert [r["src_offset"] for r in rows[:40]] == [1000 + i for i in range(40)]
    assert [r["measure"] for r in rows[:40]] == [float(i) if i % 2 else None for i in range(40)]
    assert {r["src_topic"] for r in rows[:40]} == {"clicks"}


def test_format_2_keeps_the_raw_bytes_and_a_custom_topic_name() -> None:
    raw = b"\xff not even json \n"
    k, v = b"u1", encode_routed_v2(7, 65_535, 2**40, None, raw)
    assert v.endswith(raw) and len(v) == 15 + len(raw)
    (row,) = decode_routed([v], 0, [k], "custom-out").to_pylist()
    assert (row["key"], row["src_topic"], row["src_partition"], row["src_offset"]) == (
        "u1",
        "custom-out",
        65_535,
        2**40,
    )


def test_every_format_2_layout_in_one_batch_decodes_like_format_1() -> None:
    """Router batches of each prefix layout (wide or narrow; no measure, a double, a single or a decimal), rows
    interleaved."""
    groups = [  # (compact, offset base, measures): the layout each gives is asserted below
        (False, 0, [None] * 4), (False, 0, [0.1, None, 2.5, -3.0]), (True, 0, [None] * 4),
        (True, 0, [0.1 + 0.2, None, 2.5, -3.0]), (True, 0, [7.0, None, -0.5, 2.0**-20]),
        (True, 2**50, [7.0, 1.0, 2.0, 3.0]), (True, 2**48 - 4, [None] * 4), (True, 0, [0.1, None, 12.34, -0.001]),
        (True, 2**50, [-21_474_836.47, 0.01, None, 3.0]),
    ]  # fmt: skip
    expect_tags = [0x02, 0x12, 0x22, 0x32, 0x72, 0x52, 0x22, 0xB2, 0x92]
    rows: list[tuple[bytes, bytes, bytes]] = []  # (key, format 2, format 1)
    for g, (compact, base, measures) in enumerate(groups):
        offs = [base + i for i in range(4)]
        times = [1_700_000_000_000 + 10 * g + i for i in range(4)]
        raws = [b'{"g":%d}' % g] * 4
        v2 = encode_routed_v2_batch(times, [g] * 4, offs, measures, raws, compact=compact)
        assert {v[0] for v in v2} == {expect_tags[g]} and all(len(v) == V2_HEADS[v[0]] + 7 for v in v2)
        for t, o, x, v in zip(times, offs, measures, v2, strict=True):
            rows.append((f"k{g}".encode(), v, encode_routed(f"k{g}", t, 0, "clicks", g, o, x, raws[0])))
    rows = rows[::2] + rows[1::2]  # layouts interleaved
    got = decode_routed([v for _, v, _ in rows], 3, [k for k, _, _ in rows], "clicks.combiners").to_pylist()
    assert got == decode_routed([v1 for _, _, v1 in rows], 3).to_pylist()
    assert {2**50 + 3, 2**48 - 1} <= {r["src_offset"] for r in got}


_row = st.tuples(
    st.integers(0, 2**53 - 1),  # event time, as the router bounds it
    st.integers(0, 65_535),
    st.integers(0, 2**63 - 1),
    st.none()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(2**24), 2**24).map(float)
    | st.tuples(st.integers(-(2**31) + 1, 2**31 - 1), st.integers(0, 9)).map(lambda md: md[0] / 10 ** md[1]),
    st.binary(max_size=12),
)


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.tuples(st.booleans(), st.lists(_row, min_size=1, max_size=6)), min_size=1, max_size=4))
def test_any_format_2_batches_decode_back_to_what_was_encoded(batches: list[tuple[bool, list[tuple]]]) -> None:
    """Router batches of random records, compact or wide, joined as a Spark batch: every field comes back."""
    values, keys, want = [], [], []
    for compact, rows in batches:
        times, parts, offs, measures, raws = (list(c) for c in zip(*rows, strict=True))
        values += encode_routed_v2_batch(times, parts, offs, measures, raws, compact=compact)
        keys += [b"k%d" % i for i in range(len(rows))]
        want += [(f"k{i}", t, x, p, o) for i, (t, p, o, x, _) in enumerate(rows)]
    batch = decode_routed(values, 0, keys, "r.combiners")
    micros = batch.column("event_time").cast(pa.int64()).to_pylist()  # past datetime's year 9999 too
    got = batch.drop_columns(["event_time"]).to_pylist()
    for row, us, (k, t, x, p, o) in zip(got, micros, want, strict=True):
        assert (row["key"], us, row["measure"], row["src_partition"], row["src_offset"]) == (k, t * 1000, x, p, o)
