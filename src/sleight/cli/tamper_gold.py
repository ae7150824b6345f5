"""``sleight tamper gold``: draw the human gold subset of a judged run (stratified by the jury's labels)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gold`` to the ``sleight tamper`` subcommands."""
    p = sub.add_parser(
        "gold",
        help="draw a sample of judged trials for people to label (stratified by the jury's labels)",
        description=(
            "Draw N judged trials, stratified by the jury's four labels (every combination the jury used gets at "
            "least one trial while N allows), into RUN/gold_sample.json. 'sleight tamper report RUN' then puts them "
            "in the viewer's labelling mode (four checkboxes per trial, exported as a JSON file); "
            "'sleight tamper report RUN --gold FILE' reports each juror's and the jury's agreement with the people."
        ),
    )
    p.add_argument("run", type=Path, metavar="RUN", help="a run directory judged by 'sleight tamper judge'")
    p.add_argument("--sample", type=int, required=True, metavar="N", help="how many trials to draw")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default: 0; the same seed draws the same sample)")
    p.set_defaults(func=cmd_gold)


def cmd_gold(args: argparse.Namespace) -> int:
    from sleight.cli.common import check_writable
    from sleight.errors import UserError

    if not args.run.is_dir():
        raise UserError(f"run directory {args.run} does not exist")
    check_writable(args.run, "RUN")
    from sleight.tamper.jury import gold
    from sleight.tamper.jury import store as jury_store
    from sleight.tamper.jury.judged import load_manifest, model_name

    verdicts = jury_store.load_verdicts(args.run)
    if verdicts is None or not len(verdicts):
        load_manifest(args.run)  # a folder that is not a run says so first
        raise UserError(f"run {args.run} is not judged yet; judge it first: sleight tamper judge --run {args.run} --jury ...")
    sample = gold.draw_sample(verdicts, args.sample, args.seed)
    model = str(verdicts["model"].iloc[0]) if "model" in verdicts.columns else model_name(load_manifest(args.run), args.run)
    path = gold.write_sample(args.run, sample, seed=args.seed, n_requested=args.sample, model=model)
    note = f" (the run has only {len(verdicts)} judged trials)" if args.sample > len(verdicts) else ""
    print(f"drew {len(sample)} of {len(verdicts)} judged trials{note}, seed {args.seed}, into {path}")
    for name, n in sample["stratum"].value_counts().sort_index().items():
        print(f"  {n:>3}  {name}  (of {int((verdicts.apply(lambda r: gold.stratum(r), axis=1) == name).sum())})")
    print(f"next: sleight tamper report {args.run} --out REPORT, open the model's viewer, press 'labelling mode', export the labels,")
    print(f"then: sleight tamper report {args.run} --out REPORT --gold <exported file>")
    return 0
