"""``sleight readout scan``: audit the published scorer presets (or an lm-eval task folder) at once.

Inputs (presets, templates, records, task YAMLs) are checked before the model is loaded.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from sleight.cli.common import add_limit_arg, add_model_args, add_output_args, add_progress_arg, model_from_args
from sleight.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``scan`` to ``sleight readout`` (the preset registry is imported only when the command runs)."""
    p = sub.add_parser(
        "scan",
        help="audit the published scorers (G-Eval, relevance labels, AlpacaEval, Kadavath, OpenCompass, lm-polygraph) in one report",
        description=(
            "Run the readout audit for every chosen scorer preset, read the labels as declared and space-prefixed and at "
            "each preset's repair, parse text-parsed replies, and write scan.md / scan.html with one row per preset "
            "(links to each preset's audit report). With --lm-eval-tasks DIR, audit every multiple-choice task YAML "
            "in DIR instead, in plain and chat-template modes. The presets and their sources: docs/scan.md."
        ),
    )
    p.add_argument("--presets", default="all", help="comma-separated presets, or all (default)")
    p.add_argument("--items", action="append", default=[], metavar="[PRESET=]FILE", help="records for a preset (JSONL); PRESET= may be left out when one preset is scanned; repeatable")
    p.add_argument("--template", action="append", default=[], metavar="[PRESET=]FILE", help="the published template (your copy) instead of the shipped one; repeatable")
    p.add_argument("--data", metavar="SPEC", help="the paper's data filled into every preset: race-h:... (Table 11) or summeval:... (App. G; presets geval:DIMENSION)")
    p.add_argument("--lm-eval-tasks", metavar="DIR", help="scan every lm-evaluation-harness multiple-choice task YAML in DIR (plain and chat modes)")
    add_limit_arg(p, "records per preset (or documents per task)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="continuation budget (default: 16; text-parsed replies get 32)")
    p.add_argument("--floor", type=float, default=0.5, help="option-mass floor (default: 0.5)")
    add_output_args(p, None, what="output directory (default: runs/readout-scan, or runs/readout-lm-eval-scan)", overwrite="replace different audits already in --out")
    add_progress_arg(p)
    add_model_args(p)
    p.set_defaults(func=cmd_scan)


def preset_files(values: Sequence[str], presets: Sequence[str], flag: str) -> dict[str, str]:
    """``--items``/``--template`` values as {preset: file}; a bare FILE needs exactly one preset."""
    out: dict[str, str] = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep:
            if len(presets) != 1:
                raise UserError(f"{flag} {v}: name the preset (PRESET=FILE) when scanning more than one")
            name, path = presets[0], v
        if name not in presets:
            raise UserError(f"{flag} {v}: preset '{name}' is not among the scanned presets ({', '.join(presets)})")
        if not Path(path).is_file():
            raise UserError(f"{flag} {v}: file not found: {path}")
        out[name] = path
    return out


def _check_common(args: argparse.Namespace) -> None:
    if args.limit is not None and args.limit < 1:
        raise UserError("--limit must be at least 1")
    if args.max_new_tokens < 1:
        raise UserError("--max-new-tokens must be at least 1")
    if not 0 < args.floor <= 1:
        raise UserError("--floor must be in (0, 1]")


def cmd_scan(args: argparse.Namespace) -> int:
    _check_common(args)
    if args.lm_eval_tasks:
        return _cmd_lm_eval(args)
    from sleight.readout.scan.run import ScanConfig, preset_records, run_scan
    from sleight.readout.scan.scorers import get_scorer, parse_presets, scorer_items

    presets = parse_presets(args.presets)
    templates = preset_files(args.template, presets, "--template")
    records = preset_files(args.items, presets, "--items")
    if args.data and records:
        raise UserError("give one of --items FILE or --data SPEC")
    config = ScanConfig(presets=presets, limit=args.limit, max_new_tokens=args.max_new_tokens, floor=args.floor, templates=templates, records=records, data=args.data)
    for name in presets:  # validate every input before the model loads
        scorer_items(name, preset_records(get_scorer(name), config), template=templates.get(name), limit=args.limit)
    out = Path(args.out or "runs/readout-scan")
    # a resumed scan loads the model only if some preset is left to do
    result = run_scan(lambda: model_from_args(args), out, config, overwrite=args.overwrite, show_progress=not args.no_progress)
    print(f"\nreadout scan -> {out}")
    for r in result.rows:
        flags = "; ".join(r.flags) or "no failure mode found"
        print(f"  {r.preset:<12} {r.verdict.upper():<5} {flags}")
    for key, path in result.files.items():
        print(f"  {key:<10} {path}")
    return 0


def _cmd_lm_eval(args: argparse.Namespace) -> int:
    from sleight.readout.scan.lm_eval import find_tasks, scan_lm_eval_tasks

    if args.items or args.template or args.presets != "all":
        raise UserError("--lm-eval-tasks scans task YAMLs: --presets, --items and --template do not apply")
    tasks = find_tasks(args.lm_eval_tasks, limit=args.limit)
    model = model_from_args(args)
    out = Path(args.out or "runs/readout-lm-eval-scan")
    result = scan_lm_eval_tasks(model, tasks, out, floor=args.floor)
    print(f"\nlm-eval task scan -> {out}")
    for r in result.rows:
        print(f"  {r.task:<24} {r.mode:<6} {'; '.join(r.flags) or 'no failure mode found'}")
    for key, path in result.files.items():
        print(f"  {key:<10} {path}")
    return 0
