"""A router worker's identity on its host: a slot number, and the instance id and web port derived from it.

Several workers may run on one host from the same config. Each claims the lowest free *slot* (an exclusive
``flock`` on ``<lock dir>/slot-<i>.lock``, held for the life of the process; the kernel releases it when the
process dies, even on SIGKILL). So the first worker on a host is slot 0, the second slot 1, and a killed worker
that is restarted while the others keep theirs gets its old slot back.

From the slot:

- the instance id ``<hostname>-<slot>`` (unless ``router.instance_id`` is set): stable across restarts, so
  exactly-once's ``transactional.id`` (``<group>.<instance>``) fences the previous incarnation of the same
  worker and aborts its open transaction at once;
- the web port ``6066 + slot`` (unless ``router.web_port`` is set), or the next free port above it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from schemas.exceptions import ConfigError

__all__ = ["BASE_WEB_PORT", "MAX_SLOTS", "WorkerSlot", "claim_slot", "default_lock_dir", "free_web_port"]

#: The first worker's web port (the second's is 6067, ...).
BASE_WEB_PORT = 6066
#: Most workers per host (lock dir).
MAX_SLOTS = 256


def default_lock_dir() -> Path:
    """Host-wide, per user: ``$TMPDIR/skewroute-<uid>/slots`` (workers of any working folder see each other)."""
    return Path(tempfile.gettempdir()) / f"skewroute-{os.getuid()}" / "slots"


@dataclass
class WorkerSlot:
    """A claimed slot; the lock is held while ``_lock`` stays open (until :meth:`release` or process exit)."""

    index: int
    _lock: IO[str] | None = None

    def instance_id(self, host: str | None = None) -> str:
        """``<hostname>-<slot>``."""
        return f"{host or socket.gethostname()}-{self.index}"

    def release(self) -> None:
        """Give the slot back (a worker that stops; process exit does the same)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def claim_slot(lock_dir: Path | None = None) -> WorkerSlot:
    """The lowest slot no live process holds; :class:`ConfigError` when all :data:`MAX_SLOTS` are taken."""
    where = lock_dir or default_lock_dir()
    where.mkdir(parents=True, exist_ok=True)
    for i in range(MAX_SLOTS):
        f = (where / f"slot-{i}.lock").open("a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        return WorkerSlot(i, f)
    raise ConfigError([f"router: all {MAX_SLOTS} worker slots in {where} are taken; set router.instance_id and "
                       "router.web_port explicitly"])  # fmt: skip


def free_web_port(host: str, slot: int) -> int:
    """``BASE_WEB_PORT + slot`` if ``host`` can bind it, else the next port above that can."""
    for port in range(BASE_WEB_PORT + slot, 65536):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise ConfigError([f"router.web_port: no free port on {host} from {BASE_WEB_PORT + slot}"])
