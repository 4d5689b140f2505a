"""The exact tumbling-window fast paths of CM, AM, cAM and LM make the general path's decisions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.partitioners import create
from router.partitioners.accel import holistic_kernels
from router.partitioners.cardinality import ExactSets
from router.partitioners.holistic import HolisticPartitioner
from router.partitioners.holistic_rules import cm_loop, lm_loop, place_by_cards, place_by_loads
from router.partitioners.tumbling import KeyMasks, WindowHomes, known_prefix_loads, mask_adder


def general(name: str, n: int, **kw: object) -> HolisticPartitioner:
    """The same partitioner on the general path: per-combiner key sets (as restored from older snapshots)."""
    part = create(name, n, **kw)
    assert isinstance(part, HolisticPartitioner)
    part.store = ExactSets(n)
    return part


@pytest.mark.parametrize("name", ["cm", "am", "cam", "lm"])
@pytest.mark.parametrize(("n", "d"), [(8, 2), (100, 2), (100, 3), (3, 1)])
def test_fast_path_equals_general_path_on_many_keys(name: str, n: int, d: int) -> None:
    # uniform and skewed keys, batches of up to 5000 with many keys new to the window and many placed
    rng = np.random.default_rng(n * 10 + d)
    keys = np.concatenate([rng.integers(0, 5000, 30_000), rng.zipf(1.4, 30_000) % 20_000])
    times = np.arange(keys.shape[0]) // 2
    fast = create(name, n, window=7000, slide=1000, d=d)
    assert isinstance(fast, HolisticPartitioner)
    slow = general(name, n, window=7000, slide=1000, d=d)
    bounds = np.cumsum(rng.integers(1, 5000, 40))
    for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), keys.shape[0]], strict=False):
        if a < b:
            np.testing.assert_array_equal(fast.assign(keys[a:b], times[a:b]), slow.assign(keys[a:b], times[a:b]))
    assert fast.loads == slow.loads
    assert fast.store.card == slow.store.card
    assert isinstance(fast.store, WindowHomes if name in ("am", "cam") else KeyMasks)


def test_window_homes_lookup_and_insert() -> None:
    homes = WindowHomes(4)
    ids = np.array([50, 7, 2**63 + 5], dtype=np.uint64)
    assert homes.lookup(ids).tolist() == [-1, -1, -1]
    homes.insert(ids, np.array([3, 0, 2], dtype=np.int64))
    homes.insert(np.array([9], dtype=np.uint64), np.array([1], dtype=np.int64))
    probe = np.array([7, 8, 2**63 + 5, 50, 9, 2**64 - 1], dtype=np.uint64)
    assert homes.lookup(probe).tolist() == [0, -1, 2, 3, 1, -1]
    homes.reset()
    assert homes.lookup(probe).tolist() == [-1] * 6


@settings(max_examples=60, deadline=None)
@given(
    homes=st.lists(st.integers(-1, 4), min_size=1, max_size=40),
    data=st.data(),
)
def test_known_prefix_loads_is_the_running_sum(homes: list[int], data: st.DataObject) -> None:
    counts = data.draw(st.lists(st.integers(1, 9), min_size=len(homes), max_size=len(homes)))
    new = [g for g, h in enumerate(homes) if h < 0]
    cand = [data.draw(st.lists(st.integers(0, 4), min_size=2, max_size=2)) for _ in new]
    got = known_prefix_loads(
        np.array(homes, dtype=np.int64),
        np.array(counts, dtype=np.int64),
        np.array(new, dtype=np.intp),
        np.array(cand, dtype=np.int64).reshape(len(new), 2),
    )
    want = [
        [sum(k for h, k in zip(homes[:g], counts[:g], strict=True) if h == c) for c in row]
        for g, row in zip(new, cand, strict=True)
    ]
    assert got.reshape(len(new), 2).tolist() == want


@pytest.mark.parametrize("d", [1, 2, 3])
def test_compiled_loops_equal_the_python_loops(d: int) -> None:
    kernels = holistic_kernels()
    assert kernels is not None  # numba is a dependency: the compiled path must be the one in use
    rng = np.random.default_rng(d)
    n, keys = 9, 3000
    cand = np.stack([rng.permutation(n)[:d] for _ in range(keys)]).astype(np.int64)
    counts = rng.integers(1, 6, keys).astype(np.int64)
    masks0 = rng.integers(0, 1 << n, keys).tolist()
    card0, loads0 = rng.integers(0, 50, n).tolist(), rng.integers(0, 500, n).tolist()

    card, masks = list(card0), list(masks0)
    runs, lens = cm_loop(card, cand, counts.tolist(), mask_adder(masks, card))
    k_card, k_masks = np.array(card0, np.int64), np.array(masks0, np.uint64)
    k_runs, k_lens = np.empty(keys * (d + 1), np.int64), np.empty(keys * (d + 1), np.int64)
    r = kernels.cm_kernel(k_card, cand, counts, k_masks, k_runs, k_lens)
    assert (k_runs[:r].tolist(), k_lens[:r].tolist()) == (runs, lens)
    assert k_card.tolist() == card and k_masks.tolist() == masks

    card, loads, masks = list(card0), list(loads0), list(masks0)
    seq = lm_loop(card, loads, 0.5, cand, counts.tolist(), mask_adder(masks, card))
    k_card, k_loads, k_masks = np.array(card0, np.int64), np.array(loads0, np.int64), np.array(masks0, np.uint64)
    out = np.empty(int(counts.sum()), np.int64)
    kernels.lm_kernel(k_card, k_loads, 0.5, cand, counts, k_masks, out)
    assert out.tolist() == seq
    assert (k_card.tolist(), k_loads.tolist(), k_masks.tolist()) == (card, loads, masks)

    card = list(card0)
    placed = place_by_cards(card, cand)
    k_card, out = np.array(card0, np.int64), np.empty(keys, np.int64)
    kernels.am_kernel(k_card, cand, out)
    assert out.tolist() == placed and k_card.tolist() == card

    before = rng.integers(0, 40, (keys, d)).astype(np.int64)
    out = np.empty(keys, np.int64)
    kernels.cam_kernel(n, cand, before, counts, out)
    assert out.tolist() == place_by_loads(n, cand, before, counts.tolist())
