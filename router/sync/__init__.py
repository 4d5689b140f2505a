"""Cooperative Dalton (paper Sec. 4, Alg. 2): SYNC / GLOBAL rounds between router instances.

Protocol core (no Kafka, no threads): :mod:`.client` (a router's PREPARE / AWAIT state, the message
conversions), :mod:`.port` (:class:`~.port.SyncablePartitioner`: what the runtime needs of a partitioner,
and the ports that reach one),
:mod:`.reducer` (the QtableReducer's rounds and DSYNC adaptation), :mod:`.membership` (live members,
reducer election), :mod:`.node` (all three for one router instance and route).
Transports: :mod:`.kafka` (the control topic: a producer and a broadcast reader per worker) and
:mod:`.service` (attached to a router worker; :class:`~.service.SyncablePlane` is what it needs of a data
plane); :mod:`.metrics` exports sync health to Prometheus; :mod:`router.choose.inprocess` runs P nodes on
one in-memory topic, for ``advise`` and tests.
"""

from router.sync.client import SyncClient, SyncState
from router.sync.membership import Membership
from router.sync.node import NodeConfig, NodeStats, SyncNode
from router.sync.port import DirectPort, PartitionerPort, SyncablePartitioner
from router.sync.reducer import DsyncPolicy, QtableReducer

__all__ = [
    "DirectPort",
    "DsyncPolicy",
    "Membership",
    "NodeConfig",
    "NodeStats",
    "PartitionerPort",
    "QtableReducer",
    "SyncClient",
    "SyncNode",
    "SyncState",
    "SyncablePartitioner",
]
