"""Routers that own their keys, planned together: what each expects the others to load per combiner.

Routers reading a raw topic partitioned by the routing key (``raw_keys=partitioned``) each see only their own
keys. Each balancing its own tuples keeps the combiners' sums balanced, but at a price: a key that is large
for its router is split over as many combiners as that router's share of the tuples needs, not as the sum
needs. With four routers and a key of 40 % of all tuples, its router (half of the tuples) spreads it over
seven of eight combiners, where three and a third combiners' worth is all it holds.

So the routers plan the sum together. Each reports its last few closed scopes (slides of event time) in its
SYNCs (:class:`Report`: its tuples, its keys of at least its own mean with their tuples, its load per
combiner); the round's GLOBAL carries every member's report, and each router plans on them
(:func:`joint_plan`). Scopes, not the tuples routed between two SYNCs: under a backlog each router reads as
fast as it can, so the tuples routed per second say nothing of a router's share of an event-time slide.
Every router computes the same plan:

1. the large keys (above the routers' mean per combiner), largest first (ties by key id), each fill the least
   loaded combiners to the mean;
2. the room left on each combiner goes to the routers' other tuples, each router's in proportion to them.

A router's share per combiner is its large keys' part plus its share of the room; the other routers' expected
load is the mean minus it. The placement counts that load on every combiner, per tuple of this router, in step
with its own tuples (:mod:`.sticky_segment`), so the router fills around the others' large keys and its own
large keys reach the combiners the sum leaves them.

Such a plan is open-loop: a router trusts the others to put there what the plan says, and the others' load is
several times its own. Counts that are off by 1.5 % (a few scopes' noise) made the sum's max/mean 1.036 where
the exact counts gave 1.029 (in process, four routers, Zipf 1.5, n = 8), and where many keys are large for the
sum (Zipf 1.2 over 1,000 keys, n = 32) the routers' placements did not follow the plan and the sum's max/mean
was 1.2. So the reports also carry each router's load per combiner in its last scope. When every router's last scope is
the same planned one and their sum (:func:`imbalance`) is over ``1 + FALLBACK * balance`` times its mean
(:func:`off_balance`), the planning ends, and each router balances its own tuples again. (Correcting the plan
by the sum's measured imbalance instead, half of it per round, made the sum worse: max/mean 1.060 per slide on
average, up to 1.14, where the plan alone gave 1.042, up to 1.08; four routers through the sync protocol, Zipf
2.0, n = 8.)

Every router decides on the same reports, its own as the GLOBAL carries it (the one it sent), so all take the
same plan, from the same scope, and stop together. A plan holds from a scope two after the latest reported
(:func:`start_scope`), the same on every router: a
router switching when the GLOBAL arrives would place its keys against others still on the old plan, since
under a backlog the routers are at different scopes. A plan that changes little is not taken
(:data:`REPLAN`): each new one moves keys between combiners.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "FALLBACK",
    "IN_STEP",
    "NO_REPORT",
    "REPLAN",
    "REPORT_SCOPES",
    "Report",
    "added_up",
    "changed",
    "imbalance",
    "in_step",
    "joint_plan",
    "off_balance",
    "others_per_tuple",
    "scope_report",
    "start_scope",
    "take_plan",
]

F64 = npt.NDArray[np.float64]
#: A router reports its last this many closed scopes added up: one scope's counts are noisy (a few thousand
#: tuples per router), and each new plan moves keys between combiners.
REPORT_SCOPES = 8
#: A new plan is taken when it moves at least this share of the others' expected load (else the last one stays).
REPLAN = 0.02
#: A plan whose scopes summed to over ``1 + FALLBACK * balance`` times the mean is given up (see the module doc).
FALLBACK = 5.0
#: Routers plan together only while their last reported scopes are at most this many apart (in step).
IN_STEP = 3


@dataclass(frozen=True)
class Report:
    """One router's closed scopes ``first..last``: its tuples, its large keys' tuples and its load per combiner.

    ``keys`` holds the keys of at least ``records / n`` tuples in some scope: a key above the routers' mean
    ``total / n`` is above this router's ``own / n``, so they are all that can be large for the sum.
    ``scopes``: how many scopes are added up; ``loads``: the last scope's tuples per combiner; ``behind``: the
    router was catching up when its last scope closed.
    """

    first: int
    last: int
    records: float
    keys: Mapping[int, float] = field(default_factory=dict)
    loads: tuple[float, ...] = ()
    scopes: int = 1
    behind: bool = False

    def per_scope(self) -> Report:
        """The same report per scope (routers report different numbers of scopes, e.g. after a start)."""
        k = max(self.scopes, 1)
        keys = {key: c / k for key, c in self.keys.items()}
        return Report(self.first, self.last, self.records / k, keys, self.loads, 1, self.behind)


#: No report yet.
NO_REPORT = Report(-1, -1, 0.0, scopes=0)


def scope_report(
    n: int, block: int, ids: npt.NDArray[np.uint64], counts: F64, loads: npt.ArrayLike, behind: bool = False
) -> Report:
    """A router's report of closed scope ``block`` from its keys' tuples in it and its load per combiner."""
    total = float(counts.sum())
    big = counts >= total / max(n, 1)
    keys = dict(zip(ids[big].tolist(), counts[big].tolist(), strict=True))
    return Report(block, block, total, keys, tuple(float(x) for x in np.asarray(loads, dtype=np.float64)), 1, behind)


def added_up(reports: Sequence[Report]) -> Report:
    """Several closed scopes of one router as one report: their span, tuples and keys added up, the last one's loads."""
    keys: dict[int, float] = {}
    for r in reports:
        for k, c in r.keys.items():
            keys[k] = keys.get(k, 0.0) + c
    latest = max(reports, key=lambda r: r.last)
    return Report(min(r.first for r in reports), latest.last, sum(r.records for r in reports), keys, latest.loads,
                  sum(r.scopes for r in reports), latest.behind)  # fmt: skip


