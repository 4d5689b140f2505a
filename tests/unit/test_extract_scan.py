"""The compiled scan of top-level fields against the per-record path (orjson), record kind by record kind.

Every record either comes out of the scan exactly as the per-record path reads it, or is in doubt and goes
through that path; so a batch read by the scan equals the same batch read record by record, good and bad records
alike. The cases cover the JSON grammar (nested values, literals, escapes, numbers), the fields' types and
bounds, and random mutations of valid records.
"""

from __future__ import annotations

import math
import random
import struct

import numpy as np
import orjson
import pytest

from router.extract import Extractor, SourceRecord
from router.extract_batch import SCAN_MIN, field_plan_of
from router.extract_scan import READ, scan_records
from schemas.settings import RouteSettings

_T = 1_700_000_000_000
_ROUTES = {
    "plain": {},
    "time": {"time": {"source": "field", "field": "t"}},
    "time+measure": {"time": {"source": "field", "field": "t"}, "value_field": "m"},
    "measure": {"value_field": "m"},
}
_CASES = [
    b'{"key":"a","t":1,"m":2}', b'{"key":"a","t":1,"m":-2}', b'{"key":"a","t":1,"m":-0}',
    b'{"key":"a","t":1,"m":-0.0}', b'{"key":"a","t":1,"m":0.1}', b'{"key":"a","t":1,"m":1e5}',
    b'{"key":"a","t":1,"m":1E-5}', b'{"key":"a","t":1,"m":12345.678901234}', b'{"key":"a","t":1,"m":1234567890123456}',
    b'{"key":"a","t":1,"m":123456789012345.6}', b'{"key":"a","t":1,"m":0.000000000000000000000001}',
    b'{"key":"a","t":1,"m":1e22}', b'{"key":"a","t":1,"m":1e23}', b'{"key":"a","t":1,"m":1e-22}',
    b'{"key":"a","t":1,"m":1e308}', b'{"key":"a","t":1,"m":1e309}', b'{"key":"a","t":1,"m":1e400}',
    b'{"key":"a","t":1,"m":-1.5e-3}', b'{"key":"a","t":1,"m":null}', b'{"key":"a","t":1}',
    b'{"key":"a","t":1,"m":"3"}', b'{"key":"a","t":1,"m":true}', b'{"key":"a","t":1,"m":[1]}',
    b'{"key":"a","t":1,"m":01}', b'{"key":"a","t":1,"m":1.}', b'{"key":"a","t":1,"m":.5}', b'{"key":"a","t":1,"m":+1}',
    b'{"key":"a","t":1,"m":1e}', b'{"key":"a","t":1,"m":NaN}', b'{"key":"a","t":1,"m":Infinity}',
    b'{"key":"a","t":1,"m":nul}', b'{"key":"a","t":1,"m":nulls}', b'{"key":"a","m":2,"m":null,"t":1}',
    b'{"key":7,"t":1}', b'{"key":-7,"t":1}', b'{"key":0,"t":1}', b'{"key":-0,"t":1}', b'{"key":7.0,"t":1}',
    b'{"key":123456789012345678,"t":1}', b'{"key":1234567890123456789,"t":1}', b'{"key":99999999999999999999,"t":1}',
    b'{"key":"","t":1}', b'{"key":true,"t":1}', b'{"key":null,"t":1}', b'{"key":{"a":1},"t":1}', b'{"t":1}',
    b'{"key":"a\\"b","t":1}', b'{"key":"\\u0041","t":1}', b'{"ke\\u0079":"a","t":1}', b'{"k\\ney":"a","t":1}',
    b'{"key":"\xc3\xa9","t":1}', b'{"key":"a","t":0}', b'{"key":"a","t":-1}', b'{"key":"a","t":1.5}',
    b'{"key":"a","t":1e3}', b'{"key":"a","t":9007199254740991}', b'{"key":"a","t":9007199254740992}',
    b'{"key":"a","t":99999999999999999}', b'{"key":"a","t":"1"}', b'{"key":"a","t":null}',
    b'{"key":"a","t":1700000000000}', b'{"key":"a","t":1900000000000}', b' {"key":"a","t":1} ',
    b'\t{"key" : "a" ,\r\n "t" : 1 }\n', b'{"key":"a","t":1}x', b'{"key":"a","t":1},', b'{"key":"a","t":1',
    b'{"key":"a" "t":1}', b'{"key":"a",,"t":1}', b'{"key":"a","t":1,}', b'{,"key":"a"}', b"{}", b"", b" ", b"[]",
    b'["key"]', b"5", b'"key"', b"null", b"{", b"}", b'{"key":"a","t":1}{}',
    b'{"key":"a","t":1,"o":{"x":[1,2.5,-3e2,{"y":null}],"z":true,"w":false,"v":"s\\n\\t\\"\\\\\\/"}}',
    b'{"key":"a","t":1,"o":[]}', b'{"key":"a","t":1,"o":{}}', b'{"key":"a","t":1,"o":[[]]}',
    b'{"key":"a","t":1,"o":[}', b'{"key":"a","t":1,"o":{"x"}}', b'{"key":"a","t":1,"o":{"x":}}',
    b'{"key":"a","t":1,"o":[1,]}', b'{"key":"a","t":1,"o":{1:2}}', b'{"key":"a","t":1,"o":"\\x"}',
    b'{"key":"a","t":1,"o":"\\ud800"}', b'{"key":"a","t":1,"o":"\\ud83d\\ude00"}', b'{"key":"a","t":1,"o":"a\x01b"}',
    b'{"key":"a","t":1,"o":"\xff"}', b'{"key":"a","t":1,"o":tru}', b'{"key":"a","t":1,"o":1' + b"0" * 400 + b"}",
    b'{"key":"a","t":1,"o":1' + b"0" * 200 + b"}", b'{"key":"a","t":1,"o":' + b"[" * 600 + b"]" * 600 + b"}",
    b'{"key":"a","t":1,"o":' + b"[" * 100 + b"]" * 100 + b"}", b'{"key":"dup","key":"last","t":1}',
    b'{"key":{},"key":"last","t":1}', b'{"key":"a","t":1,"t":2}', b'{"key":"' + b"k" * 5000 + b'","t":1}',
    b'{"key":"big","t":1,"pad":"' + b"p" * 3000 + b'"}',
]  # fmt: skip


