"""The routed record: what a router writes to partition ``c`` of a combiner topic (wire formats 1 and 2).

Version 2 (the default, ``router.routed_format=2``). Kafka key = the record key (UTF-8); Kafka partition = the
combiner; Kafka timestamp = when the router produced it (librdkafka's clock: ``produce_batch`` cannot set one,
and a producer-time timestamp keeps the topic's time-based retention meaningful for backfills of old data). The
value is a big-endian prefix followed by the raw record's value bytes, untouched. The prefix's first byte, the
tag, says its layout; a reader takes every record's layout from its own tag::

    tag bit  meaning
    0x02     version 2 (the low nibble)
    0x10     a measure follows the event time (NaN in it means "no measure"; extracted measures are finite)
    0x20     narrow: source offset and event time take 6 bytes each (unsigned), not 8 (signed)
    0x40     the measure is a 4-byte IEEE-754 single, not an 8-byte double (only with 0x10)
    0x80     the measure is decimal, 5 bytes: a signed 4-byte integer m and a byte d, the measure being
             m / 10**d (only with 0x10, not with 0x40; m = -2**31 means "no measure")

    field           wide (no 0x20)   narrow (0x20)
    tag             0, 1 byte        0, 1 byte
    source part.    1, 2 bytes       1, 2 bytes (unsigned; a raw topic of more than 65,536 partitions needs format 1)
    source offset   3, 8 bytes       3, 6 bytes
    event time      11, 8 bytes      9, 6 bytes (epoch ms)
    measure         19, 8, 5 or 4    15, 8, 5 or 4 (only with 0x10)
    raw value       after the prefix, byte for byte

So the prefix is 15 bytes narrow without a measure, 19 with a single, 20 with a decimal, 23 with a double (wide:
19, 23, 24, 27), and a routed record costs the raw value + the prefix + the key (when the raw record did not
already carry it as its Kafka key). A router picks the layout per batch: narrow when every source offset and event
time of the batch is in [0, 2**48) (2**48 ms is the year 10889); for the measure, the smallest of single, decimal
and double that gives every measure of the batch back bit for bit: a single for small integers, halves, ...; a
decimal for values with at most 9 decimal places and up to 2**31 - 1 units of the last place (prices such as
12.34: m = 1234, d = 2, and 1234 / 100 is the double nearest 12.34, as a JSON parser reads it). Readers divide
the integer, as a double, by 10**d (an exact double for d <= 22), one correctly rounded IEEE division in numpy,
Python and Spark SQL alike. The measure layout is used when any record of the batch has a measure. With
``router.routed_compact=false`` it writes only the wide layouts with doubles (tags 0x02 and 0x12), which readers
of earlier releases read too. Big-endian ("network order") because Spark SQL reads it with built-in functions
(``conv(hex(substring(value, 4, 8)), 16, 10)``); numpy reads it with ``>i8`` views. The source topic is not on
the wire: a combiner topic is written by one route, so readers derive it from the combiner topic's name
(:func:`source_topic`: ``<raw>.combiners`` -> ``<raw>``; a custom name stands for itself).

Version 1 (``router.routed_format=1``, still read everywhere): the value is compact JSON::

    {"v":1,"k":"<key>","t":<event time ms>,"c":<combiner>,"tp":"<raw topic>","p":<partition>,"o":<offset>,
     "x":<numeric measure or null>,"d":<the raw record's JSON value, embedded verbatim>}

Readers tell the two apart per record by the first byte: ``{`` is version 1, a tag with low nibble 2 is
version 2. ``(tp, p, o)`` is the source position: unique per raw record, so consumers deduplicate replays on
it. :func:`encode_routed` builds the same bytes as :meth:`RoutedRecord.to_json` without a model per record; a
test keeps the two identical.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DECIMAL_NONE",
    "MAX_V2_PARTITION",
    "NARROW_LIMIT",
    "POW10",
    "ROUTED_VERSION",
    "V2_HEADS",
    "V2_DECIMAL",
    "V2_MEASURE",
    "V2_NARROW",
    "V2_SINGLE",
    "V2_TAG",
    "DeadLetter",
    "RoutedRecord",
    "decode_routed_record",
    "encode_routed",
    "encode_routed_v2",
    "encode_routed_v2_batch",
    "routed_spark_schema",
    "routed_version",
    "source_topic",
    "v2_layout",
]

#: The wire format routers write by default (``router.routed_format``).
ROUTED_VERSION = 2
#: Tag bits of a version-2 value (its first byte): the version, then the layout flags (module docstring).
V2_TAG = 0x02
V2_MEASURE = 0x10
V2_NARROW = 0x20
V2_SINGLE = 0x40
V2_DECIMAL = 0x80
#: The decimal layout's integer for "no measure" (NaN in the float layouts).
DECIMAL_NONE = -(2**31)
#: 10**d as exact doubles for the decimal layout's scales d (the encoder writes d <= 9; readers take any byte).
POW10 = np.array([float(10**d) for d in range(256)])
_MAX_SCALE = 9
#: Largest source partition version 2 can carry.
MAX_V2_PARTITION = 0xFFFF
#: Source offsets and event times below this fit the narrow layout.
NARROW_LIMIT = 1 << 48
COMBINER_SUFFIX = ".combiners"


def v2_layout(tag: int) -> tuple[int, int, int] | None:
    """``(offset and time width, measure width, prefix size)`` of a version-2 tag; ``None`` for any other byte."""
    kind = tag & (V2_SINGLE | V2_DECIMAL)
    if tag & 0x0F != V2_TAG or kind == V2_SINGLE | V2_DECIMAL or (kind and not tag & V2_MEASURE):
        return None
    width = 6 if tag & V2_NARROW else 8
    measure = 0 if not tag & V2_MEASURE else 4 if kind == V2_SINGLE else 5 if kind == V2_DECIMAL else 8
    return width, measure, 3 + 2 * width + measure


#: Every version-2 tag, with its prefix size.
V2_HEADS: dict[int, int] = {t: lay[2] for t in range(256) if (lay := v2_layout(t)) is not None}


class RoutedRecord(BaseModel):
    """One raw record after routing (see the module docstring for the wire format)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    v: Literal[1, 2] = Field(1, description="wire format version it was read from (to_json writes version 1)")
    key: str = Field(..., alias="k", description="the record key")
    event_time: int = Field(..., alias="t", description="event time, epoch milliseconds")
    combiner: int = Field(..., alias="c", ge=0, description="combiner id = partition of the combiner topic")
    topic: str = Field(..., alias="tp", description="source (raw) topic")
    partition: int = Field(..., alias="p", ge=0, description="source partition")
    offset: int = Field(..., alias="o", ge=0, description="source offset")
    measure: float | None = Field(None, alias="x", description="numeric measure extracted by the route, if any")
    value: Any = Field(None, alias="d", description="the raw record's JSON value")

    def to_json(self) -> bytes:
        """Version-1 compact JSON, field order as on the wire."""
        return orjson.dumps({**self.model_dump(by_alias=True), "v": 1})

    @classmethod
    def from_json(cls, raw: bytes | str) -> RoutedRecord:
        """Parse and validate one routed value."""
        return cls.model_validate_json(raw)


