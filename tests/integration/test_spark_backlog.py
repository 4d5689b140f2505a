"""A skewed backlog read with a small per-trigger budget and a watermark shorter than its event-time span.

Hash routing of Zipf(1.5) keys puts the hot key's records on one combiner, several times any other's. The
records are produced in event-time order (as routers emit them), so read in order none is late. With the
budget shared by real lag every partition advances by the same fraction of its backlog per trigger, hence
(about) the same event time, and the single global watermark never passes records a partition has not read
yet: the job must drop nothing and end exact. (Shared by lags capped at the budget, the cold partitions ran
ahead in event time and the hot combiner's records were dropped as late.)
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.spark.feed import produce_routed
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from router.partitioners import create
from schemas.settings import SkewrouteSettings
from spark_consumers.job import start_job
from tests.integration.spark_support import T0, Rec, assert_same, read_results, reference

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

N = 8
RECORDS = 16_000
SPAN_MS = 120_000  # the backlog's event-time span: 12 windows of 10 s, watermark delay 10 s
BUDGET = 2_000


def test_skewed_backlog_with_small_budget_and_short_watermark_ends_exact(spark, kafka, topic, tmp_path) -> None:
    rng = np.random.default_rng(17)
    ranks = rng.zipf(1.5, size=RECORDS * 2)
    ranks = ranks[ranks <= 1000][:RECORDS]
    recs = [Rec(f"k{r}", T0 + i * SPAN_MS // RECORDS, float(rng.integers(0, 1000))) for i, r in enumerate(ranks)]
    comb = create("hash", N).assign(np.array([r.key for r in recs], dtype=object))
    per = np.bincount(comb, minlength=N)
    assert per.max() >= 3 * np.median(per), per  # the hot combiner several times the others

    settings = SkewrouteSettings.load(
        kafka=kafka,
        routes=[{"raw_topic": topic, "combiners": N}],
        spark={
            "max_records_per_trigger": BUDGET,
            "watermark": "10 seconds",
            "window": "10 seconds",
            "checkpoint_dir": str(tmp_path / "ck"),
            "progress_log": str(tmp_path / "progress.jsonl"),
        },
    )
    route = settings.routes[0]
    ensure_topics(make_admin(kafka), [TopicSpec(route.combiner_topic_name, N, exact=True)])
    produce_routed(
        kafka, route.combiner_topic_name, [r.key for r in recs], [r.t for r in recs], [r.x for r in recs], comb
    )

    handle = start_job(spark, settings, available_now=True)
    try:
        handle.query.awaitTermination(600)
    finally:
        handle.stop()
    assert handle.query.exception() is None
    stats = [s for s in handle.stats if s.input_rows]
    assert sum(s.input_rows for s in stats) == RECORDS
    assert len(stats) >= RECORDS // BUDGET  # really read as a backlog, a budget at a time
    assert sum(s.rows_dropped_by_watermark for s in handle.stats) == 0
    assert_same(read_results(kafka, f"{topic}.results"), reference(recs, 10_000, 10_000))
