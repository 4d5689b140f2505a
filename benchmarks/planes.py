"""Data planes for benchmarks: a pass-through partitioner, a bounded plane, a plane without a broker.

The bounded plane stops after a number of records; the offline one is driven batch by batch by the caller.

They live here, not in the data plane: the worker's batch loop has no benchmark hooks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from router.dataplane import RouteDataPlane
from router.extract import BadRecord, Extracted, RawMessage
from router.partitioners import Partitioner
from router.partitioners.keys import KeyBatch

__all__ = ["PASSTHROUGH", "BoundedDataPlane", "OfflinePlane", "PassThrough"]

#: Name of the pass-through baseline in benchmark tables.
PASSTHROUGH = "passthrough"


class PassThrough(Partitioner):
    """No key work at all, the same output I/O as a balancing partitioner: tuple ``t`` goes to ``t mod n``.

    :meth:`assign` skips the key codec, so a route with this "partitioner" measures everything the worker does
    except deciding combiners: every combiner partition gets an equal share, as under a balancing partitioner.
    """

    name = PASSTHROUGH
    splits_keys = True
    n_hashes = 0

    def assign(self, keys: Any, times: npt.ArrayLike | None = None) -> npt.NDArray[np.int32]:
        """Round-robin over the ``n`` combiners, continuing across batches."""
        size = len(keys)
        out = ((np.arange(size, dtype=np.int64) + self.tuples_seen) % self.n).astype(np.int32)
        self.tuples_seen += size
        return out

    def assign_with_ids(
        self, keys: Any, times: npt.ArrayLike | None = None
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint64]]:
        """:meth:`assign`, and Python's hash of every key as its id (the window metrics need ids; no codec here)."""
        return self.assign(keys, times), np.fromiter(map(hash, keys), np.int64, len(keys)).view(np.uint64)

    def _assign(self, batch: KeyBatch, times: np.ndarray) -> np.ndarray:  # pragma: no cover - assign overrides
        raise NotImplementedError


class BoundedDataPlane(RouteDataPlane):
    """A route's data plane that stops once it has handled ``stop_after`` records (benchmarks)."""

    def __init__(self, *args: Any, stop_after: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop_after = stop_after

    def _done(self, batch: Any) -> None:
        super()._done(batch)
        if self.stats.consumed >= self.stop_after:
            self.stop()


class OfflinePlane(RouteDataPlane):
    """A route's data plane driven batch by batch by the caller, never started (memory soak, hot-path profile).

    It runs the worker's own extract, assign and produce code: :meth:`route_batch` is the CPU half of a batch
    (extract with the time bound, then assign); :meth:`produce` hands the result to ``producer`` as the worker
    would (set ``plane.producer`` first; a producer without a reachable broker just queues).
    """

    def route_batch(self, msgs: Sequence[RawMessage]) -> tuple[Extracted, np.ndarray]:
        """Extract (with the wall-clock bound on event times), then assign; no Kafka."""
        ext, limit_ms = self._extract(msgs)
        return ext, self._assign(ext, limit_ms)

    def produce(self, ext: Extracted, combiners: np.ndarray) -> list[BadRecord]:
        """Produce the routed records of a batch (the routed format of the router settings); the refused ones."""
        return self._produce(ext, combiners)
