"""``sleight readout audit | compare | report``: audit a scored position, compare audits, re-render.

Inputs are parsed and validated before the model is loaded, so a malformed items file fails in a
second with its line number.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sleight.cli.common import add_limit_arg, add_model_args, add_output_args, add_progress_arg, check_writable, model_from_args
from sleight.errors import UserError
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
    src.add_argument("--data", help="preset records: a .jsonl/.csv file, or hf:race | hf:mmlu[:subject] | hf:triviaqa (cached; default: shipped fixtures)")
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


def _items_from_args(args: argparse.Namespace):
    """Validated items and the config (no model needed)."""
    from sleight.readout.audit.items import load_items, parse_options, resolve_options
    from sleight.readout.audit.variants import parse_variants

    if bool(args.items) == bool(args.preset):
        raise UserError("give exactly one of --items FILE or --preset NAME")
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be at least 1, got {args.limit}")
    if not args.instruct and args.preset != "ptrue":
        raise UserError("--no-instruct applies to --preset ptrue only")
    if args.max_new_tokens < 1:
        raise UserError("--max-new-tokens must be at least 1")
    if not 0 < args.floor <= 1:
        raise UserError("--floor must be in (0, 1]")
    run_options = parse_options(args.options) if args.options is not None else None
    stem = args.stem
    if args.preset:
        from sleight.readout.audit.presets import preset_defaults, preset_items
        from sleight.readout.audit.sources import load_source

        records = load_source(args.data, limit=args.limit) if args.data else None
        items = preset_items(args.preset, records, note=args.note, limit=args.limit if records is None else None, instruct=args.instruct)
        defaults = preset_defaults(args.preset)
        if run_options is not None:
            from dataclasses import replace

            items = [replace(i, options=run_options) for i in items]
        stem = stem if stem is not None else defaults["stem"]
        source = f"preset {args.preset} ({args.data or 'shipped fixtures'})"
        name = args.preset
    else:
        path = Path(args.items)
        if path.suffix.lower() in (".yaml", ".yml"):
            from sleight.readout.audit.lm_eval import load_lm_eval_task

            items = load_lm_eval_task(path, chat=True if args.lm_eval_chat else None, limit=args.limit)
        else:
            items = load_items(path)
            if args.limit is not None:
                items = items[: args.limit]
        source = str(path)
        name = path.stem
    items = resolve_options(items, run_options)
    from sleight.readout.audit.run import AuditConfig  # pandas and pyarrow: only once the inputs are good

    config = AuditConfig(
        source=source,
        preset=args.preset,
        options=run_options,
        stem=stem or None,
        variants=parse_variants(args.variants),
        max_new_tokens=args.max_new_tokens,
        floor=args.floor,
        rows_per_pass=max(1, args.batch_size),
    )
    return items, config, name


def cmd_audit(args: argparse.Namespace) -> int:
    items, config, name = _items_from_args(args)
    from sleight.readout.audit.run import run_audit

    out = check_writable(args.out or f"runs/readout-audit-{name}", "--out")
    if args.threads:
        import torch

        torch.set_num_threads(max(1, args.threads))
    model = model_from_args(args)
    result = run_audit(model, items, out, config, overwrite=args.overwrite, show_progress=not args.no_progress)
    _print_result(result)
    return 0


def _print_result(result) -> None:
    s = result.summary["variants"]
    orig, stem = s.get("original", {}), s.get("stem", {})
    print(f"\nreadout audit -> {result.out_dir}")
    for c in result.checks:
        print(f"  {c.number}. {c.name:<38} {c.verdict.upper():<8} {c.reason}")
    print(f"  median option mass: original {fmt(orig.get('mass_median'))}, stem {fmt(stem.get('mass_median'))}; "
          f"answer-letter rate: original {fmt(orig.get('answer_letter_rate'))}, stem {fmt(stem.get('answer_letter_rate'))}")
    for key, path in result.files.items():
        print(f"  {key:<12} {path}")




def cmd_report(args: argparse.Namespace) -> int:
    from sleight.readout.audit.run import finalise

    out = Path(args.dir)
    if not out.is_dir():
        raise UserError(f"audit directory not found: {out}")
    check_writable(out, "DIR")
    floor = args.floor
    if floor is None:
        try:
            floor = json.loads((out / "summary.json").read_text()).get("floor", 0.5)
        except (OSError, ValueError):
            floor = 0.5
    result = finalise(out, floor=floor)
    _print_result(result)
    return 0


COMPARE_KEYS = (
    ("mass_median", "median mass"),
    ("mass_below_floor", "below floor"),
    ("mass_null", "no mass"),
    ("answer_letter_rate", "letter rate"),
    ("option_argmax_rate", "option argmax"),
    ("on_task_rate", "on task"),
    ("score_mean", "mean score"),
)


def compare_markdown(a: Path, b: Path) -> str:
    """Two audits' variant tables side by side (values as ``a / b``)."""
    sa, sb = (_load_summary(d) for d in (a, b))
    va, vb = sa["variants"], sb["variants"]
    variants = list(dict.fromkeys([*va, *vb]))
    head = ["variant", *[label for _, label in COMPARE_KEYS], "downstream"]
    lines = [f"Comparing A = `{a}` and B = `{b}` (cells: A / B).", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in variants:
        x, y = va.get(v, {}), vb.get(v, {})
        cells = [v] + [f"{fmt(x.get(k))} / {fmt(y.get(k))}" for k, _ in COMPARE_KEYS]
        cells.append(f"{_down(x)} / {_down(y)}")
        lines.append("| " + " | ".join(cells) + " |")
    ca = {c["number"]: c["verdict"] for c in sa.get("checks", [])}
    cb = {c["number"]: c["verdict"] for c in sb.get("checks", [])}
    if ca or cb:
        lines += ["", "| check | A | B |", "|---|---|---|"]
        names = {c["number"]: c["name"] for c in [*sa.get("checks", []), *sb.get("checks", [])]}
        for n in sorted(names):
            lines.append(f"| {n}. {names[n]} | {ca.get(n, '–')} | {cb.get(n, '–')} |")
    return "\n".join(lines) + "\n"


def _load_summary(d: Path) -> dict:
    path = d / "summary.json"
    if not path.is_file():
        raise UserError(f"{d} is not an audit directory (no summary.json)")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None




def _down(s: dict) -> str:
    d = s.get("downstream")
    return f"{d['metric']} {d['value']:.3f}" if d else "–"


def cmd_compare(args: argparse.Namespace) -> int:
    if args.out:
        check_writable(args.out, "--out", file=True)
    text = compare_markdown(Path(args.a), Path(args.b))
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0
