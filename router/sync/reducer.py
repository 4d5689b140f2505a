"""The QtableReducer (Dalton Sec. 4.1): one round = one SYNC from every live router -> one GLOBAL.

Per round the reducer computes, from the SYNC messages of all live routers:

- the global load ``GL = sum(records)``;
- the globally hot keys: ``f(k) > GL / n`` with ``f(k)`` the sum of the routers' top-n counts (a router's
  local heavy hitters include every global one, Theorem 3.4); a hot key stays valid through the next round;
- the global Q-table: per valid key, the average of the routers' rows weighted by each router's tuples
  rewarded for that key (``bandit.weighted_average``: every contribution weighted, order-independent; a
  router that did not see the key does not dilute it). Keys in some router's table that are not valid
  are *expired* (locally frequent but globally cold keys are not split, Sec. 4.1's third property);
- DSYNC: doubled when a router asks (its previous reply was still pending at its next sync), halved when
  the reducer's idle time in the round exceeded its processing time of the previous round; bounded. Beyond
  the paper: a round whose SYNCs carried no records (every router idle) sets DSYNC to the configured one
  (:attr:`DsyncPolicy.rest`), from below or from above (doublings asked during a slow start are not kept
  through idle rounds). An idle reducer is not spare capacity worth spending there: with nothing routed
  there is nothing to learn, and idle routers at the floor (a quarter of the configured DSYNC) each sent four
  SYNCs a second and read the replies (BENCHMARKS.md, "Idle Dalton routers"). Routing resumes at the
  configured DSYNC and halves from there, as at start.

The reducer is pure (no clock, no transport): :class:`~router.sync.node.SyncNode` feeds it and decides
when it runs. Followers keep the same pending SYNCs and align with every GLOBAL they observe, so the
next elected reducer continues the rounds where a dead one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

from router.partitioners.dalton.bandit import weighted_average
from schemas.control import GlobalMessage, SyncMessage

__all__ = ["DsyncPolicy", "QtableReducer", "RoundInputs"]


@dataclass(frozen=True)
class DsyncPolicy:
    """Bounds of the adaptive sync interval (same clock as the transport)."""

    minimum: float
    maximum: float
    rest: float | None = None  # a round that carried no records sets DSYNC to this

    def __post_init__(self) -> None:
        if not 0 < self.minimum <= self.maximum:
            raise ValueError(f"need 0 < minimum <= maximum, got {self.minimum!r}, {self.maximum!r}")
        if self.rest is not None and not self.minimum <= self.rest <= self.maximum:
            raise ValueError(
                f"need minimum <= rest <= maximum, got {self.rest!r} for [{self.minimum!r}, {self.maximum!r}]"
            )

    @classmethod
    def around(cls, initial: float, below: float = 4.0, above: float = 16.0) -> DsyncPolicy:
        """Bounds ``[initial / below, initial * above]``; an empty round returns to ``initial``."""
        return cls(initial / below, initial * above, rest=initial)

    def adapt(
        self, dsync: float, double: bool, idle: float | None, processing: float | None, *, records: int | None = None
    ) -> float:
        """The next DSYNC, within the bounds.

        Doubled on request, else ``rest`` after a round of no ``records``, else halved if idle > processing.
        """
        if double:
            return min(2 * dsync, self.maximum)
        if records == 0 and self.rest is not None:
            return self.rest
        if idle is not None and processing is not None and idle > processing:
            return max(dsync / 2, self.minimum)
        return min(max(dsync, self.minimum), self.maximum)


@dataclass(frozen=True)
class RoundInputs:
    """What one round aggregates (for tests and logs)."""

    members: tuple[str, ...]
    global_load: int
    counts: dict[str, int]


class QtableReducer:
    """Round state of one route's reducer; every node keeps one (only the elected one builds rounds)."""

    def __init__(
        self,
        *,
        deployment: str,
        route: str,
        combiners: int,
        dsync: float,
        policy: DsyncPolicy,
        fingerprint: str = "",
        miss_limit: int = 3,
        max_per_member: int = 8,
        max_members: int = 1024,
    ) -> None:
        if combiners < 1:
            raise ValueError(f"combiners must be >= 1, got {combiners!r}")
        for name, value in (("miss_limit", miss_limit), ("max_per_member", max_per_member)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        self.deployment, self.route, self.n = deployment, route, combiners
        self.policy = policy
        self.fingerprint = fingerprint
        self.miss_limit, self.max_per_member, self.max_members = miss_limit, max_per_member, max_members
        self.pending_since: float | None = None  # arrival of the oldest SYNC of the open round
        self.missed: dict[str, int] = {}  # live member -> rounds closed without it in a row
        self.merged = 0  # SYNCs folded into a later one (a member over max_per_member)
        self.refused = 0  # SYNCs of new members refused (over max_members)
        self.dsync = float(dsync)
        self.round = -1
        self.published = -1  # the last round seen on the control topic (built rounds may wait in an outbox)
        self.pending: dict[str, list[SyncMessage]] = {}
        self.inflight: dict[str, list[SyncMessage]] = {}  # closed by another node's reducer, GLOBAL not seen yet
        self.inflight_since: float | None = None
        self.inflight_reducer: str | None = None
        self.hot_until: dict[str, int] = {}
        self.last_emit: float | None = None
        self.last_processing: float | None = None
        self.rounds_built = 0

    # -- input ---------------------------------------------------------------------------------
    def add(self, msg: SyncMessage, now: float = 0.0) -> bool:
        """Queue a SYNC for the next round (a router may send several before the round closes).

        Bounded: a member keeps at most ``max_per_member`` SYNCs (the oldest is folded into the next:
        its records still count, its rows are older than the next one's anyway), and at most
        ``max_members`` members are pending at once (``False``: refused).
        """
        queue = self.pending.get(msg.instance)
        if queue is None:
            if len(self.pending) >= self.max_members:
                self.refused += 1
                return False
            queue = self.pending[msg.instance] = []
        queue.append(msg)
        self._cap(queue)
        if self.pending_since is None:
            self.pending_since = now
        return True

    def _cap(self, queue: list[SyncMessage]) -> None:
        while len(queue) > self.max_per_member:  # fold the oldest into the next (its records still count)
            first = queue.pop(0)
            queue[0] = queue[0].model_copy(update={"records": queue[0].records + first.records})
            self.merged += 1

    def pending_syncs(self) -> int:
        """SYNC messages held (open round and rounds closed elsewhere)."""
        return sum(map(len, self.pending.values())) + sum(map(len, self.inflight.values()))

    def round_set(self, live: set[str]) -> set[str]:
        """The live members a round waits for: not those missing from ``miss_limit`` rounds in a row."""
        return {i for i in live if self.missed.get(i, 0) < self.miss_limit}

    def closable(self, wait_for: set[str], now: float, deadline: float) -> str | None:
        """Whether the open round closes now: ``"complete"``, ``"deadline"`` or ``None``.

        ``"complete"``: every member waited for has reported; ``"deadline"``: the open round's first SYNC
        arrived ``deadline`` ago (close with whoever reported).

        Rounds are keyed by the round each SYNC follows (``after_round``: the last GLOBAL its sender had
        applied), not by the senders' clocks: a member has reported for the open round once a SYNC sent
        after the previous GLOBAL is pending (a SYNC that missed its round joins the next one but does
        not count as that round's report). Clock skew between workers changes nothing.
        """
        if not self.pending:
            return None
        if wait_for <= self.fresh(inflight=False):
            return "complete"
        if self.pending_since is not None and now - self.pending_since >= deadline:
            return "deadline"
        return None

    def is_fresh(self, msg: SyncMessage) -> bool:
        """Whether ``msg`` was sent after its sender applied the last round seen on the topic (or any)."""
        return msg.after_round < 0 or msg.after_round >= self.published

    def fresh(self, upto: dict[str, int] | None = None, *, inflight: bool = True) -> set[str]:
        """Members with a fresh SYNC held (``upto``: only SYNCs up to these seqs, only these members).

        ``inflight``: count SYNCs of rounds closed elsewhere too (else only the open round's).
        """
        out: set[str] = set()
        for table in (self.pending, self.inflight) if inflight else (self.pending,):
            for inst, msgs in table.items():
                limit = None if upto is None else upto.get(inst)
                if upto is not None and limit is None:
                    continue
                if any(self.is_fresh(m) and (limit is None or m.seq <= limit) for m in msgs):
                    out.add(inst)
        return out

    def _count_missed(self, fresh: set[str], live: set[str] | None) -> None:
        if live is None:
            return
        self.missed = {i: 0 if i in fresh else self.missed.get(i, 0) + 1 for i in live}

    def observe(self, msg: GlobalMessage, now: float, *, own: bool, live: set[str] | None = None) -> None:
        """Align with a GLOBAL seen on the control topic (``own``: this node sent it).

        ``live``: the live members now (their missed-round counts are updated from the GLOBAL's members).
        """
        fresh = self.fresh(msg.seqs) if msg.round >= self.round else set()
        for table in (self.pending, self.inflight):
            for inst, seq in msg.seqs.items():
                kept = [m for m in table.get(inst, ()) if m.seq > seq]
                if kept:
                    table[inst] = kept
                else:
                    table.pop(inst, None)
        if msg.round >= self.round and self.inflight:  # not in this round: they join the next one
            self.reclaim()
        if not self.inflight:
            self.inflight_since = None
        if not self.pending:
            self.pending_since = None
        elif self.pending_since is None:
            self.pending_since = now
        self.published = max(self.published, msg.round)
        if msg.round < self.round:
            return
        self._count_missed(fresh, live)
        self.round = msg.round
        self.dsync = float(msg.dsync_ms)
        self.hot_until = {k: u for k, u in self.hot_until.items() if u >= msg.round}  # bounded by live rounds
        for k in msg.hot_keys:
            self.hot_until[k] = msg.round + 1
        for k in msg.expired:
            self.hot_until.pop(k, None)
        if not own:
            self.last_emit = now

    def close_elsewhere(self, now: float, reducer: str | None) -> None:
        """Another node's reducer closes the pending round now (same log position): await its GLOBAL.

        Keeps this node from closing the same SYNCs into a duplicate round if it becomes the reducer
        before that GLOBAL arrives.
        """
        for inst, msgs in self.pending.items():
            queue = self.inflight.setdefault(inst, [])
            queue.extend(msgs)
            self._cap(queue)
        self.pending = {}
        self.pending_since = None
        if self.inflight_since is None:
            self.inflight_since = now
        self.inflight_reducer = reducer

    def reclaim(self) -> None:
        """The round closed elsewhere will not be answered (its reducer died): include it in the next one."""
        for inst, msgs in self.inflight.items():
            self.pending[inst] = sorted([*msgs, *self.pending.get(inst, ())], key=lambda m: m.seq)
            self._cap(self.pending[inst])
        if self.inflight and self.pending_since is None:
            self.pending_since = self.inflight_since
        self.inflight = {}
        self.inflight_since = None

    def inputs(self) -> RoundInputs:
        """The pending round's members, GL and summed top-key counts."""
        counts: dict[str, int] = {}
        load = 0
        for msgs in self.pending.values():
            for m in msgs:
                load += m.records
                seen: dict[str, int] = {}
                for k, c in m.top_keys:  # a key once per SYNC (the reference code can list it twice)
                    seen[k] = max(seen.get(k, 0), c)
                for k, c in seen.items():
                    counts[k] = counts.get(k, 0) + c
        return RoundInputs(tuple(sorted(self.pending)), load, counts)

    # -- a round -------------------------------------------------------------------------------
    def build(self, now: float, reducer: str, live: set[str] | None = None) -> GlobalMessage:
        """Close the pending round: global Q-table, hot keys, expirations, GL, next DSYNC.

        ``live``: the live members (who is missing from this round is counted, see :meth:`round_set`).
        """
        inp = self.inputs()
        fresh = self.fresh(inflight=False)
        r = self.round + 1
        threshold = inp.global_load / self.n
        hot = {k: c for k, c in inp.counts.items() if inp.global_load > 0 and c > threshold}
        for k in hot:
            self.hot_until[k] = r + 1
        valid = {k for k, until in self.hot_until.items() if until >= r}
        contributions: dict[int, list[tuple[float, list[float]]]] = {}
        in_tables: set[str] = set()
        double = False
        seqs: dict[str, int] = {}
        scopes = {}
        for inst in inp.members:
            msgs = self.pending[inst]
            seqs[inst] = max(m.seq for m in msgs)
            reported = [m for m in msgs if m.scope is not None]
            if reported:  # the latest report: a member's last closed scopes (routers that own their keys)
                scope = max(reported, key=lambda m: m.seq).scope
                if scope is not None:
                    scopes[inst] = scope
            double |= any(m.double for m in msgs)
            rows: dict[str, list[float]] = {}
            weights: dict[str, int] = {}
            for m in msgs:  # the latest row holds the earlier learning; weights add up
                for k, row in m.q_table.items():
                    if len(row) == self.n:
                        rows[k] = list(row)
                        weights[k] = weights.get(k, 0) + m.weights.get(k, 0)
            in_tables |= set(rows)
            for k, row in rows.items():
                if k in valid:
                    contributions.setdefault(int(k), []).append((float(weights[k]), row))
        q = weighted_average(contributions)
        expired = sorted((in_tables | set(self.hot_until)) - valid, key=int)
        for k in expired:
            self.hot_until.pop(k, None)
        idle = None if self.last_emit is None else max(0.0, now - self.last_emit)
        new_dsync = self.policy.adapt(self.dsync, double, idle, self.last_processing, records=inp.global_load)
        msg = GlobalMessage(
            deployment=self.deployment,
            route=self.route,
            combiners=self.n,
            reducer=reducer,
            round=r,
            fingerprint=self.fingerprint,
            q_table={str(k): [round(x, 6) for x in row] for k, row in q.items()},
            hot_keys=dict(sorted(hot.items(), key=lambda kv: int(kv[0]))),
            expired=expired,
            global_load=inp.global_load,
            dsync_ms=max(1, round(new_dsync)),
            members=list(inp.members),
            seqs=seqs,
            scopes=scopes,
            processing_ms=max(0.0, self.last_processing or 0.0),
            idle_ms=idle or 0.0,
        )
        self.pending = {}
        self.pending_since = None
        self._count_missed(fresh, live)
        self.round = r
        self.dsync = float(msg.dsync_ms)
        self.rounds_built += 1
        return msg

    def emitted(self, ready: float, at: float) -> None:
        """The round that became ready at ``ready`` was sent at ``at`` (its processing time)."""
        self.last_processing = max(0.0, at - ready)
        self.last_emit = at
