"""Rows of the reproduction table and the helpers every experiment uses to fill them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from benchmarks.workloads import make_workload
from router.choose.runner import BenchResult, BenchSpec, run_bench

__all__ = ["Row", "bench", "errors", "fmt", "value", "verdict"]


@dataclass
class Row:
    """One line of the reproduction table."""

    experiment: str
    claim: str
    setup: str
    paper: str
    ours: str
    verdict: str  # "yes", "no" or "n/a"
    criterion: str = ""
    note: str = ""


def bench(workload: str, parts: Sequence[str], tuples: int, **spec: object) -> BenchResult:
    """Run a small benchmark for an experiment (``spec`` overrides :class:`BenchSpec` fields)."""
    wl = make_workload(workload, tuples=tuples)
    base = BenchSpec(partitioners=tuple(parts), tuples=tuples)
    return run_bench(wl, replace(base, **spec))  # type: ignore[arg-type]


def value(result: BenchResult, label: str, key: str) -> float | None:
    """A summary value of ``label``'s run, or ``None`` when the partitioner failed."""
    run = result.run(label)
    return run.summary.get(key) if run.ok else None


def errors(result: BenchResult, labels: Sequence[str] | None = None) -> str:
    """The failed partitioners' errors, for a row's note."""
    return "; ".join(f"{r.label}: {r.error}" for r in result.runs if not r.ok and (labels is None or r.label in labels))


def verdict(ok: bool | None) -> str:
    """``yes`` / ``no``, or ``n/a`` when the measurement is missing."""
    return "n/a" if ok is None else ("yes" if ok else "no")


def fmt(x: float | None, spec: str = "{:.3f}") -> str:
    """Format a number, ``n/a`` for missing ones."""
    return "n/a" if x is None or not np.isfinite(x) else spec.format(x)
