"""The skewroute router: Faust worker, batched data plane, Dalton sync and the CLI.

Kept import-light: ``router.partitioners`` must stay usable without Kafka, Faust or Spark.
"""
