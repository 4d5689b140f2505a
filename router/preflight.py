"""Start-up check of a router worker: wait for the Kafka cluster with bounded retries, then fail clearly.

``skewroute router`` calls :func:`await_broker` before it starts anything, so a broker that is down (or a wrong
``kafka.bootstrap_servers``) ends in one error line naming the bootstrap servers within ``timeout_s``, instead
of a stack trace from whichever client connects first.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from connectors.kafka import make_admin
from schemas.exceptions import BrokerError
from schemas.settings import KafkaSettings

__all__ = ["await_broker"]


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
