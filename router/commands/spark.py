"""CLI: ``skewroute spark-job`` (run a route's Spark consumer).

Examples::

    skewroute spark-job --config skewroute.yaml --route clicks            # until Ctrl-C
    skewroute spark-job --config skewroute.yaml --available-now           # what is there, then stop

Before a JVM starts, the settings are checked (exit 2), Kafka must answer (exit 3) and the route's combiner
topic must exist (exit 4); each failure is one line naming the thing and the fix.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from router.commands import RUN
from schemas.exceptions import (
    EXIT_BROKER,
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_MISSING_TOPIC,
    BrokerError,
    ConfigError,
    MissingTopicError,
    SkewrouteError,
)

__all__ = ["register"]

console = Console(width=160)
err = Console(stderr=True)


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def spark_job(
    config: Path | None = typer.Option(
        None, "--config", "-c", help="YAML/TOML settings file (default: $SKEWROUTE_CONFIG)"
    ),
    route: str | None = typer.Option(None, "--route", help="route name or raw topic (default: the first route)"),
    once: bool = typer.Option(False, "--once", "--available-now", help="process what is available, then stop"),
    timeout: float | None = typer.Option(None, "--timeout", help="stop after this many seconds"),
    broker_wait: float = typer.Option(
        30.0, "--broker-wait", min=0.0, help="seconds to wait for Kafka at start (retries with backoff), then exit 3"
    ),
) -> None:
    """Run the Spark consumer job of a route (master from spark.master, local[2] by default)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from router.preflight import spark_job_preflight
    from schemas.settings import SkewrouteSettings
    from spark_consumers.job import check_bounded_run, run_job

    try:
        settings = SkewrouteSettings.load(config)
        if not settings.routes:
            raise ConfigError(["routes: no routes configured (settings: routes: [{raw_topic: ...}])"])
        chosen = settings.route(route) if route else settings.routes[0]
        check_bounded_run(settings, once)
    except ConfigError as exc:
        err.print(f"[red]{escape(str(exc))}[/]", soft_wrap=True)
        raise typer.Exit(EXIT_CONFIG) from None
    try:
        spark_job_preflight(settings, chosen, broker_wait)
    except MissingTopicError as exc:
        raise _fail(str(exc), EXIT_MISSING_TOPIC) from None
    except BrokerError as exc:
        raise _fail(str(exc), EXIT_BROKER) from None
    try:
        stats = run_job(settings, chosen.route_name, available_now=once, timeout=timeout)
    except ConfigError as exc:
        err.print(f"[red]{escape(str(exc))}[/]", soft_wrap=True)
        raise typer.Exit(EXIT_CONFIG) from None
    except SkewrouteError as exc:
        raise _fail(str(exc), EXIT_FAILED) from None
    except RuntimeError as exc:  # the streaming query failed: its first line, not the JVM's stack
        raise _fail(str(exc).strip().splitlines()[0], EXIT_FAILED) from None
    table = Table("batch", "records", "ms", "straggler", "partials", "dropped late")
    for s in stats:
        ratio = "-" if s.straggler_ratio is None else f"{s.straggler_ratio:.2f}"
        table.add_row(
            str(s.batch_id), str(s.input_rows), str(s.batch_ms), ratio, str(s.shuffled_partials),
            str(s.rows_dropped_by_watermark),
        )  # fmt: skip
    console.print(table)
    console.print(
        f"{sum(s.input_rows for s in stats)} records in {len(stats)} micro-batches, "
        f"{stats.rows_dropped_by_watermark} dropped as later than the watermark"
    )


def register(app: typer.Typer) -> None:
    """Add ``spark-job`` to the CLI."""
    app.command("spark-job", rich_help_panel=RUN)(spark_job)