def changed(old: F64, new: F64) -> bool:
    """Whether plan ``new`` moves at least :data:`REPLAN` of the others' expected load of plan ``old``."""
    scale = max(float(old.sum()), float(new.sum()))
    return scale > 0 and float(np.abs(new - old).sum()) >= REPLAN * scale


def in_step(reports: Sequence[Report]) -> bool:
    """Whether the routers route the same slides of event time, within :data:`IN_STEP` scopes, and none catches up.

    Live, they do. Catching up on a backlog each reads its own partitions at its own pace: a router with a
    small share of the keys runs scopes ahead of one holding the hot keys, and the scopes a plan holds from
    come to them far apart in time; the plan's premise, that the others' tuples arrive in step with this
    router's, does not hold, and each router balances its own tuples instead.
    """
    lasts = [r.last for r in reports]
    return max(lasts) - min(lasts) <= IN_STEP and not any(r.behind for r in reports)


def start_scope(reports: Sequence[Report]) -> int:
    """The scope from which a plan made on ``reports`` holds: two after the latest scope reported."""
    return max(r.last for r in reports) + 2


def joint_plan(n: int, own: Report, peers: Sequence[Report]) -> F64:
    """The others' expected load per tuple of this router, from its report and every peer's (see the module doc)."""
    own, peers = own.per_scope(), [r.per_scope() for r in peers]
    total = own.records + sum(r.records for r in peers)
    summed: dict[int, float] = {}
    for r in (own, *peers):
        for k, c in r.keys.items():
            summed[int(k)] = summed.get(int(k), 0.0) + float(c)
    large = {k: c for k, c in summed.items() if total > 0 and c > total / n}
    return others_per_tuple(n, total, own.records, large, {int(k) for k in own.keys} & set(large))


def imbalance(reports: Sequence[Report], since: int) -> F64 | None:
    """The routers' last scope, summed: each combiner's share of its tuples minus ``1 / n``.

    ``None`` unless every router's last scope is the same one, from ``since`` on (a router's own load is uneven by
    plan: only the same scope's loads add up to the sum), and every report has the loads of ``n`` combiners.
    """
    if len({r.last for r in reports}) > 1 or reports[0].last < since:
        return None
    if any(not r.loads for r in reports) or len({len(r.loads) for r in reports}) > 1:
        return None
    sums = np.sum([np.asarray(r.loads, dtype=np.float64) for r in reports], axis=0)
    return sums / sums.sum() - 1.0 / sums.shape[0] if sums.sum() > 0 else None


