"""The deploy files run one Spark, one Python and one dependency set, all taken from pyproject.toml.

Docker does not run here: the Dockerfile and compose file are checked as text. A drift (a Python image that is
not the package's Python, a Spark image next to the PySpark pin, a pinned dependency in the Dockerfile, a stop
grace shorter than the router's shutdown timeout) fails here.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from schemas.settings import RouterSettings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _python_minor() -> str:
    """The one Python minor that ``requires-python`` allows (">=3.11,<3.12" -> "3.11")."""
    spec = _pyproject()["project"]["requires-python"]
    lo = re.search(r">=\s*(\d+)\.(\d+)", spec)
    hi = re.search(r"<\s*(\d+)\.(\d+)", spec)
    assert lo and hi, spec
    assert (int(hi[1]), int(hi[2])) == (int(lo[1]), int(lo[2]) + 1), f"requires-python must name one minor: {spec}"
    return f"{lo[1]}.{lo[2]}"


def _dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def _seconds(v: str) -> float:
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", v)
    assert m and v, v
    return int(m[1] or 0) * 60 + int(m[2] or 0)


def test_image_python_is_the_package_python() -> None:
    arg = re.search(r"^ARG PYTHON_VERSION=(\S+)$", _dockerfile(), re.M)
    assert arg, "deploy/Dockerfile needs ARG PYTHON_VERSION"
    assert arg[1] == _python_minor()
    assert re.search(r"^FROM python:\$\{PYTHON_VERSION\}-", _dockerfile(), re.M)


def test_image_installs_the_package_with_its_own_pins_and_uses_its_spark() -> None:
    text = _dockerfile()
    installs = re.findall(r"^RUN pip install[^\n\\]*", text, re.M)
    assert installs == ["RUN pip install --no-cache-dir -c constraints.txt . "], installs  # the tested versions
    deps = {re.split(r"[=<>~!\[ ]", d)[0]: d for d in _pyproject()["project"]["dependencies"]}
    assert deps["pyspark"].startswith("pyspark=="), "pin PySpark: master, workers and driver must agree"
    assert "/opt/spark" in text and "pyspark.__file__" in text  # SPARK_HOME is the installed PySpark
    jdk = re.search(r"openjdk-(\d+)-jre", text)
    assert jdk and int(jdk[1]) >= 17, "PySpark 4 needs Java 17 or later"


def test_every_spark_process_runs_the_one_image() -> None:
    services = _compose()["services"]
    image = services["router"]["image"]
    for name in ("router", "spark-master", "spark-worker", "spark-job"):
        svc = services[name]
        assert svc["image"] == image and svc["build"]["dockerfile"] == "deploy/Dockerfile", name
    assert not [s for s in services.values() if "spark" in str(s.get("image", "")).split(":")[0]]  # no stock image
    assert services["spark-master"]["entrypoint"][1] == "org.apache.spark.deploy.master.Master"
    assert "-Dspark.master.rest.enabled=false" in services["spark-master"]["environment"]["SPARK_MASTER_OPTS"]
    job = services["spark-job"]["environment"]
    assert job["SKEWROUTE_SPARK__MASTER"] == "spark://spark-master:7077"
    ck = job["SKEWROUTE_SPARK__CHECKPOINT_DIR"]  # state stores are written by executors: shared with workers
    shared = [v for v in services["spark-worker"].get("volumes", []) if ck.startswith(v.split(":")[1])]
    assert shared, "the checkpoint volume must be mounted on the workers at the driver's path"


def test_raw_topics_are_created_by_the_stack_before_the_routers() -> None:
    services = _compose()["services"]
    configs = {Path(services[s]["command"][-1]).name for s in ("router", "spark-job")}
    raw = {r["raw_topic"] for c in configs for r in yaml.safe_load((DEPLOY / "configs" / c).read_text())["routes"]}
    created = set()
    for svc in services.values():
        cmd = svc.get("command") or []
        if any("kafka-topics" in str(c) for c in cmd) and "--create" in cmd:
            created.add(cmd[cmd.index("--topic") + 1])
            assert "--replication-factor" not in cmd  # the broker's default
    assert raw <= created, f"raw topics {raw - created} are not created by the stack"
    dep = services["router"]["depends_on"]
    assert dep["topics"]["condition"] == "service_completed_successfully"


def test_stop_grace_covers_the_router_shutdown_timeout() -> None:
    services = _compose()["services"]
    timeout = RouterSettings().shutdown_timeout_s
    for name in ("router", "spark-job"):
        grace = services[name].get("stop_grace_period", "10s")  # compose's default is 10 s
        assert _seconds(grace) >= timeout, f"{name}: stop_grace_period {grace} < shutdown_timeout_s {timeout}"


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_constraints_pin_every_dependency_at_versions_spark_supports() -> None:
    pins = _constraints()
    lab = tomllib.loads((ROOT / "benchmarks" / "pyproject.toml").read_text())["project"]["dependencies"]
    project = _pyproject()["project"]
    deps = project["dependencies"] + project["optional-dependencies"]["dev"] + lab
    names = {re.split(r"[=<>~!\[ ;]", d)[0].lower().replace("_", "-") for d in deps}
    names -= {"skewroute", "skewroute-lab"}
    assert names <= set(pins), f"not pinned: {sorted(names - set(pins))}"
    pyspark = next(d for d in project["dependencies"] if d.startswith("pyspark=="))
    assert re.fullmatch(pyspark.split("==")[1].replace(".", r"\.").replace("*", r"\d+"), pins["pyspark"])
    assert int(pins["pandas"].split(".")[0]) < 3, "PySpark 4.3 supports pandas 2 (it warns on every run with 3)"


def test_every_install_path_uses_the_constraints() -> None:
    assert "-c constraints.txt" in (DEPLOY / "setup-venv.sh").read_text()
    assert "COPY pyproject.toml README.md constraints.txt" in _dockerfile()
    readme = (ROOT / "README.md").read_text()
    installs = re.findall(r"^pip install.*$", readme, re.M)
    assert installs and all("-c constraints.txt" in line for line in installs), installs
