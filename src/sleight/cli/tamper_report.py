"""CLI for part of an instrument (placeholder until its subcommands land)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to ``sub``."""
