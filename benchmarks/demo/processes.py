"""The processes a demo run starts (router workers, the Spark job), and stopping every one of them.

Each child runs in its own session (process group), so stopping it also reaches what it started (the Spark
JVM and its Python workers). :meth:`Processes.stop_all` asks politely first (SIGINT: the Spark job stops its
query; SIGTERM: a router worker delivers, commits and leaves its group), then kills the group. Only the
groups of processes started here are signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Child", "Processes", "router_command", "spark_command"]


@dataclass
class Child:
    """A started process, its log file and the signal that stops it cleanly."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    stop_signal: int = signal.SIGTERM

    @property
    def running(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def log_tail(self, chars: int = 1500) -> str:
        """The end of the process's output (for error messages)."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def router_command(config: Path, web_port: int) -> list[str]:
    """``skewroute router --config FILE --web-port P`` with this interpreter."""
    return [
        sys.executable, "-c", "from router.cli import main; main()",
        "router", "--config", str(config), "--web-port", str(web_port), "--loglevel", "warning",
    ]  # fmt: skip


def spark_command(config: Path) -> list[str]:
    """The route's Spark job (``python -m spark_consumers.job``) with this interpreter."""
    return [sys.executable, "-m", "spark_consumers.job", "--config", str(config)]


@dataclass
class Processes:
    """The children of one demo; a context manager that stops them all on exit (errors and Ctrl-C too)."""

    children: list[Child] = field(default_factory=list)

    def start(self, name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None, *,
              stop_signal: int = signal.SIGTERM) -> Child:  # fmt: skip
        """Start ``cmd`` in a new session with its output in ``log``."""
        log.parent.mkdir(parents=True, exist_ok=True)
        child_env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        child_env.update(env or {})
        with log.open("ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env,
                start_new_session=True,
            )  # fmt: skip
        child = Child(name, proc, log, stop_signal)
        self.children.append(child)
        return child

    def stop(self, child: Child, timeout: float = 30.0) -> None:
        """Stop one child: its clean-stop signal, then SIGKILL to its process group after ``timeout``."""
        pgid = child.proc.pid  # its own session: the group id is its pid
        if child.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.proc.pid, child.stop_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout)
        if child.running or _group_alive(pgid):  # the group still exists, so its id is still ours
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)  # whatever it started and left behind (JVM, Python workers)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(5)
        if child in self.children:
            self.children.remove(child)

    def stop_all(self, timeout: float = 30.0) -> None:
        """Stop every child (all asked at once, the newest first)."""
        self.stop_many(list(reversed(self.children)), timeout)

    def stop_many(self, children: list[Child], timeout: float = 30.0) -> None:
        """Stop ``children``, all asked at once (each still gets ``timeout`` in all to stop cleanly)."""
        for child in children:
            if child.running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.proc.pid, child.stop_signal)
        deadline = time.monotonic() + timeout
        for child in children:
            self.stop(child, max(0.1, deadline - time.monotonic()))

    def failed(self) -> Child | None:
        """A child that exited although nobody stopped it."""
        return next((c for c in self.children if not c.running), None)

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


def _group_alive(pgid: int) -> bool:
    """Whether any process is still in process group ``pgid``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False
