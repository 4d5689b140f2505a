"""An artificially slow Q-table reducer, for the DSYNC-adaptation experiment (Dalton Fig. 14b).

:class:`SlowReducerNode` is a :class:`~router.sync.node.SyncNode` whose GLOBALs leave ``delay`` later than
the protocol would send them; ``delay`` is a constant or a function of the time the round was ready (in the
transport's clock), so the experiment can slow the reducer down in phases. Build a bus of them with
``make_bus(..., node=slow_reducer(delay))``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from router.choose.inprocess import NodeFactory
from router.sync.node import NodeConfig, SyncNode
from router.sync.port import PartitionerPort

__all__ = ["Delay", "SlowReducerNode", "slow_reducer"]

#: Extra time before a GLOBAL leaves: a constant, or a function of the time its round was ready.
Delay = float | Callable[[float], float]


class SlowReducerNode(SyncNode):
    """A sync node whose reducer takes ``delay`` longer to answer than it does."""

    def __init__(self, port: PartitionerPort, config: NodeConfig, *, delay: Delay = 0.0) -> None:
        super().__init__(port, config)
        self.delay = delay

    def release_time(self, ready: float, compute: float) -> float:
        """The protocol's time plus ``delay`` (evaluated at ``ready`` when it is a function)."""
        d = self.delay(ready) if callable(self.delay) else self.delay
        return super().release_time(ready, compute) + float(d)


def slow_reducer(delay: Delay) -> NodeFactory:
    """A ``make_bus`` node factory for :class:`SlowReducerNode` with ``delay``."""
    return partial(SlowReducerNode, delay=delay)
