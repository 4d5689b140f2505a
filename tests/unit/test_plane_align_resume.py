"""Event-time alignment: a partition resumed where it was paused is sought there again (``router.align_ms``).

librdkafka fetched partitions resumed after a pause only about 0.75 s later; a seek to where the consumer stands
starts the fetch at once. The seek must never move a partition: it is made only while the partition has
delivered nothing since its pause, and forgotten at rebalances and rewinds.
"""

from __future__ import annotations

import itertools
from typing import Any

from confluent_kafka import TopicPartition

from router.extract import Extracted
from router.plane_align import EventTimeAlign
from tests.unit.test_plane_align import RAW, T0, Clock, Logs, _everything_once, _plane


class _Calls:
    """A consumer that records what the rule asks of it (its positions unknown: every partition has records waiting)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def pause(self, tps: list[TopicPartition]) -> None:
        self.calls += [("pause", tp.partition, tp.offset) for tp in tps]

    def resume(self, tps: list[TopicPartition]) -> None:
        self.calls += [("resume", tp.partition, -1) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.calls += [("seek", tp.partition, tp.offset)]

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        raise RuntimeError("unknown")


def _records(rows: list[tuple[int, int, int]]) -> Extracted:
    """(partition, offset, event time) rows as one consumed batch."""
    return Extracted(
        [f"k{o}" for _, o, _ in rows], [t for *_, t in rows], [None] * len(rows), [b"{}"] * len(rows),
        [p for p, *_ in rows], [o for _, o, _ in rows],
    )  # fmt: skip


def test_a_paused_partition_is_sought_again_at_its_resume_only_if_it_delivered_nothing_meanwhile() -> None:
    align, consumer = EventTimeAlign(RAW, 1000, cap=2, clock=Clock()), _Calls()
    # partition 1's event time is not known yet: partition 0's records are held, a batch's worth, so it is paused
    align.admit(consumer, _records([(0, 0, T0), (0, 1, T0 + 1)]), {0, 1})
    assert consumer.calls == [("pause", 0, 2), ("seek", 0, 2)]
    consumer.calls.clear()
    out = align.admit(consumer, _records([(1, 0, T0 + 1)]), {0, 1})
    assert len(out.keys) == 3 and consumer.calls == [("resume", 0, -1), ("seek", 0, 2)]  # fetched again at once
    # paused again; then it delivers anyway (a rebalance cleared the pause): it stands past the pause, no seek back
    align.admit(consumer, _records([(0, 2, T0 + 5000), (0, 3, T0 + 5001)]), {0, 1})
    assert consumer.calls[-2:] == [("pause", 0, 4), ("seek", 0, 4)]
    consumer.calls.clear()
    out = align.admit(consumer, _records([(0, 4, T0 + 5002), (1, 1, T0 + 5002)]), {0, 1})
    assert len(out.keys) == 4 and consumer.calls == [("resume", 0, -1)]


def test_a_resumed_partition_is_sought_only_where_its_consumer_stands() -> None:
    """Pauses and resumes all along a skewed backlog, one partition also un-paused behind the rule's back (as a
    rebalance does) at its k-th paused turn: no seek ever moves a partition, and every record is routed once."""
    logs = {
        0: [T0 + 2 * i for i in range(6000)],
        1: [T0 + 9 * i for i in range(6000)],
        2: [T0 + 5 * i for i in range(3000)],
    }
    resumed_seeks = 0
    for part, k in itertools.product((0, 2), range(4)):
        plane, broker, clock = _plane(logs, align_ms=500, chunk=700, cap=1500)
        moved: list[tuple[int, int, int]] = []
        seek = broker.seek

        def checked(tp: TopicPartition, broker: Logs = broker, seek: Any = seek, moved: list = moved) -> None:
            if tp.offset != broker.pos[tp.partition]:
                moved.append((tp.partition, broker.pos[tp.partition], tp.offset))
            seek(tp)

        broker.seek = checked  # type: ignore[method-assign]
        seen = 0
        for _ in range(2000):
            clock.now += 0.01
            plane._batch()
            if part in broker.paused:
                seen += 1
                if seen == k + 1:  # delivers while the rule still has it paused
                    broker.paused.discard(part)
            if broker.done() and not plane.align.holding and not plane.align.paused:
                break
        plane._batch()
        plane._complete()
        _everything_once(broker)
        assert moved == [], (part, k)
        resumed_seeks += len(broker.seeks) - plane.align.pauses
    assert resumed_seeks > 0  # resumes were sought too


def test_a_partition_paused_when_revoked_is_resumed_when_it_comes_back() -> None:
    """librdkafka keeps a partition paused through a rebalance that gives it back to the same consumer: the rule,
    whose pause went with the revocation, resumes it once it is assigned again (else it never delivers again)."""
    align, consumer = EventTimeAlign(RAW, 1000, cap=2, clock=Clock()), _Calls()
    align.admit(consumer, _records([(0, 0, T0), (0, 1, T0 + 1)]), {0, 1})
    assert consumer.calls == [("pause", 0, 2), ("seek", 0, 2)]
    align.forget([0, 1])  # revoked (an eager rebalance revokes everything) ...
    consumer.calls.clear()
    align.idle(consumer, {1})  # ... and partition 1, never paused, assigned again: nothing to resume
    assert consumer.calls == []
    align.idle(consumer, {0, 1})  # partition 0 comes back: resumed once
    align.idle(consumer, {0, 1})
    assert consumer.calls == [("resume", 0, -1)]
