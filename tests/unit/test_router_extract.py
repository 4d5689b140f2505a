"""Extraction of keys, event times and measures from raw records (no broker)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from router.extract import Extractor, SourceRecord
from router.extract_batch import SCAN_MAX_BYTES, SCAN_MAX_BYTES_PLAIN, SCAN_MIN
from schemas.exceptions import RecordError
from schemas.settings import RouteSettings


def Msg(  # noqa: N802
    v: bytes | None, k: bytes | None = None, ts: int | None = 1_700_000_000_000, p: int = 0, o: int = 0
) -> SourceRecord:
    """A raw record (``ts=None``: no Kafka timestamp)."""
    return SourceRecord("raw", p, o, k, v, ts)


def _route(**kw: object) -> RouteSettings:
    return RouteSettings(raw_topic="raw", **kw)


def test_fast_path_default_route() -> None:
    ex = Extractor(_route())
    msgs = [Msg(b'{"key":"a","x":1}', o=0), Msg(b'{"key":7}', o=1), Msg(b"{bad", o=2), Msg(b'{"key":""}', o=3),
            Msg(b'{"key":"b"}', ts=None, o=4), Msg(b'{"nokey":1}', o=5), Msg(b'["key"]', o=6)]  # fmt: skip
    out = ex.extract(msgs)
    assert out.keys == ["a", "7"] and out.offsets == [0, 1] and out.times == [1_700_000_000_000] * 2
    assert out.values == [b'{"key":"a","x":1}', b'{"key":7}']
    errs = [(b.message.offset(), b.error.field, b.error.reason) for b in out.bad]
    assert [e[:2] for e in errs] == [(2, "value"), (3, "key"), (4, "timestamp"), (5, "key"), (6, "value")]
    assert "not valid JSON" in errs[0][2] and "empty" in errs[1][2] and "missing" in errs[3][2]


@pytest.mark.parametrize(
    ("unit", "raw", "ms"),
    [("ms", 1500, 1500), ("ms", 1500.9, 1500), ("s", 1.5, 1500), ("iso", "2024-01-01T00:00:01Z", 1704067201000),
     ("iso", "2024-01-01T00:00:01", 1704067201000), ("iso", "2024-01-01T01:00:01+01:00", 1704067201000)],
)  # fmt: skip
def test_time_units(unit: str, raw: object, ms: int) -> None:
    ex = Extractor(_route(time={"source": "field", "field": "meta.t", "unit": unit}))
    out = ex.extract([Msg(orjson.dumps({"key": "a", "meta": {"t": raw}}))])
    assert out.times == [ms] and not out.bad


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [({"key": "a"}, "meta.t", "missing"), ({"key": "a", "meta": 3}, "meta.t", "missing"),
     ({"key": "a", "meta": {"t": True}}, "meta.t", "must be a number"),
     ({"key": "a", "meta": {"t": -5}}, "meta.t", "out of range"),
     ({"key": ["a"], "meta": {"t": 1}}, "key", "string or an integer"),
     ({"key": "a", "meta": {"t": 1}, "m": {"x": "1"}}, "m.x", "must be a number")],
)  # fmt: skip
def test_errors_name_the_field(doc: dict[str, object], field: str, words: str) -> None:
    ex = Extractor(_route(time={"source": "field", "field": "meta.t"}, value_field="m.x"))
    out = ex.extract([Msg(orjson.dumps(doc))])
    assert not out.keys and len(out.bad) == 1
    assert out.bad[0].error.field == field and words in out.bad[0].error.reason


def test_measures_and_limits() -> None:
    ex = Extractor(_route(value_field="amount", max_record_bytes=64), max_key_bytes=8)
    msgs = [Msg(b'{"key":"a","amount":2}'), Msg(b'{"key":"a","amount":null}'), Msg(b'{"key":"a"}'),
            Msg(b'{"key":"a","amount":1.25}'), Msg(b'{"key":"123456789"}'), Msg(b'{"key":"%s"}' % (b"x" * 80)),
            Msg(b'{"key":"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"}'), Msg(None)]  # fmt: skip
    out = ex.extract(msgs)
    assert out.measures == [2.0, None, None, 1.25]
    reasons = [str(b.error) for b in out.bad]
    assert reasons[0] == "key: key is longer than 8 bytes"
    assert reasons[1].startswith("value: record has") and "limit 64" in reasons[1]
    assert reasons[2] == "key: key is longer than 8 bytes"  # 5 chars, 10 bytes
    assert reasons[3] == "value: the value is missing (null)"


def test_non_utf8_value_is_named() -> None:
    out = Extractor(_route()).extract([Msg(b'{"key":"\xff"}')])
    assert str(out.bad[0].error).startswith("value: not valid UTF-8")


def test_kafka_key_source() -> None:
    ex = Extractor(_route(key={"source": "kafka_key"}))
    out = ex.extract([Msg(b"1", k=b"abc"), Msg(b"{}", k=None), Msg(b"2", k=b"\xff"), Msg(b"nope", k=b"x")])
    assert out.keys == ["abc"]
    assert [str(b.error) for b in out.bad] == [
        "key: the Kafka key is missing", "key: the Kafka key is not valid UTF-8", out.bad[2].error.args[0]
    ]  # fmt: skip
    assert out.bad[2].error.field == "value"


_ODD = [b'{"key":"a","x":1}', b'{"key":7}', b"{bad", b'{"key":""}', b'{"nokey":1}', b'["key"]', b"5", b"null",
        b'{"key":null}', b'{"key":"dup","key":"last"}', b'{"key":"' + b"k" * 5000 + b'"}', b'{"key":"\xff"}',
        b'{"key":"ok","o":"\xfe"}',
        b'{"key":"n\\u00e9","t":12,"m":2.5}', b'{"key":"z","t":-1}', b'{"key":"z","t":1.5,"m":"x"}',
        b'{"key":"z","t":9007199254740993}', b'{"key":"x","t":null,"m":null}', b' {"key":"sp"} ', b"",
        b'{"key":{"a":1}}', b'{"key":"big","pad":"' + b"p" * 2_000_000 + b'"}']  # fmt: skip


def _extracted(ex: Extractor, msgs: list[SourceRecord]) -> tuple[object, ...]:
    out = ex.extract(msgs, 1_800_000_000_000)
    bad = [(b.message.offset(), b.error.field, b.error.reason) for b in out.bad]
    return out.keys, out.times, out.measures, out.values, out.partitions, out.offsets, bad


@pytest.mark.parametrize(
    "route",
    [{}, {"time": {"source": "field", "field": "t"}}, {"time": {"source": "field", "field": "t"}, "value_field": "m"},
     {"value_field": "m"}],
    ids=["kafka-ts", "field-time", "field-time+measure", "measure"],
)  # fmt: skip
@pytest.mark.parametrize("odd", range(len(_ODD) + 1))
@pytest.mark.parametrize("pad", [b"p" * 150, b""], ids=["large", "small"])
def test_vectorized_extraction_equals_record_by_record(route: dict[str, object], odd: int, pad: bytes) -> None:
    """One odd record among good ones: the scan path gives exactly what the per-record path gives."""
    good = [b'{"key":"k%d","t":%d,"m":%d,"pad":"%s"}' % (i, 1_700_000_000_000 + i, i, pad) for i in range(1000)]
    values = good[:50] + ([_ODD[odd]] if odd < len(_ODD) else []) + good[50:]
    msgs = [Msg(v, o=i, ts=None if i == 70 else 1_700_000_000_000 + i) for i, v in enumerate(values)]
    r = _route(max_record_bytes=1_000_000, **route)
    assert _extracted(Extractor(r, vectorized=True), msgs) == _extracted(Extractor(r), msgs)


@pytest.mark.parametrize(
    "route",
    [{}, {"time": {"source": "field", "field": "t"}}, {"value_field": "m"}],
    ids=["plain", "field-time", "measure"],
)
def test_batches_take_the_scan_from_scan_min_records_up_to_scan_max_bytes(
    route: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan reads batches of SCAN_MIN records or more whose records average at most SCAN_MAX_BYTES (the plain
    shape: SCAN_MAX_BYTES_PLAIN); smaller batches (its fixed cost per call is not repaid) and larger records
    (orjson is faster) go record by record."""
    import router.extract as extract

    taken: list[bool] = []
    real = extract.extract_scan

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(extract, "extract_scan", spy)
    ex = Extractor(_route(**route, max_record_bytes=10_000), vectorized=True)
    msgs = [Msg(b'{"key":"k%d","t":%d,"m":1}' % (i, _T + i), o=i) for i in range(SCAN_MIN)]
    out = ex.extract(msgs, _T + 10_000)
    assert len(out.keys) == SCAN_MIN and not out.bad
    assert taken == [True]
    ex.extract(msgs[: SCAN_MIN - 1], _T + 10_000)
    pad = b"p" * (SCAN_MAX_BYTES_PLAIN if not route else SCAN_MAX_BYTES)
    big = [Msg(b'{"key":"k%d","t":%d,"m":1,"p":"%s"}' % (i, _T + i, pad), o=i) for i in range(SCAN_MIN)]
    out = ex.extract(big, _T + 10_000)
    assert len(out.keys) == SCAN_MIN and not out.bad
    assert taken == [True]  # neither the small batch nor the large records took the scan


