"""The quality sweep on a few cells per axis: Dalton (the default) is never dominated and stays within its caps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.sweep import (
    Cell,
    Result,
    caps,
    dominates,
    grid,
    measure,
    replication_floor,
    run_sweep,
    stream_keys,
    summary,
    write_sweep,
)

# A few cells per axis (skew, n, distinct keys), 5 micro-batches of 20,000 tuples; the full grid (W in 5k, 20k,
# 100k) is ``skewroute bench --suite sweep``.
CELLS = [
    c
    for c in grid((0.6, 1.0, 1.5, 2.0), (2, 8, 32), (1_000, 100_000), windows=(20_000,), datasets=False)
    if (c.skew, c.n, c.spec.split("keys=")[1].split(",")[0])
    in {
        (0.6, 32, "100000"),
        (1.0, 8, "100000"),
        (1.0, 2, "1000"),
        (1.5, 2, "100000"),
        (1.5, 32, "100000"),
        (2.0, 8, "1000"),
    }
]


def test_dominance_rule() -> None:
    assert dominates((1.00, 1.00), (1.05, 1.00))  # lower balance by > 2 %, same replication
    assert dominates((1.00, 1.004), (1.05, 1.00))  # ... at no more than 0.005 higher replication
    assert not dominates((1.04, 1.00), (1.05, 1.00))  # within 2 %
    assert not dominates((1.00, 1.01), (1.05, 1.00))  # higher replication
    assert dominates((1.05, 1.00), (1.05, 1.03))  # lower replication by > 0.02 at equal balance
    assert dominates((1.055, 1.00), (1.05, 1.03))  # ... at a balance no more than 0.01 above
    assert not dominates((1.05, 1.00), (1.05, 1.015))
    assert not dominates((1.07, 1.00), (1.05, 1.10))  # worse balance


def test_caps_follow_the_floor() -> None:
    r = Result(Cell("x", "zipf", 8, 1.5), floor=1.02)
    assert caps(r) == (1.05, pytest.approx(1.07))


def test_grid_covers_every_micro_batch_size() -> None:
    cells = grid((1.5,), (8,), (1_000,), windows=(5_000, 100_000), datasets=False)
    assert [c.window for c in cells] == [5_000, 100_000]
    assert "tuples=500000" in cells[1].spec  # at least five micro-batches


def test_replication_floor_counts_the_pieces_a_hot_key_needs() -> None:
    # one 1,000-tuple micro-batch: a key with 600 tuples and 400 keys with one; n = 4 combiners hold <= 262 each
    keys = np.concatenate([np.zeros(600, np.int64), np.arange(1, 401, dtype=np.int64)])
    assert replication_floor(keys, 4, 1_000) == pytest.approx((3 + 400) / 401)
    assert replication_floor(np.arange(1000, dtype=np.int64), 4, 1_000) == 1.0  # no key needs splitting


def test_aligned_batches_are_the_earlier_measurement() -> None:
    keys = np.random.default_rng(0).integers(0, 100, 4_000).astype(np.int64)
    assert measure("hash", keys, 4, 1_000, aligned=True)[:2] == measure("hash", keys, 4, 1_000)[:2]  # stateless


def test_a_slide_shorter_than_the_micro_batch_splits_keys_more() -> None:
    """Why a route's slide follows the Spark trigger: a 1 s slide under a 5 s trigger re-places keys 5 times."""
    keys = stream_keys("zipf:s=1.5,keys=10000,tuples=100000,perm=1,seed=42")
    _, per_trigger, _ = measure("dalton", keys, 32, 20_000)
    _, per_fifth, _ = measure("dalton", keys, 32, 20_000, slides=5)
    assert per_trigger < 1.05 < per_fifth - 0.05


@pytest.fixture(scope="module")
def results() -> list[Result]:
    assert len(CELLS) == 6
    return run_sweep(CELLS, ("dalton", "hash", "pkg", "cam", "fish", "dchoices"))


def test_dalton_is_on_the_front_of_every_cell(results: list[Result]) -> None:
    for r in results:
        assert not r.dominators["dalton"], (r.cell, r.balance, r.replication)
        assert "dalton" in r.frontier


def test_dalton_within_its_targets(results: list[Result]) -> None:
    for r in results:
        cb, cr = caps(r)
        assert r.balance["dalton"] <= cb, (r.cell, r.balance["dalton"])
        assert r.replication["dalton"] <= cr, (r.cell, r.replication["dalton"], r.floor)
    assert not summary(results)["over_caps"]


def test_report_marks_the_front(results: list[Result], tmp_path: Path) -> None:
    path = write_sweep(results, tmp_path)
    text = path.read_text(encoding="utf-8")
    assert text.count("\n| zipf") == len(results)
    assert "dominated on 0 cell(s)" in text
    assert (tmp_path / "sweep.json").exists()


@pytest.mark.extended
def test_full_sweep_dalton_never_dominated() -> None:
    """The whole grid at W = 20,000 (100k tuples per cell): the front everywhere (the targets are reported)."""
    results = run_sweep(grid(windows=(20_000,)))
    assert not summary(results)["dominated"]
    for r in results:
        assert r.balance["dalton"] <= caps(r)[0], r.cell
