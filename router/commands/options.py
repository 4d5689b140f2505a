"""Options and helpers shared by the commands that measure partitioners (``advise``, ``init``, the lab's ``bench``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, cast

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from schemas.exceptions import SkewrouteError

if TYPE_CHECKING:
    from connectors.workload_types import Workload
    from router.choose.runner import BenchSpec

__all__ = [
    "CostOpt",
    "MetricOpt",
    "PartsOpt",
    "RoutersOpt",
    "SeedOpt",
    "WORKLOAD_GROUP",
    "bench_spec",
    "console",
    "load_workload",
    "progress",
    "split_partitioners",
]

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
def progress(total: int | None, what: str) -> Iterator[Callable[[int], None]]:
    """A transient progress bar; the yielded callable advances it by ``k`` records."""
    cols = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=console, transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda k: bar.advance(task, k)


#: Entry-point group of workload makers: ``make(spec, tuples=...) -> Workload`` with an ``available()`` attribute
#: listing their names. The lab package provides the generators and file samples.
WORKLOAD_GROUP = "skewroute.workloads"


def load_workload(spec: str, tuples: int | None) -> Workload:
    """The workload named by ``spec``, made by an installed workload provider; exit 2 naming the problem."""
    makers = [ep.load() for ep in entry_points(group=WORKLOAD_GROUP)]
    if not makers:
        console.print(
            f"[red]--workload {spec!r}: no workload generator is installed (they come with the lab: "
            "pip install ./benchmarks); sample a live topic with --config instead[/red]"
        )
        raise typer.Exit(2)
    try:
        return cast("Workload", makers[0](spec, tuples=tuples))
    except SkewrouteError as exc:
        console.print(f"[red]{exc}[/red]\nworkloads: {', '.join(makers[0].available())}")
        raise typer.Exit(2) from None


def bench_spec(wl: Workload, window: float | None, slide: float | None, **kw: Any) -> BenchSpec:
    """A measurement spec with the workload's window and slide unless given."""
    from router.choose.runner import BenchSpec

    base = BenchSpec()
    return BenchSpec(
        window=float(window or wl.window or base.window), slide=float(slide or wl.slide or base.slide), **kw
    )


PartsOpt = typer.Option(None, "--partitioners", "-p", help="comma-separated partitioners (default: all)")
RoutersOpt = typer.Option(1, "--routers", "-P", min=1, help="router instances, each with its own sub-stream")
CostOpt = typer.Option(1.0, "--cost-factor", help="cost factor c: merging one partial aggregate relative to one record")
MetricOpt = typer.Option(None, "--metric-window", help="metric window (default: one slide, tumbling)")
SeedOpt = typer.Option(1, "--seed", help="partitioner seed (router r uses seed + r)")
