"""CLI: ``skewroute bench-sync`` — convergence, sync overhead and adaptive DSYNC of cooperative Dalton.

Examples::

    skewroute bench-sync                              # 1, 2, 4, 8 routers, in process; reports/sync/
    skewroute bench-sync --records 400000 --routers 1,2,4,8,16
    skewroute bench-sync --kafka                      # also measure the control traffic on a real broker
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from router.commands import LAB

__all__ = ["bench_sync", "register"]

console = Console(width=160)


def bench_sync(
    records: int = typer.Option(200_000, "--records", min=1, help="records per convergence run"),
    routers: str = typer.Option("1,2,4,8", "--routers", help="router counts P to compare (comma-separated)"),
    combiners: int = typer.Option(8, "--combiners", "-n", min=1, help="number of combiners n"),
    dsync: int = typer.Option(1_000, "--dsync", help="sync interval in records (in-process runs)"),
    delay: float = typer.Option(600.0, "--delay", help="base reducer delay (records) of the DSYNC experiment"),
    kafka: bool = typer.Option(False, "--kafka", help="also measure the control traffic over an embedded broker"),
    bootstrap: str | None = typer.Option(None, "--bootstrap", help="use this broker instead of starting one"),
    kafka_seconds: float = typer.Option(10.0, "--kafka-seconds", help="duration of the Kafka measurement"),
    kafka_dsync_ms: int = typer.Option(100, "--kafka-dsync-ms", help="DSYNC (ms) of the Kafka measurement"),
    out: Path = typer.Option(Path("reports/sync"), "--out", "-o", help="report folder"),
) -> None:
    """Cooperative Dalton vs never syncing vs PKG for P routers; DSYNC with a slowed reducer; overhead."""
    from benchmarks.sync_bench.experiments import convergence, dsync_trace
    from benchmarks.sync_bench.report import write_sync_report

    ps = tuple(int(x) for x in routers.split(",") if x.strip())
    runs = convergence(
        records, ps, n=combiners, dsync=dsync, progress=lambda what: console.print(f"convergence {what}")
    )
    console.print("dsync trace")
    trace = dsync_trace(
        2 * records, base_delay=delay, initial=4 * dsync, minimum=dsync, maximum=64 * dsync, n=combiners
    )
    measured = None
    if kafka:
        measured = _kafka(bootstrap, kafka_seconds, kafka_dsync_ms, combiners)
    config = {"tuples": records, "n": combiners, "dsync": dsync, "dsync_initial": 4 * dsync, "dsync_min": dsync,
              "dsync_max": 64 * dsync, "base_delay": delay}  # fmt: skip
    paths = write_sync_report(runs, trace, out, config, measured)
    for r in sorted(runs, key=lambda r: (r.routers, r.mode)):
        s = r.summary
        console.print(
            f"P={r.routers:2d} {r.mode:6s} max/mean {s['ratio_mean']:.3f} replication {s['replication_mean']:.4f} "
            f"converged after {r.converged_at} records; sync {r.sync.get('bytes_per_1k', 0):,.0f} B / 1k records"
        )
    console.print(
        "DSYNC per phase: " + ", ".join(f"delay {p['delay']:g}: {p['dsync_median']:g}" for p in trace.per_phase)
    )
    if measured:
        console.print(f"kafka: {measured}")
    console.print(f"report: {paths['markdown']}  plots: {paths['convergence']}, {paths['dsync']}")


def _kafka(bootstrap: str | None, seconds: float, dsync_ms: int, n: int) -> dict[str, object]:
    from benchmarks.sync_bench.overhead import kafka_overhead
    from connectors.broker import EmbeddedBroker, free_port
    from schemas.settings import KafkaSettings

    if bootstrap:
        return kafka_overhead(KafkaSettings(bootstrap_servers=bootstrap), seconds=seconds, dsync_ms=dsync_ms, n=n)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(free_port(), state_dir=Path(tmp)) as broker:
        console.print(f"embedded broker on {broker.bootstrap}")
        return kafka_overhead(
            KafkaSettings(bootstrap_servers=broker.bootstrap), seconds=seconds, dsync_ms=dsync_ms, n=n
        )


def register(app: typer.Typer) -> None:
    """Add ``bench-sync`` to ``app``."""
    app.command("bench-sync", rich_help_panel=LAB)(bench_sync)
