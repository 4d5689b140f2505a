"""Key, event-time and measure extraction for one batch of raw records (the router's per-record work).

:class:`Extractor` is built once per route from its settings (paths split, getters chosen) and then turns a
batch of raw Kafka messages into plain lists: the good records' keys, times, measures, values and source
positions, plus one :class:`BadRecord` per record that cannot be routed. It never raises for a bad record:
every record of the batch ends up in exactly one of the two. Any exception raised while extracting one record
(not only :class:`RecordError`) makes that record bad, so one record can never stop a route.

Event times are bounded twice: to ``[0, 2**53)`` ms, and (when the caller passes ``max_time_ms``, the wall clock
plus the route's ``time.max_ahead_ms``) to at most that far in the future: a producer writing microseconds, or
one record from the year 3000, would otherwise hold the window clock (a running maximum) in the future and stop
every window from closing. Measures must be finite numbers.

Per record it does one ``orjson.loads`` (which also validates the value's UTF-8, as routed format 1 embeds the
raw JSON verbatim), a few dict lookups and type checks; no model objects. With ``vectorized`` (the data plane
sets it under routed format 2, which carries the raw value as opaque bytes) and top-level key, time and measure
fields (or the Kafka timestamp), a batch of records averaging at least ``_ARROW_MIN_BYTES`` is parsed at once by
Arrow's JSON reader instead; smaller records stay on the per-record path, which costs no more for them (the
threshold's measurements are in BENCHMARKS.md, "Router cost: routed wire format 2"). Any record the vectorized
path has a doubt about (a missing or empty key, a time out of bounds, a large record) goes through the
per-record path, which gives the exact answer or error; a batch Arrow cannot read as a whole (a field of another
JSON type, a value that is not an object, a literal newline, invalid UTF-8) goes through it entirely.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from router.extract_fields import MAX_TIME_MS, RawMessage, json_type, key_getter, measure_getter, time_getter
from schemas.exceptions import RecordError
from schemas.settings import RouteSettings

__all__ = ["BadRecord", "Extracted", "Extractor", "RawMessage", "SourceRecord", "unexpected"]

_loads = orjson.loads
_JSONError = orjson.JSONDecodeError


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

    def __len__(self) -> int:
        return len(self.keys)


def _value_error(raw: bytes) -> RecordError:
    """Why ``raw`` did not parse: not UTF-8, or not JSON (only computed for bad records)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return RecordError("value", f"not valid UTF-8 (byte {exc.start})")
    try:
        _loads(raw)
    except _JSONError as exc:
        return RecordError("value", f"not valid JSON: {exc}")
    return RecordError("value", "not valid JSON")