@pytest.mark.parametrize("odd", range(len(_ODD) + 1))
def test_plain_batch_path_equals_record_by_record(odd: int) -> None:
    """Small records, Kafka timestamps: the whole-batch pass (taken when every record is plain) or its fallback
    gives exactly what the generic per-record loop gives, whatever the one odd record is."""
    good = [b'{"key":"k%d","x":%d}' % (i, i) for i in range(100)]
    values = good[:50] + ([_ODD[odd]] if odd < len(_ODD) else []) + good[50:]
    msgs = [Msg(v, o=i, p=i % 3, ts=None if odd == len(_ODD) and i == 70 else 1_700_000_000_000 + i)
            for i, v in enumerate(values)]  # fmt: skip
    r = _route(max_record_bytes=1_000_000)
    generic = Extractor(r)
    generic._fast_key = None  # the generic loop, record by record
    assert _extracted(Extractor(r), msgs) == _extracted(generic, msgs)
    plain = [Msg(v, o=i) for i, v in enumerate(good)]
    assert Extractor(r)._extract_plain(plain, "key") is not None  # an all-plain batch takes the batch pass
    assert _extracted(Extractor(r), plain) == _extracted(generic, plain)


def test_format_2_never_parses_a_value_nothing_is_read_from() -> None:
    """Kafka key, Kafka timestamp, no measure: under format 2 (``vectorized``) values are opaque bytes, so a value
    that is not JSON (Avro, text, empty) is routed; format 1 embeds the value in JSON and refuses it."""
    values = [b"nope", b"\x00\x01avro", b"", b'{"key":1}']
    msgs = [Msg(v, k=b"k%d" % i, o=i) for i, v in enumerate(values)]
    r = _route(key={"source": "kafka_key"})
    out = Extractor(r, vectorized=True).extract(msgs)
    assert out.keys == ["k0", "k1", "k2", "k3"] and out.values == values and out.offsets == [0, 1, 2, 3]
    assert not out.bad
    v1 = Extractor(r).extract(msgs)
    assert v1.keys == ["k3"] and [b.error.field for b in v1.bad] == ["value"] * 3
    measured = Extractor(_route(key={"source": "kafka_key"}, value_field="m"), vectorized=True).extract(msgs)
    assert measured.keys == ["k3"]  # a measure is read from the value: it must be a JSON object


