"""Dalton's sticky placement: the compiled kernels against their Python references, one router's plan of the
next scope, the scope's bounded memory and the combiner sets cooperating routers share."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from benchmarks.workloads import zipf_keys
from router.partitioners.dalton.partitioner import fit_accept
from router.partitioners.dalton.sticky import (
    fit_shares,
    fit_shares_py,
    greedy_homes_py,
    place_keys,
    place_keys_py,
    plan_homes,
    plan_homes_py,
)
from tests.unit.test_dalton import N, make


def test_sticky_kernel_matches_its_python_reference() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 5, 8):
        k = 300
        counts = rng.zipf(1.6, k).clip(1, 400).astype(np.int64)
        c1 = rng.integers(0, n, k).astype(np.intp)
        c2 = ((c1 + rng.integers(1, max(n, 2), k)) % n).astype(np.intp)
        held = rng.random((k, n)) < 0.05
        order = rng.permutation(k).astype(np.intp)
        base = rng.integers(0, 200, n).astype(np.float64)
        level = (base.sum() + counts.sum()) / n
        for least, loose in itertools.product((False, True), repeat=2):
            outs = []
            for fn in (place_keys, place_keys_py):
                loads = base.copy()
                buf = np.zeros((k + int(held.sum()) + 2 * n + 1, 3), dtype=np.int64)
                rows = fn(order, counts, c1, c2, held, loads, level * 1.02, level * 1.04, buf, least, loose)
                outs.append((buf[:rows].tolist(), loads.tolist()))
                assert buf[:rows, 2].sum() == counts.sum() and loads.sum() == base.sum() + counts.sum()
                pairs = buf[:rows, 0] * n + buf[:rows, 1]
                assert np.unique(pairs).size == rows  # one piece per (key, combiner)
            assert outs[0] == outs[1]


def test_plan_kernel_matches_its_python_reference() -> None:
    rng = np.random.default_rng(7)
    for n in (1, 3, 8, 32):
        k = 500
        counts = rng.zipf(1.4, k).clip(1, 2_000).astype(np.float64)
        order = np.argsort(-counts, kind="stable").astype(np.intp)
        homes = rng.integers(-1, n, k).astype(np.intp)
        base = rng.integers(0, 50, n).astype(np.float64)
        target = (base.sum() + counts.sum()) / n
        outs = []
        for fn in (plan_homes, plan_homes_py):
            home, loads = homes.copy(), base.copy()
            moved = fn(order, counts, home, loads, target)
            outs.append((int(moved), home.tolist(), loads.tolist()))
            assert (home >= 0).all() and loads.sum() == pytest.approx(base.sum() + counts.sum())
        assert outs[0] == outs[1]


def test_the_compiled_share_fit_is_the_numpy_rounds_to_the_bit() -> None:
    """fit_accept's rounds run compiled; they must equal the vectorised rounds they replaced, bit for bit."""
    rng = np.random.default_rng(11)
    for trial in range(300):
        n = int(rng.integers(2, 33))
        pairs = rng.random((n, n)) * float(rng.integers(1, 10**6)) * (rng.random((n, n)) < rng.random())
        if trial % 3 == 0:
            pairs = np.floor(pairs)
        own = pairs.sum(axis=1)
        if own.sum() <= 0:
            continue
        mean = float(own.sum()) / n
        expected = np.ones(n)
        for _ in range(30):  # the numpy expression of the rounds
            load = own * expected + (pairs * (1.0 - expected)[:, None]).sum(axis=0)
            expected = np.clip(expected - 0.5 * (load - mean) / np.maximum(own, 1.0), 0.0, 1.0)
        for fn in (fit_shares, fit_shares_py):
            got = np.ones(n)
            fn(pairs, own, mean, got, 30)
            assert np.array_equal(got, expected), (trial, fn)
        assert np.array_equal(fit_accept(pairs), expected)


def test_plan_keeps_homes_that_fit_and_moves_the_rest_largest_first() -> None:
    counts = np.array([50.0, 40.0, 30.0, 20.0, 10.0])
    home = np.array([0, 0, 1, -1, 1], dtype=np.intp)  # combiner 0 would hold 90 of a mean of 75
    loads = np.zeros(2)
    moved = plan_homes_py(np.arange(5, dtype=np.intp), counts, home, loads, 75.0)
    # 50 stays; 40 would overfill combiner 0 and moves; 30 stays; 20 had no home; 10 no longer fits on 1
    assert home.tolist() == [0, 1, 1, 0, 0]
    assert loads.tolist() == [80.0, 70.0] and moved == 3


