"""The kinds of run a table may name (``runs.NAME.command``): one module each, every module's
``KINDS`` registered here by name. A new kind is a new module listed in ``MODULES``."""

from __future__ import annotations

import functools
import importlib

from sleight.readout.reproduce.kinds.base import ModelSettings, Rows, RunContext, RunKind, run_settings

MODULES = ("downstream", "audit", "forecast_readouts", "scan", "estimators", "conditions", "named_items", "constructed_reader")


@functools.cache
def registry() -> dict[str, RunKind]:
    out: dict[str, RunKind] = {}
    for m in MODULES:
        for kind in importlib.import_module(f"{__name__}.{m}").KINDS:
            if kind.name in out:
                raise RuntimeError(f"run kind {kind.name} is defined twice")
            out[kind.name] = kind
    return out


def names() -> tuple[str, ...]:
    return tuple(registry())


def kind(name: str) -> RunKind:
    """The kind named ``name`` (a config names it as a run's ``command``)."""
    return registry()[name]


__all__ = ["MODULES", "ModelSettings", "RunContext", "RunKind", "Rows", "kind", "names", "registry", "run_settings"]
