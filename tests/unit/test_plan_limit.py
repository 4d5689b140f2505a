"""benchmarks.plan_limit's references: a packing with hindsight, and routing planned on the last micro-batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.plan_limit import main, offline_replication, pack, planned_replication, route_planned
from benchmarks.sweep import replication_floor
from benchmarks.workloads import zipf_keys


def test_pack_keeps_every_combiner_within_its_cap_and_splits_only_what_does_not_fit() -> None:
    counts = [130, 90, 60, 60, 40, 20]  # 400 tuples on 4 combiners of 105
    plan = pack(list(range(6)), counts, 4, 105)
    loads = np.zeros(4, dtype=int)
    for k, pieces in plan.items():
        assert sum(t for _, t in pieces) == counts[k]
        for c, t in pieces:
            loads[c] += t
    assert loads.max() <= 105
    assert len(plan[0]) == 2  # 130 > 105: two pieces
    assert all(len(plan[k]) == 1 for k in (2, 3, 4, 5))  # the small keys stay whole
    with pytest.raises(ValueError, match="do not fit"):
        pack([0, 1], [300, 200], 4, 105)


def test_offline_packing_reaches_the_floor_on_a_skewed_stream() -> None:
    keys = zipf_keys(40_000, 1.5, 1_000, 42)
    assert np.mean(offline_replication(keys, 8, 10_000)) == pytest.approx(replication_floor(keys, 8, 10_000), abs=0.01)


def test_routing_on_a_plan_never_passes_the_cap_while_a_combiner_has_room() -> None:
    keys = np.array([0] * 60 + [1] * 30 + [2] * 10, dtype=np.int64)
    np.random.default_rng(3).shuffle(keys)
    plan = {0: [[0, 25], [1, 25]], 1: [[2, 25]], 2: [[3, 25]]}  # key 0 came larger, key 1 too
    out = route_planned(keys, plan, 4, 26)
    assert np.bincount(out, minlength=4).max() <= 26
    assert set(out[keys == 2].tolist()) == {3}  # as planned


def test_the_plan_on_the_last_micro_batch_balances_a_steady_stream(tmp_path: Path) -> None:
    keys = zipf_keys(40_000, 1.5, 1_000, 42)
    reps, ratios = planned_replication(keys, 8, 10_000)
    assert len(reps) == 4 and max(ratios) <= 1.05
    argv = ["--spec", "zipf:s=1.5,keys=1000,tuples=40000", "-n", "8", "--windows", "10000", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert (tmp_path / "plan-limit.json").exists()
