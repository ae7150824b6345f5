"""``sleight readout audit | compare | report``: audit a scored position, compare audits, re-render.

Argument parsing only: :func:`sleight.readout.audit.run.load_audit` validates the inputs before the
model is loaded (a malformed items file fails in a second with its line number),
:func:`~sleight.readout.audit.run.run_audit` measures, :func:`~sleight.readout.audit.run.rerender`
and :func:`~sleight.readout.audit.report.compare_markdown` re-render.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sleight.cli.common import (
    add_limit_arg,
    add_model_args,
    add_output_args,
    add_progress_arg,
    check_writable,
    model_spec_from_args,
)
from sleight.render import fmt


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``audit``, ``compare`` and ``report`` to ``sleight readout``."""
    p = sub.add_parser(
        "audit",
        help="audit a constrained-option readout: option mass, argmax, continuation, interventions, six checks",
        description=(
            "Read every item's scored position under each variant (original, space, stem, deleted instruction, "
            "deleted choices, fenced, six substituted instructions) and write readings.parquet, summary.json, "
            "report.md and report.html. Give --items FILE (JSONL, CSV or an lm-evaluation-harness task YAML) "
            "or --preset forecast|ptrue|grade (shipped fixtures, or --data)."
        ),
    )
    src = p.add_argument_group("items")
    src.add_argument("--items", help="items file: .jsonl / .csv (id, messages|prompt, ...) or an lm-eval task .yaml")
    src.add_argument("--preset", choices=["forecast", "ptrue", "grade"], help="build items from data with a study's prompt")
    src.add_argument(
        "--data",
        help="preset records: a .jsonl/.csv file, hf:race | hf:mmlu[:subject] | hf:triviaqa (cached; default: shipped fixtures), or the paper's data: "
        "race-h:FILE | mmlu:FILE | triviaqa:FILE | mmlu-pro:FILE | summeval:FILE[:key=value...] (docs/data.md); mmlu: and mmlu-pro: also without --preset",
    )
    src.add_argument("--note", default="mixed", choices=["mixed", "constructed", "unrelated", "both"], help="forecast preset: which notes (default: mixed = alternate constructed/unrelated)")
    add_limit_arg(src, "records/items")
    src.add_argument("--lm-eval-chat", action="store_true", help="lm-eval task: reproduce --apply_chat_template (no target_delimiter; the template's trailing newline moves into the options)")
    src.add_argument("--no-instruct", dest="instruct", action="store_false", help="ptrue preset: the raw prompt string, no chat template (lm-polygraph's instruct=False)")
    p.add_argument("--options", help='run-level options: "10,30,50,70,90" or a JSON list (items may carry their own)')
    p.add_argument("--stem", help="answer stem prefilled in the assistant turn for the 'stem' variant (preset default for forecast)")
    p.add_argument("--variants", default="all", help="comma-separated variants (default: all)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="greedy continuation budget (default: 16)")
    p.add_argument("--floor", type=float, default=0.5, help="option-mass floor (default: 0.5)")
    add_output_args(p, None, what="output directory (default: runs/readout-audit-<preset or items name>)", overwrite="replace a different audit already in --out")
    add_progress_arg(p)
    add_model_args(p, batch_size=16)  # contexts per forward pass: bounds memory
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("compare", help="compare two audit directories: the variant tables side by side")
    p.add_argument("a", help="first audit directory")
    p.add_argument("b", help="second audit directory")
    p.add_argument("--out", help="also write the comparison to this Markdown file")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", help="re-render summary.json, report.md and report.html from an audit directory")
    p.add_argument("dir", help="audit directory (holds readings.parquet)")
    p.add_argument("--floor", type=float, help="option-mass floor (default: the audit's)")
    p.set_defaults(func=cmd_report)


def cmd_audit(args: argparse.Namespace) -> int:
    from sleight.backends import load_model
    from sleight.readout.audit.run import load_audit, run_audit

    spec = model_spec_from_args(args)
    items, config, name = load_audit(
        items=args.items, preset=args.preset, data=args.data, note=args.note, limit=args.limit, lm_eval_chat=args.lm_eval_chat,
        instruct=args.instruct, options=args.options, stem=args.stem, variants=args.variants, max_new_tokens=args.max_new_tokens,
        floor=args.floor, rows_per_pass=spec.batch_size,
    )
    out = check_writable(args.out or f"runs/readout-audit-{name}", "--out")
    result = run_audit(load_model(spec), items, out, config, overwrite=args.overwrite, show_progress=not args.no_progress)
    _print_result(result)
    return 0


def _print_result(result) -> None:
    orig, stem = result.summary.variant("original"), result.summary.variant("stem")
    print(f"\nreadout audit -> {result.out_dir}")
    for c in result.checks:
        print(f"  {c.number}. {c.name:<38} {c.verdict.upper():<8} {c.reason}")
    print(f"  median option mass: original {fmt(orig.mass_median)}, stem {fmt(stem.mass_median)}; "
          f"answer-letter rate: original {fmt(orig.answer_letter_rate)}, stem {fmt(stem.answer_letter_rate)}")
    for key, path in result.files.items():
        print(f"  {key:<12} {path}")


def cmd_report(args: argparse.Namespace) -> int:
    from sleight.readout.audit.run import rerender

    if Path(args.dir).is_dir():
        check_writable(args.dir, "DIR")
    _print_result(rerender(args.dir, floor=args.floor))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from sleight import rundir
    from sleight.readout.audit.report import compare_markdown

    if args.out:
        check_writable(args.out, "--out", file=True)
    text = compare_markdown(Path(args.a), Path(args.b))
    print(text)
    if args.out:
        rundir.write_text(args.out, text)
    return 0
