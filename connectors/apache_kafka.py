"""Apache Kafka (the real broker) in KRaft mode, run from its Maven jars on the machine's JVM.

The jars come from :func:`connectors.kafka_jars.kafka_jars` (Maven once, then a local cache).

:class:`ApacheKafkaCluster` writes one ``server.properties`` per node (each node is a combined KRaft controller
and broker with its own data folder and free loopback ports), formats the storage with ``kafka.tools.StorageTool``
(all nodes in parallel), starts ``kafka.Kafka`` per node and waits until every broker is in the metadata. A state
file records the pids and the config paths; ``stop``/``status`` only ever act on processes whose command line
names one of those config files (a recycled pid is never killed). Data folders are fresh on every ``start``.

With ``scram_users`` the client listener is SASL_PLAINTEXT with SCRAM-SHA-256 (users created at format time) and
the broker runs the standard ACL authorizer: only super users (the first user, also used between brokers) may
do anything not granted by an ACL. The controller listener stays PLAINTEXT on loopback (it serves no produce or
fetch requests).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from connectors.broker import BrokerStatus, _alive, free_port
from connectors.kafka_jars import KAFKA_VERSION, kafka_jars
from schemas.exceptions import BrokerError

__all__ = ["ApacheKafkaCluster", "KafkaNode"]

SCRAM_MECHANISM = "SCRAM-SHA-256"

_LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
"""


def _cluster_id() -> str:
    """A KRaft cluster id: a random UUID as 22 URL-safe base64 characters.

    One in 64 of them starts with ``-``, which the storage tool's argument parser would take for an option
    (``--cluster-id: expected one argument``); such ids are drawn again.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@dataclass
class KafkaNode:
    """One combined controller+broker node."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def config(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.directory / "kafka.log"


