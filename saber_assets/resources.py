"""The Dagster edge of the plain configuration: the build's settings and its store as
``ConfigurableResource`` classes generated from the Dagster-free ones (:mod:`saber_config`,
:mod:`saber_store`), so the launchpad shows and checks every option while everything below the
assets stays plain data. The LLM backend and the judge are plain objects the assets receive as
``dg.ResourceParam[...]`` (they are made from the plan, not configured apart from it)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, Self

import dagster as dg
import pydantic

from saber_config import BuildConfig
from saber_config.schema import Section
from saber_store.database import DuckDBStore

if TYPE_CHECKING:
    from saber_config import BuildPlan, PlanReads


def dagster_config(model: type[Section], base: type[pydantic.BaseModel] = dg.Config) -> Any:
    """``model``'s Dagster config class: the same fields, defaults, validators and
    descriptions, each nested section its own generated ``dg.Config`` class."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, Section):
            kind = dagster_config(kind)
            info = pydantic.Field(default_factory=kind, description=info.description)
        fields[name] = (kind, info)
    generated = pydantic.create_model(
        model.__name__, __base__=base, __doc__=model.__doc__, **fields
    )
    generated.__module__ = __name__
    return generated


class BuildSettings(dg.ConfigurableResource):
    """What a stage asks of the build's settings resource: the plain settings back
    (:attr:`config`), their resolved plan and a recording view of it."""

    @classmethod
    def of(cls, config: BuildConfig) -> Self:
        """The resource holding ``config``'s values."""
        return cls(**config.model_dump())

    @cached_property
    def config(self) -> BuildConfig:
        """The plain, validated settings."""
        return BuildConfig.model_validate(self.model_dump())

    def plan(self) -> BuildPlan:
        """The resolved plan of these settings."""
        return self.config.plan()

    def reads(self) -> PlanReads:
        """A fresh recording view of the plan (what a stage reads is its fingerprint)."""
        return self.config.reads()


BuildResource = dagster_config(BuildConfig, BuildSettings)  # the assets' ``build`` resource


class StoreResource(DuckDBStore, dg.ConfigurableResource):
    """The build's DuckDB store as the assets' ``store`` resource."""

    @classmethod
    def of(cls, store: DuckDBStore) -> Self:
        """The resource of ``store``'s file."""
        return cls(**store.model_dump())
