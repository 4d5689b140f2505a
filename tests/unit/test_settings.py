import textwrap
from pathlib import Path

import pytest

from schemas.exceptions import ConfigError
from schemas.partitioner_settings import DaltonSettings, HolisticSettings
from schemas.settings import KafkaSettings, SkewrouteSettings
from schemas.spark_settings import AGGREGATION_PROFILES, join_uri
from spark_consumers.job import agg_spec

INVALID = [
    ({"routes": [{"raw_topic": "a b"}]}, "routes.0.raw_topic", "'a b'"),
    ({"routes": [{"raw_topic": "a", "combiners": 0}]}, "routes.0.combiners", "0"),
    ({"routes": [{"raw_topic": "a", "window": {"size": 10, "slide": 20}}]}, "routes.0.window", "slide (20)"),
    ({"routes": [{"raw_topic": "a", "partitioner": {"name": "dalton", "epsilon": 3}}]}, "epsilon", "3"),
    ({"routes": [{"raw_topic": "a", "partitioner": {"name": "nope"}}]}, "routes.0.partitioner", "'nope'"),
    ({"routes": [{"raw_topic": "a", "partitioner": {"name": "pkg", "dd": 3}}]}, "pkg.dd", "3"),
    ({"routes": [{"raw_topic": "a", "key": {"source": "field", "field": ""}}]}, "routes.0.key", "field path"),
    ({"routes": [{"raw_topic": "a"}, {"raw_topic": "a"}]}, "routed twice", "'a'"),
    ({"router": {"batch_max_records": 0}}, "router.batch_max_records", "0"),
    ({"router": {"delivery": "maybe"}}, "router.delivery", "'maybe'"),
    ({"spark": {"sink": "s3"}}, "spark.sink", "'s3'"),
    ({"kafka": {"security_protocol": "SASL_SSL"}}, "kafka", "sasl_mechanism"),
    ({"kafka": {"bootstrap_servers": ""}}, "kafka.bootstrap_servers", "''"),
    ({"unknown_section": {}}, "unknown_section", "Extra inputs"),
    # issue 9: every constrained field names itself and the value
    ({"routes": [{"raw_topic": "x" * 250}]}, "routes.0.raw_topic", "xxx"),
    ({"routes": [{"raw_topic": "a", "combiners": 5000}]}, "routes.0.combiners", "5000"),
    ({"routes": [{"raw_topic": "a", "max_record_bytes": 10}]}, "routes.0.max_record_bytes", "10"),
    ({"routes": [{"raw_topic": "a", "replication_factor": 0}]}, "routes.0.replication_factor", "0"),
    ({"routes": [{"raw_topic": "a", "window": {"size": 0}}]}, "routes.0.window.size", "0"),
    ({"routes": [{"raw_topic": "a", "window": {"kind": "session"}}]}, "routes.0.window.kind", "'session'"),
    ({"routes": [{"raw_topic": "a", "time": {"unit": "ns"}}]}, "routes.0.time.unit", "'ns'"),
    ({"routes": [{"raw_topic": "a", "time": {"source": "field"}}]}, "routes.0.time", "field path"),
    ({"routes": [{"raw_topic": "a", "key": {"source": "header"}}]}, "routes.0.key.source", "'header'"),
    ({"routes": [{"raw_topic": "a", "extra": 1}]}, "routes.0.extra", "Extra inputs"),
    ({"routes": [{"raw_topic": "a", "partitioner": {"name": "pkg", "d": 0}}]}, "pkg.d", "0"),
    ({"routes": [{"raw_topic": "a", "partitioner": {"name": "fish", "alpha": 0}}]}, "fish.alpha", "0"),
    ({"routes": [{"raw_topic": "a", "partitioner": {"name": "cam", "p": 2}}]}, "cam.p", "2"),
    ({"routes": [{"raw_topic": "a", "partitioner": {"name": "dalton", "tail": "x"}}]}, "dalton.tail", "'x'"),
    ({"router": {"web_port": 70000}}, "router.web_port", "70000"),
    ({"router": {"batch_timeout_ms": 0}}, "router.batch_timeout_ms", "0"),
    ({"router": {"dsync_ms": 5}}, "router.dsync_ms", "5"),
    ({"router": {"max_key_bytes": 0}}, "router.max_key_bytes", "0"),
    ({"router": {"log_format": "xml"}}, "router.log_format", "'xml'"),
    ({"router": {"log_level": "TRACE"}}, "router.log_level", "'TRACE'"),
    ({"router": {"shutdown_timeout_s": 0}}, "router.shutdown_timeout_s", "0"),
    ({"spark": {"max_records_per_trigger": 0}}, "spark.max_records_per_trigger", "0"),
    ({"spark": {"shuffle_partitions": 0}}, "spark.shuffle_partitions", "0"),
    ({"spark": {"top_k": 0}}, "spark.top_k", "0"),
    ({"spark": {"approx_rsd": 0.5}}, "spark.approx_rsd", "0.5"),
    ({"spark": {"output_mode": "complete"}}, "spark.output_mode", "'complete'"),
    ({"spark": {"source": "jdbc"}}, "spark.source", "'jdbc'"),
    ({"spark": {"aggregations": ["median"]}}, "spark.aggregations.0", "'median'"),
    ({"spark": {"metrics_port": -1}}, "spark.metrics_port", "-1"),
    ({"kafka": {"security_protocol": "TLS"}}, "kafka.security_protocol", "'TLS'"),
    ({"kafka": {"sasl_mechanism": "GSSAPI"}}, "kafka.sasl_mechanism", "'GSSAPI'"),
    ({"kafka": {"producer": {"linger.ms": [1]}}}, "kafka.producer.linger.ms", "Input should be"),
    # issue 17: invalid combinations are refused by the model, naming the fields
    ({"spark": {"sink": "parquet"}}, "spark: sink=parquet needs output_mode=append", "output_mode='update'"),
    ({"spark": {"master": "spark://h:7077"}}, "master='spark://h:7077'", "checkpoint_dir='.skewroute/checkpoints'"),
    ({"spark": {"master": "yarn", "checkpoint_dir": "ck"}}, "relative local path", "checkpoint_dir='ck'"),
    ({"spark": {"checkpoint_dir": ""}}, "spark.checkpoint_dir", "''"),
    ({"spark": {"output_path": ""}}, "spark.output_path", "''"),
    ({"spark": {"min_partitions": 0}}, "spark.min_partitions", "0"),
    # issue 28: aggregation profiles and the heavy aggregates' knobs
    ({"spark": {"profile": "medium"}}, "spark.profile", "'medium'"),
    ({"spark": {"profile": "heavy", "aggregations": ["count"]}}, "spark: profile='heavy'", "aggregations=['count']"),
    ({"spark": {"percentiles": [0.5, 1.5]}}, "spark.percentiles.1", "1.5"),
    ({"spark": {"percentiles": []}}, "spark.percentiles", "at least 1 item"),
    ({"spark": {"percentile_accuracy": 0}}, "spark.percentile_accuracy", "0"),
    ({"spark": {"score_rounds": 0}}, "spark.score_rounds", "0"),
]


