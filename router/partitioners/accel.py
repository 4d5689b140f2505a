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
from typing import Any

__all__ = ["choice_kernels", "compile_loop", "holistic_kernels"]


def compile_loop(fn: Any) -> Any:
    """``fn`` compiled by numba (cached on disk), or ``fn`` itself where numba is missing.

    numba checks a cached function against its own source file only. A loop that calls compiled loops of
    other modules (Dalton's ``sticky_segment`` calls ``sticky.place_keys``) keeps their old code after only
    they are edited: delete the ``__pycache__`` entries ending in ``.nbi``/``.nbc`` then. An installed release
    has fresh files, so its caches are rebuilt.
    """
    try:
        from numba import njit
    except ImportError:  # pragma: no cover - numba is a dependency; the Python loop still works
        return fn
    return njit(cache=True)(fn)


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
