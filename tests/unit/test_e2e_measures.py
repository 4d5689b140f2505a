"""The e2e benchmark's computations: per-record latency, list-scheduling makespan, warm-up settling and drift."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.e2e.measures import drift, list_schedule, partials_floor, percentiles, record_latencies, settled


def test_list_schedule_replays_spark_handing_tasks_to_the_first_free_slot() -> None:
    tasks = [5.0, 1.0, 1.0, 1.0, 1.0, 3.0]
    # 2 slots: 5 | 1,1,1,1 (t=4) then 3 goes to slot 2 (free at 4) -> 7
    assert list_schedule(tasks, 2) == 7.0
    assert list_schedule(tasks, 1) == sum(tasks)
    assert list_schedule(tasks, 32) == 5.0  # one slot per task: the slowest task
    assert list_schedule(tasks, 6) == 5.0
    assert list_schedule([], 4) == 0.0


def test_list_schedule_of_a_skewed_stage_is_bounded_by_its_straggler() -> None:
    skewed = [800.0] + [100.0] * 7  # hash-like: one hot combiner
    balanced = [187.5] * 8  # the same work spread evenly
    assert list_schedule(skewed, 8) == 800.0
    assert list_schedule(balanced, 8) == 187.5
    assert list_schedule(skewed, 2) == 800.0  # slot 2 runs the 7 small tasks (700) meanwhile
    assert list_schedule(balanced, 2) == 750.0


def test_list_schedule_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="cores"):
        list_schedule([1.0], 0)
    with pytest.raises(ValueError, match="task time"):
        list_schedule([-1.0], 2)


def test_latency_is_the_first_result_counting_the_record() -> None:
    # group 0: three records produced at 0, 1, 2; results at 5 (count 2) and 9 (count 3)
    # group 1: one record produced at 4; its result at 6 (count 1)
    group = np.array([0, 0, 1, 0])
    produced = np.array([0.0, 1.0, 4.0, 2.0])
    res_group = np.array([0, 1, 0])
    res_count = np.array([3, 1, 2])
    res_time = np.array([9.0, 6.0, 5.0])
    lat = record_latencies(group, produced, res_group, res_count, res_time)
    assert lat.tolist() == [5.0, 4.0, 2.0, 7.0]


def test_latency_takes_the_earliest_result_at_or_above_a_count() -> None:
    # read back per results partition, an update with a higher count may be seen with an earlier timestamp
    lat = record_latencies(np.array([7, 7]), np.array([0.0, 0.5]), np.array([7, 7]), np.array([1, 2]),
                           np.array([3.0, 2.0]))  # fmt: skip
    assert lat.tolist() == [2.0, 1.5]


def test_latency_is_nan_for_records_no_result_counts() -> None:
    lat = record_latencies(np.array([0, 0, 2]), np.array([0.0, 1.0, 1.0]), np.array([0]), np.array([1]),
                           np.array([3.0]))  # fmt: skip
    assert lat[0] == 3.0
    assert math.isnan(lat[1]) and math.isnan(lat[2])
    assert np.isnan(record_latencies(np.array([1]), np.array([0.0]), np.array([], np.int64),
                                     np.array([], np.int64), np.array([]))).all()  # fmt: skip


def test_latency_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="length"):
        record_latencies(np.array([0, 1]), np.array([0.0]), np.array([0]), np.array([1]), np.array([1.0]))


def test_percentiles() -> None:
    p = percentiles(np.arange(101, dtype=float))
    assert p == {"p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None}


def test_warm_up_settles_when_two_consecutive_rates_are_close() -> None:
    # the measured shape of a cold session: the drain rate climbs over the first passes, then levels off
    assert not settled([4_031.0], 0.15)  # one pass says nothing
    assert not settled([4_031.0, 9_492.0], 0.15)  # +135 %: still warming
    assert settled([4_031.0, 9_492.0, 10_500.0], 0.15)  # within 15 % of the larger
    assert not settled([10_000.0, 8_400.0], 0.15)  # 16 % below: not settled (either direction counts)
    assert settled([10_000.0, 8_500.0], 0.15)
    assert not settled([None, 9_000.0], 0.15) and not settled([9_000.0, 0.0], 0.15)  # a pass without a rate
    with pytest.raises(ValueError, match="tolerance"):
        settled([1.0, 1.0], -0.1)


def test_drift_of_a_rate_measured_twice() -> None:
    assert drift(4_000.0, 11_000.0) == pytest.approx(1.75)
    assert drift(10_000.0, 9_000.0) == pytest.approx(-0.1)
    assert drift(None, 1.0) is None and drift(1.0, None) is None and drift(0.0, 1.0) is None
    assert drift(1.0, math.nan) is None


def test_partials_floor_counts_the_combiners_each_window_and_key_group_needs() -> None:
    # two micro-batches of 8 records on n = 2 (cap floor(1.05 * 8 / 2) = 4), 10-s windows
    keys = ["a"] * 6 + ["b"] * 2 + ["a", "b", "c", "d"] * 2
    times = [0] * 8 + [10_000, 10_000, 10_000, 10_000, 12_000, 12_000, 19_000, 19_000]
    # first: a has 6 records (2 combiners), b 2 (1); second: a, b, c, d with 2 records each in one window
    assert partials_floor(keys, times, 8, 2, 10_000) == [3.0, 4.0]
    # the input in event-time order: shuffled production order gives the same micro-batches
    order = [8, 0, 9, 1, 10, 2, 11, 3, 12, 4, 13, 5, 14, 6, 15, 7]
    assert partials_floor([keys[i] for i in order], [times[i] for i in order], 8, 2, 10_000) == [3.0, 4.0]
    # a group split by a window boundary is two groups; a trailing part micro-batch is left out
    assert partials_floor(["a"] * 4, [0, 0, 10_000, 10_000], 4, 2, 10_000) == [2.0]
    assert partials_floor(["a"] * 3, [0, 0, 0], 4, 2, 10_000) == []
