"""Benchmark output: a rich table, a markdown report, a JSON file, and PNG plots over time."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from router.choose.measure import SUMMARY_FIELDS
from router.choose.runner import BenchResult, PartitionerRun

__all__ = ["COLUMNS", "default_report_dir", "result_json", "rich_table", "write_report"]

#: Table columns: (header, summary key, format).
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("tuples/s", "tuples_per_s", "{:,.0f}"),
    ("max/mean load", "ratio_mean", "{:.3f}"),
    ("p95 max/mean", "ratio_p95", "{:.3f}"),
    ("max L", "max_load_mean", "{:.1f}"),
    ("imbalance I", "imbalance_mean", "{:.1f}"),
    ("replication", "replication_mean", "{:.3f}"),
    ("p95 repl.", "replication_p95", "{:.3f}"),
    ("reducer max A", "reducer_max_mean", "{:.1f}"),
    ("T mean", "time_mean", "{:.1f}"),
    ("T p95", "time_p95", "{:.1f}"),
)


def default_report_dir(workload: str) -> Path:
    """``reports/bench-<workload>/`` with the workload name made file-system safe."""
    return Path("reports") / f"bench-{re.sub(r'[^A-Za-z0-9_.=-]+', '_', workload).strip('_')}"


def _cells(run: PartitionerRun) -> list[str]:
    if not run.ok:
        return ["n/a"] * len(COLUMNS)
    return [fmt.format(run.summary[key]) for _, key, fmt in COLUMNS]


def _config_line(result: BenchResult) -> str:
    s = result.spec
    return (
        f"{result.tuples:,} tuples, n={s.n} combiners, m={s.m} reducers, window={s.window:g}, "
        f"slide={s.slide:g}, metric window={result.metric_window:g}, routers P={s.routers}, "
        f"DSYNC={s.dsync} ({s.sync}), c={s.c:g}, router batches {_batches(s.batches)}"
    )


def _batches(sizes: tuple[int, int] | None) -> str:
    return "the workload's" if sizes is None else f"{sizes[0]:,}-{sizes[1] - 1:,} tuples (random)"


def rich_table(result: BenchResult) -> Table:
    """The per-partitioner summary as a rich table (errors shown as ``n/a`` with the reason)."""
    table = Table(title=f"{result.workload}: {_config_line(result)}", title_justify="left")
    table.add_column("partitioner", style="bold")
    for header, _, _ in COLUMNS:
        table.add_column(header, justify="right")
    for run in result.runs:
        table.add_row(run.label, *_cells(run), style=None if run.ok else "dim")
    errors = [f"{r.label}: {r.error}" for r in result.runs if not r.ok]
    if errors:
        table.caption = "n/a: " + "; ".join(errors)
        table.caption_justify = "left"
    return table


def _markdown(result: BenchResult, plots: list[str]) -> str:
    lines = [
        f"# Benchmark: {result.workload}",
        "",
        _config_line(result) + ".",
        "",
        "Per-window metrics (docs/partitioners.md) over the combined output of all routers, summarised as the",
        "mean (and p95) over windows; T = max L + c·max A is the modelled window time. tuples/s is measured",
        "side by side in one run (assign calls only).",
        "",
        "| partitioner | " + " | ".join(h for h, _, _ in COLUMNS) + " | error |",
        "| --- | " + " | ".join("---:" for _ in COLUMNS) + " | --- |",
    ]
    for run in result.runs:
        err = (run.error or "").replace("|", "\\|")
        lines.append(f"| {run.label} | " + " | ".join(_cells(run)) + f" | {err} |")
    lines.append("")
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def result_json(result: BenchResult) -> dict[str, Any]:
    """Machine-readable result: config, and per partitioner the summary and the per-window series."""
    runs: dict[str, Any] = {}
    for run in result.runs:
        entry: dict[str, Any] = {"name": run.name, "params": run.params, "error": run.error}
        if run.ok and run.windows is not None:
            entry["summary"] = {k: _finite(v) for k, v in run.summary.items()}
            entry["windows"] = {
                attr: np.asarray(getattr(run.windows, attr)).tolist()
                for attr in ("start", "tuples", "max_load", "mean_load", "gamma", "distinct")
                + tuple(a for a, _ in SUMMARY_FIELDS)
            }
            entry["seconds"] = run.seconds
            entry["sync_seconds"] = run.sync_seconds
        runs[run.label] = entry
    s = result.spec
    return {
        "workload": result.workload,
        "tuples": result.tuples,
        "config": {
            "n": s.n,
            "m": s.m,
            "window": s.window,
            "slide": s.slide,
            "metric_window": result.metric_window,
            "routers": s.routers,
            "dsync": s.dsync,
            "sync": s.sync,
            "batches": None if s.batches is None else list(s.batches),
            "c": s.c,
            "seed": s.seed,
        },
        "runs": runs,
    }


def _plot(result: BenchResult, attrs: list[tuple[str, str]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(attrs), 1, figsize=(10, 2.8 * len(attrs)), sharex=True, squeeze=False)
    for ax, (attr, label) in zip(axes[:, 0], attrs, strict=True):
        for run in result.runs:
            if run.ok and run.windows is not None:
                ax.plot(np.arange(len(run.windows.tuples)), getattr(run.windows, attr), label=run.label, lw=1)
        ok = [r for r in result.runs if r.ok and r.windows is not None]
        if attr == "max_load" and ok and ok[0].windows is not None:
            ax.plot(ok[0].windows.mean_load, "k--", lw=1, label="mean load")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0, 0].set_title(result.workload)
    axes[-1, 0].set_xlabel(f"window (of {result.metric_window:g} time units)")
    axes[0, 0].legend(loc="upper right", fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_report(result: BenchResult, out: Path) -> dict[str, Path]:
    """Write ``report.md``, ``result.json``, ``load.png`` and ``replication.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "load": out / "load.png",
        "replication": out / "replication.png",
        "json": out / "result.json",
        "markdown": out / "report.md",
    }
    _plot(result, [("max_load", "max load L"), ("ratio", "max/mean")], paths["load"])
    _plot(result, [("replication", "replication Γ/K"), ("time", "window time T")], paths["replication"])
    paths["json"].write_text(json.dumps(result_json(result), indent=1) + "\n", encoding="utf-8")
    paths["markdown"].write_text(_markdown(result, ["load.png", "replication.png"]), encoding="utf-8")
    return paths
