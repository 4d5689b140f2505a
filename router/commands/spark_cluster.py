"""CLI: ``skewroute spark-cluster start|stop|status|pack`` -- a Spark standalone cluster on this machine.

Examples::

    skewroute spark-cluster start --workers 2 --cores 1 --memory 2g   # prints spark.master
    SKEWROUTE_SPARK__MASTER=spark://127.0.0.1:PORT skewroute spark-job --config skewroute.yaml --once
    skewroute spark-cluster status
    skewroute spark-cluster stop
    skewroute spark-cluster pack       # build (or reuse) the Python environment archive shipped to executors
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from router.commands import RUN
from schemas.exceptions import SkewrouteError

__all__ = ["register"]

console = Console(width=160)
app = typer.Typer(help="A Spark standalone cluster (master + workers, separate JVMs) from the installed PySpark.")

StateOpt = typer.Option(Path(".skewroute/spark-cluster"), "--state-dir", help="pid file, logs, work folders")


@app.command("start")
def start(
    workers: int = typer.Option(2, "--workers", min=1, help="Spark worker JVMs"),
    cores: int = typer.Option(1, "--cores", min=1, help="cores per worker"),
    memory: str = typer.Option("2g", "--memory", help="memory per worker (executor memory fits inside)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address the daemons bind to"),
    state_dir: Path = StateOpt,
    timeout: float = typer.Option(180.0, "--timeout", help="seconds to wait for every worker to register"),
) -> None:
    """Start a master and W workers; return when every worker is ALIVE (free ports, REST server off)."""
    from spark_consumers.cluster import StandaloneCluster

    try:
        st = StandaloneCluster(state_dir, host).start(workers, cores, memory, timeout)
    except SkewrouteError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    console.print(f"master {st.master_url} (web UI {st.web_url}), {workers} workers x {cores} cores, {memory}")
    console.print(f"use it: SKEWROUTE_SPARK__MASTER={st.master_url}")


@app.command("status")
def status(state_dir: Path = StateOpt) -> None:
    """Master URL, pids, and every worker's state as the master reports it (exit 1 when not all ALIVE)."""
    from spark_consumers.cluster import StandaloneCluster

    try:
        doc = StandaloneCluster(state_dir).status()
    except SkewrouteError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    console.print_json(json.dumps(doc))
    pids_alive = doc["master_alive"] and all(doc["worker_pids"].values())
    if not pids_alive or not doc["workers"] or any(w["state"] != "ALIVE" for w in doc["workers"]):
        raise typer.Exit(1)


@app.command("stop")
def stop(state_dir: Path = StateOpt) -> None:
    """Stop the workers, their executors and the master started from `--state-dir`."""
    from spark_consumers.cluster import StandaloneCluster

    StandaloneCluster(state_dir).stop()
    console.print("stopped")


@app.command("pack")
def pack(
    cache: Path | None = typer.Option(None, "--cache", help="archive folder (default ~/.cache/skewroute/pack)"),
) -> None:
    """Build (or reuse) the packed Python environment that non-local masters ship via spark.archives."""
    from spark_consumers.envpack import packed_env

    try:
        env = packed_env(cache)
    except SkewrouteError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    what = f"built in {env.seconds:.1f} s" if env.built else "up to date"
    console.print(f"{env.archive} ({env.size_bytes / 2**20:.0f} MiB, {what})")


def register(root: typer.Typer) -> None:
    """Add ``spark-cluster`` to the CLI."""
    root.add_typer(app, name="spark-cluster", rich_help_panel=RUN)
