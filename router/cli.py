"""The ``skewroute`` command line.

Product commands live in ``router.commands``; lab commands (benchmarks, demo, soak) in ``router.lab.commands``.
Each module defines ``register(app)``; ``skewroute --help`` groups them in panels (run / choose / lab).
"""

from __future__ import annotations

import importlib

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="skewroute",
    help="Skew-aware routing between Kafka and Spark Structured Streaming.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    pretty_exceptions_show_locals=False,  # settings may hold secrets
)

#: Modules defining ``register(app)``, in the order of ``skewroute --help``.
COMMAND_MODULES = (
    "router.commands.worker",
    "router.commands.spark",
    "router.commands.spark_cluster",
    "router.commands.broker",
    "router.lab.commands.advise",
    "router.lab.commands.init",
    "router.lab.commands.bench",
    "router.lab.commands.demo",
    "router.lab.commands.router_bench",
    "router.lab.commands.spark_bench",
    "router.lab.commands.bench_sync",
    "router.lab.commands.soak",
    "router.lab.commands.e2e",
)

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Console-script entry point."""
    app()
