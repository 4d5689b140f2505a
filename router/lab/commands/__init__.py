"""Lab commands of the ``skewroute`` CLI (benchmarks, demo, soak); each module defines ``register(app)``."""