def encode_routed(
    key: str, event_time: int, combiner: int, topic: str, partition: int, offset: int,
    measure: float | None, raw_value: bytes,
) -> bytes:  # fmt: skip
    """Version-1 wire bytes of a routed record; ``raw_value`` must be valid JSON (it is embedded verbatim)."""
    head = orjson.dumps(
        {"v": 1, "k": key, "t": event_time, "c": combiner, "tp": topic, "p": partition,
         "o": offset, "x": measure}
    )  # fmt: skip
    return head[:-1] + b',"d":' + raw_value + b"}"


def encode_routed_v2(
    event_time: int, partition: int, offset: int, measure: float | None, raw_value: bytes, *, compact: bool = True
) -> bytes:
    """Version-2 wire value of one routed record (the key and combiner travel as Kafka key and partition)."""
    return encode_routed_v2_batch([event_time], [partition], [offset], [measure], [raw_value], compact=compact)[0]


def encode_routed_v2_batch(
    times: Sequence[int], partitions: Sequence[int], offsets: Sequence[int], measures: Sequence[float | None],
    values: Sequence[bytes], *, compact: bool = True,
) -> list[bytes]:  # fmt: skip
    """Version-2 values of a batch: the prefixes built at once by numpy, then one concatenation per record.

    One layout for the whole batch (module docstring): with a measure if any record has one (NaN where a record
    has none); with ``compact``, narrow, and a single or a decimal measure, where every record of the batch
    allows it.
    Raises :class:`ValueError` for a source partition above :data:`MAX_V2_PARTITION` (use format 1).
    """
    n = len(values)
    if n == 0:
        return []
    parts = np.asarray(partitions, dtype=np.int64)
    if int(parts.max()) > MAX_V2_PARTITION or int(parts.min()) < 0:
        raise ValueError(f"source partition {int(parts.max())} does not fit routed format 2; use routed_format=1")
    offs = np.fromiter(offsets, np.int64, n)
    ts = np.fromiter(times, np.int64, n)
    tag = V2_TAG | V2_NARROW if compact and _fits_narrow(offs) and _fits_narrow(ts) else V2_TAG
    x: np.ndarray | None = None
    scale = 0
    if measures[0] is not None or measures.count(None) < n:
        tag |= V2_MEASURE
        x = np.array(measures, dtype=np.float64)  # None -> NaN
        with np.errstate(over="ignore"):
            single = x.astype(np.float32)
        if compact and bool(np.all((single == x) | np.isnan(x))):
            tag |= V2_SINGLE
            x = single
        elif compact and (dec := _decimal(x)) is not None:
            tag |= V2_DECIMAL
            x, scale = dec
    head = np.empty(n, dtype=_head_dtype(tag))
    head["tag"] = tag
    head["p"] = parts
    head["o"] = _six_bytes(offs) if tag & V2_NARROW else offs
    head["t"] = _six_bytes(ts) if tag & V2_NARROW else ts
    if x is not None:
        head["x"] = x
    if tag & V2_DECIMAL:
        head["d"] = scale
    raw = head.tobytes()
    w = head.itemsize
    return [raw[i : i + w] + v for i, v in zip(range(0, n * w, w), values, strict=True)]


