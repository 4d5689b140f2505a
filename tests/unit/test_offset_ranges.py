"""Planning offset ranges: proportional budget, ends never below starts, minPartitions splitting."""

from __future__ import annotations

import pytest

from connectors.offset_ranges import OffsetRange, distribute_budget, floor_at, split_ranges
from connectors.spark_source import KafkaPartition, KafkaStreamReader, _Config


def test_budget_is_proportional_to_real_lag() -> None:
    starts = {"t": {"0": 0, "1": 10, "2": 5, "3": 0}}
    ends = {"t": {"0": 9000, "1": 1010, "2": 5, "3": 1000}}  # lags 9000, 1000, 0, 1000
    got = distribute_budget(starts, ends, 1100)
    assert got == {"t": {"0": 900, "1": 110, "2": 5, "3": 100}}  # every partition takes 10 % of its lag
    assert distribute_budget({"t": {"0": 0}}, {"t": {"0": 7}}, None) == {"t": {"0": 7}}
    odd = distribute_budget({"t": {"0": 0, "1": 0, "2": 0}}, {"t": {"0": 10, "1": 10, "2": 10}}, 10)
    assert sum(odd["t"].values()) == 10 and max(odd["t"].values()) - min(odd["t"].values()) == 1


def test_planned_end_never_below_start() -> None:
    starts = {"t": {"0": 100, "1": 50}}
    short = {"t": {"0": 97, "1": 80}}  # partition 0: an end probed short of the checkpointed start
    assert distribute_budget(starts, short, None) == {"t": {"0": 100, "1": 80}}
    assert distribute_budget(starts, short, 10) == {"t": {"0": 100, "1": 60}}
    assert floor_at(short, starts) == {"t": {"0": 100, "1": 80}}


def test_min_partitions_unset_or_satisfied_keeps_one_range_per_partition() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 0, 10)]
    assert split_ranges(ranges, None) == ranges  # empty range kept: task i = partition i
    assert split_ranges(ranges, 2) == ranges


def test_min_partitions_splits_large_ranges_proportionally() -> None:
    ranges = [OffsetRange("t", 0, 1000, 1900), OffsetRange("t", 1, 0, 100), OffsetRange("t", 2, 7, 7)]
    got = split_ranges(ranges, 10)
    # 900 of 1000 records -> 9 pieces of 100; the small range stays whole; the empty one is dropped
    assert [(r.partition, r.start, r.end) for r in got] == [(0, 1000 + 100 * i, 1100 + 100 * i) for i in range(9)] + [
        (1, 0, 100)
    ]


@pytest.mark.parametrize("sizes,min_parts", [([1, 2, 3], 5), ([1000, 1, 1], 7), ([10], 3), ([5, 5], 16), ([0, 9], 4)])
def test_min_partitions_pieces_cover_each_range_exactly(sizes: list[int], min_parts: int) -> None:
    ranges = [OffsetRange("t", p, 10 * p, 10 * p + s) for p, s in enumerate(sizes)]
    got = split_ranges(ranges, min_parts)
    for r in ranges:
        pieces = [g for g in got if g.partition == r.partition]
        if r.size == 0:
            assert not pieces
            continue
        assert pieces[0].start == r.start and pieces[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:], strict=False))
        assert all(g.size > 0 for g in pieces)
        assert max(g.size for g in pieces) - min(g.size for g in pieces) <= 1
    assert len(got) >= min(min_parts, sum(sizes)) - len(sizes)  # about min_parts tasks


def test_source_plans_min_partitions_tasks() -> None:
    base = {"kafka.bootstrap.servers": "x:1", "subscribe": "t"}
    with pytest.raises(ValueError, match="'minPartitions' must be a positive integer \\(got '0'\\)"):
        _Config.from_options({**base, "minPartitions": "0"})
    reader = KafkaStreamReader(_Config.from_options({**base, "minPartitions": "4"}))
    parts = reader.partitions({"t": {"0": 0, "1": 0}}, {"t": {"0": 300, "1": 100}})
    assert all(isinstance(p, KafkaPartition) for p in parts)
    assert [(p.partition, p.start, p.end) for p in parts] == [(0, 0, 100), (0, 100, 200), (0, 200, 300), (1, 0, 100)]
    plain = KafkaStreamReader(_Config.from_options(base)).partitions({"t": {"0": 0, "1": 0}}, {"t": {"0": 3, "1": 0}})
    assert [(p.partition, p.start, p.end) for p in plain] == [(0, 0, 3), (1, 0, 0)]