class Extractor:
    """Extracts keys, event times and measures from raw records as one route's settings say.

    ``max_key_bytes`` bounds a key's UTF-8 size; records larger than ``route.max_record_bytes`` are bad.
    """

    def __init__(self, route: RouteSettings, max_key_bytes: int = 4096, *, vectorized: bool = False) -> None:
        self.route = route
        self.max_record_bytes = route.max_record_bytes
        self._key = key_getter(route.key, max_key_bytes)
        self._time = time_getter(route.time)
        self._measure = measure_getter(route.value_field)
        #: Field-based extraction needs the value to be a JSON object.
        self._needs_object = route.key.source == "field" or route.time.source == "field" or self._measure is not None
        self._max_key_chars = max_key_bytes // 4  # a str of at most this many chars is within the byte limit
        simple = route.key.source == "field" and "." not in (route.key.field or ".")
        simple = simple and route.time.source == "kafka_timestamp" and route.value_field is None
        self._fast_key: str | None = route.key.field if simple else None
        self._time_field = (route.time.field or "t") if route.time.source == "field" else "timestamp"
        self._max_time = MAX_TIME_MS  # this batch's upper bound of event times (see extract)
        self._arrow = _arrow_plan(route) if vectorized else None

    def extract(self, messages: Sequence[RawMessage], max_time_ms: int | None = None) -> Extracted:
        """Split a batch into good records (extracted) and bad ones (with the reason), keeping input order.

        Records whose event time is above ``max_time_ms`` (the wall clock plus the tolerance) are bad.
        """
        self._max_time = MAX_TIME_MS if max_time_ms is None else min(max_time_ms, MAX_TIME_MS)
        if self._arrow is not None and len(messages) >= _ARROW_MIN:
            done = self._extract_arrow(messages, self._arrow)
            if done is not None:
                return done
        if self._fast_key is not None:
            return self._extract_fast(messages, self._fast_key)
        out = Extracted()
        keys, times, measures, values = out.keys, out.times, out.measures, out.values
        parts, offs, bad = out.partitions, out.offsets, out.bad
        one = self._one
        for m in messages:
            try:
                k, t, x, v = one(m)
            except RecordError as err:
                bad.append(BadRecord(m, err))
                continue
            except Exception as exc:  # anything else raised for this one record: it is bad, the route goes on
                bad.append(BadRecord(m, unexpected(exc)))
                continue
            keys.append(k)
            times.append(t)
            measures.append(x)
            values.append(v)
            parts.append(m.partition())  # type: ignore[arg-type]
            offs.append(m.offset())  # type: ignore[arg-type]
        return out

    def _one(self, m: RawMessage) -> tuple[str, int, float | None, bytes]:
        """Extract one record; :class:`RecordError` names the field at fault."""
        v = m.value()
        if v is None:
            raise RecordError("value", "the value is missing (null)")
        if len(v) > self.max_record_bytes:
            raise RecordError("value", f"record has {len(v)} bytes (limit {self.max_record_bytes})")
        try:
            doc = _loads(v)
        except _JSONError:
            raise _value_error(v) from None
        if self._needs_object and type(doc) is not dict:
            raise RecordError("value", f"must be a JSON object, got {json_type(doc)}")
        k = self._key(doc, m)
        t = self._time(doc, m)
        if t > self._max_time:
            raise RecordError(
                self._time_field,
                f"event time {t} ms is more than the tolerance ahead of the wall clock (limit {self._max_time} ms; "
                "microseconds written as milliseconds?)",
            )
        x = self._measure(doc) if self._measure is not None else None
        return k, t, x, v

    def _extract_fast(self, messages: Sequence[RawMessage], name: str) -> Extracted:
        """The common shape inlined: top-level string key, Kafka timestamp, no measure.

        Anything unusual about a record falls back to :meth:`_one`, which gives the exact answer or error.
        """
        plain = self._extract_plain(messages, name)
        if plain is not None:
            return plain
        out = Extracted()
        add_key, add_time, add_value = out.keys.append, out.times.append, out.values.append
        add_part, add_off, bad = out.partitions.append, out.offsets.append, out.bad
        limit, kmax, one, loads, is_str = self.max_record_bytes, self._max_key_chars, self._one, _loads, str
        tmax = self._max_time
        for m in messages:
            v = m.value()
            try:
                if v is None or len(v) > limit:
                    raise ValueError
                k = loads(v)[name]
                kind, t = m.timestamp()
                if type(k) is not is_str or not k or len(k) > kmax or kind == 0 or t < 0 or t > tmax:
                    raise ValueError
            except Exception:
                try:
                    k, t, _, v = one(m)
                except RecordError as err:
                    bad.append(BadRecord(m, err))
                    continue
                except Exception as exc:
                    bad.append(BadRecord(m, unexpected(exc)))
                    continue
            add_key(k)
            add_time(t)
            add_value(v)
            add_part(m.partition())  # type: ignore[arg-type]
            add_off(m.offset())  # type: ignore[arg-type]
        out.measures = [None] * len(out.keys)
        return out

    def _extract_plain(self, messages: Sequence[RawMessage], name: str) -> Extracted | None:
        """:meth:`_extract_fast` when every record of the batch is plain: one pass per field, checked at once.

        ``None`` as soon as one record is not (no value, too large, not JSON, no usable key or timestamp): the
        record-by-record loop then sorts good from bad. It saves the loop's branch and five appends per record
        (in process, benchmark records: 0.57–0.58 against 0.60–0.66 µs per record).
        """
        if not messages:
            return None
        loads = _loads
        values = [m.value() for m in messages]
        try:
            keys = [loads(v)[name] for v in values]  # type: ignore[arg-type]  # None, bad JSON, no key: raises
            if max(map(len, values)) > self.max_record_bytes:  # type: ignore[arg-type]
                return None
        except Exception:
            return None
        kmax, tmax, is_str = self._max_key_chars, self._max_time, str
        if not all(type(k) is is_str and 0 < len(k) <= kmax for k in keys):
            return None
        stamps = [m.timestamp() for m in messages]
        if not all(kind != 0 and 0 <= t <= tmax for kind, t in stamps):
            return None
        return Extracted(
            keys,
            [t for _, t in stamps],
            [None] * len(keys),
            values,  # type: ignore[arg-type]  # no None: loads(None) raised above
            [m.partition() for m in messages],  # type: ignore[misc]  # never None when consumed
            [m.offset() for m in messages],  # type: ignore[misc]
        )

    def _extract_arrow(self, messages: Sequence[RawMessage], plan: _ArrowPlan) -> Extracted | None:
        """Top-level fields of the whole batch parsed by Arrow; ``None`` when Arrow cannot read the batch."""
        values = [m.value() for m in messages]
        n = len(values)
        try:
            joined = b"\n".join(values)  # type: ignore[arg-type]  # a None value raises: record by record then
        except TypeError:
            return None
        if not _ARROW_MIN_BYTES * n <= len(joined) <= _ARROW_MAX_BYTES or joined.count(b"\n") != n - 1:
            return None  # small records (per record is as fast), a huge batch, or a newline inside a record
        try:
            pa.array([joined], pa.binary()).cast(pa.string())  # UTF-8 checked (orjson refuses invalid UTF-8)
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
        ok = pc.fill_null(pc.and_(pc.greater(chars, 0), pc.less_equal(chars, self._max_key_chars)), False)
        sizes = np.fromiter(map(len, values), dtype=np.int64, count=n)  # type: ignore[arg-type]
        good = ok.to_numpy(zero_copy_only=False) & (sizes <= self.max_record_bytes)
        if plan.time is None:
            flat = chain.from_iterable([m.timestamp() for m in messages])  # (kind, ms) pairs
            stamps = np.fromiter(flat, dtype=np.int64, count=2 * n).reshape(n, 2)
            times = stamps[:, 1]
            good &= stamps[:, 0] != 0
        else:
            col = table.column(plan.time).combine_chunks()
            good &= col.is_valid().to_numpy(zero_copy_only=False)
            times = col.fill_null(-1).to_numpy()
        good &= (times >= 0) & (times <= self._max_time)
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
        out = Extracted()
        one = self._one
        for i, m in enumerate(messages):
            if good[i]:
                k, t, x, v = keys[i], t_list[i], measures[i], values[i]
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
            out.values.append(v)  # type: ignore[arg-type]  # not None: a None value left the fast path
            out.partitions.append(m.partition())  # type: ignore[arg-type]
            out.offsets.append(m.offset())  # type: ignore[arg-type]
        return out


#: Smaller batches are extracted record by record (Arrow's fixed cost per call is not worth it).
_ARROW_MIN = 64
#: Batches of smaller records on average are extracted record by record (Arrow's per-batch cost is not repaid).
_ARROW_MIN_BYTES = 128
#: Larger batches (bytes) are extracted record by record (Arrow's binary/string offsets are 32-bit).
_ARROW_MAX_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class _ArrowPlan:
    """What the vectorized path reads: top-level field names, and the Arrow parse options asking for them."""

    key: str
    time: str | None  # None: the Kafka timestamp
    measure: str | None
    parse: pj.ParseOptions


def _arrow_plan(route: RouteSettings) -> _ArrowPlan | None:
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
    return _ArrowPlan(route.key.field or "key", time_field, route.value_field, parse)
