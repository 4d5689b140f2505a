"""CLI: ``skewroute bench`` (compare partitioners on a workload, or run the papers' reproduction suite).

Examples::

    skewroute bench -w zipf:s=1.5,keys=10000 -p hash,pkg,cam,dalton -n 8 -m 4 --routers 2 --records 200000
    skewroute bench -w flights:key=tailnum          # event time; window 7 days / slide 1 day by default
    skewroute bench -w file:path=sample.jsonl,key=user,time=ts
    skewroute bench --suite papers --only holistic  # the reproduction table (reports/papers/)
    skewroute bench --suite sweep                   # quality sweep: skew x n x keys, Pareto front per cell
    skewroute bench -w zipf:s=0.6,keys=1000,perm=1 -p dalton --routers 2 --slide 20000 --window 240000 \
        --dsync 10000 --batches 20,1000            # two cooperating routers polling a live stream

Workload specs: ``uniform``, ``zipf``, ``alternating``, ``zipf-drift``, ``evolving``, ``multi``,
``flights``, ``words``, ``file`` (see :mod:`benchmarks.workloads` and :mod:`benchmarks.datasets`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from router.commands import LAB
from router.commands.options import (
    CostOpt,
    MetricOpt,
    PartsOpt,
    RoutersOpt,
    SeedOpt,
    bench_spec,
    console,
    load_workload,
    progress,
    split_partitioners,
)

if TYPE_CHECKING:
    pass

__all__ = ["BatchesOpt", "parse_batches", "register", "split_partitioners"]

DEFAULT_WORKLOAD = "zipf:s=1.5,keys=10000"
WorkloadOpt = typer.Option(
    DEFAULT_WORKLOAD,
    "--workload",
    "-w",
    help="workload spec, e.g. `zipf:s=1.5,keys=10000` or `file:path=x.jsonl,key=user`",
)
NOpt = typer.Option(8, "--combiners", "-n", min=1, help="number of combiners n")
MOpt = typer.Option(4, "--reducers", "-m", min=1, help="number of reducers m")
WindowOpt = typer.Option(
    None, "--window", help="router window, in the stream's time unit (default 60000 or the workload's)"
)
SlideOpt = typer.Option(None, "--slide", help="router slide (default 1000 or the workload's)")
RecordsOpt = typer.Option(None, "--records", min=1, help="stream length: stop after this many records")
DsyncOpt = typer.Option(10_000, "--dsync", help="records between in-process syncs of partitioners with merge()")
OutOpt = typer.Option(
    None, "--out", "-o", help="report folder (default `reports/bench-<workload>/`, `reports/papers/`)"
)
BatchesOpt = typer.Option(
    "100,5000",
    "--batches",
    help="router batch sizes LO,HI: random in [LO, HI) tuples per source, dealt over its routers "
    "(10,500 is a live router's polls); `workload`: the workload's own batches",
)
SYNC_MODES = ("merge", "protocol", "never")


def parse_batches(text: str) -> tuple[int, int] | None:
    """``--batches``: ``LO,HI`` (1 <= LO < HI) or ``workload`` (None: the workload's own batches)."""
    if text.strip() == "workload":
        return None
    try:
        lo, hi = (int(x) for x in text.split(","))
    except ValueError:
        raise typer.BadParameter(f"--batches must be LO,HI (two integers) or workload, got {text!r}") from None
    if not 1 <= lo < hi:
        raise typer.BadParameter(f"--batches needs 1 <= LO < HI, got {text!r}")
    return lo, hi


SyncOpt = typer.Option("merge", "--sync", help="multi-router sync: merge (snapshot/merge every DSYNC), protocol, never")


def bench(
    workload: str = WorkloadOpt,
    partitioners: str | None = PartsOpt,
    combiners: int = NOpt,
    reducers: int = MOpt,
    window: float | None = WindowOpt,
    slide: float | None = SlideOpt,
    routers: int = RoutersOpt,
    records: int | None = RecordsOpt,
    dsync: int = DsyncOpt,
    cost_factor: float = CostOpt,
    metric_window: float | None = MetricOpt,
    seed: int = SeedOpt,
    sync: str = SyncOpt,
    batches: str = BatchesOpt,
    out: Path | None = OutOpt,
    suite: str | None = typer.Option(
        None,
        "--suite",
        help="run a suite instead: `papers` (the reproduction table) or `sweep` (quality sweep, Pareto front)",
    ),
    only: str | None = typer.Option(None, "--only", help="with `--suite papers`: comma-separated experiment ids"),
) -> None:
    """Compare partitioners on a workload: per-window load, replication, reducer cost, T, tuples/s."""
    if suite is not None:
        if suite not in ("papers", "sweep"):
            console.print(f"[red]unknown suite {suite!r}; available: papers, sweep[/red]")
            raise typer.Exit(2)
        if suite == "sweep":
            _sweep(records or 100_000, out or Path("reports/sweep"), split_partitioners(partitioners))
            return
        _papers(records or 100_000, out or Path("reports/papers"), only)
        return
    from benchmarks.bench import run_bench
    from benchmarks.bench.report import default_report_dir, rich_table, write_report

    if sync not in SYNC_MODES:
        console.print(f"[red]--sync must be one of {', '.join(SYNC_MODES)}, got {sync!r}[/red]")
        raise typer.Exit(2)

    wl = load_workload(workload, records)
    spec = bench_spec(
        wl,
        window=window,
        slide=slide,
        partitioners=split_partitioners(partitioners),
        n=combiners,
        m=reducers,
        routers=routers,
        tuples=records,
        dsync=dsync,
        c=cost_factor,
        metric_window=metric_window,
        seed=seed,
        sync=sync,
        batches=parse_batches(batches),
    )
    with progress(records or wl.tuples, "bench") as tick:
        result = run_bench(wl, spec, tick)
    console.print(rich_table(result))
    paths = write_report(result, out or default_report_dir(wl.name))
    console.print(f"report: {paths['markdown']}  json: {paths['json']}  plots: {paths['load']}, {paths['replication']}")


def _sweep(tuples: int, out: Path, names: tuple[str, ...]) -> None:
    """``--suite sweep``: every partitioner on Zipf skew x n x key counts plus flights and words."""
    from benchmarks.sweep import DEFAULT_PARTITIONERS, grid, run_sweep, summary, write_sweep

    cells = grid(tuples=tuples)
    with progress(len(cells), "sweep") as tick:
        results = run_sweep(cells, names or DEFAULT_PARTITIONERS, progress=lambda _r: tick(1))
    path = write_sweep(results, out)
    if "dalton" in results[0].balance:
        s = summary(results)
        console.print(f"dalton: dominated on {len(s['dominated'])} of {s['cells']} cells")  # type: ignore[arg-type]
    console.print(f"sweep table: {path}")


def _papers(records: int, out: Path, only: str | None) -> None:
    """The papers' main claims measured with our code, the paper's figure next to ours."""
    from benchmarks.bench.suite import run_suite, suite_table, write_suite

    rows = run_suite(records, only=split_partitioners(only) or None, console=console)
    console.print(suite_table(rows))
    path = write_suite(rows, out, records)
    console.print(f"reproduction table: {path}")


def register(app: typer.Typer) -> None:
    """Add ``bench`` to app."""
    app.command("bench", rich_help_panel=LAB)(bench)
