"""skewroute's settings: env vars (``SKEWROUTE_`` prefix, ``__`` nesting) over a YAML/TOML file.

Read once in the entry point with :meth:`SkewrouteSettings.load` and passed down as frozen models.
Precedence, highest first: keyword overrides, environment, config file, defaults.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, Self

import yaml
from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from schemas.exceptions import ConfigError
from schemas.model import FrozenModel
from schemas.partitioner_settings import DaltonSettings, PartitionerSettings
from schemas.router_settings import RouterSettings
from schemas.spark_settings import SparkSettings, interval_ms

__all__ = [
    "KafkaSettings",
    "KeySpec",
    "RouteSettings",
    "RouterSettings",
    "SkewrouteSettings",
    "TimeSpec",
    "WindowSettings",
    "format_validation_error",
]

_config_file: ContextVar[Path | None] = ContextVar("skewroute_config_file", default=None)
_SECRET_WORDS = ("password", "secret", "token")


class KafkaSettings(FrozenModel):
    """Connection to the Kafka cluster (any Kafka-compatible broker; the embedded Tansu by default)."""

    bootstrap_servers: str = Field("127.0.0.1:9092", min_length=1, description="host:port[,host:port...]")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="Kafka security.protocol"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="SASL mechanism (required with SASL_* protocols)"
    )
    sasl_username: str | None = Field(None, description="SASL user name")
    sasl_password: SecretStr | None = Field(None, description="SASL password (never logged)")
    ssl_ca_location: str | None = Field(None, description="CA certificate file for SSL")
    ssl_certificate_location: str | None = Field(None, description="client certificate file for mutual TLS")
    ssl_key_location: str | None = Field(None, description="client private key file for mutual TLS")
    ssl_key_password: SecretStr | None = Field(None, description="password of the client key (never logged)")
    client_id: str = Field("skewroute", description="client.id prefix of every client")
    producer: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="extra librdkafka producer properties (override ours)"
    )
    consumer: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="extra librdkafka consumer properties (override ours)"
    )

    @model_validator(mode="after")
    def _sasl_complete(self) -> Self:
        if self.security_protocol.startswith("SASL_"):
            missing = [f for f in ("sasl_mechanism", "sasl_username", "sasl_password") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"security_protocol={self.security_protocol} needs {', '.join(missing)}")
        return self

    def librdkafka(self, role: Literal["common", "producer", "consumer", "admin"] = "common") -> dict[str, Any]:
        """The librdkafka configuration dict for a client of ``role`` (secrets revealed only here)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
            "client.id": self.client_id,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        for field, prop in (
            ("ssl_ca_location", "ssl.ca.location"),
            ("ssl_certificate_location", "ssl.certificate.location"),
            ("ssl_key_location", "ssl.key.location"),
        ):
            if getattr(self, field) is not None:
                conf[prop] = getattr(self, field)
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        if role == "producer":
            conf.update(self.producer)
        elif role == "consumer":
            conf.update(self.consumer)
        return conf

    def redacted(self) -> dict[str, Any]:
        """The librdkafka dict with secrets masked, for logs and status output."""
        return {k: ("***" if any(w in k for w in _SECRET_WORDS) else v) for k, v in self.librdkafka().items()}


class KeySpec(FrozenModel):
    """Where a raw record's key comes from."""

    source: Literal["field", "kafka_key"] = Field(
        "field",
        description="a JSON field of the value, or the Kafka key (with the Kafka timestamp and no value_field, "
        "routed format 2 never parses the value: it need not be JSON)",
    )
    field: str | None = Field("key", description="dotted path of the key in the JSON value (source=field)")

    @model_validator(mode="after")
    def _field_needed(self) -> Self:
        if self.source == "field" and not self.field:
            raise ValueError("source=field needs a field path")
        return self


class TimeSpec(FrozenModel):
    """Where a raw record's event time comes from."""

    source: Literal["field", "kafka_timestamp"] = Field(
        "kafka_timestamp", description="a JSON field of the value, or the Kafka record timestamp"
    )
    field: str | None = Field(None, description="dotted path of the event time (source=field)")
    unit: Literal["ms", "s", "iso"] = Field("ms", description="epoch milliseconds, epoch seconds, or ISO-8601")
    max_ahead_ms: int = Field(
        3_600_000,
        ge=0,
        description="event times more than this far ahead of the worker's wall clock are too far in the future",
    )
    too_far_ahead: Literal["dead_letter", "clamp"] = Field(
        "dead_letter",
        description="a record too far ahead is dead-lettered, or routed with its partitioner/window time clamped "
        "to wall clock + max_ahead_ms (the routed record keeps its own time)",
    )

    @model_validator(mode="after")
    def _field_needed(self) -> Self:
        if self.source == "field" and not self.field:
            raise ValueError("source=field needs a field path")
        return self


