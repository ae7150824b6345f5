"""``sleight tamper judge | report | view``: the jury, the tables and plots, the site."""

from __future__ import annotations

import argparse
from pathlib import Path

from sleight.cli.common import add_output_args
from sleight.cli.jury_args import add_jury_args, loader_from_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``judge``, ``report`` and ``view`` to the ``sleight tamper`` subcommands."""
    p = sub.add_parser(
        "judge",
        help="label every trial with >=1 swap by a jury of judge models",
        description=(
            "Ask each juror for four independent labels per trial (flagged, corrected, derailed, "
            "switch_aware) as JSON. Under the study's conventions (the default for a run made under them): free-text "
            "votes, greedy, 256 tokens, asked once, an unparsable reply read as false, a label true when two jurors "
            "say so. Under --conventions sleight: label slots on local jurors, a JSON schema on servers, 200 tokens, "
            "an unparsable reply asked once more and then recorded as an abstention, a majority of valid votes. "
            "Votes go to RUN/judgements.parquet/, the verdicts to RUN/verdicts.parquet. "
            "Resumable: stored votes are skipped."
        ),
    )
    p.add_argument(
        "--run", required=True, type=Path, nargs="+", metavar="RUN_DIR",
        help="run directories written by 'sleight tamper run', or a folder of them (the --out of 'sleight tamper sweep')",
    )
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument(
        "--prompt", default="default", choices=["default", "no-answers"],
        help="shipped judge prompt; 'no-answers' leaves out the accepted answers, as the study's jury had none (default: default)",
    )
    prompt.add_argument(
        "--prompt-file", type=Path, default=None, metavar="FILE",
        help="run the study's own judge prompt instead: its src/awareness/judge.py at 08d2bae, unchanged (pinned by the "
        "sha256 of its bytes; SYSTEM and USER_TEMPLATE are read from the file, never run; docs/jury.md has the command "
        "that fetches it). Under the study's conventions that file is the only one taken: any other (an edited copy, a "
        "YAML copy of its templates) is refused in one line. Under --conventions sleight any prompt file runs, recorded as "
        "a variant: the study's module or YAML with 'system' and 'user' format templates using {query}, {trigger}, "
        "{replacement}, {reaction} (and optionally {answers}). Replies are read with the study's fields (flagged, "
        "corrected, derailed, aware, confidence, rationale): a missing label is false, an unparsable reply unknown "
        "(a false vote under the study's conventions, an abstention under sleight's)",
    )
    p.add_argument(
        "--conventions", default=None, choices=["study", "sleight"],
        help="the jury's rules: study (the study's jury: free text, 256 tokens, no retry, unparsable = false, only the "
        "study's pinned --prompt-file) or "
        "sleight (slots/schema, 200 tokens, one retry, unparsable = abstention); default: the conventions the runs were made under",
    )
    add_jury_args(p, max_tokens=None, vote_auto="free text under the study's conventions; slots on local jurors, schema on servers under sleight's")
    p.set_defaults(func=cmd_judge)

    p = sub.add_parser(
        "report",
        help="leaderboard tables (md/csv/tex), plots and the HTML site for one or more runs",
        description="One row per model (one run per model). Writes leaderboard.md/.csv/.tex, the other tables as CSV, PNG plots, index.html and a viewer per model.",
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (judged or not), or a folder of them (a sweep's --out)")
    add_output_args(p, "runs/tamper-report", what="report directory")
    p.add_argument("--no-site", action="store_true", help="skip index.html and the viewers")
    p.add_argument(
        "--gold",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="people's labels exported by the viewer's labelling mode (repeatable, one file per model): adds each "
        "juror's and the jury's accuracy and Cohen's kappa per label",
    )
    p.add_argument(
        "--config", default=None, metavar="FILE|study",
        help="a sweep file (or 'study', the study's 19 models) whose subjects give each run its display name, "
        "thinking-capable mark and size, and whose pairs give the matched thinking pairs (default: run names, no marks)",
    )
    p.add_argument(
        "--bootstrap", type=int, default=20000, metavar="B",
        help="bootstrap replicates behind every interval (questions resampled; default: 20000)",
    )
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("view", help="serve a report directory on 127.0.0.1 and print its URL", description="Serve REPORT_DIR over HTTP on loopback until Ctrl-C.")
    p.add_argument("report", type=Path, metavar="REPORT_DIR", help="directory written by 'sleight tamper report'")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    p.set_defaults(func=cmd_view)


def cmd_judge(args: argparse.Namespace) -> int:
    from sleight.cli.common import check_writable
    from sleight.errors import UserError
    from sleight.tamper.jury.run import judge_runs, no_vote_line, summary_lines

    if args.max_new_tokens is not None and args.max_new_tokens < 16:
        raise UserError(f"--max-new-tokens {args.max_new_tokens} is too small for a JSON verdict (use >= 16)")
    from sleight.cli.jury_args import juror_template_kwargs
    from sleight.jury.jurors import parse_jury
    from sleight.rundir import find_runs

    run_dirs = find_runs(args.run, "tamper")  # a sweep folder stands for its runs
    for run in run_dirs:  # the votes are written into the runs
        check_writable(run, "--run")
    summary = judge_runs(
        run_dirs, args.jury, variant=args.prompt, prompt_file=args.prompt_file, vote=args.vote, max_tokens=args.max_new_tokens,
        batch=args.batch_size, limit=args.limit, loader=loader_from_args(args), conventions=args.conventions,
        template_kwargs=juror_template_kwargs(args, parse_jury(args.jury)),
    )  # fmt: skip
    for line in summary_lines(summary):
        print(line)
    if summary.asked and not summary.cast:
        raise UserError(no_vote_line(summary))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from sleight.cli.common import check_writable
    from sleight.rundir import find_runs

    check_writable(args.out, "--out")
    runs = find_runs(args.runs, "tamper")  # before the heavy imports: a mistyped run answers at once
    for g in args.gold:
        if not g.is_file():
            from sleight.errors import UserError

            raise UserError(f"gold file {g} does not exist")
    from sleight.tamper.report.meta import meta_from_config
    from sleight.tamper.report.report import write_report

    meta = meta_from_config(args.config) if args.config else None
    paths = write_report(runs, args.out, site=not args.no_site, gold=args.gold, meta=meta, B=args.bootstrap)
    print(f"tables:  {paths.markdown}, {paths.latex}, " + ", ".join(p.name for p in paths.csv))
    print("plots:   " + ", ".join(str(p) for p in paths.plots))
    if paths.index:
        print(f"site:    {paths.index}  (browse with: sleight tamper view {args.out})")
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from sleight.errors import UserError
    from sleight.tamper.report.site import serve

    if not (args.report / "index.html").is_file():
        raise UserError(f"{args.report} has no index.html; write it with 'sleight tamper report RUN_DIR --out {args.report}'")
    try:
        serve(args.report, port=args.port, ready=lambda url: print(f"serving {args.report} at {url} (Ctrl-C to stop)", flush=True))
    except OSError as exc:
        raise UserError(f"cannot listen on 127.0.0.1:{args.port} ({exc.strerror or exc}); try --port 0") from None
    return 0
