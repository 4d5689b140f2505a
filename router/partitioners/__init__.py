"""Pure partitioning algorithms (no Kafka, Faust or Spark imports).

Public API::

    from router.partitioners import create
    part = create("dalton", n=8, window=60_000, slide=1_000, seed=1)
    combiners = part.assign(keys, times)   # numpy int32 array, one id in [0, n) per key
"""

from router.partitioners.base import Assignment, Partitioner, PartitionerState
from router.partitioners.keys import KeyBatch, KeyCodec, distinct_candidates, key_bytes
from router.partitioners.registry import available, create, get, register

__all__ = [
    "Assignment",
    "KeyBatch",
    "KeyCodec",
    "Partitioner",
    "PartitionerState",
    "available",
    "create",
    "distinct_candidates",
    "get",
    "key_bytes",
    "register",
]
