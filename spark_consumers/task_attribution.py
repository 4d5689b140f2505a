"""Which combiner-stage task read which Kafka partition: turning per-task lists into per-combiner lists.

Combiner ``i`` is partition ``i`` of the combiner topic. Spark numbers the scan tasks of a micro-batch in the
order its source planned them:

* skewroute's Python source plans one task per partition, in partition order, empty ranges included (unless
  ``minPartitions`` cuts ranges into pieces), so task ``i`` is combiner ``i`` whenever there are exactly as
  many tasks as partitions (method ``source-order``).
* Spark's JVM Kafka source (``spark.source: kafka``) builds its ranges from a hash map of topic partitions and
  drops the empty ones, so its task order says nothing about the partition. No task metric or accumulator
  names the partition either (its input metrics count records and bytes only), so the tasks are matched to
  partitions by size: a partition's offset delta in the batch (end - start, from the progress event) is the
  number of records its task read, plus the transaction markers of a transactional topic (markers take
  offsets but are never returned), so the delta is never smaller than the count. With exactly one task per
  non-empty partition, tasks and non-empty partitions are paired by rank: largest count with largest delta,
  ties in task order and partition order. When every task's count equals its partition's delta the pairing is
  exact (``by-records``; tied partitions read the same count, only their task times may swap); when deltas
  exceed counts (markers) it is the best guess by rank (``by-rank``: sorted pairing is feasible whenever any
  pairing is, but two partitions whose marker counts differ may swap when their record counts are close).
  Partitions with an empty range get no task: 0 records and 0 ms.

When the tasks cannot be matched (more or fewer tasks than partitions, e.g. ``minPartitions`` split a range;
or a task read more records than its paired partition's delta) the lists keep Spark's task order and the
method says so (``unattributed``): sums and max/median ratios stay right, the index does not name a combiner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Attribution", "attribute_tasks", "match_by_records", "partition_deltas"]

SOURCE_ORDER = "source-order"
BY_RECORDS = "by-records"
BY_RANK = "by-rank"
UNATTRIBUTED = "unattributed"


@dataclass(frozen=True)
class Attribution:
    """``tasks[i]``: the task index (into the stage's task list) of combiner ``i``; ``None``: it had no task."""

    tasks: list[int | None]
    method: str
    reason: str = ""

    def reorder(self, values: Sequence[int]) -> list[int]:
        """``values`` (one per task, in task order) as one per combiner (0 for a combiner without a task)."""
        return [0 if t is None else values[t] for t in self.tasks]


def partition_deltas(start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]]) -> list[int]:
    """Offsets each partition advanced in the batch, in (topic, partition number) order.

    ``start``/``end`` are ``{topic: {partition: offset}}``. A partition missing from ``start`` (the first
    batch reports no start offsets) counts from 0; a partition that went backwards counts 0.
    """
    out: list[int] = []
    for t in sorted(end):
        for p in sorted(end[t], key=int):
            out.append(max(0, end[t][p] - start.get(t, {}).get(p, 0)))
    return out


def match_by_records(task_records: Sequence[int], deltas: Sequence[int]) -> Attribution:
    """Pair tasks with the non-empty partitions by rank (see the module docstring)."""
    task_order: list[int | None] = list(range(len(task_records)))
    full = [i for i, d in enumerate(deltas) if d > 0]
    if len(full) != len(task_records):
        why = f"{len(task_records)} tasks for {len(full)} non-empty partitions"
        return Attribution(task_order, UNATTRIBUTED, why)
    by_delta = sorted(full, key=lambda i: (-deltas[i], i))
    by_count = sorted(range(len(task_records)), key=lambda j: (-task_records[j], j))
    tasks: list[int | None] = [None] * len(deltas)
    exact = True
    for part, task in zip(by_delta, by_count, strict=True):
        if task_records[task] > deltas[part]:
            why = f"task {task} read {task_records[task]} records, more than partition {part}'s {deltas[part]} offsets"
            return Attribution(task_order, UNATTRIBUTED, why)
        exact = exact and task_records[task] == deltas[part]
        tasks[part] = task
    return Attribution(tasks, BY_RECORDS if exact else BY_RANK)


def attribute_tasks(source: str, task_records: Sequence[int], deltas: Sequence[int]) -> Attribution:
    """The combiner of each task for ``source`` (``python`` or ``kafka``, as ``spark.source``).

    ``deltas``: the batch's per-partition offset deltas (:func:`partition_deltas`), one per combiner.
    """
    if source == "kafka":
        return match_by_records(task_records, deltas)
    if source != "python":
        raise ValueError(f"source must be 'python' or 'kafka' (got source={source!r})")
    order: list[int | None] = list(range(len(task_records)))
    if len(task_records) == len(deltas):
        return Attribution(order, SOURCE_ORDER)
    return Attribution(order, UNATTRIBUTED, f"{len(task_records)} tasks for {len(deltas)} partitions")
