"""``sleight readout forecast-readouts``: the reader forecast at six readouts, paired intervals."""

from __future__ import annotations

import argparse

from sleight.cli.common import add_model_args, model_from_args
from sleight.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "forecast-readouts",
        help="the reader forecast read eight ways: original, stem, instruction deleted, another template with and without its stem, the continuation's number, the short stems 'Number: ' and 'Forecast: '",
        description=(
            "Run the reader-forecast pipeline (notes, note-only reader, forecast), then read the forecast with the quoted "
            "instruction deleted, through an alternative template ({note}, {item}) with and without its stem, and from the "
            "number in the greedy continuation; AUROC/Brier per readout and every pair's paired difference on the same "
            "bootstrap replicates. Writes forecast_readouts.json and forecast_readouts.md."
        ),
    )
    p.add_argument("--items", help="RACE-style JSONL (id, passage, question, choices[4], answer); default: shipped race_items")
    p.add_argument("--limit", type=int, help="use only the first N items")
    p.add_argument("--template", help="alternative forecast template (placeholders {note} and {item}); default: the shipped one")
    p.add_argument("--template-stem", help="the alternative template's answer stem (default: T1's 'Estimate: ', App. I)")
    p.add_argument("--bootstrap", type=int, default=20000, help="bootstrap replicates (default: 20000)")
    p.add_argument("--out", default="runs/readout-forecast-readouts", help="output directory")
    add_model_args(p)
    p.set_defaults(func=cmd_forecast_readouts)


def cmd_forecast_readouts(args: argparse.Namespace) -> int:
    from sleight.readout.forecast.pipeline import DEFAULT_ITEMS, load_race_items
    from sleight.readout.forecast.readouts import load_alt_template, run_forecast_readouts

    if args.bootstrap < 1:
        raise UserError("--bootstrap must be at least 1")
    items = load_race_items(args.items or DEFAULT_ITEMS, limit=args.limit)
    template = load_alt_template(args.template)
    summary = run_forecast_readouts(
        model_from_args(args), items, args.out, template=template, stem=args.template_stem, B=args.bootstrap, status=lambda m: print(m, flush=True)
    )
    print(f"forecast readouts -> {args.out} ({summary['n_scored']} of {summary['n_items']} items scored)")
    return 0
