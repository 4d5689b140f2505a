"""The settings models and the partitioner constructors state the same defaults (no silent drift)."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest
from pydantic import BaseModel

import schemas.partitioner_settings as ps
from router.partitioners import get

SETTINGS: list[type[BaseModel]] = [
    ps.HashSettings, ps.ShuffleSettings, ps.PKGSettings, ps.HolisticSettings, ps.FISHSettings,
    ps.HeavyChoicesSettings, ps.DaltonSettings, ps.PromptSettings,
]  # fmt: skip


def constructor_defaults(cls: type) -> dict[str, Any]:
    """Keyword defaults of ``cls`` and its bases' ``__init__`` (a subclass' default wins)."""
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.default is not inspect.Parameter.empty:
                out[p.name] = p.default
    return out


@pytest.mark.parametrize(
    ("settings", "name"),
    [(s, n) for s in SETTINGS for n in typing.get_args(s.model_fields["name"].annotation)],
)
def test_settings_defaults_equal_constructor_defaults(settings: type[BaseModel], name: str) -> None:
    defaults = constructor_defaults(get(name))
    for field, info in settings.model_fields.items():
        if field == "name" or (settings is ps.HolisticSettings and field == "p" and name != "lm"):
            continue
        assert field in defaults, f"{name}: setting {field!r} is not a constructor parameter"
        assert defaults[field] == info.default, (
            f"{name}.{field}: settings {info.default!r}, constructor {defaults[field]!r}"
        )
