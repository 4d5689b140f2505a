"""CLI: ``skewroute soak`` -- the pipeline under load with router kills, reducer kills, poison pills and a hot key."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from router.commands import LAB

__all__ = ["register"]

console = Console(width=140)


def soak(
    duration: float = typer.Option(600.0, "--duration", "-d", help="seconds of load"),
    rate: float = typer.Option(500.0, "--rate", help="raw records per second"),
    routers: int = typer.Option(3, "--routers", min=1, help="router worker processes"),
    partitioner: str = typer.Option("dalton", "--partitioner", "-p", help="the partitioner (name[:k=v,...])"),
    combiners: int = typer.Option(4, "--combiners", "-n", min=1, help="number of combiners n"),
    delivery: str = typer.Option("at_least_once", "--delivery", help="at_least_once or exactly_once"),
    kill_every: float = typer.Option(60.0, "--kill-every", help="SIGKILL a random worker every N s (0: never)"),
    restart_after: float = typer.Option(5.0, "--restart-after", help="restart a killed worker after N s"),
    kill_reducer_every: float = typer.Option(150.0, "--kill-reducer-every", help="SIGKILL the reducer every N s"),
    drain: float = typer.Option(120.0, "--drain", help="longest wait for the combiner topic at the end"),
    spark: bool = typer.Option(False, "--spark", help="also run the Spark job (dedupe on) and check its counts"),
    bootstrap: str | None = typer.Option(None, "--bootstrap", help="an existing broker (default: start one)"),
    out: Path = typer.Option(
        Path(".skewroute/soak"), "--out", "-o", help="folder for configs, logs, checkpoints and soak.json (the figures)"
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the fault schedule and the produced keys"),
    poison_every: int = typer.Option(0, "--poison-every", min=0, help="every N-th raw record is a poison pill"),
    skew_at: float = typer.Option(0.0, "--skew-at", help="from N s on, --skew of the records carry one hot key"),
    skew: float = typer.Option(0.5, "--skew", min=0.0, max=1.0, help="share of the records on the hot key"),
) -> None:
    """Soak the pipeline with faults on a schedule; print records in / out / lost / duplicated (exit 1 if lost)."""
    from benchmarks.soak import SoakOptions, run_soak

    if delivery not in ("at_least_once", "exactly_once"):
        raise typer.BadParameter("at_least_once or exactly_once", param_hint="--delivery")
    opts = SoakOptions(
        duration_s=duration, rate=rate, workers=routers, partitioner=partitioner, combiners=combiners,
        delivery=delivery, kill_every_s=kill_every, restart_after_s=restart_after,
        kill_reducer_every_s=kill_reducer_every, drain_s=drain, spark=spark, bootstrap=bootstrap, workdir=out,
        seed=seed, poison_every=poison_every, skew=skew, skew_at_s=skew_at,
    )  # fmt: skip
    res = run_soak(opts, say=lambda line: console.print(line, markup=False, highlight=False))
    cols = ("records in", "out", "unique out", "lost", "duplicated", "poison in/DLQ/unaccounted", "kills",
            "reducer kills", "rounds resumed after s", "GLOBAL rounds", "spark exact")  # fmt: skip
    table = Table(*cols, title=f"soak: {res.seconds:.0f} s")
    table.add_row(
        f"{res.records_in:,}", f"{res.records_out:,}", f"{res.unique_out:,}", str(res.lost), f"{res.duplicated:,}",
        f"{res.poison_in}/{res.poison_dead_lettered}/{res.poison_unaccounted}", str(res.kills), str(res.reducer_kills),
        ", ".join(f"{t:.1f} ({b})" for t, b in zip(res.takeovers_s, res.takeover_by, strict=True)) or "-",
        str(res.rounds),
        "-" if res.spark_exact is None else str(res.spark_exact),
    )  # fmt: skip
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(res.as_dict(), indent=2))
    console.print(f"figures: {out / 'soak.json'}")
    if res.lost or res.spark_exact is False or res.producer_failures or res.poison_unaccounted or res.poison_routed:
        raise typer.Exit(1)


def memory_soak(
    records: int = typer.Option(50_000_000, "--records", min=1, help="raw records per partitioner"),
    keys: int = typer.Option(10_000_000, "--keys", min=1, help="distinct keys (half uniform, half Zipf-hot)"),
    partitioners: str = typer.Option("all", "--partitioners", "-p", help="comma-separated names, or all"),
    combiners: int = typer.Option(8, "--combiners", "-n", min=1, help="number of combiners n"),
    batch: int = typer.Option(20_000, "--batch", min=1, help="records per data-plane batch"),
    rate: float = typer.Option(10.0, "--rate", min=0.001, help="records per event-time millisecond"),
    samples: int = typer.Option(40, "--samples", min=4, help="RSS samples per run"),
    unbounded: str = typer.Option(
        "", "--unbounded", help="partitioners to run also with the event-time bound off (shows the check can fail)"
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the keys"),
    out: Path = typer.Option(Path(".skewroute/memory_soak"), "--out", "-o", help="folder for the report"),
) -> None:
    """Feed many distinct keys and a far-future record through the data plane (no Kafka); exit 1 unless RSS plateaus."""
    from benchmarks.memory_soak import main

    argv = ["--tuples", str(records), "--keys", str(keys), "--partitioners", partitioners, "--combiners",
            str(combiners), "--batch", str(batch), "--rate", str(rate), "--samples", str(samples),
            "--unbounded", unbounded, "--seed", str(seed), "--out", str(out)]  # fmt: skip
    raise typer.Exit(main(argv))


def register(app: typer.Typer) -> None:
    """Add ``soak`` and ``memory-soak`` to the CLI."""
    app.command("soak", rich_help_panel=LAB)(soak)
    app.command("memory-soak", rich_help_panel=LAB)(memory_soak)