@dataclass
class ApacheKafkaCluster:
    """``nodes`` Apache Kafka KRaft nodes on ``host``; the first node's client port names the cluster."""

    port: int = 9092
    nodes: int = 1
    host: str = "127.0.0.1"
    state_dir: Path = field(default_factory=lambda: Path(os.environ.get("SKEWROUTE_STATE_DIR", ".skewroute")))
    broker_conf: Mapping[str, str | int] = field(default_factory=dict)
    scram_users: Mapping[str, str] | None = None
    heap: str = "512m"
    version: str = KAFKA_VERSION
    members: list[KafkaNode] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # seconds: jars, format, ready (of the last start)

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise BrokerError(f"nodes must be >= 1, got {self.nodes}")
        self.state_dir = Path(self.state_dir)

    # ---- naming -------------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` of every node's client listener (or only the first before ``start``)."""
        ports = [m.port for m in self.members] or [self.port]
        return ",".join(f"{self.host}:{p}" for p in ports)

    @property
    def directory(self) -> Path:
        return self.state_dir / f"kafka-{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"kafka-{self.port}.json"

    @property
    def admin_user(self) -> str | None:
        """The super user (first SCRAM user) the brokers also use between themselves."""
        return next(iter(self.scram_users)) if self.scram_users else None

    def client_conf(self, user: str | None = None) -> dict[str, str]:
        """The librdkafka settings to connect as ``user`` (the admin by default); empty without SASL."""
        if not self.scram_users:
            return {}
        name = user or self.admin_user or ""
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": name, "sasl.password": self.scram_users[name]}  # fmt: skip

    # ---- start / stop -------------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> ApacheKafkaCluster:
        """Resolve the jars, format fresh storage, start every node and wait until all are brokers."""
        if self.status().running:
            raise BrokerError(f"an Apache Kafka cluster started by skewroute already runs on port {self.port}")
        t0 = time.monotonic()
        jars = kafka_jars(self.version)
        self.timings["jars"] = time.monotonic() - t0
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        (self.directory / "log4j2.yaml").write_text(_LOG4J2)
        ports = [self.port] + [free_port(self.host) for _ in range(self.nodes - 1)]
        self.members = [
            KafkaNode(i + 1, ports[i], free_port(self.host), self.directory / f"node-{i + 1}")
            for i in range(self.nodes)
        ]
        cluster_id = _cluster_id()
        for m in self.members:
            (m.directory / "data").mkdir(parents=True)
            m.config.write_text(self._properties(m))
        t0 = time.monotonic()
        self._format(jars, cluster_id, timeout)
        self.timings["format"] = time.monotonic() - t0
        t0 = time.monotonic()
        for m in self.members:
            self.start_node(m.node_id, wait=False)
        self._write_state()
        try:
            self.wait_ready(timeout)
        except BrokerError:
            self.stop()
            raise
        self.timings["ready"] = time.monotonic() - t0
        return self

    def _properties(self, m: KafkaNode) -> str:
        n, h = self.nodes, self.host
        voters = ",".join(f"{x.node_id}@{h}:{x.controller_port}" for x in self.members)
        rf, isr = min(3, n), min(2, n)
        sasl = bool(self.scram_users)
        proto = "SASL_PLAINTEXT" if sasl else "PLAINTEXT"
        props: dict[str, str | int] = {
            "process.roles": "broker,controller",
            "node.id": m.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"CLIENT://{h}:{m.port},CONTROLLER://{h}:{m.controller_port}",
            "advertised.listeners": f"CLIENT://{h}:{m.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": f"CLIENT:{proto},CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "CLIENT",
            "log.dirs": str(m.directory / "data"),
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": 8,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "transaction.state.log.num.partitions": 8,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "default.replication.factor": rf,
            "group.initial.rebalance.delay.ms": 0,
            "num.partitions": 1,
            "log.retention.check.interval.ms": 1000,  # retention and compaction act within seconds in tests
            "log.cleaner.backoff.ms": 500,
            "log.segment.delete.delay.ms": 1000,
        }
        if sasl:
            admin = self.admin_user
            props.update({
                "sasl.enabled.mechanisms": SCRAM_MECHANISM,
                "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
                f"listener.name.client.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{admin}" password="{self.scram_users[admin or ""]}";',  # type: ignore[index]
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": f"User:{admin};User:ANONYMOUS",  # ANONYMOUS: the loopback controller listener
                "allow.everyone.if.no.acl.found": "false",
            })  # fmt: skip
        props.update(self.broker_conf)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self, jars: Path, main: str, *args: str) -> list[str]:
        log4j = f"-Dlog4j2.configurationFile={self.directory / 'log4j2.yaml'}"
        return ["java", "-Xms128m", f"-Xmx{self.heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true", log4j,
                "-cp", f"{jars}/*", main, *args]  # fmt: skip

    def _format(self, jars: Path, cluster_id: str, timeout: float) -> None:
        procs = []
        for m in self.members:
            cmd = self._java(
                jars, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(m.config)
            )
            if self.scram_users:
                for user, pw in self.scram_users.items():
                    cmd += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={pw}]"]
            procs.append((m, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        for m, p in procs:
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                raise BrokerError(f"formatting node {m.node_id}'s storage took over {timeout:.0f} s") from None
            if p.returncode != 0:
                raise BrokerError(
                    f"formatting node {m.node_id}'s storage failed:\n{out.decode(errors='replace')[-2000:]}"
                )

    def start_node(self, node_id: int, wait: bool = True, timeout: float = 60.0) -> None:
        """(Re)start one node on its existing storage (after :meth:`kill_node`)."""
        m = self._member(node_id)
        if m.proc is not None and m.proc.poll() is None:
            raise BrokerError(f"node {node_id} already runs (pid {m.proc.pid})")
        log = open(m.log_file, "ab")  # noqa: SIM115 - handed to the child process
        cmd = self._java(kafka_jars(self.version), "kafka.Kafka", str(m.config))
        m.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)  # fmt: skip
        log.close()
        self._write_state()
        if wait:
            self.wait_ready(timeout)

    def kill_node(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL by default) to one node and reap it."""
        m = self._member(node_id)
        if m.proc is None or m.proc.poll() is not None:
            raise BrokerError(f"node {node_id} is not running")
        m.proc.send_signal(sig)
        m.proc.wait(timeout=60)

    def _member(self, node_id: int) -> KafkaNode:
        for m in self.members:
            if m.node_id == node_id:
                return m
        raise BrokerError(f"no node {node_id} in this cluster (nodes 1..{len(self.members)})")

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until every running node is a broker in the metadata; the log tail on timeout."""
        from confluent_kafka.admin import AdminClient

        want = {m.node_id for m in self.members if m.proc is not None and m.proc.poll() is None}
        conf: dict[str, str | int | float | bool] = {
            "bootstrap.servers": self.bootstrap,
            "socket.connection.setup.timeout.ms": 2000,
            "log_level": 0,
            **self.client_conf(),
        }
        admin = AdminClient(conf)
        deadline = time.monotonic() + timeout
        seen: set[int] = set()
        while time.monotonic() < deadline:
            dead = [
                m.node_id
                for m in self.members
                if m.node_id in want and m.proc is not None and m.proc.poll() is not None
            ]
            if dead:
                raise BrokerError(f"Apache Kafka node {dead[0]} exited at start; log tail:\n{self._tail(dead[0])}")
            with contextlib.suppress(Exception):
                seen = set(admin.list_topics(timeout=2).brokers)
                if want <= seen:
                    return
            time.sleep(0.2)
        raise BrokerError(
            f"Apache Kafka on {self.bootstrap} not ready within {timeout:.0f} s (brokers seen: {sorted(seen)}); "
            f"log tail:\n{self._tail(self.members[0].node_id)}"
        )

    def _tail(self, node_id: int) -> str:
        f = self._member(node_id).log_file
        return f.read_text(errors="replace")[-2000:] if f.exists() else ""

    def _write_state(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        nodes = [{"node_id": m.node_id, "port": m.port, "config": str(m.config),
                  "pid": m.proc.pid if m.proc is not None else None} for m in self.members]  # fmt: skip
        self.pid_file.write_text(json.dumps({"host": self.host, "port": self.port, "nodes": nodes}))

    def _recorded(self) -> list[tuple[int, int]]:
        """(pid, port) of recorded nodes still running as the process we started (its config on the cmdline)."""
        try:
            info = json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return []
        out = []
        for n in info.get("nodes", []):
            pid = n.get("pid")
            if not pid:
                continue
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kafka.Kafka" in cmdline and str(n["config"]).encode() in cmdline and _alive(pid):
                out.append((int(pid), int(n["port"])))
        return out

    def status(self) -> BrokerStatus:
        """Running when at least one recorded node still runs; ``pid`` is the first running node's."""
        alive = self._recorded()
        boot = ",".join(f"{self.host}:{p}" for _, p in alive) or self.bootstrap
        return BrokerStatus(bool(alive), alive[0][0] if alive else None, boot, self.pid_file)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every node we started (SIGTERM, SIGKILL after ``timeout``); ``False`` when none ran."""
        pids = {pid for pid, _ in self._recorded()}
        pids |= {m.proc.pid for m in self.members if m.proc is not None and m.proc.poll() is None}
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            for m in self.members:
                if m.proc is not None:
                    m.proc.poll()
            time.sleep(0.1)
        for pid in pids:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for m in self.members:
            if m.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    m.proc.wait(timeout=10)
                m.proc = None
        self.pid_file.unlink(missing_ok=True)
        return bool(pids)

    def __enter__(self) -> ApacheKafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
