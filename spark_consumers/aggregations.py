"""Pure DataFrame -> DataFrame aggregation functions over routed records (batch or streaming alike).

The plan of the streaming job, read bottom-up from the source::

    kafka columns (one scan task per combiner partition)
      -> parse_routed            routed value -> key, event_time, measure, combiner, source position
                                 (done inside the Python source already when it decodes: decode=routed)
      -> with_event_watermark    withWatermark(event_time, delay)
      -> [dedupe_source_position]  optional: dropDuplicatesWithinWatermark(tp, p, o) -- see its docstring
      -> final_aggregates        groupBy(window, key).agg(...)

Spark plans ``final_aggregates`` as ``HashAggregate(partial)`` inside each scan task -- the combiner stage:
one partial aggregate per (window, key) present in that combiner -- then a hash shuffle of the partials to
``spark.sql.shuffle.partitions`` reducers, which merge them with the state store (final aggregation).
:func:`partial_aggregates` and :func:`merge_partials` spell the same two stages out explicitly (for batch
analysis and for tests that check the two-stage result equals the direct one).

Semantics of a result row: the *full* aggregate of all records of that (window, key) accepted so far, never a
delta; with output mode ``update`` a later row for the same (window, key) supersedes the earlier one.

Aggregates and where their work runs (the named sets are ``spark.profile``: light, heavy):

- ``count``, ``sum``, ``min``, ``max``, ``mean``: exact, about 1 us per record in the scan task;
- ``approx_distinct``: HyperLogLog++ of ``item`` with relative standard deviation ``approx_rsd``;
- ``percentiles``: ``percentile_approx(measure, percentiles, percentile_accuracy)``, one array column. Its
  documented approximation: the value returned for fraction ``p`` of ``n`` values has a rank within
  ``n / percentile_accuracy`` of ``p * n`` (Greenwald-Khanna summaries, merged at the reducers);
- ``score``: the sum over the records of :func:`score_column`, a per-record scalar computation whose cost is
  set by ``score_rounds`` (a stand-in for parsing, feature extraction or a scalar UDF): exact, the same as
  :func:`score_reference`.
- ``top_k``: ``approx_top_k(item, top_k)``.

All of these are partially aggregated in the scan task (the combiner stage), which is what routing balances.
Aggregations Spark does *not* pre-aggregate -- grouped-aggregate pandas UDFs, exact ``percentile`` -- shuffle
every raw row to the reducer of its key, so their skew sits on the reducers, where no layout of the input
helps.

Late records: Spark drops a record's contribution to window ``w`` when ``w.end <= watermark`` of the
micro-batch that reads it (watermark = max event time of earlier micro-batches - delay). Each window of a
sliding record is judged separately.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from schemas.records import V2_HEADS, v2_layout

__all__ = [
    "AGGREGATIONS",
    "AggSpec",
    "dedupe_source_position",
    "final_aggregates",
    "merge_partials",
    "parse_routed",
    "partial_aggregates",
    "score_column",
    "score_reference",
    "with_event_watermark",
    "window_column",
]

AGGREGATIONS = ("count", "sum", "min", "max", "mean", "approx_distinct", "top_k", "percentiles", "score")
#: Multiplier, increment and mask of :func:`score_column`'s rounds (a 31-bit linear congruential step).
_LCG_A, _LCG_C, _MASK31 = 1103515245, 12345, 0x7FFFFFFF


@dataclass(frozen=True)
class AggSpec:
    """What to compute: window (Spark interval strings), aggregates, watermark delay."""

    window: str = "10 seconds"
    slide: str | None = None
    watermark: str = "10 seconds"
    aggregations: Sequence[str] = field(default_factory=lambda: ("count", "sum", "min", "max", "mean"))
    top_k: int = 5
    approx_rsd: float = 0.05
    percentiles: Sequence[float] = (0.5, 0.99)
    percentile_accuracy: int = 10_000
    score_rounds: int = 1_000

    def __post_init__(self) -> None:
        bad = [a for a in self.aggregations if a not in AGGREGATIONS]
        if bad:
            raise ValueError(f"unknown aggregation(s) {bad}; valid: {', '.join(AGGREGATIONS)}")
        if not self.percentiles or not all(0 < q < 1 for q in self.percentiles):
            raise ValueError(f"percentiles must be fractions in (0, 1), got {list(self.percentiles)}")
        if self.percentile_accuracy < 1 or self.score_rounds < 1:
            raise ValueError(
                f"percentile_accuracy and score_rounds must be >= 1, got percentile_accuracy="
                f"{self.percentile_accuracy}, score_rounds={self.score_rounds}"
            )


def _value_schema(with_raw: bool) -> StructType:
    fields = [
        StructField("k", StringType()),
        StructField("t", LongType()),
        StructField("c", LongType()),
        StructField("tp", StringType()),
        StructField("p", LongType()),
        StructField("o", LongType()),
        StructField("x", DoubleType()),
    ]
    if with_raw:
        fields.append(StructField("d", StringType()))  # an object parsed as string keeps its raw JSON text
    return StructType(fields)


def parse_routed(raw: DataFrame, item_field: str | None = None) -> DataFrame:
    """Kafka columns (``value`` = a routed record of format 1 or 2) -> one row per routed record.

    Each record's format is told by its first byte (:mod:`schemas.records`); format 2 is decoded with built-in
    functions over its binary prefix, whose field positions and widths follow from that byte (no JSON parsing;
    the key is the Kafka key, the source topic the combiner topic's name without ``.combiners``), format 1 with
    ``from_json``.

    ``raw`` may also come decoded already (the skewroute source with ``decode=routed``, which has these output
    columns but ``item``); then only ``item`` is added.

    Output columns: ``key``, ``event_time`` (timestamp), ``measure`` (double, null when absent), ``item``
    (what approx_distinct/top_k count: ``item_field`` of the raw record, else the measure, as a string),
    ``combiner`` (the Kafka partition the record was read from), ``src_topic``, ``src_partition``,
    ``src_offset`` (the source position).
    """
    if "event_time" in raw.columns:  # already decoded by the skewroute source (option decode=routed)
        if item_field is not None:
            raise ValueError("item_field needs the raw routed JSON: read the combiner topic with decode=none")
        return raw.select(
            "key", "event_time", "measure", F.col("measure").cast("string").alias("item"), "combiner",
            "src_topic", "src_partition", "src_offset",
        )  # fmt: skip
    value = F.col("value")
    tag = F.hex(F.substring(value, 1, 1))
    width = _by_tag(tag, {t: lay[0] for t, lay in _LAYOUTS.items()})  # null: not format 2 (schemas.records)
    xw = _by_tag(tag, {t: lay[1] for t, lay in _LAYOUTS.items()})
    head = 3 + 2 * width + xw
    v2 = head.isNotNull() & (F.length(value) >= head)  # told apart per record
    parsed = raw.select(
        F.col("partition").cast("int").alias("combiner"),
        v2.alias("v2"),
        head.alias("head"),
        width.alias("width"),
        xw.alias("xw"),
        value,
        F.col("key").cast("string").alias("k2"),
        F.regexp_replace(F.col("topic"), r"\.combiners$", "").alias("tp2"),
        F.when(~v2, F.from_json(value.cast("string"), _value_schema(item_field is not None))).alias("r"),
    )
    v2, width, xw = F.col("v2"), F.col("width"), F.col("xw")
    at_x = F.lit(4) + 2 * width  # 1-based positions of the prefix's fields: source offset at 4, time at 4 + width
    measure = (
        F.when(v2 & (xw == 8), _be_double(at_x))
        .when(v2 & (xw == 4), _be_single(at_x))
        .when(v2 & (xw == 5), _be_decimal(at_x))
        .otherwise(F.col("r.x"))
    )
    if item_field is not None:
        raw_doc = F.when(v2, F.expr("substring(value, head + 1)").cast("string")).otherwise(F.col("r.d"))
        item = F.get_json_object(raw_doc, "$." + item_field)
    else:
        item = measure.cast("string")
    return parsed.select(
        F.when(v2, F.col("k2")).otherwise(F.col("r.k")).alias("key"),
        F.timestamp_millis(F.when(v2, _be_int(F.lit(4) + width, width)).otherwise(F.col("r.t"))).alias("event_time"),
        measure.alias("measure"),
        item.alias("item"),
        "combiner",
        F.when(v2, F.col("tp2")).otherwise(F.col("r.tp")).alias("src_topic"),
        F.when(v2, _be_int(F.lit(2), F.lit(2))).otherwise(F.col("r.p")).alias("src_partition"),
        F.when(v2, _be_int(F.lit(4), width)).otherwise(F.col("r.o")).alias("src_offset"),
    )


#: Format 2's layouts by tag in hex: (offset and time width, measure width, prefix size) of :func:`v2_layout`.
_LAYOUTS = {f"{t:02X}": v2_layout(t) or (0, 0, 0) for t in V2_HEADS}


def _by_tag(tag: Column, of: dict[str, int]) -> Column:
    """``of[tag]`` as a column (null for a tag not in ``of``)."""
    out = None
    for t, v in of.items():
        out = F.when(tag == t, F.lit(v)) if out is None else out.when(tag == t, F.lit(v))
    assert out is not None
    return out


def _be_int(at: Column, width: Column) -> Column:
    """The big-endian integer of ``width`` bytes at 1-based byte ``at`` of ``value``, with built-in functions."""
    return F.conv(F.hex(F.substring(F.col("value"), at, width)), 16, 10).cast("long")


def _be_double(at: Column) -> Column:
    """The big-endian IEEE-754 double at 1-based byte ``at`` of ``value``; NaN (format 2's "no measure") is null.

    Spark SQL cannot cast binary to a number, so the bits are split in hex: 3 digits of sign and exponent, 13 of
    mantissa (52 bits: exact in a double); the value is rebuilt with a power of two, which is exact.
    """
    bits = F.hex(F.substring(F.col("value"), at, F.lit(8)))
    top = F.conv(F.substring(bits, 1, 3), 16, 10).cast("int")
    mantissa = F.conv(F.substring(bits, 4, 13), 16, 10).cast("double")
    sign = F.when(top >= 2048, F.lit(-1.0)).otherwise(F.lit(1.0))
    exponent = top % 2048
    normal = (mantissa + F.lit(float(2**52))) * F.pow(F.lit(2.0), exponent - 1075)
    return (
        F.when(exponent == 2047, F.lit(None).cast("double"))
        .when(exponent == 0, sign * mantissa * F.lit(2.0**-1074))
        .otherwise(sign * normal)
    )


def _be_single(at: Column) -> Column:
    """The big-endian IEEE-754 single at 1-based byte ``at`` of ``value``, as a double; NaN is null.

    The 32 bits fit a long: sign, 8 bits of exponent, 23 of mantissa; rebuilt exactly, as :func:`_be_double`.
    """
    bits = F.conv(F.hex(F.substring(F.col("value"), at, F.lit(4))), 16, 10).cast("long")
    exponent = F.shiftright(bits, 23).bitwiseAND(255)
    mantissa = bits.bitwiseAND(0x7FFFFF).cast("double")
    sign = F.when(bits >= 2**31, F.lit(-1.0)).otherwise(F.lit(1.0))
    normal = (mantissa + F.lit(float(2**23))) * F.pow(F.lit(2.0), exponent - 150)
    return (
        F.when(exponent == 255, F.lit(None).cast("double"))
        .when(exponent == 0, sign * mantissa * F.lit(2.0**-149))
        .otherwise(sign * normal)
    )


def _be_decimal(at: Column) -> Column:
    """The decimal measure at 1-based byte ``at`` of ``value``: a big-endian signed 4-byte ``m``, a byte ``d``.

    ``m / 10**d`` as a double division (``pow`` gives 10**d exactly: Java's ``pow`` of two integers is exact when
    the result is a double), as every other reader computes it; ``m = -2**31`` (no measure) is null.
    """
    bits = F.conv(F.hex(F.substring(F.col("value"), at, F.lit(4))), 16, 10).cast("long")
    scale = F.conv(F.hex(F.substring(F.col("value"), at + 4, F.lit(1))), 16, 10).cast("int")
    m = F.when(bits >= 2**31, bits - 2**32).otherwise(bits)
    return F.when(bits == 2**31, F.lit(None).cast("double")).otherwise(
        m.cast("double") / F.pow(F.lit(10.0), scale.cast("double"))
    )


def with_event_watermark(df: DataFrame, delay: str) -> DataFrame:
    """``withWatermark("event_time", delay)``."""
    return df.withWatermark("event_time", delay)


def dedupe_source_position(df: DataFrame) -> DataFrame:
    """Drop routed records whose source position ``(src_topic, src_partition, src_offset)`` was already seen.

    For at-least-once routers: after a crash a router re-routes records it had already produced (possibly to
    another combiner). Needs a watermark upstream; a position is remembered until the watermark passes its
    event time + delay (``dropDuplicatesWithinWatermark``), so replays are caught while they arrive within the
    watermark delay of the original -- replays later than that are already beyond the aggregation's watermark
    for short windows and otherwise counted twice.

    Cost: a stateful operator keyed by source position, so Spark hash-shuffles every *raw record* by
    position before the aggregation; the partial aggregation then runs after that shuffle, not in the scan
    task. The combiner stage stops being a pre-aggregation (shuffled rows = records instead of partials), and
    the state store holds one entry per record of the last ``delay`` of event time. Late data also changes:
    as the first stateful operator the deduplication drops a whole *record* whose event time is ``<= W``,
    stricter than the aggregation's per-window rule (``window.end <= W``). On a batch DataFrame this is
    a plain ``dropDuplicates`` on the position.
    """
    cols = ["src_topic", "src_partition", "src_offset"]
    return df.dropDuplicatesWithinWatermark(cols) if df.isStreaming else df.dropDuplicates(cols)


def window_column(spec: AggSpec, col: str = "event_time") -> Column:
    """Tumbling ``window(col, window)`` or sliding ``window(col, window, slide)``."""
    if spec.slide is None or spec.slide == spec.window:
        return F.window(col, spec.window)
    return F.window(col, spec.window, spec.slide)


def score_column(rounds: int, col: str = "measure") -> Column:
    """Per record: ``rounds`` steps of ``acc = (acc * 1103515245 + 12345 + i) & (2**31 - 1)``, ``i = 1..rounds``.

    ``acc`` starts at ``int(measure) & (2**31 - 1)`` (the measure truncated toward zero); null when the measure is
    null or not finite. Costs ``rounds`` multiply-adds per record inside the scan task; every intermediate value
    stays below 2**62, so ANSI mode never overflows.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    return F.expr(
        f"aggregate(sequence(1, {int(rounds)}), try_cast({col} AS BIGINT) & {_MASK31}, "
        f"(acc, i) -> (acc * {_LCG_A} + {_LCG_C} + i) & {_MASK31})"
    )


def score_reference(measure: float | None, rounds: int) -> int | None:
    """:func:`score_column` of one measure, in plain Python (what tests and checks compare against)."""
    if measure is None or measure != measure or measure in (float("inf"), float("-inf")):
        return None
    acc = int(measure) & _MASK31
    for i in range(1, rounds + 1):
        acc = (acc * _LCG_A + _LCG_C + i) & _MASK31
    return acc


def _agg_columns(spec: AggSpec) -> list[Column]:
    out: list[Column] = []
    for a in spec.aggregations:
        if a == "count":
            out.append(F.count(F.lit(1)).alias("count"))
        elif a == "sum":
            out.append(F.sum("measure").alias("sum"))
        elif a == "min":
            out.append(F.min("measure").alias("min"))
        elif a == "max":
            out.append(F.max("measure").alias("max"))
        elif a == "mean":
            out.append(F.avg("measure").alias("mean"))
        elif a == "approx_distinct":
            out.append(F.approx_count_distinct("item", spec.approx_rsd).alias("approx_distinct"))
        elif a == "top_k":
            out.append(F.expr(f"approx_top_k(item, {int(spec.top_k)})").alias("top_k"))
        elif a == "percentiles":
            qs = F.array(*[F.lit(float(q)) for q in spec.percentiles])
            out.append(F.percentile_approx("measure", qs, int(spec.percentile_accuracy)).alias("percentiles"))
        elif a == "score":
            out.append(F.sum(score_column(spec.score_rounds)).alias("score"))
    return out


def _flatten_window(df: DataFrame) -> DataFrame:
    cols = [c for c in df.columns if c != "window"]
    return df.select(
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), *[F.col(c) for c in cols]
    )


def final_aggregates(df: DataFrame, spec: AggSpec) -> DataFrame:
    """Full aggregates per (window, key): ``window_start``, ``window_end``, ``key`` and one column per aggregate.

    Streaming: call after :func:`with_event_watermark` so state is bounded and late records are dropped.
    """
    grouped = df.groupBy(window_column(spec).alias("window"), F.col("key"))
    return _flatten_window(grouped.agg(*_agg_columns(spec)))


def partial_aggregates(df: DataFrame, spec: AggSpec) -> DataFrame:
    """The combiner stage made explicit: one partial per (combiner, window, key) (batch DataFrames).

    Columns: ``combiner``, ``window_start``, ``window_end``, ``key``, ``n``, ``s``, ``lo``, ``hi``, ``hll``
    (an HLL sketch of ``item``, mergeable), and ``sc`` (the sum of :func:`score_column`) when ``score`` is
    asked for. ``count(*)`` of the result = partials shuffled to reducers.
    """
    grouped = df.groupBy("combiner", window_column(spec).alias("window"), F.col("key"))
    return _flatten_window(
        grouped.agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("measure").alias("s"),
            F.count("measure").alias("nx"),
            F.min("measure").alias("lo"),
            F.max("measure").alias("hi"),
            F.hll_sketch_agg("item").alias("hll"),  # nulls ignored, as approx_count_distinct does,
            *([F.sum(score_column(spec.score_rounds)).alias("sc")] if "score" in spec.aggregations else []),
        )
    )


def merge_partials(partials: DataFrame, spec: AggSpec) -> DataFrame:
    """The reducer stage: merge partials per (window, key) into the same columns as :func:`final_aggregates`.

    ``top_k`` and ``percentiles`` are not mergeable from these partials and are left out (Spark merges their
    internal buffers itself in :func:`final_aggregates`); ``approx_distinct`` comes from the union of
    HLL sketches (its estimate differs slightly from ``approx_count_distinct``'s).
    """
    aggs: dict[str, Column] = {
        "count": F.sum("n").alias("count"),
        "sum": F.sum("s").alias("sum"),
        "min": F.min("lo").alias("min"),
        "max": F.max("hi").alias("max"),
        "mean": (F.sum("s") / F.sum("nx")).alias("mean"),
        "approx_distinct": F.hll_sketch_estimate(F.hll_union_agg("hll")).alias("approx_distinct"),
        "score": F.sum("sc").alias("score"),
    }
    cols = [aggs[a] for a in spec.aggregations if a in aggs]
    return partials.groupBy("window_start", "window_end", "key").agg(*cols)
