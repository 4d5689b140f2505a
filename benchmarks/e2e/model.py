"""A model of a micro-batch on many cores, from the task times measured on few.

A micro-batch of the job is a chain of stages (the combiner stage -- scan, decode, per-record work and partial
aggregation -- then the reducers' merge with the state store; ``direct-repartition`` has one more). Each stage
is a set of tasks with measured run times; Spark hands a stage's tasks to whichever of its ``C`` task slots
frees first (list scheduling, :func:`~benchmarks.e2e.measures.list_schedule`), and a stage starts when the one
before it ended. What is left of the micro-batch's wall time -- planning, offsets, the state store's commit,
the sink's flush, task launch -- is taken as fixed, whatever ``C``::

    fixed      = measured batch ms - sum over stages of list_schedule(stage tasks, measured slots)
    batch(C)   = fixed + sum over stages of list_schedule(stage tasks, C)

The assumptions, each a way the model can be wrong: a task takes as long on ``C`` slots as it took when
measured (no memory-bandwidth or cache contention, no other load on the machine), the fixed part does not
grow with ``C``, and the reducers stay as many as configured (``spark.sql.shuffle.partitions``).
:func:`model_error` is how the model is checked: task times measured on ``local[1]`` predict the micro-batches
of the same drain on ``local[2]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.e2e.measures import list_schedule

__all__ = ["SLOTS", "batch_ms_on", "breakdown", "model_error", "modelled_drain", "predicted_check", "stages_makespan"]

#: Task slots the model is evaluated on.
SLOTS = (2, 8, 32, 128)


def stages_makespan(stages: Sequence[Sequence[float]], slots: int) -> float:
    """Sum over the stages of each stage's list-scheduled makespan on ``slots`` slots."""
    return sum(list_schedule(tasks, slots) for tasks in stages if len(tasks))


def batch_ms_on(batch_ms: float, stages: Sequence[Sequence[float]], measured_slots: int, slots: int) -> float:
    """The micro-batch's wall time on ``slots`` slots, from its time and stages measured on ``measured_slots``.

    The fixed part is floored at 0 (a batch whose tasks add up to more than its wall time: clock granularity).
    """
    fixed = max(0.0, batch_ms - stages_makespan(stages, measured_slots))
    return fixed + stages_makespan(stages, slots)


def modelled_drain(batches: Sequence[dict[str, Any]], measured_slots: int, slots: int) -> dict[str, float | None]:
    """Drain rate and time of the steady batches (all but the first) on ``slots`` slots.

    ``batches``: ``{"records", "batch_ms", "stage_task_ms"}`` per data micro-batch, in order; a batch whose stages
    are unknown (``stage_task_ms`` None) makes the result None.
    """
    steady = batches[1:] if len(batches) > 1 else batches
    if not steady or any(b.get("stage_task_ms") is None for b in steady):
        return {"rate": None, "ms": None}
    ms = sum(batch_ms_on(b["batch_ms"], b["stage_task_ms"], measured_slots, slots) for b in steady)
    records = sum(b["records"] for b in steady)
    return {"rate": records / (ms / 1000) if ms > 0 else None, "ms": ms}


def model_error(predicted_ms: Sequence[float], measured_ms: Sequence[float]) -> dict[str, float | None]:
    """Predicted against measured micro-batch times: the drain time's relative error and per-batch errors.

    ``total``: ``sum(predicted) / sum(measured) - 1`` (what a drain rate predicted from the model is off by);
    ``batch_mean_abs``: the mean of ``|predicted / measured - 1|`` over batch pairs (as many as both have).
    """
    pairs = [(p, m) for p, m in zip(predicted_ms, measured_ms, strict=False) if m > 0]
    total_m = sum(measured_ms)
    total = sum(predicted_ms) / total_m - 1.0 if total_m > 0 and predicted_ms else None
    per = [abs(p / m - 1.0) for p, m in pairs]
    return {"total": total, "batch_mean_abs": sum(per) / len(per) if per else None}


def breakdown(batches: Sequence[dict[str, Any]], slots: int) -> dict[str, float | None]:
    """Where a steady micro-batch's time goes, in microseconds per record (measured on ``slots`` slots).

    ``combiner_task_us``: the combiner stage's task time summed over its tasks (its work, whatever the slots);
    ``combiner_wall_us``: that stage's list-scheduled makespan (what the batch waited for it); ``after_wall_us``:
    the later stages' makespans (reducers, state store, sink); ``fixed_us``: the rest of the batch's wall time;
    ``batch_us``: the whole. None when a batch's stages are unknown.
    """
    steady = batches[1:] if len(batches) > 1 else batches
    records = sum(b["records"] for b in steady)
    if not steady or records == 0 or any(not b.get("stage_task_ms") for b in steady):
        return {k: None for k in ("combiner_task_us", "combiner_wall_us", "after_wall_us", "fixed_us", "batch_us")}
    comb_task = sum(sum(b["stage_task_ms"][0]) for b in steady)
    comb_wall = sum(list_schedule(b["stage_task_ms"][0], slots) for b in steady)
    after = sum(stages_makespan(b["stage_task_ms"][1:], slots) for b in steady)
    total = sum(b["batch_ms"] for b in steady)
    us = 1000.0 / records
    return {"combiner_task_us": comb_task * us, "combiner_wall_us": comb_wall * us, "after_wall_us": after * us,
            "fixed_us": max(0.0, total - comb_wall - after) * us, "batch_us": total * us}  # fmt: skip


def predicted_check(config: str, one: dict[str, Any], measured: dict[str, Any] | None, slots: int) -> dict[str, Any]:
    """The model check of ``config``: its ``local[1]`` batches replayed on ``slots`` slots, against ``measured``.

    ``one`` and ``measured`` are e2e-bench run documents: the ``local[1]`` drain and the drain on ``slots`` slots.
    """
    out: dict[str, Any] = {"config": config}
    if "error" in one or measured is None:
        return out | {"error": {"total": None}, "failed": one.get("error", "no measured run to compare with")}
    batches = one["spark"]["per_batch"]
    stages = one["spark"]["stage_task_ms"]
    pred = [batch_ms_on(b["batch_ms"], st, 1, slots) if st else None for b, st in zip(batches, stages, strict=True)]
    meas = measured["spark"]["batch_ms"]
    if any(p is None for p in pred[1:]) or len(pred) != len(meas):
        return out | {"error": {"total": None},
                      "failed": f"batches {len(pred)} vs {len(meas)} or stages unknown"}  # fmt: skip
    steady_p = [float(p) for p in pred[1:] if p is not None]
    steady_m = [float(m) for m in meas[1:]]
    records = sum(b["input_rows"] for b in batches[1:])
    return out | {
        "one_slot_ms": [b["batch_ms"] for b in batches[1:]],
        "predicted_ms": steady_p,
        "measured_ms": steady_m,
        "one_slot_rate": one["spark"]["steady_rate"],
        "predicted_rate": records / (sum(steady_p) / 1000) if sum(steady_p) else None,
        "measured_rate": measured["spark"]["steady_rate"],
        "error": model_error(steady_p, steady_m),
        "exact": one["exactness"]["exact"],
    }
