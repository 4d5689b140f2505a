"""CLI: ``skewroute spark-bench`` and ``skewroute source-bench``.

``spark-bench``: the Spark job per routing algorithm on pre-routed topics. ``source-bench``: Spark's JVM Kafka
source vs skewroute's Python source on one topic.
"""

from __future__ import annotations

from pathlib import Path

import typer

from router.commands import LAB

__all__ = ["register"]


def spark_bench(
    partitioners: str = typer.Option(
        "hash,pkg,cam,dalton", "--partitioners", "-p", help="comma-separated partitioners"
    ),
    records: int = typer.Option(1_000_000, "--records", min=1, help="routed records per partitioner"),
    batch: int = typer.Option(250_000, "--batch", min=1, help="records per micro-batch"),
    combiners: int = typer.Option(8, "--combiners", "-n", min=1, help="number of combiners n"),
    keys: int = typer.Option(10_000, "--keys", min=1, help="distinct keys of the Zipf stream"),
    zipf: float = typer.Option(1.5, "--zipf", "-s", help="Zipf exponent s of the stream"),
    sink: str = typer.Option("kafka", "--sink", help="`kafka` (results topic) or `noop`"),
    reducers: int = typer.Option(2, "--reducers", "-m", min=1, help="reducers m (spark.sql.shuffle.partitions)"),
    warmup: int = typer.Option(250_000, "--warmup", min=0, help="records of an unreported warm-up pass (0: none)"),
    bootstrap: str | None = typer.Option(None, "--bootstrap", help="an existing broker (default: start one)"),
    out: Path = typer.Option(Path("reports"), "--out", "-o", help="report folder (writes `spark-bench.md`)"),
    sources: str = typer.Option(
        "python",
        "--sources",
        help="Spark sources, one row each on the same topic: python (skewroute's) and/or kafka (Spark's JVM "
        "connector from spark.jars.packages; needs --broker kafka to read every record)",
    ),
    broker: str = typer.Option(
        "tansu",
        "--broker",
        help="broker started when --bootstrap is not given: tansu (embedded) or kafka (Apache Kafka)",
    ),
    kafka_package: str | None = typer.Option(
        None, "--kafka-package", help="spark-sql-kafka Maven coordinate for the kafka source (default: the job's)"
    ),
) -> None:
    """Benchmark the Spark job per partitioner on pre-routed topics (records/s, straggler ratio, partials)."""
    from benchmarks.spark.bench import main, parse_sources

    if sink not in ("kafka", "noop"):
        raise typer.BadParameter("kafka or noop", param_hint="--sink")
    if broker not in ("tansu", "kafka"):
        raise typer.BadParameter(f"tansu or kafka, got {broker!r}", param_hint="--broker")
    try:
        parse_sources(sources)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--sources") from None
    main(
        partitioners, records=records, batch=batch, combiners=combiners, keys=keys, zipf=zipf, sink=sink,
        reducers=reducers, warmup=warmup, bootstrap=bootstrap, out=out, sources=sources, broker=broker,
        package=kafka_package,
    )  # fmt: skip


def source_bench(
    records: int = typer.Option(400_000, "--records", min=1, help="routed records on the topic"),
    batch: int = typer.Option(100_000, "--batch", min=1, help="records per micro-batch (both sources)"),
    combiners: int = typer.Option(8, "--combiners", "-n", min=1, help="partitions of the combiner topic"),
    rounds: int = typer.Option(2, "--rounds", min=1, help="interleaved rounds (the order alternates)"),
    modes: str = typer.Option("job,source,read", "--modes", help="comma-separated subset of job, source, read"),
    kafka_package: str | None = typer.Option(
        None, "--kafka-package", help="spark-sql-kafka Maven coordinate (default: the job's)"
    ),
    bootstrap: str | None = typer.Option(None, "--bootstrap", help="an existing broker (default: start Apache Kafka)"),
    out: Path = typer.Option(Path("reports"), "--out", "-o", help="report folder (writes `spark-sources.md`)"),
) -> None:
    """Spark records/s with Spark's JVM Kafka source vs skewroute's Python source, on one topic, in three modes.

    `job` is the whole job, `source` reads and decodes (noop sink), `read` only reads Kafka's columns.
    """
    from benchmarks.spark.bench_sources import main, parse_modes

    try:
        chosen = parse_modes(modes)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--modes") from None
    main(records=records, batch=batch, n=combiners, rounds=rounds, modes=chosen, package=kafka_package,
         bootstrap=bootstrap, out=out)  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add ``spark-bench`` and ``source-bench`` to the CLI."""
    app.command("spark-bench", rich_help_panel=LAB)(spark_bench)
    app.command("source-bench", rich_help_panel=LAB)(source_bench)
