"""The layout probe's drain simulations (``benchmarks.e2e.layout``): offset cuts, live triggers, settings merge."""

from __future__ import annotations

import numpy as np

from benchmarks.e2e.layout import _merge, simulate, simulate_live


def _parts() -> dict[int, tuple[np.ndarray, np.ndarray]]:
    # partition 0: key a every ms for 4 s; partition 1: keys a and b alternating for 4 s, half as many records
    t0 = np.arange(4_000, dtype=np.int64)
    t1 = np.arange(0, 4_000, 2, dtype=np.int64)
    keys1 = np.where(np.arange(t1.size) % 2 == 0, "a", "b")
    return {0: (np.full(t0.size, "a"), t0), 1: (keys1, t1)}


def test_live_triggers_cut_by_event_time_and_count_partials_per_task() -> None:
    layout = simulate_live(_parts(), 1_000, 10_000, 2)
    assert len(layout.batches) == 2  # four seconds: the first and the last are left out
    for b in layout.batches:
        assert b.records == 1_500  # 1,000 + 500 per second
        assert b.partials == 3  # (p0, a), (p1, a), (p1, b): one window
        assert b.groups == 2  # (window, a) and (window, b): a key split over two tasks is one group
        assert b.max_mean == 1_000 / 750
    assert layout.summary()["max_mean"] == round(1_000 / 750, 4)


def test_offset_cuts_take_the_same_share_of_every_partition() -> None:
    layout = simulate(_parts(), 1_500, 10_000)
    assert sum(b.records for b in layout.batches) == 6_000
    assert all(b.max_mean == 1_000 / 750 for b in layout.batches)  # each cut: two thirds from partition 0
    assert [b.groups for b in layout.batches] == [2, 2, 2, 2]  # every cut holds a and b of the one window


def test_an_override_merges_into_the_route_it_names() -> None:
    doc = {"routes": [{"name": "r", "partitioner": {"name": "dalton", "raw_keys": "partitioned"}}], "kafka": {"a": 1}}
    _merge(doc, {"routes": [{"partitioner": {"plan_together": True}}], "kafka": {"b": 2}})
    assert doc == {
        "routes": [{"name": "r", "partitioner": {"name": "dalton", "raw_keys": "partitioned", "plan_together": True}}],
        "kafka": {"a": 1, "b": 2},
    }
