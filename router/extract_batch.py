"""Whole-batch extraction: the fields of every record of a batch read at once, not record by record.

:class:`router.extract.Extractor` tries these paths first. Each returns ``None`` when the batch is not for it
(and the extractor goes on record by record), and sends any record it has a doubt about through the extractor's
per-record function ``one``, which gives the exact answer or error, so a batch comes out the same either way:

* :func:`extract_scan`: key, time and measure are top-level JSON fields (or the time is the Kafka timestamp):
  the compiled scan of :mod:`router.extract_scan` reads the batch's joined values in one call. The caller uses
  it from :data:`SCAN_MIN` records per batch and up to :data:`SCAN_MAX_BYTES` per record on average
  (:data:`SCAN_MAX_BYTES_PLAIN` for the plain shape). A batch over :data:`SCAN_MAX_TOTAL` bytes or with invalid
  UTF-8 goes record by record entirely.
* :func:`extract_opaque`: nothing is read from the value (the key is the Kafka key, the time the Kafka
  timestamp, no measure) and routed format 2 carries the value as opaque bytes: values are never parsed, so
  they need not be JSON at all (Avro, Protobuf, text). Per record only the message's accessors run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pyarrow as pa

from router.extract_fields import BadRecord, Extracted, RawMessage, unexpected
from router.extract_scan import READ, scan_records
from router.partitioners.keys import KeyBuffer
from schemas.exceptions import RecordError
from schemas.settings import RouteSettings

__all__ = [
    "SCAN_MAX_BYTES",
    "SCAN_MAX_BYTES_PLAIN",
    "SCAN_MIN",
    "FieldPlan",
    "Limits",
    "One",
    "extract_opaque",
    "extract_scan",
    "field_plan",
    "warm_scan",
]

#: The extractor's per-record function: key, event time, measure, value; raises for a bad record.
One = Callable[[RawMessage], tuple[str, int, float | None, bytes]]


@dataclass(frozen=True, slots=True)
class Limits:
    """One batch's bounds: key size (characters that surely fit, and bytes), record size, event time."""

    key_chars: int
    key_bytes: int
    record_bytes: int
    max_time: int


#: Smaller batches are extracted record by record: a call of the scan path costs tens of µs whatever the batch
#: holds (BENCHMARKS.md, "A compiled scan instead of Arrow").
SCAN_MIN = 64
#: Batches of larger records on average are extracted record by record: the scan reads every byte, orjson
#: skips long strings faster (BENCHMARKS.md).
SCAN_MAX_BYTES = 512
#: The same bound for the plain shape (top-level key, Kafka timestamp, no measure), whose own per-record pass
#: (one ``orjson.loads`` and a lookup) is cheaper than the others' and overtakes the scan sooner.
SCAN_MAX_BYTES_PLAIN = 96
#: Larger batches (bytes) are extracted record by record (the scan's key offsets are 32-bit).
SCAN_MAX_TOTAL = 1 << 30


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """What the scan path reads: top-level field names (the time ``None``: the Kafka timestamp)."""

    key: str
    time: str | None
    measure: str | None
    #: The three names as bytes for the compiled scan (empty: not read from the value).
    names: tuple[np.ndarray, np.ndarray, np.ndarray]


@functools.cache
def warm_scan() -> None:
    """Pay the scan path's one-time costs now, not inside the first batch a worker routes.

    The compiled scan is loaded from numba's cache (or compiled). pyarrow, which turns the keys into strings,
    looks for pandas on its first conversion to Python objects and imports it when installed: 0.5 s of CPU and
    about 44 MB once per process (measured). The extractor calls this when it builds a route that takes this path.
    """
    pa.scalar(0)
    plan = field_plan_of("key", "t", "x")
    assert plan is not None
    buf = np.frombuffer(b'{"key":"k","t":1,"x":1.5}', np.uint8)
    scan_records(buf, np.array([buf.shape[0]], np.int64), *plan.names, 1 << 20, 4096, 1 << 53)


def field_plan(route: RouteSettings) -> FieldPlan | None:
    """The scan plan for a route whose key, time and measure are top-level fields, else ``None``."""
    top = lambda path: path is not None and "." not in path  # noqa: E731
    if route.key.source != "field" or not top(route.key.field):
        return None
    time_field = None
    if route.time.source == "field":
        if not top(route.time.field or "t") or route.time.unit != "ms":
            return None
        time_field = route.time.field or "t"
    if route.value_field is not None and not top(route.value_field):
        return None
    return field_plan_of(route.key.field or "key", time_field, route.value_field)


def field_plan_of(key: str, time: str | None, measure: str | None) -> FieldPlan | None:
    """The plan reading these top-level fields; ``None`` when two of them are the same field."""
    named = [f for f in (key, time, measure) if f is not None]
    if len(set(named)) != len(named):
        return None
    names = tuple(np.frombuffer((f or "").encode(), np.uint8).copy() for f in (key, time, measure))
    return FieldPlan(key, time, measure, names)  # type: ignore[arg-type]  # three arrays