def _msgs(values: list[bytes | None], ts: bool = True) -> list[SourceRecord]:
    return [SourceRecord("raw", 0, i, None, v, _T + i if ts else None) for i, v in enumerate(values)]


def _both(route: dict[str, object], values: list[bytes | None]) -> tuple[object, object]:
    """The batch read by the scan (vectorized), and read record by record; bad records with their errors."""
    r = RouteSettings.model_validate({"raw_topic": "raw", "max_record_bytes": 2048, **route})
    fast, slow = Extractor(r, max_key_bytes=4096, vectorized=True), Extractor(r, max_key_bytes=4096)
    msgs = _msgs(values)
    outs = []
    for ex in (fast, slow):
        out = ex.extract(msgs, 1_800_000_000_000)
        bad = [(b.message.offset(), str(b.error)) for b in out.bad]
        measures = [None if x is None else struct.pack(">d", x) for x in out.measures]  # -0.0 is not 0.0
        outs.append((out.keys, out.times, measures, out.values, out.offsets, bad))
    return outs[0], outs[1]


@pytest.mark.parametrize("route", list(_ROUTES), ids=list(_ROUTES))
def test_every_case_reads_as_the_per_record_path(route: str) -> None:
    """Each case among good records, so that the batch is large enough for the scan."""
    good = [b'{"key":"k%d","t":%d,"m":%d.25}' % (i, _T + i, i) for i in range(SCAN_MIN)]
    for case in _CASES:
        fast, slow = _both(_ROUTES[route], [*good[:10], case, *good[10:]])
        assert fast == slow, case


