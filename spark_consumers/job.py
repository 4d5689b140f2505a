r"""The Spark consumer job of one route: read the combiner topic, aggregate per (window, key), write results.

The only module that touches ``readStream``. ``SparkSettings.source`` picks the reader -- ``python``
(skewroute's confluent-kafka data source, :mod:`connectors.spark_source`) or ``kafka`` (Spark's built-in
``format("kafka")``, needs the spark-sql-kafka package) -- both produce the same columns, so everything
downstream is shared. Checkpointing is always on, under ``checkpoint_dir/<route>``.

Cluster form (see ``deploy/spark-submit.sh``)::

    spark-submit --master spark://host:7077 "$(python -c 'import spark_consumers.job as j; print(j.__file__)')" \\
        --config skewroute.yaml --route clicks
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from connectors.broker_traits import resolve_isolation_level
from connectors.spark_source import SHORT_NAME, kafka_options, register_source
from schemas.exceptions import ConfigError, SkewrouteError, exit_code
from schemas.settings import KafkaSettings, RouteSettings, SkewrouteSettings
from schemas.spark_settings import SparkSettings, join_uri
from spark_consumers.aggregations import (
    AggSpec,
    dedupe_source_position,
    final_aggregates,
    parse_routed,
    with_event_watermark,
)
from spark_consumers.observability import CombinerMetricsListener, RunStats
from spark_consumers.session import build_session
from spark_consumers.sinks import attach_sink, results_topic_spec

log = logging.getLogger(__name__)

__all__ = [
    "JobHandle",
    "build_writer",
    "check_bounded_run",
    "java_kafka_options",
    "main",
    "read_combiners",
    "resolve_dedupe",
    "run_job",
    "start_job",
    "start_with_metrics",
]


def java_kafka_options(kafka: KafkaSettings) -> dict[str, str]:
    """``KafkaSettings`` as options of Spark's built-in Kafka source (Java client property names)."""
    opts = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "kafka.security.protocol": kafka.security_protocol}
    if kafka.sasl_mechanism:
        opts["kafka.sasl.mechanism"] = kafka.sasl_mechanism
        module = "plain.PlainLoginModule" if kafka.sasl_mechanism == "PLAIN" else "scram.ScramLoginModule"
        pw = kafka.sasl_password.get_secret_value() if kafka.sasl_password else ""
        opts["kafka.sasl.jaas.config"] = (
            f'org.apache.kafka.common.security.{module} required username="{kafka.sasl_username}" password="{pw}";'
        )
    if kafka.ssl_ca_location:
        opts["kafka.ssl.truststore.type"] = "PEM"
        opts["kafka.ssl.truststore.location"] = kafka.ssl_ca_location
    return opts


#: Java consumer properties of Spark's Kafka source, set as the Python source sets its librdkafka consumer
#: (``connectors.kafka_offsets.make_probe_consumer``); ``spark.source_options`` overrides them.
#:
#: - ``fetch.max.wait.ms``: the Java default (500 ms) lets the broker hold a fetch at the log end that long. A
#:   scan task prefetches past its last record; when its range ends on a transaction marker (every range a
#:   transactional router wrote up to the end does), the task waits for that parked fetch before it can read
#:   the marker, so each wave of tasks would wait out the full 500 ms.
#: - ``max.poll.records``: Spark's connector seeks before every poll and then asks the broker for the
#:   partition's earliest and latest offsets, so each poll costs a fresh fetch and two offset lookups; at the
#:   Java default of 500 records a task makes one such round per 500 records.
#: - bigger fetches: one task reads a whole combiner partition's range.
#: The measurements behind these values are in BENCHMARKS.md ("Spark's JVM source with the Python source's fetch
#: settings").
JVM_CONSUMER_DEFAULTS: dict[str, str] = {
    "kafka.fetch.max.wait.ms": "20",
    "kafka.max.poll.records": "10000",
    "kafka.max.partition.fetch.bytes": str(16 << 20),
    "kafka.fetch.max.bytes": str(64 << 20),
}


def read_combiners(spark: SparkSession, kafka: KafkaSettings, route: RouteSettings, cfg: SparkSettings) -> DataFrame:
    """The combiner topic as a stream with Spark's Kafka columns, from the configured source.

    ``cfg.source_options`` come last (after the defaults, before the options skewroute owns, which the settings
    model keeps out of them).
    """
    if cfg.source == "python":
        register_source(spark)
        reader = spark.readStream.format(SHORT_NAME).options(**kafka_options(kafka))
        # Decoding in the source skips Spark's per-record JSON parser; item_field needs the raw JSON (from_json).
        reader = reader.option("decode", "routed" if cfg.item_field is None else "none")
    else:
        reader = spark.readStream.format("kafka").options(**{**java_kafka_options(kafka), **JVM_CONSUMER_DEFAULTS})
    reader = reader.options(**cfg.source_options)
    reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_records_per_trigger))  # the name both sources know
    level = resolve_isolation_level(cfg.isolation_level, kafka)  # "auto" asks the broker what it is
    reader = reader.option("kafka.isolation.level", level)  # a consumer property in both clients
    reader = reader.option("failOnDataLoss", str(cfg.fail_on_data_loss).lower())  # same names in both sources
    if cfg.min_partitions is not None:
        reader = reader.option("minPartitions", str(cfg.min_partitions))
    return reader.option("subscribe", route.combiner_topic_name).option("startingOffsets", cfg.starting_offsets).load()


