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
