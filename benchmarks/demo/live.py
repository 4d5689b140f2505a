"""The demo's live view: a rich table per pipeline run, refreshed from :class:`~benchmarks.demo.pipeline.Progress`.

On a terminal it redraws in place (``rich.live``); elsewhere (logs, tests) it prints one line every few
seconds instead.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from benchmarks.demo.pipeline import Progress

__all__ = ["LiveView"]

_BARS = " ▁▂▃▄▅▆▇█"


def _bars(loads: list[float]) -> str:
    top = max(loads) if loads else 0.0
    return "".join(_BARS[int(8 * x / top)] if top else " " for x in loads)


class LiveView:
    """Shows the progress of the running pipeline; a context manager around ``rich.live.Live``."""

    def __init__(self, console: Console | None = None, enabled: bool = True, every_s: float = 5.0) -> None:
        self.console = console or Console(stderr=True)
        self.live = enabled and self.console.is_terminal
        self.every_s = every_s
        self._live: Live | None = None
        self._last_line = 0.0
        self._prev: tuple[float, int, int, int] | None = None

    def __enter__(self) -> LiveView:
        if self.live:
            self._live = Live(Text("starting..."), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def note(self, text: str) -> None:
        """Print a line above the live table."""
        self.console.print(text)

    def update(self, p: Progress) -> None:
        """Show ``p``."""
        rates = self._rates(p)
        if self._live is not None:
            self._live.update(self._render(p, rates))
        elif time.monotonic() - self._last_line >= self.every_s:
            self._last_line = time.monotonic()
            last = p.batches[-1] if p.batches else None
            self.console.print(
                f"[{p.label}] {p.phase} {p.elapsed_s:5.0f} s  produced {p.produced:,}/{p.total:,}  "
                f"routed {p.routed:,}  spark {p.spark_rows:,}"
                + (f"  straggler {last.straggler_ratio}" if last is not None else ""),
                highlight=False,
            )

    def _rates(self, p: Progress) -> tuple[float, float, float]:
        now = time.monotonic()
        prev, self._prev = self._prev, (now, p.produced, p.routed, p.spark_rows)
        if prev is None or now <= prev[0]:
            return 0.0, 0.0, 0.0
        dt = now - prev[0]
        return (p.produced - prev[1]) / dt, (p.routed - prev[2]) / dt, (p.spark_rows - prev[3]) / dt

    def _render(self, p: Progress, rates: tuple[float, float, float]) -> Group:
        head = Table.grid(padding=(0, 2))
        head.add_row(f"[bold]{p.label}[/]: {p.phase}", f"{p.elapsed_s:.0f} s")
        head.add_row("produced", f"{p.produced:,} / {p.total:,} ({rates[0]:,.0f}/s)")
        head.add_row("routed", f"{p.routed:,} ({rates[1]:,.0f}/s), router lag {max(0, p.produced - p.routed):,}")
        head.add_row(
            "Spark read", f"{p.spark_rows:,} ({rates[2]:,.0f}/s), Spark lag {max(0, p.routed - p.spark_rows):,}"
        )
        workers = Table(title="router workers (last 1-s window of each)", title_justify="left")
        for col in ("worker", "raw parts", "in", "out", "DLQ", "max/mean", "repl.", "load per combiner"):
            workers.add_column(col, justify="left" if col in ("worker", "load per combiner") else "right")
        for w in p.workers:
            if not w.reachable:
                workers.add_row(w.name, "[dim]starting[/]", "", "", "", "", "", "")
                continue
            workers.add_row(
                w.name, f"{w.assigned:.0f}", f"{w.tuples_in:,.0f}", f"{w.tuples_out:,.0f}", f"{w.dead:,.0f}",
                f"{w.ratio:.2f}", f"{w.replication:.3f}", _bars(w.loads),
            )  # fmt: skip
        spark = Table(title="Spark micro-batches (latest 5)", title_justify="left")
        for col in ("batch", "rows", "ms", "records per combiner", "straggler", "partials"):
            spark.add_column(col, justify="left" if col.startswith("records") else "right")
        for b in p.batches[-5:]:
            spark.add_row(
                str(b.batch_id), f"{b.input_rows:,}", f"{b.batch_ms:,}",
                _bars([float(x) for x in b.combiner_records]), f"{b.straggler_ratio or 0:.2f}",
                f"{b.shuffled_partials:,}",
            )  # fmt: skip
        return Group(head, workers, spark)
