"""``sleight readout estimators``: P(True) readouts beside lm-polygraph's token-based estimators."""

from __future__ import annotations

import argparse
from pathlib import Path

from sleight.cli.common import add_model_args, model_from_args
from sleight.cli.readout_downstream import add_decode_args
from sleight.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimators",
        help="P(True) readouts against MSP, perplexity and mean token entropy on the model's own answers",
        description=(
            "The model answers each question greedily; every P(True) readout and the token-based uncertainty "
            "estimators (lm-polygraph's own classes where it is installed) score the same answers; AUROC/PRR "
            "against correctness with paired bootstrap differences. Writes estimators.json and estimators.md."
        ),
    )
    p.add_argument("--items", help="questions (JSONL: id, question, answers[, wrong] or id, question, choices, answer); default: shipped qa_items")
    p.add_argument("--data", metavar="SPEC", help="the paper's data instead of --items: mmlu:FILE | triviaqa:FILE | race-h:FILE, with :key=value options (see docs/data.md)")
    p.add_argument("--limit", type=int, help="use only the first N questions")
    p.add_argument("--raw", action="store_true", help="lm-polygraph's non-instruct mode: raw prompts, no chat template")
    p.add_argument("--max-new-tokens", type=int, default=32, help="answer budget (default: 32)")
    add_decode_args(p)
    p.add_argument("--no-polygraph", action="store_true", help="compute the estimators here even where lm-polygraph is installed")
    p.add_argument("--bootstrap", type=int, default=20000, help="bootstrap replicates (default: 20000)")
    p.add_argument("--out", default="runs/readout-estimators", help="run directory (resumed where a killed run stopped; default: runs/readout-estimators)")
    p.add_argument("--overwrite", action="store_true", help="start the run directory over")
    add_model_args(p)
    p.set_defaults(func=cmd_estimators)


def cmd_estimators(args: argparse.Namespace) -> int:
    from sleight.readout.data import load_questions
    from sleight.readout.ptrue.answers import answer_sampling

    if args.max_new_tokens < 1 or args.bootstrap < 1:
        raise UserError("--max-new-tokens and --bootstrap must be at least 1")
    sampling = answer_sampling(args.decode, args.temperature, args.top_k, args.top_p, args.sample_seed)
    items = load_questions(args.items, args.data, limit=args.limit)
    from sleight.readout.ptrue.estimators import run_estimators_dir

    out = Path(args.out)
    result = run_estimators_dir(
        lambda: model_from_args(args), items, out, instruct=not args.raw, max_new_tokens=args.max_new_tokens,
        use_polygraph=not args.no_polygraph, source=args.data or args.items or "shipped qa_items", answer_sampling=sampling,
        B=args.bootstrap, overwrite=args.overwrite,
    )
    print(f"readout estimators -> {out} (estimators by {result.engine}; {result.new_chunks} new parts)")
    for name in ("readings.parquet", "estimators.json", "estimators.md"):
        print(f"  {out / name}")
    return 0
