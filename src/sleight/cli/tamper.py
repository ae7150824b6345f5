"""``sleight tamper ...`` subcommands (Sleight of Word)."""

from __future__ import annotations

import argparse

from sleight.cli import tamper_gold, tamper_report, tamper_run, tamper_sweep
from sleight.cli.common import add_command_group


def register(sub: argparse._SubParsersAction) -> None:
    add_command_group(
        sub,
        "tamper",
        help="Sleight of Word: swap a word of the model's own reply while it writes",
        description="Sleight of Word: run trials (run; many models and shards: sweep), judge them (judge), tabulate (report), browse (view), draw a human gold subset (gold).",
        members=(tamper_run.register, tamper_sweep.register, tamper_report.register, tamper_gold.register),
    )
