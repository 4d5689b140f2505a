"""Field candidates of a raw topic's sample: which JSON path (or the Kafka key) is the key, the event time, a measure.

Heuristics, shown to the user with the evidence (how many records have the field, distinct values, example):

- key: a string or integer field present in nearly every record with more than one value; preferred when its
  name says so (``key``, ``id``, ``user``, ...) and when values repeat (aggregating per key needs repeats). The
  Kafka key is a candidate when nearly every record has a UTF-8 one.
- time: a number in the range of epoch milliseconds (years 2001-2286) or epoch seconds (2001-2286), or an
  ISO-8601 string; otherwise the Kafka record timestamp.
- measure: a number (not a boolean) present in most records and not chosen as the time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import orjson

from router.extract import RawMessage

__all__ = ["Candidate", "Detected", "detect_fields"]

#: Share of the records a key or time field must be present in.
PRESENT = 0.95
#: Share for a measure.
MEASURE_PRESENT = 0.5
#: Distinct values kept per field (enough to tell "few", "many" and "all different").
MAX_DISTINCT = 100_000
KEY_NAMES = ("key", "id", "user", "customer", "account", "device", "session", "item", "product", "word", "name")
TIME_NAMES = ("ts", "time", "timestamp", "event_time", "created", "at", "date")
MEASURE_NAMES = ("amount", "value", "price", "total", "bytes", "size", "duration", "count", "qty", "quantity")
MS_RANGE = (978_307_200_000, 10_000_000_000_000)  # 2001-01-01 .. 2286 in epoch ms
S_RANGE = (978_307_200, 10_000_000_000)  # the same in epoch seconds


@dataclass
class _Stats:
    present: int = 0
    strings: int = 0
    ints: int = 0
    floats: int = 0
    ms: int = 0
    s: int = 0
    iso: int = 0
    distinct: set[Any] = field(default_factory=set)
    example: Any = None


@dataclass(frozen=True)
class Candidate:
    """One candidate field and its evidence."""

    source: Literal["field", "kafka_key", "kafka_timestamp"]
    path: str | None  # dotted JSON path (source=field)
    present: float  # share of the sampled records that have it
    distinct: int  # distinct values seen (capped at MAX_DISTINCT)
    example: str
    unit: Literal["ms", "s", "iso"] = "ms"  # time candidates

    @property
    def label(self) -> str:
        """How a route names it: the path, or the Kafka key / timestamp."""
        return self.path if self.source == "field" and self.path else self.source


@dataclass(frozen=True)
class Detected:
    """Ranked candidates (best first) and what the sample looked like."""

    records: int
    json_objects: int  # records whose value is a JSON object
    keys: list[Candidate]
    times: list[Candidate]
    measures: list[Candidate]


def _walk(doc: dict[str, Any], prefix: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    for k, v in doc.items():
        path = f"{prefix}{k}"
        if type(v) is dict and depth < 3:
            yield from _walk(v, path + ".", depth + 1)
        else:
            yield path, v


def _is_iso(text: str) -> bool:
    if len(text) < 10 or not text[:4].isdigit() or text[4] != "-":
        return False
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _observe(st: _Stats, v: Any) -> None:
    st.present += 1
    t = type(v)
    if t is str:
        st.strings += 1
        if _is_iso(v):
            st.iso += 1
    elif t is int or t is float:
        if t is int:
            st.ints += 1
        else:
            st.floats += 1
        if MS_RANGE[0] <= v < MS_RANGE[1]:
            st.ms += 1
        elif S_RANGE[0] <= v < S_RANGE[1]:
            st.s += 1
    if len(st.distinct) < MAX_DISTINCT and (t is str or t is int):
        st.distinct.add(v)
    if st.example is None and v is not None:
        st.example = v


def _name_score(path: str, names: Sequence[str]) -> int:
    leaf = path.rsplit(".", 1)[-1].lower()
    return 2 if leaf in names else (1 if any(n in leaf for n in names) else 0)


def detect_fields(messages: Sequence[RawMessage]) -> Detected:
    """Rank key, time and measure candidates over a sample of raw records."""
    stats: dict[str, _Stats] = {}
    objects = 0
    kafka_keys: _Stats = _Stats()
    for m in messages:
        raw_key = m.key()
        if raw_key is not None:
            with contextlib.suppress(UnicodeDecodeError):
                _observe(kafka_keys, raw_key.decode("utf-8"))
        value = m.value()
        try:
            doc = orjson.loads(value) if value is not None else None
        except orjson.JSONDecodeError:
            continue
        if type(doc) is not dict:
            continue
        objects += 1
        for path, v in _walk(doc):
            _observe(stats.setdefault(path, _Stats()), v)
    n = len(messages)
    if n == 0:
        return Detected(0, 0, [], [], [])

    def cand(source: Any, path: str | None, st: _Stats, unit: Any = "ms") -> Candidate:
        return Candidate(source, path, st.present / n, len(st.distinct), str(st.example)[:40], unit)

    keys: list[tuple[tuple[float, ...], Candidate]] = []
    for path, st in stats.items():
        if st.present < PRESENT * n or st.strings + st.ints < st.present or len(st.distinct) < 2:
            continue
        if st.ms + st.s + st.iso >= 0.9 * st.present:
            continue  # a time, not a key
        repeats = 1.0 if len(st.distinct) < 0.5 * st.present else 0.0
        keys.append(
            ((_name_score(path, KEY_NAMES), repeats, float(st.strings > 0), st.present), cand("field", path, st))
        )
    if kafka_keys.present >= PRESENT * n and len(kafka_keys.distinct) >= 2:
        repeats = 1.0 if len(kafka_keys.distinct) < 0.5 * kafka_keys.present else 0.0
        keys.append(((1, repeats, 1.0, kafka_keys.present), cand("kafka_key", None, kafka_keys)))
    times: list[tuple[tuple[float, ...], Candidate]] = []
    for path, st in stats.items():
        if st.present < PRESENT * n:
            continue
        for unit, hits in (("ms", st.ms), ("s", st.s), ("iso", st.iso)):
            if hits >= 0.99 * st.present:
                times.append(((_name_score(path, TIME_NAMES), st.present), cand("field", path, st, unit)))
    time_paths = {c.path for _, c in times}
    measures: list[tuple[tuple[float, ...], Candidate]] = []
    for path, st in stats.items():
        numeric = st.ints + st.floats
        if path in time_paths or numeric < MEASURE_PRESENT * n or numeric < st.present:
            continue
        measures.append(((_name_score(path, MEASURE_NAMES), float(st.floats > 0), numeric), cand("field", path, st)))
    ts = _Stats(present=n, example="record timestamps")
    return Detected(
        n,
        objects,
        [c for _, c in sorted(keys, key=lambda x: x[0], reverse=True)],
        [c for _, c in sorted(times, key=lambda x: x[0], reverse=True)] + [cand("kafka_timestamp", None, ts)],
        [c for _, c in sorted(measures, key=lambda x: x[0], reverse=True)],
    )
