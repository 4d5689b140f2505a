"""Spark crash: ``skewroute spark-job`` SIGKILLed mid-stream (driver, JVM and Python workers), then restarted.

The restart continues from the checkpoint: the results topic's latest value per (window, key) equals the
reference, and no value ever written exceeds it (a micro-batch replayed after the kill re-sends full
aggregates, never adds to them). The watermark (5 s) is shorter than the records' event-time span (30 s): the
per-trigger budget, shared by real lag, keeps the combiners' event times together, so nothing is dropped.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from benchmarks.demo.processes import Processes
from benchmarks.soak_parts import kill_group, worker_config
from benchmarks.spark.feed import assign_combiners, produce_routed
from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from tests.integration.router_support import wait_for
from tests.integration.spark_support import T0, Rec, assert_same, read_results, reference

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

N, COMBINERS = 4, 4
RECORDS = 12_000


def _committed_batches(checkpoint: Path) -> int:
    """Micro-batches the query committed (files in the checkpoint's commit log)."""
    commits = checkpoint / "commits"
    return sum(1 for f in commits.iterdir() if f.name.isdigit()) if commits.is_dir() else 0


def test_spark_job_killed_and_restarted_from_checkpoint_stays_exact(kafka, topic: str, tmp_path: Path) -> None:
    from benchmarks.demo.processes import spark_command

    rng = random.Random(3)
    keys = ["hot"] * 10 + ["warm"] * 4 + [f"k{i}" for i in range(40)]
    recs = [Rec(rng.choice(keys), rng.randrange(T0, T0 + 30_000), float(rng.randrange(1000))) for _ in range(RECORDS)]
    recs.sort(key=lambda r: r.t)  # in event-time order, as routers emit them: read in order, none is late
    combiner_topic = f"{topic}.combiners"
    ensure_topics(make_admin(kafka), [TopicSpec(combiner_topic, COMBINERS, exact=True)])
    comb = assign_combiners([r.key for r in recs], "pkg", COMBINERS)
    produce_routed(kafka, combiner_topic, [r.key for r in recs], [r.t for r in recs], [r.x for r in recs], comb)
    progress = tmp_path / "progress.jsonl"
    cfg = worker_config(
        tmp_path / "job.yaml", kafka.bootstrap_servers, topic, app_id=f"app-{topic}", instance="s",
        state_dir=tmp_path / "state", combiners=COMBINERS,
        spark={"trigger_interval": "500 milliseconds", "max_records_per_trigger": 1_000, "watermark": "5 seconds",
               "window": "10 seconds", "checkpoint_dir": str(tmp_path / "ck"), "progress_log": str(progress),
               "shuffle_partitions": 2, "conf": {"spark.ui.enabled": "false"}},
    )  # fmt: skip
    t0 = time.monotonic()
    with Processes() as procs:
        job = procs.start("spark", spark_command(cfg), tmp_path / "spark.log")
        ck = tmp_path / "ck" / topic
        wait_for(lambda: _committed_batches(ck) >= 2 or not job.running, 300, "two committed micro-batches")
        assert job.running, job.log_tail()
        kill_group(job)  # driver, JVM and Python workers at once
        procs.children.remove(job)
        done_before = _committed_batches(ck)
        killed_s = time.monotonic() - t0
        bigger = {"SKEWROUTE_SPARK__MAX_RECORDS_PER_TRIGGER": "100000"}  # the rest in one batch (after the replay)
        again = procs.start("spark", [*spark_command(cfg), "--available-now"], tmp_path / "spark2.log", env=bigger)
        rc = again.proc.wait(300)
        assert rc == 0, again.log_tail()
    want = reference(recs, 10_000, 10_000)
    assert_same(read_results(kafka, f"{topic}.results"), want)
    written = 0
    for r in read_topic(kafka, f"{topic}.results", idle_s=2.0):  # every value ever written, not only the last
        v = json.loads(r.value or b"{}")
        assert v["count"] <= want[(v["window_start"], v["window_end"], v["key"])][0], v  # never double counted
        written += 1
    assert done_before < RECORDS // 1_000  # killed mid-stream
    print(f"\nkilled after {done_before} micro-batches ({killed_s:.1f} s); restart finished; {written} result "
          f"messages for {len(want)} (window, key); total {time.monotonic() - t0:.1f} s")  # fmt: skip
