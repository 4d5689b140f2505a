"""CLI: ``skewroute router-bench`` (throughput of the router data plane per partitioner)."""

from __future__ import annotations

from pathlib import Path

import typer

from router.commands import LAB

__all__ = ["register"]

MODES = ("both", "pairs", "separate", "release")


def router_bench(
    records: int = typer.Option(300_000, "--records", min=1, help="records per workload"),
    rounds: int = typer.Option(3, "--rounds", min=1, help="runs per configuration (the median is reported)"),
    batch: int = typer.Option(20_000, "--batch", min=1, help="router.batch_max_records of the workers"),
    combiners: int = typer.Option(8, "--combiners", "-n", min=1, help="number of combiners n"),
    bootstrap: str | None = typer.Option(None, "--bootstrap", help="an existing broker (default: start one)"),
    partitioners: str | None = typer.Option(
        None, "--partitioners", "-p", help="comma-separated configurations (default: passthrough and all)"
    ),
    workloads: str = typer.Option(
        "zipf1.5,uniform",
        "--workloads",
        help="comma-separated: zipf1.5, uniform, their keyed variants zipf1.5-keyed, uniform-keyed (Kafka keys, "
        "routes with key.source kafka_key) and field variants zipf1.5-fields, uniform-fields (values with an event "
        "time t and a measure v, routes reading both, as the demo's), zipf1.5-prices (the same with measures of "
        "two decimal places)",
    ),
    timeout: float = typer.Option(300.0, "--timeout", min=1.0, help="longest run of one worker process (s)"),
    producer_conf: str = typer.Option("{}", "--producer-conf", help="extra librdkafka producer properties (JSON)"),
    out: Path = typer.Option(
        Path("reports"), "--out", "-o", help="report folder (writes `router-throughput.md` and `.json`)"
    ),
    formats: str = typer.Option("2", "--formats", help="routed wire formats to run this code with: 1, 2 or 1,2"),
    in_flight: str = typer.Option(
        "", "--in-flight", help="release mode: router.max_in_flight values to run this code with, e.g. 1,2,4"
    ),
    baseline: Path | None = typer.Option(
        None, "--baseline", help="source tree of an earlier release (e.g. a git worktree) run side by side (release)"
    ),
    hotpath: bool = typer.Option(False, "--hotpath", help="only the in-memory per-phase CPU profile (no broker)"),
    mode: str = typer.Option(
        "both",
        "--mode",
        help="`pairs`: pass-through and each partitioner in one process, turn by turn (robust "
        "ratios); `separate`: one worker process per configuration (absolute rates); `both`; `release`: each "
        "configuration per --formats and with --baseline, adjacent runs (CPU, bytes and broker CPU per record)",
    ),  # fmt: skip
    brokers: str = typer.Option(
        "tansu",
        "--brokers",
        help="without --bootstrap: brokers to start and measure side by side in this run: "
        "tansu and/or kafka (Apache Kafka, one KRaft node), comma-separated",
    ),  # fmt: skip
    slide: int = typer.Option(
        1_000,
        "--slide",
        min=1,
        help="the routes' count-window slide in tuples (a partitioner's scope; the "
        "window holds 12 slides, at least 60,000 tuples); a --baseline tree must know the option when it is not 1000",
    ),  # fmt: skip
) -> None:
    """Router throughput per partitioner next to a pass-through route (tuples/s, µs per tuple per phase)."""
    from benchmarks.router_bench import main
    from benchmarks.router_bench_workloads import ALL_WORKLOADS

    if mode not in MODES:
        raise typer.BadParameter(" or ".join(MODES), param_hint="--mode")
    bad = [k for k in in_flight.split(",") if in_flight and not (k.isdigit() and 1 <= int(k) <= 16)]
    if bad:
        raise typer.BadParameter(f"values 1..16, got {', '.join(bad)}", param_hint="--in-flight")
    unknown = [w for w in workloads.split(",") if w not in ALL_WORKLOADS]
    if unknown:
        raise typer.BadParameter(
            f"unknown {', '.join(unknown)}; valid: {', '.join(ALL_WORKLOADS)}", param_hint="--workloads"
        )
    main(
        records, rounds=rounds, batch=batch, combiners=combiners, bootstrap=bootstrap, partitioners=partitioners,
        workloads=workloads, timeout=timeout, producer_conf=producer_conf, out=out, hotpath=hotpath, mode=mode,
        brokers=brokers, formats=formats, baseline=baseline, in_flight=in_flight, slide=slide,
    )  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add ``router-bench`` to the CLI."""
    app.command("router-bench", rich_help_panel=LAB)(router_bench)
