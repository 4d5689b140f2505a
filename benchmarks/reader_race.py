"""Does a reader step past batches while several producers write one partition? A probe of the broker.

P producers (transactional or not) each write N records to partition 0 of a new topic, in transactions or flushes
of 200 records, while one streaming reader (``read_uncommitted``) follows the partition. Afterwards a fresh
reader reads it from the beginning. Records the fresh reader sees and the streaming one never did were stepped
past: the topic holds them, the streaming read skipped them.

On Tansu the streaming reader steps past whole transactions of transactional producers (router/DATAPLANE.md,
"What Tansu does with transactions"); Apache Kafka never does. Run::

    python -m benchmarks.reader_race [--bootstrap HOST:PORT] [--producers 8] [--records 20000] [--rounds 3]

Without ``--bootstrap`` it starts the embedded broker on a free port.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings

__all__ = ["main", "probe"]

#: Records per transaction (or per flush without transactions).
CHUNK = 200


def _produce(bootstrap: str, topic: str, ident: int, records: int, transactional: bool) -> None:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 0}
    if transactional:
        conf["transactional.id"] = f"{topic}-{ident}"
    producer = Producer(conf)
    if transactional:
        producer.init_transactions(30)
    for start in range(0, records, CHUNK):
        if transactional:
            producer.begin_transaction()
        for i in range(start, min(records, start + CHUNK)):
            producer.produce(topic, f"{ident}:{i}".encode(), partition=0)
            producer.poll(0)
        if transactional:
            producer.commit_transaction(30)
        else:
            producer.flush(30)


def _read(bootstrap: str, topic: str, stop: threading.Event, out: set[bytes]) -> None:
    """Follow partition 0 from the beginning until ``stop`` is set and nothing arrived for 2 s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_uncommitted", "fetch.wait.max.ms": 5})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])  # offset 0: benchmarks/topic_reader.py
    quiet_since: float | None = None
    try:
        while True:
            got = [m.value() for m in consumer.consume(10_000, 0.2) if m.error() is None]
            out.update(v for v in got if v is not None)
            if not stop.is_set() or got:
                quiet_since = None
                continue
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 2.0:
                return
    finally:
        consumer.close()


def probe(bootstrap: str, producers: int, records: int, transactional: bool) -> tuple[int, int, int]:
    """One round: (records written, seen by the fresh reader, stepped past by the streaming reader)."""
    topic = f"reader-race-{uuid.uuid4().hex[:8]}"
    ensure_topics(make_admin(KafkaSettings(bootstrap_servers=bootstrap)), [TopicSpec(topic, 1)])
    stop, streamed = threading.Event(), set[bytes]()
    reader = threading.Thread(target=_read, args=(bootstrap, topic, stop, streamed))
    reader.start()
    writers = [threading.Thread(target=_produce, args=(bootstrap, topic, i, records, transactional))
               for i in range(producers)]  # fmt: skip
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    done, fresh = threading.Event(), set[bytes]()
    done.set()
    _read(bootstrap, topic, done, fresh)
    return producers * records, len(fresh), len(fresh - streamed)


def main(argv: list[str] | None = None) -> None:
    """Print, per round and mode, what the streaming reader stepped past."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--bootstrap", help="use this Kafka instead of starting the embedded broker")
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--records", type=int, default=20_000, help="records per producer")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    broker = None
    if args.bootstrap is None:
        broker = EmbeddedBroker(free_port(), state_dir=Path(tempfile.mkdtemp(prefix="reader-race-"))).start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    try:
        for transactional in (False, True):
            for r in range(args.rounds):
                written, fresh, past = probe(bootstrap, args.producers, args.records, transactional)
                mode = "transactional" if transactional else "plain"
                print(f"{mode:13s} round {r + 1}: {args.producers} producers, {written:,} records written, "
                      f"fresh reader {fresh:,}, streaming reader stepped past {past:,}", flush=True)  # fmt: skip
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
