"""The Kafka results sink when its broker stalls mid-batch: never an older value after a newer one.

A dedicated broker is frozen (SIGSTOP) while the sink's tasks run -- the last stage of a micro-batch's job,
seen through Spark's status tracker -- until a sink task gives up (delivery timeout 3 s here): the task purges
and drops its pooled producer and the query fails. (Frozen at fixed intervals instead, the freezes fell into
step with the micro-batches and kept catching them while they read, so on a loaded host none hit the sink.)
The job is restarted from the checkpoint. Read in offset order, every (window, key)'s values carry
non-decreasing micro-batch ids, and the last one is the exact aggregate.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import defaultdict
from typing import Any

import pytest

from benchmarks.spark.feed import assign_combiners, produce_routed
from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings, SkewrouteSettings
from spark_consumers.job import JobHandle, start_job
from tests.integration.spark_support import T0, Rec, assert_same, read_results, reference

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

N = 4
RECORDS = 60_000  # enough micro-batches of 400 to outlast every stall below (30,000 ran out after 6 misses once)


def _start_streaming(spark: Any, settings: SkewrouteSettings) -> JobHandle:
    """The job, once it has written a micro-batch; one more start (same checkpoint) if the first never ran a
    batch because Spark's Python runner did not connect back in time (seen on this heavily loaded host)."""
    for attempt in range(2):
        handle = start_job(spark, settings)
        deadline = time.monotonic() + 300
        while handle.query.isActive and not any(s.input_rows for s in handle.stats) and time.monotonic() < deadline:
            time.sleep(0.1)
        if handle.query.isActive or attempt:
            return handle
        handle.stop()
    raise AssertionError("unreachable")


def _sink_tasks_running(spark: Any) -> bool:
    """Whether the last stage of a running job (a micro-batch's sink: it produces the results) has tasks."""
    tracker = spark.sparkContext.statusTracker()
    for job_id in tracker.getActiveJobsIds():
        job = tracker.getJobInfo(job_id)
        stage = tracker.getStageInfo(max(job.stageIds)) if job is not None and job.stageIds else None
        if stage is not None and stage.numActiveTasks > 0:
            return True
    return False


def test_sink_stalled_mid_batch_never_leaves_an_older_value_after_a_newer_one(spark, topic, tmp_path) -> None:
    broker = EmbeddedBroker(free_port(), state_dir=tmp_path / "broker").start()
    assert broker.proc is not None
    try:
        kafka = KafkaSettings(bootstrap_servers=broker.bootstrap, producer={"message.timeout.ms": 3000})
        rng = random.Random(11)
        keys = [f"k{i}" for i in range(12)]  # few keys: every micro-batch rewrites the same (window, key)s
        recs = [Rec(rng.choice(keys), T0 + i * 6, float(rng.randrange(1000))) for i in range(RECORDS)]  # 180 s
        settings = SkewrouteSettings.load(
            kafka=kafka.model_dump(),
            routes=[{"raw_topic": topic, "combiners": N}],
            spark={
                "trigger_interval": "200 milliseconds",
                "max_records_per_trigger": 400,
                "watermark": "10 seconds",
                "window": "10 seconds",
                "checkpoint_dir": str(tmp_path / "ck"),
                "progress_log": str(tmp_path / "progress.jsonl"),
            },
        )
        combiner_topic = settings.routes[0].combiner_topic_name
        ensure_topics(make_admin(kafka), [TopicSpec(combiner_topic, N, exact=True)])
        comb = assign_combiners([r.key for r in recs], "hash", N)
        produce_routed(kafka, combiner_topic, [r.key for r in recs], [r.t for r in recs], [r.x for r in recs], comb)

        handle = _start_streaming(spark, settings)
        try:
            stalls, deadline = 0, time.monotonic() + 300
            while handle.query.isActive and stalls < 20 and time.monotonic() < deadline:
                if not _sink_tasks_running(spark):  # freeze the broker while the sink produces, until a task gives up
                    time.sleep(0.01)
                    continue
                os.kill(broker.proc.pid, signal.SIGSTOP)
                try:
                    time.sleep(8)
                finally:
                    os.kill(broker.proc.pid, signal.SIGCONT)
                stalls += 1
                time.sleep(1.0)
        finally:
            handle.stop()
        failure = str(handle.query.exception() or "")
        assert "results topic" in failure, f"no sink task gave up during {stalls} stalls: {failure[:300]!r}"

        bigger = {**settings.spark.model_dump(mode="json"), "max_records_per_trigger": 100_000}
        rest = SkewrouteSettings.load(**{**settings.model_dump(mode="json"), "spark": bigger})
        again = start_job(spark, rest, available_now=True)  # same checkpoint: the failed batch again, then the rest
        try:
            again.query.awaitTermination(600)
        finally:
            again.stop()
        assert again.query.exception() is None

        results = f"{topic}.results"
        history: dict[bytes, list[int]] = defaultdict(list)
        for r in read_topic(kafka, results, idle_s=3.0):  # per partition in offset order; a key has one partition
            assert r.key is not None
            history[r.key].append(json.loads(r.value or b"{}")["batch_id"])
        back = {k: ids for k, ids in history.items() if ids != sorted(ids)}
        assert not back, f"older values after newer ones: {list(back.items())[:3]}"
        assert_same(read_results(kafka, results), reference(recs, 10_000, 10_000))
        assert sum(len(set(ids)) > 1 for ids in history.values()) >= len(keys) // 2  # rewritten by later batches
    finally:
        broker.stop()