#: A route's window, when its ``window`` section leaves them out: ``slide`` = the Spark trigger, ``size`` = this many
#: slides (see :meth:`SkewrouteSettings._windows_follow_trigger`).
SLIDES_PER_WINDOW = 12
_DEFAULT_TRIGGER_MS = interval_ms(SparkSettings.model_fields["trigger_interval"].default) or 5_000


class WindowSettings(FrozenModel):
    """The window the partitioner's state (and the metrics) use: count-based in tuples, time-based in ms.

    In a route of :class:`SkewrouteSettings`, a time window's unset ``slide`` is ``spark.trigger_interval`` and its
    unset ``size`` is :data:`SLIDES_PER_WINDOW` slides: Spark pre-aggregates each micro-batch per combiner task, so
    the partitioner's scope is the micro-batch. The defaults below are those of a window built on its own.
    """

    kind: Literal["count", "time"] = Field("time", description="count-based (tuples) or time-based (event ms)")
    size: float = Field(
        60_000, gt=0, description="window length (tuples or ms); a time window in a route: 12 slides when not set"
    )
    slide: float = Field(
        1_000,
        gt=0,
        description="slide (tuples or ms); Dalton's statistics window and the scope its keys stay together in; a "
        "time window in a route: spark.trigger_interval when not set",
    )

    @model_validator(mode="after")
    def _slide_fits(self) -> Self:
        if self.slide > self.size:
            raise ValueError(f"slide ({self.slide:g}) must not exceed size ({self.size:g})")
        return self


class RouteSettings(FrozenModel):
    """One raw topic routed into one combiner-partition topic (partition i = combiner i)."""

    raw_topic: str = Field(
        ..., min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$", description="the topic to route"
    )
    name: str | None = Field(None, description="route name (default: the raw topic)")
    combiner_topic: str | None = Field(None, description="output topic (default: <raw_topic>.combiners)")
    combiners: int = Field(8, ge=1, le=4096, description="number of combiners n = partitions of the combiner topic")
    key: KeySpec = Field(default_factory=KeySpec, description="key extraction")
    time: TimeSpec = Field(default_factory=TimeSpec, description="event-time extraction")
    value_field: str | None = Field(
        None, description="dotted path of the numeric measure aggregated downstream (sum/min/max/mean)"
    )
    window: WindowSettings = Field(
        default_factory=lambda: _trigger_window(_DEFAULT_TRIGGER_MS),
        description="partitioner window (default: a time window, slide = spark.trigger_interval, size = 12 slides)",
    )
    partitioner: PartitionerSettings = Field(default_factory=DaltonSettings, description="algorithm and parameters")
    dead_letter_topic: str | None = Field(None, description="DLQ topic (default: <raw_topic>.dlq)")
    max_record_bytes: int = Field(
        900_000,
        ge=16,
        description="larger raw records are dead-lettered; must leave room for the routed record's header under the "
        "producer's message.max.bytes (checked at start)",
    )
    replication_factor: int | None = Field(
        None, ge=1, le=16, description="replication of the topics skewroute creates (default: the broker's default)"
    )
    seed: int = Field(0, description="seed of the partitioner's random choices")

    @property
    def route_name(self) -> str:
        """The route's name."""
        return self.name or self.raw_topic

    @property
    def combiner_topic_name(self) -> str:
        """The combiner topic."""
        return self.combiner_topic or f"{self.raw_topic}.combiners"

    @property
    def dlq_topic_name(self) -> str:
        """The dead-letter topic."""
        return self.dead_letter_topic or f"{self.raw_topic}.dlq"

    def partitioner_params(self) -> dict[str, Any]:
        """The partitioner's keyword arguments, with what depends on the route resolved.

        Dalton's ``raw_keys: auto`` becomes ``partitioned`` when the key is the Kafka message key (Kafka's
        partitioners put all records of one message key on one partition, so each router sees its own keys) and
        ``shared`` otherwise.
        """
        params = self.partitioner.params()
        if params.get("raw_keys") == "auto":
            params["raw_keys"] = "partitioned" if self.key.source == "kafka_key" else "shared"
        return params


