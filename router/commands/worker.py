"""CLI: ``skewroute router`` runs a router worker; ``skewroute status`` shows workers' metrics live.

``status`` shows per route the traffic, consumer lag and last-commit age, and, for Dalton routes, the sync's
health (age of the last GLOBAL, round size, members, pending SYNCs, buffered rewards) and its transport's state.
"""

from __future__ import annotations

import base64
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import typer
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from router.commands import RUN
from schemas.exceptions import EXIT_BROKER, EXIT_CONFIG, EXIT_MISSING_TOPIC, ConfigError, MissingTopicError

console = Console(stderr=True)

ConfigOpt = typer.Option(None, "--config", "-c", help="YAML/TOML settings file (default: $SKEWROUTE_CONFIG)")
WebPortOpt = typer.Option(
    None, "--web-port", help="web port (metrics at /metrics); overrides router.web_port (default: 6066 + slot)"
)
LogLevelOpt = typer.Option("info", "--loglevel", "-l", help="Faust's log level")
UrlOpt = typer.Option(["http://127.0.0.1:6066/metrics"], "--url", "-u", help="a worker's /metrics URL (repeatable)")
IntervalOpt = typer.Option(1.0, "--interval", "-i", min=0.1, help="seconds between refreshes")
OnceOpt = typer.Option(False, "--once", help="print one table and exit")
BrokerWaitOpt = typer.Option(
    30.0, "--broker-wait", min=0.0, help="seconds to wait for Kafka at start (retries with backoff), then exit 3"
)


def router(
    config: Path | None = ConfigOpt,
    web_port: int | None = WebPortOpt,
    loglevel: str = LogLevelOpt,
    broker_wait: float = BrokerWaitOpt,
) -> None:
    """Run a router worker: route every configured raw topic until SIGTERM/SIGINT (then flush, commit, leave)."""
    import faust

    from router.app import create_app
    from schemas.settings import SkewrouteSettings

    try:
        settings = SkewrouteSettings.load(config)
    except ConfigError as exc:
        console.print(f"[red]{escape(str(exc))}[/]", soft_wrap=True)  # one line per problem, never wrapped
        raise typer.Exit(2) from None
    if not settings.routes:
        console.print("[red]no routes configured[/] (settings: routes: [{raw_topic: ...}])")
        raise typer.Exit(2)
    for warning in settings.window_warnings():
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    from router.dataplane import make_partitioner
    from router.plane_parts import check_sizes
    from schemas.exceptions import SkewrouteError

    for route in settings.routes:  # fail before starting anything if a partitioner cannot be built
        try:
            make_partitioner(route)
            check_sizes(settings.kafka, settings.router, route)  # a routed record must fit the producer's limit
        except SkewrouteError as exc:
            console.print(f"[red]route {escape(route.route_name)}: {escape(str(exc))}[/]", soft_wrap=True)
            raise typer.Exit(2) from None
    routes = ", ".join(f"{r.raw_topic} -> {r.combiner_topic_name} [{r.partitioner.name}]" for r in settings.routes)
    console.print(
        f"router [bold]{escape(settings.router.app_id)}[/]: {len(settings.routes)} route(s) ({escape(routes)}); "
        f"kafka {escape(str(settings.kafka.redacted()))}"
    )
    from router.preflight import await_broker, ensure_faust_topics, raw_topic_fix, require_topics

    try:
        await_broker(settings.kafka, broker_wait)
        require_topics(settings.kafka, {r.raw_topic: raw_topic_fix(r) for r in settings.routes})
        ensure_faust_topics(settings)  # replicated like skewroute's own topics, not Faust's default of 1
    except MissingTopicError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(EXIT_MISSING_TOPIC) from None
    except SkewrouteError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(EXIT_BROKER) from None
    try:
        app = create_app(settings, web_port=web_port)
    except ConfigError as exc:  # no free slot or port
        console.print(f"[red]{escape(str(exc))}[/]", soft_wrap=True)
        raise typer.Exit(EXIT_CONFIG) from None
    faust.Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()


