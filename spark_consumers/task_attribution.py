"""Which combiner-stage task read which Kafka partition: turning per-task lists into per-combiner lists.

Combiner ``i`` is partition ``i`` of the combiner topic. Spark numbers the scan tasks of a micro-batch in the
order its source planned them:

* skewroute's Python source plans one task per partition, in partition order, empty ranges included (unless
  ``minPartitions`` cuts ranges into pieces), so task ``i`` is combiner ``i`` whenever there are exactly as
  many tasks as partitions (method ``source-order``).
* Spark's JVM Kafka source (``spark.source: kafka``) builds its ranges from a hash map of topic partitions and
  drops the empty ones, so its task order says nothing about the partition. No task metric names the
  partition either (input metrics count records and bytes; the reader's custom metrics count data loss and
  out-of-range offsets, as of spark-sql-kafka 4.2.0), so the tasks are matched to
  partitions by size: a partition's offset delta in the batch (end - start, from the progress event) is the
  number of records its task read, plus the transaction markers of a transactional topic (markers take
  offsets but are never returned, and so do aborted records under ``read_committed``), so a task never read
  more records than its partition's delta. With exactly one task per non-empty partition, tasks and non-empty
  partitions are paired by rank: largest count with largest delta, ties in task order and partition order.
  When the counts fit the deltas in one way only (for every count ``v``, as many partitions have a delta
  ``>= v`` as tasks have a count ``>= v``: always so without markers, where counts equal deltas) the
  per-combiner counts are exact (``by-records``; tasks with equal counts may swap their times). Otherwise
  (markers, and counts close enough to fit either way) the rank pairing is a best guess (``by-rank``): of the
  pairings that fit, it spreads the markers most evenly over the partitions, as a transaction's commit marks
  every partition it wrote to.
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
    for part, task in zip(by_delta, by_count, strict=True):
        if task_records[task] > deltas[part]:
            why = f"task {task} read {task_records[task]} records, more than partition {part}'s {deltas[part]} offsets"
            return Attribution(task_order, UNATTRIBUTED, why)
        tasks[part] = task
    return Attribution(tasks, BY_RECORDS if _one_fit(task_records, [deltas[i] for i in full]) else BY_RANK)


def _one_fit(counts: Sequence[int], deltas: Sequence[int]) -> bool:
    """Whether every pairing with count <= delta gives each partition the same count (see the module docstring)."""
    return all(sum(d >= v for d in deltas) == sum(c >= v for c in counts) for v in set(counts))


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
