"""CLI: ``skewroute bench`` (compare partitioners), ``skewroute advise``, ``skewroute reproduce``.

Examples::

    skewroute bench -w zipf:s=1.5,keys=10000 -p hash,pkg,cam,dalton -n 8 -m 4 --routers 2 --tuples 200000
    skewroute bench -w flights:key=tailnum          # event time; window 7 days / slide 1 day by default
    skewroute bench -w file:path=sample.jsonl,key=user,time=ts
    skewroute advise -w words:lang=en --tuples 50000
    skewroute bench --suite papers                  # = skewroute reproduce
    skewroute bench --suite sweep                   # quality sweep: skew x n x keys, Pareto front per cell

Workload specs: ``uniform``, ``zipf``, ``alternating``, ``zipf-drift``, ``evolving``, ``multi``,
``flights``, ``words``, ``file`` (see :mod:`connectors.workloads` and :mod:`connectors.datasets`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from connectors.workloads import Workload, available_workloads, make_workload
from router.commands import CHOOSE, LAB
from schemas.exceptions import SkewrouteError

if TYPE_CHECKING:
    from router.lab.bench import BenchSpec

__all__ = ["register", "split_partitioners"]

DEFAULT_WORKLOAD = "zipf:s=1.5,keys=10000"
console = Console(width=200)  # wide tables stay readable when piped to a file


def split_partitioners(text: str | None) -> tuple[str, ...]:
    """Split ``"hash,pkg:d=5,p=1,shuffle"`` into labels; a bare ``k=v`` continues the previous label."""
    labels: list[str] = []
    for token in filter(None, (t.strip() for t in (text or "").split(","))):
        if "=" in token and ":" not in token and labels:
            labels[-1] += "," + token
        else:
            labels.append(token)
    return tuple(labels)


@contextmanager
def _progress(total: int | None, what: str) -> Iterator[Callable[[int], None]]:
    cols = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=console, transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda k: bar.advance(task, k)


def _workload(spec: str, tuples: int | None) -> Workload:
    try:
        return make_workload(spec, tuples=tuples)
    except SkewrouteError as exc:
        console.print(f"[red]{exc}[/red]\nworkloads: {', '.join(available_workloads())}")
        raise typer.Exit(2) from None


def _bench_spec(wl: Workload, window: float | None, slide: float | None, **kw: Any) -> BenchSpec:
    from router.lab.bench import BenchSpec

    return BenchSpec(window=float(window or wl.window or 60_000), slide=float(slide or wl.slide or 1_000), **kw)


WorkloadOpt = typer.Option(DEFAULT_WORKLOAD, "--workload", "-w", help="workload spec, e.g. zipf:s=1.5,keys=10000")
PartsOpt = typer.Option(None, "--partitioners", "-p", help="comma-separated names (default: all)")
NOpt = typer.Option(8, "-n", help="combiners")
MOpt = typer.Option(4, "-m", help="reducers")
WindowOpt = typer.Option(None, help="router window (time units of the stream; default 60000 or the workload's)")
SlideOpt = typer.Option(None, help="router slide (default 1000 or the workload's)")
RoutersOpt = typer.Option(1, "--routers", "-P", help="router instances, each with its own sub-stream")
TuplesOpt = typer.Option(None, help="stop after this many tuples")
DsyncOpt = typer.Option(10_000, help="tuples between in-process syncs of partitioners with merge()")
COpt = typer.Option(1.0, "-c", help="cost of merging one partial aggregate relative to one tuple")
MetricOpt = typer.Option(None, help="metric window (default: one slide, tumbling)")
SeedOpt = typer.Option(1, help="partitioner seed (router r uses seed + r)")
SYNC_MODES = ("merge", "protocol", "never")
SyncOpt = typer.Option("merge", help="multi-router sync: merge (snapshot/merge every DSYNC), protocol, never")


def bench(
    workload: str = WorkloadOpt,
    partitioners: str | None = PartsOpt,
    n: int = NOpt,
    m: int = MOpt,
    window: float | None = WindowOpt,
    slide: float | None = SlideOpt,
    routers: int = RoutersOpt,
    tuples: int | None = TuplesOpt,
    dsync: int = DsyncOpt,
    c: float = COpt,
    metric_window: float | None = MetricOpt,
    seed: int = SeedOpt,
    sync: str = SyncOpt,
    out: Path | None = typer.Option(None, help="report directory (default reports/bench-<workload>/)"),
    suite: str | None = typer.Option(
        None, help="run a suite instead: 'papers' (the reproduction table) or 'sweep' (quality sweep, Pareto front)"
    ),
) -> None:
    """Compare partitioners on a workload: per-window load, replication, reducer cost, T, tuples/s."""
    if suite is not None:
        if suite not in ("papers", "sweep"):
            console.print(f"[red]unknown suite {suite!r}; available: papers, sweep[/red]")
            raise typer.Exit(2)
        if suite == "sweep":
            _sweep(tuples or 100_000, out or Path("reports/sweep"), split_partitioners(partitioners))
            return
        reproduce(tuples=tuples or 100_000, out=out or Path("reports/papers"), only=None)
        return
    from router.lab.bench import run_bench
    from router.lab.bench.report import default_report_dir, rich_table, write_report

    if sync not in SYNC_MODES:
        console.print(f"[red]--sync must be one of {', '.join(SYNC_MODES)}, got {sync!r}[/red]")
        raise typer.Exit(2)

    wl = _workload(workload, tuples)
    spec = _bench_spec(
        wl,
        window=window,
        slide=slide,
        partitioners=split_partitioners(partitioners),
        n=n,
        m=m,
        routers=routers,
        tuples=tuples,
        dsync=dsync,
        c=c,
        metric_window=metric_window,
        seed=seed,
        sync=sync,
    )
    with _progress(tuples or wl.tuples, "bench") as tick:
        result = run_bench(wl, spec, tick)
    console.print(rich_table(result))
    paths = write_report(result, out or default_report_dir(wl.name))
    console.print(f"report: {paths['markdown']}  json: {paths['json']}  plots: {paths['load']}, {paths['replication']}")


def advise(
    workload: str = WorkloadOpt,
    partitioners: str | None = typer.Option(
        None, "--partitioners", "-p", help="candidates (default: all + d variants)"
    ),
    n: int = NOpt,
    m: int = MOpt,
    window: float | None = WindowOpt,
    slide: float | None = SlideOpt,
    routers: int = RoutersOpt,
    tuples: int | None = typer.Option(50_000, help="sample size"),
    c: float = COpt,
    metric_window: float | None = MetricOpt,
    seed: int = SeedOpt,
) -> None:
    """Recommend a partitioner for a workload sample by measured window time T (mean, p95)."""
    from router.lab.bench.advisor import advise as run_advice

    wl = _workload(workload, tuples)
    spec = _bench_spec(
        wl,
        window=window,
        slide=slide,
        partitioners=split_partitioners(partitioners),
        n=n,
        m=m,
        routers=routers,
        tuples=tuples,
        c=c,
        metric_window=metric_window,
        seed=seed,
    )
    with _progress(tuples or wl.tuples, "advise") as tick:
        adv = run_advice(wl, spec, tick)
    table = Table(title=f"{wl.name}: candidates by modelled window time T", title_justify="left")
    for col in ("rank", "partitioner", "T mean", "T p95", "max L", "reducer max A", "replication", "max/mean"):
        table.add_column(col, justify="right" if col != "partitioner" else "left")
    for i, r in enumerate(adv.ranking, 1):
        s = r.summary
        table.add_row(
            str(i),
            r.label,
            f"{s['time_mean']:.1f}",
            f"{s['time_p95']:.1f}",
            f"{s['max_load_mean']:.1f}",
            f"{s['reducer_max_mean']:.1f}",
            f"{s['replication_mean']:.3f}",
            f"{s['ratio_mean']:.3f}",
        )
    for r in adv.result.runs:
        if not r.ok:
            table.add_row("-", r.label, "n/a", "", "", "", "", "", style="dim")
    console.print(table)
    console.print(f"[bold]recommendation:[/bold] {adv.best.label}  ({adv.reason})")
    rule_t = f"T mean {adv.rule_run.summary['time_mean']:.1f}" if adv.rule_run else "not measured (n/a)"
    console.print(
        f"[bold]Holistic rule (paper 004):[/bold] {adv.rule.text}; its best choice: "
        f"{adv.rule_run.label if adv.rule_run else 'n/a'} ({rule_t})"
    )


def _sweep(tuples: int, out: Path, names: tuple[str, ...]) -> None:
    """``--suite sweep``: every partitioner on Zipf skew x n x key counts plus flights and words."""
    from router.lab.sweep import DEFAULT_PARTITIONERS, grid, run_sweep, summary, write_sweep

    cells = grid(tuples=tuples)
    with _progress(len(cells), "sweep") as tick:
        results = run_sweep(cells, names or DEFAULT_PARTITIONERS, progress=lambda _r: tick(1))
    path = write_sweep(results, out)
    if "dalton" in results[0].balance:
        s = summary(results)
        console.print(f"dalton: dominated on {len(s['dominated'])} of {s['cells']} cells")  # type: ignore[arg-type]
    console.print(f"sweep table: {path}")


def reproduce(
    tuples: int = typer.Option(100_000, help="tuples per experiment"),
    out: Path = typer.Option(Path("reports/papers"), help="report directory"),
    only: str | None = typer.Option(None, help="comma-separated experiment ids (default: all)"),
) -> None:
    """Reproduce the papers' main claims with our code; the paper's figure next to ours."""
    from router.lab.bench.suite import run_suite, suite_table, write_suite

    rows = run_suite(tuples, only=split_partitioners(only) or None, console=console)
    console.print(suite_table(rows))
    path = write_suite(rows, out, tuples)
    console.print(f"reproduction table: {path}")


def register(app: typer.Typer) -> None:
    """Add ``bench``, ``advise`` and ``reproduce`` to app."""
    app.command("bench", rich_help_panel=LAB)(bench)
    app.command("advise", rich_help_panel=CHOOSE)(advise)
    app.command("reproduce", rich_help_panel=LAB)(reproduce)
