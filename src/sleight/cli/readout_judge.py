"""``sleight readout judge``: a jury labels what the substituted-instruction and deletion
continuations of an audit do, beside the rule classes."""

from __future__ import annotations

import argparse
from pathlib import Path

from sleight.cli.jury_args import add_jury_args, loader_from_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``judge`` to the ``sleight readout`` subcommands."""
    p = sub.add_parser(
        "judge",
        help="label each substituted-instruction / deletion continuation of an audit by a jury",
        description=(
            "Ask each juror which one of four classes each continuation of an audit's substituted-instruction and "
            "deletion variants belongs to: executes the substituted instruction / answers the quoted item / gives the "
            "requested forecast or option / other. Votes go to AUDIT/judgements.parquet/ (resumable: stored votes "
            "are skipped), the majority to AUDIT/verdicts.parquet; the audit report gains the jury's classes beside "
            "the rule classes (agreement, Cohen's kappa)."
        ),
    )
    p.add_argument("run", type=Path, metavar="AUDIT_DIR", help="a directory written by 'sleight readout audit'")
    add_jury_args(p, max_tokens=120)
    p.set_defaults(func=cmd_judge)


def cmd_judge(args: argparse.Namespace) -> int:
    from sleight.cli.common import check_writable
    from sleight.errors import UserError

    if not args.run.is_dir():
        raise UserError(f"audit directory {args.run} does not exist")
    check_writable(args.run, "AUDIT_DIR")
    if args.max_new_tokens < 16:
        raise UserError(f"--max-new-tokens {args.max_new_tokens} is too small for a JSON vote (use >= 16)")
    from sleight.jury.runner import no_vote_line
    from sleight.readout.audit.judge_run import judge_audit, summary_lines

    summary = judge_audit(
        args.run, args.jury, vote=args.vote, max_tokens=args.max_new_tokens, batch=args.batch_size, limit=args.limit, loader=loader_from_args(args)
    )
    for line in summary_lines(summary):
        print(line)
    if summary.asked and not summary.cast:
        raise UserError(no_vote_line(summary.jurors))
    return 0
