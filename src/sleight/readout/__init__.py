"""Readout audit (``sleight readout``): does a constrained-option score read what the model is about to say?

Subpackages: :mod:`~sleight.readout.audit` (items, variants, the six checks, reports),
:mod:`~sleight.readout.ptrue` (the P(True) readout registry and the estimators beside it),
:mod:`~sleight.readout.forecast` (the reader-forecast pipeline), :mod:`~sleight.readout.scan`
(published-scorer presets and the scan); :mod:`~sleight.readout.downstream_run` and
:mod:`~sleight.readout.downstream_report` store and report both downstream pipelines. Every reading
of a scored position goes through :mod:`sleight.position`.

May import: ``sleight.backends``, ``sleight.position``, ``sleight.jury``, ``sleight.rundir``,
``sleight.progress``, ``sleight.stats``, ``sleight.errors``. Never ``sleight.tamper`` or ``sleight.cli``.

Public API (the CLI ``sleight readout audit|compare|report`` is a thin layer over it)::

    from sleight.readout import load_items, preset_items, run_audit, AuditConfig
    from sleight.readout.ptrue.readouts import READOUTS, score_pairs            # P(True): the readout registry
    from sleight.readout.audit.measure import measure                        # per-(item, variant) readings
    from sleight.position import read_positions                        # one reading of a scored position

The docs (Readout audit, Schemas) give the output schema and the rules behind every class and verdict.
"""

from importlib import import_module
from typing import Any

# Imported on first use (PEP 562), so that loading one light submodule (the items loader, on the
# CLI's input-checking path) does not pull pandas and pyarrow in through the audit.
_LAZY = {
    **dict.fromkeys(("AuditConfig", "AuditResult", "finalise", "load_readings", "run_audit"), "sleight.readout.audit.run"),
    **dict.fromkeys(("Check", "run_checks", "summarise"), "sleight.readout.audit.checks"),
    **dict.fromkeys(("AuditItem", "parse_options", "resolve_options"), "sleight.readout.audit.items"),
    "load_items": "sleight.readout.audit.loading",
    **dict.fromkeys(("SCHEMA", "measure", "renormalised_score"), "sleight.readout.audit.measure"),
    "preset_items": "sleight.readout.audit.presets",
    **dict.fromkeys(("SUBSTITUTES", "VARIANTS"), "sleight.readout.audit.variants"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sleight.readout' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

__all__ = [
    "SCHEMA",
    "SUBSTITUTES",
    "VARIANTS",
    "AuditConfig",
    "AuditItem",
    "AuditResult",
    "Check",
    "finalise",
    "load_items",
    "load_readings",
    "measure",
    "parse_options",
    "preset_items",
    "renormalised_score",
    "resolve_options",
    "run_audit",
    "run_checks",
    "summarise",
]
