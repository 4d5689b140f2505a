"""The routed record: what a router writes to partition ``c`` of a combiner topic (wire formats 1 and 2).

Version 2 (the default, ``router.routed_format=2``). Kafka key = the record key (UTF-8); Kafka partition = the
combiner; Kafka timestamp = when the router produced it (librdkafka's clock: ``produce_batch`` cannot set one,
and a producer-time timestamp keeps the topic's time-based retention meaningful for backfills of old data). The
value is a fixed big-endian prefix followed by the raw record's value bytes, untouched::

    offset  size  field
    0       1     tag: 0x02 (version 2) | 0x10 when a measure follows
    1       2     source partition (unsigned; a raw topic of more than 65,536 partitions needs format 1)
    3       8     source offset (signed)
    11      8     event time, epoch ms (signed; the router bounds it to [0, 2**53))
    19      8     measure, IEEE-754 double -- only with the 0x10 bit; NaN means "no measure" (extracted
                  measures are always finite)
    19|27   ...   the raw value, byte for byte

So a routed record costs the raw value + 19 bytes (27 with a measure) + the key (when the raw record did not
already carry it as its Kafka key). Big-endian ("network order") because Spark SQL reads it with built-in
functions (``conv(hex(substring(value, 4, 8)), 16, 10)``); numpy reads it with ``>i8`` views. The source
topic is not on the wire: a combiner topic is written by one route, so readers derive it from the combiner
topic's name (:func:`source_topic`: ``<raw>.combiners`` -> ``<raw>``; a custom name stands for itself).

Version 1 (``router.routed_format=1``, still read everywhere): the value is compact JSON::

    {"v":1,"k":"<key>","t":<event time ms>,"c":<combiner>,"tp":"<raw topic>","p":<partition>,"o":<offset>,
     "x":<numeric measure or null>,"d":<the raw record's JSON value, embedded verbatim>}

Readers tell the two apart per record by the first byte: ``{`` is version 1, a tag with low nibble 2 is
version 2. ``(tp, p, o)`` is the source position: unique per raw record, so consumers deduplicate replays on
it. :func:`encode_routed` builds the same bytes as :meth:`RoutedRecord.to_json` without a model per record; a
test keeps the two identical.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "MAX_V2_PARTITION",
    "ROUTED_VERSION",
    "V2_HEAD",
    "V2_HEAD_MEASURE",
    "V2_MEASURE",
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
]

#: The wire format routers write by default (``router.routed_format``).
ROUTED_VERSION = 2
#: First byte of a version-2 value; :data:`V2_MEASURE` is or-ed in when a measure follows.
V2_TAG = 0x02
V2_MEASURE = 0x10
#: Prefix sizes of version 2 without and with a measure.
V2_HEAD = 19
V2_HEAD_MEASURE = 27
#: Largest source partition version 2 can carry.
MAX_V2_PARTITION = 0xFFFF
COMBINER_SUFFIX = ".combiners"

_HEAD = struct.Struct(">BHqq")
_HEAD_X = struct.Struct(">BHqqd")
_DT = np.dtype([("tag", "u1"), ("p", ">u2"), ("o", ">i8"), ("t", ">i8")])
_DT_X = np.dtype([("tag", "u1"), ("p", ">u2"), ("o", ">i8"), ("t", ">i8"), ("x", ">f8")])


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


def encode_routed_v2(event_time: int, partition: int, offset: int, measure: float | None, raw_value: bytes) -> bytes:
    """Version-2 wire value of one routed record (the key and combiner travel as Kafka key and partition)."""
    if measure is None:
        return _HEAD.pack(V2_TAG, partition, offset, event_time) + raw_value
    return _HEAD_X.pack(V2_TAG | V2_MEASURE, partition, offset, event_time, measure) + raw_value


def encode_routed_v2_batch(
    times: Sequence[int], partitions: Sequence[int], offsets: Sequence[int], measures: Sequence[float | None],
    values: Sequence[bytes],
) -> list[bytes]:  # fmt: skip
    """Version-2 values of a batch: the prefixes built at once by numpy, then one concatenation per record.

    A batch with any measure uses the measure layout for all its records (NaN where a record has none).
    Raises :class:`ValueError` for a source partition above :data:`MAX_V2_PARTITION` (use format 1).
    """
    n = len(values)
    if n == 0:
        return []
    with_x = any(x is not None for x in measures)
    head = np.empty(n, dtype=_DT_X if with_x else _DT)
    head["tag"] = V2_TAG | V2_MEASURE if with_x else V2_TAG
    parts = np.asarray(partitions, dtype=np.int64)
    if int(parts.max()) > MAX_V2_PARTITION or int(parts.min()) < 0:
        raise ValueError(f"source partition {int(parts.max())} does not fit routed format 2; use routed_format=1")
    head["p"] = parts
    head["o"] = offsets
    head["t"] = times
    if with_x:
        head["x"] = [math.nan if x is None else x for x in measures]
    raw = head.tobytes()
    w = head.itemsize
    return [raw[i : i + w] + v for i, v in zip(range(0, n * w, w), values, strict=True)]


def routed_version(value: bytes | None) -> int | None:
    """1 or 2 by the value's first byte; ``None`` for a value that is neither."""
    if not value:
        return None
    first = value[0]
    if first == 0x7B:  # "{"
        return 1
    if first in (V2_TAG, V2_TAG | V2_MEASURE) and len(value) >= _v2_head(first):
        return 2
    return None


def _v2_head(tag: int) -> int:
    return V2_HEAD_MEASURE if tag & V2_MEASURE else V2_HEAD


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
    tag = value[0]
    if tag & V2_MEASURE:
        _, p, o, t, x = _HEAD_X.unpack_from(value)
        measure = None if math.isnan(x) else x
    else:
        _, p, o, t = _HEAD.unpack_from(value)
        measure = None
    raw = value[_v2_head(tag) :]
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
