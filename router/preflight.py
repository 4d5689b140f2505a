"""Start-up checks of ``skewroute router`` and ``skewroute spark-job``: the cluster answers, the topics exist.

Both commands call :func:`await_broker` before they start anything, so a broker that is down (or a wrong
``kafka.bootstrap_servers``) ends in one error line naming the bootstrap servers within ``timeout_s``, instead
of a stack trace from whichever client connects first; then :func:`require_topics`, so a topic the settings
name but the cluster lacks ends in one line naming the topic, the setting and the fix (the router never
creates combiner and dead-letter topics for a raw topic that is not there).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from connectors.kafka import make_admin
from schemas.exceptions import BrokerError, MissingTopicError
from schemas.settings import KafkaSettings, RouteSettings, SkewrouteSettings

__all__ = [
    "await_broker",
    "ensure_faust_topics",
    "faust_leader_topic",
    "raw_topic_fix",
    "require_topics",
    "spark_job_preflight",
]


def await_broker(
    kafka: KafkaSettings,
    timeout_s: float = 30.0,
    *,
    first_backoff_s: float = 0.25,
    max_backoff_s: float = 4.0,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Block until the cluster answers a metadata request (returns the attempts it took).

    Retries with exponential backoff (``first_backoff_s`` doubling up to ``max_backoff_s``); after ``timeout_s``
    raises :class:`BrokerError` naming the bootstrap servers, the attempts and the last error. The admin client
    gets the same connection and security settings as every other client.
    """
    admin = make_admin(kafka, **{"socket.connection.setup.timeout.ms": 2000, "log_level": 2})  # no retry noise
    deadline = time.monotonic() + timeout_s
    backoff, attempts, last = first_backoff_s, 0, "no answer"
    while True:
        attempts += 1
        try:
            md = admin.list_topics(timeout=max(0.2, min(2.0, deadline - time.monotonic())))
            if md.brokers:
                return attempts
            last = "metadata without brokers"
        except KafkaException as exc:
            last = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        left = deadline - time.monotonic()
        if left <= 0:
            raise BrokerError(
                f"Kafka at {kafka.bootstrap_servers} did not answer within {timeout_s:g} s "
                f"({attempts} attempts with backoff): {last}"
            )
        sleep(min(backoff, left))
        backoff = min(2 * backoff, max_backoff_s)


def require_topics(kafka: KafkaSettings, topics: dict[str, str], timeout_s: float = 10.0) -> None:
    """Raise :class:`MissingTopicError` for the first of ``topics`` (name -> what to do) the cluster lacks.

    Reads the metadata of *all* topics (asking for one topic's metadata makes Tansu create it).
    """
    admin = make_admin(kafka, **{"log_level": 2})
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerError(f"Kafka at {kafka.bootstrap_servers}: cannot read topic metadata: {exc}") from None
    for topic, fix in topics.items():
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            raise MissingTopicError(f"topic {topic!r} does not exist on {kafka.bootstrap_servers}: {fix}")


def raw_topic_fix(route: RouteSettings) -> str:
    """What to do about a route's missing raw topic."""
    return (
        f"create it (kafka-topics.sh --create --topic {route.raw_topic} --partitions N), or fix raw_topic of "
        f"route {route.route_name!r}; the router creates no topics for a raw topic that is not there"
    )


def faust_leader_topic(app_id: str) -> str:
    """The topic Faust's leader assignor subscribes every worker to (Faust's consumer needs one topic)."""
    return f"{app_id}-__assignor-__leader"


def ensure_faust_topics(settings: SkewrouteSettings) -> None:
    """Create Faust's leader topic as skewroute creates its own, before Faust would create it with replication 1.

    Replication: the largest ``routes[].replication_factor`` set, else the brokers' ``default.replication.factor``.
    """
    from connectors.admin import TopicSpec, ensure_topics

    given = [r.replication_factor for r in settings.routes if r.replication_factor is not None]
    spec = TopicSpec(faust_leader_topic(settings.router.app_id), 1, max(given) if given else None)
    ensure_topics(make_admin(settings.kafka), [spec])


def spark_job_preflight(settings: SkewrouteSettings, route: RouteSettings, broker_wait_s: float) -> None:
    """Check what the Spark job needs before it starts a JVM.

    Kafka answers within ``broker_wait_s`` (else :class:`BrokerError`) and the route's combiner topic exists
    (else :class:`MissingTopicError`).
    """
    await_broker(settings.kafka, broker_wait_s)
    fix = (
        f"the routers of route {route.route_name!r} create it: start `skewroute router` with the same config first "
        "(or fix routes[].combiner_topic)"
    )
    require_topics(settings.kafka, {route.combiner_topic_name: fix})
