"""The per-window metrics of docs/partitioners.md: hand-computed examples, the quality tool's numbers, bounds."""

from __future__ import annotations

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.partitioners import create
from router.partitioners.metrics import SERIES, count_windows, measure, time_windows


def reducer(key: str, m: int, seed: int = 13) -> int:
    return mmh3.hash(key.encode(), seed, signed=False) % m


def test_hand_computed_count_windows() -> None:
    keys = ["a", "a", "b", "c", "a", "b", "a"]
    comb = [0, 1, 0, 1, 0, 0, 1]
    ws = count_windows(keys, comb, n=2, size=3, m=1, c=2.0)
    # windows: [a a b | c a b | a] -> loads [2,1], [2,1], [0,1]
    np.testing.assert_array_equal(ws.windows, [0, 1, 2])
    np.testing.assert_array_equal(ws.loads, [[2, 1], [2, 1], [0, 1]])
    np.testing.assert_array_equal(ws.distinct, [[2, 1], [2, 1], [0, 1]])  # {a,b},{a} | {a,b},{c} | {},{a}
    np.testing.assert_array_equal(ws.keys, [2, 3, 1])
    np.testing.assert_array_equal(ws.gamma, [3, 3, 1])
    np.testing.assert_allclose(ws.replication, [1.5, 1.0, 1.0])
    np.testing.assert_allclose(ws.imbalance, [0.5, 0.5, 0.5])
    np.testing.assert_allclose(ws.ratio, [2 / 1.5, 2 / 1.5, 2.0])
    np.testing.assert_array_equal(ws.reducer_cost, [3, 3, 1])  # one reducer receives every partial
    np.testing.assert_allclose(ws.time, [2 + 2 * 3, 2 + 2 * 3, 1 + 2 * 1])
    summary = ws.summary()
    assert summary["replication"].mean == pytest.approx((1.5 + 1 + 1) / 3)
    assert summary["replication"].p95 == pytest.approx(np.percentile([1.5, 1.0, 1.0], 95))
    assert set(summary) == set(SERIES)


def test_reducer_cost_uses_murmur3_of_the_key() -> None:
    keys = ["a", "b", "c", "d", "e", "f", "g", "h"]
    comb = [0, 1, 2, 0, 1, 2, 0, 1]
    m = 3
    ws = count_windows(keys, comb, n=3, size=8, m=m)
    expected = np.bincount([reducer(k, m) for k in keys], minlength=m)  # one partial per key (no split)
    np.testing.assert_array_equal(ws.partials[0], expected)
    assert ws.reducer_cost[0] == expected.max()
    # the same key split over 3 combiners sends 3 partials to its reducer
    split = count_windows(["a", "a", "a"], [0, 1, 2], n=3, size=3, m=m)
    assert split.partials[0, reducer("a", m)] == 3 and split.partials[0].sum() == 3
    assert split.time[0] == 1 + 3


def test_time_windows_skip_empty_ones_and_align_to_multiples() -> None:
    keys = [1, 2, 1, 3, 3]
    comb = [0, 1, 0, 1, 1]
    times = [5, 9, 10, 35, 39]  # window 10: [5, 9] | [10] | (20s empty) | [35, 39]
    ws = time_windows(keys, comb, n=2, times=times, window=10)
    np.testing.assert_array_equal(ws.windows, [0, 1, 3])
    np.testing.assert_array_equal(ws.loads, [[1, 1], [1, 0], [0, 2]])
    np.testing.assert_array_equal(ws.keys, [2, 1, 1])
    np.testing.assert_allclose(ws.ratio, [1.0, 2.0, 2.0])


def test_key_forms_are_one_key() -> None:
    ints = [7, 7, 8, 9, 7]
    comb = [0, 1, 1, 0, 0]
    series = [
        count_windows(form, comb, n=2, size=5)
        for form in (ints, np.asarray(ints), [str(k) for k in ints], [str(k).encode() for k in ints])
    ]
    for other in series[1:]:
        np.testing.assert_array_equal(series[0].distinct, other.distinct)
        np.testing.assert_array_equal(series[0].partials, other.partials)
    assert series[0].replication[0] == pytest.approx(4 / 3)


def quality_tool_metrics(keys: np.ndarray, wk: np.ndarray, n: int, w: int = 1000) -> tuple[float, float]:
    """The computation of the project's quality tool (copied: the reference our numbers must match)."""
    imb, rep = [], []
    for s in range(0, len(keys), w):
        k, x = keys[s : s + w], wk[s : s + w]
        c = np.bincount(x, minlength=n)
        imb.append(c.max() / c.mean())
        rep.append(np.unique(k * n + x).size / np.unique(k).size)
    return float(np.mean(imb)), float(np.mean(rep))


