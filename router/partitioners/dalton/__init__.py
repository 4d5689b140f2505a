"""Dalton: learned (contextual-bandit) partitioning of hot keys, [Dalton] (docs/partitioners.md).

Modules: :mod:`.stats` (hot-key frequency statistics), :mod:`.slots` (per-key slots: lookup, recycling,
growth), :mod:`.window` (sliding-window load and fragmentation with expiry), :mod:`.bandit` (Q-table,
epsilon-greedy, reward), :mod:`.tail` (routing of non-hot keys), :mod:`.sync` (cooperative-learning hooks),
:mod:`.partitioner` (the partitioner).
"""

from router.partitioners.dalton.partitioner import DEFAULT_TAIL, DaltonPartitioner

__all__ = ["DEFAULT_TAIL", "DaltonPartitioner"]
