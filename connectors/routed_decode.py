"""Decode routed-record values into typed Arrow columns inside the Spark data source (``decode=routed``).

Why: Spark's ``from_json`` creates a Jackson parser per record (an ``InputStreamReader`` and fresh buffers each
time), which dominated the scan tasks' JVM time (BENCHMARKS.md). Here a whole consumed batch is parsed at
once by Arrow's C++ JSON reader (values joined by newlines), so the JVM receives typed columns and never sees
the JSON.

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

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

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


def decode_routed(values: Sequence[bytes | None], partition: int) -> pa.RecordBatch:
    """One Arrow batch of :data:`ROUTED_ARROW_SCHEMA` for the routed-record ``values`` read from ``partition``."""
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
