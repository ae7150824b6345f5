"""The ``sleight`` entry point: argument parsing, and user errors as one line with a non-zero exit."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from sleight import __version__
from sleight.errors import UserError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line like every other user error (exit 2), naming the
    command whose ``--help`` tells more; subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    from sleight.cli import common, demo, readout, tamper

    parser = OneLineParser(
        prog="sleight",
        description=(
            "Test whether what a language model registers matches what an evaluation reads or the "
            "model says. Instruments: 'tamper' (Sleight of Word) and 'readout' (readout audit)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"sleight {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common.register(sub)
    demo.register(sub)
    tamper.register(sub)
    readout.register(sub)
    parser.set_defaults(run_argv=main)  # the demo runs its steps as command lines, through this entry point
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for a user error, printed as one line)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    quiet_libraries()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"sleight: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sleight: interrupted; finished work is kept, run the same command again to resume", file=sys.stderr)
        return 130


def quiet_libraries() -> None:
    """transformers' load bars and deprecation notices drown the tool's own output.

    Said through the environment, which transformers reads when it is first imported, so that
    ``--help`` and input errors never pay for importing it; only a transformers already imported
    (the Python API, tests) is told directly.
    """
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", category=FutureWarning)
    if "transformers" in sys.modules:
        from transformers.utils import logging as tlog

        tlog.set_verbosity_error()
        tlog.disable_progress_bar()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
