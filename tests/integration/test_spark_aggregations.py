"""The pure aggregation functions on static DataFrames (no broker)."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import functions as F

from schemas.records import encode_routed, encode_routed_v2, encode_routed_v2_batch
from schemas.spark_settings import AGGREGATION_PROFILES
from spark_consumers.aggregations import (
    AggSpec,
    dedupe_source_position,
    final_aggregates,
    merge_partials,
    parse_routed,
    partial_aggregates,
    score_column,
    score_reference,
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
        return encode_routed_v2(r.t, 0, i, r.x, raw, compact=i % 3 > 0)  # compact layouts and the wide ones
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
    recs[10] = Rec(recs[10].key, recs[10].t, 2.0**-140)  # a subnormal single: the 4-byte measure layout
    recs[11] = Rec(recs[11].key, recs[11].t, -(2.0**100))
    recs[13] = Rec(recs[13].key, recs[13].t, 0.1)  # not a single: the decimal layout (1 / 10)
    recs[14] = Rec(recs[14].key, recs[14].t, 0.1 + 0.2)  # 0.30000000000000004: the 8-byte measure layout
    recs[15] = Rec(recs[15].key, recs[15].t, -21_474_836.47)  # decimal, the largest integer of 2 places
    recs[16] = Rec(recs[16].key, recs[16].t, 1e-9)  # decimal, the largest scale
    for item in (None, "item"):
        want = parse_routed(_kafka_df(spark, recs), item_field=item).orderBy("src_offset").collect()
        for fmt in ("v2", "mixed"):
            got = parse_routed(_kafka_df(spark, recs, fmt=fmt), item_field=item).orderBy("src_offset").collect()
            assert got == want, (fmt, item)


def test_sql_and_numpy_decoders_agree_on_every_format_2_layout(spark) -> None:
    """``parse_routed`` (Spark's JVM source) and the Python source's numpy decoder, on batches of each layout."""
    from connectors.routed_decode import decode_routed

    rows, tags = [], set()
    cases = [(False, 0, None), (False, 0, 0.1), (True, 0, None), (True, 0, 0.1 + 0.2), (True, 0, -7.0),
             (True, 2**50, 7.5), (True, 0, 12.34), (True, 2**50, 0.1)]  # fmt: skip
    cases += [(True, 0, 2_147_483_647 / 10**d) for d in range(10)]  # every scale, with the largest integer
    for g, (compact, base, x) in enumerate(cases):
        measures = [x, None, None if x is None else -x]
        values = encode_routed_v2_batch([T0 + g] * 3, [g] * 3, [base + i for i in range(3)], measures,
                                        [b'{"item":"i%d"}' % g] * 3, compact=compact)  # fmt: skip
        tags |= {v[0] for v in values}
        rows += [(b"k%d" % g, v, "raw.combiners", 1, len(rows) + i) for i, v in enumerate(values)]
    assert tags == {0x02, 0x12, 0x22, 0x32, 0x72, 0x52, 0xB2, 0x92}
    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    cols = ["key", "measure", "combiner", "src_topic", "src_partition", "src_offset"]
    parsed = parse_routed(df).select(*cols, F.unix_millis("event_time").alias("t"))
    got = [r.asDict() for r in parsed.collect()]
    want = decode_routed([v for _, v, *_ in rows], 1, [k for k, *_ in rows], "raw.combiners").to_pylist()
    for w in want:
        w["t"] = round(w.pop("event_time").timestamp() * 1000)
    assert got == want
    assert [r["measure"] for r in got[15:18]] == [7.5, None, -7.5] and got[17]["src_offset"] == 2**50 + 2
    assert [r["measure"] for r in got[-3:]] == [2.147483647, None, -2.147483647]


@pytest.mark.parametrize("fmt", ["v1", "v2", "mixed"])
def test_dedupe_source_position_drops_replays(spark, fmt: str) -> None:
    recs = _records(1000)
    parsed = parse_routed(_kafka_df(spark, recs, dup_every=3, fmt=fmt)).withWatermark("event_time", "1 minute")
    assert parsed.count() > len(recs)
    got = _collect(final_aggregates(dedupe_source_position(parsed), AggSpec()))
    assert_same(got, reference(recs, 10_000, 10_000))


HEAVY = AggSpec(aggregations=AGGREGATION_PROFILES["heavy"], percentiles=(0.1, 0.5, 0.99), percentile_accuracy=50,
                score_rounds=37)  # fmt: skip


def _groups(recs: list[Rec], size: int = 10_000) -> dict[tuple[int, str], list[float]]:
    out: dict[tuple[int, str], list[float]] = {}
    for r in recs:
        out.setdefault((r.t - r.t % size, r.key), []).append(r.x)
    return out


def test_score_column_equals_its_python_reference(spark) -> None:
    measures = [0.0, 1.0, -1.0, -7.9, 3.99, 2.0**31 + 5, -(2.0**40), 1e18, None, float("nan"), float("inf")]
    df = spark.createDataFrame([(m,) for m in measures], "measure double")
    got = [r[0] for r in df.select(score_column(11)).collect()]
    assert got == [score_reference(m, 11) for m in measures]
    assert got[-3:] == [None, None, None] and all(0 <= g < 2**31 for g in got[:-3])


def test_heavy_profile_equals_a_plain_computation(spark) -> None:
    """Light columns and the score sum exact; each percentile within its documented rank error."""
    recs = _records(4000)
    df = final_aggregates(parse_routed(_kafka_df(spark, recs)), HEAVY)
    assert_same(_collect(df), reference(recs, 10_000, 10_000))
    rows = {(r["ws"], r["key"]): r for r in df.select(F.unix_millis("window_start").alias("ws"), "*").collect()}
    groups = _groups(recs)
    assert set(rows) == set(groups)
    for g, values in groups.items():
        row, v, n = rows[g], sorted(values), len(values)
        assert row["score"] == sum(score_reference(x, 37) for x in values)  # type: ignore[misc]
        # HLL++ with relative standard deviation approx_rsd: 3 sigma, and 2 values at tiny counts (seen: 6 for 8)
        assert abs(row["approx_distinct"] - len(set(v))) <= 3 * HEAVY.approx_rsd * len(set(v)) + 2
        err = n / HEAVY.percentile_accuracy  # rank error bound of percentile_approx, plus one rank for ties/rounding
        for q, got in zip(HEAVY.percentiles, row["percentiles"], strict=True):
            ranks = [i + 1 for i, x in enumerate(v) if x == got]
            assert ranks, (g, q, got)  # an input value
            assert min(abs(rk - q * n) for rk in ranks) <= err + 1, (g, q, got, n)


def test_heavy_profile_partials_merge_to_final(spark) -> None:
    recs = _records(3000)
    parsed = parse_routed(_kafka_df(spark, recs))
    merged = merge_partials(partial_aggregates(parsed, HEAVY), HEAVY)
    final = final_aggregates(parsed, HEAVY)
    key = ["window_start", "key"]
    a = {tuple(r[:2]): r["score"] for r in merged.select(*key, "score").collect()}
    b = {tuple(r[:2]): r["score"] for r in final.select(*key, "score").collect()}
    assert a == b and len(a) > 40
