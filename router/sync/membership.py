"""Who is in a route's sync group, and who runs its reducer.

Every node reads every control message of its route (one partition, one order), so every node builds
the same membership: an instance is *live* from its first SYNC until it says it is ``leaving`` or has not
been heard of for the liveness timeout (a dead worker is never waited for). The reducer is the lowest live
instance id; when it dies, the next lowest takes over once the timeout drops it, with no message
exchanged. A node counts itself only once its own SYNCs come back from the topic (a node that cannot
sync, or does not hear the topic, never elects itself while the others elect someone else).

A reducer that holds a closable round without answering for the takeover timeout is *deposed*
(:meth:`Membership.depose`): it is not elected again while it keeps sending (and for the given period),
unless no other member is live, so an instance that claims the lowest id but never publishes a GLOBAL (a
hung process, a hostile writer) stops the rounds for one takeover timeout only. A reducer that learns it
was deposed (a GLOBAL of another reducer while it had been elected for longer than the takeover timeout,
e.g. after a long pause) deposes itself, and a node that waits on an elected reducer for a round another
member answers deposes the reducer it waited for (another node's timer ran out first), so the nodes agree again.

Bounded: at most ``max_members`` live members (SYNCs of further new ids are refused) and the ``left`` /
``deposed`` / ``dropped`` records are capped.
"""

from __future__ import annotations

from collections import deque

__all__ = ["Membership"]

_MAX_RECORDS = 1024


class Membership:
    """Live members of one route's sync group, as seen by node ``self_id``.

    ``timeout`` is the liveness timeout, in the transport's clock; it may be changed at any time (it
    follows DSYNC).
    """

    def __init__(self, self_id: str, timeout: float, *, max_members: int = 1024) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        self.self_id = self_id
        self.timeout = float(timeout)
        self.max_members = max_members
        self.last_seen: dict[str, float] = {}
        self.left: dict[str, None] = {}  # insertion-ordered set, capped
        self.self_leaving = False
        self.dropped: deque[tuple[str, float]] = deque(maxlen=_MAX_RECORDS)  # (instance, when): timed out
        self.deposed: dict[str, float] = {}  # instance -> not elected before this time
        self.refused = 0

    def seen(self, instance: str, at: float, *, leaving: bool = False) -> bool:
        """``instance`` sent a message at ``at``; ``leaving``: its last one (clean shutdown).

        ``False`` when a new member is refused (``max_members`` live already).
        """
        if leaving:
            self.left[instance] = None
            while len(self.left) > _MAX_RECORDS:
                del self.left[next(iter(self.left))]
            self.last_seen.pop(instance, None)
            return True
        if instance not in self.last_seen and len(self.last_seen) >= self.max_members:
            self.refused += 1
            return False
        self.left.pop(instance, None)  # restarted with the same id
        if at > self.last_seen.get(instance, -float("inf")):
            self.last_seen[instance] = at
        if instance in self.deposed:  # deposed as long as it keeps talking (then for one more timeout)
            self.deposed[instance] = max(self.deposed[instance], at + self.timeout)
        return True

    def depose(self, instance: str, now: float, period: float) -> None:
        """``instance`` held a round without answering: not elected before ``now + period``."""
        self.deposed[instance] = now + period
        while len(self.deposed) > _MAX_RECORDS:
            del self.deposed[min(self.deposed, key=self.deposed.__getitem__)]

    def expire(self, now: float) -> list[str]:
        """Drop members not heard of within the timeout; returns them."""
        gone = [i for i, t in self.last_seen.items() if now - t > self.timeout]
        for i in gone:
            del self.last_seen[i]
            self.dropped.append((i, now))
        return gone

    def live(self, now: float) -> set[str]:
        """Members whose SYNC a round waits for (after dropping the timed-out ones)."""
        self.expire(now)
        return set(self.last_seen)

    def leader(self, now: float) -> str | None:
        """The reducer: the lowest live instance id (this node only when its SYNCs are seen, not leaving)."""
        candidates = self.live(now)
        if self.self_leaving:
            candidates.discard(self.self_id)
        if self.deposed:
            self.deposed = {i: t for i, t in self.deposed.items() if t > now}
            candidates = (candidates - set(self.deposed)) or candidates  # a deposed one rather than none
        return min(candidates) if candidates else None

    def is_leader(self, now: float) -> bool:
        """Whether this node runs the reducer now."""
        return self.leader(now) == self.self_id
