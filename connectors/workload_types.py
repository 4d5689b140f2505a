"""The types every workload shares: a batch, a named replayable stream, and the common parameters."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from schemas.exceptions import ConfigError

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_TUPLES",
    "Batch",
    "BatchSource",
    "Workload",
    "common_params",
    "interleave",
    "parse_spec",
    "tagged_batches",
]

Batch = tuple[np.ndarray, npt.NDArray[np.int64]]
DEFAULT_TUPLES = 100_000
DEFAULT_BATCH = 1_000


class BatchSource(Protocol):
    """The minimal interface a benchmark needs: a name and an iterator of ``(keys, times)`` batches."""

    name: str

    def batches(self) -> Iterator[Batch]:
        """Yield the stream's batches in order (a fresh, identical iterator on every call)."""
        ...


@dataclass(frozen=True)
class Workload:
    """A named, replayable stream of batches.

    ``make`` returns a fresh iterator each call (same seed, same batches). ``tuples`` is the stream
    length when known. ``sources`` are the per-source sub-streams of a multi-source workload (empty for
    a single source); ``window``/``slide`` suggest a window in the stream's time unit (``None``: the
    caller's default, typically tuple counts).
    """

    name: str
    make: Callable[[], Iterator[Batch]]
    tuples: int | None = None
    sources: tuple[Workload, ...] = ()
    window: float | None = None
    slide: float | None = None
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    def batches(self) -> Iterator[Batch]:
        """Yield the stream's batches (a fresh iterator each call)."""
        return self.make()


def common_params(params: dict[str, Any]) -> tuple[int, int, int]:
    """Pop ``tuples``, ``batch`` and ``seed`` from a workload's parameters (with their defaults)."""
    tuples = int(params.pop("tuples", DEFAULT_TUPLES))
    batch = int(params.pop("batch", DEFAULT_BATCH))
    seed = int(params.pop("seed", 0))
    if tuples < 1 or batch < 1:
        raise ValueError(f"tuples and batch must be >= 1, got {tuples}, {batch}")
    return tuples, batch, seed


def _convert(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``"name:k=v,k=v"`` into the name and a dict of parameters (ints and floats converted)."""
    name, _, rest = spec.strip().partition(":")
    params: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise ConfigError([f"workload {spec!r}: parameter {part!r} is not k=v"])
        params[key.strip()] = _convert(value.strip())
    return name, params


# -- building blocks -----------------------------------------------------------------------------------


def interleave(sources: list[Workload], offsets: list[int]) -> Iterator[tuple[int, Batch]]:
    """Round-robin over the sources' batches; keys are shifted by ``offsets`` and re-timed globally."""
    its = [s.batches() for s in sources]
    clock, live = 0, list(range(len(its)))
    while live:
        for i in list(live):
            nxt = next(its[i], None)
            if nxt is None:
                live.remove(i)
                continue
            keys = nxt[0] + offsets[i] if offsets[i] else nxt[0]
            yield i, (keys, np.arange(clock, clock + len(keys), dtype=np.int64))
            clock += len(keys)


def tagged_batches(workload: Workload) -> Iterator[tuple[int, Batch]]:
    """Yield ``(source index, batch)``: the multi-source interleaving, or source 0 for every batch."""
    if not workload.sources:
        for b in workload.batches():
            yield 0, b
        return
    yield from interleave(list(workload.sources), list(workload.params.get("offsets", [0] * len(workload.sources))))
