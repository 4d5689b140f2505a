"""CLI: ``skewroute demo`` -- the whole pipeline on embedded defaults, compared against hash, with a report."""

from __future__ import annotations

import shlex
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.console import Console
from rich.markdown import Markdown

from router.commands import LAB
from schemas.exceptions import SkewrouteError

console = Console(stderr=True)

WorkloadOpt = typer.Option(
    None, "--workload", "-w",
    help="workload spec, e.g. 'evolving:s=1.5,keys=10000,at=0.5' (default), 'zipf-drift:keys=10000', "
    "'flights:key=dest', 'words:lang=en,switch=fr'",
)  # fmt: skip
RecordsOpt = typer.Option(None, "--records", min=100, help="records to produce (default 60,000; 12,000 with `--quick`)")
RateOpt = typer.Option(None, "--rate", min=0, help="records per second produced, 0 = full speed (default 2,500)")
PartitionerOpt = typer.Option("dalton", "--partitioner", "-p", help="partitioner compared with hash (name[:k=v,...])")
BaselineOpt = typer.Option("hash", "--baseline", help="the reference partitioner")
RoutersOpt = typer.Option(2, "--routers", min=1, max=4, help="router worker processes per partitioner")
CombinersOpt = typer.Option(
    8, "--combiners", "-n", min=2, max=64, help="combiners n (partitions of the combiner topic)"
)
BootstrapOpt = typer.Option(None, "--bootstrap", help="use this Kafka instead of starting the embedded broker")
OutOpt = typer.Option(None, "--out", "-o", help="report folder (default reports/demo-<timestamp>)")
QuickOpt = typer.Option(False, "--quick", help="a short run for tests (12,000 records at 4,000/s)")
SeedOpt = typer.Option(1, "--seed", help="workload seed")
LiveOpt = typer.Option(True, "--live/--no-live", help="live progress table (on a terminal)")
ClusterOpt = typer.Option(
    False, "--cluster", help="Spark on a local standalone cluster (master + 2 workers x 1 core) instead of local[2]"
)


def demo(
    workload: str | None = WorkloadOpt,
    records: int | None = RecordsOpt,
    rate: float | None = RateOpt,
    partitioner: str = PartitionerOpt,
    baseline: str = BaselineOpt,
    routers: int = RoutersOpt,
    combiners: int = CombinersOpt,
    bootstrap: str | None = BootstrapOpt,
    out: Path | None = OutOpt,
    quick: bool = QuickOpt,
    seed: int = SeedOpt,
    live: bool = LiveOpt,
    cluster: bool = ClusterOpt,
) -> None:
    """Run the whole pipeline (broker, router workers, Spark) for a partitioner and for hash; write a report."""
    from benchmarks.demo import DEFAULT_WORKLOAD, DemoOptions, run_demo

    opts = DemoOptions(
        workload=workload or DEFAULT_WORKLOAD,
        records=records or (12_000 if quick else 60_000),
        rate=rate if rate is not None else (4_000.0 if quick else 2_500.0),
        partitioner=partitioner,
        baseline=baseline,
        routers=routers,
        combiners=combiners,
        bootstrap=bootstrap,
        out=out or Path("reports") / f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S}",
        seed=seed,
        live=live,
        cluster=cluster,
    )
    command = "skewroute demo " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["demo"] else "skewroute demo"
    signal.signal(signal.SIGTERM, _interrupt)  # stop like Ctrl-C: every started process is stopped
    try:
        result = run_demo(opts, command.strip())
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: every process the demo started was stopped[/]")
        raise typer.Exit(130) from None
    except SkewrouteError as exc:
        console.print(f"[red]demo failed:[/] {exc}")
        raise typer.Exit(1) from None
    Console().print(Markdown(result.markdown.read_text(encoding="utf-8")))
    console.print(f"report: {result.markdown} ({result.json.name}, {', '.join(p.name for p in result.plots)})")
    if not result.exact:
        raise typer.Exit(1)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the CLI."""
    app.command("demo", rich_help_panel=LAB)(demo)
