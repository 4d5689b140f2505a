"""The exception hierarchy: every error skewroute raises on purpose derives from :class:`SkewrouteError`.

The commands map them to exit codes (the README lists them): :data:`EXIT_CODES`.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "EXIT_BROKER",
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_MISSING_TOPIC",
    "BrokerError",
    "ConfigError",
    "DataLossError",
    "MissingTopicError",
    "RecordError",
    "SkewrouteError",
    "TopicMismatchError",
    "UnknownPartitionerError",
    "exit_code",
]


#: Exit codes of every command: a run that failed; invalid settings or arguments; Kafka not reachable within the
#: wait; a topic the settings name does not exist.
EXIT_FAILED, EXIT_CONFIG, EXIT_BROKER, EXIT_MISSING_TOPIC = 1, 2, 3, 4


class SkewrouteError(Exception):
    """Root of skewroute's exceptions."""


class ConfigError(SkewrouteError, ValueError):
    """Invalid settings: one line per problem, each naming the field path and the bad value."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid settings:\n" + "\n".join(f"  - {p}" for p in self.problems))


class UnknownPartitionerError(SkewrouteError, KeyError):
    """A partitioner name that no registry entry matches; the message lists the valid names."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = sorted(known)
        super().__init__(name)

    def __str__(self) -> str:
        return f"unknown partitioner {self.name!r}; valid names: {', '.join(self.known)}"


class RecordError(SkewrouteError, ValueError):
    """A raw record that cannot be routed (unparseable, missing key or time, too large).

    ``field`` names the part of the record at fault (``value``, ``key``, a JSON path, ...).
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class BrokerError(SkewrouteError, RuntimeError):
    """The Kafka broker could not be started, reached, or asked for what we need."""


class MissingTopicError(BrokerError):
    """A topic the settings name does not exist on the cluster; the message names the setting and the fix."""


class TopicMismatchError(BrokerError):
    """An existing topic has a partition count other than the one a route requires."""


class DataLossError(BrokerError):
    """Offsets a streaming query expects are gone: the topic was deleted/recreated, truncated, or aged out."""

    def __init__(self, topic: str, partition: int, expected: int, low: int, high: int, cause: str) -> None:
        self.topic, self.partition, self.expected, self.low, self.high = topic, partition, expected, low, high
        super().__init__(
            f"data loss on topic {topic!r} partition {partition}: expected offset {expected}, the broker has "
            f"offsets {low}..{high} ({cause}); if that is acceptable, set failOnDataLoss=false "
            "(spark.fail_on_data_loss: false) to skip the missing offsets with a warning"
        )


def exit_code(exc: SkewrouteError) -> int:
    """The exit code of a command that stops on ``exc`` (see :data:`EXIT_CONFIG` and the others)."""
    if isinstance(exc, ConfigError | UnknownPartitionerError):
        return EXIT_CONFIG
    if isinstance(exc, MissingTopicError):
        return EXIT_MISSING_TOPIC
    if isinstance(exc, BrokerError):
        return EXIT_BROKER
    return EXIT_FAILED
