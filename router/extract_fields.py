"""The getters of one raw record's fields (key, event time, measure), chosen once per route from its settings.

Each getter takes the parsed JSON value (and the message, for the Kafka key and timestamp) and returns the field,
or raises :class:`~schemas.exceptions.RecordError` naming the field and what is wrong with it.
:class:`router.extract.Extractor` calls them for every record it does not extract on a faster path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from router.partitioners.keys import KeyBuffer
from schemas.exceptions import RecordError
from schemas.settings import KeySpec, TimeSpec

__all__ = [
    "MAX_TIME_MS",
    "BadRecord",
    "Extracted",
    "Getter",
    "RawMessage",
    "SourceRecord",
    "json_type",
    "key_getter",
    "measure_getter",
    "path_getter",
    "time_getter",
    "unexpected",
]

#: Event times must be epoch milliseconds in [0, 2**53) (exact in a double, so Spark and JSON agree).
MAX_TIME_MS = 1 << 53


class RawMessage(Protocol):
    """The part of ``confluent_kafka.Message`` the extractor uses."""

    def value(self) -> bytes | None: ...  # noqa: D102
    def key(self) -> bytes | None: ...  # noqa: D102
    def timestamp(self) -> tuple[int, int]: ...  # noqa: D102
    def partition(self) -> int | None: ...  # noqa: D102
    def offset(self) -> int | None: ...  # noqa: D102
    def topic(self) -> str | None: ...  # noqa: D102


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """A raw record built from its parts: a :class:`RawMessage` for dead letters of refused outputs, files and tests."""

    topic_: str
    partition_: int
    offset_: int
    key_: bytes | None
    value_: bytes | None
    timestamp_: int | None = None

    def value(self) -> bytes | None:  # noqa: D102
        return self.value_

    def key(self) -> bytes | None:  # noqa: D102
        return self.key_

    def timestamp(self) -> tuple[int, int]:  # noqa: D102
        return (0, -1) if self.timestamp_ is None else (1, self.timestamp_)

    def partition(self) -> int | None:  # noqa: D102
        return self.partition_

    def offset(self) -> int | None:  # noqa: D102
        return self.offset_

    def topic(self) -> str | None:  # noqa: D102
        return self.topic_


@dataclass(slots=True)
class BadRecord:
    """A raw record that cannot be routed, with the error naming the field at fault."""

    message: RawMessage
    error: RecordError


def unexpected(exc: BaseException) -> RecordError:
    """A :class:`RecordError` for an exception nobody expected while handling one record."""
    return RecordError("value", f"cannot be handled: {type(exc).__name__}: {str(exc)[:200]}")


@dataclass(slots=True)
class Extracted:
    """One batch after extraction: parallel lists over the good records, and the bad ones."""

    keys: list[str] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    measures: list[float | None] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    #: the keys' bytes in one buffer (the compiled scan's, when it read every record): hashed whole
    key_buffer: KeyBuffer | None = None

    def __len__(self) -> int:
        return len(self.keys)


Getter = Callable[[Any, RawMessage], Any]


def path_getter(path: str) -> Callable[[Any], Any]:
    """A function returning the value at dotted ``path`` of a parsed JSON value; ``KeyError`` when absent."""
    parts = tuple(path.split("."))
    if len(parts) == 1:
        name = parts[0]

        def one(doc: Any) -> Any:
            return doc[name]

        return one

    def many(doc: Any) -> Any:
        for p in parts:
            if type(doc) is not dict:
                raise KeyError(p)
            doc = doc[p]
        return doc

    return many


def key_getter(spec: KeySpec, max_key_bytes: int) -> Getter:
    """The route's key: the Kafka key (UTF-8) or a JSON field (a non-empty string, or an integer as text)."""
    if spec.source == "kafka_key":

        def kafka_key(doc: Any, msg: RawMessage) -> str:
            raw = msg.key()
            if raw is None:
                raise RecordError("key", "the Kafka key is missing")
            if len(raw) > max_key_bytes:
                raise RecordError("key", f"the Kafka key has {len(raw)} bytes (limit {max_key_bytes})")
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                raise RecordError("key", "the Kafka key is not valid UTF-8") from None

        return kafka_key
    path = spec.field or "key"
    get = path_getter(path)

    def json_key(doc: Any, msg: RawMessage) -> str:
        try:
            k = get(doc)
        except (KeyError, TypeError):
            raise RecordError(path, "key field is missing") from None
        tk = type(k)
        if tk is str:
            if not k:
                raise RecordError(path, "key is an empty string")
            if len(k) > max_key_bytes // 4 and len(k.encode("utf-8")) > max_key_bytes:
                raise RecordError(path, f"key is longer than {max_key_bytes} bytes")
            return k
        if tk is int:
            return str(k)
        raise RecordError(path, f"key must be a string or an integer, got {json_type(k)}")

    return json_key


def time_getter(spec: TimeSpec) -> Getter:
    """The route's event time in epoch ms: the Kafka timestamp or a JSON field (ms, s or ISO-8601)."""
    if spec.source == "kafka_timestamp":

        def kafka_ts(doc: Any, msg: RawMessage) -> int:
            kind, ts = msg.timestamp()
            if kind == 0 or ts < 0:
                raise RecordError("timestamp", "the record has no Kafka timestamp")
            return ts

        return kafka_ts
    path = spec.field or "t"
    get = path_getter(path)
    unit = spec.unit

    def json_time(doc: Any, msg: RawMessage) -> int:
        try:
            v = get(doc)
        except (KeyError, TypeError):
            raise RecordError(path, "event time field is missing") from None
        tv = type(v)
        if unit == "iso":
            if tv is not str:
                raise RecordError(path, f"event time must be an ISO-8601 string, got {json_type(v)}")
            try:
                dt = datetime.fromisoformat(v)
            except ValueError:
                raise RecordError(path, f"event time {v[:40]!r} is not ISO-8601") from None
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
            ms = int(dt.timestamp() * 1000)
        elif tv is int or tv is float:
            try:
                ms = int(v * 1000) if unit == "s" else int(v)
            except (OverflowError, ValueError):  # inf, nan, or a float whose product overflows
                raise RecordError(path, f"event time {v!r} is out of range") from None
        else:
            raise RecordError(path, f"event time must be a number (epoch {unit}), got {json_type(v)}")
        if not 0 <= ms < MAX_TIME_MS:
            raise RecordError(path, f"event time {v!r} is out of range")
        return ms

    return json_time


def measure_getter(path: str | None) -> Callable[[Any], float | None] | None:
    """The route's measure (a finite number, or null when absent); ``None`` when the route has none."""
    if path is None:
        return None
    get = path_getter(path)

    def measure(doc: Any) -> float | None:
        try:
            v = get(doc)
        except (KeyError, TypeError):
            return None  # an absent measure is null (aggregates skip it); a wrong type is an error
        tv = type(v)
        if tv is float:
            if not math.isfinite(v):
                raise RecordError(path, f"measure must be a finite number, got {v!r}")
            return v
        if tv is int:
            try:
                return float(v)
            except OverflowError:
                raise RecordError(path, f"measure {str(v)[:40]} is too large for a double") from None
        if v is None:
            return None
        raise RecordError(path, f"measure must be a number, got {json_type(v)}")

    return measure


def json_type(v: Any) -> str:
    """The JSON type of a parsed value, for error messages ("an object", "a string", ...)."""
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", float: "a number"}.get(
        type(v), "null" if v is None else type(v).__name__
    )
