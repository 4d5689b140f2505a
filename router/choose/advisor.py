"""The advisor: recommend a partitioner (and parameters) for a workload sample by measurement.

Every candidate runs on the sample (:func:`router.choose.runner.run_bench`: random router batches, metrics
per micro-batch = the route's slide, the Spark trigger); the recommendation is the lowest mean modelled
micro-batch time ``T = max L + c·max A`` (ties broken by the p95 of ``T``, then by
router throughput). The Holistic paper's selection rule ([Holistic] in docs/partitioners.md, Sec. 7) is
evaluated on the same sample as the baseline:
*shuffle if the number of groups per window is constant and significantly less than the tuples a worker
receives per window, otherwise AM / cAM*.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from connectors.workload_types import Workload
from router.choose.runner import BenchResult, BenchSpec, PartitionerRun, run_bench
from router.partitioners import available, get
from schemas.partitioner_settings import settings_model

__all__ = ["Advice", "HolisticRule", "advise", "candidate_labels", "holistic_rule"]

#: "significantly less": groups per window below tuples-per-worker-per-window / RULE_FACTOR.
RULE_FACTOR = 10.0
#: "constant": the groups-per-window coefficient of variation at most this.
RULE_MAX_CV = 0.5
#: Extra candidates: for a partitioner whose settings (or constructor) take the parameter, these values.
VARIANTS: dict[str, tuple[object, ...]] = {"d": (4,), "placement": ("bandit",)}


@dataclass(frozen=True)
class HolisticRule:
    """The Holistic selection rule evaluated on a sample."""

    groups: float  # mean distinct keys per window
    groups_cv: float  # coefficient of variation of the distinct keys per window
    tuples_per_worker: float  # mean tuples per window / n
    choice: tuple[str, ...]  # ("shuffle",) or ("am", "cam")

    @property
    def text(self) -> str:
        """One line: the rule's inputs and its choice."""
        cmp = "<<" if self.choice == ("shuffle",) else "not <<"
        return (
            f"groups per window {self.groups:.1f} (cv {self.groups_cv:.2f}) {cmp} tuples per worker per "
            f"window {self.tuples_per_worker:.1f} -> {' / '.join(self.choice)}"
        )


@dataclass
class Advice:
    """The measured ranking, the recommendation and the rule's baseline."""

    result: BenchResult
    ranking: list[PartitionerRun]  # successful runs, best first
    rule: HolisticRule
    rule_run: PartitionerRun | None  # the rule's best measured choice
    reason: str

    @property
    def best(self) -> PartitionerRun:
        """The recommended partitioner's run."""
        return self.ranking[0]


def holistic_rule(result: BenchResult) -> HolisticRule:
    """Apply the Holistic paper's rule to the sample's window statistics."""
    run = next((r for r in result.runs if r.ok and r.windows is not None), None)
    if run is None or run.windows is None:
        raise ValueError("no successful run to read the window statistics from")
    g = np.asarray(run.windows.distinct, dtype=np.float64)
    per_worker = float(np.mean(run.windows.tuples)) / result.spec.n
    cv = float(g.std() / g.mean()) if g.mean() > 0 else 0.0
    few = g.mean() * RULE_FACTOR <= per_worker and cv <= RULE_MAX_CV
    return HolisticRule(float(g.mean()), cv, per_worker, ("shuffle",) if few else ("am", "cam"))


def candidate_labels(names: Sequence[str] | None = None) -> tuple[str, ...]:
    """Every partitioner with default parameters, plus the :data:`VARIANTS` its constructor accepts."""
    labels: list[str] = []
    for name in names or available():
        labels.append(name)
        model = settings_model(name)
        try:
            takes = (
                set(model.model_fields) if model is not None else set(inspect.signature(get(name).__init__).parameters)
            )
        except Exception:  # noqa: BLE001 - not importable yet: the run will report it as n/a
            continue
        for param, values in VARIANTS.items():
            if param in takes:
                labels += [f"{name}:{param}={v}" for v in values]
    return tuple(labels)


def _key(run: PartitionerRun) -> tuple[float, float, float]:
    """Lowest mean T, then lowest p95 T, then the fastest router (so exact ties go to the cheaper one)."""
    return run.summary["time_mean"], run.summary["time_p95"], -run.summary["tuples_per_s"]


def _reason(best: PartitionerRun, other: PartitionerRun, c: float) -> str:
    b, o = best.summary, other.summary
    d_load = o["max_load_mean"] - b["max_load_mean"]
    d_agg = c * (o["reducer_max_mean"] - b["reducer_max_mean"])
    if d_agg <= 0 and d_load <= 0:
        what = "a tie in T; the faster router"
    elif d_agg >= d_load:
        what = "aggregation cost (reducer max A)"
    else:
        what = "load balance (max L)"
    return (
        f"{best.label}: T mean {b['time_mean']:.1f} (p95 {b['time_p95']:.1f}) vs {other.label} "
        f"{o['time_mean']:.1f}; max L {b['max_load_mean']:.1f} vs {o['max_load_mean']:.1f}, reducer max A "
        f"{b['reducer_max_mean']:.1f} vs {o['reducer_max_mean']:.1f}: wins on {what}"
    )


def advise(
    workload: Workload,
    spec: BenchSpec,
    progress: Callable[[int], None] | None = None,
) -> Advice:
    """Measure the candidates (``spec.partitioners`` or :func:`candidate_labels`) and rank them by T."""
    if not spec.partitioners:
        spec = replace(spec, partitioners=candidate_labels())
    result = run_bench(workload, spec, progress)
    ranking = sorted((r for r in result.runs if r.ok), key=_key)
    if not ranking:
        raise RuntimeError("no candidate partitioner ran: " + "; ".join(f"{r.label}: {r.error}" for r in result.runs))
    rule = holistic_rule(result)
    rule_runs = [r for r in ranking if r.name in rule.choice]
    rule_run = rule_runs[0] if rule_runs else None
    best = ranking[0]
    other = rule_run if rule_run is not None and rule_run is not best else (ranking + [best])[1]
    reason = _reason(best, other, spec.c) if other is not best else f"{best.label} is the only candidate"
    return Advice(result, ranking, rule, rule_run, reason)
