"""What the connected broker guarantees, detected at run time (Tansu's quirks vs Apache Kafka's behaviour).

Tansu (the embedded broker) differs from Apache Kafka in ways the code must know about:

- its advertised end offset (high watermark) is the start of the last record batch + 1, so the true end of a
  partition must be probed (:func:`connectors.kafka_offsets.probe_ends`); Apache Kafka's is exact;
- it never aborts the open transaction of a producer that was fenced or died, so ``read_committed`` readers
  stall at it (readers use ``read_uncommitted`` plus deduplication on the source position); Apache Kafka aborts
  it when the successor calls ``init_transactions`` (or when the transaction times out);
- it never expires a static group member (``group.instance.id``) that stopped heartbeating, so a killed
  static member's partitions are never handed to the survivors; Apache Kafka does after ``session.timeout.ms``;
- a reader fetching while several transactional producers write one partition can step past a batch the
  topic holds (it hands out a batch's offsets before storing it): router/DATAPLANE.md;
- its low watermark (``ListOffsets`` EARLIEST) is the first offset of the batch with the oldest write time, not
  the lowest offset; with several producers writing one partition it can lie past records it holds, and a fetch
  returns only batches starting at or after the offset asked, so readers starting there skip those records
  (:func:`connectors.kafka_offsets.watermarks` gives 0 instead);
- it holds a fetch that found no records for much of its ``fetch.wait.max.ms`` even if records arrive meanwhile
  (a message reached an idle reader after up to 241 ms at 500 ms; Apache Kafka answers as soon as records
  arrive): a reader that must see messages quickly needs a short wait there, which on Apache Kafka would only
  multiply the fetch requests;
- it has no retention, no compaction and no authentication.

Detection: Tansu names its cluster ``tansu_cluster`` and answers a broker-config request with no entries;
Apache Kafka answers with its full configuration. A broker that is neither is treated like Apache Kafka only if
it returns broker configs (a managed Kafka does); otherwise as quirky as Tansu (the safe side).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from confluent_kafka.admin import ConfigResource

from connectors.kafka import make_admin
from schemas.exceptions import BrokerError
from schemas.settings import KafkaSettings

__all__ = [
    "BrokerTraits",
    "detect_broker",
    "is_tansu_cluster",
    "resolve_fetch_wait",
    "resolve_isolation_level",
    "resolve_static_membership",
]

BrokerKind = Literal["apache", "tansu", "unknown"]


@dataclass(frozen=True)
class BrokerTraits:
    """The detected broker and which of Tansu's workarounds it needs."""

    kind: BrokerKind
    cluster_id: str | None
    brokers: int

    @property
    def kafka_semantics(self) -> bool:
        """Exact end offsets, fenced transactions aborted, retention and compaction (Apache Kafka's)."""
        return self.kind == "apache"

    @property
    def exact_end_offsets(self) -> bool:
        """The high watermark is the true end of a partition (no probing needed)."""
        return self.kafka_semantics

    @property
    def expires_static_members(self) -> bool:
        """A dead static member (``group.instance.id``) loses its partitions after ``session.timeout.ms``."""
        return self.kafka_semantics

    @property
    def holds_fetches_to_the_end(self) -> bool:
        """A fetch with no data waits for much of ``fetch.wait.max.ms`` even when records arrive meanwhile (Tansu)."""
        return self.kind == "tansu"

    @property
    def aborts_fenced_transactions(self) -> bool:
        """A dead transactional producer's open transaction is aborted (``read_committed`` never stalls)."""
        return self.kafka_semantics


def is_tansu_cluster(cluster_id: str | None) -> bool:
    """Whether a cluster id is Tansu's (it names its cluster ``tansu_cluster``)."""
    return cluster_id is not None and cluster_id.startswith("tansu")


def detect_broker(kafka: KafkaSettings, timeout: float = 10.0) -> BrokerTraits:
    """Ask the cluster what it is (metadata, then one broker's configuration)."""
    admin = make_admin(kafka)
    try:
        md = admin.list_topics(timeout=timeout)
    except Exception as exc:  # KafkaException: no broker reachable
        raise BrokerError(f"cannot detect the broker at {kafka.bootstrap_servers}: {exc}") from exc
    cluster_id = md.cluster_id
    if is_tansu_cluster(cluster_id):
        return BrokerTraits("tansu", cluster_id, len(md.brokers))
    node = str(next(iter(md.brokers)))
    try:
        futures = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, node)])
        configs = next(iter(futures.values())).result(timeout=timeout)
    except Exception:  # a broker that refuses DescribeConfigs (no permission): assume nothing
        configs = {}
    kind: BrokerKind = "apache" if "transaction.state.log.replication.factor" in configs else "unknown"
    return BrokerTraits(kind, cluster_id, len(md.brokers))


def resolve_isolation_level(setting: str, kafka: KafkaSettings) -> str:
    """``auto`` -> ``read_committed`` where fenced transactions are aborted, else ``read_uncommitted``."""
    if setting != "auto":
        return setting
    return "read_committed" if detect_broker(kafka).aborts_fenced_transactions else "read_uncommitted"


def resolve_static_membership(
    setting: bool | str, instance_id: str | None, kafka: KafkaSettings, timeout: float = 10.0
) -> tuple[bool, str]:
    """Whether a router joins its groups as a static member, and why (for the log).

    ``true``/``false`` are honoured as given; ``auto`` is on only with an explicit instance id (the default
    host-pid changes on every restart, so it would only leave stale members behind) on a broker that expires a
    static member that stopped heartbeating (Apache Kafka); off on Tansu and on brokers that are neither.
    """
    if setting is True or setting is False:
        return setting, "router.static_membership is set"
    if setting != "auto":
        raise ValueError(f"router.static_membership: expected true, false or auto, got {setting!r}")
    if not instance_id:
        return False, "auto: no explicit router.instance_id"
    try:
        traits = detect_broker(kafka, timeout)
    except BrokerError as exc:  # the data plane will report the broker; membership stays dynamic (safe side)
        return False, f"auto: the broker could not be detected ({exc})"
    if traits.expires_static_members:
        return True, "auto: the broker is Apache Kafka (it expires dead static members)"
    return False, f"auto: the broker is {traits.kind} (it may never expire a dead static member)"


def resolve_fetch_wait(
    setting: int | str, kafka: KafkaSettings, *, quick_ms: int, usual_ms: int, timeout: float = 10.0
) -> tuple[int, str]:
    """``fetch.wait.max.ms`` for a reader that must see each message quickly, and why (for the log).

    An integer is honoured as given; ``auto`` is ``quick_ms`` on a broker that holds a fetch to the end of its
    wait (Tansu) and when the broker cannot be detected, ``usual_ms`` elsewhere.
    """
    if setting != "auto":
        if isinstance(setting, bool) or not isinstance(setting, int) or setting < 1:
            raise ValueError(f"fetch wait: expected an integer >= 1 or auto, got {setting!r}")
        return setting, "set"
    try:
        traits = detect_broker(kafka, timeout)
    except BrokerError as exc:
        return quick_ms, f"auto: the broker could not be detected ({exc})"
    if traits.holds_fetches_to_the_end:
        return quick_ms, f"auto: the broker is {traits.kind} (it holds a fetch for its whole wait)"
    return usual_ms, f"auto: the broker is {traits.kind} (it answers a fetch when a message arrives)"
