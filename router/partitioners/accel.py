"""Loading of the compiled (numba) loops, with the pure-Python loops as the fallback.

numba is a dependency, so the compiled kernels are what runs; the Python loops stay the reference (tests
compare both) and serve any interpreter numba does not support. Each loader compiles its module's kernels
on the first call in a process (or loads them from numba's on-disk cache) and returns the module, or ``None``
when numba is missing; the partitioners call it at construction, so the first batch does not pay for it.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

__all__ = ["choice_kernels", "holistic_kernels"]


def _load(name: str) -> ModuleType | None:
    """Import ``router.partitioners.<name>`` and compile its kernels (``warm()``); ``None`` without numba."""
    try:
        module = importlib.import_module(f"router.partitioners.{name}")
    except ImportError:  # pragma: no cover - numba is a dependency; the Python loops still work
        return None
    module.warm()
    return module


@functools.cache
def holistic_kernels() -> ModuleType | None:
    """:mod:`router.partitioners.kernels` (CM, LM, AM and cAM loops), or ``None`` without numba."""
    return _load("kernels")


@functools.cache
def choice_kernels() -> ModuleType | None:
    """:mod:`router.partitioners.kernels_choice` (key codec, PKG and FISH loops), or ``None`` without numba."""
    return _load("kernels_choice")
