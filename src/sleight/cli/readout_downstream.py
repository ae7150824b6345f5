"""``sleight readout forecast`` and ``sleight readout ptrue``: does a score rank its target?

Argument parsing only: the flags become a :class:`~sleight.readout.downstream_run.ForecastConfig` or
:class:`~sleight.readout.downstream_run.PTrueConfig`, and
:func:`~sleight.readout.downstream_run.run_downstream` loads the items (validated before the model
loads), runs the model steps into the run directory ``--out`` (resumable after a kill, a changed
config refused), and writes ``readings.parquet`` (one row per item and scored position / readout),
``summary.json`` (every number of the report, with the run's model record), ``report.md``,
``report.html`` and PNG plots; :func:`~sleight.readout.downstream_run.rescore` is ``--rescore``.
"""

from __future__ import annotations

import argparse
from typing import Any

from sleight.cli.common import (
    RESUME,
    add_model_args,
    add_output_args,
    add_progress_arg,
    check_writable,
    model_from_args,
    model_spec_from_args,
)

DEFAULT_CHUNK, DEFAULT_BATCH_SIZE = 8, 64  # sleight.readout.downstream_run's (not imported: pyarrow loads late)


def _common(p: argparse.ArgumentParser, fixture: str, out: str, data: str, continuation_tokens: int = 16) -> None:
    p.add_argument("--items", default=None, help=f"JSONL items (default: the shipped fixture {fixture})")
    p.add_argument("--data", default=None, metavar="SPEC", help=f"the paper's data instead of --items: {data} (see docs/data.md)")
    add_output_args(p, out, overwrite=RESUME)
    p.add_argument("--limit", type=int, default=None, help="use only the first N items (quick runs)")
    p.add_argument("--B", type=int, default=20000, help="bootstrap replicates (default: 20000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    p.add_argument(
        "--continuation-tokens", type=int, default=continuation_tokens,
        help=f"greedy tokens decoded at each scored position (default: {continuation_tokens})",
    )
    add_progress_arg(p)
    p.add_argument("--rescore", action="store_true", help="no model: re-score the readings already in --out (e.g. with another --B or --seed) and rewrite the reports")
    p.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, metavar="N", help=f"items per committed part: a killed run redoes at most one part (default: {DEFAULT_CHUNK})")
    add_model_args(p, batch_size=DEFAULT_BATCH_SIZE)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``forecast`` and ``ptrue`` to ``sleight readout``."""
    p = sub.add_parser(
        "forecast",
        help="reader-forecast pipeline: does the forecast rank the note-only reader's correctness?",
        description=(
            "The study's pipeline (SPEC 4.4, App. H): the model writes its own note per passage with App. H's writer (greedy, "
            "ending at end-of-sequence, 1-32 words, up to four retries at a smaller budget), answers the item from the note "
            "alone (highest full-sequence log-prob of A-D, spaced and unspaced; the spaced reader's correctness is the target, "
            "as Table 4 reads it), and forecasts how many of 100 such readers "
            "answer correctly, read at the original and the stemmed position. Reports AUROC and Brier per position, the "
            "paired gain with a cluster-bootstrap interval, and the option-mass diagnostics."
        ),
    )
    _common(p, "race_items.jsonl", "runs/readout-forecast", "race-h:FILE[:n=N][:seed=S]", continuation_tokens=48)  # Appendix H's readout (f)
    p.add_argument("--note-words", type=int, default=32, help="App. H's writer keeps notes of 1 to this many words; retry r asks for floor(N/(r+1)) (default: 32)")
    p.add_argument("--note-tokens", type=int, default=256, help="App. H's writer: new tokens an attempt may write (default: 256)")
    p.add_argument(
        "--reader", default="spaced", choices=["spaced", "unspaced"],
        help="whose correctness is the target: the reader of ' A'..' D' (spaced, Table 4; default) or of 'A'..'D'",
    )
    p.set_defaults(func=cmd_forecast)

    p = sub.add_parser(
        "ptrue",
        help="P(True) experiment: do five readouts of lm-polygraph's prompt rank answer correctness?",
        description=(
            "The model answers each question (greedily, or sampled with --decode sampled); correctness is the first standalone "
            "letter (lettered items) or the first line matching an alias after normalisation (free answers). lm-polygraph's P(True) prompt is read five ways (Library, "
            "Renormalised, Labels in place, Moved, Deleted); each gets AUROC and PRR with intervals, its option mass and "
            "argmax class at the scored position, and paired differences between every pair of readouts."
        ),
    )
    _common(p, "qa_items.jsonl", "runs/readout-ptrue", "mmlu:FILE | triviaqa:FILE | race-h:FILE, with :key=value options")
    p.add_argument(
        "--answers",
        default="both",
        choices=["own", "constructed", "both"],
        help="own: the model's greedy answers (lm-polygraph's setting); constructed: gold vs wrong answer per question; both (default)",
    )
    p.add_argument("--max-new-tokens", type=int, default=32, help="greedy budget for the model's answers (default: 32)")
    p.add_argument("--no-instruct", dest="instruct", action="store_false", help="lm-polygraph's instruct=False: answer and score the raw prompt strings, no chat template")
    add_decode_args(p)
    p.set_defaults(func=cmd_ptrue)


def add_decode_args(p: argparse.ArgumentParser) -> None:
    """How the model writes its own answers (``readout ptrue`` and ``readout estimators``)."""
    p.add_argument(
        "--decode", default="greedy", choices=["greedy", "sampled"],
        help="how the model writes its own answers: greedy (default) or sampled as lm-polygraph samples (min 2 new tokens, seeded)",
    )
    p.add_argument("--temperature", type=float, default=1.0, help="with --decode sampled: temperature (default: 1.0, lm-polygraph's)")
    p.add_argument("--top-k", type=int, default=50, help="with --decode sampled: top-k (default: 50, lm-polygraph's)")
    p.add_argument("--top-p", type=float, default=1.0, help="with --decode sampled: top-p (default: 1.0, lm-polygraph's)")
    p.add_argument("--sample-seed", type=int, default=1, help="with --decode sampled: the answers' seed (default: 1, lm-polygraph's; --seed is the bootstrap's)")


def _config(kind: str, args: argparse.Namespace) -> Any:
    from sleight.readout.downstream_run import ForecastConfig, PTrueConfig

    spec = model_spec_from_args(args, resolve_dtype=False)  # the config records the dtype it loads in, resolved
    common = dict(
        model=spec.model, engine=spec.engine, dtype=spec.dtype, items=args.items, data=args.data, limit=args.limit,
        continuation_tokens=args.continuation_tokens, chunk=args.chunk, B=args.B, seed=args.seed,
    )
    if kind == "forecast":
        return ForecastConfig(**common, note_words=args.note_words, note_tokens=args.note_tokens, reader=args.reader)
    return PTrueConfig(
        **common, answers=args.answers, max_new_tokens=args.max_new_tokens, instruct=args.instruct,
        decode=args.decode, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, sample_seed=args.sample_seed,
    )


def _run(kind: str, args: argparse.Namespace) -> Any:
    """The run, or with ``--rescore`` the scores and reports again from the folder's own readings."""
    from sleight.readout import downstream_run as dr

    config = _config(kind, args)
    config.check()
    if args.rescore:
        return dr.rescore(kind, args.out, B=args.B, seed=args.seed)
    items = dr.load_downstream_items(config)  # a bad items file fails here, before the output check
    check_writable(args.out, "--out")
    return dr.run_downstream(
        config, args.out, load_model=lambda: model_from_args(args), overwrite=args.overwrite, progress=not args.no_progress, items=items
    )


def cmd_forecast(args: argparse.Namespace) -> int:
    from sleight.readout.downstream_report import forecast_lines

    result = _run("forecast", args)
    print("\n".join(forecast_lines(result.summary)))
    print(f"wrote {args.out}/report.md, report.html, summary.json, readings.parquet")
    return 0


def cmd_ptrue(args: argparse.Namespace) -> int:
    from sleight.readout.downstream_report import ptrue_lines

    result = _run("ptrue", args)
    print("\n".join(ptrue_lines(result.summary)))
    print(f"wrote {args.out}/report.md, report.html, summary.json, readings.parquet")
    return 0