@pytest.mark.parametrize(("overrides", "path", "value"), INVALID)
def test_invalid_setting_names_field_and_value(overrides: dict, path: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        SkewrouteSettings.load(**overrides)
    lines = err.value.problems
    assert any(path in line and value in line for line in lines), lines
    assert all("\n" not in line for line in lines)


def test_every_problem_reported_once() -> None:
    with pytest.raises(ConfigError) as err:
        SkewrouteSettings.load(routes=[{"raw_topic": "a b", "combiners": -1}], router={"web_port": 70000})
    assert len(err.value.problems) == 3


@pytest.mark.parametrize(
    "location", ["s3a://bucket/ck", "hdfs://nn:8020/ck", "file:///shared/ck", "/shared/ck", "gs://b/ck/"]
)
def test_storage_locations_pass_through_untouched(location: str) -> None:
    s = SkewrouteSettings.load(spark={"master": "spark://h:7077", "checkpoint_dir": location, "output_path": location})
    assert s.spark.checkpoint_dir == location and s.spark.output_path == location
    assert join_uri(location, "clicks") == location.rstrip("/") + "/clicks"


def test_local_master_accepts_relative_checkpoints_and_topics_use_broker_replication() -> None:
    s = SkewrouteSettings.load(spark={"master": "local[4]", "checkpoint_dir": "ck"}, routes=[{"raw_topic": "a"}])
    assert s.spark.checkpoint_dir == "ck" and s.routes[0].replication_factor is None


def test_defaults_and_derived_names() -> None:
    s = SkewrouteSettings.load(routes=[{"raw_topic": "clicks"}])
    r = s.routes[0]
    assert (r.combiner_topic_name, r.dlq_topic_name, r.route_name) == ("clicks.combiners", "clicks.dlq", "clicks")
    assert isinstance(r.partitioner, DaltonSettings)
    assert s.route("clicks") is r


@pytest.mark.parametrize("profile", sorted(AGGREGATION_PROFILES))
def test_profile_names_the_aggregates_and_reaches_the_job(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKEWROUTE_SPARK__PROFILE", profile)
    s = SkewrouteSettings.load(spark={"score_rounds": 7})
    assert s.spark.profile == profile and tuple(s.spark.aggregations) == AGGREGATION_PROFILES[profile]
    spec = agg_spec(s.spark)
    assert tuple(spec.aggregations) == AGGREGATION_PROFILES[profile] and spec.score_rounds == 7
    assert tuple(spec.percentiles) == (0.5, 0.99) and spec.percentile_accuracy == 10_000


def test_env_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        textwrap.dedent(
            """
            kafka: {bootstrap_servers: "file:1"}
            routes:
              - raw_topic: orders
                combiners: 4
                partitioner: {name: cam, cardinality: hll}
            router: {batch_max_records: 500}
            """
        )
    )
    monkeypatch.setenv("SKEWROUTE_KAFKA__BOOTSTRAP_SERVERS", "env:2")
    s = SkewrouteSettings.load(cfg)
    assert s.kafka.bootstrap_servers == "env:2"
    assert s.router.batch_max_records == 500
    part = s.routes[0].partitioner
    assert isinstance(part, HolisticSettings) and part.name == "cam" and part.cardinality == "hll"


def test_toml_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[routes]]\nraw_topic = "t"\ncombiners = 3\n[routes.partitioner]\nname = "pkg"\nd = 3\n')
    s = SkewrouteSettings.load(cfg)
    assert s.routes[0].combiners == 3 and s.routes[0].partitioner.params()["d"] == 3