def agg_spec(cfg: SparkSettings) -> AggSpec:
    """The aggregation of ``cfg``."""
    return AggSpec(cfg.window, cfg.slide, cfg.watermark, tuple(cfg.aggregations), cfg.top_k, cfg.approx_rsd,
                   tuple(cfg.percentiles), cfg.percentile_accuracy, cfg.score_rounds)  # fmt: skip


def resolve_dedupe(settings: SkewrouteSettings) -> bool:
    """``spark.dedupe``, with ``auto`` resolved: on unless the routers write exactly once (transactions).

    An at-least-once router that crashes re-routes what it had produced but not committed; without the dedupe
    those copies are counted twice.
    """
    dedupe = settings.spark.dedupe
    return settings.router.delivery != "exactly_once" if dedupe == "auto" else dedupe


def check_bounded_run(settings: SkewrouteSettings, available_now: bool, sink: str | None = None) -> None:
    """Refuse a ``--once`` run that would silently drop results: :class:`ConfigError` naming the setting.

    In ``output_mode: append`` (the parquet sink) a window is written once the watermark passes its end; a run
    that stops when the data ends leaves the windows after the last watermark open, and nothing writes them.
    """
    cfg = settings.spark
    if available_now and cfg.output_mode == "append":
        raise ConfigError(
            [
                f"spark.output_mode: append (sink {sink or cfg.sink}) cannot run with --once: the windows still open "
                "when the data ends are never written; run without --once, or set spark.sink: kafka and "
                "spark.output_mode: update"
            ]
        )


def aggregate_stream(raw: DataFrame, cfg: SparkSettings) -> DataFrame:
    """Parse, watermark, optionally dedupe, aggregate (shared by both sources; ``auto`` dedupes)."""
    df = with_event_watermark(parse_routed(raw, cfg.item_field), cfg.watermark)
    if cfg.dedupe:
        df = dedupe_source_position(df)
    return final_aggregates(df, agg_spec(cfg))


def query_name(route: RouteSettings) -> str:
    """``skewroute_<route>`` (a valid Spark query name)."""
    return "skewroute_" + re.sub(r"[^A-Za-z0-9_]", "_", route.route_name)


@dataclass
class JobHandle:
    """A started job: the query and the listener collecting its per-batch stats."""

    spark: SparkSession
    query: StreamingQuery
    listener: CombinerMetricsListener

    @property
    def stats(self) -> RunStats:
        """Per-batch combiner stats so far (``.rows_dropped_by_watermark``: the total dropped as late)."""
        return RunStats(self.listener.stats)

    def stop(self, settle_s: float = 30.0) -> None:
        """Stop the query and detach the listener, once it has handled the query's last progress and end events.

        Spark delivers progress events asynchronously; ``settle_s`` bounds the wait for the last one. A query
        that ended by itself is not stopped again: its thread may still be finishing, and stopping it then
        cancels a job group without jobs (a WARN line from Spark's scheduler).
        """
        if self.query.isActive:
            self.query.stop()
        last = self.query.lastProgress
        if last is not None and not self.listener.wait_handled(last.name or str(last.id), int(last.batchId), settle_s):
            log.warning("skewroute spark: the metrics of batch %s never reached the listener", last.batchId)
        # and its termination event: delivered after the process went on to stop, it made Spark log an error
        if not self.listener.wait_terminated(str(self.query.id), min(settle_s, 5.0)):
            log.debug("skewroute spark: the query's termination event did not reach the listener in time")
        self.spark.streams.removeListener(self.listener)


def build_writer(
    spark: SparkSession,
    settings: SkewrouteSettings,
    route_name: str | None = None,
    *,
    available_now: bool = False,
    sink: str | None = None,
) -> tuple[DataStreamWriter, str]:
    """The configured (not started) streaming writer of ``route_name`` (default: the first route) and its name.

    Everything short of contacting Kafka: the source, the aggregation plan and the sink are built and checked.
    """
    if not settings.routes:
        raise ValueError("no routes configured")
    route = settings.route(route_name) if route_name else settings.routes[0]
    check_bounded_run(settings, available_now, sink)
    cfg = settings.spark.model_copy(update={"dedupe": resolve_dedupe(settings)})
    sink = sink or cfg.sink
    if sink == "parquet" and cfg.output_mode != "append":  # a sink override; the settings check their own
        raise ValueError(f"sink=parquet needs output_mode=append (got output_mode={cfg.output_mode!r})")
    name = query_name(route)
    out = aggregate_stream(read_combiners(spark, settings.kafka, route, cfg), cfg)
    writer = out.writeStream.queryName(name).outputMode(cfg.output_mode)
    writer = writer.option("checkpointLocation", join_uri(cfg.checkpoint_dir, route.route_name))
    writer = attach_sink(
        writer,
        sink,
        kafka_conf=settings.kafka.librdkafka("producer"),
        results_topic=results_topic_name(settings, route),
        output_path=join_uri(cfg.output_path, route.route_name),
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=cfg.trigger_interval)
    return writer, name


