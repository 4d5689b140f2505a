"""A Spark standalone cluster on this machine, started from the installed PySpark (no separate Spark download).

One master and ``W`` workers, each its own JVM (``$SPARK_HOME/bin/spark-class ...deploy.master.Master`` and
``...deploy.worker.Worker``), with ``SPARK_HOME`` = the ``pyspark`` package folder. Every port is a free one
picked at start (the master's RPC and web UI ports, each worker's web UI), and the master's REST submission
server is switched off: it listens on 6066 by default, which is also the router's default web port.

Everything a cluster needs lives under one state folder (default ``.skewroute/spark-cluster``): ``cluster.json``
(ports, pids, settings), ``logs/`` (one log per daemon), ``work/worker-<i>`` (executor folders: the shipped
Python environment is unpacked there) and ``local/`` (shuffle files). ``stop`` ends the daemons it started by
pid (SIGTERM, then SIGKILL) and the executors they launched with them.

    skewroute spark-cluster start --workers 2 --cores 1 --memory 2g
    skewroute spark-job --config skewroute.yaml   # with spark.master: spark://127.0.0.1:<port> (printed by start)
    skewroute spark-cluster stop
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from connectors.broker import free_port
from schemas.exceptions import SkewrouteError

__all__ = ["ClusterError", "ClusterState", "StandaloneCluster", "WorkerInfo", "spark_home"]

DEFAULT_STATE_DIR = Path(".skewroute/spark-cluster")
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class ClusterError(SkewrouteError):
    """The standalone cluster could not be started, reached or stopped."""


def spark_home() -> Path:
    """The installed PySpark package folder (it carries ``bin/spark-class`` and the jars)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise ClusterError(f"no bin/spark-class under the installed pyspark ({home})")
    return home


@dataclass
class WorkerInfo:
    """One worker daemon as the master sees it."""

    id: str
    host: str
    state: str
    cores: int
    cores_used: int
    memory_mb: int


@dataclass
class ClusterState:
    """What ``cluster.json`` records about a started cluster."""

    host: str
    master_port: int
    master_web_port: int
    master_pid: int
    worker_pids: list[int] = field(default_factory=list)
    worker_web_ports: list[int] = field(default_factory=list)
    cores: int = 1
    memory: str = "2g"

    @property
    def master_url(self) -> str:
        """``spark://host:port``: the value for ``spark.master``."""
        return f"spark://{self.host}:{self.master_port}"

    @property
    def web_url(self) -> str:
        """The master's web UI."""
        return f"http://{self.host}:{self.master_web_port}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own exited child not reaped yet) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


