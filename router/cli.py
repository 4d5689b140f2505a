"""The ``skewroute`` command line: each command group lives in its own module under ``router.commands``."""

from __future__ import annotations

import importlib

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="skewroute",
    help="Skew-aware routing between Kafka and Spark Structured Streaming.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # settings may hold secrets
)

#: Modules under router.commands; each defines ``register(app)``.
COMMAND_MODULES = ("broker", "bench", "bench_sync", "worker", "spark", "demo", "soak", "e2e")

for _name in COMMAND_MODULES:
    importlib.import_module(f"router.commands.{_name}").register(app)


def main() -> None:
    """Console-script entry point."""
    app()
