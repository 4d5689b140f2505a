"""The router side of cooperative Dalton (Alg. 2): PREPARE / AWAIT, SYNC building, GLOBAL application.

A :class:`SyncClient` belongs to one (router instance, route). It never touches Kafka or threads: the
caller gets the partitioner's SYNC body through a :class:`~router.sync.port.PartitionerPort` (directly
in-process, or on the data-plane thread through ``RouteDataPlane.submit``), and hands GLOBAL messages back.

Times are plain floats in the transport's clock (wall milliseconds over Kafka, the stream's time units in
the benchmark). Syncs happen on a grid of DSYNC (``now // dsync``), so every router of a deployment sends
its SYNC of a round at the same moment and the reducer's wait for stragglers stays short.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

from schemas.control import GlobalMessage, ScopeReport, SyncMessage

__all__ = ["SyncClient", "SyncState", "apply_dict", "sync_from_payload"]


class SyncState(enum.Enum):
    """Alg. 2's two states: learning locally (PREPARE), or waiting for the reducer's answer (AWAIT)."""

    PREPARE = "prepare"
    AWAIT = "await"


def sync_from_payload(
    payload: Mapping[str, Any],
    *,
    deployment: str,
    route: str,
    instance: str,
    seq: int,
    combiners: int,
    sent_ms: int,
    due_ms: int | None = None,
    leaving: bool = False,
    fingerprint: str = "",
    after_round: int = -1,
) -> SyncMessage:
    """The SYNC control message of a partitioner's ``sync_payload()`` (keys as decimal strings)."""
    return SyncMessage(
        deployment=deployment,
        route=route,
        instance=instance,
        seq=seq,
        combiners=combiners,
        fingerprint=fingerprint,
        after_round=max(-1, after_round),
        sent_ms=max(0, sent_ms),
        due_ms=max(0, sent_ms if due_ms is None else due_ms),
        records=int(payload.get("records", 0)),
        q_table={str(k): [round(float(x), 6) for x in row] for k, row in payload.get("qtable", {}).items()},
        weights={str(k): int(w) for k, w in payload.get("weights", {}).items()},
        top_keys=[(str(k), int(c)) for k, c in payload.get("top_keys", [])],
        double=bool(payload.get("request_double", False)),
        leaving=leaving,
        stats_window=int(payload.get("stats_window", 0)),
        scope=_scope(payload.get("scope")),
    )


def _scope(body: Mapping[str, Any] | None) -> ScopeReport | None:
    if not body:
        return None
    return ScopeReport(
        first=int(body["first"]),
        last=int(body["last"]),
        records=int(body["records"]),
        keys=[(str(k), int(c)) for k, c in body.get("keys", ())],
        loads=[int(x) for x in body.get("loads", ())],
        scopes=max(1, int(body.get("scopes", 1))),
        behind=bool(body.get("behind", False)),
    )


def apply_dict(msg: GlobalMessage, instance: str = "") -> dict[str, Any]:
    """The ``apply_global`` argument of a GLOBAL message (keys as 64-bit integers).

    ``peer_scopes``: the scopes reported by the round's other members (``instance`` is this router), and
    ``own_scope`` this router's as the round has it.
    """
    return {
        "peer_scopes": [rep.model_dump() for who, rep in msg.scopes.items() if who != instance],
        "own_scope": msg.scopes[instance].model_dump() if instance in msg.scopes else None,
        "qtable": {int(k): list(row) for k, row in msg.q_table.items()},
        "hot": [int(k) for k in msg.hot_keys],
        "expire": [int(k) for k in msg.expired],
        "global_load": msg.global_load,
    }


