"""The base of every settings model: frozen, and unknown fields refused (a typo in a config is an error)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["FrozenModel"]


class FrozenModel(BaseModel):
    """A settings model: immutable once validated; an unknown field is a validation error naming it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
