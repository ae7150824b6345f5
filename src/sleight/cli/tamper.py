"""``sleight tamper ...`` subcommands (Sleight of Word)."""

from __future__ import annotations

import argparse

from sleight.cli import tamper_gold, tamper_report, tamper_run, tamper_sweep


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tamper",
        help="Sleight of Word: swap a word of the model's own reply while it writes",
        description="Sleight of Word: run trials (run; many models and shards: sweep), judge them (judge), tabulate (report), browse (view), draw a human gold subset (gold).",
    )
    ts = p.add_subparsers(dest="tamper_command", metavar="SUBCOMMAND", required=True)
    tamper_run.register(ts)
    tamper_sweep.register(ts)
    tamper_report.register(ts)
    tamper_gold.register(ts)
