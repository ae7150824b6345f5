"""``sleight readout ...`` subcommands (readout audit)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("readout", help="Readout audit: does a constrained-option score read what the model will say?")
    p.add_subparsers(dest="readout_command", metavar="SUBCOMMAND", required=True)