def test_the_plan_moves_fewer_keys_for_the_same_balance() -> None:
    # A largest-first packing places the key without a home (45) first, on combiner 0, and then moves both keys
    # that were at home there and two of combiner 1's: five keys move. Keeping homes and shedding from the
    # combiner over the target moves two of combiner 1's keys, as balanced. Each key that moves between the
    # slides of one Spark micro-batch costs one more partial there.
    counts = np.array([45.0, 20.0, 20.0, 10.0, 10.0, 10.0, 5.0])
    homes = np.array([-1, 0, 0, 1, 1, 1, 1], dtype=np.intp)
    order = np.arange(7, dtype=np.intp)
    home, loads = homes.copy(), np.zeros(2)
    assert greedy_homes_py(order, counts, home, loads, 60.0) == 5 and loads.tolist() == [60.0, 60.0]
    home, loads = homes.copy(), np.zeros(2)
    assert plan_homes_py(order, counts, home, loads, 60.0) == 3  # the key without a home, and two
    assert loads.tolist() == [60.0, 60.0] and home.tolist() == [1, 0, 0, 0, 1, 0, 1]


def test_the_plan_is_never_less_balanced_than_a_packing() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(2, 33))
        counts = np.sort(rng.zipf(1.3, 300).clip(1, 500).astype(np.float64))[::-1].copy()
        homes = rng.integers(-1, n, 300).astype(np.intp)
        target = counts.sum() / n
        order = np.arange(300, dtype=np.intp)
        greedy = np.zeros(n)
        moved_greedy = greedy_homes_py(order, counts, homes.copy(), greedy, target)
        loads = np.zeros(n)
        moved = plan_homes_py(order, counts, homes.copy(), loads, target)
        assert loads.max() <= greedy.max() and loads.sum() == pytest.approx(counts.sum())
        assert moved <= moved_greedy or loads.max() < greedy.max()


def test_one_router_plans_the_next_scope_on_the_closing_one() -> None:
    """Keys of a scope get homes for the next one; the plan is the state, so a restored router continues."""
    keys = zipf_keys(60_000, 1.2, 300, 3)
    times = np.arange(len(keys))
    a = make(window=120_000, slide=10_000)
    a.assign(keys[:25_000], times[:25_000])
    b = make(window=120_000, slide=10_000)
    b.restore(a.snapshot())
    assert a.scope_segments and a.state_version == 6
    outs = [p.assign(keys[25_000:], times[25_000:]).tolist() for p in (a, b)]
    assert outs[0] == outs[1]
    assert a.last_comb.tolist() == b.last_comb.tolist()


def test_one_router_scope_is_added_up_in_bounded_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small batches: the scope's segments are added up every few of them; the placement does not change."""
    from router.partitioners.dalton import placement_sticky as module

    keys = zipf_keys(30_000, 1.2, 300, 3)
    times = np.arange(len(keys))
    outs = []
    for limit in (8, 1 << 30):
        monkeypatch.setattr(module, "SCOPE_SEGMENTS", limit)
        part = make(window=120_000, slide=10_000)
        outs.append(np.concatenate([part.assign(keys[a : a + 50], times[a : a + 50]) for a in range(0, 30_000, 50)]))
        assert len(part.scope_segments) <= min(limit, 200)
    assert outs[0].tolist() == outs[1].tolist()


def test_sticky_sync_shares_combiner_sets_and_first_choice_shares() -> None:
    """SYNC rows of the sticky placement: split keys' combiner sets and the fitted shares (pseudo key)."""
    from router.partitioners.dalton.sync import ACCEPT_KEY

    keys = zipf_keys(30_000, 1.5, 1_000, 3)
    a, b = make(window=120_000, slide=10_000), make(window=120_000, slide=10_000)
    times = np.arange(len(keys))
    a.assign(keys[:25_000], times[:25_000])
    payload = a.sync_payload()
    assert ACCEPT_KEY in payload["qtable"] and [ACCEPT_KEY, 25_000] in payload["top_keys"]
    top = int(a.codec.encode([0]).ids[0])
    assert payload["qtable"][top].count(1.0) > 1  # the dominant key is split: its combiner set
    b.assign(keys[20_000:20_001], times[20_000:20_001])  # b is in the same scope
    b.sync_payload()
    row = [0.0] * N
    row[5] = 0.5
    before = b.accept.copy()
    b.apply_global({"qtable": {top: row, ACCEPT_KEY: [0.25] * N}, "hot": [ACCEPT_KEY, top]})
    assert ACCEPT_KEY not in b.hot_keys()
    assert b.shared_rows[list(b.shared_ids).index(top)].tolist() == [c == 5 for c in range(N)]
    # the agreed shares are the rule of the next scope: the current one keeps the rule it started with
    assert b.accept.tolist() == before.tolist() and b.next_accept.tolist() == [0.25] * N
    b.assign(keys[20_001:20_002], np.array([30_000]))  # the next scope
    assert b.accept.tolist() == [0.25] * N and b.next_accept is None
    assert payload["qtable"][ACCEPT_KEY] == a.fit.tolist()  # a router sends its own fit
