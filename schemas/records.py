"""The routed record: what a router writes to partition ``c`` of a combiner topic.

Wire format (version 1): the Kafka message key is the record key's UTF-8 bytes; the value is compact JSON::

    {"v":1,"k":"<key>","t":<event time ms>,"c":<combiner>,"tp":"<raw topic>","p":<partition>,"o":<offset>,
     "x":<numeric measure or null>,"d":<the raw record's JSON value, embedded verbatim>}

``(tp, p, o)`` is the source position: unique per raw record, so consumers deduplicate replays on it.
:func:`encode_routed` builds the same bytes as :meth:`RoutedRecord.to_json` without a model per record (the
router's hot path); a test keeps the two identical.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ROUTED_VERSION", "DeadLetter", "RoutedRecord", "encode_routed", "routed_spark_schema"]

ROUTED_VERSION = 1


class RoutedRecord(BaseModel):
    """One raw record after routing (see the module docstring for the wire format)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    v: Literal[1] = Field(1, description="schema version")
    key: str = Field(..., alias="k", description="the record key")
    event_time: int = Field(..., alias="t", description="event time, epoch milliseconds")
    combiner: int = Field(..., alias="c", ge=0, description="combiner id = partition of the combiner topic")
    topic: str = Field(..., alias="tp", description="source (raw) topic")
    partition: int = Field(..., alias="p", ge=0, description="source partition")
    offset: int = Field(..., alias="o", ge=0, description="source offset")
    measure: float | None = Field(None, alias="x", description="numeric measure extracted by the route, if any")
    value: Any = Field(None, alias="d", description="the raw record's JSON value")

    def to_json(self) -> bytes:
        """Compact JSON, field order as on the wire."""
        return orjson.dumps(self.model_dump(by_alias=True))

    @classmethod
    def from_json(cls, raw: bytes | str) -> RoutedRecord:
        """Parse and validate one routed value."""
        return cls.model_validate_json(raw)


def encode_routed(
    key: str, event_time: int, combiner: int, topic: str, partition: int, offset: int,
    measure: float | None, raw_value: bytes,
) -> bytes:  # fmt: skip
    """Wire bytes of a routed record; ``raw_value`` must be valid JSON (it is embedded verbatim)."""
    head = orjson.dumps(
        {"v": ROUTED_VERSION, "k": key, "t": event_time, "c": combiner, "tp": topic, "p": partition,
         "o": offset, "x": measure}
    )  # fmt: skip
    return head[:-1] + b',"d":' + raw_value + b"}"


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
