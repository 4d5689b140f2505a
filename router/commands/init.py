"""CLI: ``skewroute init`` -- a starter config for a topic, from a sample of it.

Example::

    skewroute init --bootstrap kafka:9092 --topic clicks --out skewroute.yaml
    skewroute router --config skewroute.yaml
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from router.commands import CHOOSE
from schemas.exceptions import SkewrouteError, exit_code

__all__ = ["init", "register"]

err = Console(stderr=True)


def init(
    topic: str = typer.Option(..., "--topic", "-t", help="the raw topic to route"),
    bootstrap: str | None = typer.Option(
        None, "--bootstrap", help="Kafka bootstrap servers HOST:PORT (default: the settings', or 127.0.0.1:9092)"
    ),
    config: Path | None = typer.Option(
        None, "--config", "-c", help="settings file whose kafka section to connect with (SASL/TLS)"
    ),
    out: Path = typer.Option(Path("skewroute.yaml"), "--out", "-o", help="the config file to write"),
    force: bool = typer.Option(False, "--force", help="overwrite `--out` if it exists"),
    records: int = typer.Option(20_000, "--records", min=10, help="sample size in records"),
    seconds: float = typer.Option(10.0, "--seconds", min=0.1, help="longest time to read the topic"),
    combiners: int = typer.Option(8, "--combiners", "-n", min=1, help="number of combiners n"),
    partitioners: str | None = typer.Option(
        None, "--partitioners", "-p", help="candidates for the advice (default: all and their variants)"
    ),
) -> None:
    """Write a starter config for a topic: detects key, time and measure fields, proposes a partitioner."""
    from connectors.topic_sample import sample_topic
    from router.choose.advisor import advise
    from router.choose.detect import detect_fields
    from router.choose.runner import BenchSpec
    from router.choose.sample import route_sample
    from router.choose.starter import Starter, proposed_route, render_starter
    from router.commands.options import split_partitioners
    from schemas.settings import KafkaSettings, SkewrouteSettings

    if out.exists() and not force:
        err.print(f"{out} exists: choose another --out or pass --force", style="red", markup=False)
        raise typer.Exit(2)
    try:
        kafka = SkewrouteSettings.load(config).kafka if config else KafkaSettings()
        if bootstrap:
            kafka = kafka.model_copy(update={"bootstrap_servers": bootstrap})
        err.print(f"sampling {topic!r} on {kafka.bootstrap_servers} ({records:,} records or {seconds:g} s) ...")
        messages = sample_topic(kafka, topic, records=records, seconds=seconds)
    except SkewrouteError as exc:
        err.print(f"error: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(exit_code(exc)) from None  # 2: settings, 3: Kafka unreachable, 4: no such topic
    detected = detect_fields(messages)
    err.print(f"read {detected.records:,} records, {detected.json_objects:,} JSON objects", markup=False)
    if not detected.keys:
        err.print(
            "no key candidate: no field (string or integer, in 95% of the records, with repeats) and no Kafka key; "
            "write the route's key: by hand (see the README's settings reference)",
            style="red",
            markup=False,
        )
        raise typer.Exit(1)
    key, time = detected.keys[0], detected.times[0]
    measure = detected.measures[0] if detected.measures else None
    route = proposed_route(topic, key, time, measure, combiners)
    sample = route_sample(route, messages)
    if not sample.workload.tuples:
        err.print(f"no record of the sample can be routed ({sample.first_error})", style="red", markup=False)
        raise typer.Exit(1)
    spec = BenchSpec(
        partitioners=split_partitioners(partitioners), n=combiners, window=route.window.size,
        slide=route.window.slide, tuples=sample.workload.tuples,
    )  # fmt: skip
    adv = advise(sample.workload, spec)
    reason = adv.reason
    alternatives = tuple(r.label for r in adv.ranking[1:4])
    text = render_starter(
        Starter(
            bootstrap=kafka.bootstrap_servers,
            topic=topic,
            detected=detected,
            key=key,
            time=time,
            measure=measure,
            partitioner=adv.best.label,
            reason=reason,
            alternatives=alternatives,
            combiners=combiners,
        )  # fmt: skip
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    try:
        SkewrouteSettings.load(out)
    except SkewrouteError as exc:  # our own output must load: say so rather than leave a broken file unnoticed
        err.print(f"the written config does not load: {exc}", style="red", markup=False)
        raise typer.Exit(1) from None
    err.print(
        f"wrote {out}: key {key.label}, time {time.label}, measure {measure.label if measure else '-'}, "
        f"partitioner {adv.best.label}",
        markup=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    """Add ``init`` to the CLI."""
    app.command("init", rich_help_panel=CHOOSE)(init)
