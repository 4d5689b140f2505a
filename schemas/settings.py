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
from schemas.spark_settings import SparkSettings

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

    source: Literal["field", "kafka_key"] = Field("field", description="a JSON field of the value, or the Kafka key")
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


class WindowSettings(FrozenModel):
    """The window the partitioner's state (and the metrics) use: count-based in tuples, time-based in ms."""

    kind: Literal["count", "time"] = Field("time", description="count-based (tuples) or time-based (event ms)")
    size: float = Field(60_000, gt=0, description="window length (tuples or ms)")
    slide: float = Field(1_000, gt=0, description="slide (tuples or ms); Dalton's statistics window")

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
    window: WindowSettings = Field(default_factory=WindowSettings, description="partitioner window")
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


class RouterSettings(FrozenModel):
    """Router worker process settings."""

    app_id: str = Field(
        "skewroute-router", description="Faust app id; each route's data plane consumes in group <app_id>.<route>"
    )
    instance_id: str | None = Field(
        None,
        description="this worker's id (default: <hostname>-<slot>, the slot being the lowest free one on the host: "
        "several workers per host, each keeping its id across restarts)",
    )
    slot_dir: Path | None = Field(
        None,
        description="where the workers of one host claim their slots (default: $TMPDIR/skewroute-<uid>/slots); "
        "containers on one host that share a volume here (and a hostname) get distinct, stable slots",
    )
    web_host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="address the web server (/metrics, /routes, /ready) binds: loopback unless set (0.0.0.0 for "
        "all interfaces, e.g. in a container)",
    )
    web_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="web server port (default: 6066 + the worker's slot on the host, or the next free port)",
    )
    batch_max_records: int = Field(20_000, ge=1, description="most raw records per data-plane batch")
    batch_timeout_ms: int = Field(50, ge=1, description="longest wait to fill a batch")
    align_ms: int = Field(
        0,  # off until its effect on live latency is settled; 1000 measured: BENCHMARKS.md, "Router output aligned ..."
        ge=0,
        description="merge the raw partitions a worker reads by event time, within this many ms: records of a "
        "partition further ahead than the slowest partition with records waiting, or caught up less than align_ms of "
        "wall time ago, are held back (one that delivered nothing for 2 s holds nothing back; at most a batch's worth "
        "per partition, the partition paused meanwhile), and what is routed goes out in event-time order, so each "
        "combiner partition fills in event-time order and Spark's micro-batches span less event time (fewer "
        "partials, fewer late records); 0 = off (route in consume order)",
    )
    max_in_flight: int = Field(
        2,  # measured: BENCHMARKS.md, "Router pipeline"
        ge=1,
        le=16,
        description="at_least_once: most batches produced and not yet committed (the next batches are consumed, "
        "routed and produced while earlier ones are acknowledged; offsets are still committed only after every "
        "output of a batch and of all earlier ones is acknowledged); 1 = wait for each batch before producing the "
        "next. exactly_once always runs one transaction per batch (1 in flight) and refuses a larger value",
    )
    delivery: Literal["at_least_once", "exactly_once"] = Field(
        "at_least_once",
        description="at_least_once: commit raw offsets after the outputs are acked (dedup downstream on (tp, p, o)); "
        "exactly_once: outputs and offsets in one Kafka transaction per batch (read_committed consumers)",
    )
    routed_format: Literal[1, 2] = Field(
        2,
        description="wire format of the routed records this worker writes: 2 = raw value bytes behind a 19-byte "
        "binary prefix, the record key as Kafka key; 1 = the JSON envelope of earlier releases (readers accept both "
        "on one topic, so workers can be upgraded one by one)",
    )
    on_data_loss: Literal["fail", "skip"] = Field(
        "fail",
        description="a committed raw offset below the log start (retention deleted unread records): fail the "
        "worker with a data-loss error naming the offsets, or log it and go on from the log start",
    )
    control_topic: str = Field("skewroute.control", description="Dalton sync control topic")
    dsync_ms: int = Field(1_000, ge=10, description="initial Dalton sync interval (ms)")
    control_max_bytes: int = Field(
        900_000,
        ge=16_384,
        description="largest Dalton sync message (bytes, after compression; keep it below the control topic's "
        "max.message.bytes): bigger ones are cut, rows of least weight first; bigger ones read are ignored",
    )
    state_dir: Path = Field(Path(".skewroute"), description="where workers keep local state")
    max_key_bytes: int = Field(4096, ge=1, description="longer record keys (UTF-8 bytes) are dead-lettered")
    log_format: Literal["json", "text"] = Field("json", description="router logs: JSON lines or plain text")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="router log level")
    shutdown_timeout_s: float = Field(
        30.0, gt=0, description="on SIGTERM, longest wait for the last batch to be delivered and committed"
    )
    window_metrics: bool = Field(True, description="compute per-window combiner load and replication metrics")
    static_membership: bool | Literal["auto"] = Field(
        "auto",
        description="join the route's consumer groups as a static member (group.instance.id = <instance_id>) so a "
        "restart within kafka.consumer session.timeout.ms does not rebalance; a killed or stopped static member's "
        "partitions move only after that timeout. auto: on with an explicit instance_id on Apache Kafka, off on "
        "Tansu (it never expires a killed static member) and on unknown brokers; true needs instance_id",
    )
    ready_stale_s: float = Field(
        30.0,
        gt=0,
        description="/ready fails when a route has not consumed, or has uncommitted work not committed, for this long",
    )
    dead_letter_prefix_bytes: int = Field(
        1024,
        ge=0,
        le=65_536,
        description="a dead letter too large for the DLQ keeps only this many bytes of the "
        "record (an envelope: reason, source position, size, prefix)",
    )

    @model_validator(mode="after")
    def _stable_transactions(self) -> Self:
        if self.delivery == "exactly_once" and self.max_in_flight > 1 and "max_in_flight" in self.model_fields_set:
            raise ValueError(
                f"max_in_flight={self.max_in_flight}: exactly_once runs one transaction per batch (1 batch in "
                "flight); set max_in_flight to 1 or leave it out"
            )
        if self.static_membership is True and not self.instance_id:
            raise ValueError(
                "static_membership=true needs a stable router.instance_id (it is the group.instance.id; the default "
                "slot-derived id is stable on one host but not chosen by you)"
            )
        return self


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
