"""The exception hierarchy: every error skewroute raises on purpose derives from :class:`SkewrouteError`."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "BrokerError",
    "ConfigError",
    "RecordError",
    "SkewrouteError",
    "TopicMismatchError",
    "UnknownPartitionerError",
]


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


class TopicMismatchError(BrokerError):
    """An existing topic has a partition count other than the one a route requires."""
