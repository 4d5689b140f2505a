"""The many-core model of e2e-bench (list-scheduled stages + a fixed part) and the heavy profile's check."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.e2e.exact import heavy_exactness, scores
from benchmarks.e2e.model import batch_ms_on, breakdown, model_error, modelled_drain, stages_makespan
from spark_consumers.aggregations import score_reference


def test_stages_run_one_after_the_other_each_list_scheduled() -> None:
    stages = [[40, 10, 10, 10, 10], [5, 5]]
    assert stages_makespan(stages, 1) == 80 + 10
    assert stages_makespan(stages, 2) == 40 + 5  # the 40 ms straggler bounds the first stage
    assert stages_makespan(stages, 128) == 40 + 5
    assert stages_makespan([[], [3]], 4) == 3


def test_batch_on_more_slots_keeps_the_fixed_part() -> None:
    stages = [[30, 30, 30, 30], [10, 10]]
    # measured on 1 slot: 170 ms of batch, 140 of them in tasks -> 30 fixed
    assert batch_ms_on(170, stages, 1, 2) == pytest.approx(30 + 60 + 10)
    assert batch_ms_on(170, stages, 1, 4) == pytest.approx(30 + 30 + 10)
    assert batch_ms_on(100, stages, 1, 1) == pytest.approx(140)  # tasks beyond the wall time: fixed floored at 0


def test_modelled_drain_skips_the_first_batch_and_needs_every_stage() -> None:
    batches = [
        {"records": 1000, "batch_ms": 5000, "stage_task_ms": [[100]]},  # the query's start: not steady
        {"records": 1000, "batch_ms": 250, "stage_task_ms": [[100, 100], [20, 20]]},
        {"records": 1000, "batch_ms": 250, "stage_task_ms": [[100, 100], [20, 20]]},
    ]
    one = modelled_drain(batches, 2, 2)
    assert one == {"rate": 2000 / 0.5, "ms": 500}
    many = modelled_drain(batches, 2, 8)  # (250 - 120) fixed + 100 + 20 per batch
    assert many["ms"] == pytest.approx(500) and many["rate"] == pytest.approx(4000)
    assert modelled_drain([*batches, {"records": 1, "batch_ms": 1, "stage_task_ms": None}], 2, 8)["rate"] is None


def test_model_error_is_the_drain_time_error() -> None:
    e = model_error([110, 90, 100], [100, 100, 100])
    assert e["total"] == pytest.approx(0.0) and e["batch_mean_abs"] == pytest.approx(0.2 / 3)
    assert model_error([120], [100])["total"] == pytest.approx(0.2)
    assert model_error([], [])["total"] is None


def test_breakdown_per_record() -> None:
    batches = [{"records": 10, "batch_ms": 1, "stage_task_ms": [[1]]},
               {"records": 1000, "batch_ms": 200, "stage_task_ms": [[100, 60], [30, 10]]}]  # fmt: skip
    b = breakdown(batches, 2)
    assert b == pytest.approx({"combiner_task_us": 160.0, "combiner_wall_us": 100.0, "after_wall_us": 30.0,
                               "fixed_us": 70.0, "batch_us": 200.0})  # fmt: skip


def test_vectorised_scores_equal_the_reference() -> None:
    values = np.array([0, 1, -1, -7, 999, 2**31 + 5, -(2**40), 10**15])
    assert scores(values, 13).tolist() == [score_reference(float(v), 13) for v in values]


class _Data:
    def __init__(self, keys: list[str], times: list[int], values: list[int]) -> None:
        self.keys, self.times, self.values = np.array(keys), np.array(times), np.array(values)


def test_heavy_check_finds_a_wrong_score_and_a_percentile_out_of_bounds() -> None:
    keys = ["a"] * 100 + ["b"] * 3
    values = list(range(100)) + [5, 6, 7]
    data = _Data(keys, [1_000] * 103, values)
    qs, rounds = (0.5, 0.99), 3
    sa, sb = int(scores(np.arange(100), rounds).sum()), int(scores(np.array([5, 6, 7]), rounds).sum())
    results = {b"a": {"window_start": 0, "key": "a", "score": sa, "percentiles": [49.0, 98.0]},
               b"b": {"window_start": 0, "key": "b", "score": sb, "percentiles": [6.0, 7.0]}}  # fmt: skip
    aggs = ("count", "percentiles", "score")
    ok = heavy_exactness(data, results, 10_000, aggs, rounds, qs, 10_000)
    assert ok == {"checked": 2, "wrong": 0, "examples": []}
    results[b"a"]["percentiles"] = [60.0, 98.0]  # rank 61 for the median of 100 values at accuracy 10,000
    results[b"b"]["score"] = sb + 1
    bad = heavy_exactness(data, results, 10_000, aggs, rounds, qs, 10_000)
    assert bad["wrong"] == 2 and any("p0.5 60.0 outside" in e for e in bad["examples"])
    assert any("score" in e for e in bad["examples"])
    # at accuracy 10 the rank error is 10 of 100 values: 60 is within it
    assert heavy_exactness(data, results, 10_000, ("percentiles",), rounds, qs, 10)["wrong"] == 0
    assert heavy_exactness(data, results, 10_000, ("count",), rounds, qs, 10) == {"checked": 0, "wrong": 0,
                                                                                  "examples": []}  # fmt: skip