@dataclass
class _RouteView:
    values: dict[str, float] = field(default_factory=dict)
    loads: dict[int, float] = field(default_factory=dict)
    dead: dict[str, float] = field(default_factory=dict)
    partitioner: str = "?"
    instance: str = "?"


def redact_url(url: str) -> str:
    """``url`` without user info (credentials never reach the terminal)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


#: Dalton sync health per route: (metric, column, format); shown only for routes that sync.
_SYNC_COLS = (
    ("skewroute_sync_last_global_age_seconds", "last GLOBAL", "age"),
    ("skewroute_sync_round_size", "round", "int"),
    ("skewroute_sync_members", "members", "int"),
    ("skewroute_sync_pending", "pending", "int"),
    ("skewroute_sync_buffered_rewards", "buffered", "int"),
    ("skewroute_sync_await_timeouts_total", "AWAIT timeouts", "int"),
    ("skewroute_sync_reducers_deposed_total", "deposed", "int"),
    ("skewroute_sync_ignored_total", "ignored", "int"),
)
#: Worker-wide sync transport metrics (no route label).
_TRANSPORT = ("skewroute_sync_transport_up", "skewroute_sync_transport_errors_total",
              "skewroute_sync_transport_restarts_total")  # fmt: skip


def scrape(url: str, timeout: float = 3.0) -> dict[str, _RouteView]:
    """The skewroute metrics of one worker, per route."""
    return scrape_worker(url, timeout)[0]


def scrape_worker(url: str, timeout: float = 3.0) -> tuple[dict[str, _RouteView], dict[str, float]]:
    """The skewroute metrics of one worker: per route, and the worker-wide sync transport's."""
    parts = urllib.parse.urlsplit(url)
    headers = {}
    if parts.username is not None:  # user:password@host -> basic auth header, credentials out of the URL
        cred = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
        netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - a URL the user gave
        text = resp.read().decode()
    views: dict[str, _RouteView] = {}
    worker: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            route = s.labels.get("route")
            if route is None:
                if s.name in _TRANSPORT:
                    worker[s.name] = s.value
                continue
            v = views.setdefault(route, _RouteView())
            if s.name == "skewroute_combiner_load":
                v.loads[int(s.labels["combiner"])] = s.value
            elif s.name == "skewroute_tuples_dead_lettered_total":
                v.dead[s.labels["field"]] = s.value
            elif s.name == "skewroute_route_info":
                v.partitioner, v.instance = s.labels["partitioner"], s.labels["instance"]
            else:
                v.values[s.name] = v.values.get(s.name, 0.0) + s.value
    return views, worker


