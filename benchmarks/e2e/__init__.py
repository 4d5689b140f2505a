"""``skewroute e2e-bench``: what routing buys a Spark user, against what they would do without skewroute.

:mod:`.measures` holds the pure computations (latency per record, list-scheduling makespan, CPU of a process
tree), :mod:`.plan` the configurations and their settings, :mod:`.run` the orchestration and :mod:`.report`
the report.
"""
