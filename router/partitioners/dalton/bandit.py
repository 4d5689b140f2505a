"""Dalton's contextual bandit: Q-table rows of hot keys, epsilon-greedy choice, reward, update (Sec. 3.2).

Reward of routing a tuple of key ``k`` to combiner ``a`` (Eq. 3-4): ``R = -(p1 * CI + p2 * CA)`` with
``CI = (L_a - mean L) / max(L_a, mean L)`` on the load vector *after* the assignment and
``CA = |fragmentation bits of k| / n`` including ``a``. A chunk of ``m`` tuples is ``m`` updates
(Eq. 5) with one reward, in closed form ``Q <- R + (1 - gamma)^m (Q - R)``.

``update="chosen"`` (the paper): only ``Q(k, a)`` moves, with the reward of the chunk's last tuple.
``update="all"``: every ``Q(k, c)`` moves towards the reward the next tuple would get on ``c``; the
reward is the router's own cost model, so these counterfactual rewards are exact (full information).
Greedy ties go to the key's hash combiner (the reference code's rule: uniform data hashes). Initial
values are ``initial_q`` (-2, below any reward).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["BanditConfig", "QRow", "QTable", "Reward", "run_chunks", "weighted_average"]

#: One buffered reward (key id, combiner, reward, tuples) for replay after a GLOBAL message.
Reward = tuple[int, int, float, int]


@dataclass(slots=True)
class QRow:
    """One hot key's Q values.

    ``expires`` is the last statistics window in which the row is valid; ``weight`` counts the tuples
    rewarded since the last sync (the key's weight when Q-tables are averaged); ``home`` is the key's hash
    combiner (``-1`` until the key is seen locally).
    """

    q: list[float]
    expires: int
    home: int = -1
    weight: int = 0


@dataclass(frozen=True, slots=True)
class BanditConfig:
    """Learning parameters (see :class:`~router.partitioners.dalton.DaltonPartitioner`)."""

    n: int
    epsilon: float = 0.1
    gamma: float = 0.1
    p1: float = 0.5
    p2: float = 0.5
    initial_q: float = -2.0
    max_split: int = 0  # 0 = n
    update: str = "chosen"  # "chosen": Eq. 5 on the chosen action; "all": every action's modelled reward


@dataclass
class QTable:
    """Q rows of the keys currently routed by the bandit (at most ~2n: hot now or hot last window)."""

    n: int
    initial_q: float = -2.0
    rows: dict[int, QRow] = field(default_factory=dict)

    def mark_hot(self, key: int, window: int, home: int = -1) -> QRow:
        """Key ``key`` is hot in statistics window ``window``: valid through ``window + 1``."""
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = QRow([self.initial_q] * self.n, window + 1, home)
        elif row.expires < window + 1:
            row.expires = window + 1
        return row

    def expire(self, window: int) -> list[int]:
        """Drop the rows not valid in statistics window ``window``; returns their keys."""
        gone = [k for k, r in self.rows.items() if r.expires < window]
        for k in gone:
            del self.rows[k]
        return gone

    def replay(self, rewards: Iterable[Reward], gamma: float) -> None:
        """Apply buffered rewards (Eq. 5) to the current rows, in order."""
        rows = self.rows
        for key, a, reward, m in rewards:
            row = rows.get(key)
            if row is not None:
                row.q[a] = reward + (1.0 - gamma) ** m * (row.q[a] - reward)


def water_level(loads: list[float], amount: float) -> float:
    """The level ``h`` with ``sum(max(0, h - l) for l in loads) == amount`` (water filling)."""
    below = 0.0
    ordered = sorted(loads)
    for i, low in enumerate(ordered):
        below += low
        nxt = ordered[i + 1] if i + 1 < len(ordered) else float("inf")
        h = (amount + below) / (i + 1)
        if h <= nxt:
            return h
    return float("inf")  # unreachable: the last level is always below infinity


def _greedy(q: list[float], home: int, allowed: list[int] | None) -> int:
    if allowed is None:
        best = max(q)
        return home if home >= 0 and q[home] == best else q.index(best)
    best = max(q[c] for c in allowed)
    if home in allowed and q[home] == best:
        return home
    return next(c for c in allowed if q[c] == best)


def run_chunks(
    table: QTable,
    cfg: BanditConfig,
    keys: list[int],
    counts: list[int],
    loads: list[float],
    masks: dict[int, int],
    quantum: int,
    adaptive: bool,
    draw: Callable[[], tuple[list[float], list[int]]],
    buffer: list[Reward] | None,
    level: float | None = None,
) -> list[tuple[int, int, int]]:
    """Route the hot tuples of one segment chunk by chunk; returns the chunks ``(key index, combiner, size)``.

    Key ``keys[j]`` has ``counts[j]`` tuples. Chunks are taken from the key with the least progress
    (``done / count``), which interleaves the keys as the stream does. Each chunk is one epsilon-greedy
    decision and one reward. With ``adaptive`` the chunk fills the chosen combiner up to the segment's
    water level (the level the segment's hot tuples would fill the load vector to: the batch is a
    look-ahead buffer), or is ``quantum`` tuples when the chosen combiner is already at the level: a
    decision is taken when a combiner crosses the level, so the bandit decides a few times per combiner
    and batch. Otherwise chunks are ``quantum`` tuples (``quantum=1`` is Algorithm 1).

    ``loads`` (the reward's load vector, already holding the segment's non-hot tuples) and ``masks``
    (fragmentation bit mask per key) are updated in place. ``draw()`` returns fresh exploration draws
    (uniforms and random combiners). With ``buffer`` given (AWAIT state) every reward is also appended
    there for replay onto the next global table. ``level`` replaces the water level (Dalton passes the
    segment's final mean load when the hot keys are routed before the tail: each chunk then fills a combiner
    up to the mean at most, so a hot key reaches about ``count / mean`` combiners, not all of them); with it,
    the choice (greedy or exploring) is among the combiners still below the level when there is one: a Q row
    learnt on the previous batch's loads would otherwise send one-tuple chunks to full combiners. The reward's
    imbalance term then compares with that final mean, not with the mean of the partial load vector (the tail
    is not placed yet), so rewards stay in the range they have once the segment is routed.
    """
    n, eps, p1, p2, keep = cfg.n, cfg.epsilon, cfg.p1, cfg.p2, 1.0 - cfg.gamma
    cap = cfg.max_split or n
    full = cfg.update == "all"
    rows = table.rows
    total = float(sum(loads))
    room = level is not None
    if level is None:
        level = water_level(loads, sum(counts))
    left = list(counts)
    done = [0] * len(keys)
    active = [j for j in range(len(keys)) if left[j] > 0]
    out: list[tuple[int, int, int]] = []
    rng = range(n)
    fraglists: dict[int, tuple[int, list[float]]] = {}
    explore: list[float] = []
    random_action: list[int] = []
    i = 0
    while active:
        j = min(active, key=lambda x: done[x] / counts[x])
        key = keys[j]
        row = rows[key]
        q = row.q
        mask = masks[key]
        held = mask.bit_count()
        allowed = [c for c in rng if mask >> c & 1] if cap < n and held >= cap else None
        if room:  # only combiners below the level (when there is one), so a chunk never lands on a full one
            below = [c for c in (rng if allowed is None else allowed) if loads[c] + 0.5 < level]
            if below:
                allowed = below
        if i == len(explore):
            explore, random_action = draw()
            i = 0
        if explore[i] < eps:
            a = random_action[i] % n if allowed is None else allowed[random_action[i] % len(allowed)]
        else:
            a = _greedy(q, row.home, allowed)
        i += 1
        gap = math.ceil(level - loads[a])
        m = min(left[j], (gap if gap > 0 else quantum) if adaptive else quantum)
        left[j] -= m
        done[j] += m
        if left[j] == 0:
            active.remove(j)
        total += m
        mean = level if room else total / n  # packing: imbalance against the segment's final mean
        decay = keep**m
        if full:  # every action's modelled reward for the next tuple, after this chunk went to a
            loads[a] += m
            mask |= 1 << a
            cached = fraglists.get(key)
            if cached is None or cached[0] != mask:
                now = mask.bit_count()
                cached = fraglists[key] = (mask, [(now + (not mask >> c & 1)) * p2 / n for c in rng])
            step = 1.0 - decay
            mean1 = mean if room else mean + 1.0 / n
            la = loads[a] + 1.0
            reward = -(p1 * (la - mean1) / (la if la > mean1 else mean1) + cached[1][a])
            q[:] = [
                decay * v - step * (p1 * (x + 1.0 - mean1) / (x + 1.0 if x + 1.0 > mean1 else mean1) + f)
                for x, f, v in zip(loads, cached[1], q, strict=True)
            ]
        else:
            loads[a] += m
            la = loads[a]
            mask |= 1 << a
            reward = -(p1 * (la - mean) / max(la, mean) + p2 * mask.bit_count() / n)
            q[a] = reward + decay * (q[a] - reward)
        masks[key] = mask
        row.weight += m
        if buffer is not None:
            buffer.append((key, a, reward, m))
        out.append((j, a, m))
    return out


def weighted_average(contributions: dict[int, list[tuple[float, list[float]]]]) -> dict[int, list[float]]:
    """Frequency-weighted average Q row per key, independent of the order of the contributions.

    Each contribution is ``(weight, row)``; weights are the contributors' key frequencies (all-zero
    weights fall back to the plain mean). Contributions are sorted before summing, so the floating-point
    result does not depend on the order routers or peers are listed in.
    """
    out: dict[int, list[float]] = {}
    for key in sorted(contributions):
        items = sorted((float(w), tuple(r)) for w, r in contributions[key])
        total = sum(w for w, _ in items)
        if total <= 0:
            items = [(1.0, r) for _, r in items]
            total = float(len(items))
        width = len(items[0][1])
        out[key] = [sum(w * r[c] for w, r in items) / total for c in range(width)]
    return out
