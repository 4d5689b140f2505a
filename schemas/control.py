"""Dalton's cooperative-learning control messages (paper Sec. 4, Alg. 2), versioned, compact JSON.

Keys are the partitioners' 64-bit key ids written as decimal strings (identical on every router, see
``router.partitioners.keys``). A reader ignores (and logs) messages that fail :func:`parse_control`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from schemas.exceptions import SkewrouteError

__all__ = [
    "CONTROL_VERSION",
    "ControlMessage",
    "ControlMessageError",
    "GlobalMessage",
    "SyncMessage",
    "encode_control",
    "parse_control",
]

CONTROL_VERSION = 1


class ControlMessageError(SkewrouteError, ValueError):
    """A control-topic message that is malformed, of another version, or not ours."""


class _Control(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1] = 1
    deployment: str = Field(..., min_length=1, description="router app id; foreign deployments are ignored")
    route: str = Field(..., min_length=1, description="route name")
    sent_ms: int = Field(0, ge=0, description="sender's wall clock (ms)")


class SyncMessage(_Control):
    """SYNC: one router's local view, sent every DSYNC."""

    type: Literal["sync"] = "sync"
    instance: str = Field(..., min_length=1, description="sender's router instance id")
    seq: int = Field(..., ge=0, description="sender's sync sequence number")
    records: int = Field(..., ge=0, description="records routed since the previous SYNC")
    q_table: dict[str, list[float]] = Field(default_factory=dict, description="Q-rows of the local hot keys")
    top_keys: list[tuple[str, int]] = Field(default_factory=list, description="top-n keys with their counts")
    double: bool = Field(False, description="request to double DSYNC (previous reply still pending)")
    leaving: bool = Field(False, description="the instance is shutting down; do not wait for it")


class GlobalMessage(_Control):
    """GLOBAL: the QtableReducer's merged policy, broadcast to every router."""

    type: Literal["global"] = "global"
    reducer: str = Field(..., min_length=1, description="instance id of the reducer that sent it")
    round: int = Field(..., ge=0, description="sync round number")
    q_table: dict[str, list[float]] = Field(default_factory=dict, description="frequency-weighted global Q-rows")
    hot_keys: dict[str, int] = Field(default_factory=dict, description="globally hot keys and their counts")
    expired: list[str] = Field(default_factory=list, description="keys whose Q-rows expire now")
    global_load: int = Field(0, ge=0, description="records routed by all routers in the round (GL)")
    dsync_ms: int = Field(..., ge=1, description="sync interval the routers use from now on")
    members: list[str] = Field(default_factory=list, description="instances that contributed to this round")


ControlMessage = Annotated[SyncMessage | GlobalMessage, Field(discriminator="type")]
_adapter: TypeAdapter[SyncMessage | GlobalMessage] = TypeAdapter(ControlMessage)


def encode_control(msg: SyncMessage | GlobalMessage) -> bytes:
    """Compact JSON of a control message."""
    return orjson.dumps(msg.model_dump())


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
        return _adapter.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ControlMessageError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
