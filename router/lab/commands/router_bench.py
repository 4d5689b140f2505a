"""CLI: ``skewroute router-bench`` (throughput of the router data plane per partitioner)."""

from __future__ import annotations

import typer

from router.commands import LAB

__all__ = ["register"]


def router_bench(ctx: typer.Context) -> None:
    """Router throughput benchmark (options as ``skewroute router-bench --help``)."""
    from router.lab.router_bench import main

    main(list(ctx.args))


def register(app: typer.Typer) -> None:
    """Add ``router-bench`` to the CLI."""
    app.command(
        "router-bench",
        rich_help_panel=LAB,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    )(router_bench)
