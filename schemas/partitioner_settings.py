"""Per-partitioner parameters: a discriminated union on ``name``, each algorithm validating its own fields.

``params()`` returns the keyword arguments for ``router.partitioners.create(name, n, **params)``.
"""

from __future__ import annotations

import typing
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import Field

from schemas.model import FrozenModel

__all__ = [
    "HASH_SEED",
    "CustomPartitionerSettings",
    "DaltonSettings",
    "FISHSettings",
    "HashSettings",
    "HeavyChoicesSettings",
    "HolisticSettings",
    "PKGSettings",
    "PartitionerSettings",
    "PromptSettings",
    "ShuffleSettings",
    "settings_model",
]

#: Seed of a route's first candidate hash (hash ``j`` uses ``HASH_SEED + 4 j``: 13, 17, ... as gdfm's PKG).
HASH_SEED = 13


class _Base(FrozenModel):
    def params(self) -> dict[str, Any]:
        """Constructor keyword arguments (everything but ``name``)."""
        return self.model_dump(exclude={"name"})


class HashSettings(_Base):
    """Key grouping: ``murmur3_32(key) mod n``."""

    name: Literal["hash"] = "hash"
    hash_seed: int = Field(HASH_SEED, description="murmur3 seed; must be equal on every router of a route")


class ShuffleSettings(_Base):
    """Round-robin per router instance; splits every key."""

    name: Literal["shuffle"] = "shuffle"


class PKGSettings(_Base):
    """Partial Key Grouping: the least locally loaded of ``d`` hash candidates."""

    name: Literal["pkg"] = "pkg"
    d: int = Field(2, ge=1, le=64, description="number of hash candidates per key (PK-d for d > 2; 1 = hashing)")
    load: Literal["cumulative", "windowed"] = Field(
        "cumulative", description="local load estimate: since start (paper) or per tumbling window"
    )
    hash_seed: int = Field(HASH_SEED, description="seed of the first candidate hash")


class HolisticSettings(_Base):
    """CM, AM, cAM or LM (Holistic partitioning costs): cardinality/affinity-aware two choices."""

    name: Literal["cm", "am", "cam", "lm"]
    d: int = Field(2, ge=1, le=64, description="number of hash candidates per key (1 = hashing)")
    cardinality: Literal["exact", "hll"] = Field(
        "exact", description="distinct-key sets per combiner: exact sets or HyperLogLog (DataSketches, 2^12)"
    )
    windowing: Literal["tumbling", "sliding"] = Field(
        "tumbling", description="state reset at tumbling window boundaries, or expiry over a sliding window"
    )
    p: float = Field(0.5, ge=0, le=1, description="LM only: weight of tuple load vs key cardinality")
    hash_seed: int = Field(HASH_SEED, description="seed of the first candidate hash")

    def params(self) -> dict[str, Any]:
        """Constructor keyword arguments (``p`` only for LM)."""
        out = super().params()
        if self.name != "lm":
            out.pop("p")
        return out


class FISHSettings(_Base):
    """FISH: epoch-based hot-key counting with decay and consistent-hash candidates."""

    name: Literal["fish"] = "fish"
    alpha: float = Field(0.2, gt=0, le=1, description="decay factor applied to all counters at each epoch end")
    theta: float | None = Field(None, gt=0, lt=1, description="hot-key share threshold (default 1/(4n))")
    epoch: int = Field(1000, ge=1, description="tuples per counting epoch (N_epoch)")
    k_max: int = Field(1000, ge=1, description="space-saving counters kept (K_max)")
    d_min: int = Field(2, ge=1, description="minimum candidates of a hot key")
    interval: float = Field(
        10_000, gt=0, description="decay interval T of the waiting-time estimate (time units; 10 s in ms)"
    )
    virtual_nodes: int = Field(64, ge=1, le=4096, description="virtual nodes per combiner on the ring")


class HeavyChoicesSettings(_Base):
    """D-Choices or W-Choices: space-saving heavy hitters get d (or all n) candidates, the rest PKG."""

    name: Literal["dchoices", "wchoices"]
    theta: float | None = Field(None, gt=0, lt=1, description="heavy-hitter share threshold (default 1/(5n))")
    k_max: int = Field(1000, ge=1, description="space-saving counters kept")
    load: Literal["cumulative", "windowed"] = Field(
        "cumulative", description="local load estimate: since start (paper) or per tumbling window"
    )
    hash_seed: int = Field(HASH_SEED, description="seed of the candidate hashes")


