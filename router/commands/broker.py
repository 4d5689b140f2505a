"""CLI: ``skewroute broker start|stop|status`` for the embedded Tansu broker."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from connectors.broker import DEFAULT_STATE_DIR, EmbeddedBroker
from router.commands import RUN
from schemas.exceptions import BrokerError

console = Console()
broker_app = typer.Typer(help="Run the embedded Kafka-compatible broker (Tansu, memory storage).", no_args_is_help=True)

PortOpt = typer.Option(9092, "--port", help="loopback port to listen on")
HostOpt = typer.Option("127.0.0.1", "--host", help="address to listen on")
DirOpt = typer.Option(DEFAULT_STATE_DIR, "--state-dir", help="where the pid file and log live")


@broker_app.command()
def start(port: int = PortOpt, host: str = HostOpt, state_dir: Path = DirOpt) -> None:
    """Start the broker in the background and wait until it answers metadata requests."""
    b = EmbeddedBroker(port, host, state_dir)
    try:
        b.start()
    except BrokerError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    if b.proc is not None:  # keep running after this command exits
        b.proc = None
    console.print(f"broker ready on [bold]{b.bootstrap}[/] (pid file {b.pid_file}, log {b.log_file})")


@broker_app.command()
def stop(port: int = PortOpt, host: str = HostOpt, state_dir: Path = DirOpt) -> None:
    """Stop the broker that `skewroute broker start` started on this port (and only that one)."""
    if EmbeddedBroker(port, host, state_dir).stop():
        console.print(f"stopped the broker on {host}:{port}")
    else:
        console.print(f"no broker started by skewroute runs on {host}:{port}")


@broker_app.command()
def status(port: int = PortOpt, host: str = HostOpt, state_dir: Path = DirOpt) -> None:
    """Say whether the broker started on this port runs (exit code 1 if not)."""
    st = EmbeddedBroker(port, host, state_dir).status()
    if st.running:
        console.print(f"running: pid {st.pid} on {st.bootstrap}")
    else:
        console.print(f"not running on {st.bootstrap}")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``broker`` to the CLI."""
    app.add_typer(broker_app, name="broker", rich_help_panel=RUN)
