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
from sleight.cli.common import add_command_group


def register(sub: argparse._SubParsersAction) -> None:
    add_command_group(
        sub,
        "readout",
        help="Readout audit: does a constrained-option score read what the model will say?",
        description="Readout audit: audit a scored position (audit), compare runs (compare), downstream checks (forecast, ptrue), published scorers (scan), label continuations by a jury (judge) or by people (labels, agreement).",
        members=(
            readout_audit.register,
            readout_judge.register,
            readout_labels.register,
            readout_downstream.register,
            readout_scan.register,
            readout_estimators.register,
            readout_forecast_readouts.register,
            readout_reproduce.register,
        ),
    )