class DaltonSettings(_Base):
    """Dalton: sticky placement per micro-batch (default) or the paper's contextual bandit for hot keys.

    The one place the Dalton partitioner's defaults and bounds are written: the partitioner validates its
    keyword arguments with this model.
    """

    name: Literal["dalton"] = "dalton"
    placement: Literal["sticky", "bandit"] = Field(
        "sticky",
        description="sticky: keys stay on the combiners holding them in the micro-batch (the slide), split only "
        "when larger than the room left; bandit: the paper's Q-learning for hot keys (tail, pack, update, quantum)",
    )
    balance: float = Field(
        0.02,
        ge=0,
        le=1,
        description="sticky: a key new to a combiner may raise it to (1 + balance) x the micro-batch's mean so far",
    )
    routers: int = Field(
        1,
        ge=1,
        description="sticky: router instances reading the route's keys; with several, the tail takes the first "
        "choice every router shares from the first tuple on (as it does once a sync has happened); not used when "
        "raw_keys is partitioned",
    )
    raw_keys: Literal["auto", "shared", "partitioned"] = Field(
        "auto",
        description="sticky: partitioned = each raw partition holds its own keys (the raw topic is partitioned "
        "by the routing key), so each router places its keys as one router does, on its own tuples, whatever its "
        "peers sync; shared = routers may see the same keys, which then go back to the first choice every router "
        "shares; auto = partitioned when the route's key is the Kafka message key, shared otherwise",
    )
    plan_together: bool = Field(
        False,
        description="sticky, raw_keys partitioned, several routers: while they route the same slides (live), the "
        "routers plan the combiners' load together from the sync rounds, so a key large for its router but not "
        "for the sum reaches the combiners the sum needs (fewer partials with very hot keys; see "
        "docs/partitioners.md); off: each router balances its own tuples",
    )
    epsilon: float = Field(0.1, ge=0, le=1, description="bandit: exploration probability")
    gamma: float = Field(0.1, gt=0, le=1, description="bandit: learning rate of the Q update")
    p1: float = Field(0.5, ge=0, le=1, description="bandit: reward weight of the load imbalance term")
    p2: float = Field(0.5, ge=0, le=1, description="bandit: reward weight of the fragmentation term")
    initial_q: float = Field(-2.0, description="bandit: initial Q value (below any reward)")
    statistics: Literal["exact", "countmin", "hybrid"] = Field(
        "exact", description="hot-key frequency statistics: hashmap, count-min sketch, or chosen per window"
    )
    exact_limit: int = Field(1 << 16, ge=1, description="hybrid statistics: distinct keys before the sketch")
    stats_window: float | None = Field(None, gt=0, description="statistics window (default: one slide)")
    max_split: int | None = Field(None, ge=1, description="bandit: most combiners one key may use (default n)")
    tail: Literal["hash", "affinity"] = Field(
        "affinity", description="bandit: non-hot keys by hash (paper) or the two-choice affinity rule"
    )
    micro_batch: bool = Field(
        True, description="bandit: count fragmentation and load per slide (= the Spark trigger), not per window"
    )
    quantum: int | None = Field(None, ge=1, description="bandit: tuples per decision (default: batch-derived)")
    update: Literal["all", "chosen"] = Field(
        "all", description="bandit: Q update of every action toward its modelled reward, or the chosen one (paper)"
    )
    pack: bool = Field(
        True,
        description="bandit: hot keys first (affinity tail only), each combiner filled to the mean at most "
        "(False: tail first, as in the paper)",
    )
    key_forwarding: bool = Field(
        False, description="mark tuples of keys held by one combiner for forwarding (Sec. 4.2; single router)"
    )
    hash_seed: int = Field(13, description="seed of the hash combiner and the candidates")


class PromptSettings(_Base):
    """Prompt's batch partitioner (micro-batch mode): frequency-aware buffering and B-BPFI blocks."""

    name: Literal["prompt"] = "prompt"


class CustomPartitionerSettings(_Base):
    """A partitioner registered by a third party (``router.partitioners.register`` or entry point)."""

    name: Literal["custom"] = "custom"
    plugin: str = Field(..., min_length=1, description="the registered partitioner name")
    options: dict[str, Any] = Field(default_factory=dict, description="its constructor keyword arguments")

    def params(self) -> dict[str, Any]:
        """The plugin's keyword arguments."""
        return dict(self.options)


PartitionerSettings = Annotated[
    HashSettings
    | ShuffleSettings
    | PKGSettings
    | HolisticSettings
    | FISHSettings
    | HeavyChoicesSettings
    | DaltonSettings
    | PromptSettings
    | CustomPartitionerSettings,
    Field(discriminator="name"),
]


@cache
def _models_by_name() -> dict[str, type[_Base]]:
    union = typing.get_args(typing.get_args(PartitionerSettings)[0])
    return {
        name: m
        for m in union
        if m is not CustomPartitionerSettings
        for name in typing.get_args(m.model_fields["name"].annotation)
    }


def settings_model(name: str) -> type[_Base] | None:
    """The settings model of built-in partitioner ``name`` (``None`` for third-party ones).

    The models are the one source of the built-in partitioners' bounds: ``router.partitioners.create``
    validates its keyword arguments with them, so a value the settings refuse is refused in code too.
    """
    return _models_by_name().get(name)
