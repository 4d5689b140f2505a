"""``skewroute demo``: the whole pipeline on embedded defaults, a partitioner against hash, with a report.

:func:`run_demo` runs it; :class:`DemoOptions` are its knobs. Modules: :mod:`.options` (per-run settings),
:mod:`.source` (input and producer), :mod:`.processes` (children and stopping them), :mod:`.pipeline` (one
partitioner's run), :mod:`.checks` (what is measured), :mod:`.live` (progress), :mod:`.report` (output).
"""

from benchmarks.demo.options import DEFAULT_WORKLOAD, DemoOptions
from benchmarks.demo.runner import DemoResult, run_demo

__all__ = ["DEFAULT_WORKLOAD", "DemoOptions", "DemoResult", "run_demo"]
