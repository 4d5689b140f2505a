"""The types every workload shares: a batch, a named replayable stream, and the common parameters."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_BATCH", "DEFAULT_TUPLES", "Batch", "BatchSource", "Workload", "common_params"]

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
