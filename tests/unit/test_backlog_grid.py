"""The backlog grid's measurement of one cell (benchmarks.backlog_grid)."""

from __future__ import annotations

import numpy as np

from benchmarks.backlog_grid import cell_quality
from benchmarks.workloads import zipf_keys


def test_a_cell_is_measured_per_micro_batch_from_the_offset_against_its_floor() -> None:
    keys = np.random.default_rng(3).permutation(1_000)[zipf_keys(120_000, 0.8, 1_000, 42)].astype(np.int64)
    ratio, rep, floor = cell_quality(keys, 16, 50_000, 10, 18_500)
    live_ratio, live_rep, live_floor = cell_quality(keys, 16, 50_000, 10, 18_500, backlog=False)
    assert floor == live_floor and 1.0 <= floor <= rep < live_rep
    assert 1.0 <= ratio <= 1.05 and live_ratio >= 1.0


def test_routers_that_own_their_keys_are_measured_together() -> None:
    # two routers, each fed the keys of its own raw partitions, catching up: each places its keys as one router
    # (1.086 partials per key when they cooperated, as before 2026-11-30)
    keys = np.random.default_rng(3).permutation(1_000)[zipf_keys(120_000, 0.8, 1_000, 42)].astype(np.int64)
    ratio, rep, floor = cell_quality(keys, 8, 50_000, 10, 18_500, routers=2)
    assert 1.0 <= ratio <= 1.05 and floor <= rep <= floor + 0.05