@pytest.mark.parametrize("route", list(_ROUTES), ids=list(_ROUTES))
def test_a_none_value_in_a_batch(route: str) -> None:
    good = [b'{"key":"k%d","t":%d,"m":1}' % (i, _T + i) for i in range(SCAN_MIN)]
    fast, slow = _both(_ROUTES[route], [*good, None])
    assert fast == slow


@pytest.mark.parametrize("seed", range(4))
def test_mutated_records_read_as_the_per_record_path(seed: int) -> None:
    """Valid records with random bytes replaced, inserted or removed, in batches of 200."""
    rng = random.Random(seed)
    alphabet = b'{}[]":,.-+eE0123456789 \\nultrfase\t\xc3\xa9\x00'
    base = [
        orjson.dumps({"key": f"k{rng.randrange(1000)}", "t": _T + i, "m": rng.choice([1, -2.5, None, 1e-3, 7e20]),
                      "o": {"a": [1, "x", None, True], "b": "s\n"}})
        for i in range(200)
    ]  # fmt: skip
    values: list[bytes | None] = []
    for v in base:
        b = bytearray(v)
        for _ in range(rng.randrange(0, 3)):
            pos = rng.randrange(len(b))
            op = rng.randrange(3)
            if op == 0:
                b[pos] = rng.choice(alphabet)
            elif op == 1:
                b.insert(pos, rng.choice(alphabet))
            else:
                del b[pos]
        values.append(bytes(b))
    for route in _ROUTES.values():
        fast, slow = _both(route, values)
        assert fast == slow


def test_measures_are_the_correctly_rounded_doubles() -> None:
    """Random decimals within the scan's exact range: the same double as orjson (and Python's float)."""
    rng = random.Random(7)
    texts = []
    for _ in range(5000):
        digits = str(rng.randrange(1, 10 ** rng.randrange(1, 16)))
        cut = rng.randrange(0, len(digits) + 1)
        text = digits[:cut] + "." + digits[cut:] if cut < len(digits) else digits
        text = ("0" + text) if text.startswith(".") else text
        if rng.random() < 0.3:
            text += f"e{rng.randrange(-9, 10)}"
        texts.append(("-" if rng.random() < 0.5 else "") + text)
    values = [b'{"key":"a","m":%s}' % t.encode() for t in texts]
    buf = np.frombuffer(b"".join(values), np.uint8)
    ends = np.cumsum([len(v) for v in values]).astype(np.int64)
    plan = field_plan_of("key", None, "m")
    assert plan is not None
    status, _, measures, nulls, _, _ = scan_records(buf, ends, *plan.names, 1 << 20, 4096, 1 << 53)
    read = status == READ
    assert read.mean() > 0.95
    for i in np.flatnonzero(read):
        want = float(orjson.loads(values[i])["m"])
        assert not nulls[i] and math.copysign(1, measures[i]) == math.copysign(1, want)
        assert measures[i] == want, texts[i]


def test_a_batch_read_whole_hands_its_key_buffer_on() -> None:
    """The partitioner hashes the scan's key buffer: there when every record was read, and the same keys."""
    r = RouteSettings.model_validate({"raw_topic": "raw", "key": {"field": "key"}})
    ex = Extractor(r, max_key_bytes=4096, vectorized=True)
    good = [b'{"key":"k%d\xc3\xa9","n":7}' % i for i in range(SCAN_MIN)] + [b'{"key":42}']
    out = ex.extract(_msgs(good), 1_800_000_000_000)
    assert out.key_buffer is not None and list(out.key_buffer.keys) == out.keys
    data, offsets = out.key_buffer.data.tobytes(), out.key_buffer.offsets
    assert (
        [data[offsets[i] : offsets[i + 1]].decode() for i in range(len(out.keys))]
        == out.keys
        == [*(f"k{i}é" for i in range(SCAN_MIN)), "42"]
    )
    doubt = ex.extract(_msgs([*good, b'{"key":"a\\u00e9"}']), 1_800_000_000_000)  # a record for the slow path
    assert doubt.key_buffer is None and doubt.keys[-1] == "aé"
