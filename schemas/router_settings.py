"""Settings of a router worker process: the ``router:`` section of a config.

Batching, delivery, event-time alignment, the routed format, the Dalton sync channel, the web server, group
membership and logging. Composed into :class:`schemas.settings.SkewrouteSettings`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator

from schemas.model import FrozenModel

__all__ = ["RouterSettings"]


class RouterSettings(FrozenModel):
    """Router worker process settings."""

    app_id: str = Field(
        "skewroute-router", description="Faust app id; each route's data plane consumes in group <app_id>.<route>"
    )
    instance_id: str | None = Field(
        None,
        description="this worker's id (default: <hostname>-<slot>, the slot being the lowest free one on the host: "
        "several workers per host, each keeping its id across restarts)",
    )
    slot_dir: Path | None = Field(
        None,
        description="where the workers of one host claim their slots (default: $TMPDIR/skewroute-<uid>/slots); "
        "containers on one host that share a volume here (and a hostname) get distinct, stable slots",
    )
    web_host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="address the web server (/metrics, /routes, /ready) binds: loopback unless set (0.0.0.0 for "
        "all interfaces, e.g. in a container)",
    )
    web_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="web server port (default: 6066 + the worker's slot on the host, or the next free port)",
    )
    batch_max_records: int = Field(20_000, ge=1, description="most raw records per data-plane batch")
    batch_timeout_ms: int = Field(50, ge=1, description="longest wait to fill a batch")
    align_ms: int = Field(
        0,  # off: it slows a backlog's catch-up; live it adds tens of ms (BENCHMARKS.md, "Router output aligned ...")
        ge=0,
        description="merge the raw partitions a worker reads by event time, within this many ms: records of a "
        "partition further ahead than the slowest partition with records waiting, or caught up less than align_ms of "
        "wall time ago, are held back (one that delivered nothing for 2 s holds nothing back; at most a batch's worth "
        "per partition, the partition paused meanwhile), and what is routed goes out in event-time order, so each "
        "combiner partition fills in event-time order and Spark's micro-batches span less event time (fewer "
        "partials, fewer late records); 0 = off (route in consume order)",
    )
    align_peers: bool = Field(
        True,
        description="with align_ms: the workers of a route also align with each other. Each publishes on "
        "align_topic the lowest event time it may still route (records held back or not yet acknowledged, or next "
        "in a partition with records waiting) and the raw partitions it owns, and routes only records up to "
        "align_ms past the lowest of its peers', so the combiner partitions fill in event-time order across "
        "workers. A worker not heard from for 2 s holds nothing back; raw partitions owned by no worker (a "
        "rebalance) hold every worker back for at most 10 s, and a worker just started or rebalanced holds for "
        "0.54 s. A backlog advances by at least align_ms of event time per exchange (one every 20 ms at most); "
        "false = each worker aligns its own partitions only",
    )
    align_topic: str = Field(
        "skewroute.align",
        min_length=1,
        description="topic (1 partition, created when missing) on which the workers of every route aligned with "
        "align_peers publish their progress in event time; a few small messages per second per worker while it "
        "routes a backlog, none while it is idle",
    )
    max_in_flight: int = Field(
        2,  # measured: BENCHMARKS.md, "Router pipeline"
        ge=1,
        le=16,
        description="at_least_once: most batches produced and not yet committed (the next batches are consumed, "
        "routed and produced while earlier ones are acknowledged; offsets are still committed only after every "
        "output of a batch and of all earlier ones is acknowledged); 1 = wait for each batch before producing the "
        "next. exactly_once always runs one transaction per batch (1 in flight) and refuses a larger value",
    )
    delivery: Literal["at_least_once", "exactly_once"] = Field(
        "at_least_once",
        description="at_least_once: commit raw offsets after the outputs are acked (dedup downstream on (tp, p, o)); "
        "exactly_once: outputs and offsets in one Kafka transaction per batch (read_committed consumers)",
    )
    routed_format: Literal[1, 2] = Field(
        2,
        description="wire format of the routed records this worker writes: 2 = raw value bytes behind a binary "
        "prefix of 15-27 bytes, the record key as Kafka key; 1 = the JSON envelope of earlier releases (readers "
        "accept both on one topic, so workers can be upgraded one by one)",
    )
    routed_compact: bool = Field(
        True,
        description="format 2: write the compact prefix layouts where a batch allows them (6-byte source offset "
        "and event time while both are below 2**48; a 4-byte measure when every measure of the batch is exactly a "
        "single-precision float, else a 5-byte decimal when every measure has at most 9 decimal places and fits "
        "it, e.g. prices), 3-8 bytes less per record. false: only the 19- and 27-byte layouts, which Spark jobs "
        "of releases before the compact layouts also read; upgrade those jobs, then turn it on",
    )
    on_data_loss: Literal["fail", "skip"] = Field(
        "fail",
        description="a committed raw offset below the log start (retention deleted unread records): fail the "
        "worker with a data-loss error naming the offsets, or log it and go on from the log start",
    )
    control_topic: str = Field("skewroute.control", description="Dalton sync control topic")
    dsync_ms: int = Field(1_000, ge=10, description="initial Dalton sync interval (ms)")
    control_fetch_wait_ms: int | Literal["auto"] = Field(
        "auto",
        description="fetch.wait.max.ms of each worker's Dalton control-topic reader (an integer >= 1, or auto): "
        "how long the broker may hold a fetch when no control message is waiting. auto: 50 on Tansu (it holds "
        "an empty fetch for much of its wait, so a longer wait delays every sync message), 500 on other brokers "
        "(Kafka answers as soon as a message arrives; a short wait only adds fetch requests)",
    )
    control_max_bytes: int = Field(
        900_000,
        ge=16_384,
        description="largest Dalton sync message (bytes, after compression; keep it below the control topic's "
        "max.message.bytes): bigger ones are cut, rows of least weight first; bigger ones read are ignored",
    )
    state_dir: Path = Field(Path(".skewroute"), description="where workers keep local state")
    max_key_bytes: int = Field(4096, ge=1, description="longer record keys (UTF-8 bytes) are dead-lettered")
    log_format: Literal["json", "text"] = Field("json", description="router logs: JSON lines or plain text")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="router log level")
    shutdown_timeout_s: float = Field(
        30.0, gt=0, description="on SIGTERM, longest wait for the last batch to be delivered and committed"
    )
    window_metrics: bool = Field(True, description="compute per-window combiner load and replication metrics")
    static_membership: bool | Literal["auto"] = Field(
        "auto",
        description="join the route's consumer groups as a static member (group.instance.id = <instance_id>) so a "
        "restart within kafka.consumer session.timeout.ms does not rebalance; a killed or stopped static member's "
        "partitions move only after that timeout. auto: on with an explicit instance_id on Apache Kafka, off on "
        "Tansu (it never expires a killed static member) and on unknown brokers; true needs instance_id",
    )
    ready_stale_s: float = Field(
        30.0,
        gt=0,
        description="/ready fails when a route has not consumed, or has uncommitted work not committed, for this long",
    )
    dead_letter_prefix_bytes: int = Field(
        1024,
        ge=0,
        le=65_536,
        description="a dead letter too large for the DLQ keeps only this many bytes of the "
        "record (an envelope: reason, source position, size, prefix)",
    )

    @model_validator(mode="after")
    def _stable_transactions(self) -> Self:
        if self.delivery == "exactly_once" and self.max_in_flight > 1 and "max_in_flight" in self.model_fields_set:
            raise ValueError(
                f"max_in_flight={self.max_in_flight}: exactly_once runs one transaction per batch (1 batch in "
                "flight); set max_in_flight to 1 or leave it out"
            )
        if self.control_fetch_wait_ms != "auto" and self.control_fetch_wait_ms < 1:
            raise ValueError(f"control_fetch_wait_ms={self.control_fetch_wait_ms}: expected an integer >= 1 or auto")
        if self.static_membership is True and not self.instance_id:
            raise ValueError(
                "static_membership=true needs a stable router.instance_id (it is the group.instance.id; the default "
                "slot-derived id is stable on one host but not chosen by you)"
            )
        return self
