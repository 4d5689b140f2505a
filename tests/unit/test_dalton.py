"""Dalton: measured quality, window expiry (the reference bug), hot-key expiry, determinism, state, sync."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from benchmarks.workloads import zipf_keys
from router import partitioners as P
from router.choose.measure import unaligned_batches
from router.choose.runner import sync_routers
from router.partitioners.base import PartitionerState
from router.partitioners.dalton import DaltonPartitioner
from router.partitioners.dalton.window import SlidingState
from router.partitioners.metrics import measure as measure_windows
from router.partitioners.metrics import replication_floor
from schemas.partitioner_settings import DaltonSettings

N = 8


# -- workloads and metrics, the way the quality tool builds and measures them ----------------------
#: The paper's Dalton as an option (bandit placement of hot keys) for the tests of its machinery.
BANDIT: dict[str, Any] = {"placement": "bandit"}


def make(
    n: int = N, *, window: float = 60_000, slide: float = 1_000, seed: int = 0, **params: Any
) -> DaltonPartitioner:
    part = P.create("dalton", n=n, window=window, slide=slide, seed=seed, **params)
    assert isinstance(part, DaltonPartitioner)
    return part


def uniform_keys(size: int = 100_000, k: int = 10_000, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, k, size=size).astype(np.int64)


def phases_keys() -> np.ndarray:
    """Zipf whose exponent and hot set change every 20k tuples (Dalton Fig. 9d)."""
    parts = [zipf_keys(20_000, s, 10_000, 100 + i, permute=True) for i, s in enumerate([1.5, 0.8, 2.0, 1.2])]
    return np.concatenate(parts)


def route(part: P.Partitioner, keys: np.ndarray, batch: int = 1000) -> np.ndarray:
    times = np.arange(len(keys), dtype=np.int64)
    out = [part.assign(keys[s : s + batch], times[s : s + batch]) for s in range(0, len(keys), batch)]
    return np.concatenate(out).astype(np.int64)


def metrics(keys: np.ndarray, combiners: np.ndarray, n: int = N, w: int = 1000) -> tuple[float, float]:
    imb, rep = [], []
    for s in range(0, len(keys), w):
        k, c = keys[s : s + w], combiners[s : s + w]
        loads = np.bincount(c, minlength=n)
        imb.append(loads.max() / loads.mean())
        rep.append(np.unique(k * n + c).size / np.unique(k).size)
    return float(np.mean(imb)), float(np.mean(rep))


def micro_batch_quality(
    name: str, keys: np.ndarray, n: int = N, w: int = 20_000, **params: Any
) -> tuple[float, float, float]:
    """Mean per-micro-batch max/mean, replication and floor: random router batches, slide = W, window = 12 W."""
    part = P.create(name, n=n, window=12 * w, slide=w, seed=1, **params)
    times = np.arange(len(keys), dtype=np.int64)
    out = np.concatenate([part.assign(keys[a:b], times[a:b]) for a, b in unaligned_batches(len(keys))])
    return quality(keys, out, times, n, w)


def quality(keys: np.ndarray, out: np.ndarray, times: np.ndarray, n: int, w: int) -> tuple[float, float, float]:
    full = len(keys) // w * w  # whole micro-batches only
    index = times[:full] // w
    series = measure_windows(keys[:full], out[:full], index, n)
    floor = replication_floor(keys[:full], index, n)
    return float(series.ratio.mean()), float(series.replication.mean()), float(floor.mean())


# -- quality: per micro-batch, against the floor ---------------------------------------------------------
WORKLOADS = {
    "zipf15": lambda: zipf_keys(100_000, 1.5, 10_000, 42),  # the stream the quality targets are stated on
    "zipf06": lambda: zipf_keys(100_000, 0.6, 10_000, 42),
    "zipf10": lambda: zipf_keys(100_000, 1.0, 10_000, 42),
    "zipf20": lambda: zipf_keys(100_000, 2.0, 10_000, 42),
    "zipf15_1k": lambda: zipf_keys(100_000, 1.5, 1_000, 42, permute=True),
    "zipf20_1k": lambda: zipf_keys(100_000, 2.0, 1_000, 42, permute=True),
    "zipf10_100k": lambda: zipf_keys(100_000, 1.0, 100_000, 42, permute=True),
    "uniform": uniform_keys,
    "phases": phases_keys,
    "flights": lambda: flights_keys(100_000),
}


def flights_keys(size: int) -> np.ndarray:
    """The flights data set's destination airports (few keys, each a large part of a combiner's share)."""
    from benchmarks.workloads import make_workload

    keys = np.concatenate([np.asarray(k) for k, _ in make_workload(f"flights:key=dest,tuples={size}").batches()])
    return np.unique(keys, return_inverse=True)[1].reshape(-1).astype(np.int64)


@pytest.mark.parametrize(
    ("workload", "n", "w"),
    [
        ("zipf15", 2, 20_000),
        ("zipf15", 4, 20_000),
        ("zipf15", 8, 5_000),
        ("zipf15", 8, 20_000),
        ("zipf15", 8, 50_000),
        ("zipf15", 32, 20_000),
        ("zipf06", 8, 20_000),
        ("zipf10", 8, 20_000),
        ("zipf10", 32, 20_000),
        ("zipf20", 8, 20_000),
        ("zipf15_1k", 16, 20_000),
        ("zipf10_100k", 8, 20_000),
        ("uniform", 8, 20_000),
        ("phases", 8, 20_000),
        ("flights", 8, 20_000),  # one router's planned homes: 1.075 replication (floor 1.000) before them
        ("flights", 16, 5_000),  # 1.162 before them
        ("flights", 16, 20_000),  # 1.092 before a held key outgrowing its combiners took them to the hold cap
        ("flights", 32, 5_000),  # 1.200 (floor 1.096) before one router's hold cap looked at the scope's forecast
        ("zipf20_1k", 32, 5_000),  # 1.337 (floor 1.262) before one router planned its large keys' sets
        ("zipf20_1k", 32, 20_000),  # a guard: the sweep's stream of this cell was over (1.187, floor 1.135)
    ],
)
def test_quality_at_the_floor(workload: str, n: int, w: int) -> None:
    """Per micro-batch: max/mean <= 1.05 and replication <= floor + 0.05 (the issue's targets)."""
    keys = WORKLOADS[workload]()
    ratio, rep, floor = micro_batch_quality("dalton", keys, n, w)
    assert ratio <= 1.05, (ratio, rep, floor)
    assert rep <= floor + 0.05, (ratio, rep, floor)


def test_the_scope_forecast_projects_the_elapsed_time_and_never_exceeds_the_last_scope() -> None:
    """Tuples so far over the elapsed share of the scope; no more than the last scope held; 0 when unknown."""
    part = P.create("dalton", n=4, window=12_000, slide=1_000, seed=1)
    part.assign(list(range(100)), np.full(100, 5_000))  # one instant: no elapsed time yet
    assert part.scope_forecast(0) == 0.0
    part.assign(list(range(150)), np.linspace(5_000, 5_250, 150).astype(np.int64))
    assert part.scope_forecast(0) == pytest.approx(250 * 1_000 / 250)  # a quarter of the scope: four times
    part.assign(list(range(750)), np.linspace(5_250, 5_999, 750).astype(np.int64))
    assert part.scope_forecast(0) == pytest.approx(1_000 * 1_000 / 999)  # the scope's end: what it holds
    part.assign(list(range(10)), np.linspace(6_000, 6_100, 10).astype(np.int64))  # the next scope
    assert part.last_total == 1_000
    assert part.scope_forecast(0) == pytest.approx(100)  # 10 tuples in a tenth of the scope: fewer than the last
    part.assign(list(range(5_000)), np.full(5_000, 6_101))
    assert part.scope_forecast(0) == 1_000  # a burst projects to 49,604: bounded by the last scope


def test_one_router_plans_a_large_keys_combiners() -> None:
    """A key of 1.65 combiner means in one scope holds two combiners from the first tuple of the next one."""
    n, w = 4, 8_000
    rng = np.random.default_rng(3)
    scope = np.concatenate([np.zeros(3_300, dtype=np.int64), rng.integers(1, 400, w - 3_300)])
    keys = np.concatenate([rng.permutation(scope) for _ in range(3)])
    part = P.create("dalton", n=n, window=12 * w, slide=w, seed=1)
    times = np.arange(len(keys), dtype=np.int64)
    out = np.concatenate([part.assign(keys[a:b], times[a:b]) for a, b in unaligned_batches(len(keys))])
    assert part.shared_block == part.win.block and part.shared_ids.size == 1  # key 0, the one large key
    planned = part.shared_rows[0]
    assert planned.sum() == 2  # 3,300 tuples where a combiner's mean is 2,000: two combiners
    for s in (w, 2 * w):  # the scopes after the first, each planned on the one before
        k, c = keys[s : s + w], out[s : s + w]
        assert planned[c[k == 0]].mean() >= 0.95  # the key's tuples on its planned combiners
        loads = np.bincount(c, minlength=n)
        assert loads.max() / loads.mean() <= 1.05


def test_uniform_keys_hash_like() -> None:
    """Uniform keys: almost no key is split (replication ~1), balance at least hash's."""
    keys = uniform_keys()
    ratio, rep, _ = micro_batch_quality("dalton", keys)
    hash_ratio, _, _ = micro_batch_quality("hash", keys)
    assert rep <= 1.002 and ratio <= hash_ratio  # a key or two of ~10,000 per micro-batch


def test_zipf15_far_better_than_hash_and_the_bandit() -> None:
    keys = WORKLOADS["zipf15"]()
    ratio, rep, _ = micro_batch_quality("dalton", keys)
    bandit_ratio, bandit_rep, _ = micro_batch_quality("dalton", keys, **BANDIT)
    hash_ratio, _, _ = micro_batch_quality("hash", keys)
    assert hash_ratio > 3.0 and ratio < 1.05
    assert rep < bandit_rep - 0.05  # sticky placement: far fewer partials per micro-batch


def test_floor_of_a_known_stream() -> None:
    keys = np.array([0] * 10 + [1, 2], dtype=np.int64)  # n = 2, W = 12: most per combiner floor(1.05 * 6) = 6
    floor = replication_floor(keys, np.zeros(12, dtype=np.int64), 2)
    assert floor.tolist() == [pytest.approx((2 + 1 + 1) / 3)]


@pytest.mark.parametrize("workload", ["zipf15", "zipf10"])
@pytest.mark.parametrize("routers", [2, 4])
def test_synced_routers_do_not_multiply_replication(routers: int, workload: str) -> None:
    """P routers, tuples dealt round-robin, synced twice per micro-batch: replication stays near the floor.

    Zipf 1.0 over 10k keys has no key of a combiner's mean at n = 8: the routers' largest keys fill around the
    tail they share (``FILL_SHARE``; without them 1.058 with 2 routers, 1.061 with 4, against a floor of 1.000).
    """
    keys, w = WORKLOADS[workload](), 20_000
    parts = [make(window=12 * w, slide=w, seed=r) for r in range(routers)]
    times = np.arange(len(keys), dtype=np.int64)
    out = np.empty(len(keys), dtype=np.int64)
    done = 0
    sync_routers(parts)  # the routers know each other from the start (as the runner's do)
    for a, b in unaligned_batches(len(keys)):
        idx = np.arange(a, b)
        for r, part in enumerate(parts):
            mine = idx[idx % routers == r]
            out[mine] = part.assign(keys[mine], times[mine])
        if b - done >= w // 2:
            done = b
            sync_routers(parts)
    ratio, rep, floor = quality(keys, out, times, N, w)
    assert ratio <= 1.06, (ratio, rep, floor)
    assert rep <= floor + 0.05, (ratio, rep, floor)


def test_paper_configuration_reproduces_the_reference_figures() -> None:
    """Algorithm 1 tuple by tuple (quantum=1, chosen-action update, hash tail first, window scope), measured
    per 1,000-tuple window with 1,000-tuple batches as the reference figures were: it lands where the
    reference Java Dalton does on this stream (1.58 / 1.067)."""
    keys = zipf_keys(30_000, 1.5, 10_000, 42)
    paper = {**BANDIT, "quantum": 1, "update": "chosen", "tail": "hash", "micro_batch": False, "pack": False}
    imb, rep = metrics(keys, route(make(seed=1, **paper), keys))
    assert 1.4 < imb < 1.8, imb
    assert 1.0 < rep < 1.15, rep


def test_paper_tail_on_uniform_is_hashing() -> None:
    """With the bandit placement and the paper's hash tail, uniform data never reaches the bandit: hashing."""
    keys = uniform_keys(20_000)
    dalton = route(make(seed=1, tail="hash", **BANDIT), keys)
    hashed = route(P.create("hash", n=N, window=60_000, slide=1_000), keys)
    assert (dalton == hashed).all()


def test_max_split_caps_the_split_per_slide() -> None:
    keys = zipf_keys(20_000, 1.5, 10_000, 42)
    out = route(make(seed=1, max_split=3, **BANDIT), keys)
    top = keys == 0  # rank-1 key, ~38% of the stream
    for s in range(0, len(keys), 1000):
        sl = slice(s, s + 1000)
        assert np.unique(out[sl][top[sl]]).size <= 3


def test_settings_are_validated_by_the_model() -> None:
    with pytest.raises(ValueError):
        DaltonPartitioner(N, window=1000, slide=100, epsilon=2.0)
    with pytest.raises(ValueError):
        DaltonPartitioner(N, window=1000, slide=100, placement="nope")
    part = DaltonPartitioner(N, window=1000, slide=100, settings=DaltonSettings(balance=0.1), epsilon=0.0)
    assert part.settings.balance == 0.1 and part.settings.epsilon == 0.0
    assert part.params()["placement"] == "sticky"


# -- the sliding window: fragmentation expires (the reference code's bug) ---------------------------
def test_window_fragmentation_bits_expire() -> None:
    win = SlidingState(n=4, blocks=3, capacity=16)
    one = np.array([5], dtype=np.intp)
    win.advance(0)
    win.add(np.array([5, 5, 5], dtype=np.intp), np.array([0, 1, 2], dtype=np.intp), np.ones(3, np.int64))
    assert win.fragmentation(one).tolist() == [3]
    assert win.fragmentation(one, "slide").tolist() == [3]
    for block in (1, 2):
        win.advance(block)
        win.add(one, np.array([1], dtype=np.intp), np.ones(1, np.int64))
        assert win.fragmentation(one, "slide").tolist() == [1]
    assert win.fragmentation(one).tolist() == [3]  # block 0 still inside the 3-block window
    win.advance(3)  # block 0 expires: bits 0 and 2 are cleared, bit 1 stays (blocks 1, 2)
    assert win.fragmentation(one).tolist() == [1]
    assert win.bits(5) == 0b010
    assert win.window_load.tolist() == [0, 2, 0, 0]
    win.advance(10)  # a jump past the whole window empties it
    assert win.fragmentation(one).tolist() == [0] and not win.live().any()


@pytest.mark.parametrize(("tail", "micro_batch"), [("hash", True), ("affinity", False), ("hash", False)])
def test_key_fragmentation_drops_back_to_one(tail: str, micro_batch: bool) -> None:
    """A key split while hot has fragmentation 1 again once it stayed on one combiner for a full window."""
    part = DaltonPartitioner(4, window=20, slide=1, seed=5, tail=tail, micro_batch=micro_batch, **BANDIT)  # type: ignore[arg-type]
    t = 0
    rng = np.random.default_rng(0)
    for _ in range(3):  # key 7 dominates: hot, split over several combiners
        part.assign(np.full(200, 7), np.full(200, t))
        t += 1
    assert part.fragmentation([7])[0] > 1
    combiners = []
    for _ in range(40):  # then 1 tuple per slide among 99 others: not hot, one combiner
        keys = np.concatenate([[7], rng.integers(1000, 5000, 99)])
        out = part.assign(keys, np.full(100, t))
        combiners.append(int(out[0]))
        t += 1
    assert len(set(combiners[-20:])) == 1  # stayed on one combiner for the last full window
    assert part.fragmentation([7]) == [1]
    assert part.fragmentation([7], "slide") == [1]


# -- statistics: hot keys and their expiry ------------------------------------------------------------
def test_hot_key_expires_after_the_next_statistics_window() -> None:
    part = DaltonPartitioner(4, window=1000, slide=100, seed=0)
    hot_id = int(part.codec.encode([42]).ids[0])
    rng = np.random.default_rng(1)
    part.assign(np.concatenate([np.full(60, 42), rng.integers(1000, 9000, 40)]), np.full(100, 0))
    assert hot_id in part.hot_keys()  # stats window 0: 60 >= L/n
    part.assign(rng.integers(1000, 9000, 100), np.full(100, 100))
    assert hot_id in part.hot_keys()  # window 1: kept (current + next window)
    part.assign(rng.integers(1000, 9000, 100), np.full(100, 200))
    assert hot_id not in part.hot_keys()  # window 2: expired
    part.assign(np.full(100, 42), np.full(100, 300))
    part.assign(np.concatenate([np.full(40, 42), rng.integers(1000, 9000, 60)]), np.full(100, 400))
    part.assign(rng.integers(1000, 9000, 100), np.full(100, 500))
    assert hot_id in part.hot_keys()  # hot again in window 4 (40 >= 100/4): valid through window 5


def test_at_most_2n_keys_in_the_q_table() -> None:
    part = make()
    keys = phases_keys()
    for s in range(0, len(keys), 1000):
        part.assign(keys[s : s + 1000], np.arange(s, s + 1000))
        assert len(part.hot_keys()) <= 2 * N


@pytest.mark.parametrize("statistics", ["exact", "countmin", "hybrid"])
def test_statistics_modes_find_the_same_hot_keys(statistics: str) -> None:
    keys = zipf_keys(10_000, 1.5, 10_000, 7)
    part = make(statistics=statistics, exact_limit=100)  # type: ignore[arg-type]
    route(part, keys)
    top2 = {int(i) for i in part.codec.encode([0, 1]).ids}
    assert top2 <= set(part.hot_keys())


# -- determinism and state ----------------------------------------------------------------------------
def test_epsilon_zero_is_deterministic_and_seed_independent() -> None:
    keys = zipf_keys(20_000, 1.5, 10_000, 9)
    a = route(make(seed=1, epsilon=0.0, **BANDIT), keys)
    b = route(make(seed=2, epsilon=0.0, **BANDIT), keys)
    assert (a == b).all()


def test_seeded_runs_are_reproducible() -> None:
    keys = zipf_keys(20_000, 1.5, 10_000, 9)
    a = route(make(seed=4, **BANDIT), keys)
    b = route(make(seed=4, **BANDIT), keys)
    c = route(make(seed=5, **BANDIT), keys)
    assert (a == b).all()
    assert (a != c).any()  # exploration does use the seed


@pytest.mark.parametrize(
    "params", [{}, {"statistics": "countmin"}, BANDIT, {**BANDIT, "micro_batch": False, "tail": "hash"}]
)
def test_snapshot_restore_continues_identically(params: dict[str, Any]) -> None:
    keys = zipf_keys(30_000, 1.5, 10_000, 11)
    times = np.arange(len(keys))
    first = make(seed=3, **params)
    for s in range(0, 15_000, 700):
        first.assign(keys[s : min(s + 700, 15_000)], times[s : min(s + 700, 15_000)])
    raw = first.snapshot().to_bytes()
    second = make(seed=99, **params)
    second.restore(PartitionerState.from_bytes(raw))
    for s in range(15_000, 30_000, 700):
        a = first.assign(keys[s : s + 700], times[s : s + 700])
        b = second.assign(keys[s : s + 700], times[s : s + 700])
        assert (a == b).all()


def test_time_based_windows_and_batches_across_slides() -> None:
    keys = zipf_keys(20_000, 1.5, 1_000, 2)
    times = np.cumsum(np.random.default_rng(0).integers(0, 3, len(keys)))  # ms, with gaps and repeats
    part = make(window=5_000, slide=250)
    out = np.concatenate([part.assign(keys[s : s + 777], times[s : s + 777]) for s in range(0, len(keys), 777)])
    assert out.shape == keys.shape and out.min() >= 0 and out.max() < N


def test_string_keys_and_the_key_identity() -> None:
    part = make(epsilon=0.0)
    other = make(epsilon=0.0)
    words = ["a", "b", "a", "c"] * 50
    assert (part.assign(words) == other.assign([w.encode() for w in words])).all()


# -- key forwarding --------------------------------------------------------------------------------
def test_forwardable_marks_only_unsplit_non_hot_keys() -> None:
    keys = zipf_keys(5_000, 1.5, 1_000, 3)
    part = make(key_forwarding=True)
    route(part, keys[:4_000])
    batch = keys[4_000:5_000]
    part.assign(batch, np.arange(4_000, 5_000))
    fwd = part.forwardable()
    assert fwd.shape == batch.shape
    assert not fwd[batch == 0].any()  # the dominant key is hot and split
    frag = np.asarray(part.fragmentation(batch.tolist()))
    assert (frag[fwd] == 1).all() and fwd.any()
    assert not make().forwardable().any()
