"""The lab: benchmarks, the reproduction suite, the soak test and the demo's plumbing.

It imports the product (router runtime, partitioners, connectors, Spark job) and is never imported by it. It
needs the ``lab`` extra (``pip install 'skewroute[lab]'``: plotting and the sample datasets).
"""
