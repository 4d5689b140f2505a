"""CLI: ``skewroute broker start|stop|status``: the embedded Tansu broker, or Apache Kafka (``--kind kafka``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer
from rich.console import Console

from connectors.apache_kafka import ApacheKafkaCluster
from connectors.broker import DEFAULT_STATE_DIR, BrokerStatus, EmbeddedBroker
from connectors.kafka_jars import KAFKA_VERSION
from router.commands import RUN
from schemas.exceptions import BrokerError

console = Console()
broker_app = typer.Typer(
    help="Run a local broker: the embedded Tansu (memory storage, the default) or Apache Kafka (--kind kafka).",
    no_args_is_help=True,
)

PortOpt = typer.Option(9092, "--port", help="loopback port to listen on (Apache Kafka: node 1's client port)")
HostOpt = typer.Option("127.0.0.1", "--host", help="address to listen on")
DirOpt = typer.Option(DEFAULT_STATE_DIR, "--state-dir", help="where the pid file, logs (and Kafka's data) live")
KindOpt = typer.Option(
    "tansu", "--kind", help=f"tansu (embedded, no dependencies) or kafka (Apache Kafka {KAFKA_VERSION}, KRaft, JVM)"
)
NodesOpt = typer.Option(1, "--nodes", min=1, help="Apache Kafka: number of combined controller/broker nodes")

Kind = Literal["tansu", "kafka"]


def _check_kind(kind: str) -> Kind:
    if kind not in ("tansu", "kafka"):
        console.print(f"[red]error:[/] --kind must be tansu or kafka, got {kind!r}")
        raise typer.Exit(2)
    return "tansu" if kind == "tansu" else "kafka"


@broker_app.command()
def start(port: int = PortOpt, host: str = HostOpt, state_dir: Path = DirOpt, kind: str = KindOpt,
          nodes: int = NodesOpt) -> None:  # fmt: skip
    """Start the broker in the background and wait until it answers metadata requests."""
    if _check_kind(kind) == "kafka":
        cluster = ApacheKafkaCluster(port=port, nodes=nodes, host=host, state_dir=state_dir)
        try:
            cluster.start()
        except BrokerError as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(1) from None
        for m in cluster.members:  # keep running after this command exits
            m.proc = None
        took = ", ".join(f"{k} {v:.1f} s" for k, v in cluster.timings.items())
        console.print(f"Apache Kafka {cluster.version} ready on [bold]{cluster.bootstrap}[/] ({nodes} node(s); {took}; "
                      f"pid file {cluster.pid_file}, data and logs in {cluster.directory})")  # fmt: skip
        return
    if nodes != 1:
        console.print("[red]error:[/] --nodes needs --kind kafka (Tansu runs one node)")
        raise typer.Exit(2)
    b = EmbeddedBroker(port, host, state_dir)
    try:
        b.start()
    except BrokerError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    if b.proc is not None:  # keep running after this command exits
        b.proc = None
    console.print(f"broker ready on [bold]{b.bootstrap}[/] (pid file {b.pid_file}, log {b.log_file})")


def _broker(kind: str, port: int, host: str, state_dir: Path) -> EmbeddedBroker | ApacheKafkaCluster:
    if _check_kind(kind) == "kafka":
        return ApacheKafkaCluster(port=port, host=host, state_dir=state_dir)
    return EmbeddedBroker(port, host, state_dir)


@broker_app.command()
def stop(port: int = PortOpt, host: str = HostOpt, state_dir: Path = DirOpt, kind: str = KindOpt) -> None:
    """Stop the broker that `skewroute broker start` started on this port (and only that one)."""
    if _broker(kind, port, host, state_dir).stop():
        console.print(f"stopped the {kind} broker on {host}:{port}")
    else:
        console.print(f"no {kind} broker started by skewroute runs on {host}:{port}")


@broker_app.command()
def status(port: int = PortOpt, host: str = HostOpt, state_dir: Path = DirOpt, kind: str = KindOpt) -> None:
    """Say whether the broker started on this port runs (exit code 1 if not)."""
    st: BrokerStatus = _broker(kind, port, host, state_dir).status()
    if st.running:
        console.print(f"running: pid {st.pid} on {st.bootstrap}")
    else:
        console.print(f"not running on {st.bootstrap}")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``broker`` to the CLI."""
    app.add_typer(broker_app, name="broker", rich_help_panel=RUN)
