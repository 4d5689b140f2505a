"""The compose file cannot be run here (no Docker engine); check its structure instead."""

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_compose_file_is_valid_yaml_with_the_expected_services() -> None:
    doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = doc["services"]
    assert {"kafka", "router", "spark-master", "spark-worker", "spark-job"} <= set(services)
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, name
        for dep in svc.get("depends_on", []):
            assert dep in services, f"{name} depends on unknown service {dep}"
    for svc in ("router", "spark-job"):
        config = services[svc]["command"][-1]
        assert (DEPLOY / "configs" / Path(config).name).is_file(), config
    assert services["router"]["environment"]["SKEWROUTE_KAFKA__BOOTSTRAP_SERVERS"] == "kafka:9092"


def _services() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]


def test_kafka_is_the_tested_version_with_an_external_listener_on_loopback() -> None:
    from connectors.kafka_jars import KAFKA_VERSION

    services = _services()
    for name in ("kafka", "topics"):
        assert services[name]["image"] == f"apache/kafka:{KAFKA_VERSION}", name
    env = services["kafka"]["environment"]
    listeners = dict(item.split("://") for item in env["KAFKA_LISTENERS"].split(","))
    advertised = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert set(advertised) == set(listeners) - {env["KAFKA_CONTROLLER_LISTENER_NAMES"]}
    assert advertised["INTERNAL"] == "kafka:9092"  # what the other services use
    host_ip, host_port, container_port = services["kafka"]["ports"][0].split(":")
    external_host, external_port = advertised["EXTERNAL"].rsplit(":", 1)
    assert (external_host, external_port) == (host_ip, host_port)  # host clients are sent where they can connect
    assert listeners["EXTERNAL"] == f":{container_port}"


def test_published_ports_are_loopback_only_and_services_restart() -> None:
    for name, svc in _services().items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port} is open on every interface"
        if name != "topics":  # a one-shot job
            assert svc.get("restart") in ("unless-stopped", "always", "on-failure"), name


def test_router_replicas_are_healthchecked_on_ready_with_derived_stable_ids() -> None:
    from schemas.settings import SkewrouteSettings
    from spark_consumers.job import resolve_dedupe

    router = _services()["router"]
    assert "/ready" in " ".join(router["healthcheck"]["test"])
    env = router["environment"]
    port = env["SKEWROUTE_ROUTER__WEB_PORT"]
    assert f":{port}/ready" in " ".join(router["healthcheck"]["test"])
    assert "SKEWROUTE_ROUTER__INSTANCE_ID" not in env  # --scale: one value would be every replica's
    slots = env["SKEWROUTE_ROUTER__SLOT_DIR"]
    assert any(v.split(":")[1] == slots and not v.startswith(".") for v in router["volumes"])  # shared, named
    assert router["hostname"]  # one hostname + shared slots: ids <hostname>-0, -1, ... stable across restarts
    job = _services()["spark-job"]
    assert job["depends_on"]["router"]["condition"] == "service_healthy"
    config = DEPLOY / "configs" / Path(router["command"][-1]).name
    s = SkewrouteSettings.load(config, spark={"dedupe": job["environment"].get("SKEWROUTE_SPARK__DEDUPE", "auto")})
    assert s.router.delivery == "exactly_once" or resolve_dedupe(s)  # exact after a router crash