def off_balance(share: F64, balance: float) -> bool:
    """Whether a sum whose :func:`imbalance` is ``share`` is over ``1 + FALLBACK * balance`` times its mean."""
    return bool(share.max() * share.shape[0] > FALLBACK * balance)


def others_per_tuple(n: int, total: float, own: float, large: Mapping[int, float], mine: set[int]) -> F64:
    """Per combiner, the other routers' expected tuples per tuple of this router (see the module doc).

    ``total``: the tuples all routers routed; ``own``: this router's; ``large``: the keys above ``total / n``
    with their tuples; ``mine``: which of them this router routes. Zeros when this router routed nothing, or
    routed everything (no other router's tuples to expect).
    """
    out = np.zeros(n, dtype=np.float64)
    if own <= 0 or total <= own or n < 2:
        return out
    mean = total / n
    planned = np.zeros(n, dtype=np.float64)
    own_planned = np.zeros(n, dtype=np.float64)
    for key, count in sorted(large.items(), key=lambda kv: (-kv[1], kv[0])):
        rem = float(count)
        while rem > 0:
            low = int(np.argmin(planned))
            put = min(rem, mean - planned[low]) if planned[low] < mean else rem
            planned[low] += put
            if key in mine:
                own_planned[low] += put
            rem -= put
    room = np.maximum(mean - planned, 0.0)
    own_rest = max(own - float(own_planned.sum()), 0.0)
    share = room / room.sum() * own_rest if room.sum() > 0 else np.full(n, own_rest / n)
    expected = total / n - (own_planned + share)
    return np.maximum(expected, 0.0) / own


class Planner(Protocol):
    """What :func:`take_plan` reads and sets of a Dalton partitioner (so this module does not import it)."""

    n: int
    balance: float
    plan_together: bool
    scope_report: Report
    others: F64
    others_plans: list[tuple[int, F64]]
    joint_from: int
    joint_off: bool


def take_plan(p: Planner, peers: Sequence[Report] | None, own: Report | None = None) -> None:
    """Plan the combiners' load with the peers' reports: the router's plans by the scope each holds from.

    ``own``: this router's report as the peers have it (default: its latest); every router must decide on the
    same reports. The plan holds from the scope :func:`start_scope` names; plans for later scopes are dropped
    (this one is newer), and a plan that changes little from the last one is not taken (:func:`changed`). When
    a router catches up or they are out of step (:func:`in_step`), or once a planned scope summed off balance
    (:func:`off_balance`, then for the router's life), the router balances its own tuples from that scope on.
    ``None``: no peers, from now on. Without a report of its own yet, nothing changes.
    """
    zeros = np.zeros(p.n, dtype=np.float64)
    if not p.plan_together:
        return
    if peers is None:
        p.others_plans, p.others, p.joint_from = [], zeros, -1
        return
    own = p.scope_report if own is None else own
    if own.records <= 0 or any(r.records <= 0 for r in peers):
        return
    reports = [own, *peers]
    start = start_scope(reports)
    planning = p.joint_from >= 0
    share = imbalance(reports, p.joint_from) if planning else None
    if share is not None and off_balance(share, p.balance):
        p.joint_off = True  # its keys do not follow a plan
    if p.joint_off or not in_step(reports):
        if planning:
            _schedule(p, start, zeros)
            p.joint_from = -1
        return
    others = joint_plan(p.n, own, peers)
    last = p.others_plans[-1][1] if p.others_plans else p.others
    if planning and not changed(last, others):
        return
    _schedule(p, start, others)
    if not planning:
        p.joint_from = start


def _schedule(p: Planner, start: int, others: F64) -> None:
    p.others_plans = [(b, o) for b, o in p.others_plans if b < start] + [(start, others)]
