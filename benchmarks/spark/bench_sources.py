"""Spark records/s with the JVM Kafka source (spark-sql-kafka) vs skewroute's Python source, on the same topic.

One combiner topic (routed records, hash partitioner, Zipf keys) is written once to Apache Kafka (started here
unless ``bootstrap`` names a broker); then every source reads it from the beginning, in interleaved rounds
(order alternating), on ONE SparkSession started with the connector package, with the same per-trigger budget
(``batch`` records). Three modes, so that the source is not hidden behind the aggregation:

- ``job``: the whole job -- source, decoding, watermark, window aggregation (stateful, one shuffle), Kafka
  results sink. Its rate is bounded by whatever stage is slowest, which need not be the source.
- ``source``: only the source -- read and decode into the job's columns (``parse_routed``: the Python source
  decodes in the source with Arrow, ``decode=routed``; the JVM source's rows go through ``from_json``), then a
  ``noop`` sink (every row is produced, nothing is written).
- ``read``: only the transport -- Spark's Kafka columns (``key``, ``value`` bytes, offsets ...), no decoding
  (the Python source with ``decode=none``), then the ``noop`` sink. ``source`` minus ``read`` is the decoding.

Rate = records / summed batch time over the batches after the first (the same steady rate as ``spark-bench``).
Prints a table and writes a Markdown report with both rates and both JVM/Python ratios.

    skewroute source-bench --records 400000 --batch 100000 --rounds 2
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.spark.bench import BenchResult, _stream
from benchmarks.spark.feed import assign_combiners, produce_routed
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import free_port
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings, SkewrouteSettings

__all__ = ["MODES", "SOURCES", "main", "parse_modes", "render_markdown", "run"]

SOURCES = ("python", "kafka")
MODES = ("job", "source", "read")


def _settings(kafka: KafkaSettings, raw: str, n: int, source: str, batch: int, package: str, run_dir: Path,
              results: str) -> SkewrouteSettings:  # fmt: skip
    return SkewrouteSettings.load(
        kafka=kafka,
        routes=[{"raw_topic": raw, "combiners": n}],
        spark={"source": source, "dedupe": False, "kafka_package": package, "max_records_per_trigger": batch,
               "window": "10 seconds", "watermark": "30 seconds", "results_topic": results,
               "checkpoint_dir": str(run_dir / "ck"), "progress_log": str(run_dir / "progress.jsonl"),
               "shuffle_partitions": 2,
               "conf": {"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"}},
    )  # fmt: skip


def _start(spark: Any, settings: SkewrouteSettings, mode: str) -> Any:
    """The ``job`` query (the real job), the ``source`` query (read + decode, noop) or ``read`` (read, noop)."""
    from spark_consumers.aggregations import parse_routed
    from spark_consumers.job import query_name, read_combiners, start_job, start_with_metrics

    if mode == "job":
        return start_job(spark, settings, available_now=True)
    route, cfg = settings.routes[0], settings.spark
    if mode == "read":  # with an item_field the Python source leaves the values undecoded (decode=none)
        cfg = cfg.model_copy(update={"item_field": "i"})
    raw = read_combiners(spark, settings.kafka, route, cfg)
    df = parse_routed(raw) if mode == "source" else raw
    name = query_name(route)
    writer = df.writeStream.queryName(name).format("noop").option("checkpointLocation", str(cfg.checkpoint_dir))
    return start_with_metrics(spark, writer.trigger(availableNow=True), name, cfg.progress_log, source=cfg.source)


def run(
    kafka: KafkaSettings,
    *,
    records: int,
    batch: int,
    n: int,
    rounds: int,
    package: str,
    workdir: Path,
    modes: tuple[str, ...] = MODES,
) -> dict[tuple[str, str], list[float]]:
    """Steady rates per (mode, source) over ``rounds`` interleaved rounds on one topic."""
    from spark_consumers.session import build_session

    keys, times, measures = _stream(records, 10_000, 1.5, 1)
    raw = f"srcbench-{os.getpid()}-{time.monotonic_ns()}"
    topic = SkewrouteSettings.load(kafka=kafka, routes=[{"raw_topic": raw, "combiners": n}]).routes[0]
    ensure_topics(make_admin(kafka), [TopicSpec(topic.combiner_topic_name, n, exact=True)])
    produce_routed(kafka, topic.combiner_topic_name, keys, times, measures, assign_combiners(keys, "hash", n, seed=1),
                   raw_topic=raw)  # fmt: skip
    rates: dict[tuple[str, str], list[float]] = {(m, s): [] for m in modes for s in SOURCES}
    # source=kafka settings: the session gets spark.jars.packages at launch (it serves both sources)
    spark = build_session(_settings(kafka, raw, n, "kafka", batch, package, workdir, "x").spark, "skewroute-sources")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for r in range(rounds):
            order = [(m, s) for m in modes for s in SOURCES]
            for mode, source in order if r % 2 == 0 else order[::-1]:
                run_dir = workdir / f"{mode}-{source}-{r}"
                settings = _settings(kafka, raw, n, source, batch, package, run_dir, f"{raw}.{mode}-{source}-{r}")
                handle = _start(spark, settings, mode)
                handle.query.awaitTermination()
                time.sleep(1.0)  # the listener's last progress event
                handle.stop()
                if handle.query.exception() is not None:
                    raise SystemExit(f"{mode}/{source} round {r}: {handle.query.exception()}")
                res = BenchResult(source, records, batches=handle.stats)
                got = sum(b.input_rows for b in res.batches)
                if got != records:
                    raise SystemExit(f"{mode}/{source} round {r}: read {got} records, expected {records}")
                rate = res.steady_rate or 0.0
                rates[(mode, source)].append(rate)
                print(f"round {r + 1} {mode:6s} {source:6s} {rate:,.0f} rec/s ({len(res.steady)} steady batches)",
                      file=sys.stderr)  # fmt: skip
    finally:
        spark.stop()
    return rates


def render_markdown(rates: dict[tuple[str, str], list[float]], header: str) -> str:
    """Per (mode, source): the rate of every round and the median; per mode: the JVM/Python ratio."""
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    lines = [
        "# Spark source: JVM (spark-sql-kafka) vs Python",
        "",
        header,
        "",
        "| mode | source | records/s per round | median |",
        "| --- | --- | --- | ---: |",
        *(
            f"| {m} | {s} | {', '.join(f'{x:,.0f}' for x in v)} | {med[(m, s)]:,.0f} |"
            for (m, s), v in rates.items()
            if v
        ),  # fmt: skip
        "",
        "| mode | JVM / Python median | goal |",
        "| --- | ---: | --- |",
    ]
    for m in dict.fromkeys(m for m, _ in rates):
        py, jvm = med.get((m, "python")), med.get((m, "kafka"))
        ratio = f"{jvm / py:.2f}" if py and jvm else "n/a"
        lines.append(f"| {m} | {ratio} | >= 2 |")
    lines += [
        "",
        "`job`: the whole job (source, decode, window aggregation, Kafka sink). `source`: read + decode into the "
        "job's columns, `noop` sink. `read`: Spark's Kafka columns, no decoding, `noop` sink. The ratios are "
        "measured, not judged here: compare them with the goal.",
    ]
    return "\n".join(lines) + "\n"


def parse_modes(text: str) -> tuple[str, ...]:
    """``job,read`` -> ``("job", "read")``; an unknown or missing mode is an error naming the value."""
    out = tuple(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    if not out or set(out) - set(MODES):
        raise ValueError(f"choose from {', '.join(MODES)}, got {text!r}")
    return out


def main(
    *,
    records: int = 400_000,
    batch: int = 100_000,
    n: int = 8,
    rounds: int = 2,
    modes: tuple[str, ...] = MODES,
    package: str | None = None,
    bootstrap: str | None = None,
    out: Path = Path("reports"),
) -> Path:
    """Start Apache Kafka (unless ``bootstrap``), run, print and write ``out/spark-sources.md``; its path.

    ``modes``: a subset of :data:`MODES` (:func:`parse_modes` reads one from text).
    """
    from spark_consumers.session import DEFAULT_KAFKA_PACKAGE

    package = package or DEFAULT_KAFKA_PACKAGE
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="source-bench-"))
    cluster = None
    if bootstrap is None:
        from connectors.apache_kafka import ApacheKafkaCluster

        cluster = ApacheKafkaCluster(port=free_port(), state_dir=workdir / "kafka", heap="1g").start()
    started, load0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()
    try:
        kafka = KafkaSettings(bootstrap_servers=bootstrap or cluster.bootstrap)  # type: ignore[union-attr]
        rates = run(kafka, records=records, batch=batch, n=n, rounds=rounds, package=package, workdir=workdir,
                    modes=modes)  # fmt: skip
    finally:
        if cluster is not None:
            cluster.stop()
    load1 = os.getloadavg()
    header = (
        f"`skewroute source-bench --records {records} --batch {batch} -n {n} --rounds {rounds} "
        f"--modes {','.join(modes)}` on {started}; broker "
        f"{'Apache Kafka (one KRaft node)' if cluster else bootstrap}; connector {package}; Spark local[2]; "
        f"load average (1/5/15 min) {'/'.join(f'{x:.2f}' for x in load0)} at the start, "
        f"{'/'.join(f'{x:.2f}' for x in load1)} at the end ({os.cpu_count()} cores: a 1-min figure above the core "
        "count means other processes competed)."
    )
    md = render_markdown(rates, header)
    print(md)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spark-sources.md").write_text(md)
    print(f"wrote {out / 'spark-sources.md'}")
    return out / "spark-sources.md"
