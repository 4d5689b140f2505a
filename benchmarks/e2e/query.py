"""The Spark side of an end-to-end run: the query of each configuration and what it measured.

The query is the job's own (:mod:`spark_consumers.job`): the same source, decoding, watermark, aggregation,
Kafka results sink and per-batch listener; only the configuration's reshaping of the input differs
(``direct-split``: more input partitions than Kafka partitions; ``direct-repartition``: ``repartition(n)``).
A ``-jvm`` configuration reads with Spark's built-in ``format("kafka")`` (``spark.source: kafka``) and decodes
the values with ``from_json``; the others with skewroute's source, decoding with Arrow (``decode=routed``).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from benchmarks.e2e.measures import list_schedule
from benchmarks.e2e.plan import base_config
from schemas.settings import SkewrouteSettings
from schemas.spark_settings import join_uri
from spark_consumers.aggregations import final_aggregates, parse_routed, with_event_watermark
from spark_consumers.job import JobHandle, agg_spec, query_name, read_combiners, start_with_metrics
from spark_consumers.observability import BatchStats
from spark_consumers.sinks import attach_sink

__all__ = ["CORES", "batch_summary", "shuffle_written", "start_query"]

#: Task slots the combiner-stage makespan is replayed on (list scheduling of the measured task times).
CORES = (2, 8, 32)


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


def batch_summary(batches: list[BatchStats]) -> dict[str, Any]:
    """Drain rate and combiner-stage figures over the micro-batches that read records.

    ``steady``: every data batch but the first (which pays for the query's start); makespans are the sums over
    the steady batches of the list-scheduled combiner stage on each of :data:`CORES` slots.
    """
    data = [b for b in batches if b.input_rows > 0]
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
        "straggler_median": statistics.median(strag) if strag else None,
        "straggler_mean": statistics.fmean(strag) if strag else None,
        "record_ratio_mean": statistics.fmean(rec) if rec else None,
        "combiner_stage_ms": sum(max(b.combiner_task_ms) for b in steady if b.combiner_task_ms),
        "makespan_ms": {
            f"C{c}": sum(list_schedule(b.combiner_task_ms, c) for b in steady if b.combiner_task_ms) for c in CORES
        },
        "task_ms": [b.combiner_task_ms for b in data],
        "task_records": [b.combiner_records for b in data],
        "per_batch": [asdict(b) for b in data],
    }
