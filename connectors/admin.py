"""Topic administration: create a route's topics idempotently, refuse mismatched combiner topics."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka import make_admin
from schemas.exceptions import BrokerError, TopicMismatchError
from schemas.settings import KafkaSettings, RouteSettings

__all__ = ["TopicSpec", "ensure_route_topics", "ensure_topics", "partition_count", "route_topics"]


@dataclass(frozen=True)
class TopicSpec:
    """A topic and the partition count it must have (``exact``: refuse another count).

    ``replication`` ``None`` = the broker's ``default.replication.factor``; ``config``: topic configs at creation
    (an existing topic's configs are left alone).
    """

    name: str
    partitions: int
    replication: int | None = None
    exact: bool = False
    config: tuple[tuple[str, str], ...] = ()


def route_topics(route: RouteSettings, control_topic: str | None = None) -> list[TopicSpec]:
    """The topics a route needs: the combiner topic with exactly ``n`` partitions, the DLQ, the control topic."""
    specs = [
        TopicSpec(route.combiner_topic_name, route.combiners, route.replication_factor, exact=True),
        TopicSpec(route.dlq_topic_name, 1, route.replication_factor),
    ]
    if control_topic:
        specs.append(TopicSpec(control_topic, 1, route.replication_factor))
    return specs


def partition_count(admin: AdminClient, topic: str, timeout: float = 10.0) -> int | None:
    """Partitions of ``topic``, or ``None`` if it does not exist.

    Asks for the metadata of *all* topics: Tansu auto-creates a topic (with 4 partitions) when a client asks
    for that one topic's metadata, which would defeat the exact-partition check.
    """
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerError(f"cannot read metadata of topic {topic!r}: {exc}") from exc
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None and tmd.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return None
    if tmd.error is not None:
        raise BrokerError(f"metadata of topic {topic!r}: {tmd.error.str()}")
    return len(tmd.partitions)


def ensure_topics(admin: AdminClient, specs: Iterable[TopicSpec], timeout: float = 15.0) -> None:
    """Create missing topics; an existing ``exact`` topic with another partition count raises.

    :class:`TopicMismatchError` names the topic and both counts. Safe to call from several processes at once.
    """
    specs = list(specs)
    missing = []
    for spec in specs:
        have = partition_count(admin, spec.name)
        if have is None:
            missing.append(spec)
        elif spec.exact and have != spec.partitions:
            raise TopicMismatchError(
                f"topic {spec.name!r} has {have} partitions but the route needs exactly {spec.partitions} "
                "(one per combiner); delete it or change the route's 'combiners'"
            )
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(
                    s.name,
                    num_partitions=s.partitions,
                    replication_factor=-1 if s.replication is None else s.replication,
                    config=dict(s.config),
                )
                for s in missing
            ],
            operation_timeout=timeout,
        )
        for name, fut in futures.items():
            try:
                fut.result(timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise BrokerError(f"cannot create topic {name!r}: {exc.args[0].str()}") from exc
        _await_metadata(admin, missing, timeout)
        ensure_topics(admin, [s for s in specs if s.exact], timeout)  # a concurrent creator may differ


def _await_metadata(admin: AdminClient, specs: list[TopicSpec], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for spec in specs:
        while partition_count(admin, spec.name) is None:
            if time.monotonic() > deadline:
                raise BrokerError(f"topic {spec.name!r} did not appear in metadata within {timeout:.0f} s")
            time.sleep(0.05)


def ensure_route_topics(kafka: KafkaSettings, route: RouteSettings, control_topic: str | None = None) -> None:
    """Create (or check) every topic of ``route``."""
    ensure_topics(make_admin(kafka), route_topics(route, control_topic))
