"""The ``skewroute`` command line.

Product commands live in ``router.commands``; each module defines ``register(app)``. Other packages add commands
through the ``skewroute.commands`` entry-point group (a callable ``register(app)``): the lab package
(``benchmarks``, installed with ``pip install ./benchmarks``) adds its benchmarks, demo and soak that way, so a core
install lists product commands only. ``skewroute --help`` groups commands in panels (run / choose / lab).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

import typer

__all__ = ["COMMAND_MODULES", "PLUGIN_GROUP", "app", "main"]

app = typer.Typer(
    name="skewroute",
    help="Skew-aware routing between Kafka and Spark Structured Streaming.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    pretty_exceptions_show_locals=False,  # settings may hold secrets
)

#: Product modules defining ``register(app)``, in the order of ``skewroute --help``.
COMMAND_MODULES = (
    "router.commands.worker",
    "router.commands.spark",
    "router.commands.spark_cluster",
    "router.commands.broker",
    "router.commands.advise",
    "router.commands.init",
)

#: Entry-point group of command plugins: each entry is a callable ``register(app)``.
PLUGIN_GROUP = "skewroute.commands"

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)
for _plugin in sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name):
    _plugin.load()(app)


def main() -> None:
    """Console-script entry point."""
    app()
