"""Apache Kafka's broker jars, resolved once with Maven into a local cache.

:func:`kafka_jars` resolves the pinned ``org.apache.kafka:kafka_2.13`` and its runtime dependencies ONCE with
Maven (``mvn dependency:copy-dependencies`` on a generated pom) into a cache folder
(``$SKEWROUTE_KAFKA_CACHE`` or ``~/.cache/skewroute/kafka-<version>``); later calls only check the folder's
marker file, so starting a broker (:mod:`connectors.apache_kafka`) needs no network after the first run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from schemas.exceptions import BrokerError

__all__ = ["KAFKA_VERSION", "kafka_jars"]

KAFKA_VERSION = "4.3.1"
LOG4J_VERSION = "2.25.4"  # the log4j2 version kafka 4.3.1 depends on; the slf4j binding must match it

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>skewroute</groupId><artifactId>kafka-broker-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version></dependency>
  </dependencies>
</project>
"""


def _cache_dir(version: str) -> Path:
    base = os.environ.get("SKEWROUTE_KAFKA_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "skewroute" / f"kafka-{version}"


def kafka_jars(version: str = KAFKA_VERSION, cache_dir: Path | None = None, timeout: float = 900.0) -> Path:
    """The folder holding the broker's jars, resolved with Maven on first use (then offline)."""
    root = Path(cache_dir) if cache_dir is not None else _cache_dir(version)
    jars, marker = root / "jars", root / "jars.complete"
    if marker.exists():
        return jars
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:  # several processes (pytest workers, CLI) may ask at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return jars
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError(
                "Apache Kafka's jars are not cached yet and Maven (mvn) is not installed: apt-get install maven"
            )
        (root / "pom.xml").write_text(_POM.format(kafka=version, log4j=LOG4J_VERSION))
        shutil.rmtree(jars, ignore_errors=True)
        cmd = [mvn, "-q", "-B", "-f", str(root / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={jars}", "-DincludeScope=runtime"]  # fmt: skip
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise BrokerError(f"resolving Apache Kafka {version} with Maven took over {timeout:.0f} s") from None
        if done.returncode != 0 or not (jars / f"kafka_2.13-{version}.jar").exists():
            tail = (done.stdout + done.stderr)[-2000:]
            raise BrokerError(f"Maven could not resolve org.apache.kafka:kafka_2.13:{version}:\n{tail}")
        marker.write_text("\n".join(sorted(p.name for p in jars.glob("*.jar"))) + "\n")
    return jars
