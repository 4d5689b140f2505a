"""CLI: ``skewroute spark-job`` (run a route's Spark consumer).

Examples::

    skewroute spark-job --config skewroute.yaml --route clicks            # until Ctrl-C
    skewroute spark-job --config skewroute.yaml --available-now           # what is there, then stop
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from router.commands import RUN
from schemas.exceptions import SkewrouteError

__all__ = ["register"]

console = Console(width=160)


def spark_job(
    config: Path | None = typer.Option(
        None, "--config", "-c", help="YAML/TOML settings file (default: $SKEWROUTE_CONFIG)"
    ),
    route: str | None = typer.Option(None, "--route", help="route name or raw topic (default: the first route)"),
    once: bool = typer.Option(False, "--once", "--available-now", help="process what is available, then stop"),
    timeout: float | None = typer.Option(None, "--timeout", help="stop after this many seconds"),
) -> None:
    """Run the Spark consumer job of a route (master from spark.master, local[2] by default)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from schemas.settings import SkewrouteSettings
    from spark_consumers.job import run_job

    try:
        settings = SkewrouteSettings.load(config)
        stats = run_job(settings, route, available_now=once, timeout=timeout)
    except SkewrouteError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    table = Table("batch", "records", "ms", "straggler", "partials", "dropped late")
    for s in stats:
        ratio = "-" if s.straggler_ratio is None else f"{s.straggler_ratio:.2f}"
        table.add_row(
            str(s.batch_id), str(s.input_rows), str(s.batch_ms), ratio, str(s.shuffled_partials),
            str(s.rows_dropped_by_watermark),
        )  # fmt: skip
    console.print(table)
    console.print(f"{sum(s.input_rows for s in stats)} records in {len(stats)} micro-batches")


def register(app: typer.Typer) -> None:
    """Add ``spark-job`` to the CLI."""
    app.command("spark-job", rich_help_panel=RUN)(spark_job)
