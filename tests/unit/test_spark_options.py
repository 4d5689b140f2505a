"""Options of the Spark sources: Kafka settings pass through, secrets never show in a repr."""

from __future__ import annotations

import pickle
from types import SimpleNamespace
from typing import Any

import pytest

from connectors.spark_source import KafkaStreamReader, _Config, kafka_options
from schemas.settings import KafkaSettings, RouteSettings
from schemas.spark_settings import SparkSettings
from spark_consumers.job import JVM_CONSUMER_DEFAULTS, java_kafka_options, read_combiners

SECURE = KafkaSettings(
    bootstrap_servers="b1:9093,b2:9093",
    security_protocol="SASL_SSL",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="alice",
    sasl_password="s3cr3t",
    ssl_ca_location="/etc/ca.pem",
)


def test_python_source_options_carry_security_but_repr_hides_secrets() -> None:
    opts = {**kafka_options(SECURE), "subscribe": "a,b", "maxOffsetsPerTrigger": "500"}
    assert opts["kafka.sasl.password"] == "s3cr3t" and opts["kafka.security.protocol"] == "SASL_SSL"
    cfg = _Config.from_options(opts)
    assert cfg.topics == ("a", "b") and cfg.max_records == 500
    assert dict(cfg.conf)["sasl.password"] == "s3cr3t"
    assert "s3cr3t" not in repr(cfg) and "***" in repr(cfg)


def test_reader_pickles_without_a_client() -> None:
    reader = KafkaStreamReader(_Config.from_options({"kafka.bootstrap.servers": "x:1", "subscribe": "t"}))
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._client is None and clone.cfg == reader.cfg


def test_the_drivers_consumer_waits_briefly_at_a_partition_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """It only probes (one probe per micro-batch); readers keep their fetch settings; the user's setting wins."""
    import connectors.spark_source as source

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(source, "make_probe_consumer", lambda conf: seen.append(dict(conf)) or object())
    base = {"subscribe": "t", "kafka.bootstrap.servers": "b:9092"}
    KafkaStreamReader(_Config.from_options(base))._consumer()
    KafkaStreamReader(_Config.from_options({**base, "kafka.fetch.wait.max.ms": "50"}))._consumer()
    _Config.from_options(base).consumer()  # an executor's reader
    assert [c.get("fetch.wait.max.ms") for c in seen] == [5, "50", None]


@pytest.mark.parametrize("missing", ["subscribe", "kafka.bootstrap.servers"])
def test_required_options(missing: str) -> None:
    opts = {"kafka.bootstrap.servers": "x:1", "subscribe": "t"}
    del opts[missing]
    with pytest.raises(ValueError, match=missing.split(".")[-1]):
        _Config.from_options(opts)


def test_builtin_kafka_source_options() -> None:
    opts = java_kafka_options(SECURE)
    assert opts["kafka.bootstrap.servers"] == "b1:9093,b2:9093"
    assert (
        "ScramLoginModule" in opts["kafka.sasl.jaas.config"] and 'password="s3cr3t"' in opts["kafka.sasl.jaas.config"]
    )
    assert opts["kafka.ssl.truststore.type"] == "PEM"


def test_decode_option_is_checked() -> None:
    base = {"kafka.bootstrap.servers": "x:1", "subscribe": "t"}
    assert _Config.from_options(base).decode == "none"
    assert _Config.from_options({**base, "decode": "Routed"}).decode == "routed"
    with pytest.raises(ValueError, match="'decode' must be one of none, routed \\(got 'avro'\\)"):
        _Config.from_options({**base, "decode": "avro"})


class _Reader:
    """Records what the job asks of ``spark.readStream``."""

    def __init__(self) -> None:
        self.fmt = ""
        self.opts: dict[str, str] = {}

    def format(self, fmt: str) -> _Reader:
        self.fmt = fmt
        return self

    def options(self, **kw: str) -> _Reader:
        self.opts.update(kw)
        return self

    def option(self, key: str, value: str) -> _Reader:
        self.opts[key] = value
        return self

    def load(self) -> _Reader:
        return self


ROUTE = RouteSettings(raw_topic="clicks")


def _read(cfg: SparkSettings) -> _Reader:
    """What ``read_combiners`` asks of the reader for ``cfg``."""
    reader = _Reader()
    spark: Any = SimpleNamespace(readStream=reader, dataSource=SimpleNamespace(register=lambda cls: None))
    read_combiners(spark, KafkaSettings(bootstrap_servers="b:1"), ROUTE, cfg)
    return reader


@pytest.mark.parametrize("source", ["python", "kafka"])
@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
def test_job_reads_with_the_configured_isolation_level(source: str, level: str) -> None:
    reader = _read(SparkSettings(source=source, isolation_level=level))
    assert reader.fmt == ("kafka" if source == "kafka" else "skewroute-kafka")
    assert reader.opts["kafka.isolation.level"] == level
    assert reader.opts["subscribe"] == ROUTE.combiner_topic_name


def test_jvm_source_fetches_like_the_python_source_unless_source_options_say_otherwise() -> None:
    jvm = _read(SparkSettings(source="kafka")).opts
    assert {k: jvm[k] for k in JVM_CONSUMER_DEFAULTS} == JVM_CONSUMER_DEFAULTS
    assert jvm["kafka.fetch.max.wait.ms"] == "20"  # not the Java default's 500 ms at every range's end marker
    tuned = _read(SparkSettings(source="kafka", source_options={"kafka.fetch.max.wait.ms": "100"})).opts
    assert tuned["kafka.fetch.max.wait.ms"] == "100" and tuned["maxOffsetsPerTrigger"] == "250000"
    python = _read(SparkSettings(source_options={"kafka.fetch.wait.max.ms": "50"})).opts
    assert python["kafka.fetch.wait.max.ms"] == "50" and not set(JVM_CONSUMER_DEFAULTS) & set(python)


@pytest.mark.parametrize(
    ("key", "setting"),
    [("maxOffsetsPerTrigger", "spark.max_records_per_trigger"), ("startingOffsets", "spark.starting_offsets"),
     ("kafka.isolation.level", "spark.isolation_level"), ("SUBSCRIBE", "the route")],
)  # fmt: skip
def test_source_options_refuse_what_other_settings_own(key: str, setting: str) -> None:
    with pytest.raises(ValueError, match="source_options") as err:
        SparkSettings(source_options={key: "x"})
    assert repr(key) in str(err.value) and setting in str(err.value)