def extract_scan(messages: Sequence[RawMessage], plan: FieldPlan, limits: Limits, one: One) -> Extracted | None:
    """Top-level fields of the whole batch read by the compiled scan of :mod:`router.extract_scan`.

    ``None`` (the batch goes record by record) for an empty batch, one over :data:`SCAN_MAX_TOTAL` bytes, or bytes
    that are not UTF-8. Records the scan is in doubt about go through ``one``.
    """
    n = len(messages)
    if not n:
        return None
    values = [m.value() for m in messages]
    try:
        joined = b"".join(values)  # type: ignore[arg-type]  # a None value raises
    except TypeError:
        values = [b"" if v is None else v for v in values]  # empty: in doubt, and ``one`` names the error
        joined = b"".join(values)  # type: ignore[arg-type]
    if len(joined) > SCAN_MAX_TOTAL:
        return None
    try:
        _check_utf8(joined)  # orjson refuses invalid UTF-8
    except pa.ArrowInvalid:
        return None
    ends = np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=n))  # type: ignore[arg-type]
    status, times, measures, nulls, key_bytes, key_ends = scan_records(
        np.frombuffer(joined, np.uint8), ends, *plan.names, limits.record_bytes, limits.key_bytes, limits.max_time
    )
    keys: list[str] = pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(key_ends), pa.py_buffer(key_bytes)]
    ).to_pylist()
    good = status == READ
    if plan.time is None:
        flat = chain.from_iterable([m.timestamp() for m in messages])  # (kind, ms) pairs
        stamps = np.fromiter(flat, dtype=np.int64, count=2 * n).reshape(n, 2)
        times = stamps[:, 1]
        good &= (stamps[:, 0] != 0) & (times >= 0) & (times <= limits.max_time)
    t_list: list[int] = times.tolist()
    if plan.measure is None:
        x_list: list[float | None] = [None] * n
    else:
        x_list = measures.tolist()
        for i in np.flatnonzero(nulls).tolist():
            x_list[i] = None
    if good.all():
        parts: list[int] = [m.partition() for m in messages]  # type: ignore[misc]  # never None when consumed
        offsets: list[int] = [m.offset() for m in messages]  # type: ignore[misc]
        buffer = KeyBuffer(key_bytes, key_ends, keys)  # the partitioner hashes the keys' bytes whole
        # values has no None here (every record was read)
        return Extracted(keys, t_list, x_list, values, parts, offsets, key_buffer=buffer)  # type: ignore[arg-type]
    return _mixed(messages, good, keys, t_list, x_list, values, one)  # type: ignore[arg-type]  # no None where good


def _check_utf8(data: bytes) -> None:
    """Raise :class:`pyarrow.ArrowInvalid` unless ``data`` is valid UTF-8 (one string over the bytes, no copy)."""
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int32))  # within SCAN_MAX_TOTAL
    pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(data)]).validate(full=True)


def extract_opaque(messages: Sequence[RawMessage], limits: Limits, one: One) -> Extracted | None:
    """Keys from the Kafka keys, times from the Kafka timestamps, values untouched; ``None`` for an empty batch.

    A record with no key, an empty, too long or non-UTF-8 key, no value, a value over the size limit, or no
    usable timestamp goes through ``one``, which names what is wrong (the good records of the batch stay here).
    """
    n = len(messages)
    if not n:
        return None
    raw_keys = [m.key() for m in messages]
    values = [m.value() for m in messages]
    stamps = [m.timestamp() for m in messages]
    times = [t for _, t in stamps]
    try:
        keys = [k.decode() for k in raw_keys]  # type: ignore[union-attr]  # None or bad UTF-8 raises
        plain = (
            max(map(len, raw_keys)) <= limits.key_bytes  # type: ignore[arg-type]
            and max(map(len, values)) <= limits.record_bytes  # type: ignore[arg-type]  # None raises
            and all(keys)
            and all(kind != 0 and 0 <= t <= limits.max_time for kind, t in stamps)
        )
    except (AttributeError, TypeError, UnicodeDecodeError):
        plain = False
    measures: list[float | None] = [None] * n
    if plain:
        parts: list[int] = [m.partition() for m in messages]  # type: ignore[misc]  # never None when consumed
        offsets: list[int] = [m.offset() for m in messages]  # type: ignore[misc]
        return Extracted(keys, times, measures, values, parts, offsets)  # type: ignore[arg-type]  # no None
    text = [_utf8(k) for k in raw_keys]
    good = np.fromiter(
        (
            k is not None and 0 < len(k) <= limits.key_bytes and s is not None and v is not None
            and len(v) <= limits.record_bytes and kind != 0 and 0 <= t <= limits.max_time
            for k, s, v, (kind, t) in zip(raw_keys, text, values, stamps, strict=True)
        ),
        dtype=bool,
        count=n,
    )  # fmt: skip
    keys = [k or "" for k in text]
    return _mixed(messages, good, keys, times, measures, values, one)  # type: ignore[arg-type]  # no None where good


def _utf8(raw: bytes | None) -> str | None:
    """``raw`` decoded, or ``None`` when it is missing or not UTF-8 (the per-record path then names the error)."""
    try:
        return None if raw is None else raw.decode()
    except UnicodeDecodeError:
        return None


def _mixed(
    messages: Sequence[RawMessage],
    good: np.ndarray,
    keys: list[str],
    times: list[int],
    measures: list[float | None],
    values: list[bytes],
    one: One,
) -> Extracted:
    """A batch whose rows ``good`` were read on a batch path, and whose other rows go through ``one``."""
    out = Extracted()
    for i, m in enumerate(messages):
        if good[i]:
            k, t, x, v = keys[i], times[i], measures[i], values[i]
        else:
            try:
                k, t, x, v = one(m)
            except RecordError as err:
                out.bad.append(BadRecord(m, err))
                continue
            except Exception as exc:
                out.bad.append(BadRecord(m, unexpected(exc)))
                continue
        out.keys.append(k)
        out.times.append(t)
        out.measures.append(x)
        out.values.append(v)
        out.partitions.append(m.partition())  # type: ignore[arg-type]
        out.offsets.append(m.offset())  # type: ignore[arg-type]
    return out
