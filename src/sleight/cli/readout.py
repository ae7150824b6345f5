"""``sleight readout ...`` subcommands (readout audit)."""

from __future__ import annotations

import argparse

from sleight.cli import (
    readout_audit,
    readout_downstream,
    readout_estimators,
    readout_forecast_readouts,
    readout_judge,
    readout_labels,
    readout_reproduce,
    readout_scan,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "readout",
        help="Readout audit: does a constrained-option score read what the model will say?",
        description="Readout audit: audit a scored position (audit), compare runs (compare), downstream checks (forecast, ptrue), published scorers (scan), label continuations by a jury (judge) or by people (labels, agreement).",
    )
    rs = p.add_subparsers(dest="readout_command", metavar="SUBCOMMAND", required=True)
    readout_audit.register(rs)
    readout_judge.register(rs)
    readout_labels.register(rs)
    readout_downstream.register(rs)
    readout_scan.register(rs)
    readout_estimators.register(rs)
    readout_forecast_readouts.register(rs)
    readout_reproduce.register(rs)
