"""CLI: ``skewroute advise`` -- recommend a partitioner for a route's live topic or for an offline sample.

Examples::

    skewroute advise --config skewroute.yaml --route clicks            # samples the route's raw topic
    skewroute advise --config skewroute.yaml --route clicks --records 20000 --seconds 5
    skewroute advise -w file:path=sample.jsonl,key=user.id,time=ts,unit=s
    skewroute advise -w words:lang=en --records 50000

A ``file:`` sample names its fields as a route does: ``key=PATH`` is ``key: {source: field, field: PATH}``,
``time=PATH`` and ``unit=ms|s|iso`` are ``time: {source: field, field: PATH, unit: ...}`` (no ``time``: the
record's position), and the same extraction code reads both.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from router.commands import CHOOSE
from router.commands.options import (
    CostOpt,
    MetricOpt,
    PartsOpt,
    RoutersOpt,
    SeedOpt,
    bench_spec,
    load_workload,
    progress,
    split_partitioners,
)
from schemas.exceptions import SkewrouteError, exit_code

if TYPE_CHECKING:
    from connectors.workload_types import Workload
    from router.choose.advisor import Advice
    from router.choose.runner import BenchSpec
    from schemas.settings import RouteSettings, SkewrouteSettings

__all__ = ["advise", "print_advice", "register"]

console = Console(width=200)
err = Console(stderr=True)

ConfigOpt = typer.Option(
    None, "--config", "-c", help="settings file: sample the live raw topic of `--route` (its extraction, window, n)"
)
RouteOpt = typer.Option(None, "--route", help="route name or raw topic (default: the first route)")
WorkloadOpt = typer.Option(
    None, "--workload", "-w", help="an offline sample instead of a live topic, e.g. `file:path=x.jsonl,key=user`"
)
RecordsOpt = typer.Option(50_000, "--records", min=1, help="sample size in records")
SecondsOpt = typer.Option(10.0, "--seconds", min=0.1, help="longest time to read the live topic")
NOpt = typer.Option(None, "--combiners", "-n", min=1, help="number of combiners n (default: the route's, or 8)")
MOpt = typer.Option(None, "--reducers", "-m", min=1, help="reducers m (default: spark.shuffle_partitions, or 4)")
WindowOpt = typer.Option(None, "--window", help="router window (default: the route's, the workload's, or 60000)")
SlideOpt = typer.Option(None, "--slide", help="router slide (default: the route's, the workload's, or 1000)")


def advise(
    config: Path | None = ConfigOpt,
    route: str | None = RouteOpt,
    workload: str | None = WorkloadOpt,
    records: int = RecordsOpt,
    seconds: float = SecondsOpt,
    partitioners: str | None = PartsOpt,
    combiners: int | None = NOpt,
    reducers: int | None = MOpt,
    window: float | None = WindowOpt,
    slide: float | None = SlideOpt,
    routers: int = RoutersOpt,
    cost_factor: float = CostOpt,
    metric_window: float | None = MetricOpt,
    seed: int = SeedOpt,
) -> None:
    """Recommend a partitioner by measured window time T (mean, p95): for a route's live topic, or a sample."""
    kw = {
        "partitioners": split_partitioners(partitioners),
        "routers": routers,
        "c": cost_factor,
        "metric_window": metric_window,
        "seed": seed,
    }
    if route is not None and config is None:
        err.print("--route needs --config", style="red", markup=False)
        raise typer.Exit(2)
    if config is not None and workload is None:
        wl, spec = _live(config, route, records, seconds, combiners, reducers, window, slide, **kw)
    elif config is not None:  # an offline sample measured with the route's combiners, reducers and window
        from router.choose.sample import route_spec

        settings, r = _route(config, route)
        wl = load_workload(str(workload), records)
        spec = route_spec(settings, r, n=combiners, m=reducers, window=window, slide=slide, tuples=records, **kw)
    else:
        wl = load_workload(workload or "zipf:s=1.5,keys=10000", records)
        spec = bench_spec(wl, window, slide, n=combiners or 8, m=reducers or 4, tuples=records, **kw)
    adv = _run(wl, spec)
    print_advice(wl, adv)


def _live(
    config: Path,
    route_name: str | None,
    records: int,
    seconds: float,
    combiners: int | None,
    reducers: int | None,
    window: float | None,
    slide: float | None,
    **kw: object,
) -> tuple[Workload, BenchSpec]:
    """Sample the route's raw topic and extract it with the route's settings."""
    from connectors.topic_sample import sample_topic
    from router.choose.sample import route_sample, route_spec

    settings, route = _route(config, route_name)
    try:
        err.print(f"sampling {route.raw_topic!r} (at most {records:,} records or {seconds:g} s) ...")
        messages = sample_topic(settings.kafka, route.raw_topic, records=records, seconds=seconds)
    except SkewrouteError as exc:
        err.print(f"error: {exc}", soft_wrap=True, markup=False, style="red")
        raise typer.Exit(exit_code(exc)) from None  # 3: Kafka unreachable, 4: no such topic (README)
    sample = route_sample(route, messages, routed_format=settings.router.routed_format)
    err.print(f"read {sample.records:,} records; {sample.bad:,} would be dead-lettered", markup=False)
    if sample.first_error:
        err.print(f"  first bad record: {sample.first_error}", markup=False)
    if not sample.workload.tuples:
        err.print(f"no routable record in {route.raw_topic!r}: nothing to measure", style="red", markup=False)
        raise typer.Exit(1)
    spec = route_spec(
        settings, route, n=combiners, m=reducers, window=window, slide=slide, tuples=sample.workload.tuples, **kw
    )
    return sample.workload, spec


def _route(config: Path, route_name: str | None) -> tuple[SkewrouteSettings, RouteSettings]:
    """The settings and the route called ``route_name`` (default: the first); exit 2 naming the problem."""
    from schemas.settings import SkewrouteSettings

    try:
        settings = SkewrouteSettings.load(config)
        if not settings.routes:
            raise SkewrouteError("routes: no routes configured (settings: routes: [{raw_topic: ...}])")
        return settings, (settings.route(route_name) if route_name else settings.routes[0])
    except SkewrouteError as exc:
        err.print(f"error: {exc}", soft_wrap=True, markup=False, style="red")
        raise typer.Exit(2) from None


def _run(wl: Workload, spec: BenchSpec) -> Advice:
    from router.choose.advisor import advise as run_advice

    with progress(spec.tuples or wl.tuples, "advise") as tick:
        return run_advice(wl, spec, tick)


def print_advice(wl: Workload, adv: Advice) -> None:
    """The ranking table, the recommendation and the Holistic rule's choice."""
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
        f"[bold]Holistic rule:[/bold] {adv.rule.text}; its best choice: "
        f"{adv.rule_run.label if adv.rule_run else 'n/a'} ({rule_t})"
    )


def register(app: typer.Typer) -> None:
    """Add ``advise`` to the CLI."""
    app.command("advise", rich_help_panel=CHOOSE)(advise)
