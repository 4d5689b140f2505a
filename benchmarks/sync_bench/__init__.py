"""Cooperative-Dalton measurements: in-process sync rounds, convergence experiments, overhead over a broker."""
