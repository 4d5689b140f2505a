"""The lab: benchmarks, sweeps, the reproduction suite, soak tests, the demo, workload generators and reports.

A distribution of its own (``skewroute-lab``, ``pip install ./benchmarks``): it imports the product (router
runtime, partitioners, connectors, Spark job) and is never imported by it. Its commands join the ``skewroute``
CLI through the ``skewroute.commands`` entry point (:func:`benchmarks.commands.register`).
"""
