"""Readout audit: does a constrained-option score read what the model is about to say?

Public API (the CLI ``sleight readout audit|compare|report`` is a thin layer over it)::

    from sleight.readout import load_items, preset_items, run_audit, AuditConfig
    from sleight.readout.ptrue import READOUTS, score_pairs            # P(True): the readout registry
    from sleight.readout.measure import measure                        # per-(item, variant) readings
    from sleight.position import read_positions                        # one reading of a scored position

See the README (Readout audit) for the output schema and the rules behind every class and verdict.
"""

from sleight.readout.audit import AuditConfig, AuditResult, finalise, load_readings, run_audit
from sleight.readout.checks import Check, run_checks, summarise
from sleight.readout.items import AuditItem, load_items, parse_options, resolve_options
from sleight.readout.measure import SCHEMA, measure, renormalised_score
from sleight.readout.presets import preset_items
from sleight.readout.variants import SUBSTITUTES, VARIANTS

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