class StandaloneCluster:
    """Start, inspect and stop a local Spark standalone cluster kept in ``state_dir``."""

    def __init__(self, state_dir: Path = DEFAULT_STATE_DIR, host: str = "127.0.0.1") -> None:
        self.state_dir = Path(state_dir).absolute()
        self.host = host
        self._procs: list[subprocess.Popen[bytes]] = []

    # ---- state -----------------------------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        """``cluster.json`` of this cluster."""
        return self.state_dir / "cluster.json"

    def state(self) -> ClusterState | None:
        """The recorded state, or None when no cluster was started here."""
        if not self.state_file.is_file():
            return None
        return ClusterState(**json.loads(self.state_file.read_text()))

    def _save(self, st: ClusterState) -> None:
        self.state_file.write_text(json.dumps(asdict(st), indent=2))

    # ---- processes -------------------------------------------------------------------------------------------
    def _env(self, extra_opts: str = "") -> dict[str, str]:
        home = spark_home()
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(home),
            SPARK_LOG_DIR=str(self.state_dir / "logs"),
            SPARK_LOCAL_DIRS=str(self.state_dir / "local"),
            SPARK_LOCAL_IP=self.host,
            SPARK_DAEMON_MEMORY=env.get("SPARK_DAEMON_MEMORY", "512m"),
            SPARK_MASTER_OPTS=f"-Dspark.master.rest.enabled=false {extra_opts}".strip(),
        )
        env.pop("PYSPARK_GATEWAY_PORT", None)
        env.pop("PYSPARK_GATEWAY_SECRET", None)
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.state_dir / "logs" / f"{name}.out").open("ab")
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        # spark-class execs the JVM: the child's pid is the daemon's. Its own session: a Ctrl-C in the shell
        # that ran `start` does not reach it.
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._procs.append(proc)
        return proc

    def start(self, workers: int = 2, cores: int = 1, memory: str = "2g", timeout: float = 180.0) -> ClusterState:
        """Start a master and ``workers`` workers; return once every worker is registered ALIVE."""
        if workers < 1 or cores < 1:
            raise ClusterError(f"workers and cores must be >= 1 (workers={workers}, cores={cores})")
        old = self.state()
        if old is not None and _alive(old.master_pid):
            raise ClusterError(f"a cluster is already running from {self.state_dir} ({old.master_url}): stop it first")
        for sub in ("logs", "local", "work"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        env = self._env()
        port, web = free_port(), free_port()
        master = self._spawn(
            "master", [MASTER_CLASS, "--host", self.host, "--port", str(port), "--webui-port", str(web)], env
        )
        st = ClusterState(self.host, port, web, master.pid, cores=cores, memory=memory)
        self._save(st)
        try:
            self._wait(st, lambda s: True, timeout, "the master's web UI")
            for i in range(workers):
                self.add_worker(st, i, env)
            self._wait(st, lambda s: len(_alive_workers(s)) >= workers, timeout, f"{workers} ALIVE workers")
        except BaseException:
            self.stop()
            raise
        return st

    def add_worker(self, st: ClusterState, index: int, env: dict[str, str] | None = None) -> int:
        """Start worker ``index`` (its own work folder and web port); record and return its pid."""
        web = free_port()
        work = self.state_dir / "work" / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        args = [
            WORKER_CLASS, st.master_url, "--host", self.host, "--cores", str(st.cores), "--memory", st.memory,
            "--webui-port", str(web), "--work-dir", str(work),
        ]  # fmt: skip
        proc = self._spawn(f"worker-{index}", args, env or self._env())
        st.worker_pids.append(proc.pid)
        st.worker_web_ports.append(web)
        self._save(st)
        return proc.pid

    def _wait(self, st: ClusterState, ok: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not _alive(st.master_pid):
                raise ClusterError(f"the Spark master exited; see {self.state_dir / 'logs' / 'master.out'}")
            try:
                if ok(self.master_json(st)):
                    return
            except OSError as exc:
                last = exc
            time.sleep(0.5)
        raise ClusterError(f"no {what} after {timeout:.0f} s ({last}); logs in {self.state_dir / 'logs'}")

    def master_json(self, st: ClusterState | None = None) -> dict[str, Any]:
        """The master's ``/json`` status (workers, applications)."""
        st = st or self._require()
        with urllib.request.urlopen(f"{st.web_url}/json/", timeout=5) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
        return doc

    def workers(self) -> list[WorkerInfo]:
        """Every worker the master knows, with its state (ALIVE, DEAD, ...)."""
        return [
            WorkerInfo(w["id"], w["host"], w["state"], w["cores"], w["coresused"], w["memory"])
            for w in self.master_json().get("workers", [])
        ]

    def _require(self) -> ClusterState:
        st = self.state()
        if st is None:
            raise ClusterError(f"no cluster started from {self.state_dir}")
        return st

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to worker ``index`` and the executor JVMs it launched (a crashed worker machine)."""
        st = self._require()
        pid = st.worker_pids[index]
        for p in [*_children(pid), pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)

    def stop(self, grace: float = 15.0) -> None:
        """Stop every daemon of the cluster (workers first) and their executors; remove ``cluster.json``."""
        st = self.state()
        if st is None:
            return
        pids = [*st.worker_pids, st.master_pid]
        tree = [c for p in pids if _alive(p) for c in _children(p)] + pids
        for p in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(_alive(p) for p in tree) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.2)
        for p in tree:
            if _alive(p):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
        self._reap(wait=True)
        self.state_file.unlink(missing_ok=True)

    def _reap(self, wait: bool = False) -> None:
        for proc in self._procs:
            if wait:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            else:
                proc.poll()

    def status(self) -> dict[str, Any]:
        """Master URL, web UI, pid liveness and the master's view of every worker."""
        st = self._require()
        out: dict[str, Any] = {
            "master": st.master_url, "web_ui": st.web_url, "master_alive": _alive(st.master_pid),
            "worker_pids": {pid: _alive(pid) for pid in st.worker_pids},
        }  # fmt: skip
        try:
            out["workers"] = [asdict(w) for w in self.workers()]
            out["applications"] = [a.get("name") for a in self.master_json(st).get("activeapps", [])]
        except OSError as exc:
            out["workers"] = []
            out["error"] = f"master not reachable: {exc}"
        return out


def _alive_workers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for w in doc.get("workers", []) if w.get("state") == "ALIVE"]


def _children(pid: int) -> list[int]:
    """Descendants of ``pid`` (from /proc), deepest first."""
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parts = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        kids.setdefault(int(parts[1]), []).append(int(stat.parent.name))
    out: list[int] = []

    def walk(p: int) -> None:
        for c in kids.get(p, []):
            walk(c)
            out.append(c)

    walk(pid)
    return out
