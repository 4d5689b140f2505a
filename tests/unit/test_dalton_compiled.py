"""Dalton's compiled per-segment and per-scope loops: each against numpy's answer or its uncompiled twin."""

from __future__ import annotations

from typing import Any

import numpy as np

from router.partitioners.dalton.segments import segment_bounds, segment_bounds_py, segment_keys
from router.partitioners.dalton.sticky_plan import plan_scope, plan_scope_py, sum_by_slot
from router.partitioners.dalton.sticky_segment import (
    order_by,
    place_sticky_segment,
    place_sticky_segment_py,
    stable_order,
)


def test_stable_order_is_numpys_stable_argsort() -> None:
    rng = np.random.default_rng(3)
    for trial in range(600):
        m = int(rng.integers(0, 2_000))
        top = [1, 2, 255, 256, 70_000, 2**40][trial % 6]
        v = rng.integers(0, top, m, dtype=np.uint64)
        assert np.array_equal(stable_order(v), np.argsort(v, kind="stable")), (m, top)
    big = np.array([2**63 + 5, 3, 2**63 + 5, 0, 2**64 - 1], dtype=np.uint64)
    assert stable_order(big).tolist() == np.argsort(big, kind="stable").tolist()


def test_order_by_sorts_indices_by_key_ties_in_index_order() -> None:
    rng = np.random.default_rng(4)
    key = rng.integers(-5, 50, 3_000)
    for m in (0, 1, 7, 900):
        idx = rng.permutation(3_000)[:m].astype(np.intp)
        for descending in (False, True):
            expected = idx[np.argsort(-key[idx] if descending else key[idx], kind="stable")]
            assert order_by(idx, key, descending).tolist() == expected.tolist()


def _numpy_bounds(times: np.ndarray, slide: float, stats_window: float) -> list[int]:
    b, w = np.floor_divide(times, slide), np.floor_divide(times, stats_window)
    cuts = (np.flatnonzero((np.diff(b) != 0) | (np.diff(w) != 0)) + 1).tolist()
    return [0, *cuts, times.shape[0]]


def test_segment_bounds_cut_where_the_slide_or_the_statistics_window_changes() -> None:
    rng = np.random.default_rng(5)
    for trial in range(900):
        m = int(rng.integers(1, 2_000))
        slide = float(rng.choice([1, 7, 1_000, 0.3, 2.5]))
        stats_window = slide * float(rng.choice([1, 2, 0.5, 3]))
        if trial % 3 == 0:  # tuple counters
            times = np.sort(rng.integers(0, 50_000, m)).astype(np.float64)
        elif trial % 3 == 1:  # event times, not whole
            times = np.sort(rng.random(m) * 1e4)
        else:  # out of order: cut tuple by tuple
            times = rng.integers(0, 50_000, m).astype(np.float64)
        expected = _numpy_bounds(times, slide, stats_window)
        assert segment_bounds(times, slide, stats_window).tolist() == expected
        assert segment_bounds_py(times, slide, stats_window).tolist() == expected


def test_segment_keys_is_numpys_unique_with_counts_and_leaves_its_scratch_clean() -> None:
    rng = np.random.default_rng(6)
    seen = np.full(5_000, -1, dtype=np.intp)
    for m in (1, 10, 1_000, 4_000):
        values = rng.zipf(1.3, m).clip(0, 4_999).astype(np.intp)
        uniq, inv, counts = segment_keys(values, seen)
        ref_u, ref_inv = np.unique(values, return_inverse=True)
        assert uniq.tolist() == ref_u.tolist() and inv.tolist() == ref_inv.reshape(-1).tolist()
        assert counts.tolist() == np.bincount(ref_inv.reshape(-1)).tolist()
        assert (seen == -1).all()


def test_sum_by_slot_adds_up_a_scopes_segments() -> None:
    rng = np.random.default_rng(7)
    slots = rng.integers(0, 100_000, 3_000).astype(np.intp)
    counts = rng.integers(1, 9, 3_000).astype(np.int64)
    got_slots, got_counts = sum_by_slot(slots, counts)
    ref_slots, inv = np.unique(slots, return_inverse=True)
    assert got_slots.tolist() == ref_slots.tolist()
    assert got_counts.tolist() == np.bincount(inv.reshape(-1), weights=counts).tolist()


