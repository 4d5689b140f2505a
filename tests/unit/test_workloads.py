"""Workload generators: seeded, streaming, and shaped as intended."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.workloads import make_workload, parse_spec, tagged_batches, zipf_probabilities
from schemas.exceptions import ConfigError


def collect(spec: str, **kw: object) -> tuple[np.ndarray, np.ndarray]:
    wl = make_workload(spec, **kw)
    ks, ts = zip(*wl.batches(), strict=True)
    return np.concatenate(ks), np.concatenate(ts)


SYNTHETIC = [
    "uniform:keys=100",
    "zipf:s=1.5,keys=1000",
    "alternating:s=1.5,keys=1000,phase=2000",
    "zipf-drift:keys=1000,phase=2000",
    "evolving:s=1.5,keys=1000",
    "multi:kinds=uniform+zipf,keys=1000",
]


@pytest.mark.parametrize("spec", SYNTHETIC)
def test_seeded_deterministic_and_counted(spec: str) -> None:
    k1, t1 = collect(spec, tuples=10_000)
    k2, t2 = collect(spec, tuples=10_000)
    k3, _ = collect(spec, tuples=10_000, seed=5)
    assert np.array_equal(k1, k2) and np.array_equal(t1, t2)
    assert not np.array_equal(k1, k3)
    assert k1.shape == (10_000,) and k1.dtype == np.int64
    assert np.array_equal(t1, np.arange(10_000))  # a global tuple counter


def test_streams_without_materialising() -> None:
    wl = make_workload("zipf:s=1.0,keys=1000000,tuples=1000000000000,batch=500")
    first = list(itertools.islice(wl.batches(), 3))
    assert [len(k) for k, _ in first] == [500, 500, 500]
    assert first[2][1][0] == 1000


@pytest.mark.parametrize("s", [0.5, 1.0, 1.5, 2.0])
def test_zipf_top_key_share_matches_theory(s: float) -> None:
    n, keys = 200_000, 10_000
    k, _ = collect(f"zipf:s={s},keys={keys}", tuples=n)
    p = zipf_probabilities(keys, s)
    counts = np.bincount(k, minlength=keys)
    for rank in (0, 1, 9):
        sigma = np.sqrt(n * p[rank] * (1 - p[rank]))
        assert abs(counts[rank] - n * p[rank]) <= 4 * sigma, (rank, counts[rank], n * p[rank])
    assert k.min() >= 0 and k.max() < keys


def test_uniform_is_flat() -> None:
    k, _ = collect("uniform:keys=50", tuples=50_000)
    counts = np.bincount(k, minlength=50)
    assert counts.min() > 850 and counts.max() < 1150


def top(keys: np.ndarray) -> int:
    return int(np.bincount(keys).argmax())


def test_evolving_permutes_ranks_at_80_percent() -> None:
    k, _ = collect("evolving:s=1.5,keys=1000", tuples=20_000, batch=700)
    cut = 16_000
    before, after = k[:cut], k[cut:]
    assert top(before) == 0 and top(before[-1000:]) == 0
    assert top(after) != 0 and top(after[:1000]) == top(after)
    assert np.mean(after == 0) < 0.01  # rank 0 went to some cold position
    assert np.mean(after == top(after)) == pytest.approx(zipf_probabilities(1000, 1.5)[0], abs=0.03)


def test_alternating_phases() -> None:
    k, _ = collect("alternating:s=1.5,keys=1000,phase=5000", tuples=20_000)
    shares = [np.bincount(k[i : i + 5000]).max() / 5000 for i in range(0, 20_000, 5000)]
    assert shares[0] < 0.01 and shares[2] < 0.01  # uniform phases
    assert shares[1] > 0.3 and shares[3] > 0.3  # Zipf 1.5 phases (p1 ~ 0.38)


def test_zipf_drift_changes_hot_set_every_phase() -> None:
    k, _ = collect("zipf-drift:keys=1000,phase=5000,smin=1.2,smax=1.5", tuples=20_000)
    tops = [top(k[i : i + 5000]) for i in range(0, 20_000, 5000)]
    assert len(set(tops)) >= 3


def test_multi_source_substreams() -> None:
    wl = make_workload("multi:kinds=uniform+zipf,s=1.5,keys=1000,tuples=20000")
    assert len(wl.sources) == 2
    tagged = list(tagged_batches(wl))
    src = {i: np.concatenate([b[0] for j, b in tagged if j == i]) for i in (0, 1)}
    times = np.concatenate([b[1] for _, b in tagged])
    assert np.array_equal(times, np.arange(20_000))
    assert len(src[0]) == len(src[1]) == 10_000
    assert np.bincount(src[0]).max() / 10_000 < 0.01 and np.bincount(src[1]).max() / 10_000 > 0.3
    combined = np.concatenate([k for k, _ in wl.batches()])
    assert np.array_equal(combined, np.concatenate([b[0] for _, b in tagged]))


def test_flights() -> None:
    k, t = collect("flights:key=route")
    assert len(k) == 336_776
    assert np.all(np.diff(t) >= 0)
    assert set(k[:3]) <= {"EWR-IAH", "LGA-IAH", "JFK-MIA"} and all("-" in x for x in k[:100])
    kt, _ = collect("flights:key=tailnum")
    assert 330_000 < len(kt) < 336_776  # flights without a tail number are dropped
    wl = make_workload("flights:key=dest")
    assert wl.slide == 86_400_000 and wl.window == 7 * 86_400_000


def test_words_language_switch() -> None:
    k, _ = collect("words:lang=en,switch=fr,at=0.5,vocab=5000", tuples=20_000)
    first, second = k[:10_000], k[10_000:]
    assert np.mean(first == "the") > 0.02 and np.mean(second == "the") < 0.005
    assert np.mean(second == "de") > 0.02


def test_file_replay_jsonl_and_csv(tmp_path: Path) -> None:
    jl = tmp_path / "s.jsonl"
    jl.write_text("\n".join(json.dumps({"user": f"u{i % 3}", "ts": f"2024-01-01T00:00:0{i}Z"}) for i in range(5)))
    k, t = collect(f"file:path={jl},key=user,time=ts,unit=iso,batch=2")
    assert k.tolist() == ["u0", "u1", "u2", "u0", "u1"]
    assert np.array_equal(np.diff(t), [1000] * 4)
    cs = tmp_path / "s.csv"
    cs.write_text("id,t\na,5\nb,7\na,9\n")
    k, t = collect(f"file:path={cs},key=id,time=t")
    assert k.tolist() == ["a", "b", "a"] and t.tolist() == [5, 7, 9]
    k, t = collect(f"file:path={cs},key=id")
    assert t.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="record 1: nope: key field is missing"):
        collect(f"file:path={cs},key=nope")


def test_spec_parsing_and_errors() -> None:
    assert parse_spec("zipf:s=1.5,keys=10") == ("zipf", {"s": 1.5, "keys": 10})
    with pytest.raises(ConfigError, match="unknown workload"):
        make_workload("nope")
    with pytest.raises(ConfigError, match="unknown parameter"):
        make_workload("zipf:bogus=1")
    with pytest.raises(ConfigError, match="not k=v"):
        make_workload("zipf:s")


def test_file_sample_names_fields_as_a_route(tmp_path: Path) -> None:
    """key / time / unit of a file: sample mean a route's key.field / time.field / time.unit (dotted paths)."""
    jl = tmp_path / "nested.jsonl"
    jl.write_text("\n".join(json.dumps({"user": {"id": i % 2}, "at": {"s": 10 + i}}) for i in range(4)))
    k, t = collect(f"file:path={jl},key=user.id,time=at.s,unit=s")
    assert k.tolist() == ["0", "1", "0", "1"] and t.tolist() == [10_000, 11_000, 12_000, 13_000]
    with pytest.raises(ConfigError, match="unit must be ms, s or iso"):
        make_workload(f"file:path={jl},key=user.id,time=at.s,unit=h")
    with pytest.raises(ValueError, match=r"record 1: at\.s: event time must be an ISO-8601 string"):
        collect(f"file:path={jl},key=user.id,time=at.s,unit=iso")