class SkewrouteSettings(BaseSettings):
    """All settings of a skewroute deployment."""

    model_config = SettingsConfigDict(
        env_prefix="SKEWROUTE_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        nested_model_default_partial_update=True,
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings, description="Kafka connection")
    routes: list[RouteSettings] = Field(default_factory=list, description="one route per raw topic")
    router: RouterSettings = Field(default_factory=RouterSettings, description="router workers")
    spark: SparkSettings = Field(default_factory=SparkSettings, description="Spark consumers")

    @model_validator(mode="after")
    def _unique_routes(self) -> Self:
        seen: set[str] = set()
        for r in self.routes:
            if r.raw_topic in seen:
                raise ValueError(f"raw topic {r.raw_topic!r} is routed twice")
            seen.add(r.raw_topic)
        return self

    @model_validator(mode="after")
    def _windows_follow_trigger(self) -> Self:
        """A route's time window that does not set its slide gets the Spark trigger (and 12 slides of size).

        A route without a ``window`` section gets a time window. A count window, or a trigger this module cannot
        read (:func:`~schemas.spark_settings.interval_ms`), keeps the window as written.
        """
        trigger = interval_ms(self.spark.trigger_interval)
        if trigger is None or trigger <= 0:
            return self
        routes = [_follow_trigger(i, r, trigger, self.spark.trigger_interval) for i, r in enumerate(self.routes)]
        if any(a is not b for a, b in zip(routes, self.routes, strict=True)):
            self.__dict__["routes"] = routes  # frozen from here on: this is the model's own construction
        return self

    def window_warnings(self) -> list[str]:
        """One line per route whose time window's slide was set to something other than the Spark trigger.

        Dalton keeps a key on the combiners that hold it for one slide; Spark ships one partial per key and
        combiner per micro-batch. A slide shorter than the trigger splits keys more than a micro-batch needs; a
        longer one balances the combiners over more than one micro-batch.
        """
        trigger = interval_ms(self.spark.trigger_interval)
        if trigger is None:
            return []
        return [
            f"routes[{i}] ({r.route_name}): window.slide {r.window.slide:g} ms differs from spark.trigger_interval "
            f"({self.spark.trigger_interval}, {trigger} ms); the partitioner keeps keys together per slide while "
            "Spark pre-aggregates per micro-batch. Leave window.slide unset to follow the trigger."
            for i, r in enumerate(self.routes)
            if r.window.kind == "time" and r.window.slide != trigger
        ]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword overrides, then env, then the config file given to :meth:`load`."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = _config_file.get()
        if path is not None:
            if path.suffix in (".yaml", ".yml"):
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
            else:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @classmethod
    def load(cls, config: Path | str | None = None, **overrides: Any) -> SkewrouteSettings:
        """Read and validate the settings; :class:`ConfigError` lists every problem (field path, value).

        ``config`` defaults to ``$SKEWROUTE_CONFIG``; ``.yaml``/``.yml`` or ``.toml``.
        """
        path = (
            Path(config)
            if config is not None
            else (Path(os.environ["SKEWROUTE_CONFIG"]) if os.environ.get("SKEWROUTE_CONFIG") else None)
        )
        if path is not None:
            if not path.is_file():
                raise ConfigError([f"config: file {str(path)!r} does not exist"])
            if path.suffix not in (".yaml", ".yml", ".toml"):
                raise ConfigError([f"config: {str(path)!r} must end in .yaml, .yml or .toml"])
        token = _config_file.set(path)
        try:
            return cls(**overrides)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc)) from None
        except (ValueError, yaml.YAMLError) as exc:  # YAML/TOML syntax errors: one line, no traceback
            raise ConfigError([f"config: {' '.join(str(exc).split())}"]) from None
        finally:
            _config_file.reset(token)

    def route(self, name: str) -> RouteSettings:
        """The route called ``name`` (or whose raw topic is ``name``)."""
        for r in self.routes:
            if name in (r.route_name, r.raw_topic):
                return r
        raise ConfigError([f"routes: no route named {name!r} (have: {', '.join(r.route_name for r in self.routes)})"])


def _follow_trigger(index: int, route: RouteSettings, trigger_ms: int, trigger: str) -> RouteSettings:
    """``route`` with its time window's unset slide (and size) taken from the Spark trigger."""
    given = route.window.model_fields_set if "window" in route.model_fields_set else set()
    if route.window.kind == "count" or "slide" in given:
        return route
    if "size" not in given:
        window = _trigger_window(trigger_ms)
    elif route.window.size < trigger_ms:
        raise ValueError(
            f"routes[{index}].window: size ({route.window.size:g} ms) is shorter than spark.trigger_interval "
            f"({trigger}), which an unset window.slide follows; set window.slide too"
        )
    else:
        window = WindowSettings(kind="time", size=route.window.size, slide=trigger_ms)
    return route if window == route.window else route.model_copy(update={"window": window})


def _trigger_window(trigger_ms: int) -> WindowSettings:
    """A time window whose slide is the Spark trigger and whose size is :data:`SLIDES_PER_WINDOW` slides."""
    return WindowSettings(kind="time", size=SLIDES_PER_WINDOW * trigger_ms, slide=trigger_ms)


def format_validation_error(exc: ValidationError) -> list[str]:
    """One line per problem: ``field.path: message (got value)``, secrets masked."""
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        path = ".".join(loc) or "settings"
        value = err.get("input")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing" or isinstance(value, dict | list):
            lines.append(f"{path}: {msg}")  # a whole section: the message names the fields (no secrets echoed)
            continue
        shown = "***" if any(w in path for w in _SECRET_WORDS) else repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        lines.append(f"{path}: {msg} (got {shown})")
    return lines
