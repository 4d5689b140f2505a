"""The Spark consumer job end to end: routed records in, exact per-(window, key) aggregates out.

"Exact" means: for every (window, key) the job's last result equals a direct Python computation over the
input records, where a record's contribution to window ``w`` is dropped iff ``w.end <= W`` with ``W`` the
watermark of the micro-batch that reads it (max event time of the earlier micro-batches - delay). The
phases below are built so that ``W`` is known for every record however the source cuts micro-batches:
phases that advance event time never contain a record that any intermediate watermark could drop, and the
late phase contains no record newer than the current maximum, so the watermark cannot move while it is read;
before it is produced the test waits for a micro-batch that ran under the new watermark (Spark judges late
records against the previous batch's watermark).

With ``dedupe`` the first stateful operator is the deduplication, which drops a whole *record* when its event
time is ``<= W`` -- stricter than the aggregation's per-window rule; the reference applies that rule then.
"""

from __future__ import annotations

import logging
import random
import time

import pytest

from benchmarks.spark.feed import produce_routed
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from schemas.settings import SkewrouteSettings
from spark_consumers.job import start_job
from tests.integration.spark_support import T0, Rec, assert_same, read_results, reference

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

N = 4  # combiners
DELAY_MS = 20_000


def _phase(rng: random.Random, n: int, lo: int, hi: int) -> list[Rec]:
    keys = ["hot"] * 8 + ["warm"] * 3 + [f"k{i}" for i in range(30)]  # "hot" is split by the partitioner
    return [Rec(rng.choice(keys), rng.randrange(lo, hi), float(rng.randrange(0, 1000))) for _ in range(n)]


def _settings(kafka, topic: str, tmp_path, **spark) -> SkewrouteSettings:
    return SkewrouteSettings.load(
        kafka=kafka,
        routes=[{"raw_topic": topic, "combiners": N}],
        spark={
            "trigger_interval": "1 second",
            "max_records_per_trigger": 100_000,
            "watermark": f"{DELAY_MS // 1000} seconds",
            "checkpoint_dir": str(tmp_path / "ck"),
            "progress_log": str(tmp_path / "progress.jsonl"),
            **spark,
        },
    )


class _Feed:
    """Routes records with one partitioner instance across phases and produces them."""

    def __init__(self, kafka, settings: SkewrouteSettings, partitioner: str) -> None:
        from router.partitioners import create

        self.kafka, self.route = kafka, settings.routes[0]
        self.part = create(partitioner, N, window=1000, slide=100, seed=7)
        self.sent = 0
        ensure_topics(make_admin(kafka), [TopicSpec(self.route.combiner_topic_name, N, exact=True)])

    def send(self, recs: list[Rec], replay_every: int = 0) -> None:
        import numpy as np

        comb = self.part.assign(np.array([r.key for r in recs], dtype=object))
        offsets = list(range(self.sent, self.sent + len(recs)))
        self.sent += len(recs)
        keys, times, xs, cs = [r.key for r in recs], [r.t for r in recs], [r.x for r in recs], list(comb)
        if replay_every:  # an at-least-once router re-sends some records (same source position) elsewhere
            dup = range(0, len(recs), replay_every)
            keys += [keys[i] for i in dup]
            times += [times[i] for i in dup]
            xs += [xs[i] for i in dup]
            cs += [(cs[i] + 1) % N for i in dup]
            offsets += [offsets[i] for i in dup]
        produce_routed(self.kafka, self.route.combiner_topic_name, keys, times, xs, cs, offsets=offsets)


