"""Dalton's cooperative-learning control messages (paper Sec. 4, Alg. 2), versioned, compact JSON.

Keys are the partitioners' 64-bit key ids written as decimal strings (identical on every router, see
``router.partitioners.keys``). The fields mirror the partitioner's hooks (``sync_payload`` /
``apply_global`` in ``router.partitioners.dalton.sync``); ``router.sync`` converts between the two.
A reader ignores (and logs) messages that fail :func:`parse_control`, and messages of another deployment
or route, or whose ``fingerprint`` (a digest of the partitioner parameters, see :func:`params_fingerprint`)
differs from its own.

Size. A value is compact JSON; above :data:`COMPRESS_OVER` bytes it is zlib-compressed behind a one-byte
marker (JSON never starts with it). :func:`parse_control` refuses values over ``max_bytes``, inflates at
most ``max_bytes * INFLATE_FACTOR`` bytes (a small compressed bomb cannot grow the reader's memory) and
messages with more than ``max_rows`` entries in any key list (the row cap). Senders fit their messages
under the limit with :func:`fit_message` (rows of least weight are left out first).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from schemas.exceptions import SkewrouteError

__all__ = [
    "CONTROL_VERSION",
    "ControlMessage",
    "ControlMessageError",
    "GlobalMessage",
    "KeyId",
    "ScopeReport",
    "SyncMessage",
    "decode_raw",
    "encode_control",
    "fit_message",
    "params_fingerprint",
    "parse_control",
]

CONTROL_VERSION = 1
#: Values longer than this (bytes of JSON) are zlib-compressed.
COMPRESS_OVER = 4096
#: A compressed value may inflate to at most this many times the reader's ``max_bytes``.
INFLATE_FACTOR = 8
#: Default size limit of one control value (Kafka's default ``message.max.bytes`` is 1,048,588).
DEFAULT_MAX_BYTES = 900_000
#: Default row cap: entries of any key list of one message.
DEFAULT_MAX_ROWS = 4096
_ZLIB = b"\x01"
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
    fingerprint: str = Field(
        "", max_length=64, description="digest of the sender's partitioner parameters ('' : not checked)"
    )


class ScopeReport(BaseModel):
    """One router's last closed scopes, added up (routers that own their keys plan the combiners' load on these)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    first: int = Field(..., ge=-1, description="the first scope reported (a scope: its start time over the slide)")
    last: int = Field(..., ge=-1, description="the last scope reported")
    records: int = Field(..., ge=0, description="tuples in those scopes")
    keys: list[tuple[KeyId, Annotated[int, Field(ge=0)]]] = Field(
        default_factory=list, description="the keys of at least a scope's records / n tuples, with their tuples"
    )
    loads: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list, description="tuples per combiner in the last of them"
    )
    scopes: int = Field(1, ge=1, description="how many scopes are added up")
    behind: bool = Field(False, description="the router was catching up when the last of them closed")


class SyncMessage(_Control):
    """SYNC: one router's local view, sent every DSYNC (the partitioner's ``sync_payload``)."""

    type: Literal["sync"] = "sync"
    instance: str = Field(..., min_length=1, description="sender's router instance id")
    seq: int = Field(..., ge=0, description="sender's sync sequence number")
    due_ms: int = Field(0, ge=0, description="the DSYNC grid point this SYNC was sent for (informational)")
    after_round: int = Field(
        -1, ge=-1, description="the last GLOBAL round the sender had applied (-1: none); keys the SYNC's round"
    )
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
    scope: ScopeReport | None = Field(
        None, description="routers that own their keys: the sender's last closed scopes (None: not reported)"
    )


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
    scopes: dict[str, ScopeReport] = Field(
        default_factory=dict, description="per member that reported them: its last closed scopes (latest SYNC)"
    )
    processing_ms: float = Field(0.0, ge=0, description="reducer's processing time of the previous round")
    idle_ms: float = Field(0.0, ge=0, description="reducer's wait for this round's SYNCs")


ControlMessage = Annotated[SyncMessage | GlobalMessage, Field(discriminator="type")]
_adapter: TypeAdapter[SyncMessage | GlobalMessage] = TypeAdapter(ControlMessage)


def encode_control(msg: SyncMessage | GlobalMessage) -> bytes:
    """Compact JSON of a control message, zlib-compressed above :data:`COMPRESS_OVER` bytes."""
    raw = orjson.dumps(msg.model_dump())
    return _ZLIB + zlib.compress(raw, 6) if len(raw) > COMPRESS_OVER else raw


