"""The demo report: ``report.md``, ``report.json`` and PNG plots comparing the chosen partitioner with hash.

The markdown is rendered from the JSON document (one format per row, :data:`ROWS`), so both always say the
same. Routing-quality plots and the per-window tables come from the benchmark's report writer
(:func:`benchmarks.bench.report.write_report`, into ``routing/``); ``spark.png`` shows the micro-batches.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench.report import write_report
from router.choose.measure import WindowMetrics
from router.choose.runner import BenchResult, BenchSpec, PartitionerRun
from spark_consumers.observability import BatchStats

__all__ = ["ROWS", "render_markdown", "routing_report", "spark_plot", "write_json"]

#: Report rows: (label, section, key, format). Values live at ``runs[<partitioner>][section][key]``.
ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("records produced", "delivery", "produced", "{:,.0f}"),
    ("records routed (distinct source positions)", "delivery", "distinct_positions", "{:,.0f}"),
    ("duplicate routed records", "delivery", "duplicates", "{:,.0f}"),
    ("dead letters", "delivery", "dead_letters", "{:,.0f}"),
    ("mean per-micro-batch max/mean load (routed records)", "routing", "ratio_mean", "{:.3f}"),
    ("p95 per-micro-batch max/mean load", "routing", "ratio_p95", "{:.3f}"),
    ("mean replication (Γ/K, partials per key and micro-batch)", "routing", "replication_mean", "{:.3f}"),
    ("p95 replication", "routing", "replication_p95", "{:.3f}"),
    ("replication floor (least at max/mean <= 1.05, exact counts)", "routing", "floor_mean", "{:.3f}"),
    ("partials per micro-batch (routed records)", "routing", "partials_mean", "{:,.1f}"),
    ("floor: partials per micro-batch (routed records)", "routing", "partials_floor_mean", "{:,.1f}"),
    ("metric windows (micro-batch spans)", "routing", "windows", "{:,.0f}"),
    ("Spark micro-batches with data", "spark", "batches", "{:,.0f}"),
    ("shuffled partials (total)", "spark", "shuffled_partials", "{:,.0f}"),
    ("shuffled partials per record", "spark", "partials_per_record", "{:.4f}"),
    ("shuffled partials per micro-batch", "spark", "partials_per_batch", "{:,.1f}"),
    ("per-micro-batch combiner records max/mean", "spark", "record_max_mean", "{:.3f}"),
    ("mean straggler ratio (max/median combiner task)", "spark", "straggler_mean", "{:.2f}"),
    ("max straggler ratio", "spark", "straggler_max", "{:.2f}"),
    ("mean max/median combiner records per micro-batch", "spark", "record_skew_mean", "{:.2f}"),
    ("mean slowest combiner task (ms)", "spark", "max_task_ms_mean", "{:,.0f}"),
    ("mean micro-batch duration (ms)", "spark", "batch_ms_mean", "{:,.0f}"),
    ("rows dropped by the watermark", "spark", "rows_dropped_by_watermark", "{:,.0f}"),
    ("router workers' CPU seconds (all workers, while streaming)", "routers", "cpu_seconds", "{:.1f}"),
    ("Dalton sync: SYNC messages on the control topic", "sync", "sync_messages", "{:,.0f}"),
    ("Dalton sync: GLOBAL rounds", "sync", "global_rounds", "{:,.0f}"),
    ("Dalton sync: most routers in one round", "sync", "max_members", "{:,.0f}"),
    ("end-to-end seconds (first record produced → last aggregated)", "throughput", "seconds", "{:.1f}"),
    ("end-to-end records/s", "throughput", "records_per_s", "{:,.0f}"),
    ("drain: last record produced → last aggregated (s)", "throughput", "drain_seconds", "{:.1f}"),
    ("exact (window, key) aggregates", "exactness", "matching", "{:,.0f}"),
    ("mismatching + missing + extra aggregates", "exactness", "wrong", "{:,.0f}"),
)


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return fmt.format(value)


def render_markdown(doc: dict[str, Any]) -> str:
    """The markdown report of a demo JSON document."""
    d, runs = doc["demo"], doc["runs"]
    labels = list(runs)
    lines = [
        f"# skewroute demo: {' vs '.join(labels)}",
        "",
        f"Workload: {d['description']} (`{d['workload']}`), {d['records']:,} JSON records produced at "
        f"{d['rate_label']} (keys from the workload in its order; event time = the demo's clock, "
        "first record + i / rate; value = a seeded integer 0-999). "
        f"Per partitioner: {d['routers']} router workers, n = {d['combiners']} combiners, "
        f"m = {d['reducers']} reducers (Spark shuffle partitions), Spark {d['spark_master']} with "
        f"{d['window_s']} s tumbling windows and a {d['trigger_s']:g} s trigger. Routing metrics per "
        f"{d['metric_window_ms']:,} ms event-time window, the micro-batch's span (docs/partitioners.md definitions, "
        f"with the replication floor), from the combiner topic's contents. "
        f"Broker: {d['broker']}. {d['finished']}, {d['seconds']:.0f} s in all.",
        "",
        f"Command: `{d['command']}`",
        "",
        "| | " + " | ".join(labels) + " |",
        "| --- | " + " | ".join("---:" for _ in labels) + " |",
    ]
    for label, section, key, fmt in ROWS:
        lines.append(f"| {label} | " + " | ".join(_cell(runs[r][section].get(key), fmt) for r in labels) + " |")
    lines += ["", "## Verdict", ""] + [f"- {v}" for v in doc["verdict"]] + [""]
    problems = [f"- {r}: {e}" for r in labels for e in runs[r]["exactness"]["examples"]]
    if problems:
        lines += ["Aggregates that differ:", "", *problems, ""]
    lines += [
        "## Plots",
        "",
        "![per-window load](routing/load.png)",
        "",
        "![per-window replication](routing/replication.png)",
        "",
        "![Spark micro-batches](spark.png)",
        "",
        "`routing/` holds the per-window series (`result.json`) and the benchmark-style table (`report.md`); "
        "each partitioner's folder holds its config, worker logs and the Spark progress log.",
        "",
    ]
    return "\n".join(lines)


def write_json(doc: dict[str, Any], path: Path) -> None:
    """Write ``doc`` (NaN as null)."""

    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        if isinstance(x, float) and not math.isfinite(x):
            return None
        return x

    path.write_text(json.dumps(clean(doc), indent=1) + "\n", encoding="utf-8")


def routing_report(
    workload: str,
    runs: dict[str, tuple[WindowMetrics, dict[str, float]]],
    keys: np.ndarray,
    times: np.ndarray,
    *,
    n: int,
    m: int,
    routers: int,
    width_ms: float,
    out: Path,
) -> dict[str, Path]:
    """Per-window plots and tables of every run through the benchmark's report writer."""
    codes = np.unique(keys, return_inverse=True)[1].astype(np.int64)
    t = np.asarray(times, dtype=np.int64)
    window_of = (t - t.min()) // int(width_ms) if t.size else t
    spec = BenchSpec(tuple(runs), n=n, m=m, window=60_000, slide=width_ms, routers=routers, metric_window=width_ms)
    result = BenchResult(
        workload, spec, codes, t, window_of, np.unique(window_of).astype(np.float64) * width_ms, width_ms,
        [PartitionerRun(label, label.partition(":")[0], {}, windows=w, summary=s) for label, (w, s) in runs.items()],
    )  # fmt: skip
    return write_report(result, out)


def spark_plot(batches: dict[str, list[BatchStats]], path: Path) -> None:
    """Per micro-batch with data, for every run: straggler ratio, combiner record skew, partials per record."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from benchmarks.demo.checks import record_skew

    panels = (
        ("straggler ratio\n(max/median task ms)", lambda b: b.straggler_ratio or np.nan),
        ("max/median records\nper combiner task", record_skew),
        ("shuffled partials\nper record", lambda b: b.shuffled_partials / b.input_rows),
    )
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 7.5), sharex=True)
    for label, stats in batches.items():
        data = [b for b in stats if b.input_rows > 0]
        for ax, (_, value) in zip(axes, panels, strict=True):
            ax.plot(np.arange(len(data)), [value(b) for b in data], marker="o", lw=1, label=label)
    for ax, (ylabel, _) in zip(axes, panels, strict=True):
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("Spark micro-batch (with data)")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_title("Spark combiner stage per micro-batch")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
