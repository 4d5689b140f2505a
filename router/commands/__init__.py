"""CLI command groups; each module defines ``register(app)``.

Commands are grouped in ``skewroute --help`` by the panels below: running the product, choosing a partitioner,
and the lab (benchmarks and the demo, in ``benchmarks.commands``).
"""

RUN = "Run"
CHOOSE = "Choose a partitioner"
LAB = "Lab: benchmarks, demo, soak"
