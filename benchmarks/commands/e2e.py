"""CLI: ``skewroute e2e-bench`` -- direct, direct-split, direct-repartition and routed pipelines side by side.

Every configuration has a ``-jvm`` twin read with Spark's JVM Kafka source (``--configs direct,direct-jvm``); those
need exact end offsets, so they run on Apache Kafka (``--broker kafka``) or on a broker given with ``--bootstrap``.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from router.commands import LAB

console = Console(stderr=True)


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{what} must be comma-separated integers, got {text!r}") from None
    if not out or min(out) < 1:
        raise typer.BadParameter(f"{what} must list integers >= 1, got {text!r}")
    return out


def e2e_bench(
    workload: str = typer.Option(
        "zipf:s=1.5,keys=10000",
        "--workload",
        "-w",
        help="workload spec: 'zipf:s=1.5,keys=10000', 'flights:key=dest', 'words:lang=en'",
    ),
    records: int = typer.Option(400_000, "--records", min=1_000, help="records of the backlog phase"),
    batch: int = typer.Option(100_000, "--batch", min=100, help="records per micro-batch at most (backlog)"),
    combiners: str = typer.Option("8,2", "--combiners", "-n", help="one setup per n (raw partitions = n)"),
    configs: str = typer.Option("", "--configs", help="comma-separated subset (default: all)"),
    routers: int = typer.Option(2, "--routers", min=1, max=8, help="router worker processes"),
    rate: float = typer.Option(0.0, "--rate", min=0, help="latency phase rate (default: 0.9 x direct's drain)"),
    rate_seconds: float = typer.Option(20.0, "--rate-seconds", min=1, help="latency phase length"),
    profile: str = typer.Option(
        "light",
        "--profile",
        help="aggregates: light (count/sum/min/max/mean/approx_distinct) or heavy (light + percentile_approx + the "
        "per-record score computation)",
    ),
    score_rounds: int = typer.Option(1_000, "--score-rounds", min=1, help="heavy: cost of the per-record score"),
    percentile_accuracy: int = typer.Option(10_000, "--percentile-accuracy", min=1, help="heavy: percentile accuracy"),
    latency_combiners: str = typer.Option(
        "", "--latency-combiners", help="the n that get a rate (latency) phase, comma-separated (default: every n)"
    ),
    model_check: bool = typer.Option(
        True, "--model-check/--no-model-check", help="drain again on local[1] and check the many-core model with it"
    ),
    bootstrap: str | None = typer.Option(None, "--bootstrap", help="use this Kafka instead of an embedded broker"),
    broker: str = typer.Option(
        "tansu",
        "--broker",
        help="broker started when --bootstrap is not given: tansu (embedded) or kafka (Apache Kafka)",
    ),
    kafka_package: str | None = typer.Option(
        None,
        "--kafka-package",
        help="spark-sql-kafka Maven coordinate for the -jvm configurations (default: the job's)",
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="report folder (default reports/e2e-<timestamp>)"),
    quick: bool = typer.Option(False, "--quick", help="a short run for tests (every configuration, small input)"),
    seed: int = typer.Option(1, "--seed", help="workload seed"),
    rounds: int = typer.Option(
        1,
        "--rounds",
        min=1,
        max=20,
        help="backlog drains of every configuration, the order reversed every other round (ratios paired per round; "
        "the drain and partials targets on their medians)",
    ),
    warmup: int | None = typer.Option(
        None, "--warmup", min=0, help="records of each unreported warm-up pass (default: --records; 0: none)"
    ),
) -> None:
    """Measure what routing buys a Spark job against reading the raw topic directly; write a report."""
    from benchmarks.e2e.plan import DIRECT, JVM, ROUTED, E2EOptions
    from benchmarks.e2e.report import write_report
    from benchmarks.e2e.run import run_e2e
    from schemas.spark_settings import AGGREGATION_PROFILES

    chosen = tuple(c.strip() for c in configs.split(",") if c.strip()) or DIRECT + ROUTED
    bad = [c for c in chosen if c not in DIRECT + ROUTED + JVM]
    if bad:
        raise typer.BadParameter(f"--configs: unknown {bad}; valid: {', '.join(DIRECT + ROUTED)} (each also with -jvm)")
    if profile not in AGGREGATION_PROFILES:
        raise typer.BadParameter(f"{' or '.join(AGGREGATION_PROFILES)}, got {profile!r}", param_hint="--profile")
    if broker not in ("tansu", "kafka"):
        raise typer.BadParameter(f"tansu or kafka, got {broker!r}", param_hint="--broker")
    jvm = [c for c in chosen if c in JVM]
    if jvm and not bootstrap and broker == "tansu":
        raise typer.BadParameter(
            f"{', '.join(jvm)} read with Spark's JVM Kafka source, which stops at the high watermark (one producer "
            "batch short on Tansu): add --broker kafka (Apache Kafka) or --bootstrap",
            param_hint="--configs",
        )
    folder = out or Path("reports") / f"e2e-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    opts = E2EOptions(
        workload=workload, records=2_000 if quick else records, batch=1_000 if quick else batch,
        combiners=(4,) if quick else _ints(combiners, "--combiners"), configs=chosen, routers=1 if quick else routers,
        rate=(1_000.0 if quick else rate) or None, rate_seconds=2.0 if quick else rate_seconds, profile=profile,
        score_rounds=score_rounds, percentile_accuracy=percentile_accuracy, model_check=model_check,
        rate_combiners=_ints(latency_combiners, "--latency-combiners") if latency_combiners.strip() else None,
        bootstrap=bootstrap, kafka_package=kafka_package, out=folder.resolve(), seed=seed,
        warm_passes=1 if quick else 4, warmup=1_000 if quick else (records if warmup is None else warmup),
        timeout_s=180.0 if quick else 600.0, trigger_s=0.5 if quick else 1.0, rounds=rounds,
    )  # fmt: skip
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    folder.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)  # stop like Ctrl-C: the report covers the runs so far
    server = None if bootstrap else _start_broker(broker, folder / "broker")
    try:
        doc = run_e2e(opts, bootstrap or server.bootstrap,  # type: ignore[union-attr]
                      on_run=lambda r: console.print(_line(r)))  # fmt: skip
    finally:
        if server is not None:
            server.stop()
    doc["command"] = "skewroute " + " ".join(sys.argv[1:])
    paths = write_report(doc, folder)
    console.print(paths["markdown"].read_text(encoding="utf-8"))
    console.print(f"report: {paths['markdown']}")
    if doc["interrupted"] or not all("error" not in r and r["exactness"]["exact"] for r in doc["runs"]):
        raise typer.Exit(1)


def _start_broker(kind: str, state_dir: Path) -> Any:
    """The embedded Tansu or a one-node Apache Kafka on a free port (stopped by the caller)."""
    from connectors.broker import EmbeddedBroker, free_port

    if kind == "kafka":
        from connectors.apache_kafka import ApacheKafkaCluster

        return ApacheKafkaCluster(port=free_port(), state_dir=state_dir, heap="1g").start()
    return EmbeddedBroker(free_port(), state_dir=state_dir).start()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _line(r: dict[str, object]) -> str:
    if "error" in r:
        return f"n={r['n']} {r['phase']:7s} {r['config']:18s} FAILED: {str(r['error'])[:200]}"
    spark = r["spark"]
    assert isinstance(spark, dict)
    lat = r.get("latency")
    rate = spark.get("steady_rate")
    tail = f", p99 {lat['p99']:.2f} s" if isinstance(lat, dict) and lat.get("p99") is not None else ""
    return (f"n={r['n']} {r['phase']:7s} {r['config']:18s} drain "
            f"{'n/a' if rate is None else f'{rate:,.0f}'} rec/s{tail}")  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add ``e2e-bench`` to the CLI."""
    app.command("e2e-bench", rich_help_panel=LAB)(e2e_bench)
