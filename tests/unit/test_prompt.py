"""Prompt's batch partitioner (Alg. 2): block-size bounds, K < p, exact coverage, split bounds, uniform."""

from __future__ import annotations

import math

import numpy as np
import pytest

from router import partitioners as P
from router.partitioners.keys import KeyCodec
from router.partitioners.prompt import PromptPartitioner, partition_batch


def batches(seed: int = 0):
    """(name, keys) micro-batches: uniform, Zipf 0.5-2.0, a few keys, a single key, tiny batches."""
    rng = np.random.default_rng(seed)
    for s in (None, 0.5, 1.0, 1.5, 2.0):
        for size in (1000, 5000):
            for _ in range(5):
                if s is None:
                    yield "uniform", rng.integers(0, 10_000, size)
                else:
                    p = np.arange(1, 10_001, dtype=np.float64) ** -s
                    yield f"zipf{s}", rng.choice(10_000, size, p=p / p.sum())
    yield "three keys", rng.choice(3, 1000, p=[0.5, 0.3, 0.2])
    yield "one key", np.full(777, 42)
    yield "tiny", np.array([5, 5, 9])
    yield "skewed few", np.concatenate([np.full(900, 1), np.arange(2, 12)])


def plan_of(keys: np.ndarray, p: int):
    """Counts per distinct key in first-appearance order (as the partitioner sees them) and the plan."""
    counts = KeyCodec(0).encode(keys).counts()
    return counts, partition_batch(counts, p)


def cut_off(counts: np.ndarray, p: int) -> float:
    return (counts.sum() / p) / max(len(counts) / p, 1.0)


@pytest.mark.parametrize("p", [2, 8, 13])
def test_block_sizes_within_alg2_bounds(p):
    for name, keys in batches(p):
        counts, (k, b, s) = plan_of(keys, p)
        loads = np.bincount(b, weights=s, minlength=p)
        n, cut = counts.sum(), cut_off(counts, p)
        assert loads.sum() == n
        assert loads.max() <= math.ceil(n / p) + 2 * cut, name
        if len(counts) >= p and name.startswith(("uniform", "zipf")):
            # Measured: every such batch is cut into equal blocks (best fit tops every block up).
            assert loads.max() <= math.ceil(n / p), name


@pytest.mark.parametrize("p", [4, 8, 16])
def test_fewer_keys_than_blocks(p):
    for keys in (np.array([1, 2, 3] * 100 + [1] * 50), np.full(64, 9), np.array([7, 8])):
        counts, (k, b, s) = plan_of(keys, p)
        assert len(counts) < p
        loads = np.bincount(b, weights=s, minlength=p)
        assert loads.sum() == len(keys)
        # Keys larger than a block are split: no block above ceil(N/p), none empty when N >= p.
        assert loads.max() <= math.ceil(len(keys) / p)
        if len(keys) >= p:
            assert loads.min() > 0
    out = PromptPartitioner(8).assign(np.array([3, 3, 4]))
    assert out.shape == (3,) and out.min() >= 0 and out.max() < 8


def test_every_tuple_assigned_exactly_once():
    part = P.create("prompt", n=8)
    for name, keys in batches(1):
        out = part.assign(keys)
        assert out.shape == keys.shape and out.min() >= 0 and out.max() < 8, name
        counts, (k, b, s) = plan_of(keys, 8)
        assert np.array_equal(np.bincount(k, weights=s, minlength=len(counts)), counts), name
        # The tuples follow the plan exactly: per (key, block) the planned number of tuples.
        inverse = KeyCodec(0).encode(keys).inverse
        got = np.bincount(inverse * 8 + out, minlength=len(counts) * 8)
        want = np.bincount(k * 8 + b, weights=s, minlength=len(counts) * 8)
        assert np.array_equal(got, want), name


def test_split_tuples_follow_arrival_order():
    keys = np.array([0] * 10 + [1, 2, 3, 4, 5, 6])  # key 0 is split: its first tuples fill its first block
    out = PromptPartitioner(4).assign(keys)
    blocks_of_0 = out[:10]
    change = np.flatnonzero(np.diff(blocks_of_0)) + 1
    runs = np.split(blocks_of_0, change)
    assert len(runs) == len({int(r[0]) for r in runs})  # each block's share is one contiguous run


def test_split_keys_span_at_most_ceil_count_over_s_plus_one_blocks():
    for p in (3, 8, 16):
        for name, keys in batches(p + 10):
            counts, (k, b, s) = plan_of(keys, p)
            cut = cut_off(counts, p)
            spans = np.bincount(np.unique(k * p + b) // p, minlength=len(counts))
            limit = np.ceil(counts / cut) + 1
            assert np.all(spans <= limit), name
            assert np.all(spans[counts <= cut] == 1), name  # keys at or below the cut-off are never split


def test_zigzag_walks_keys_by_frequency_not_id():
    # p=2, N=8, K=4: S=2; key 1 (3 tuples) is split: 2 to b1, residual 1. Light keys by descending count
    # (ties by index): key 2 -> b1, key 3 -> b2, key 0 -> b2 (reversed pass); the residual does not fit
    # in b1 (full) and goes to b2 (best fit).
    k, b, s = partition_batch([1, 3, 2, 2], 2)
    assert list(zip(k.tolist(), b.tolist(), s.tolist(), strict=True)) == [
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 1),
        (2, 0, 2),
        (3, 1, 2),
    ]


def test_uniform_batches_are_balanced():
    keys = np.random.default_rng(3).integers(0, 10_000, 100_000)
    part = PromptPartitioner(8)
    ratios = []
    for start in range(0, len(keys), 1000):
        loads = np.bincount(part.assign(keys[start : start + 1000]), minlength=8)
        ratios.append(loads.max() / loads.mean())
    assert max(ratios) <= 1.05


def test_batches_are_independent():
    rng = np.random.default_rng(4)
    a, b = rng.integers(0, 50, 1000), rng.integers(0, 50, 1000)
    part = PromptPartitioner(8)
    part.assign(a)
    assert np.array_equal(part.assign(b), PromptPartitioner(8).assign(b))
