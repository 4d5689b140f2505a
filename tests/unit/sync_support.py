"""Shared builders of the sync protocol tests: SYNC messages and a reducer on N = 4 combiners."""

from __future__ import annotations

from router.sync import DsyncPolicy, QtableReducer
from schemas.control import SyncMessage

N = 4


def sync(inst: str, seq: int = 0, *, records: int = 100, rows: dict[str, list[float]] | None = None,
         weights: dict[str, int] | None = None, top: list[tuple[str, int]] | None = None, double: bool = False,
         leaving: bool = False, sent: int = 0, deployment: str = "d", route: str = "r") -> SyncMessage:  # fmt: skip
    return SyncMessage(deployment=deployment, route=route, instance=inst, seq=seq, records=records, combiners=N,
                       q_table=rows or {}, weights=weights or {}, top_keys=top or [], double=double,
                       leaving=leaving, sent_ms=sent)  # fmt: skip


def reducer(dsync: float = 100, policy: DsyncPolicy | None = None) -> QtableReducer:
    return QtableReducer(deployment="d", route="r", combiners=N, dsync=dsync, policy=policy or DsyncPolicy(25, 1600))
