"""Hooks for cooperative learning (Dalton Sec. 4, Algorithm 2), with plain dicts: no Kafka here.

The Kafka protocol (a control topic, the Q-table reducer, DSYNC adaptation) is built on three calls:

``payload = router.sync_payload()``
    Every DSYNC: the SYNC message body. Keys are 64-bit key ids (``KeyCodec``: identical on every
    router), Q rows are lists of ``n`` floats::

        {"version": 1,
         "qtable": {key_id: [q_0, ..., q_{n-1}], ...},   # local rows of hot keys
         "weights": {key_id: tuples_rewarded_since_last_sync, ...},
         "records": int,                                  # tuples routed since the last sync
         "top_keys": [[key_id, count], ...],              # the n most frequent keys since the last sync*
         "request_double": bool,                          # previous SYNC still unanswered: double DSYNC
         "stats_window": int,                             # the router's statistics window index
         "scope": {"first": int, "last": int, "records": int, "keys": [[key_id, count], ...],
                   "loads": [int, ...], "scopes": int, "behind": bool}}  # plan_together: last closed scopes

    The router enters AWAIT: it keeps routing and learning locally, and buffers every reward.
    (*) counted exactly for every key the router still remembers (in the sliding window, the statistics
    window or the Q-table); a key forgotten since has too few tuples to be among the top n.

``router.apply_global(message)``
    The reducer's GLOBAL answer::

        {"qtable": {key_id: [q...]},   # global rows: replace the local ones (new keys become hot)
         "hot": [key_id, ...],          # globally hot keys (f > GL / n): hot through the next window
         "expire": [key_id, ...],       # keys to drop from the Q-table now
         "global_load": int,            # GL: becomes the load estimate of the L / n threshold
         "members": int}                # routers in the round (the port adds it; missing: 2)

    A router configured alone (``routers: 1``) whose round lists it alone stays a router alone: its own
    placement and plan, no shared sets or first-choice rule (they would be its own). One whose round lists
    peers cooperates from then on. A router whose keys are its own under sticky placement
    (``raw_keys=partitioned``: no peer sees them) takes nothing from a GLOBAL but the end of AWAIT: its
    peers' sets, rule, hot keys and load are about keys it never routes, and it balances its own tuples.
    With ``plan_together`` it also takes ``peer_scopes`` (the other members' ``scope`` reports, which the
    reducer puts in the GLOBAL) and plans the combiners' load with them (:mod:`.joint`); a merge does the
    same with the peers' snapshots.

    Every field is optional. The buffered rewards are then replayed (Eq. 5) onto the global rows and the
    router returns to PREPARE. A router that never gets an answer keeps routing correctly (local learning).
    Deviation from Algorithm 2, on purpose: during AWAIT the local table keeps learning (else a hot key's
    greedy choice is frozen until the answer and piles onto one combiner); the global table replaces it
    on arrival, so the end result is the paper's.

``router.leave_await()``
    No GLOBAL came (the sync node gives up after a few DSYNCs, or the buffer reached
    :data:`MAX_BUFFER` rewards): drop the buffer and return to PREPARE. Nothing is lost for routing: the
    local table learned those rewards already; only their replay onto a global table is skipped.

``router.merge(peer_states)``
    In-process cooperative learning from :class:`PartitionerState` snapshots: the Q-table becomes the
    frequency-weighted average (:func:`~.bandit.weighted_average`) of this router's and the peers' rows;
    keys only peers know become hot here. Independent of the order of the peers. A router whose keys are
    its own (see ``apply_global``) checks the peers' states and keeps its own.

Sticky placement (the default). What routers share is where their split and hot keys are in the current
scope (micro-batch): the SYNC's ``qtable`` row of such a key is its combiner set in the sender's current
scope (``1.0`` for a combiner holding it, ``0.0`` otherwise), weighted by the key's tuples. The reducer
averages rows as usual, so a combiner with a positive global value holds the key on some router. A router
applying the GLOBAL (or merging peers' snapshots) treats those combiners as holding the key for the rest of
its scope: the key fills them before it reaches another one, so P routers converge on one set per key
instead of P. Keys not shared follow the probe order of :mod:`.sticky`, the same on every router. The
per-combiner shares of the tail's first choice travel as the row of the pseudo key :data:`ACCEPT_KEY`
(listed in ``top_keys`` with the sender's records, so the reducer keeps it): each router sends its own fit,
made when its scope started, and the reducer's average becomes every router's first-choice rule for the whole
next scope. A rule that changed when a GLOBAL arrived, or that differed between routers until then, put keys
that several routers see on different combiners within one scope (BENCHMARKS.md, "Cooperating routers agree
on the tail's rule for a whole scope").

A reducer averages ``qtable`` rows with the ``weights`` as weights (:func:`~.bandit.weighted_average`
is the reference; it weights every contribution, unlike the reference code's first SYNC) and computes
``GL = sum(records)`` and the hot keys from the summed ``top_keys`` counts (a key once per router).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from router.partitioners.base import PartitionerState
from router.partitioners.dalton.bandit import QRow, QTable, weighted_average
from router.partitioners.dalton.joint import NO_REPORT, Report


class Learner(Protocol):
    """What the sync hooks use of a Dalton partitioner (so this module does not import the partitioner)."""

    name: ClassVar[str]
    n: Any
    cfg: Any
    stats: Any
    win: Any
    slots: Any
    qtable: Any
    buffer: Any
    awaiting: Any
    cooperative: Any
    last_global_block: Any
    records_since_sync: Any
    sync_counts: Any
    placement: Any
    shared_ids: Any
    shared_rows: Any
    shared_block: Any
    sync_block: Any
    fit: Any
    next_accept: Any
    scope_report: Any
    plan_together: Any

    def plan_with(self, peers: Sequence[Report] | None, own: Report | None = None) -> None:
        """Plan the combiners' load with the peers' reports and its own as they have it (``None``: no peers)."""
        ...

    @property
    def independent(self) -> bool:
        """Its keys are its own: it takes nothing from peers (see the module doc)."""
        ...

    def flush_sync_counts(self) -> None:
        """Add the pending per-segment counts to the sync counts."""
        ...


__all__ = [
    "ACCEPT_KEY",
    "MAX_BUFFER",
    "PAYLOAD_VERSION",
    "apply_global",
    "leave_await",
    "make_payload",
    "merge_states",
    "report_of",
    "scope_sets",
    "share",
]

PAYLOAD_VERSION = 1
#: Sticky placement: the pseudo key id whose Q-row carries a router's fitted first-choice shares (a real key's
#: 64-bit id is a murmur3 hash: it is not expected to be 0).
ACCEPT_KEY = 0
#: Most rewards buffered in AWAIT (one per bandit decision, not per tuple): then AWAIT is left.
MAX_BUFFER = 100_000


def make_payload(p: Learner) -> dict[str, Any]:
    """Build the SYNC body and reset the since-last-sync counters (see the module doc)."""
    p.flush_sync_counts()
    counts = p.sync_counts
    seen = np.flatnonzero(counts > 0)
    ids = p.slots.ids[seen]
    order = np.lexsort((ids, -counts[seen]))[: p.n]  # by count, ties by id: deterministic
    top = [[int(k), int(c)] for k, c in zip(ids[order].tolist(), counts[seen][order].tolist(), strict=True)]
    rows = p.qtable.rows
    if p.placement == "sticky":
        sets = scope_sets(p)
        table = {k: [float(x) for x in row] for k, row in sets.items()}
        weights = {k: int(counts[p.slots.slot(k)]) if p.slots.slot(k) >= 0 else 0 for k in sets}
        if p.n > 1 and p.records_since_sync > 0:  # the fitted first-choice shares, averaged by the reducer
            table[ACCEPT_KEY] = [float(x) for x in p.fit]
            weights[ACCEPT_KEY] = int(p.records_since_sync)
            top = [*top, [ACCEPT_KEY, int(p.records_since_sync)]]  # counted over GL / n: the reducer keeps it
    else:
        table = {k: list(r.q) for k, r in rows.items()}
        weights = {k: r.weight for k, r in rows.items()}
    payload = {
        "version": PAYLOAD_VERSION,
        "qtable": table,
        "weights": weights,
        "records": p.records_since_sync,
        "top_keys": top,
        "request_double": p.awaiting,
        "stats_window": p.stats.index,
    }
    if p.independent and p.plan_together:  # its last closed scopes: such routers plan together (apply_global)
        report = p.scope_report
        payload["scope"] = {
            "first": int(report.first),
            "last": int(report.last),
            "records": int(report.records),
            "keys": [[int(k), int(c)] for k, c in sorted(report.keys.items())],
            "loads": [int(x) for x in report.loads],
            "scopes": int(report.scopes),
            "behind": bool(report.behind),
        }
    counts[seen] = 0
    p.records_since_sync = 0
    for r in rows.values():
        r.weight = 0
    p.awaiting = True
    p.sync_block = p.win.block
    return payload


class Scoped(Protocol):
    """What :func:`scope_sets` reads: the window (its head is the scope), the slots and the Q-table."""

    win: Any
    slots: Any
    qtable: Any


def scope_sets(p: Scoped) -> dict[int, list[bool]]:
    """Combiner set in the current scope of every hot key and every key held by more than one combiner."""
    head = p.win.head
    split = np.flatnonzero(head.sum(axis=1) > 1) if not p.win.head_empty else np.zeros(0, dtype=np.intp)
    slots = set(split.tolist())
    for key in p.qtable.rows:
        slot = p.slots.slot(key)
        if slot >= 0 and not p.win.head_empty and head[slot].any():
            slots.add(slot)
    used = [s for s in sorted(slots) if p.slots.used[s]]
    return {int(p.slots.ids[s]): head[s].tolist() for s in used}


def share(p: Learner, sets: Mapping[int, Sequence[bool]]) -> None:
    """Combiners holding keys on other routers in the current scope: sticky placement fills them first."""
    if not sets:
        return
    merged: dict[int, np.ndarray] = {}
    if p.shared_block == p.win.block:  # earlier shares of this scope still hold
        merged = {int(k): row.copy() for k, row in zip(p.shared_ids.tolist(), p.shared_rows, strict=True)}
    for key, row in sets.items():
        bits = np.asarray(row, dtype=bool)
        if bits.shape[0] != p.n:
            raise ValueError(f"combiner set of key {key} has {bits.shape[0]} entries, expected n={p.n}")
        merged[int(key)] = merged[int(key)] | bits if int(key) in merged else bits
    ids = np.asarray(sorted(merged), dtype=np.uint64)
    p.shared_ids = ids
    p.shared_rows = np.asarray([merged[int(k)] for k in ids.tolist()], dtype=bool).reshape(-1, p.n)
    p.shared_block = p.win.block


def _row(values: Sequence[float], n: int, key: int) -> list[float]:
    row = [float(v) for v in values]
    if len(row) != n:
        raise ValueError(f"Q row of key {key} has {len(row)} values, expected n={n}")
    return row


def apply_global(p: Learner, message: Mapping[str, Any]) -> None:
    """Apply a GLOBAL message and replay the buffered rewards (see the module doc).

    ``members`` (optional; the routers whose SYNCs the round counted): a router alone in it, and configured
    as the only one (``routers: 1``), stays a router alone and keeps its own placement (see the module doc).
    """
    if p.independent:  # its keys are its own: it plans with its peers' loads only (see the module doc)
        _plan_together(p, message)
        leave_await(p)
        p.last_global_block = p.win.block
        return
    table = p.qtable
    if int(message.get("members", 2)) > 1:
        p.cooperative = True  # peers route this route's keys: the tail takes the rule every router shares
    if p.placement == "sticky":  # rows are combiner sets: positive where some router holds the key
        rows = {int(k): _row(vals, p.n, int(k)) for k, vals in dict(message.get("qtable", {})).items()}
        accept = rows.pop(ACCEPT_KEY, None)
        sets = {k: [v > 0 for v in vals] for k, vals in rows.items()}
        # sets (and fits) of an earlier scope are not shared; a router alone would get its own back
        if p.cooperative and p.sync_block == p.win.block:
            share(p, sets)
            if accept is not None:  # the routers' rule from the next scope on (see the module doc)
                p.next_accept = np.clip(np.asarray(accept, dtype=np.float64), 0.0, 1.0)
        hot = [k for k in message.get("hot", ()) if int(k) != ACCEPT_KEY]
        message = {**message, "qtable": {}, "hot": hot}
    window = max(p.stats.index, 0)
    for key in message.get("expire", ()):
        table.rows.pop(int(key), None)
    for key, values in dict(message.get("qtable", {})).items():
        k = int(key)
        row = table.rows.get(k)
        if row is None:
            table.rows[k] = QRow(_row(values, p.n, k), window + 1)
        else:
            row.q = _row(values, p.n, k)
    for key in message.get("hot", ()):
        table.mark_hot(int(key), window)
    if message.get("global_load") is not None:
        p.stats.prev_load = int(message["global_load"])
    table.replay(p.buffer, p.cfg.gamma)
    p.buffer = []
    p.awaiting = False
    p.last_global_block = p.win.block


def _plan_together(p: Learner, message: Mapping[str, Any]) -> None:
    """A router owning its keys: plan the combiners' load with the round's other members (:mod:`.joint`).

    ``peer_scopes``: the reports of every other member of the round; ``own_scope``: this router's as the round
    has it (every member decides on the same reports). Alone in the round it balances its own tuples; a round
    that lacks a member's report (its own included: a peer of an earlier release, or one that closed no scope
    yet) keeps the last plan.
    """
    members = int(message.get("members", 2))
    if members <= 1:
        p.plan_with(None)
        return
    peers = [report_of(body) for body in message.get("peer_scopes", ())]
    own = message.get("own_scope")
    if own is not None and len(peers) >= members - 1:
        p.plan_with(peers, report_of(own))


def report_of(body: Mapping[str, Any]) -> Report:
    """A :class:`~.joint.Report` from a SYNC's ``scope`` body (see :func:`make_payload`)."""
    keys = {int(k): float(c) for k, c in body.get("keys", ())}
    loads = tuple(float(x) for x in body.get("loads", ()))
    scopes, behind = int(body.get("scopes", 1)), bool(body.get("behind", False))
    return Report(int(body["first"]), int(body["last"]), float(body["records"]), keys, loads, scopes, behind)


