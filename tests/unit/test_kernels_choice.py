"""The compiled loops of the key codec, PKG and FISH make exactly the Python loops' decisions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from router.partitioners import KeyCodec, create
from router.partitioners import keys as keys_mod
from router.partitioners import pkg as pkg_mod
from router.partitioners import waterfill as waterfill_mod
from router.partitioners.accel import choice_kernels
from router.partitioners.waterfill import pkg_fill, pkg_fill_many, two_choice, two_choice_many


def batches(kind: str, seed: int) -> list[list[Any]]:
    """String-key batches of irregular sizes (uniform or Zipf 1.3 over 3,000 keys), some keys repeated."""
    rng = np.random.default_rng(seed)
    out = []
    for size in (1, 700, 5_000, 3, 2_500, 4_000):
        ks = rng.integers(0, 3000, size) if kind == "uniform" else np.minimum(rng.zipf(1.3, size), 3000)
        out.append([f"k{k}" for k in ks.tolist()])
    return out


def test_numba_is_the_loop_in_use() -> None:
    assert choice_kernels() is not None  # numba is a dependency: the compiled loops must be what runs


@pytest.mark.parametrize("kind", ["uniform", "zipf"])
def test_key_codec_compiled_equals_python(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = batches(kind, 1)
    data.append(["k1", b"k1", 7, "7", "k1"])  # str / bytes / int spellings stay separate cache entries
    fast, slow = KeyCodec(2), KeyCodec(2)
    got = [fast.encode(b) for b in data]
    monkeypatch.setattr(keys_mod, "choice_kernels", lambda: None)
    want = [slow.encode(b) for b in data]
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g.ids, w.ids)
        assert np.array_equal(g.hashes, w.hashes)
        assert np.array_equal(g.inverse, w.inverse)
    assert fast._scratch.shape[0] >= fast._used and (fast._scratch == -1).all()  # left clean for the next batch
    last = got[-1]
    assert last.distinct == 4 and last.inverse.tolist() == [0, 1, 2, 3, 0]
    assert last.ids[0] == last.ids[1] and last.ids[2] == last.ids[3]  # one identity per key's bytes


def run(name: str, data: list[list[Any]], **params: Any) -> tuple[np.ndarray, bytes]:
    part = create(name, 8, window=60_000, slide=1_000, seed=3, **params)
    out = [part.assign(b, np.arange(len(b)) + 10 * i) for i, b in enumerate(data)]
    return np.concatenate(out), part.snapshot().data  # the pickled state: same values, same types


@pytest.mark.parametrize("kind", ["uniform", "zipf"])
@pytest.mark.parametrize(
    ("name", "params"),
    [("pkg", {}), ("pkg", {"load": "windowed"}), ("fish", {}), ("fish", {"epoch": 900})],
)
def test_pkg_and_fish_compiled_equal_python(
    name: str, params: dict[str, Any], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = batches(kind, 2)
    got, got_state = run(name, data, **params)
    for mod in (keys_mod, pkg_mod, waterfill_mod):
        monkeypatch.setattr(mod, "choice_kernels", lambda: None)
    want, want_state = run(name, data, **params)
    assert np.array_equal(got, want)
    assert got_state == want_state


@pytest.mark.parametrize("kind", ["uniform", "zipf"])
def test_fish_with_capacity_feedback_compiled_equals_python(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ptime = [8.0, 8.0, 16.0, 8.0, 5.5, 8.0, 8.0, 12.25]
    data = batches(kind, 4)

    def fed() -> np.ndarray:
        part = create("fish", 8, window=60_000, slide=1_000, seed=3)
        part.report_capacity(ptime)  # type: ignore[attr-defined]
        return np.concatenate([part.assign(b, np.arange(len(b)) * 3 + 100 * i) for i, b in enumerate(data)])

    got = fed()
    monkeypatch.setattr(waterfill_mod, "choice_kernels", lambda: None)
    assert np.array_equal(got, fed())


def test_array_loops_equal_list_loops_on_fractional_loads() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(2, 9))
        k = int(rng.integers(0, 60))
        first = rng.integers(0, n, k)
        second = (first + rng.integers(1, n, k)) % n
        counts = rng.integers(1, 12, k)
        base = (rng.integers(0, 20, n) + rng.random(n) * (rng.random() < 0.5)).tolist()
        loads_a, loads_b = list(base), list(base)
        assert pkg_fill_many(first, second, counts, loads_a).tolist() == pkg_fill(
            first.tolist(), second.tolist(), counts.tolist(), loads_b
        )
        assert loads_a == loads_b
        ptime = None if rng.random() < 0.5 else (rng.random(n) * 4 + 0.5).tolist()
        loads_a, loads_b = list(base), list(base)
        assert two_choice_many(first, second, loads_a, ptime).tolist() == two_choice(
            first.tolist(), second.tolist(), loads_b, ptime
        )
        assert loads_a == loads_b


@pytest.mark.parametrize("level", [float("inf"), 40.0])
def test_dalton_tail_compiled_equals_python(level: float) -> None:
    from router.partitioners.dalton.tail import two_choice_keys

    kernels = choice_kernels()
    assert kernels is not None
    rng = np.random.default_rng(4)
    n, k = 8, 400
    c1 = rng.integers(0, n, k).astype(np.intp)
    c2 = ((c1 + rng.integers(1, n, k)) % n).astype(np.intp)
    weights = np.minimum(rng.zipf(1.4, k), 200).astype(np.int64)
    order = np.argsort(-weights, kind="stable").astype(np.intp)
    start = rng.integers(0, 30, n).astype(np.float64)
    got_loads, want_loads = start.copy(), start.copy()
    got, want = np.full(k, -1, np.intp), np.full(k, -1, np.intp)
    kernels.two_choice_keys(order, c1, c2, weights, got_loads, level, got)
    two_choice_keys(order, c1, c2, weights, want_loads, level, want)
    assert np.array_equal(got, want) and np.array_equal(got_loads, want_loads)
    on_candidate = (got == c1) | (got == c2)
    assert on_candidate.all() if level == float("inf") else not on_candidate.all()  # spills only with a level
