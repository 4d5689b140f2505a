"""CLI: ``skewroute spark-bench`` (the Spark job per routing algorithm on pre-routed topics)."""

from __future__ import annotations

from pathlib import Path

import typer

from router.commands import LAB

__all__ = ["register"]


def spark_bench(
    partitioners: str = typer.Option("hash,pkg,cam,dalton", "-p", "--partitioners", help="comma-separated names"),
    tuples: int = typer.Option(1_000_000, "--tuples", help="routed records per algorithm"),
    batch: int = typer.Option(250_000, "--batch", help="records per micro-batch"),
    combiners: int = typer.Option(8, "-n", "--combiners"),
    keys: int = typer.Option(10_000, "--keys"),
    zipf: float = typer.Option(1.5, "-s", "--zipf"),
    sink: str = typer.Option("kafka", "--sink", help="kafka or noop"),
    report: Path = typer.Option(Path("reports/spark-bench.md"), "--report"),
) -> None:
    """Benchmark the Spark job per routing algorithm (records/s, straggler ratio, shuffled partials)."""
    from spark_consumers.lab.bench import main

    main(
        [
            "-p", partitioners, "--tuples", str(tuples), "--batch", str(batch), "-n", str(combiners),
            "--keys", str(keys), "-s", str(zipf), "--sink", sink, "--report", str(report),
        ]
    )  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add ``spark-bench`` to the CLI."""
    app.command("spark-bench", rich_help_panel=LAB)(spark_bench)
