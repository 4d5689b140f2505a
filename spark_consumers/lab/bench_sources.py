"""Spark records/s with the JVM Kafka source (spark-sql-kafka) vs skewroute's Python source, on the same topic.

One combiner topic (routed records, hash partitioner, Zipf keys) is written once to Apache Kafka (started here
unless ``--bootstrap`` names a broker); then the same job (window aggregation, Kafka sink) reads it from the
beginning with ``spark.source: python`` and ``spark.source: kafka`` in turns (``--rounds`` each, order alternating),
on ONE SparkSession started with the connector package. Rate = records / summed batch time over the batches after
the first (the same steady rate as ``spark-bench``). Prints a table and writes a Markdown report.

    python -m spark_consumers.lab.bench_sources --tuples 400000 --batch 100000 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import free_port
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings, SkewrouteSettings
from spark_consumers.lab.bench import BenchResult, _stream
from spark_consumers.lab.feed import assign_combiners, produce_routed

#: spark-sql-kafka at the installed PySpark's version is not on Maven Central (4.3.0): the newest published one.
DEFAULT_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"


def run(kafka: KafkaSettings, *, tuples: int, batch: int, n: int, rounds: int, package: str, workdir: Path) -> dict:
    """Rates per source over ``rounds`` alternating runs on one topic."""
    from spark_consumers.job import build_session, start_job

    keys, times, measures = _stream(tuples, 10_000, 1.5, 1)
    raw = f"srcbench-{os.getpid()}-{time.monotonic_ns()}"
    base = SkewrouteSettings.load(kafka=kafka, routes=[{"raw_topic": raw, "combiners": n}])
    topic = base.routes[0].combiner_topic_name
    ensure_topics(make_admin(kafka), [TopicSpec(topic, n, exact=True)])
    produce_routed(kafka, topic, keys, times, measures, assign_combiners(keys, "hash", n, seed=1), raw_topic=raw)
    rates: dict[str, list[float]] = {"python": [], "kafka": []}
    spark = None
    for r in range(rounds):
        for source in ("python", "kafka") if r % 2 == 0 else ("kafka", "python"):
            run_dir = workdir / f"{source}-{r}"
            settings = SkewrouteSettings.load(
                kafka=kafka,
                routes=[{"raw_topic": raw, "combiners": n}],
                spark={"source": source, "kafka_package": package, "max_records_per_trigger": batch,
                       "window": "10 seconds", "watermark": "30 seconds", "results_topic": f"{raw}.{source}-{r}",
                       "checkpoint_dir": str(run_dir / "ck"), "progress_log": str(run_dir / "progress.jsonl"),
                       "shuffle_partitions": 2,
                       "conf": {"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"}},
            )  # fmt: skip
            if spark is None:  # source=kafka settings: the session gets spark.jars.packages (serves both sources)
                first = settings.model_copy(update={"spark": settings.spark.model_copy(update={"source": "kafka"})})
                spark = build_session(first.spark, "skewroute-source-bench")
                spark.sparkContext.setLogLevel("ERROR")
            handle = start_job(spark, settings, available_now=True)
            handle.query.awaitTermination()
            time.sleep(1.0)
            handle.stop()
            if handle.query.exception() is not None:
                raise SystemExit(f"{source} round {r}: {handle.query.exception()}")
            res = BenchResult(source, tuples, batches=handle.stats)
            got = sum(b.input_rows for b in res.batches)
            if got != tuples:
                raise SystemExit(f"{source} round {r}: read {got} records, expected {tuples}")
            rate = res.steady_rate or 0.0
            rates[source].append(rate)
            print(f"round {r + 1} {source:6s} {rate:,.0f} rec/s ({len(res.steady)} steady batches)", file=sys.stderr)
    if spark is not None:
        spark.stop()
    return rates


def main(argv: list[str] | None = None) -> None:
    """Command line: start Apache Kafka (unless --bootstrap), run, print and write the report."""
    p = argparse.ArgumentParser(prog="spark-source-bench", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--tuples", type=int, default=400_000)
    p.add_argument("--batch", type=int, default=100_000, help="records per micro-batch")
    p.add_argument("-n", "--combiners", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--package", default=DEFAULT_PACKAGE, help="spark-sql-kafka Maven coordinate")
    p.add_argument("--bootstrap", default=None, help="an existing broker (default: start Apache Kafka)")
    p.add_argument("--report", type=Path, default=Path("reports/spark-sources.md"))
    a = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="source-bench-"))
    cluster = None
    if a.bootstrap is None:
        from connectors.apache_kafka import ApacheKafkaCluster

        cluster = ApacheKafkaCluster(port=free_port(), state_dir=workdir / "kafka", heap="1g").start()
    started, load0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()[0]
    try:
        kafka = KafkaSettings(bootstrap_servers=a.bootstrap or cluster.bootstrap)  # type: ignore[union-attr]
        rates = run(kafka, tuples=a.tuples, batch=a.batch, n=a.combiners, rounds=a.rounds, package=a.package,
                    workdir=workdir)  # fmt: skip
    finally:
        if cluster is not None:
            cluster.stop()
    load1 = os.getloadavg()[0]
    med = {s: statistics.median(v) for s, v in rates.items()}
    ratio = med["kafka"] / med["python"] if med["python"] else float("nan")
    lines = [
        "# Spark source: JVM (spark-sql-kafka) vs Python",
        "",
        f"`python -m spark_consumers.lab.bench_sources --tuples {a.tuples} --batch {a.batch} -n {a.combiners} "
        f"--rounds {a.rounds}` on {started}; broker {'Apache Kafka (one KRaft node)' if cluster else a.bootstrap}; "
        f"connector {a.package}; 1-min load average {load0:.2f} at the start, {load1:.2f} at the end (2 cores: "
        "anything above ~2 means other processes competed).",
        "",
        "| source | records/s per round | median |",
        "| --- | --- | --- |",
        *(f"| {s} | {', '.join(f'{x:,.0f}' for x in v)} | {med[s]:,.0f} |" for s, v in rates.items()),
        "",
        f"JVM / Python median ratio: **{ratio:.2f}** (goal >= 2).",
    ]
    print("\n".join(lines))
    a.report.parent.mkdir(parents=True, exist_ok=True)
    a.report.write_text("\n".join(lines) + "\n")
    print(f"wrote {a.report}")


if __name__ == "__main__":
    main()
