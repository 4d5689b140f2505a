"""The settings models are the one source of the partitioners' defaults and bounds.

Constructors read their defaults from the models and check nothing; ``create`` validates with the models.
"""

from __future__ import annotations

import inspect
import math
import typing
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel

from router.partitioners import create, get
from schemas import partitioner_settings as ps

_MODELS: list[tuple[str, type[BaseModel]]] = []
for _member in typing.get_args(typing.get_args(ps.PartitionerSettings)[0]):
    if _member is ps.CustomPartitionerSettings:
        continue
    for _name in typing.get_args(_member.model_fields["name"].annotation):
        _MODELS.append((_name, _member))


def _ctor_defaults(name: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for cls in get(name).__mro__:
        if "__init__" in vars(cls):
            for p in inspect.signature(vars(cls)["__init__"]).parameters.values():
                if p.default is not inspect.Parameter.empty:
                    params.setdefault(p.name, p.default)
    return params


@pytest.mark.parametrize(("name", "model"), _MODELS, ids=[n for n, _ in _MODELS])
def test_settings_defaults_equal_the_constructor_defaults(name: str, model: type[BaseModel]) -> None:
    settings = model.model_validate({"name": name})
    if "settings" in inspect.signature(get(name).__init__).parameters:  # the constructor takes the model itself
        part = create(name, 4, window=1_000, slide=100)
        assert getattr(part, "settings") == settings  # noqa: B009 - not every partitioner has it
        return
    ctor = _ctor_defaults(name)
    params = settings.params()  # type: ignore[attr-defined]
    assert set(params) <= set(ctor), f"settings fields the constructor does not take: {set(params) - set(ctor)}"
    assert {k: v for k, v in params.items()} == {k: ctor[k] for k in params}


def _outside(bound: Any) -> tuple[str, float] | None:
    if isinstance(bound, annotated_types.Ge):
        return "ge", bound.ge - (1 if isinstance(bound.ge, int) else 1e-9)
    if isinstance(bound, annotated_types.Gt):
        return "gt", bound.gt
    if isinstance(bound, annotated_types.Le):
        return "le", bound.le + (1 if isinstance(bound.le, int) else 1e-9)
    if isinstance(bound, annotated_types.Lt):
        return "lt", bound.lt
    return None


_BOUNDS = [
    (name, field, *out)
    for name, model in _MODELS
    for field, info in model.model_fields.items()
    for bound in info.metadata
    if (out := _outside(bound)) is not None
]


@pytest.mark.parametrize(("name", "field", "kind", "value"), _BOUNDS, ids=[f"{b[0]}.{b[1]}.{b[2]}" for b in _BOUNDS])
def test_a_value_the_settings_refuse_is_refused_by_create(name: str, field: str, kind: str, value: float) -> None:
    n = 8
    if field == "d" and kind == "le":
        n = int(value) + 1  # d is also capped by n: make n large enough that only the bound applies
    if not math.isfinite(value):
        pytest.fail(f"unbounded value for {name}.{field}")
    with pytest.raises(ValueError):
        create(name, n, **{field: value})


def test_create_passes_the_validated_values() -> None:
    part = create("fish", 4, epoch=300.0, k_max="50")
    assert part.params()["epoch"] == 300 and type(part.params()["epoch"]) is int
    assert part.params()["k_max"] == 50


def test_window_defaults_are_the_window_settings() -> None:
    from schemas.settings import WindowSettings

    part = create("pkg", 4)
    assert (part.window, part.slide) == (WindowSettings().size, WindowSettings().slide)
