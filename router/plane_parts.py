"""Building blocks of the data plane: client tuning, the partitioner factory, statistics, dead letters."""

from __future__ import annotations

import base64
import gc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import KafkaError, TopicPartition

from router.extract import BadRecord, Extracted, RawMessage, SourceRecord
from router.partitioners import Partitioner, create
from schemas.exceptions import ConfigError, RecordError
from schemas.records import V2_HEADS, DeadLetter, decode_routed_record, routed_version
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings

__all__ = [
    "ATTEMPTS",
    "CONSUMER_TUNING",
    "PRODUCER_TUNING",
    "DataPlaneStats",
    "GROUP_MEMBERSHIP_ERRORS",
    "PER_RECORD_ERRORS",
    "DeliveryError",
    "PendingBatch",
    "check_sizes",
    "consumer_conf",
    "dead_letter",
    "dead_letter_bytes",
    "message_limit",
    "refused_source",
    "make_partitioner",
    "tune_gc",
    "next_offsets",
    "offset_ranges",
]

#: Consumer settings of the data plane (large fetches: the loop wants whole batches at once).
CONSUMER_TUNING: dict[str, Any] = {
    # Smaller fetches do not interleave the raw partitions (a fetch returns whole producer batches: on Tansu
    # 64 KB per partition still gave one partition's 50,000 records before the other's); router.align_ms does
    # (router/plane_align.py).
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "queued.max.messages.kbytes": 256 * 1024,
    # Once the prefetch queue holds queued.min.messages (100,000), librdkafka postpones the next fetch by this
    # much (default 1,000 ms): with a backlog the loop drained the queue in ~0.5 s and then waited for records
    # (one worker fetched 250k records/s from Tansu with 1 s, 1M with 20 ms: BENCHMARKS.md, "Router CPU per record")
    "fetch.queue.backoff.ms": 20,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
}


def consumer_conf(kafka: KafkaSettings, router: RouterSettings) -> dict[str, Any]:
    """The data plane's consumer properties: our tuning < the user's ``kafka.consumer`` < what correctness needs."""
    conf = {**CONSUMER_TUNING, **kafka.consumer, "enable.auto.commit": False}
    static = router.static_membership is True  # "auto" is resolved per broker by the app (False here)
    if static and router.instance_id and "group.instance.id" not in conf:
        conf["group.instance.id"] = router.instance_id  # a quick restart does not rebalance
    return conf


ATTEMPTS = 5
PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "delivery.report.only.error": True,  # the delivery callback sees failures only: no per-record callback cost
}


#: Thresholds of Python's cyclic garbage collector in a router worker (:func:`tune_gc`); CPython's are 700, 10, 10.
GC_THRESHOLDS = (100_000, 10, 10)


def tune_gc() -> None:
    """Make the cyclic garbage collector cheap for the batch loop; the worker calls it once, after start-up.

    ``consume()`` makes one GC-tracked ``Message`` per record (20,000 per batch) and they live until the batch is
    handed over, so with CPython's thresholds a batch triggered ~28 young collections that traversed them and
    promoted the survivors into older generations, whose collections traversed them again, together with every
    object of the start-up (modules, settings, clients). That cost 0.5-0.6 µs per record, most of it inside
    ``consume()`` (BENCHMARKS.md, "Router CPU per record"). Here the start-up objects are frozen (left out of every
    later collection) and a young collection waits for 100,000 more tracked objects than were freed: the loop frees
    its batches by reference counting, so collections become rare and find little. Process-wide: fine for a worker
    process, whose hot loop is the data plane.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


#: Producer errors about one record (local or from the broker): that record is dead-lettered, the route goes on.
#: Errors of a transactional offset commit that mean this consumer is no longer a member of the group's
#: current generation (its session expired, e.g. while a broker failed over): retrying the same transaction
#: cannot succeed. The transaction is aborted and the batch re-read once the consumer has rejoined.
GROUP_MEMBERSHIP_ERRORS = frozenset(
    {KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS}
)
PER_RECORD_ERRORS = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_MSG,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.POLICY_VIOLATION,
    }
)
#: librdkafka's default ``message.max.bytes``.
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
#: Room a routed record needs besides the raw value and the key (fields, topic name, measure).
ROUTED_OVERHEAD = 1024
#: Room a dead-letter envelope needs besides the prefixes (error text, positions, base64 growth of the prefixes).
ENVELOPE_OVERHEAD = 2048


def message_limit(kafka: KafkaSettings) -> int:
    """The producer's ``message.max.bytes`` (the largest record ``produce`` accepts)."""
    return int(kafka.producer.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))