def _tables(urls: list[str], prev: dict[tuple[str, str], tuple[float, float]]) -> Group:
    tables: list[Table | Text] = []
    now = time.monotonic()
    for url in urls:
        shown = redact_url(url)
        try:
            views, worker = scrape_worker(url)
        except OSError as exc:
            tables.append(
                Text.from_markup(f"{escape(shown)}: [red]unreachable ({escape(str(getattr(exc, 'reason', exc)))})[/]")
            )
            continue
        instance = next((v.instance for v in views.values()), "?")
        t = Table(
            title=f"{escape(shown)} — worker {escape(instance)} — {time.strftime('%H:%M:%S')}", title_justify="left"
        )
        cols = ("route (algo)", "parts", "in", "out", "DLQ", "lag", "commit age", "in/s", "batch ms", "µs/t",
                "max/mean", "repl")  # fmt: skip
        for col in cols:
            t.add_column(col, justify="left" if col.startswith("route") else "right")
        t.add_column("loads (last window)")
        for route, v in sorted(views.items()):
            val = v.values.get
            tin = val("skewroute_tuples_in_total", 0.0)
            last = prev.get((url, route))
            rate = (tin - last[1]) / (now - last[0]) if last and now > last[0] else 0.0
            prev[(url, route)] = (now, tin)
            count = val("skewroute_batch_seconds_count", 0.0)
            batch_ms = 1000 * val("skewroute_batch_seconds_sum", 0.0) / count if count else 0.0
            loads = [v.loads[i] for i in sorted(v.loads)]
            top = max(loads) if loads else 0.0
            bars = "".join(" ▁▂▃▄▅▆▇█"[int(8 * x / top)] if top else " " for x in loads)
            t.add_row(
                escape(f"{route} ({v.partitioner})"),
                f"{val('skewroute_assigned_partitions', 0):.0f}",
                f"{tin:,.0f}",
                f"{val('skewroute_tuples_out_total', 0):,.0f}",
                f"{sum(v.dead.values()):,.0f}",
                f"{val('skewroute_consumer_lag', 0):,.0f}",  # summed over the worker's raw partitions
                _age(val("skewroute_last_commit_age_seconds", -1.0)),
                f"{rate:,.0f}",
                f"{batch_ms:.1f}",
                f"{1e6 * val('skewroute_partitioner_seconds_per_tuple', 0):.2f}",
                f"{val('skewroute_window_imbalance_ratio', 0):.2f}",
                f"{val('skewroute_window_replication', 0):.3f}",
                bars,
            )
        tables.append(t)
        sync = _sync_table(views, worker)
        if sync is not None:
            tables.append(sync)
    return Group(*tables)


def _sync_table(views: dict[str, _RouteView], worker: dict[str, float]) -> Table | None:
    """Dalton sync health of the routes that sync, with the transport's state in the title; None if none do."""
    routes = {r: v for r, v in views.items() if "skewroute_sync_members" in v.values}
    if not routes:  # no Dalton route (every worker exports transport_up, 0 without a sync)
        return None
    up = worker.get("skewroute_sync_transport_up")
    state = "-" if up is None else ("[green]up[/]" if up >= 1 else "[red]DOWN[/]")
    errors = worker.get("skewroute_sync_transport_errors_total", 0.0)
    restarts = worker.get("skewroute_sync_transport_restarts_total", 0.0)
    t = Table(title=f"sync transport {state}, {errors:,.0f} errors, {restarts:,.0f} restarts", title_justify="left")
    t.add_column("route (sync)", justify="left")
    for _, col, _ in _SYNC_COLS:
        t.add_column(col, justify="right")
    for route, v in sorted(routes.items()):
        cells = []
        for metric, _, fmt in _SYNC_COLS:
            value = v.values.get(metric, 0.0 if metric.endswith("_total") else None)
            if value is None:
                cells.append("-")  # e.g. no GLOBAL applied yet
            else:
                cells.append(_age(value) if fmt == "age" else f"{value:,.0f}")
        t.add_row(escape(route), *cells)
    return t


#: The width ``status --once`` renders at outside a terminal (tables take only the width their cells need).
PIPED_WIDTH = 1_000


def _age(seconds: float) -> str:
    return "-" if seconds < 0 else f"{seconds:.1f} s"


def status(urls: list[str] = UrlOpt, interval: float = IntervalOpt, once: bool = OnceOpt) -> None:
    """Show router workers' metrics live: traffic, lag, commit age and Dalton sync health (reads /metrics)."""
    prev: dict[tuple[str, str], tuple[float, float]] = {}
    out = Console()
    if once:
        if not out.is_terminal:  # a pipe or a file has no width: keep every cell whole, not cut to 80 columns
            out = Console(width=PIPED_WIDTH)
        out.print(_tables(urls, prev))
        return
    with Live(_tables(urls, prev), console=out, refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(_tables(urls, prev))
        except KeyboardInterrupt:
            pass


def register(app: typer.Typer) -> None:
    """Add ``router`` and ``status`` to the CLI."""
    app.command("router", rich_help_panel=RUN)(router)
    app.command("status", rich_help_panel=RUN)(status)
