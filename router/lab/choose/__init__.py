"""Choosing for a real stream: a route's sample as a workload (``advise --config``) and a starter config (``init``)."""