def check_sizes(kafka: KafkaSettings, router: RouterSettings, route: RouteSettings) -> int:
    """Refuse settings under which a routed record (or an envelope) cannot fit the producer's message limit.

    A routed record holds the raw value, the key twice (Kafka key, and JSON-escaped: up to 6 bytes per byte)
    and about 1 KB of fields. Returns the limit.
    """
    limit = message_limit(kafka)
    need = route.max_record_bytes + 7 * router.max_key_bytes + ROUTED_OVERHEAD
    problems = []
    if need > limit:
        problems.append(
            f"routes.{route.route_name}.max_record_bytes: {route.max_record_bytes} plus the routed record's header "
            f"(up to {need - route.max_record_bytes} B with router.max_key_bytes={router.max_key_bytes}) is above "
            f"the producer's message.max.bytes ({limit}); lower max_record_bytes or raise "
            "kafka.producer.message.max.bytes (and the topics' max.message.bytes)"
        )
    if 4 * router.dead_letter_prefix_bytes + ENVELOPE_OVERHEAD > limit:
        problems.append(
            f"router.dead_letter_prefix_bytes: {router.dead_letter_prefix_bytes} does not fit a dead-letter envelope "
            f"under the producer's message.max.bytes ({limit})"
        )
    if problems:
        raise ConfigError(problems)
    return limit


def refused_source(raw_topic: str, topic: str, key: bytes | None, value: bytes | None, err: Any) -> BadRecord:
    """The bad record behind an output (routed record or dead letter) the producer or broker refused.

    Both carry their source position (a routed record of format 2 in its binary prefix, the others in their JSON
    value). The payload whose prefix the envelope keeps is the refused output itself, except for a routed record
    of format 2: there it is the raw value behind the prefix, byte for byte (the dead letter then holds the
    original record, as for a record refused before routing).
    """
    pos: dict[str, Any] = {}
    payload = value
    if routed_version(value) == 2:  # a routed record of format 2: the position is in its binary prefix
        assert value is not None
        pos = decode_routed_record(value, key, raw_topic, 0) or {}
        pos["tp"] = raw_topic
        payload = value[V2_HEADS[value[0]] :]
    else:
        try:
            doc = orjson.loads(value or b"null")
            if type(doc) is dict:
                pos = doc
        except orjson.JSONDecodeError:
            pass
    part, off = pos.get("p", pos.get("partition", 0)), pos.get("o", pos.get("offset", 0))
    src = SourceRecord(
        str(pos.get("tp", pos.get("topic", raw_topic))), int(part) if type(part) is int else 0,
        int(off) if type(off) is int else 0, key, payload,
    )  # fmt: skip
    name = err.name() if hasattr(err, "name") else str(err)
    what = "routed record" if "tp" in pos else "dead letter"
    return BadRecord(src, RecordError("value", f"Kafka refused the {what} of {len(value or b'')} B to {topic}: {name}"))


@dataclass(slots=True)
class PendingBatch:
    """A batch of the data plane between produce and commit."""

    offsets: list[TopicPartition]
    consumed: int
    routed: int
    dead: int
    started: float  # perf_counter() when it was consumed
    consumed_at: float  # monotonic() when it was consumed


class DeliveryError(RuntimeError):
    """Kafka did not acknowledge routed records after retries (the batch's offsets stay uncommitted)."""


