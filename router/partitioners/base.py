"""The partitioner contract: batch in, combiner ids out; explicit, serialisable state."""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from router.partitioners.keys import DEFAULT_HASH_SEED, KeyBatch, KeyCodec, Keys
from schemas.settings import WindowSettings

__all__ = ["Assignment", "Partitioner", "PartitionerState", "StateVersionError"]

Assignment = npt.NDArray[np.int32]
STATE_VERSION = 1
#: The window defaults are the settings' (:class:`schemas.settings.WindowSettings`), written there only.
DEFAULT_WINDOW = WindowSettings()


class StateVersionError(ValueError):
    """A snapshot written by another version of the partitioner's state layout."""


@dataclass(frozen=True)
class PartitionerState:
    """A partitioner's state at one point: enough to continue exactly where it stopped.

    ``params`` are the constructor arguments; ``data`` is the algorithm's own state (opaque bytes).
    """

    name: str
    params: dict[str, Any]
    data: bytes
    version: int = STATE_VERSION
    meta: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Serialise (for a restart file)."""
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, raw: bytes) -> PartitionerState:
        """Inverse of :meth:`to_bytes`; only for state files this process or a trusted one wrote."""
        state = pickle.loads(raw)
        if not isinstance(state, cls):
            raise TypeError(f"not a PartitionerState: {type(state).__name__}")
        return state


class Partitioner(ABC):
    """Assigns each tuple of a batch to one of ``n`` combiners.

    Subclasses implement :meth:`_assign` over a :class:`KeyBatch`. Time is injected (``times``: event time
    or a tuple counter, in the same unit as ``window`` and ``slide``) and randomness comes from
    ``self.rng`` (seeded), so runs are exactly reproducible.

    Constructors receive validated values and check nothing themselves: ``n >= 1``,
    ``0 < slide <= window`` and every algorithm parameter's bounds are declared once, in the settings models
    (:mod:`schemas.partitioner_settings`, :class:`schemas.settings.WindowSettings`), which
    :func:`router.partitioners.create` applies. Parameter defaults are read from the same models.

    Class attributes a subclass declares:
    - ``name``: the registry name;
    - ``splits_keys``: whether one key may reach more than one combiner inside a window;
    - ``n_hashes``: how many murmur3 hashes per key the algorithm needs (0 for none).
    """

    name: ClassVar[str] = ""
    splits_keys: ClassVar[bool] = False
    n_hashes: ClassVar[int] = 1
    #: Layout version of :meth:`_state`; bump it when the state's attributes change meaning or shape, so
    #: that :meth:`restore` refuses a snapshot it cannot read instead of continuing from garbage.
    state_version: ClassVar[int] = 1

    def __init__(
        self,
        n: int,
        *,
        window: float = DEFAULT_WINDOW.size,
        slide: float = DEFAULT_WINDOW.slide,
        seed: int = 0,
        hash_seed: int = DEFAULT_HASH_SEED,
    ) -> None:
        self.n = int(n)
        self.window = window
        self.slide = slide
        self.seed = seed
        self.hash_seed = hash_seed
        self.rng = np.random.default_rng(seed)
        self.codec = KeyCodec(self._hash_count(), hash_seed)
        self.tuples_seen = 0
        self._params: dict[str, Any] = {"window": window, "slide": slide, "seed": seed, "hash_seed": hash_seed}

    def _hash_count(self) -> int:
        """Hashes per key this instance needs (override when it depends on parameters, e.g. ``d``)."""
        return self.n_hashes

    # -- the data path -------------------------------------------------------------------------
    def assign(self, keys: Keys, times: npt.ArrayLike | None = None) -> Assignment:
        """Assign a batch: returns one combiner id in ``[0, n)`` per key, in input order.

        ``times`` (non-decreasing within and across batches) defaults to a tuple counter, which makes the
        windows count-based.
        """
        return self._assign_keyed(keys, times)[0]

    def assign_with_ids(
        self, keys: Keys, times: npt.ArrayLike | None = None
    ) -> tuple[Assignment, npt.NDArray[np.uint64]]:
        """:meth:`assign`, and every tuple's 64-bit key id (the key codec's murmur3 hash of the key).

        For a caller that counts distinct keys per window (the router's window metrics): the ids are already
        computed for the assignment, so the keys are not hashed a second time.
        """
        out, batch = self._assign_keyed(keys, times)
        return out, batch.ids[batch.inverse]

    def _assign_keyed(self, keys: Keys, times: npt.ArrayLike | None) -> tuple[Assignment, KeyBatch]:
        """The assignment, and the encoded batch it was decided on."""
        batch = self.codec.encode(keys)
        if times is None:
            t = np.arange(self.tuples_seen, self.tuples_seen + batch.size, dtype=np.int64)
        else:
            t = np.asarray(times).reshape(-1)
            if t.shape[0] != batch.size:
                raise ValueError(f"times has {t.shape[0]} entries for {batch.size} keys")
        self.tuples_seen += batch.size
        if batch.size == 0:
            return np.zeros(0, dtype=np.int32), batch
        return np.asarray(self._assign(batch, t), dtype=np.int32), batch

    @abstractmethod
    def _assign(self, batch: KeyBatch, times: np.ndarray) -> npt.ArrayLike:
        """Decide the combiner of every tuple of ``batch`` (``times[t]`` is tuple ``t``'s time)."""

    # -- state ---------------------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """Constructor arguments (besides ``n``) that recreate this instance."""
        return dict(self._params)

    def _state(self) -> dict[str, Any]:
        """The algorithm's mutable state; by default every attribute (the key cache is excluded)."""
        return dict(vars(self))

    def _load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`_state`."""
        self.__dict__.update(state)

    def snapshot(self) -> PartitionerState:
        """Capture the state; a fresh instance given it by :meth:`restore` continues identically."""
        data = pickle.dumps(self._state(), protocol=pickle.HIGHEST_PROTOCOL)
        return PartitionerState(self.name, {"n": self.n, **self.params()}, data, meta={"state": self.state_version})

    def restore(self, state: PartitionerState) -> None:
        """Continue from ``state`` (taken from an instance of the same algorithm and ``n``)."""
        if state.name != self.name:
            raise ValueError(f"state of partitioner {state.name!r} cannot restore {self.name!r}")
        if state.params.get("n") != self.n:
            raise ValueError(f"state for n={state.params.get('n')} cannot restore n={self.n}")
        found = (state.version, state.meta.get("state"))
        if found != (STATE_VERSION, self.state_version):
            raise StateVersionError(
                f"{self.name} snapshot has state version {found[0]} / layout {found[1]}; this version reads "
                f"state version {STATE_VERSION} / layout {self.state_version} only (start from an empty state instead)"
            )
        self._load_state(pickle.loads(state.data))

    def set_backlog(self, behind: bool) -> None:  # noqa: B027 - optional hook
        """Whether the router is catching up on a backlog (see ``plane_clock.CatchUp``); the default ignores it.

        While it catches up the consumer's micro-batches span many slides, so a partitioner may prefer
        placements that stay put from one slide to the next.
        """

    def merge(self, peers: Sequence[PartitionerState]) -> None:  # noqa: B027 - optional hook
        """Learn from peer routers' states (cooperative learning); the default learns nothing.

        Must not depend on the order of ``peers``.
        """

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}(n={self.n}, {args})"
