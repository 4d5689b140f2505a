"""Kafka clients and admin, the embedded broker, the Spark Kafka data source, workloads and datasets."""