@dataclass
class DataPlaneStats:
    """Counters the benchmark and the tests read (the metrics carry the same numbers)."""

    consumed: int = 0
    routed: int = 0
    dead: int = 0
    batches: int = 0
    first_consumed: float | None = None  # time.monotonic() when the first record arrived
    last_acked: float | None = None  # time.monotonic() after the last batch was acknowledged
    first_cpu: float | None = None  # time.process_time() (all threads of the process) at first_consumed
    last_cpu: float | None = None  # time.process_time() at last_acked
    partitioner_s: float = 0.0  # inside Partitioner.assign
    # wall time per phase of the batch loop (per batch, not per record: cheap to keep)
    extract_s: float = 0.0
    assign_s: float = 0.0  # assign + window metrics + offsets to commit
    produce_s: float = 0.0  # encode + produce() (the transaction's whole time goes to deliver_s)
    deliver_s: float = 0.0  # flush + commit


def make_partitioner(route: RouteSettings, name: str | None = None) -> Partitioner:
    """The route's partitioner; ``name`` builds another registered one with its defaults instead."""
    name = name or route.partitioner.name
    params = route.partitioner_params()
    if route.partitioner.name == "custom":
        name = getattr(route.partitioner, "plugin", name)
    elif name != route.partitioner.name:
        params = {}
    return create(name, route.combiners, window=route.window.size, slide=route.window.slide, seed=route.seed, **params)


def dead_letter(
    route: str, raw_topic: str, bad: BadRecord, limit: int = DEFAULT_MESSAGE_MAX_BYTES, prefix: int = 1024
) -> DeadLetter:
    """The DLQ value of a bad record: the error naming the field, the source position, the original bytes.

    When the whole record would not fit ``limit`` bytes (base64 grows it by a third), the dead letter is an
    envelope: ``truncated`` set, ``size`` the original value's size, and only the first ``prefix`` bytes of the
    key and of the value.
    """
    m, e = bad.message, bad.error
    kind, ts = m.timestamp()
    key, value = m.key(), m.value()
    size = len(value) if value is not None else 0
    whole = (len(key) if key is not None else 0) + size
    truncated = 4 * whole // 3 + ENVELOPE_OVERHEAD > limit
    if truncated:
        key = key[:prefix] if key is not None else None
        value = value[:prefix] if value is not None else None
    return DeadLetter(
        route=route,
        error=str(e)[:1000],
        field=e.field[:200],
        topic=m.topic() or raw_topic,
        partition=m.partition() or 0,
        offset=m.offset() or 0,
        timestamp=ts if kind != 0 else None,
        key_b64=base64.b64encode(key).decode() if key is not None else None,
        value_b64=base64.b64encode(value).decode() if value is not None else None,
        size=size,
        truncated=truncated,
    )


def dead_letter_bytes(dl: DeadLetter) -> bytes:
    """The DLQ wire value of a dead letter."""
    return dl.model_dump_json().encode()


def offset_ranges(msgs: Sequence[RawMessage]) -> str:
    """``"p: first..last"`` per raw partition of a batch, for debug logs (the batch's records are in offset order)."""
    spans: dict[int | None, list[int | None]] = {}
    for m in msgs:
        span = spans.setdefault(m.partition(), [m.offset(), m.offset()])
        span[1] = m.offset()
    return ", ".join(f"{p}: {a}..{b}" for p, (a, b) in sorted(spans.items(), key=lambda kv: kv[0] or 0))


def next_offsets(raw_topic: str, ext: Extracted) -> list[TopicPartition]:
    """The offsets to commit after a batch: one past its last record (good or bad) in each raw partition."""
    last = dict(zip(ext.partitions, ext.offsets, strict=True))  # offsets ascend per partition: last = max
    for b in ext.bad:
        p, o = b.message.partition(), b.message.offset()
        if p is not None and o is not None and o > last.get(p, -1):
            last[p] = o
    return [TopicPartition(raw_topic, p, o + 1) for p, o in last.items()]
