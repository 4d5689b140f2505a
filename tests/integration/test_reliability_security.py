"""SASL/TLS settings reach every Kafka client skewroute builds, and the secrets never show.

Clients covered (each built from the same ``KafkaSettings``): the data plane's producer and consumer, the
Dalton sync transport's producer and broadcast reader, the topic admin (route topics) and the start-up broker
check, Faust's own clients (``broker_credentials``), the Spark sources' options (Python source and Spark's
built-in one) and the Spark Kafka sink's producer. The confluent-kafka classes are replaced by recorders, so
no broker is needed. Secrets: not in ``repr``/``str`` of the settings, the logs of a data plane and a sync
transport, the errors, ``skewroute router``'s output, or ``skewroute status``.

Tansu 0.6.0 (the embedded broker) cannot run a SASL route, so there is no SASL integration test: with
``--authentication`` every unauthenticated connection is refused, including ``tansu user create``'s own, so no
SCRAM user can be created on a memory-only broker (clients then fail with "SASL SCRAM authentication failed:
broker responded with unknown-user"; PLAIN is not offered); without it, a user can be created but the SASL
handshake is refused ("Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-512").
"""

from __future__ import annotations

import logging
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmarks.soak_parts import worker_config
from connectors.broker import free_port
from connectors.spark_source import kafka_options
from router.app import _faust_broker
from router.dataplane import RouteDataPlane
from router.observability import RouterMetrics
from router.sync.kafka import KafkaSyncTransport
from schemas.exceptions import BrokerError
from schemas.settings import SkewrouteSettings
from spark_consumers.job import java_kafka_options

SECRET, KEY_SECRET = "pa55-w0rd-xyz", "k3y-s3cret-abc"
CA = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"  # Faust loads it
SASL = {
    "bootstrap_servers": "b1:9093,b2:9093",
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_username": "alice",
    "sasl_password": SECRET,
    "ssl_ca_location": CA,
    "ssl_key_password": KEY_SECRET,
}
EXPECTED = {
    "bootstrap.servers": "b1:9093,b2:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "alice",
    "sasl.password": SECRET,
    "ssl.ca.location": CA,
    "ssl.key.password": KEY_SECRET,
}
BIN = Path(sys.executable).parent


class _Recorder:
    """Stands in for Producer / Consumer / AdminClient: records the configuration, answers harmlessly."""

    made: list[tuple[str, dict[str, Any]]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.made.append((type(self).__name__, dict(conf)))

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "list_topics":
                raise BrokerError("no broker in this test")
            if name == "offsets_for_times":
                return []
            if name in ("flush", "poll"):
                return 0
            return None

        return call


class Producer(_Recorder):
    pass


class Consumer(_Recorder):
    pass


class AdminClient(_Recorder):
    pass


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    import connectors.kafka as ck

    _Recorder.made = []
    monkeypatch.setattr(ck, "Producer", Producer)
    monkeypatch.setattr(ck, "Consumer", Consumer)
    monkeypatch.setattr(ck, "AdminClient", AdminClient)
    return _Recorder.made


def _settings(tmp_path: Path, delivery: str = "at_least_once") -> SkewrouteSettings:
    return SkewrouteSettings.load(
        kafka=SASL,
        routes=[{"raw_topic": "clicks", "combiners": 4, "partitioner": {"name": "dalton"}}],
        router={"state_dir": str(tmp_path), "delivery": delivery, "instance_id": "w1"},
    )


def _has_security(conf: dict[str, Any]) -> bool:
    return all(conf.get(k) == v for k, v in EXPECTED.items())


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_every_kafka_client_gets_the_security_settings(
    recorded: list, tmp_path: Path, caplog: pytest.LogCaptureFixture, delivery: str
) -> None:
    from connectors.admin import ensure_route_topics
    from router.preflight import await_broker
    from router.sync.node import NodeConfig, SyncNode
    from router.sync.service import PlanePort

    s = _settings(tmp_path, delivery)
    route = s.routes[0]
    caplog.set_level(logging.DEBUG)
    plane = RouteDataPlane(s.kafka, s.router, route, RouterMetrics("w1"), instance_id="w1")
    plane._setup()  # the data plane's producer (transactional with exactly_once) and consumer
    node = SyncNode(PlanePort(plane), NodeConfig(deployment="d", route="clicks", instance="w1", combiners=4, dsync=100))
    transport = KafkaSyncTransport(s.kafka, s.router.control_topic, [node]).open()  # sync producer + reader
    transport.close()
    with pytest.raises(BrokerError) as err:
        ensure_route_topics(s.kafka, route, s.router.control_topic)  # the topic admin
    with pytest.raises(BrokerError):
        await_broker(s.kafka, 0.1, sleep=lambda _: None)  # the start-up check
    kinds = [k for k, _ in recorded]
    assert kinds.count("Producer") == 2 and kinds.count("Consumer") == 2 and kinds.count("AdminClient") == 2
    for kind, conf in recorded:
        assert _has_security(conf), (kind, {k: v for k, v in conf.items() if k in EXPECTED})
    data_producer = recorded[0][1]
    assert ("transactional.id" in data_producer) == (delivery == "exactly_once")

    # Faust's own clients (aiokafka): SASL credentials with a TLS context
    faust_opts = _faust_broker(s.kafka)
    creds = faust_opts["broker_credentials"]
    assert faust_opts["broker"] == "kafka://b1:9093;kafka://b2:9093"
    assert (creds.username, creds.password, creds.mechanism.value) == ("alice", SECRET, "SCRAM-SHA-512")
    assert creds.ssl_context is not None

    # Spark: the Python source's options, Spark's built-in source, the Kafka sink's producer
    opts = kafka_options(s.kafka)
    assert all(opts[f"kafka.{k}"] == v for k, v in EXPECTED.items())
    java = java_kafka_options(s.kafka)
    assert java["kafka.security.protocol"] == "SASL_SSL" and java["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert f'username="alice" password="{SECRET}"' in java["kafka.sasl.jaas.config"]
    assert java["kafka.ssl.truststore.location"] == CA
    assert _has_security(s.kafka.librdkafka("producer"))  # what start_job hands to the sink

    # ... and the secrets show nowhere else
    shown = [repr(s), str(s), repr(s.kafka), str(s.kafka.redacted()), str(err.value), caplog.text]
    assert not any(SECRET in x or KEY_SECRET in x for x in shown)


def test_cli_output_never_shows_secrets(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    cfg = worker_config(tmp_path / "w.yaml", dead, "clicks", app_id="sec", instance="w1", state_dir=tmp_path / "s")
    text = cfg.read_text().replace("kafka:\n", "kafka:\n  " + "\n  ".join(
        f"{k}: {v}" for k, v in SASL.items() if k != "bootstrap_servers") + "\n")  # fmt: skip
    cfg.write_text(text)
    assert SkewrouteSettings.load(cfg).kafka.sasl_password is not None
    out = subprocess.run(
        [str(BIN / "skewroute"), "router", "--config", str(cfg), "--web-port", str(free_port()), "--broker-wait", "1"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 3 and dead in out.stderr  # it tried, and said where
    assert SECRET not in out.stdout + out.stderr and KEY_SECRET not in out.stdout + out.stderr
    assert "'sasl.password': '***'" in out.stderr.replace("\n", "")

    from router.cli import app

    url = f"http://admin:{SECRET}@127.0.0.1:{free_port()}/metrics"
    res = CliRunner().invoke(app, ["status", "--once", "--url", url])
    assert res.exit_code == 0 and "unreachable" in res.output and SECRET not in res.output
