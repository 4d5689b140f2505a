"""The papers' reproduction suite: each experiment measures one main claim with our code.

Every row holds the paper's figure next to ours and a verdict (``yes`` / ``no`` / ``n/a``) decided by
a stated criterion. A partitioner that is not implemented (or fails) makes its rows ``n/a`` with the
error, so the suite runs at any stage of the project.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.bench.rows import Row

__all__ = ["EXPERIMENTS", "Row", "run_suite", "suite_markdown", "suite_table", "write_suite"]


Experiment = Callable[[int], list[Row]]


def _experiments() -> dict[str, Experiment]:
    from benchmarks.bench import experiments as ex  # lazy: the experiments import every partitioner
    from benchmarks.bench import experiments_dalton as dx

    return {
        "pkg": ex.pkg_table2,
        "holistic": ex.holistic_rule,
        "dalton-uniform": dx.dalton_uniform,
        "dalton-zipf": dx.dalton_zipf,
        "dalton-adapt": dx.dalton_adapt,
        "dalton-multi": dx.dalton_multi,
        "fish": ex.fish_vs_pkg,
    }


EXPERIMENTS = ("pkg", "holistic", "dalton-uniform", "dalton-zipf", "dalton-adapt", "dalton-multi", "fish")


def run_suite(tuples: int = 100_000, only: Sequence[str] | None = None, console: Console | None = None) -> list[Row]:
    """Run the experiments (all, or ``only``); an experiment that crashes becomes one ``n/a`` row."""
    table = _experiments()
    rows: list[Row] = []
    for name in only or EXPERIMENTS:
        if name not in table:
            raise ValueError(f"unknown experiment {name!r}; available: {', '.join(EXPERIMENTS)}")
        t0 = time.perf_counter()
        try:
            got = table[name](tuples)
        except Exception as exc:  # noqa: BLE001 - keep the table usable at any stage of the project
            got = [Row(name, "(experiment failed)", "", "", "n/a", "n/a", note=f"{type(exc).__name__}: {exc}")]
        rows += got
        if console is not None:
            console.print(f"[dim]{name}: {len(got)} rows in {time.perf_counter() - t0:.1f} s[/dim]")
    return rows


def suite_table(rows: Sequence[Row]) -> Table:
    """The reproduction table for the terminal."""
    table = Table(title="Reproduction of the papers' main claims (ours measured now)", title_justify="left")
    for col in ("experiment", "claim", "setup", "paper", "ours", "reproduced"):
        table.add_column(col, overflow="fold")
    colour = {"yes": "green", "no": "red", "n/a": "yellow"}
    for r in rows:
        ours = r.ours + (f" ({r.note})" if r.note else "")
        table.add_row(r.experiment, r.claim, r.setup, r.paper, ours, f"[{colour[r.verdict]}]{r.verdict}[/]")
    return table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def suite_markdown(rows: Sequence[Row], tuples: int) -> str:
    """The reproduction table as markdown, with each row's criterion listed below."""
    out = [
        "# Reproduction of the papers' main claims",
        "",
        f"Measured by `skewroute bench --suite papers` ({tuples:,} tuples per experiment unless stated; metrics of",
        "docs/partitioners.md per micro-batch (one slide) over the combined output of all routers, random router",
        "batches of 100-5,000 tuples, unless a row's setup says otherwise). 'paper' is the paper's own figure",
        "(or the reference figures of docs/partitioners.md); 'ours' is measured with this project's partitioners.",
        "",
        "| experiment | claim | setup | paper | ours | reproduced |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ours = r.ours + (f" ({r.note})" if r.note else "")
        out.append(
            f"| {r.experiment} | {_cell(r.claim)} | {_cell(r.setup)} | {_cell(r.paper)} | {_cell(ours)} | {r.verdict} |"
        )
    out += ["", "Criteria:", ""]
    seen: set[tuple[str, str]] = set()
    for r in rows:
        if r.criterion and (r.experiment, r.criterion) not in seen:
            seen.add((r.experiment, r.criterion))
            out.append(f"- **{r.experiment}**: {r.criterion}")
    return "\n".join(out) + "\n"


def write_suite(rows: Sequence[Row], out: Path, tuples: int) -> Path:
    """Write ``reproduction.md`` and ``reproduction.json`` into ``out``; returns the markdown path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "reproduction.json").write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n", encoding="utf-8")
    path = out / "reproduction.md"
    path.write_text(suite_markdown(rows, tuples), encoding="utf-8")
    return path
