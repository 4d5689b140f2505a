"""The in-process transport: P sync nodes on one in-memory control topic (benchmarks, tests).

Same protocol code as over Kafka: every message is encoded, appended to one ordered log, and delivered
(parsed) to every node, the sender included. Time is the stream's clock (the benchmark's tuple counter or
event time); the benchmark calls :meth:`InProcessBus.tick` after every batch, so syncs and answers are
delivered between batches. ``mode="never"`` keeps the routers apart (each learns alone, as if the reducer
never answered and nobody ever sent a SYNC). ``make_bus(..., node=...)`` builds the nodes with another
:class:`~router.sync.node.SyncNode` subclass (the lab's artificially slow reducer).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from router.sync.node import NodeConfig, SyncNode
from router.sync.port import DirectPort, SyncablePartitioner
from router.sync.reducer import DsyncPolicy
from schemas.control import GlobalMessage, SyncMessage, encode_control

__all__ = ["BusStats", "InProcessBus", "NodeFactory", "SyncOptions", "make_bus"]

SyncMode = Literal["protocol", "never"]
#: Builds one bus node from its port and configuration (``SyncNode`` or a subclass).
NodeFactory = Callable[[DirectPort, NodeConfig], SyncNode]


@dataclass(frozen=True)
class SyncOptions:
    """How a benchmark's routers cooperate (times in the stream's units)."""

    mode: SyncMode = "protocol"
    dsync: float = 1_000
    dsync_min: float | None = None  # default: dsync (the interval never drops below the configured one)
    dsync_max: float | None = None  # default: 64 * dsync
    liveness_factor: float = 3.0

    def policy(self) -> DsyncPolicy:
        """The DSYNC bounds."""
        return DsyncPolicy(self.dsync_min or self.dsync, self.dsync_max or 64 * self.dsync)


@dataclass
class BusStats:
    """Traffic on the in-memory control topic."""

    messages: Counter[str] = field(default_factory=Counter)  # per type
    bytes: Counter[str] = field(default_factory=Counter)
    first: float | None = None
    last: float | None = None
    dsync: list[tuple[float, float]] = field(default_factory=list)  # (time, DSYNC of the GLOBAL)
    rounds: list[tuple[float, int, str]] = field(default_factory=list)  # (time, round, reducer)


class InProcessBus:
    """Sync nodes sharing one ordered in-memory log; :meth:`kill` makes one stop without a word."""

    def __init__(self, nodes: Sequence[SyncNode]) -> None:
        self.nodes = list(nodes)
        self.dead: set[int] = set()
        self.stats = BusStats()
        self.now = 0.0  # the time of the current tick (the ports' clock)

    def _deliver(self, queue: list[SyncMessage | GlobalMessage], now: float) -> None:
        while queue:
            msg = queue.pop(0)
            raw = encode_control(msg)
            kind = msg.type
            self.stats.messages[kind] += 1
            self.stats.bytes[kind] += len(raw)
            if isinstance(msg, GlobalMessage):
                self.stats.dsync.append((now, float(msg.dsync_ms)))
                self.stats.rounds.append((now, msg.round, msg.reducer))
            for i, node in enumerate(self.nodes):
                if i not in self.dead:
                    queue.extend(node.receive_raw(raw, now))

    def tick(self, now: float) -> None:
        """Let every live node sync / reduce at ``now`` and deliver everything that results."""
        if self.stats.first is None:
            self.stats.first = now
        self.stats.last = self.now = now
        queue: list[SyncMessage | GlobalMessage] = []
        for i, node in enumerate(self.nodes):
            if i not in self.dead:
                queue.extend(node.tick(now))
        self._deliver(queue, now)

    def kill(self, index: int) -> None:
        """Node ``index`` dies: it neither sends nor receives any more (no ``leaving`` message)."""
        self.dead.add(index)

    def leave(self, index: int, now: float) -> None:
        """Node ``index`` shuts down cleanly (a last SYNC with ``leaving``)."""
        msgs = self.nodes[index].leave(now)
        self.dead.add(index)
        self._deliver(list(msgs), now)

    def summary(self) -> dict[str, Any]:
        """Messages and bytes in total and per 1000 time units, rounds, DSYNC range."""
        s = self.stats
        span = max(1.0, (s.last or 0.0) - (s.first or 0.0))
        total_b, total_m = sum(s.bytes.values()), sum(s.messages.values())
        ds = [d for _, d in s.dsync]
        return {
            "messages": dict(s.messages),
            "bytes": dict(s.bytes),
            "messages_per_1k": 1000 * total_m / span,
            "bytes_per_1k": 1000 * total_b / span,
            "rounds": len(s.rounds),
            "dsync_min": min(ds) if ds else None,
            "dsync_max": max(ds) if ds else None,
        }


def make_bus(
    partitioners: Sequence[SyncablePartitioner],
    options: SyncOptions,
    *,
    route: str = "bench",
    deployment: str = "bench",
    node: NodeFactory = SyncNode,
) -> InProcessBus | None:
    """A bus of one ``node`` per partitioner (``None`` with ``mode="never"``: nobody syncs)."""
    if options.mode == "never":
        return None
    bus = InProcessBus([])
    bus.nodes = [
        node(
            DirectPort(p, clock=lambda: bus.now),
            NodeConfig(
                deployment=deployment,
                route=route,
                instance=f"r{i:03d}",
                combiners=int(p.n),
                dsync=options.dsync,
                policy=options.policy(),
                liveness_factor=options.liveness_factor,
            ),
        )
        for i, p in enumerate(partitioners)
    ]
    return bus