class SyncClient:
    """One router's protocol state for one route (Alg. 2, lines 13-20).

    ``dsync`` is the initial interval (the reducer's GLOBAL messages change it). ``stale_before``: GLOBAL
    messages sent before this time (e.g. read back from the control topic's history at start-up) are
    not applied. ``fingerprint``: the partitioner parameters' digest, carried by every SYNC.

    Schedule: SYNCs are due on a DSYNC grid of the *reducer's* clock, as seen through the arrival of its
    last GLOBAL (``grid_offset`` = arrival here - ``sent_ms`` there: its clock skew plus the delivery time,
    which is about the same for every member); on this node's own clock's grid only until a GLOBAL comes.
    Every member reads the same GLOBAL at about the same moment, so their SYNCs are in phase whatever
    their clocks say. With a grid of each member's own wall clock they were out of phase by their skew
    modulo DSYNC: a round closed only when the latest member sent, the earliest one found its reply still
    pending at its next SYNC and asked the reducer to double DSYNC, and the GLOBAL rate fell (3 workers
    300 ms apart, adaptive DSYNC, a loop running every 200 ms: 162 GLOBALs in 2 minutes against 473).
    The grid keeps the period at DSYNC, and a reply slower than DSYNC still asks for a doubling.
    """

    def __init__(
        self,
        *,
        deployment: str,
        route: str,
        instance: str,
        combiners: int,
        dsync: float,
        stale_before: float = -math.inf,
        fingerprint: str = "",
    ) -> None:
        if dsync <= 0:
            raise ValueError(f"dsync must be > 0, got {dsync!r}")
        self.deployment, self.route, self.instance, self.combiners = deployment, route, instance, combiners
        self.fingerprint = fingerprint
        self.dsync = float(dsync)
        self.state = SyncState.PREPARE
        self.seq = 0
        self.last_round = -1
        self.last_reducer = ""
        self.last_sent = -1
        self.stale_before = stale_before
        self.next_due: float | None = None
        self.grid_offset = 0.0  # local clock minus the last GLOBAL's sender clock (0: this node's own grid)
        self.sent = self.applied = self.doubles_requested = 0
        self.awaited_since: float | None = None
        self.last_latency: float | None = None

    def due(self, now: float) -> bool:
        """Whether a SYNC is due at ``now`` (the first call only schedules the first one)."""
        if self.next_due is None:
            self.next_due = self._grid_after(now)
            return False
        return now >= self.next_due

    def _grid_after(self, now: float) -> float:
        """The next point of the shared DSYNC grid: multiples of DSYNC on the last reducer's clock."""
        return (math.floor((now - self.grid_offset) / self.dsync) + 1) * self.dsync + self.grid_offset

    def skip(self, now: float) -> None:
        """No SYNC this time (the partitioner could not be reached): try again at the next grid point."""
        self.next_due = self._grid_after(now)

    def build_sync(self, payload: Mapping[str, Any], now: float, *, leaving: bool = False) -> SyncMessage:
        """The SYNC for ``payload`` (just taken from the partitioner): enters AWAIT, schedules the next."""
        msg = sync_from_payload(
            payload,
            deployment=self.deployment,
            route=self.route,
            instance=self.instance,
            seq=self.seq,
            combiners=self.combiners,
            sent_ms=int(now),
            due_ms=int(now if leaving or self.next_due is None else min(self.next_due, now)),
            leaving=leaving,
            fingerprint=self.fingerprint,
            after_round=self.last_round,
        )
        self.seq += 1
        self.sent += 1
        self.doubles_requested += int(msg.double)
        if self.state is SyncState.PREPARE:
            self.awaited_since = now
        self.state = SyncState.AWAIT
        self.next_due = self._grid_after(now)
        return msg

    def await_expired(self, now: float, rounds: float) -> bool:
        """In AWAIT for more than ``rounds`` x DSYNC without a GLOBAL: give up (back to PREPARE).

        The caller takes the partitioner out of AWAIT too (it routes with its local table; the buffered
        rewards are dropped, the local table has learned them already).
        """
        if self.state is not SyncState.AWAIT or self.awaited_since is None:
            return False
        if now - self.awaited_since <= rounds * self.dsync:
            return False
        self.state = SyncState.PREPARE
        self.awaited_since = None
        return True

    def accept_global(self, msg: GlobalMessage, now: float) -> dict[str, Any] | None:
        """The ``apply_global`` dict if ``msg`` is a new round for this route, else ``None``; back to PREPARE."""
        if msg.deployment != self.deployment or msg.route != self.route:
            return None
        if msg.sent_ms < self.stale_before:
            return None
        if msg.round <= self.last_round and not (msg.reducer != self.last_reducer and msg.sent_ms > self.last_sent):
            return None  # a round seen already (a new reducer that restarted the numbering is followed)
        self.last_round, self.last_reducer, self.last_sent = msg.round, msg.reducer, msg.sent_ms
        self.dsync = float(msg.dsync_ms)
        # the reducer's clock as seen here (its skew + the delivery time); only its phase matters, and the
        # modulo keeps the arithmetic exact whatever sent_ms a writer put in (the next SYNC is in (now, now + DSYNC])
        self.grid_offset = (now - float(msg.sent_ms)) % self.dsync
        self.next_due = self._grid_after(now)
        if self.awaited_since is not None and self.instance in msg.seqs:
            self.last_latency = now - self.awaited_since
        self.awaited_since = None
        self.state = SyncState.PREPARE
        self.applied += 1
        return apply_dict(msg, self.instance)
