"""The pure aggregation functions on static DataFrames (no broker)."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import functions as F

from schemas.records import encode_routed, encode_routed_v2
from spark_consumers.aggregations import (
    AggSpec,
    dedupe_source_position,
    final_aggregates,
    merge_partials,
    parse_routed,
    partial_aggregates,
)
from tests.integration.spark_support import T0, Rec, assert_same, reference, rows_to_dict

pytestmark = pytest.mark.spark


def _records(n: int = 3000, seed: int = 3) -> list[Rec]:
    rng = random.Random(seed)
    keys = ["hot"] * 5 + [f"k{i}" for i in range(40)]
    return [Rec(rng.choice(keys), T0 + rng.randrange(0, 60_000), float(rng.randrange(-500, 500))) for _ in range(n)]


def _encode(fmt: str, i: int, r: Rec, c: int, raw: bytes, replay: bool = False) -> bytes:
    """Format 1, format 2, or (``mixed``) alternating: one topic written during a rolling upgrade."""
    if fmt == "v2" or (fmt == "mixed" and (i + replay) % 2):
        return encode_routed_v2(r.t, 0, i, r.x, raw)
    return encode_routed(r.key, r.t, c, "raw", 0, i, r.x, raw)


def _kafka_df(spark, recs: list[Rec], combiners: int = 4, dup_every: int = 0, fmt: str = "v1"):
    rows = []
    for i, r in enumerate(recs):
        c = i % combiners  # round robin: every key split over every combiner
        raw = b'{"item":"i%d","i":%d}' % (i % 7, i)
        rows.append((r.key.encode(), _encode(fmt, i, r, c, raw), "raw.combiners", c, i))
        if dup_every and i % dup_every == 0:  # an at-least-once replay, sent to another combiner (other format)
            again = _encode(fmt, i, r, (c + 1) % combiners, raw, replay=True)
            rows.append((r.key.encode(), again, "raw.combiners", (c + 1) % combiners, 10**6 + i))
    return spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")


def _collect(df) -> dict:
    out = df.select(
        F.unix_millis("window_start").alias("window_start"), F.unix_millis("window_end").alias("window_end"),
        "key", "count", "sum", "min", "max", "mean",
    )  # fmt: skip
    return rows_to_dict(r.asDict() for r in out.collect())


def test_parse_routed_columns(spark) -> None:
    df = parse_routed(_kafka_df(spark, _records(10)), item_field="item")
    assert df.columns == [
        "key", "event_time", "measure", "item", "combiner", "src_topic", "src_partition", "src_offset",
    ]  # fmt: skip
    row = df.orderBy("src_offset").first()
    assert row is not None and row["item"] == "i0" and row["src_topic"] == "raw" and row["combiner"] == 0


@pytest.mark.parametrize(("size", "slide"), [(10_000, 10_000), (10_000, 5_000)], ids=["tumbling", "sliding"])
def test_final_aggregates_match_python(spark, size: int, slide: int) -> None:
    recs = _records()
    spec = AggSpec(window=f"{size // 1000} seconds", slide=f"{slide // 1000} seconds")
    got = _collect(final_aggregates(parse_routed(_kafka_df(spark, recs)), spec))
    assert_same(got, reference(recs, size, slide))


def test_partials_merge_to_final(spark) -> None:
    recs = _records()
    spec = AggSpec(aggregations=("count", "sum", "min", "max", "mean", "approx_distinct"))
    parsed = parse_routed(_kafka_df(spark, recs), item_field="item")
    partials = partial_aggregates(parsed, spec)
    # a key split over 4 combiners gives up to 4 partials per (window, key): the reducers' extra work
    n_final = final_aggregates(parsed, spec).count()
    assert n_final < partials.count() <= 4 * n_final
    assert_same(_collect(merge_partials(partials, spec)), reference(recs, 10_000, 10_000))
    distinct = merge_partials(partials, spec).select("approx_distinct").collect()
    assert all(1 <= r[0] <= 8 for r in distinct)  # 7 distinct items exist per key at most


def test_approx_distinct_and_top_k(spark) -> None:
    recs = _records(2000)
    spec = AggSpec(aggregations=("count", "approx_distinct", "top_k"), top_k=2)
    df = final_aggregates(parse_routed(_kafka_df(spark, recs), item_field="item"), spec)
    for row in df.where(F.col("key") == "hot").collect():
        assert row["approx_distinct"] <= 7
        assert 1 <= len(row["top_k"]) <= 2
        assert sum(x["count"] for x in row["top_k"]) <= row["count"]


def test_formats_decode_to_the_same_rows(spark) -> None:
    recs = _records(300)
    recs[5] = Rec(recs[5].key, recs[5].t, -0.0)
    recs[6] = Rec(recs[6].key, recs[6].t, 1e-310)  # subnormal: the SQL rebuild of the double stays exact
    recs[7] = Rec(recs[7].key, recs[7].t, -123456.789e200)
    recs[8] = Rec(recs[8].key, recs[8].t, None)
    for item in (None, "item"):
        want = parse_routed(_kafka_df(spark, recs), item_field=item).orderBy("src_offset").collect()
        for fmt in ("v2", "mixed"):
            got = parse_routed(_kafka_df(spark, recs, fmt=fmt), item_field=item).orderBy("src_offset").collect()
            assert got == want, (fmt, item)


@pytest.mark.parametrize("fmt", ["v1", "v2", "mixed"])
def test_dedupe_source_position_drops_replays(spark, fmt: str) -> None:
    recs = _records(1000)
    parsed = parse_routed(_kafka_df(spark, recs, dup_every=3, fmt=fmt)).withWatermark("event_time", "1 minute")
    assert parsed.count() > len(recs)
    got = _collect(final_aggregates(dedupe_source_position(parsed), AggSpec()))
    assert_same(got, reference(recs, 10_000, 10_000))
