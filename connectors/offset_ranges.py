"""Planning a micro-batch's offset ranges: the per-trigger budget and ``minPartitions`` splitting.

Pure functions on offsets (no client), shared by the data source's driver side and its unit tests.

Budget (``maxOffsetsPerTrigger``): when the total lag ``L`` exceeds the budget ``B``, partition ``p`` with lag
``l_p`` gets ``B·l_p/L`` records (rounded down, the remainder one each to the largest leftovers). Every
partition therefore advances by the same *fraction* of its backlog per trigger, the way Spark's Kafka source
shares ``maxOffsetsPerTrigger``. Lags must be the partitions' real lags (true ends), never lags already capped
at the budget: capped lags would give every lagging partition an equal share, and the cold partitions of a
skewed topic would run ahead in event time.

``minPartitions`` (Spark's semantics): when a batch has fewer non-empty ranges than ``minPartitions``, large
ranges are cut into consecutive sub-ranges so that there are about ``minPartitions`` tasks. A range of size
``s`` out of a total ``S`` gets ``round(s/S·minPartitions)`` pieces (at least one); ranges that get one piece
are left whole and the count they take is removed before sharing the rest among the large ones. The pieces
of a range are near-equal, consecutive and cover it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OffsetRange", "Offsets", "distribute_budget", "floor_at", "split_ranges"]

#: ``{topic: {partition (str): next offset to read}}`` (JSON-able, the data source's offset format).
Offsets = dict[str, dict[str, int]]


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """Records (offsets) in the range; 0 when empty."""
        return max(0, self.end - self.start)


def floor_at(ends: Offsets, starts: Offsets) -> Offsets:
    """``ends`` with every partition raised to at least its start: a planned end is never below the start."""
    return {t: {p: max(e, starts.get(t, {}).get(p, e)) for p, e in ps.items()} for t, ps in ends.items()}


def distribute_budget(starts: Offsets, ends: Offsets, budget: int | None) -> Offsets:
    """End offsets taking at most ``budget`` records in total, shared in proportion to each partition's lag.

    ``ends`` must be the true ends (see the module docstring). A partition whose end is below its start keeps
    its start (never planned backwards).
    """
    lags = {(t, p): max(0, ends[t][p] - starts[t][p]) for t in starts for p in starts[t]}
    total = sum(lags.values())
    if budget is None or total <= budget:
        return {t: {p: starts[t][p] + lags[(t, p)] for p in starts[t]} for t in starts}
    take = {k: budget * lag // total for k, lag in lags.items()}
    rest = budget - sum(take.values())
    for k in sorted(lags, key=lambda k: (budget * lags[k] % total, lags[k]), reverse=True)[:rest]:
        take[k] += 1
    return {t: {p: starts[t][p] + take[(t, p)] for p in starts[t]} for t in starts}


def _pieces(size: int, total: int, parts: int) -> int:
    return max(1, round(size / total * parts)) if total else 1


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """``ranges`` cut into about ``min_partitions`` tasks (see the module docstring); order kept.

    Without ``min_partitions``, or when there are already enough non-empty ranges, ``ranges`` come back
    unchanged -- empty ones included, so task ``i`` stays Kafka partition ``i`` (combiner ``i``).
    """
    full = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(full) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in full)
    whole = {r for r in full if _pieces(r.size, total, min_partitions) == 1}
    split_total = total - sum(r.size for r in whole)
    split_parts = max(min_partitions - len(whole), 1)
    out: list[OffsetRange] = []
    for r in full:
        n = 1 if r in whole else _pieces(r.size, split_total, split_parts)
        start, left = r.start, r.size
        for i in range(n):
            step = left // (n - i)
            if step:
                out.append(OffsetRange(r.topic, r.partition, start, start + step))
            start, left = start + step, left - step
    return out