@pytest.mark.parametrize("name", ["hash", "shuffle", "pkg", "cam", "cm"])
@pytest.mark.parametrize("size", [1000, 777])
def test_reproduces_the_quality_tool(name: str, size: int) -> None:
    rng = np.random.default_rng(1)
    p = np.arange(1, 2001, dtype=np.float64) ** -1.3
    keys = rng.choice(2000, size=20_500, p=p / p.sum()).astype(np.int64)
    part = create(name, 8, seed=1)
    wk = np.concatenate([part.assign(keys[s : s + 1000]) for s in range(0, len(keys), 1000)]).astype(np.int64)
    ratio, replication = quality_tool_metrics(keys, wk, 8, size)
    summary = count_windows(keys, wk, 8, size).summary()
    assert summary["ratio"].mean == pytest.approx(ratio, rel=1e-12)
    assert summary["replication"].mean == pytest.approx(replication, rel=1e-12)


@pytest.mark.parametrize(
    ("workload", "name", "max_ratio", "replication"),
    [
        ("uniform", "hash", 1.4, (1.0, 1.0)),
        ("uniform", "shuffle", 1.01, (1.0, 1.2)),
        ("zipf", "hash", 5.0, (1.0, 1.0)),
        ("zipf", "shuffle", 1.01, (1.5, 2.6)),
        ("zipf", "pkg", 2.0, (1.0, 1.15)),
        ("zipf", "cam", 3.6, (1.0, 1.0)),
    ],
)
def test_measured_bounds(workload: str, name: str, max_ratio: float, replication: tuple[float, float]) -> None:
    rng = np.random.default_rng(42)
    if workload == "uniform":
        keys = rng.integers(0, 10_000, size=30_000).astype(np.int64)
    else:
        p = np.arange(1, 10_001, dtype=np.float64) ** -1.5
        keys = rng.choice(10_000, size=30_000, p=p / p.sum()).astype(np.int64)
    part = create(name, 8, seed=1)
    wk = np.concatenate([part.assign(keys[s : s + 1000]) for s in range(0, len(keys), 1000)])
    summary = count_windows(keys, wk, 8, 1000).summary()
    assert 1.0 <= summary["ratio"].mean <= max_ratio
    assert replication[0] <= summary["replication"].mean <= replication[1]
    if name == "hash":
        assert summary["replication"].p95 == 1.0  # hashing never splits a key: exactly 1.0 everywhere


def test_modelled_time_trades_balance_against_merging() -> None:
    """On many keys shuffle balances perfectly but pays in partials; T makes the trade visible."""
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 5_000, size=20_000).astype(np.int64)
    series = {}
    for name in ("hash", "shuffle"):
        part = create(name, 8, seed=1)
        wk = np.concatenate([part.assign(keys[s : s + 1000]) for s in range(0, 20_000, 1000)])
        series[name] = count_windows(keys, wk, 8, 1000, m=2)
    assert series["shuffle"].imbalance.max() == 0.0
    assert (series["shuffle"].gamma > series["hash"].gamma).all()
    assert (series["shuffle"].reducer_cost > series["hash"].reducer_cost).all()
    np.testing.assert_allclose(series["hash"].time, series["hash"].max_load + series["hash"].reducer_cost)


def test_invalid_input() -> None:
    with pytest.raises(ValueError):
        count_windows([1, 2], [0, 2], n=2)  # combiner id out of range
    with pytest.raises(ValueError):
        count_windows([1, 2], [0], n=2)
    with pytest.raises(ValueError):
        count_windows([1, 2], [0, 1], n=2, size=0)
    with pytest.raises(ValueError):
        time_windows([1], [0], n=1, times=[0], window=0)
    with pytest.raises(ValueError):
        measure([1], [0], [0], n=1, m=0)
    with pytest.raises(ValueError, match="unknown metric"):
        count_windows([1], [0], n=1).series("nope")


@given(
    data=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 4)), min_size=1, max_size=80),
    size=st.integers(1, 20),
    m=st.integers(1, 4),
    c=st.sampled_from([0.0, 1.0, 2.5]),
)
@settings(max_examples=200, deadline=None)
def test_matches_a_naive_per_window_computation(data: list[tuple[int, int]], size: int, m: int, c: float) -> None:
    keys = [k for k, _ in data]
    comb = [x for _, x in data]
    ws = count_windows(keys, comb, n=5, size=size, m=m, c=c)
    for w, start in enumerate(range(0, len(data), size)):
        chunk = data[start : start + size]
        loads = [sum(1 for _, x in chunk if x == i) for i in range(5)]
        pairs = set(chunk)
        distinct = [sum(1 for _, x in pairs if x == i) for i in range(5)]
        partials = [sum(1 for k, _ in pairs if reducer(str(k), m) == j) for j in range(m)]
        n_keys = len({k for k, _ in chunk})
        assert ws.loads[w].tolist() == loads and ws.distinct[w].tolist() == distinct
        assert ws.partials[w].tolist() == partials and ws.keys[w] == n_keys
        assert ws.imbalance[w] == pytest.approx(max(loads) - sum(loads) / 5)
        assert ws.replication[w] == pytest.approx(len(pairs) / n_keys)
        assert ws.time[w] == pytest.approx(max(loads) + c * max(partials))