def leave_await(p: Learner) -> None:
    """Leave AWAIT without a GLOBAL: drop the buffered rewards, route with the local table."""
    p.buffer = []
    p.awaiting = False


def merge_states(p: Learner, peers: Sequence[PartitionerState]) -> None:
    """Average this router's Q-table with the peers' (weighted by key frequency, order-independent)."""
    loaded = [_peer_state(p, state) for state in peers]  # checked whatever this router does with them
    if p.independent:  # its keys are its own: it plans with the peers' loads only (see the module doc)
        _plan_with_states(p, loaded)
        return
    contributions: dict[int, list[tuple[float, list[float]]]] = {}
    tables = [p.qtable]
    accepts: list[Any] = []
    for peer in loaded:
        tables.append(peer["qtable"])
        accepts.append(peer.get("fit"))
        win = peer.get("win")
        if p.placement == "sticky" and win is not None and win.block == p.win.block:
            share(p, scope_sets(_PeerView(peer)))
    if p.placement == "sticky" and peers:
        p.cooperative = True  # peers route the same keys: the tail takes the rule every router shares
        fits = [np.asarray(p.fit)] + [np.asarray(a) for a in accepts if a is not None]
        if all(f.shape == (p.n,) for f in fits):  # the next scope's first-choice rule: the mean of the fits
            p.next_accept = np.sort(np.stack(fits), axis=0).mean(axis=0)
    for table in tables:
        for key, row in table.rows.items():
            contributions.setdefault(key, []).append((float(row.weight), list(row.q)))
    window = max(p.stats.index, 0)
    for key, q in weighted_average(contributions).items():
        mine = p.qtable.rows.get(key)
        if mine is None:
            p.qtable.rows[key] = QRow(q, window + 1)
        else:
            mine.q = q


def _peer_state(p: Learner, state: PartitionerState) -> dict[str, Any]:
    """A peer's unpickled state; :class:`ValueError` unless it is a Dalton state with this router's ``n``."""
    if state.name != p.name or state.params.get("n") != p.n:
        raise ValueError(f"cannot merge state of {state.name!r} n={state.params.get('n')} into dalton n={p.n}")
    peer: dict[str, Any] = pickle.loads(state.data)
    if not isinstance(peer.get("qtable"), QTable):
        raise ValueError("peer state holds no Dalton Q-table")
    return peer


def _plan_with_states(p: Learner, peers: Sequence[Mapping[str, Any]]) -> None:
    """In process, a router owning its keys plans with its peers' snapshots as with a sync round."""
    if peers:
        p.plan_with([peer.get("scope_report", NO_REPORT) for peer in peers])


class _PeerView:
    """The attributes :func:`scope_sets` reads, from a peer's unpickled state."""

    def __init__(self, state: Mapping[str, Any]) -> None:
        self.win = state["win"]
        self.slots = state["slots"]
        self.qtable = state["qtable"]
