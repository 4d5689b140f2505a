"""Dalton's cooperative-learning control messages (paper Sec. 4, Alg. 2), versioned, compact JSON.

Keys are the partitioners' 64-bit key ids written as decimal strings (identical on every router, see
``router.partitioners.keys``). The fields mirror the partitioner's hooks (``sync_payload`` /
``apply_global`` in ``router.partitioners.dalton.sync``); ``router.sync`` converts between the two.
A reader ignores (and logs) messages that fail :func:`parse_control`, and messages of another deployment
or route.
"""

from __future__ import annotations

from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from schemas.exceptions import SkewrouteError

__all__ = [
    "CONTROL_VERSION",
    "ControlMessage",
    "ControlMessageError",
    "GlobalMessage",
    "KeyId",
    "SyncMessage",
    "encode_control",
    "parse_control",
]

CONTROL_VERSION = 1
_U64_MAX = (1 << 64) - 1

#: A 64-bit key id as a decimal string.
KeyId = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,20}$")]
#: A Q row: one finite value per combiner.
QValues = list[Annotated[float, Field(allow_inf_nan=False)]]


class ControlMessageError(SkewrouteError, ValueError):
    """A control-topic message that is malformed, of another version, or not ours."""


class _Control(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1] = 1
    deployment: str = Field(..., min_length=1, description="router app id; foreign deployments are ignored")
    route: str = Field(..., min_length=1, description="route name")
    sent_ms: int = Field(0, ge=0, description="sender's wall clock (ms)")
    combiners: int = Field(0, ge=0, description="n of the sender's partitioner (0: unknown); rows have n values")


class SyncMessage(_Control):
    """SYNC: one router's local view, sent every DSYNC (the partitioner's ``sync_payload``)."""

    type: Literal["sync"] = "sync"
    instance: str = Field(..., min_length=1, description="sender's router instance id")
    seq: int = Field(..., ge=0, description="sender's sync sequence number")
    due_ms: int = Field(0, ge=0, description="the DSYNC grid point this SYNC was sent for (multiple of DSYNC)")
    records: int = Field(..., ge=0, description="records routed since the previous SYNC")
    q_table: dict[KeyId, QValues] = Field(default_factory=dict, description="Q-rows of the local hot keys")
    weights: dict[KeyId, int] = Field(
        default_factory=dict, description="per Q-row: tuples rewarded since the previous SYNC (averaging weight)"
    )
    top_keys: list[tuple[KeyId, Annotated[int, Field(ge=0)]]] = Field(
        default_factory=list, description="top-n keys since the previous SYNC with their counts"
    )
    double: bool = Field(False, description="request to double DSYNC (previous reply still pending)")
    leaving: bool = Field(False, description="the instance is shutting down; do not wait for it")
    stats_window: int = Field(0, description="the sender's statistics window index")


class GlobalMessage(_Control):
    """GLOBAL: the QtableReducer's merged policy, broadcast to every router (the partitioner's ``apply_global``)."""

    type: Literal["global"] = "global"
    reducer: str = Field(..., min_length=1, description="instance id of the reducer that sent it")
    round: int = Field(..., ge=0, description="sync round number")
    q_table: dict[KeyId, QValues] = Field(default_factory=dict, description="frequency-weighted global Q-rows")
    hot_keys: dict[KeyId, int] = Field(default_factory=dict, description="globally hot keys and their counts")
    expired: list[KeyId] = Field(default_factory=list, description="keys whose Q-rows expire now")
    global_load: int = Field(0, ge=0, description="records routed by all routers in the round (GL)")
    dsync_ms: int = Field(..., ge=1, description="sync interval the routers use from now on")
    members: list[str] = Field(default_factory=list, description="instances that contributed to this round")
    seqs: dict[str, int] = Field(default_factory=dict, description="per member: its last SYNC seq in this round")
    processing_ms: float = Field(0.0, ge=0, description="reducer's processing time of the previous round")
    idle_ms: float = Field(0.0, ge=0, description="reducer's wait for this round's SYNCs")


ControlMessage = Annotated[SyncMessage | GlobalMessage, Field(discriminator="type")]
_adapter: TypeAdapter[SyncMessage | GlobalMessage] = TypeAdapter(ControlMessage)


def encode_control(msg: SyncMessage | GlobalMessage) -> bytes:
    """Compact JSON of a control message."""
    return orjson.dumps(msg.model_dump())


def _check_ids(msg: SyncMessage | GlobalMessage) -> None:
    keys: list[str] = [*msg.q_table]
    if isinstance(msg, SyncMessage):
        keys += [k for k, _ in msg.top_keys]
        keys += list(msg.weights)
    else:
        keys += [*msg.hot_keys, *msg.expired]
    for k in keys:
        if int(k) > _U64_MAX:
            raise ControlMessageError(f"key id {k} does not fit 64 bits")
    if msg.combiners:
        for k, row in msg.q_table.items():
            if len(row) != msg.combiners:
                raise ControlMessageError(f"q_table.{k}: {len(row)} values, expected combiners={msg.combiners}")


def parse_control(raw: bytes | None) -> SyncMessage | GlobalMessage:
    """Validate one control-topic value; :class:`ControlMessageError` says what is wrong."""
    if not raw:
        raise ControlMessageError("empty control message")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ControlMessageError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ControlMessageError(f"not a JSON object: {type(data).__name__}")
    if data.get("v") != CONTROL_VERSION:
        raise ControlMessageError(f"unsupported control version {data.get('v')!r} (this build reads {CONTROL_VERSION})")
    try:
        msg = _adapter.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ControlMessageError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    _check_ids(msg)
    return msg
