"""Routers that own their keys, planned together (``router.partitioners.dalton.joint``)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.backlog_grid import cell_quality
from benchmarks.sweep import stream_keys
from router.choose.runner import sync_routers
from router.partitioners.dalton import DaltonPartitioner
from router.partitioners.dalton.joint import (
    FALLBACK,
    Report,
    added_up,
    changed,
    imbalance,
    in_step,
    joint_plan,
    off_balance,
    others_per_tuple,
    scope_report,
    start_scope,
)

N = 8


def test_a_router_alone_or_with_everything_expects_nothing_of_others() -> None:
    assert not others_per_tuple(N, 1_000.0, 1_000.0, {}, set()).any()
    assert not others_per_tuple(N, 1_000.0, 0.0, {}, set()).any()


def test_without_large_keys_the_others_load_every_combiner_alike() -> None:
    others = others_per_tuple(N, 4_000.0, 1_000.0, {}, set())
    assert others == pytest.approx(np.full(N, 3.0 / N))


def test_a_large_key_fills_combiners_and_the_others_fill_around_it() -> None:
    # 4,000 tuples, a mean of 500 per combiner; router A holds a key of 1,600 (3.2 means) and 400 more tuples
    total, key = 4_000.0, 1_600.0
    a = others_per_tuple(N, total, 2_000.0, {7: key}, {7})
    b = others_per_tuple(N, total, 2_000.0, {7: key}, set())
    assert (a[:3] == 0).all()  # the key's three full combiners: nobody else goes there
    mine_a, mine_b = 500.0 - a * 2_000.0, 500.0 - b * 2_000.0  # what each is expected to put per combiner
    assert mine_a + mine_b == pytest.approx(np.full(N, 500.0))  # the sum is balanced
    assert mine_a.sum() == pytest.approx(2_000.0) and mine_b.sum() == pytest.approx(2_000.0)
    assert (mine_b[:3] == pytest.approx(0.0)) and mine_b[3:].min() > 0  # B's tuples go around the key


def test_reports_add_up_per_scope_and_keep_the_last_loads() -> None:
    ids = np.array([1, 2, 3], dtype=np.uint64)
    first = scope_report(N, 4, ids, np.array([600.0, 300.0, 100.0]), np.full(N, 125.0))
    second = scope_report(N, 5, ids, np.array([500.0, 100.0, 100.0]), np.arange(N, dtype=float))
    assert first.keys == {1: 600.0, 2: 300.0}  # at least its own mean (1,000 / 8)
    both = added_up([first, second])
    assert (both.first, both.last, both.records, both.scopes) == (4, 5, 1_700.0, 2)
    assert both.keys == {1: 1_100.0, 2: 400.0, 3: 100.0} and both.loads == second.loads  # 3: large in the second
    assert both.per_scope().records == 850.0 and both.per_scope().keys[1] == 550.0


def test_a_plan_holds_from_the_same_scope_on_every_router_and_only_in_step() -> None:
    reports = [Report(0, 9, 1.0), Report(0, 11, 1.0), Report(0, 10, 1.0)]
    assert start_scope(reports) == 13 and in_step(reports)
    assert not in_step([*reports, Report(0, 20, 1.0)])  # a backlog: each reads at its own pace


def test_a_plan_is_taken_when_it_moves_enough_load() -> None:
    old = np.full(N, 0.5)
    assert not changed(old, old * 1.01) and changed(old, old * 1.05)
    assert changed(np.zeros(N), old)


def test_a_sum_off_balance_is_seen_only_on_one_planned_scope() -> None:
    even = tuple([100.0] * N)
    hot = tuple([100.0] * (N - 1) + [100.0 * (1 + 4 * FALLBACK * 0.02)])  # the sum: 1.17 times its mean
    share = imbalance([Report(0, 6, 1.0, loads=hot), Report(0, 6, 1.0, loads=even)], 5)
    assert share is not None and off_balance(share, 0.02)
    share = imbalance([Report(0, 6, 1.0, loads=even), Report(0, 6, 1.0, loads=even)], 5)
    assert share is not None and not off_balance(share, 0.02)
    assert imbalance([Report(0, 6, 1.0, loads=hot), Report(0, 5, 1.0, loads=even)], 5) is None  # two scopes
    assert imbalance([Report(0, 4, 1.0, loads=hot), Report(0, 4, 1.0, loads=hot)], 5) is None  # before the plan
    assert imbalance([Report(0, 6, 1.0), Report(0, 6, 1.0, loads=hot)], 5) is None  # no loads


def test_joint_plan_counts_keys_large_for_the_sum_only() -> None:
    # each router's key is a third of its tuples: large for it, not for the sum of four (1/12 < 1/8)
    reports = [Report(0, 3, 4_000.0, {k: 1_333.0}, scopes=4) for k in range(4)]
    others = joint_plan(N, reports[0], reports[1:])
    assert others == pytest.approx(np.full(N, 3.0 / N))


def _routers(together: bool) -> list[DaltonPartitioner]:
    opts = {"routers": 2, "raw_keys": "partitioned", "plan_together": together}
    return [DaltonPartitioner(N, window=12_000, slide=1_000, seed=i, **opts) for i in range(2)]


def _feed(parts: list[DaltonPartitioner], keys: np.ndarray, start: int, stop: int) -> None:
    """Both routers route tuples ``start..stop`` (five per millisecond), each its own keys, then merge."""
    for r, p in enumerate(parts):
        mine = start + np.flatnonzero(keys[start:stop] % 2 == r)
        p.assign(keys[mine], mine // 5)
    sync_routers(parts)


def test_routers_switch_to_a_plan_at_the_same_scope_and_only_when_asked() -> None:
    keys = np.where(np.arange(40_000) % 5 < 2, 0, np.arange(40_000) % 997 + 2)  # key 0: 40 %, on router 0
    for together in (False, True):
        parts = _routers(together)
        _feed(parts, keys, 0, 12_000)  # 2.4 s: scopes 0 and 1 closed, so the plan holds from scope 3 on
        assert [p.others_plans[0][0] if p.others_plans else None for p in parts] == ([3, 3] if together else [None] * 2)
        _feed(parts, keys, 12_000, 40_000)
        assert all(p.others.any() for p in parts) == together
        if together:  # router 0's key fills combiners the other router leaves to it
            assert (parts[0].others == 0).sum() >= 2 and (parts[1].others > 0).all()


def test_a_router_catching_up_balances_its_own_tuples() -> None:
    keys = np.where(np.arange(40_000) % 5 < 2, 0, np.arange(40_000) % 997 + 2)
    parts = _routers(True)
    for p in parts:
        p.set_backlog(True)  # Spark's micro-batches then mix the routers' outputs at their own pace
    _feed(parts, keys, 0, 40_000)
    assert not any(p.others.any() or p.others_plans for p in parts)


def test_a_plan_is_given_up_when_the_sum_is_off_balance() -> None:
    keys = np.where(np.arange(40_000) % 5 < 2, 0, np.arange(40_000) % 997 + 2)
    parts = _routers(True)
    _feed(parts, keys, 0, 25_000)  # scopes 0-3 closed: planned from scope 5
    _feed(parts, keys, 25_000, 40_000)  # scopes 5-7 closed: the last one was planned, and balanced
    assert parts[0].joint_from == 5 and not parts[0].joint_off
    last = parts[0].scope_report
    skewed = tuple([0.0] * (N - 1) + [float(sum(last.loads))])  # as if router 0 put everything on one combiner
    parts[0].scope_report = Report(last.first, last.last, last.records, last.keys, skewed, last.scopes)
    parts[0].plan_with([parts[1].scope_report])
    assert parts[0].joint_off and parts[0].others_plans[-1][1].sum() == 0


@pytest.mark.parametrize(("s", "n"), [(2.0, 8), (1.5, 32)])
def test_live_routers_planned_together_ship_fewer_partials(s: float, n: int) -> None:
    # four routers reading in step (live), each its own keys; micro-batches of one slide (the shipped rule)
    keys = stream_keys(f"zipf:s={s},keys=10000,tuples=300000,perm=1,seed=42")
    alone = cell_quality(keys, n, 20_000, 1, 0, backlog=False, routers=4, in_step=True)
    together = cell_quality(keys, n, 20_000, 1, 0, backlog=False, routers=4, in_step=True, together=True)
    assert together[0] <= 1.05, (alone, together)
    assert together[1] < alone[1] - 0.04, (alone, together)


def test_a_router_decides_on_its_report_as_the_round_has_it() -> None:
    # the GLOBAL carries the report each router sent; a router that closed a scope since must still decide on
    # the sent one, else the routers decide on different reports (one stops planning, the others go on)
    keys = np.where(np.arange(40_000) % 5 < 2, 0, np.arange(40_000) % 997 + 2)
    parts = _routers(True)
    _feed(parts, keys, 0, 12_000)
    sent = [p.scope_report for p in parts]
    _feed(parts, keys, 12_000, 20_000)  # both closed more scopes: their latest reports are newer
    parts[0].others_plans, parts[0].joint_from = [], -1  # as if it had not planned yet
    parts[0].plan_with([sent[1]], sent[0])
    assert parts[0].others_plans[-1][0] == start_scope(sent) < start_scope([p.scope_report for p in parts])
    behind = Report(sent[1].first, sent[1].last, sent[1].records, sent[1].keys, sent[1].loads, sent[1].scopes, True)
    parts[0].plan_with([behind], sent[0])  # a peer catching up: every router stops planning
    assert parts[0].joint_from == -1 and not parts[0].others_plans[-1][1].any()