_T = 1_700_000_000_000
#: (Kafka key, value, timestamp, the field the record is refused for: None when it is good; an empty Kafka key
#: is a key, as the per-record function has it).
_ODD_KEYED: list[tuple[bytes | None, bytes | None, int | None, str | None]] = [
    (None, b"v", _T, "key"), (b"", b"v", _T, None), (b"\xff", b"v", _T, "key"), (b"k" * 5000, b"v", _T, "key"),
    (b"big", b"p" * 2_000, _T, "value"), (b"nov", None, _T, "value"), (b"nots", b"v", None, "timestamp"),
    (b"ahead", b"v", 1_900_000_000_000, "timestamp"), (b"n\xc3\xa9", b"\xff\xfe", _T + 1, None),
]  # fmt: skip


@pytest.mark.parametrize("odd", range(len(_ODD_KEYED) + 1))
def test_opaque_batch_path_equals_record_by_record(odd: int) -> None:
    """One odd record (key, value or timestamp) among good ones: the batch path gives what the record-by-record
    function gives, error for error."""
    rows = [(b"k%d" % i, b"value %d" % i, _T + i, None) for i in range(100)]
    rows = rows[:50] + ([_ODD_KEYED[odd]] if odd < len(_ODD_KEYED) else []) + rows[50:]
    msgs = [Msg(v, k=k, ts=ts, o=i, p=i % 3) for i, (k, v, ts, _) in enumerate(rows)]
    ex = Extractor(_route(key={"source": "kafka_key"}, max_record_bytes=1_000), vectorized=True)
    got = _extracted(ex, msgs)
    good: list[tuple[str, int, bytes, int | None, int | None]] = []
    bad = []
    for m in msgs:
        try:
            k, t, _, v = ex._one(m)
        except RecordError as err:
            bad.append((m.offset(), err.field, err.reason))
            continue
        good.append((k, t, v, m.partition(), m.offset()))
    keys, times, values, parts, offsets = (list(c) for c in zip(*good, strict=True))
    assert got == (keys, times, [None] * len(keys), values, parts, offsets, bad)
    assert [f for _, f, _ in bad] == [f for *_, f in rows if f is not None]