def results_topic_name(settings: SkewrouteSettings, route: RouteSettings) -> str:
    """``spark.results_topic`` or ``<raw_topic>.results``."""
    return settings.spark.results_topic or f"{route.raw_topic}.results"


def start_job(
    spark: SparkSession,
    settings: SkewrouteSettings,
    route_name: str | None = None,
    *,
    available_now: bool = False,
    sink: str | None = None,
) -> JobHandle:
    """Build and start the streaming query of ``route_name`` (default: the only/first route)."""
    writer, name = build_writer(spark, settings, route_name, available_now=available_now, sink=sink)
    route = settings.route(route_name) if route_name else settings.routes[0]
    if (sink or settings.spark.sink) == "kafka":
        from connectors.admin import ensure_topics
        from connectors.kafka import make_admin

        ensure_topics(make_admin(settings.kafka), [results_topic_spec(results_topic_name(settings, route), route)])
    return start_with_metrics(
        spark, writer, name, settings.spark.progress_log, source=settings.spark.source,
        watermark=settings.spark.watermark,
    )  # fmt: skip


def start_with_metrics(
    spark: SparkSession,
    writer: Any,
    name: str,
    progress_log: Path | None,
    *,
    source: str | None = None,
    watermark: str | None = None,
) -> JobHandle:
    """Start ``writer`` (query ``name``) with the per-combiner metrics listener attached.

    ``source`` (``spark.source``) tells the listener how to map tasks to combiners; ``None``: from the progress.
    ``watermark`` (``spark.watermark``) is named in its warning about rows dropped as late.
    """
    listener = CombinerMetricsListener(spark, progress_log, {name}, source, watermark)
    spark.streams.addListener(listener)
    try:
        query = writer.start()
    except Exception:
        spark.streams.removeListener(listener)
        raise
    return JobHandle(spark, query, listener)


def run_job(
    settings: SkewrouteSettings,
    route_name: str | None = None,
    *,
    available_now: bool = False,
    timeout: float | None = None,
    spark: SparkSession | None = None,
) -> RunStats:
    """Run the job until it ends (``available_now``), ``timeout`` seconds pass, or Ctrl-C; the batch stats.

    ``.rows_dropped_by_watermark`` of the result: rows dropped as later than the watermark (missing from the
    results; each batch with drops also logged a WARNING). The run still succeeds.

    A streaming run (not ``available_now``) whose query ends by itself raises ``RuntimeError``, with or
    without an exception from Spark: a query thread killed by a JVM error reports none.
    """
    check_bounded_run(settings, available_now)  # before a JVM starts
    session = spark or build_session(settings.spark)
    if settings.spark.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(settings.spark.metrics_port)
    handle = start_job(session, settings, route_name, available_now=available_now)
    ended = False  # by itself, not stopped here
    try:
        if timeout is None:
            handle.query.awaitTermination()
            ended = True
        else:
            ended = bool(handle.query.awaitTermination(max(1, round(timeout))))
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()
    exc = handle.query.exception()
    if exc is not None:
        raise RuntimeError(f"streaming query failed: {exc}")
    if ended and not available_now:  # e.g. its thread died of a JVM error, which Spark does not report
        raise RuntimeError(
            f"streaming query {handle.query.name!r} ended by itself without an error; the driver log says why"
        )
    return handle.stats


def _args(argv: list[str] | None) -> Any:
    p = argparse.ArgumentParser(prog="spark_consumers.job", description="skewroute Spark consumer job")
    p.add_argument("--config", type=Path, default=None, help="YAML/TOML settings file")
    p.add_argument("--route", default=None, help="route name (default: the first)")
    p.add_argument("--available-now", "--once", action="store_true", help="process what is there, then stop")
    p.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Entry point for ``spark-submit .../spark_consumers/job.py`` and ``python -m spark_consumers.job``."""
    a = _args(argv)
    from router.preflight import spark_job_preflight

    try:
        settings = SkewrouteSettings.load(a.config)
        if not settings.routes:
            raise ConfigError(["routes: no routes configured (settings: routes: [{raw_topic: ...}])"])
        check_bounded_run(settings, a.available_now)
        spark_job_preflight(settings, settings.route(a.route) if a.route else settings.routes[0], 30.0)
        stats = run_job(settings, a.route, available_now=a.available_now, timeout=a.timeout)
    except SkewrouteError as exc:  # one line (or one per setting), the exit code every command uses
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exit_code(exc)) from None
    rows = sum(s.input_rows for s in stats)
    print(f"skewroute spark job: {len(stats)} micro-batches, {rows} records, "
          f"{stats.rows_dropped_by_watermark} dropped as later than the watermark")  # fmt: skip


if __name__ == "__main__":
    main()
