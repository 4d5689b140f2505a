"""Seeded, streaming workload generators for benchmarks, the advisor and tests.

A workload yields batches ``(keys, times)`` of numpy arrays (keys: ``int64`` ids or ``str``; times:
``int64``, non-decreasing, in the unit of the router's window). Synthetic times are a global tuple
counter (count-based windows). Nothing is materialised beyond one batch (plus a CDF of ``K`` floats),
so long runs stream.

Workloads are built by name from a spec string, ``NAME[:k=v,k=v...]``::

    make_workload("zipf:s=1.5,keys=10000,tuples=100000")

Common parameters: ``tuples`` (stream length), ``batch`` (tuples per batch), ``seed``. A workload with
several sources (``multi``) lists them in :attr:`Workload.sources`; each router instance of a benchmark
then reads its own source's sub-stream. A sample read from Kafka plugs in through the same
:class:`Workload` (anything with ``name`` and ``batches()``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from connectors.workload_types import (
    Batch,
    BatchSource,
    Workload,
    common_params,
    interleave,
    parse_spec,
    tagged_batches,
)
from schemas.exceptions import ConfigError

__all__ = [
    "Batch",
    "BatchSource",
    "Workload",
    "available_workloads",
    "make_workload",
    "parse_spec",
    "register_workload",
    "tagged_batches",
    "zipf_keys",
    "zipf_probabilities",
]


def zipf_probabilities(keys: int, s: float) -> npt.NDArray[np.float64]:
    """Probabilities of a Zipf law bounded to ``keys`` ranks: ``p(r) ∝ r^-s``, rank ``r`` = index + 1."""
    if keys < 1:
        raise ValueError(f"keys must be >= 1, got {keys}")
    p = np.arange(1, keys + 1, dtype=np.float64) ** -float(s)
    return np.asarray(p / p.sum())


def zipf_keys(size: int, s: float, keys: int, seed: int, permute: bool = False) -> npt.NDArray[np.int64]:
    """``size`` key ids drawn at once from a Zipf law over ``keys`` ranks (seeded; for tests and sweeps).

    ``permute`` maps ranks to key ids through a random permutation, so the hot keys are not the small ids.
    """
    rng = np.random.default_rng(seed)
    ids = rng.choice(keys, size=size, p=zipf_probabilities(keys, s))
    if permute:
        ids = rng.permutation(keys)[ids]
    return np.asarray(ids, dtype=np.int64)


class _Sampler:
    """Draws key ids from a fixed distribution over ``keys`` ranks, optionally through a permutation."""

    def __init__(self, keys: int, s: float, perm: np.ndarray | None = None) -> None:
        self.keys = keys
        self.cdf = None if s == 0 else np.cumsum(zipf_probabilities(keys, s))
        self.perm = perm

    def draw(self, rng: np.random.Generator, size: int) -> npt.NDArray[np.int64]:
        if self.cdf is None:
            ranks = rng.integers(0, self.keys, size=size, dtype=np.int64)
        else:
            ranks = np.minimum(np.searchsorted(self.cdf, rng.random(size), side="right"), self.keys - 1)
        ranks = ranks.astype(np.int64, copy=False)
        return ranks if self.perm is None else self.perm[ranks]


def _phased(
    tuples: int, batch: int, seed: int, phase: int, sampler_for: Callable[[int, np.random.Generator], _Sampler]
) -> Iterator[Batch]:
    """Yield batches whose key distribution is ``sampler_for(phase_index, rng)``; phases never straddle."""
    rng = np.random.default_rng(seed)
    start, current, sampler = 0, -1, None
    while start < tuples:
        idx = start // phase
        if idx != current:
            current, sampler = idx, sampler_for(idx, rng)
        size = min(batch, tuples - start, (idx + 1) * phase - start)
        assert sampler is not None
        keys = sampler.draw(rng, size)
        yield keys, np.arange(start, start + size, dtype=np.int64)
        start += size


def _take(params: dict[str, Any], key: str, default: Any) -> Any:
    return params.pop(key, default)


# -- the synthetic workloads ---------------------------------------------------------------------------


def _uniform(p: dict[str, Any]) -> Workload:
    tuples, batch, seed = common_params(p)
    keys = int(_take(p, "keys", 10_000))
    return Workload(
        f"uniform(keys={keys})",
        lambda: _phased(tuples, batch, seed, tuples, lambda i, r: _Sampler(keys, 0)),
        tuples,
        description=f"uniform over {keys} keys",
    )


def _zipf(p: dict[str, Any]) -> Workload:
    tuples, batch, seed = common_params(p)
    s, keys = float(_take(p, "s", 1.5)), int(_take(p, "keys", 10_000))
    shuffle = bool(_take(p, "perm", 0))

    def make() -> Iterator[Batch]:
        perm = np.random.default_rng(seed + 1).permutation(keys) if shuffle else None
        return _phased(tuples, batch, seed, tuples, lambda i, r: _Sampler(keys, s, perm))

    return Workload(f"zipf(s={s:g},keys={keys})", make, tuples, description=f"Zipf s={s:g} over {keys} keys")


def _alternating(p: dict[str, Any]) -> Workload:
    """Dalton Fig. 9a: phases alternate uniform / Zipf (uniform first)."""
    tuples, batch, seed = common_params(p)
    s, keys = float(_take(p, "s", 1.5)), int(_take(p, "keys", 10_000))
    phase = int(_take(p, "phase", max(tuples // 5, 1)))
    samplers = (_Sampler(keys, 0), _Sampler(keys, s))
    return Workload(
        f"alternating(s={s:g},keys={keys},phase={phase})",
        lambda: _phased(tuples, batch, seed, phase, lambda i, r: samplers[i % 2]),
        tuples,
        description=f"uniform / Zipf s={s:g} phases of {phase} tuples over {keys} keys",
        params={"phase": phase},
    )


def _zipf_drift(p: dict[str, Any]) -> Workload:
    """Dalton Fig. 9d: every phase draws a new exponent in [smin, smax] and a new hot set."""
    tuples, batch, seed = common_params(p)
    keys = int(_take(p, "keys", 10_000))
    phase = int(_take(p, "phase", max(tuples // 5, 1)))
    lo, hi = float(_take(p, "smin", 0.5)), float(_take(p, "smax", 1.5))

    def sampler(i: int, rng: np.random.Generator) -> _Sampler:
        return _Sampler(keys, float(rng.uniform(lo, hi)), rng.permutation(keys))

    return Workload(
        f"zipf-drift(keys={keys},phase={phase},s={lo:g}..{hi:g})",
        lambda: _phased(tuples, batch, seed, phase, sampler),
        tuples,
        description=f"Zipf, exponent in [{lo:g}, {hi:g}] and hot set redrawn every {phase} tuples",
        params={"phase": phase},
    )


def _evolving(p: dict[str, Any]) -> Workload:
    """FISH's time-evolving Zipf: the key ranks are permuted once, after ``at`` (0.8) of the stream."""
    tuples, batch, seed = common_params(p)
    s, keys = float(_take(p, "s", 1.5)), int(_take(p, "keys", 100_000))
    at = float(_take(p, "at", 0.8))
    cut = max(1, min(tuples, round(tuples * at)))

    def make() -> Iterator[Batch]:
        perm = np.random.default_rng(seed + 7).permutation(keys)
        first, second = _Sampler(keys, s), _Sampler(keys, s, perm)
        return _phased(tuples, batch, seed, cut, lambda i, r: first if i == 0 else second)

    return Workload(
        f"evolving(s={s:g},keys={keys},at={at:g})",
        make,
        tuples,
        description=f"Zipf s={s:g} over {keys} keys, ranks permuted after {at:.0%} of the stream",
        params={"cut": cut},
    )