def test_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        SkewrouteSettings.load(tmp_path / "nope.yaml")


def test_secrets_never_shown() -> None:
    k = KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="hunter2")
    assert k.librdkafka()["sasl.password"] == "hunter2"
    assert "hunter2" not in str(k) and "hunter2" not in repr(k)
    assert k.redacted()["sasl.password"] == "***"
    with pytest.raises(ConfigError) as err:
        SkewrouteSettings.load(kafka={"security_protocol": "SASL_SSL", "sasl_password": "hunter2"})
    assert "hunter2" not in str(err.value)


def test_producer_overrides_rendered() -> None:
    k = KafkaSettings(producer={"linger.ms": 20}, consumer={"fetch.min.bytes": 5})
    assert k.librdkafka("producer")["linger.ms"] == 20
    assert "linger.ms" not in k.librdkafka("consumer")
    assert k.librdkafka("consumer")["fetch.min.bytes"] == 5


@pytest.mark.parametrize("name", ["hash", "shuffle", "pkg", "cm", "am", "cam", "lm", "fish", "dalton", "prompt"])
def test_every_partitioner_settings_builds_its_partitioner(name: str) -> None:
    from router.partitioners import create

    s = SkewrouteSettings.load(routes=[{"raw_topic": "t", "partitioner": {"name": name}}])
    part_settings = s.routes[0].partitioner
    part = create(name, 4, **part_settings.params())
    ids = part.assign([b"x", b"y", b"x"])
    assert ids.shape == (3,) and ids.min() >= 0 and ids.max() < 4
    for key, value in part_settings.params().items():  # the settings reach the instance unchanged
        assert part.params()[key] == value, key


