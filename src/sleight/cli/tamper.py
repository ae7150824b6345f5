"""``sleight tamper ...`` subcommands (Sleight of Word)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tamper", help="Sleight of Word: swap a word of the model's own reply while it writes")
    p.add_subparsers(dest="tamper_command", metavar="SUBCOMMAND", required=True)