def _multi(p: dict[str, Any]) -> Workload:
    """Dalton Fig. 13: several sources, each its own distribution (``kinds=uniform+zipf``).

    With ``shared=1`` (default) the sources draw from the same key space, each Zipf source with its own
    hot set; ``shared=0`` gives every source disjoint keys.
    """
    tuples, batch, seed = common_params(p)
    kinds = str(_take(p, "kinds", "uniform+zipf")).split("+")
    s, keys = float(_take(p, "s", 1.5)), int(_take(p, "keys", 10_000))
    shared = bool(_take(p, "shared", 1))
    per = max(tuples // len(kinds), 1)
    subs: list[Workload] = []
    for i, kind in enumerate(kinds):
        spec: dict[str, Any] = {"tuples": per, "batch": batch, "seed": seed + 101 * i, "keys": keys}
        if kind == "zipf":
            spec.update(s=s, perm=1 if i > 0 else 0)
        elif kind != "uniform":
            raise ValueError(f"multi: kinds must be uniform or zipf, got {kind!r}")
        subs.append(_BUILDERS[kind](spec))
    offsets = [0 if shared else i * keys for i in range(len(kinds))]
    srcs = tuple(subs)
    return Workload(
        f"multi({'+'.join(kinds)},s={s:g},keys={keys})",
        lambda: (b for _, b in interleave(list(srcs), offsets)),
        per * len(kinds),
        sources=srcs,
        description=f"{len(kinds)} sources ({', '.join(kinds)}), Zipf s={s:g}, {keys} keys",
        params={"offsets": offsets},
    )


def _dataset(kind: str) -> Callable[[dict[str, Any]], Workload]:
    def build(p: dict[str, Any]) -> Workload:
        # lazy: pandas and the data packages are heavy to import, and only the lab extra installs them
        datasets = importlib.import_module("benchmarks.datasets")
        return datasets.build(kind, p)

    return build


_BUILDERS: dict[str, Callable[[dict[str, Any]], Workload]] = {
    "uniform": _uniform,
    "zipf": _zipf,
    "alternating": _alternating,
    "zipf-drift": _zipf_drift,
    "evolving": _evolving,
    "multi": _multi,
    "flights": _dataset("flights"),
    "words": _dataset("words"),
    "file": _dataset("file"),
}


def register_workload(name: str, builder: Callable[[dict[str, Any]], Workload]) -> None:
    """Register a workload builder (``builder(params)`` pops the parameters it uses from the dict)."""
    _BUILDERS[name] = builder


def available_workloads() -> list[str]:
    """The registered workload names."""
    return sorted(_BUILDERS)


def make_workload(spec: str, **overrides: Any) -> Workload:
    """Build a workload from ``"name:k=v,..."``; ``overrides`` (e.g. ``tuples=``) replace spec values.

    Unknown names and unused or invalid parameters raise :class:`ConfigError`.
    """
    name, params = parse_spec(spec)
    params.update({k: v for k, v in overrides.items() if v is not None})
    if name not in _BUILDERS:
        raise ConfigError([f"unknown workload {name!r}; valid names: {', '.join(available_workloads())}"])
    try:
        workload = _BUILDERS[name](params)
    except (ValueError, KeyError, OSError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError([f"workload {spec!r}: {exc}"]) from exc
    if params:
        raise ConfigError([f"workload {spec!r}: unknown parameter(s) {', '.join(sorted(params))}"])
    return workload


#: The names ``make_workload`` knows (the CLI lists them when a spec is wrong).
make_workload.available = available_workloads  # type: ignore[attr-defined]
