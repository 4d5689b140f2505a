"""The Spark side of an end-to-end run: the query of each configuration and what it measured.

The query is the job's own (:mod:`spark_consumers.job`): the same source, decoding, watermark, aggregation,
Kafka results sink and per-batch listener; only the configuration's reshaping of the input differs
(``direct-split``: more input partitions than Kafka partitions; ``direct-repartition``: ``repartition(n)``).
A ``-jvm`` configuration reads with Spark's built-in ``format("kafka")`` (``spark.source: kafka``) and decodes
the values with ``from_json``; the others with skewroute's source, decoding with Arrow (``decode=routed``).
"""

from __future__ import annotations

import contextlib
import logging
import statistics
from dataclasses import asdict
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from benchmarks.demo.checks import weighted_record_max_mean
from benchmarks.e2e.measures import list_schedule
from benchmarks.e2e.model import SLOTS, breakdown, modelled_drain
from benchmarks.e2e.plan import RunSpec, base_config
from schemas.exceptions import SkewrouteError
from schemas.settings import SkewrouteSettings
from schemas.spark_settings import join_uri
from spark_consumers.aggregations import final_aggregates, parse_routed, with_event_watermark
from spark_consumers.job import JobHandle, agg_spec, query_name, read_combiners, start_with_metrics
from spark_consumers.observability import BatchStats
from spark_consumers.sinks import attach_sink

__all__ = ["CORES", "RestartingQuery", "batch_stages", "batch_summary", "shuffle_written", "start_query"]

log = logging.getLogger("benchmarks.e2e")
RESTARTS = 10  # starts of a query that fails before its first micro-batch

#: Task slots the combiner-stage makespan is replayed on (list scheduling of the measured task times).
CORES = SLOTS


def _read(spark: SparkSession, settings: SkewrouteSettings, split: int | None) -> DataFrame:
    """The job's own reader (either source), with ``minPartitions`` = ``split`` for ``direct-split``."""
    cfg = settings.spark.model_copy(update={"min_partitions": split}) if split is not None else settings.spark
    return read_combiners(spark, settings.kafka, settings.routes[0], cfg)


def start_query(
    spark: SparkSession, settings: SkewrouteSettings, config: str, *, available_now: bool, split: int | None = None
) -> JobHandle:
    """Start configuration ``config``'s query on ``settings`` (its route's combiner topic is what it reads)."""
    from connectors.admin import TopicSpec, ensure_topics
    from connectors.kafka import make_admin

    route, cfg = settings.routes[0], settings.spark
    config = base_config(config)  # the source comes from the settings (spark.source)
    raw = _read(spark, settings, split if config == "direct-split" else None)
    if config == "direct-repartition":
        raw = raw.repartition(route.combiners)  # round robin: balanced tasks, one more shuffle of every record
    out = final_aggregates(with_event_watermark(parse_routed(raw), cfg.watermark), agg_spec(cfg))
    results = cfg.results_topic or f"{route.raw_topic}.results"
    ensure_topics(make_admin(settings.kafka), [TopicSpec(results, route.combiners)])
    name = query_name(route)
    writer = out.writeStream.queryName(name).outputMode(cfg.output_mode)
    writer = writer.option("checkpointLocation", join_uri(cfg.checkpoint_dir, route.route_name))
    writer = attach_sink(writer, "kafka", kafka_conf=settings.kafka.librdkafka("producer"), results_topic=results)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=cfg.trigger_interval)
    return start_with_metrics(spark, writer, name, cfg.progress_log)


def shuffle_written(spark: SparkSession, run_id: str) -> int:
    """Shuffle records written by every stage of the query run ``run_id`` (all shuffles, not only partials)."""
    from spark_consumers.observability import _stage_tasks

    tracker = spark.sparkContext.statusTracker()
    total = 0
    stages: set[int] = set()
    for j in tracker.getJobIdsForGroup(run_id):
        info = tracker.getJobInfo(j)
        if info is not None:
            stages.update(int(s) for s in info.stageIds)
    for sid in stages:
        total += sum(t["shuffle_written"] for t in _stage_tasks(spark, sid))
    return total


def _is_combiner(tasks: list[dict[str, int]]) -> bool:
    return all(t["shuffle_read"] == 0 for t in tasks) and any(t["shuffle_written"] for t in tasks)


def batch_stages(spark: SparkSession, run_id: str, combiner_ms: list[list[int]]) -> list[list[list[int]] | None]:
    """Per data micro-batch: the task run times (ms) of every stage of its job, in stage order.

    A micro-batch of the job runs one Spark job (the sink's single action) whose first stage is the combiner
    stage the listener measured; jobs are matched to batches in order by that stage's task times (as a
    multiset: the listener lists them per combiner). A batch without a matching job gets None (the status
    store keeps the last ``spark.ui.retainedJobs`` jobs only).
    """
    from spark_consumers.observability import _stage_tasks

    tracker = spark.sparkContext.statusTracker()
    jobs: list[tuple[list[int], list[list[int]]]] = []
    for j in sorted(tracker.getJobIdsForGroup(run_id)):
        info = tracker.getJobInfo(j)
        if info is None:
            continue
        combiner: list[int] | None = None
        stages: list[list[int]] = []
        for sid in sorted(int(s) for s in info.stageIds):
            tasks = sorted(_stage_tasks(spark, sid), key=lambda t: t["index"])
            if not tasks:
                continue  # skipped: its shuffle output was reused
            if combiner is None and _is_combiner(tasks):
                combiner = [t["run_ms"] for t in tasks]
            stages.append([t["run_ms"] for t in tasks])
        if combiner is not None:
            jobs.append((sorted(combiner), stages))
    out: list[list[list[int]] | None] = []
    pending = iter(jobs)
    for ms in combiner_ms:
        match = next((stages for comb, stages in pending if comb == sorted(ms)), None) if ms else None
        out.append(match)
    return out