def decode_raw(raw: bytes | None, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """The JSON value of a control-topic value (inflated if compressed), bounded in size."""
    if not raw:
        raise ControlMessageError("empty control message")
    if len(raw) > max_bytes:
        raise ControlMessageError(f"value of {len(raw)} bytes, over max_bytes={max_bytes}")
    if raw[:1] == _ZLIB:
        limit = max_bytes * INFLATE_FACTOR
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(raw[1:], limit)
        except zlib.error as exc:
            raise ControlMessageError(f"bad compressed value: {exc}") from None
        if inflater.unconsumed_tail:
            raise ControlMessageError(f"value inflates to more than {limit} bytes")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ControlMessageError(f"not JSON: {exc}") from None


def params_fingerprint(params: Mapping[str, Any]) -> str:
    """A short digest of partitioner parameters (routers with different ones must not share Q rows)."""
    return hashlib.blake2s(orjson.dumps(dict(params), option=orjson.OPT_SORT_KEYS), digest_size=8).hexdigest()


def _rows(msg: SyncMessage | GlobalMessage) -> dict[str, int]:
    if isinstance(msg, SyncMessage):
        scope = msg.scope
        return {"q_table": len(msg.q_table), "weights": len(msg.weights), "top_keys": len(msg.top_keys),
                "scope_keys": 0 if scope is None else len(scope.keys)}  # fmt: skip
    return {
        "scopes": len(msg.scopes),
        "scope_keys": sum(len(r.keys) for r in msg.scopes.values()),
        "q_table": len(msg.q_table),
        "hot_keys": len(msg.hot_keys),
        "expired": len(msg.expired),
        "members": len(msg.members),
        "seqs": len(msg.seqs),
    }


def fit_message(
    msg: SyncMessage | GlobalMessage,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
    rank: Callable[[str], float] | None = None,
) -> tuple[SyncMessage | GlobalMessage, int]:
    """``msg`` cut to at most ``max_rows`` rows and ``max_bytes`` encoded; returns it and the rows left out.

    Q rows are kept by descending ``rank(key)`` (default: the SYNC's weight, the GLOBAL's hot count); a
    SYNC's weights follow its rows, a GLOBAL's expirations are cut from the end (a key left out stays in
    the routers' tables and is expired in a later round). Top-key lists hold at most n entries and stay.
    """
    if rank is None:
        table = msg.weights if isinstance(msg, SyncMessage) else msg.hot_keys
        rank = lambda k: float(table.get(k, 0))  # noqa: E731
    order = sorted(msg.q_table, key=lambda k: (-rank(k), int(k)))
    total = len(order)

    def cut(keep: int) -> SyncMessage | GlobalMessage:
        keys = order[:keep]
        update: dict[str, Any] = {"q_table": {k: msg.q_table[k] for k in keys}}
        if isinstance(msg, SyncMessage):
            update["weights"] = {k: msg.weights[k] for k in keys if k in msg.weights}
        else:
            update["expired"] = msg.expired[: max(0, min(len(msg.expired), max_rows - 1))]
        return msg.model_copy(update=update)

    def fits(m: SyncMessage | GlobalMessage) -> bool:  # encoded under max_bytes, inflating under the reader's cap
        raw = orjson.dumps(m.model_dump())
        if len(raw) > max_bytes * INFLATE_FACTOR:
            return False
        return len(raw) <= max_bytes if len(raw) <= COMPRESS_OVER else 1 + len(zlib.compress(raw, 6)) <= max_bytes

    keep = min(total, max_rows)
    out = cut(keep) if keep < total or max(_rows(msg).values()) > max_rows else msg
    if fits(out):
        return out, total - keep
    lo, hi = 0, keep  # the largest prefix that fits (binary search on the encoded size)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(cut(mid)):
            lo = mid
        else:
            hi = mid - 1
    out = cut(lo)
    if not fits(out):
        raise ControlMessageError(f"a {msg.type} message without Q rows is still over max_bytes={max_bytes}")
    return out, total - lo


def _check_ids(msg: SyncMessage | GlobalMessage) -> None:
    keys: list[str] = [*msg.q_table]
    if isinstance(msg, SyncMessage):
        keys += [k for k, _ in msg.top_keys]
        keys += list(msg.weights)
        keys += [k for k, _ in msg.scope.keys] if msg.scope is not None else []
    else:
        keys += [*msg.hot_keys, *msg.expired]
        keys += [k for r in msg.scopes.values() for k, _ in r.keys]
    for k in keys:
        if int(k) > _U64_MAX:
            raise ControlMessageError(f"key id {k} does not fit 64 bits")
    if msg.combiners:
        for k, row in msg.q_table.items():
            if len(row) != msg.combiners:
                raise ControlMessageError(f"q_table.{k}: {len(row)} values, expected combiners={msg.combiners}")


def parse_control(
    raw: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES, max_rows: int = DEFAULT_MAX_ROWS
) -> SyncMessage | GlobalMessage:
    """Validate one control-topic value; :class:`ControlMessageError` says what is wrong."""
    data = decode_raw(raw, max_bytes)
    if not isinstance(data, dict):
        raise ControlMessageError(f"not a JSON object: {type(data).__name__}")
    if data.get("v") != CONTROL_VERSION:
        raise ControlMessageError(f"unsupported control version {data.get('v')!r} (this build reads {CONTROL_VERSION})")
    try:
        msg = _adapter.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ControlMessageError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    for name, count in _rows(msg).items():
        if count > max_rows:
            raise ControlMessageError(f"{name}: {count} rows, over the row cap max_rows={max_rows}")
    _check_ids(msg)
    return msg
