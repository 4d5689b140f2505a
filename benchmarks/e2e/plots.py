"""The e2e-bench plots: ``latency.png`` (p99 per second of production) and ``tasks.png`` (combiner task times)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["finished_runs", "write_plots"]


def finished_runs(doc: dict[str, Any], n: int, phase: str) -> dict[str, dict[str, Any]]:
    """The runs of ``n`` in ``phase`` that finished, by configuration (failed runs are listed apart)."""
    return {r["config"]: r for r in doc["runs"] if r["n"] == n and r["phase"] == phase and "error" not in r}


def write_plots(doc: dict[str, Any], out: Path) -> list[Path]:
    """``latency.png`` (p99 latency per second of production) and ``tasks.png`` (combiner task ms per batch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    ns = sorted({r["n"] for r in doc["runs"]}, reverse=True)
    fig, axes = plt.subplots(len(ns), 1, figsize=(10, 3.5 * len(ns)), squeeze=False)
    for ax, n in zip(axes[:, 0], ns, strict=True):
        for config, r in finished_runs(doc, n, "rate").items():
            s = r.get("latency", {}).get("series")
            if s:
                ax.plot(s["second"], [math.nan if v is None else v for v in s["p99"]], lw=1, label=config)
        ax.set_title(f"n = {n}: p99 latency per second of production")
        ax.set_xlabel("seconds since the first record")
        ax.set_ylabel("latency (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    paths.append(out / "latency.png")
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)
    configs = list(finished_runs(doc, ns[0], "backlog"))
    fig, axes = plt.subplots(len(ns), len(configs), figsize=(2.2 * len(configs), 3 * len(ns)), squeeze=False,
                             sharey="row")  # fmt: skip
    for i, n in enumerate(ns):
        back = finished_runs(doc, n, "backlog")
        for j, config in enumerate(configs):
            ax = axes[i, j]
            for b, tasks in enumerate(back.get(config, {}).get("spark", {}).get("task_ms", [])):
                ax.scatter([b] * len(tasks), tasks, s=6)
            ax.set_title(f"{config} (n={n})", fontsize=8)
            ax.set_xlabel("micro-batch", fontsize=7)
            ax.grid(alpha=0.3)
        axes[i, 0].set_ylabel("combiner task ms")
    fig.tight_layout()
    paths.append(out / "tasks.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)
    return paths
