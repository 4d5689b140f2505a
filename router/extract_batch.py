"""Whole-batch extraction: the fields of every record of a batch read at once, not record by record.

:class:`router.extract.Extractor` tries these paths first. Each returns ``None`` when the batch is not for it
(and the extractor goes on record by record), and sends any record it has a doubt about through the extractor's
per-record function ``one``, which gives the exact answer or error, so a batch comes out the same either way:

* :func:`extract_arrow`: key, time and measure are top-level JSON fields (or the time is the Kafka timestamp):
  Arrow's JSON reader parses the batch in one call. The caller passes a least average record size: records of
  the plain shape (top-level key, Kafka timestamp, no measure) have a per-record path about as fast as Arrow
  for small records, so they come here from :data:`ARROW_MIN_BYTES`; any other route comes here at any size.
  A batch Arrow cannot read as a whole (a field of another JSON type, a value that is not an object, a literal
  newline, invalid UTF-8) goes record by record entirely.
* :func:`extract_opaque`: nothing is read from the value (the key is the Kafka key, the time the Kafka
  timestamp, no measure) and routed format 2 carries the value as opaque bytes: values are never parsed, so
  they need not be JSON at all (Avro, Protobuf, text). Per record only the message's accessors run.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from router.extract_fields import BadRecord, Extracted, RawMessage, unexpected
from schemas.exceptions import RecordError
from schemas.settings import RouteSettings

__all__ = ["ARROW_MIN", "ArrowPlan", "Limits", "One", "arrow_plan", "extract_arrow", "extract_opaque", "warm_arrow"]

#: The extractor's per-record function: key, event time, measure, value; raises for a bad record.
One = Callable[[RawMessage], tuple[str, int, float | None, bytes]]


@dataclass(frozen=True, slots=True)
class Limits:
    """One batch's bounds: key size (characters that surely fit, and bytes), record size, event time."""

    key_chars: int
    key_bytes: int
    record_bytes: int
    max_time: int


#: Smaller batches are extracted record by record: Arrow's JSON reader costs about 0.25 ms per call and the
#: whole batch path about 0.65 ms, which 42-byte records repay from 600-800 records per batch (BENCHMARKS.md).
ARROW_MIN = 1000
#: Plain-shape batches (top-level key, Kafka timestamp, no measure) of smaller records on average are extracted
#: record by record: that shape's per-record path is about as fast as Arrow there. Other routes have no such
#: path, and Arrow takes 0.35-0.55 of their per-record CPU for records of 42 bytes (BENCHMARKS.md).
ARROW_MIN_BYTES = 128
#: Larger batches (bytes) are extracted record by record (Arrow's binary/string offsets are 32-bit).
ARROW_MAX_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class ArrowPlan:
    """What the vectorized path reads: top-level field names, and the Arrow parse options asking for them."""

    key: str
    time: str | None  # None: the Kafka timestamp
    measure: str | None
    parse: pj.ParseOptions


@functools.cache
def warm_arrow() -> None:
    """Pay pyarrow's one-time set-up now, not inside the first batch a worker routes.

    Its first conversion of a Python object (a scalar, ``to_numpy``, ``to_pylist``) looks for pandas and imports
    it when installed: 0.5 s of CPU and about 44 MB once per process (measured). The data plane calls this when it
    builds a route that takes this path.
    """
    pa.scalar(0)


def arrow_plan(route: RouteSettings) -> ArrowPlan | None:
    """The vectorized plan for a route whose key, time and measure are top-level fields, else ``None``."""
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
    fields = [(route.key.field or "key", pa.string())]
    if time_field is not None:
        fields.append((time_field, pa.int64()))
    if route.value_field is not None:
        fields.append((route.value_field, pa.float64()))
    if len({name for name, _ in fields}) != len(fields):
        return None
    parse = pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore")
    return ArrowPlan(route.key.field or "key", time_field, route.value_field, parse)


def extract_arrow(
    messages: Sequence[RawMessage], plan: ArrowPlan, limits: Limits, one: One, min_bytes: int = 0
) -> Extracted | None:
    """Top-level fields of the whole batch parsed by Arrow; ``None`` when Arrow cannot read it.

    ``None`` too when its records average fewer than ``min_bytes`` bytes.
    """
    values = [m.value() for m in messages]
    n = len(values)
    try:
        joined = b"\n".join(values)  # type: ignore[arg-type]  # a None value raises: record by record then
    except TypeError:
        return None
    if not min_bytes * n <= len(joined) <= ARROW_MAX_BYTES or joined.count(b"\n") != n - 1:
        return None  # small records (below min_bytes), a huge batch, or a newline inside a record
    try:
        _check_utf8(joined)  # orjson refuses invalid UTF-8
        table = pj.read_json(
            io.BytesIO(joined),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(joined) + 1)),
            parse_options=plan.parse,
        )
    except pa.ArrowException:  # anything Arrow cannot read: the per-record path decides
        return None
    if table.num_rows != n:
        return None
    key = table.column(plan.key).combine_chunks()
    chars = pc.utf8_length(key)
    ok = pc.fill_null(pc.and_(pc.greater(chars, 0), pc.less_equal(chars, limits.key_chars)), False)
    sizes = np.fromiter(map(len, values), dtype=np.int64, count=n)  # type: ignore[arg-type]
    good = ok.to_numpy(zero_copy_only=False) & (sizes <= limits.record_bytes)
    if plan.time is None:
        flat = chain.from_iterable([m.timestamp() for m in messages])  # (kind, ms) pairs
        stamps = np.fromiter(flat, dtype=np.int64, count=2 * n).reshape(n, 2)
        times = stamps[:, 1]
        good &= stamps[:, 0] != 0
    else:
        col = table.column(plan.time).combine_chunks()
        good &= col.is_valid().to_numpy(zero_copy_only=False)
        times = col.fill_null(-1).to_numpy()
    good &= (times >= 0) & (times <= limits.max_time)
    if plan.measure is not None:
        measures: list[float | None] = table.column(plan.measure).to_pylist()
    else:
        measures = [None] * n
    keys: list[str] = key.to_pylist()
    t_list: list[int] = times.tolist()
    if good.all():
        parts: list[int] = [m.partition() for m in messages]  # type: ignore[misc]  # never None when consumed
        offsets: list[int] = [m.offset() for m in messages]  # type: ignore[misc]
        return Extracted(keys, t_list, measures, values, parts, offsets)  # type: ignore[arg-type]  # no None
    return _mixed(messages, good, keys, t_list, measures, values, one)  # type: ignore[arg-type]  # no None


def _check_utf8(data: bytes) -> None:
    """Raise :class:`pyarrow.ArrowInvalid` unless ``data`` is valid UTF-8 (one string over the bytes, no copy)."""
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int32))  # within ARROW_MAX_BYTES
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
