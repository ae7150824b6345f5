"""The kinds of run a table may name (``runs.NAME.command``): one module each, every module's
``KINDS`` registered here by name. A new kind is a new module listed in ``MODULES``."""

from __future__ import annotations

import functools

from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, checkpoint_spec, run_settings

MODULES = ("downstream", "audit", "forecast_readouts", "scan", "estimators", "conditions", "named_items", "constructed_reader", "vocabulary", "grader", "sequence_mass")


@functools.cache
def registry() -> dict[str, RunKind]:
    from sleight.readout.reproduce.kinds import (
        audit,
        conditions,
        constructed_reader,
        downstream,
        estimators,
        forecast_readouts,
        grader,
        named_items,
        scan,
        sequence_mass,
        vocabulary,
    )  # fmt: skip

    modules = {"downstream": downstream, "audit": audit, "forecast_readouts": forecast_readouts, "scan": scan, "estimators": estimators,
               "conditions": conditions, "named_items": named_items, "constructed_reader": constructed_reader, "vocabulary": vocabulary,
               "grader": grader, "sequence_mass": sequence_mass}  # fmt: skip
    assert tuple(modules) == MODULES
    out: dict[str, RunKind] = {}
    for m in MODULES:
        for kind in modules[m].KINDS:
            if kind.name in out:
                raise RuntimeError(f"run kind {kind.name} is defined twice")
            out[kind.name] = kind
    return out


def names() -> tuple[str, ...]:
    return tuple(registry())


def kind(name: str) -> RunKind:
    """The kind named ``name`` (a config names it as a run's ``command``)."""
    return registry()[name]


__all__ = ["MODULES", "RunContext", "RunKind", "Rows", "kind", "names", "registry", "run_settings", "checkpoint_spec"]
