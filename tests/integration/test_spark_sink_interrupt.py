"""A results-sink action interrupted by the query's stop reaches Spark as a stop, in one line.

Spark tells a stop from a failure by matching the Python proxy's error text (a formatted traceback) with
``StreamExecution.PROXY_ERROR``, which recurses once per character; the full Py4J error of an interrupted
action carries a Java stack trace long enough to overflow the stream thread's stack.
"""

from __future__ import annotations

import traceback
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

from spark_consumers.sinks import ActionInterrupted, interrupted_in_one_line

pytestmark = [pytest.mark.spark]


def _proxy_error(spark: Any) -> Any:
    runtime = spark._jvm.org.apache.spark.sql.execution.streaming.runtime
    return getattr(getattr(runtime, "StreamExecution$"), "MODULE$").PROXY_ERROR()


def _as_the_proxy_sends_it(exc: BaseException) -> str:
    """The text Py4J's callback server returns to the JVM when a Python proxy raises ``exc``."""
    try:
        raise exc from None
    except BaseException:
        return traceback.format_exc()


def test_an_interrupted_action_is_recognised_as_a_stop(spark) -> None:
    jvm = spark._jvm
    jvm.java.lang.Thread.currentThread().interrupt()  # PySpark pins this Python thread to one JVM thread
    with pytest.raises(Py4JJavaError) as info:
        jvm.java.lang.Thread.sleep(5_000)
    short = interrupted_in_one_line(info.value)
    assert isinstance(short, ActionInterrupted)
    text = _as_the_proxy_sends_it(short)
    assert len(text) < 1_000
    assert _proxy_error(spark).findFirstIn(text).isDefined()  # Spark ends the query as stopped, not failed


def test_any_other_java_error_is_left_as_it_is(spark) -> None:
    with pytest.raises(Py4JJavaError) as info:
        spark._jvm.java.lang.Class.forName("no.such.Class")
    assert interrupted_in_one_line(info.value) is None
    assert interrupted_in_one_line(ValueError("not from the JVM")) is None
