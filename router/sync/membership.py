"""Who is in a route's sync group, and who runs its reducer.

Every node reads every control message of its route (one partition, one order), so every node builds
the same membership: an instance is *live* from its first SYNC until it says it is ``leaving`` or has not
been heard of for the liveness timeout (a dead worker is never waited for). The reducer is the lowest live
instance id; when it dies, the next lowest takes over once the timeout drops it, with no message
exchanged. A node counts itself only once its own SYNCs come back from the topic (a node that cannot
sync, or does not hear the topic, never elects itself while the others elect someone else).
"""

from __future__ import annotations

__all__ = ["Membership"]


class Membership:
    """Live members of one route's sync group, as seen by node ``self_id``.

    ``timeout`` is the liveness timeout, in the transport's clock; it may be changed at any time (it
    follows DSYNC).
    """

    def __init__(self, self_id: str, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        self.self_id = self_id
        self.timeout = float(timeout)
        self.last_seen: dict[str, float] = {}
        self.left: set[str] = set()
        self.self_leaving = False
        self.dropped: list[tuple[str, float]] = []  # (instance, when): members dropped by the timeout

    def seen(self, instance: str, at: float, *, leaving: bool = False) -> None:
        """``instance`` sent a message at ``at``; ``leaving``: its last one (clean shutdown)."""
        if leaving:
            self.left.add(instance)
            self.last_seen.pop(instance, None)
            return
        if instance in self.left:
            self.left.discard(instance)  # restarted with the same id
        if at > self.last_seen.get(instance, -float("inf")):
            self.last_seen[instance] = at

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
        return min(candidates) if candidates else None

    def is_leader(self, now: float) -> bool:
        """Whether this node runs the reducer now."""
        return self.leader(now) == self.self_id
