"""Partitioners by name: the built-in ones, third-party ones registered in code or via entry points."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from router.partitioners.base import DEFAULT_WINDOW, Partitioner
from schemas.exceptions import ConfigError, UnknownPartitionerError
from schemas.partitioner_settings import settings_model
from schemas.settings import WindowSettings

__all__ = ["ENTRY_POINT_GROUP", "available", "create", "get", "register"]

#: Third-party packages expose partitioners as ``name = "module:Class"`` in this entry-point group.
ENTRY_POINT_GROUP = "skewroute.partitioners"

_REGISTRY: dict[str, str | type[Partitioner]] = {
    "hash": "router.partitioners.simple:HashPartitioner",
    "shuffle": "router.partitioners.simple:ShufflePartitioner",
    "pkg": "router.partitioners.pkg:PKGPartitioner",
    "cm": "router.partitioners.holistic:CMPartitioner",
    "am": "router.partitioners.holistic:AMPartitioner",
    "cam": "router.partitioners.holistic:CAMPartitioner",
    "lm": "router.partitioners.holistic:LMPartitioner",
    "fish": "router.partitioners.fish:FISHPartitioner",
    "dalton": "router.partitioners.dalton:DaltonPartitioner",
    "prompt": "router.partitioners.prompt:PromptPartitioner",
    "dchoices": "router.partitioners.choices:DChoicesPartitioner",
    "wchoices": "router.partitioners.choices:WChoicesPartitioner",
}
_entry_points_loaded = False


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _REGISTRY.setdefault(ep.name, ep.value)


def register(name: str, factory: str | type[Partitioner], *, replace: bool = False) -> None:
    """Register a partitioner class (or a lazy ``"module:Class"`` string) under ``name``."""
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"partitioner name must be alphanumeric (with - or _), got {name!r}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"partitioner {name!r} is already registered (pass replace=True to override)")
    _REGISTRY[name] = factory


def available() -> list[str]:
    """The registered names, sorted."""
    _load_entry_points()
    return sorted(_REGISTRY)


def get(name: str) -> type[Partitioner]:
    """The class registered under ``name``; :class:`UnknownPartitionerError` lists the valid names."""
    _load_entry_points()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownPartitionerError(name, _REGISTRY) from None
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
        _REGISTRY[name] = factory
    return factory


def _errors(name: str, exc: ValidationError) -> ConfigError:
    return ConfigError(
        [f"partitioner {name!r}: {'.'.join(map(str, e['loc']))}={e['input']!r}: {e['msg']}" for e in exc.errors()]
    )


def create(
    name: str,
    n: int,
    *,
    window: float = DEFAULT_WINDOW.size,
    slide: float = DEFAULT_WINDOW.slide,
    seed: int = 0,
    **params: Any,
) -> Partitioner:
    """Create partitioner ``name`` for ``n`` combiners: the one place its arguments are validated.

    ``window`` and ``slide`` are in the unit of the ``times`` given to ``assign`` (tuples for count-based
    windows, milliseconds of event time for time-based ones); their defaults and bounds are
    :class:`~schemas.settings.WindowSettings`'. ``params`` are the algorithm's own settings: a built-in
    partitioner's are validated by its settings model (:func:`schemas.partitioner_settings.settings_model`)
    and passed on as validated; others (``hash_seed`` where the model has none, a plugin's) go to the
    constructor as given. Anything invalid raises :class:`ConfigError` naming the parameter and value.
    """
    cls = get(name)
    if isinstance(n, bool) or not isinstance(n, int | float) or int(n) != n or n < 1:
        raise ConfigError([f"partitioner {name!r}: n={n!r}: must be a positive integer"])
    try:
        WindowSettings(size=window, slide=slide)
    except ValidationError as exc:
        why = "; ".join(e["msg"] for e in exc.errors())
        raise ConfigError([f"partitioner {name!r}: window={window!r}, slide={slide!r}: {why}"]) from None
    model = settings_model(name)
    if model is not None:
        own = {k: v for k, v in params.items() if k in model.model_fields}
        try:
            valid = model.model_validate({"name": name, **own})
        except ValidationError as exc:
            raise _errors(name, exc) from None
        params.update({k: getattr(valid, k) for k in own})
    try:
        return cls(int(n), window=window, slide=slide, seed=seed, **params)
    except TypeError as exc:
        raise ConfigError([f"partitioner {name!r}: {exc}"]) from exc
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError([f"partitioner {name!r}: {exc}"]) from exc
