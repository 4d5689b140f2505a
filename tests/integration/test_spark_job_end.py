"""``run_job``: a streaming query that ends by itself is an error, even when Spark reports none.

A query whose thread dies of a JVM error (a ``StackOverflowError``, say) ends with no exception; stopping it
from elsewhere looks the same to the job, and is how this test ends it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings, SkewrouteSettings
from spark_consumers.job import run_job

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _stop_the_first_query(spark: Any) -> None:
    deadline = time.monotonic() + 120
    while not spark.streams.active and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)
    for query in spark.streams.active:
        query.stop()


def test_a_streaming_query_that_ends_by_itself_fails_the_run(spark, kafka: KafkaSettings, topic: str, tmp_path) -> None:
    settings = SkewrouteSettings.load(
        kafka=kafka.model_dump(),
        routes=[{"raw_topic": topic, "combiners": 2}],
        spark={"trigger_interval": "1 second", "checkpoint_dir": str(tmp_path / "ck")},
    )
    ensure_topics(make_admin(kafka), [TopicSpec(settings.routes[0].combiner_topic_name, 2, exact=True)])
    stopper = threading.Thread(target=_stop_the_first_query, args=(spark,), daemon=True)
    stopper.start()
    with pytest.raises(RuntimeError, match="ended by itself without an error"):
        run_job(settings, spark=spark)
    stopper.join(5)