def test_custom_partitioner_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from router.partitioners import create, registry
    from router.partitioners.simple import HashPartitioner

    class Mine(HashPartitioner):
        name = "mine-settings-test"

    monkeypatch.setitem(registry._REGISTRY, "mine-settings-test", Mine)  # gone after the test (others list names)
    s = SkewrouteSettings.load(
        routes=[
            {
                "raw_topic": "t",
                "partitioner": {"name": "custom", "plugin": "mine-settings-test", "options": {"hash_seed": 5}},
            }
        ]
    )
    p = s.routes[0].partitioner
    assert create(p.plugin, 4, **p.params()).hash_seed == 5  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("10 seconds", 10_000),
        ("1 minute 30 seconds", 90_000),
        ("500 milliseconds", 500),
        ("interval 2 hours", 7_200_000),
        ("1.5 s", 1_500),
        (" 3 mins ", 180_000),
        ("1 day", 86_400_000),
        ("10", None),
        ("", None),
        ("10 parsecs", None),
        ("INTERVAL '10' SECOND", None),
    ],
)
def test_spark_intervals_are_read_in_the_forms_the_settings_use(text: str, ms: int | None) -> None:
    from schemas.spark_settings import interval_ms

    assert interval_ms(text) == ms


def test_a_route_window_follows_the_spark_trigger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        textwrap.dedent(
            """
            routes:
              - raw_topic: plain                      # no window: a time window of 12 triggers
              - raw_topic: sized
                window: {size: 300000}              # the slide still follows the trigger
              - raw_topic: counted
                window: {kind: count, size: 50000}  # tuples: kept as written
              - raw_topic: pinned
                window: {slide: 2000}               # written: kept, and warned about
            spark: {trigger_interval: "2 seconds"}
            """
        )
    )
    monkeypatch.setenv("SKEWROUTE_SPARK__TRIGGER_INTERVAL", "10 seconds")  # the environment's trigger wins
    s = SkewrouteSettings.load(cfg)
    windows = {r.raw_topic: (r.window.kind, r.window.size, r.window.slide) for r in s.routes}
    assert windows == {
        "plain": ("time", 120_000, 10_000),
        "sized": ("time", 300_000, 10_000),
        "counted": ("count", 50_000, 1_000),
        "pinned": ("time", 60_000, 2_000),
    }
    [warning] = s.window_warnings()
    assert warning.startswith("routes[3] (pinned): window.slide 2000 ms differs from spark.trigger_interval")
    assert "10 seconds" in warning


def test_a_route_window_without_the_trigger_to_follow() -> None:
    plain = SkewrouteSettings.load(routes=[{"raw_topic": "a"}])  # Spark's default trigger: 5 s
    assert (plain.routes[0].window.size, plain.routes[0].window.slide) == (60_000, 5_000)
    assert plain.window_warnings() == []
    unread = SkewrouteSettings.load(routes=[{"raw_topic": "a"}], spark={"trigger_interval": "INTERVAL '7' SECOND"})
    assert unread.routes[0].window.slide == 5_000 and unread.window_warnings() == []
    with pytest.raises(ConfigError, match=r"routes\[0\]\.window: size \(3000 ms\) is shorter than spark"):
        SkewrouteSettings.load(routes=[{"raw_topic": "a", "window": {"size": 3000}}])


def test_the_router_warns_about_a_slide_that_is_not_the_trigger(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from router.cli import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "kafka: {bootstrap_servers: '127.0.0.1:1'}\n"
        "routes:\n  - raw_topic: clicks\n    window: {slide: 1000}\n"
        "spark: {trigger_interval: '5 seconds'}\n"
    )
    res = CliRunner().invoke(app, ["router", "--config", str(cfg), "--broker-wait", "0"])
    assert res.exit_code != 0  # no broker there
    assert "warning: routes[0] (clicks): window.slide 1000 ms differs from spark.trigger_interval" in res.output