def _wait_for_batch_under_watermark(query, watermark_ms: int, timeout: float = 60.0) -> None:
    """Block until a micro-batch has run with ``watermark_ms`` (so the next one judges late data by it)."""
    from datetime import UTC, datetime

    want = datetime.fromtimestamp(watermark_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any((p.get("eventTime") or {}).get("watermark") == want for p in query.recentProgress):
            return
        time.sleep(0.2)
    raise AssertionError(f"no micro-batch ran under watermark {want}: {query.lastProgress}")


@pytest.mark.parametrize(
    ("partitioner", "slide", "dedupe"),
    [("shuffle", None, False), ("pkg", "5 seconds", False), ("shuffle", None, True)],
    ids=["shuffle-tumbling", "pkg-sliding", "shuffle-tumbling-dedupe"],
)
def test_exact_with_late_records(
    spark, kafka, topic, tmp_path, caplog, partitioner: str, slide: str | None, dedupe: bool
):
    caplog.set_level(logging.WARNING, logger="spark_consumers.observability")
    rng = random.Random(11)
    settings = _settings(kafka, topic, tmp_path, window="10 seconds", slide=slide, dedupe=dedupe)
    feed = _Feed(kafka, settings, partitioner)
    p1 = _phase(rng, 500, T0, T0 + 20_000)  # any watermark inside this phase is < T0: nothing droppable
    p2 = _phase(rng, 500, T0 + 20_000, T0 + 41_000) + [Rec("hot", T0 + 41_000, 1.0)]  # max = T0 + 41 s
    p3 = _phase(rng, 500, T0, T0 + 41_001)  # late only: read under watermark W = T0 + 21 s
    w = T0 + 41_000 - DELAY_MS
    p3 = [r for r in p3 if r.t != w]  # keep clear of the boundary
    handle = start_job(spark, settings)
    try:
        for recs in (p1, p2, p3):
            if recs is p3:
                _wait_for_batch_under_watermark(handle.query, w)
                assert handle.stats.rows_dropped_by_watermark == 0  # nothing late yet
            feed.send(recs, replay_every=7 if dedupe else 0)
            handle.query.processAllAvailable()
    finally:
        handle.stop()
    assert handle.query.exception() is None
    late = {id(r) for r in p3}
    size, step = 10_000, 5_000 if slide else 10_000
    if dedupe:
        want = reference(p1 + p2 + p3, size, step, dropped=lambda r, end: id(r) in late and r.t <= w)
    else:
        want = reference(p1 + p2 + p3, size, step, dropped=lambda r, end: id(r) in late and end <= w)
    assert want != reference(p1 + p2 + p3, size, step)  # some late contributions really are beyond the watermark
    assert_same(read_results(kafka, f"{topic}.results"), want)
    # the loss is reported: the run's total, one WARNING per batch with drops naming the setting to change
    dropped = handle.stats.rows_dropped_by_watermark
    assert dropped > 0
    if dedupe:  # the deduplication reads raw records: exactly the late ones (their replays included) are counted
        sent = p3 + p3[::7]
        assert dropped == sum(r.t <= w for r in sent)
    warnings = [r.getMessage() for r in caplog.records if "later than the watermark" in r.getMessage()]
    assert len(warnings) == sum(1 for s in handle.stats if s.rows_dropped_by_watermark), warnings
    assert all("spark.watermark (now 20 seconds)" in m and "several routers" in m for m in warnings), warnings


def test_restart_from_checkpoint_stays_exact(spark, kafka, topic, tmp_path) -> None:
    rng = random.Random(5)
    settings = _settings(kafka, topic, tmp_path, max_records_per_trigger=800, trigger_interval="200 milliseconds")
    feed = _Feed(kafka, settings, "pkg")
    first = _phase(rng, 6000, T0, T0 + 15_000)  # all within one delay: no record is late
    feed.send(first)
    handle = start_job(spark, settings)
    try:
        deadline = time.monotonic() + 300  # generous: CI hosts may be heavily loaded
        while not any(s.input_rows for s in handle.stats) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        handle.stop()  # mid-stream: most of the 6000 records are not read yet
    assert 0 < sum(s.input_rows for s in handle.stats) < 6000
    second = _phase(rng, 2000, T0 + 5_000, T0 + 19_000)
    feed.send(second)
    again = start_job(spark, settings)  # same checkpoint directory
    try:
        again.query.processAllAvailable()
    finally:
        again.stop()
    assert again.query.exception() is None
    assert_same(read_results(kafka, f"{topic}.results"), reference(first + second, 10_000, 10_000))
    stats = [s for s in handle.stats + again.stats if s.input_rows]
    measured = [s for s in stats if s.combiner_task_ms]  # the status store may lag on a loaded host
    assert measured and all(len(s.combiner_task_ms) == N for s in measured)
    assert all(len(s.combiner_gc_ms) == N and min(s.combiner_gc_ms) >= 0 for s in measured)
    # not gc <= task time: Spark counts a task's JVM GC from before it deserializes the task, its run time after
    assert all(s.straggler_ratio is not None and s.straggler_ratio >= 1.0 for s in measured)
    assert (tmp_path / "progress.jsonl").read_text().count("\n") >= len(stats)


def test_append_mode_parquet_emits_final_windows_once(spark, kafka, topic, tmp_path) -> None:
    rng = random.Random(9)
    settings = _settings(
        kafka, topic, tmp_path, output_mode="append", sink="parquet", output_path=str(tmp_path / "out")
    )
    feed = _Feed(kafka, settings, "shuffle")
    recs = _phase(rng, 1500, T0, T0 + 30_000)
    flush = [Rec("flush", T0 + 60_000, 0.0)]  # advances the watermark to T0 + 40 s: windows before it close
    handle = start_job(spark, settings)
    try:
        feed.send(recs)
        handle.query.processAllAvailable()
        feed.send(flush)
        handle.query.processAllAvailable()
        _wait_for_batch_under_watermark(handle.query, T0 + 60_000 - DELAY_MS)
        handle.query.processAllAvailable()
    finally:
        handle.stop()
    assert handle.query.exception() is None
    from pyspark.sql import functions as F

    out = spark.read.parquet(str(tmp_path / "out" / topic)).select(
        F.unix_millis("window_start").alias("window_start"), F.unix_millis("window_end").alias("window_end"),
        "key", "count", "sum", "min", "max", "mean",
    )  # fmt: skip
    rows = [r.asDict() for r in out.collect()]
    assert len(rows) == len({(r["window_start"], r["key"]) for r in rows})  # each window once: append mode
    from tests.integration.spark_support import rows_to_dict

    assert_same(rows_to_dict(rows), reference(recs, 10_000, 10_000))  # the flush window is still open
