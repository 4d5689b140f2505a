"""Lab commands of the ``skewroute`` CLI (benchmarks, demo, soak), added through the ``skewroute.commands`` entry point.

Each module defines ``register(app)``; :func:`register` adds them all.
"""

from __future__ import annotations

import importlib

import typer

__all__ = ["MODULES", "register"]

#: Lab command modules, in the order of ``skewroute --help``.
MODULES = (
    "benchmarks.commands.bench",
    "benchmarks.commands.demo",
    "benchmarks.commands.router_bench",
    "benchmarks.commands.spark_bench",
    "benchmarks.commands.bench_sync",
    "benchmarks.commands.soak",
    "benchmarks.commands.e2e",
)


def register(app: typer.Typer) -> None:
    """Add every lab command to ``app``."""
    for name in MODULES:
        importlib.import_module(name).register(app)