def _segment_args(rng: np.random.Generator, n: int, cooperative: bool) -> list[Any]:
    capacity, k, m = 4_000, 300, 1_500
    slots = rng.permutation(capacity)[:k].astype(np.intp)
    ids = rng.integers(0, 2**63, k, dtype=np.uint64) * np.uint64(2)
    inv = np.concatenate([np.arange(k), rng.zipf(1.3, m - k).clip(1, k) - 1]).astype(np.intp)
    rng.shuffle(inv)
    counts = np.bincount(inv, minlength=k).astype(np.int64)
    head = rng.random((capacity, n)) < 0.03
    by_id = np.sort(ids[rng.permutation(k)[:5]])
    shared_rows = rng.random((5, n)) < 0.4
    cand = np.zeros((capacity, 3), dtype=np.int16)
    cand[:, 1] = rng.integers(0, n, capacity)
    cand[:, 2] = (cand[:, 1] + rng.integers(1, max(n, 2), capacity)) % n
    last_comb = rng.integers(-1, n, capacity).astype(np.int16)
    others = rng.random(n) * 0.5 if rng.random() < 0.5 else np.zeros(n)  # routers planned together, or alone
    return [slots, ids, counts, inv, rng.random(k) < 0.02, head, slots, False, by_id, shared_rows,
            rng.integers(0, 400, n).astype(np.int64), others, cand, rng.random(n), last_comb, np.zeros((n, n)),
            0.05, 2.5, float(rng.integers(0, 3_000)), float(rng.integers(0, 6_000)), 4.0, cooperative]  # fmt: skip


def test_the_compiled_segment_placement_is_its_python_twin() -> None:
    rng = np.random.default_rng(8)
    for trial in range(24):
        n, cooperative = (2, 5, 8, 32)[trial % 4], trial % 2 == 1
        args = _segment_args(rng, n, cooperative)
        outs = []
        for fn in (place_sticky_segment, place_sticky_segment_py):
            mine = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            out, buf, rows = fn(*mine)
            outs.append((out.tolist(), buf[:rows].tolist(), mine[14].tolist(), mine[15].tolist()))
            pk, pc, pn = buf[:rows, 0], buf[:rows, 1], buf[:rows, 2]
            assert ((out >= 0) & (out < n)).all()
            assert np.bincount(pk, weights=pn, minlength=len(args[2])).tolist() == args[2].tolist()
            # every tuple lands on a piece of its key: the tuples per (key, combiner) are the pieces
            got = np.bincount(args[3] * n + out, minlength=len(args[2]) * n)
            assert got[pk * n + pc].tolist() == pn.tolist() and got.sum() == len(args[3])
        assert outs[0] == outs[1]


def test_the_compiled_scope_plan_is_its_python_twin() -> None:
    rng = np.random.default_rng(9)
    for n in (1, 3, 8, 32):
        slots = np.sort(rng.permutation(10_000)[:600]).astype(np.intp)
        counts = rng.zipf(1.4, 600).clip(1, 5_000).astype(np.float64)
        last = rng.integers(-1, n, 10_000).astype(np.int16)
        others = rng.random(n) * (n % 2)  # routers planned together (odd n), or alone
        outs = []
        for fn in (plan_scope, plan_scope_py):
            mine = last.copy()
            large, sets = fn(slots, counts, mine, n, 1.0, 64.0, 0.02 * (n % 2), others)
            outs.append((large.tolist(), sets.tolist(), mine.tolist()))
            assert (mine[slots[large]] == -1).all() and (sets.sum(axis=1) >= 1).all()
            small = np.setdiff1d(np.arange(600), large)
            assert ((mine[slots[small]] >= 0) & (mine[slots[small]] < n)).all()
        assert outs[0] == outs[1]


def test_window_add_raises_loads_and_marks_each_pair_once_per_slide() -> None:
    from router.partitioners.dalton.window import SlidingState

    rng = np.random.default_rng(10)
    n, capacity = 4, 50
    win = SlidingState(n, blocks=3, capacity=capacity)
    win.advance(0)
    loads, refs, head = np.zeros(n, np.int64), np.zeros((capacity, n), np.int64), np.zeros((capacity, n), bool)
    for _ in range(6):  # one slide: pairs repeat across calls, never within one
        pairs = rng.permutation(capacity * n)[:30]
        slots, combs, weights = pairs // n, pairs % n, rng.integers(1, 9, 30)
        win.add(slots.astype(np.intp), combs.astype(np.intp), weights.astype(np.int64))
        np.add.at(loads, combs, weights)
        refs[slots[~head[slots, combs]], combs[~head[slots, combs]]] += 1
        head[slots, combs] = True
    assert win.head_load.tolist() == loads.tolist() and win.window_load.tolist() == loads.tolist()
    assert win.head.tolist() == head.tolist() and win.refcount.astype(np.int64).tolist() == refs.tolist()
    win.advance(1)  # the slide closes: its pairs leave the head, stay referenced by the window
    assert not win.head.any() and win.refcount.astype(np.int64).tolist() == refs.tolist()
