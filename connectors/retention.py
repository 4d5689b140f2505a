"""Raw records deleted by retention before a router read them: detected at assignment, never skipped silently.

A router worker resumes each raw partition from its group's committed offset. If retention (or a
``DeleteRecords`` call) removed records from that offset on while no router ran, the consumer would jump to the
partition's new start (``auto.offset.reset=earliest``) and the records in between would be lost without a word.
:func:`find_lost_ranges` compares the committed offsets with the partitions' low watermarks (where the log now
starts); the data plane then fails with :class:`DataLossError` naming the topic, partitions and offsets, or,
with ``router.on_data_loss: skip``, logs the loss, counts the skipped records and goes on from the log start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from connectors.kafka_offsets import watermarks
from schemas.exceptions import BrokerError

__all__ = ["DataLossError", "LostRange", "find_lost_ranges"]


@dataclass(frozen=True)
class LostRange:
    """Offsets ``[committed, log_start)`` of ``topic``/``partition`` that are gone."""

    topic: str
    partition: int
    committed: int
    log_start: int

    @property
    def records(self) -> int:
        """How many offsets were deleted before being read (transaction markers count too)."""
        return self.log_start - self.committed


class DataLossError(BrokerError):
    """Raw records were deleted (retention) before the router read them."""

    def __init__(self, group: str, lost: list[LostRange]) -> None:
        self.lost = lost
        parts = "; ".join(f"partition {r.partition}: committed {r.committed}, log now starts at {r.log_start} "
                          f"({r.records} offsets lost)" for r in lost)  # fmt: skip
        super().__init__(
            f"data loss on {lost[0].topic}: group {group} resumes below the start of the log ({parts}); retention "
            f"deleted raw records no router read. Set router.on_data_loss: skip to go on from the log start"
        )


def find_lost_ranges(
    consumer: Any, topic: str, partitions: list[int], timeout: float = 10.0, *, tansu: bool | None = None
) -> list[LostRange]:
    """The partitions whose committed offset lies below the log start (no committed offset: not a loss)."""
    if not partitions:
        return []
    committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout)
    resumed = [tp for tp in committed if tp.offset >= 0]  # no offset committed: the group starts at the beginning
    marks = watermarks(consumer, [TopicPartition(topic, tp.partition) for tp in resumed], timeout, tansu=tansu)
    lost = []
    for tp, (low, _high) in zip(resumed, marks, strict=True):
        if tp.offset < low:
            lost.append(LostRange(topic, tp.partition, tp.offset, low))
    return lost
