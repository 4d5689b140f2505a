"""Decode routed records into typed Arrow columns inside the Spark data source (``decode=routed``).

Both wire formats of :mod:`schemas.records`, told apart per record by the first byte, may share one batch (a topic
written during a rolling upgrade). Format 2 is decoded with numpy: the values are joined once; for each prefix
layout present (one per router batch), each field of the prefix is gathered for all records of that layout at once
and viewed as big-endian integers or floats (a decimal measure is divided by its power of ten). The key comes from
the Kafka key, the combiner from the partition read, the source topic from the topic's name. No Python runs per
record beyond collecting the values and keys from the consumed messages.

Format 1 (JSON): Spark's ``from_json`` creates a Jackson parser per record (an ``InputStreamReader`` and fresh
buffers each time), the bulk of the scan tasks' JVM time (BENCHMARKS.md). Here a whole consumed batch is
parsed at once by Arrow's C++ JSON reader (values joined by newlines), so the JVM receives typed columns and
never sees the JSON.

Columns (those of :func:`spark_consumers.aggregations.parse_routed`, without ``item``): ``key``, ``event_time``
(UTC timestamp from ``t`` in ms), ``measure``, ``combiner`` (the Kafka partition read), ``src_topic``,
``src_partition``, ``src_offset``. A value that is not a routed record (not JSON, wrong field types) gives a row
of nulls, as ``from_json`` does in its permissive mode; the fast path falls back to parsing record by record
only for a batch that holds such a value (or a raw record with a literal newline inside).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from schemas.records import DECIMAL_NONE, POW10, V2_HEADS, source_topic, v2_layout

__all__ = ["ROUTED_ARROW_SCHEMA", "decode_routed"]

#: What the Arrow JSON reader extracts from a routed record (other fields, ``d`` included, are skipped).
_WIRE = pa.schema(
    [
        ("k", pa.string()),
        ("t", pa.int64()),
        ("x", pa.float64()),
        ("tp", pa.string()),
        ("p", pa.int64()),
        ("o", pa.int64()),
    ]
)
_TS = pa.timestamp("us", tz="UTC")

#: The data source's columns under ``decode=routed`` (Arrow side of its Spark schema).
ROUTED_ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("event_time", _TS),
        ("measure", pa.float64()),
        ("combiner", pa.int32()),
        ("src_topic", pa.string()),
        ("src_partition", pa.int64()),
        ("src_offset", pa.int64()),
    ]
)
_PARSE = pj.ParseOptions(explicit_schema=_WIRE, unexpected_field_behavior="ignore")


def decode_routed(
    values: Sequence[bytes | None], partition: int, keys: Sequence[bytes | None] | None = None, topic: str = ""
) -> pa.RecordBatch:
    """One Arrow batch of :data:`ROUTED_ARROW_SCHEMA` for the routed ``values`` read from ``topic[partition]``.

    ``keys`` are the messages' Kafka keys (format 2 carries the record key there; without them a format-2 row
    has a null key); ``topic`` names the source topic of format-2 rows (see :func:`schemas.records.source_topic`).
    """
    n = len(values)
    v2 = _v2_rows(values)
    if v2 is None or not v2.any():
        return _decode_v1(values, partition)
    if v2.all():
        return _decode_v2(values, partition, keys, topic)
    rows = np.arange(n)
    i1, i2 = rows[~v2], rows[v2]
    part1 = _decode_v1([values[i] for i in i1], partition)
    sub_keys = None if keys is None else [keys[i] for i in i2]
    part2 = _decode_v2([values[i] for i in i2], partition, sub_keys, topic)
    both = pa.Table.from_batches([part1, part2]).combine_chunks()
    back = np.empty(n, dtype=np.int64)
    back[np.concatenate([i1, i2])] = rows  # position of each input row in ``both``
    return both.take(pa.array(back)).to_batches()[0] if n else part1


def _v2_rows(values: Sequence[bytes | None]) -> np.ndarray | None:
    """Which values are format 2 (a boolean per value); ``None`` when some value is missing (format 1 path)."""
    try:
        joined = b"".join(values)  # type: ignore[arg-type]  # a None value raises
    except TypeError:
        return None
    lens = np.fromiter(map(len, values), dtype=np.int64, count=len(values))  # type: ignore[arg-type]
    if not len(joined):
        return np.zeros(len(values), dtype=bool)
    starts = np.cumsum(lens) - lens
    tags = np.frombuffer(joined, np.uint8)[np.minimum(starts, len(joined) - 1)]
    return np.asarray((_HEAD_OF[tags] > 0) & (lens >= _HEAD_OF[tags]))


#: Prefix size of each version-2 tag, 0 for a byte that is no version-2 tag.
_HEAD_OF = np.zeros(256, dtype=np.int64)
_HEAD_OF[list(V2_HEADS)] = list(V2_HEADS.values())


def _field(buf: np.ndarray, starts: np.ndarray, at: int, dtype: str, width: int | None = None) -> np.ndarray:
    """The big-endian field at byte ``at`` of every record (records start at ``starts`` in ``buf``).

    ``width`` < the dtype's size reads an unsigned field of that many bytes (the narrow layout's 6-byte fields).
    """
    size = np.dtype(dtype).itemsize
    width = size if width is None else width
    raw = buf[starts[:, None] + np.arange(at, at + width)]
    if width < size:
        raw = np.hstack([np.zeros((len(starts), size - width), np.uint8), raw])
    return np.ascontiguousarray(raw).view(dtype).ravel()


def _decode_v2(
    values: Sequence[bytes | None], partition: int, keys: Sequence[bytes | None] | None, topic: str
) -> pa.RecordBatch:
    n = len(values)
    joined = b"".join(values)  # type: ignore[arg-type]  # _v2_rows checked: no None
    lens = np.fromiter(map(len, values), dtype=np.int64, count=n)  # type: ignore[arg-type]
    buf = np.frombuffer(joined, np.uint8)
    starts = np.cumsum(lens) - lens
    tags = buf[starts]
    src_p = _field(buf, starts, 1, ">u2").astype(np.int64)  # at the same place in every layout
    src_o, t_ms = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    x = np.full(n, np.nan)
    layouts = np.unique(tags).tolist()  # one per router batch (module docstring of schemas.records): a handful
    for tag in layouts:
        rows: slice | np.ndarray = slice(None) if len(layouts) == 1 else np.flatnonzero(tags == tag)
        s = starts[rows]
        width, xw, _ = v2_layout(tag)  # type: ignore[misc]  # _v2_rows checked every tag
        src_o[rows] = _field(buf, s, 3, ">i8", width)
        t_ms[rows] = _field(buf, s, 3 + width, ">i8", width)
        if xw == 5:  # decimal: m / 10**d, both divided as doubles (one correctly rounded division, as the encoder)
            m = _field(buf, s, 3 + 2 * width, ">i4")
            x[rows] = np.where(m == DECIMAL_NONE, np.nan, m / POW10[buf[s + 7 + 2 * width]])
        elif xw:
            x[rows] = _field(buf, s, 3 + 2 * width, ">f4" if xw == 4 else ">f8")
    measure = pa.array(x, pa.float64(), mask=np.isnan(x))
    if keys is None:
        key = pa.nulls(n, pa.string())
    else:
        try:
            key = pa.array(keys, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8 (never written by a router): replaced, as the record-by-record tools do
            key = pa.array([None if k is None else k.decode("utf-8", "replace") for k in keys], pa.string())
    return pa.RecordBatch.from_arrays(
        [
            key,
            pa.array(t_ms * 1000, pa.int64()).cast(_TS),
            measure,
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.repeat(pa.scalar(source_topic(topic), pa.string()), n),
            pa.array(src_p, pa.int64()),
            pa.array(src_o, pa.int64()),
        ],
        schema=ROUTED_ARROW_SCHEMA,
    )


def _decode_v1(values: Sequence[bytes | None], partition: int) -> pa.RecordBatch:
    n = len(values)
    table = _fast(values) if n else None
    cols = _columns(table) if table is not None else _slow(values)
    t_ms = cols.pop("t")
    event_time = pc.multiply(t_ms, 1000).cast(_TS)
    return pa.RecordBatch.from_arrays(
        [
            cols["k"],
            event_time,
            cols["x"],
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            cols["tp"],
            cols["p"],
            cols["o"],
        ],
        schema=ROUTED_ARROW_SCHEMA,
    )


def _fast(values: Sequence[bytes | None]) -> pa.Table | None:
    """All values parsed in one call, or ``None`` when some value needs the record-by-record path."""
    try:
        joined = b"\n".join(values)  # type: ignore[arg-type]  # a None value raises: record by record then
    except TypeError:
        return None
    if joined.count(b"\n") != len(values) - 1:  # a newline inside a record would split it in two
        return None
    block = max(1 << 20, len(joined) + 1)  # one block: no re-chunking, no threads (tasks already use the cores)
    try:
        table = pj.read_json(
            io.BytesIO(joined), read_options=pj.ReadOptions(use_threads=False, block_size=block), parse_options=_PARSE
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    return table if table.num_rows == len(values) else None


def _columns(table: pa.Table) -> dict[str, pa.Array]:
    return {name: table.column(name).combine_chunks() for name in _WIRE.names}


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "k": (str,), "t": (int,), "x": (float, int), "tp": (str,), "p": (int,), "o": (int,),
}  # fmt: skip


def _slow(values: Sequence[bytes | None]) -> dict[str, pa.Array]:
    """Record by record; a value that is not a JSON object with correctly typed fields becomes a row of nulls."""
    out: dict[str, list[Any]] = {name: [] for name in _WIRE.names}
    for v in values:
        rec = _load(v)
        for name, kinds in _PY_TYPES.items():
            x = rec.get(name)
            ok = isinstance(x, kinds) and not isinstance(x, bool)
            out[name].append(x if ok else None)
    return {name: pa.array(col, _WIRE.field(name).type) for name, col in out.items()}


def _load(v: bytes | None) -> dict[str, Any]:
    if v is None:
        return {}
    try:
        rec = orjson.loads(v)
    except orjson.JSONDecodeError:
        return {}
    return rec if isinstance(rec, dict) else {}