def batch_summary(batches: list[BatchStats], stages: list[list[list[int]] | None] | None = None, slots: int = 2,
                  modelled: tuple[int, ...] = CORES, combiners: int = 0) -> dict[str, Any]:  # fmt: skip
    """Drain rate and combiner-stage figures over the micro-batches that read records.

    ``steady``: every data batch but the first (which pays for the query's start); makespans are the sums over
    the steady batches of the list-scheduled combiner stage on each of :data:`CORES` slots. ``stages``: per data
    batch, every stage's task times (:func:`batch_stages`); with them, ``model`` holds the drain modelled on each
    of ``modelled`` slots from this run on ``slots`` slots (:mod:`benchmarks.e2e.model`). ``combiners``: the
    tasks a micro-batch's records max/mean counts at least (:func:`benchmarks.demo.checks.record_max_mean`).
    """
    data = [b for b in batches if b.input_rows > 0]
    stage_ms = stages if stages is not None and len(stages) == len(data) else [None] * len(data)
    model_in = [{"records": b.input_rows, "batch_ms": b.batch_ms, "stage_task_ms": st}
                for b, st in zip(data, stage_ms, strict=True)]  # fmt: skip
    steady = data[1:] if len(data) > 1 else data
    ms = sum(b.batch_ms for b in steady)
    all_ms = sum(b.batch_ms for b in data)
    strag = [b.straggler_ratio for b in data if b.straggler_ratio is not None]
    rec = [b.record_ratio for b in data if b.record_ratio is not None]
    return {
        "records": sum(b.input_rows for b in data),
        "batches": len(data),
        "steady_rate": sum(b.input_rows for b in steady) / (ms / 1000) if ms else None,
        "overall_rate": sum(b.input_rows for b in data) / (all_ms / 1000) if all_ms else None,
        "batch_ms": [b.batch_ms for b in data],
        "shuffled_partials": sum(b.shuffled_partials for b in data),
        "partials_per_batch": [b.shuffled_partials for b in data],
        "groups": sum(b.groups for b in data),  # (window, key) groups updated: the partials at one per group
        "record_max_mean": weighted_record_max_mean(data, combiners),
        "straggler_median": statistics.median(strag) if strag else None,
        "straggler_mean": statistics.fmean(strag) if strag else None,
        "record_ratio_mean": statistics.fmean(rec) if rec else None,
        "combiner_stage_ms": sum(max(b.combiner_task_ms) for b in steady if b.combiner_task_ms),
        "makespan_ms": {
            f"C{c}": sum(list_schedule(b.combiner_task_ms, c) for b in steady if b.combiner_task_ms) for c in CORES
        },
        "batch_makespan_ms": {
            f"C{c}": [list_schedule(b.combiner_task_ms, c) if b.combiner_task_ms else None for b in data] for c in CORES
        },
        "stage_task_ms": stage_ms,
        "slots": slots,
        "model": {f"C{c}": modelled_drain(model_in, slots, c) for c in modelled},
        "breakdown": breakdown(model_in, slots),
        "task_ms": [b.combiner_task_ms for b in data],
        "task_records": [b.combiner_records for b in data],
        "per_batch": [asdict(b) for b in data],
    }


class RestartingQuery:
    """A run's streaming query, started again when it fails before its first micro-batch.

    On an overloaded host Spark's Python workers can miss their connect-back timeout before the first
    micro-batch; the query is then started again and resumes from its checkpoint.
    """

    def __init__(self, spark: Any, settings: Any, spec: RunSpec, backlog: bool, split: int) -> None:
        self.spark, self.settings, self.spec, self.backlog, self.split = spark, settings, spec, backlog, split
        self.restarts = 0
        self.handle = self._start()

    def _start(self) -> Any:
        return start_query(self.spark, self.settings, self.spec.config, available_now=self.backlog, split=self.split)

    def failed_early(self) -> bool:
        """Restart the query if it failed before its first micro-batch (``True``); raise if it failed later."""
        exc = self.handle.query.exception()
        if exc is None:
            return False
        if self.handle.stats or self.restarts >= RESTARTS:
            raise SkewrouteError(f"{self.spec.tag}: the query failed: {exc}")
        self.restarts += 1
        log.warning("%s: query failed before its first batch (%s); starting it again", self.spec.tag,
                    str(exc).splitlines()[0])  # fmt: skip
        self.handle.stop()
        self.handle = self._start()
        return True

    def await_end(self, timeout_s: float) -> None:
        """Wait until an ``availableNow`` query has read everything."""
        while True:
            with contextlib.suppress(Exception):  # a failure surfaces through query.exception()
                self.handle.query.awaitTermination(int(timeout_s))
            if not self.failed_early():
                return