@functools.cache
def _head_dtype(tag: int) -> np.dtype:
    """The prefix of ``tag``'s layout as a packed numpy record (6-byte fields as rows of bytes)."""
    width, xw, _ = v2_layout(tag)  # type: ignore[misc]  # only called with tags the encoder builds
    field: Any = (np.uint8, (6,)) if width == 6 else ">i8"
    fields = [("tag", "u1"), ("p", ">u2"), ("o", field), ("t", field)]
    if xw == 5:
        fields += [("x", ">i4"), ("d", "u1")]
    elif xw:
        fields.append(("x", ">f4" if xw == 4 else ">f8"))
    return np.dtype(fields)


def _decimal(x: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``(m, d)`` of the decimal layout for the measures ``x`` (NaN: none), or ``None`` when no scale fits them all.

    The least scale ``d`` <= 9 with ``m / 10**d`` bit for bit every measure (so -0.0 and infinities never fit)
    and every ``m`` a 4-byte integer other than :data:`DECIMAL_NONE`. The scale is found on the first measures,
    then checked on all (and raised while it fails): two passes over the batch when its measures are alike.
    """
    has = ~np.isnan(x)
    vals = x if bool(has.all()) else np.where(has, x, 0.0)  # 0 fits every scale; its rows become DECIMAL_NONE
    first = _least_scale(vals[:64], 0)
    found = None if first is None else _least_scale(vals, first[1])
    if found is None:
        return None
    m, d = found
    m[~has] = DECIMAL_NONE
    return m, d


def _least_scale(vals: np.ndarray, start: int) -> tuple[np.ndarray, int] | None:
    """``(m, d)`` for the least scale ``d`` from ``start`` on that gives every value of ``vals`` back, else ``None``."""
    for d in range(start, _MAX_SCALE + 1):
        with np.errstate(over="ignore", invalid="ignore"):
            m = np.rint(vals * POW10[d])
        if not bool(np.all(np.abs(m) < 2**31)):  # false for NaN and infinities too; -2**31 stays "no measure"
            return None  # a larger scale only makes them larger
        ints = m.astype(np.int32)
        if np.array_equal((ints / POW10[d]).view(np.int64), vals.view(np.int64)):
            return ints, d
    return None


def _fits_narrow(a: np.ndarray) -> bool:
    return int(a.min()) >= 0 and int(a.max()) < NARROW_LIMIT


def _six_bytes(a: np.ndarray) -> np.ndarray:
    """The low 6 bytes of each value of ``a`` (in [0, 2**48)), big-endian: one row of bytes per value."""
    return a.astype(">u8").view(np.uint8).reshape(len(a), 8)[:, 2:]


def routed_version(value: bytes | None) -> int | None:
    """1 or 2 by the value's first byte; ``None`` for a value that is neither."""
    if not value:
        return None
    first = value[0]
    if first == 0x7B:  # "{"
        return 1
    head = V2_HEADS.get(first)
    if head is not None and len(value) >= head:
        return 2
    return None


def source_topic(combiner_topic: str) -> str:
    """The source topic of a version-2 record read from ``combiner_topic`` (``<raw>.combiners`` -> ``<raw>``)."""
    return combiner_topic.removesuffix(COMBINER_SUFFIX) if combiner_topic.endswith(COMBINER_SUFFIX) else combiner_topic


def decode_routed_record(
    value: bytes | None, key: bytes | None, combiner_topic: str, combiner: int
) -> dict[str, Any] | None:
    """One routed record of either version as version 1's fields (``v k t c tp p o x d``); ``None`` if neither.

    ``d`` is the raw value parsed as JSON (``None`` when it is not JSON). For tools and tests that look at single
    records; the Spark sources decode whole batches without Python per record (:mod:`connectors.routed_decode`).
    """
    version = routed_version(value)
    if version == 1:
        try:
            doc = orjson.loads(value)  # type: ignore[arg-type]  # not None: routed_version checked it
        except orjson.JSONDecodeError:
            return None
        return doc if isinstance(doc, dict) else None
    if version != 2:
        return None
    assert value is not None
    width, xw, head = v2_layout(value[0])  # type: ignore[misc]  # routed_version checked the tag
    p = int.from_bytes(value[1:3], "big")
    o = int.from_bytes(value[3 : 3 + width], "big", signed=width == 8)
    t = int.from_bytes(value[3 + width : 3 + 2 * width], "big", signed=width == 8)
    measure: float | None = None
    if xw == 5:
        m = int.from_bytes(value[3 + 2 * width : 7 + 2 * width], "big", signed=True)
        measure = None if m == DECIMAL_NONE else m / float(POW10[value[7 + 2 * width]])
    elif xw:
        (x,) = struct.unpack_from(">f" if xw == 4 else ">d", value, 3 + 2 * width)
        measure = None if math.isnan(x) else float(x)
    raw = value[head:]
    try:
        d = orjson.loads(raw)
    except orjson.JSONDecodeError:
        d = None
    k = key.decode("utf-8", "replace") if key is not None else None
    return {"v": 2, "k": k, "t": t, "c": combiner, "tp": source_topic(combiner_topic), "p": p, "o": o, "x": measure,
            "d": d}  # fmt: skip


class DeadLetter(BaseModel):
    """A raw record that could not be routed, with why and where it came from (value of a DLQ message)."""

    model_config = ConfigDict(frozen=True)

    v: Literal[1] = 1
    route: str = Field(..., description="route name")
    error: str = Field(..., description="what is wrong, naming the field")
    field: str = Field(..., description="the part of the record at fault")
    topic: str = Field(..., description="source topic")
    partition: int = Field(..., description="source partition")
    offset: int = Field(..., description="source offset")
    timestamp: int | None = Field(None, description="Kafka timestamp of the raw record (ms)")
    key_b64: str | None = Field(None, description="original Kafka key, base64 (a prefix when truncated)")
    value_b64: str | None = Field(None, description="original value bytes, base64 (a prefix when truncated)")
    size: int | None = Field(None, description="size of the original value in bytes")
    truncated: bool = Field(
        False, description="an envelope: the record was too large for the DLQ, key_b64/value_b64 hold prefixes"
    )


def routed_spark_schema() -> Any:
    """The Spark ``StructType`` of a routed record's JSON value (``d`` kept as its raw JSON text)."""
    from pyspark.sql.types import (
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    return StructType(
        [
            StructField("v", IntegerType(), False),
            StructField("k", StringType(), False),
            StructField("t", LongType(), False),
            StructField("c", IntegerType(), False),
            StructField("tp", StringType(), False),
            StructField("p", IntegerType(), False),
            StructField("o", LongType(), False),
            StructField("x", DoubleType(), True),
            StructField("d", StringType(), True),
        ]
    )
