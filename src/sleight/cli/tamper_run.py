"""``sleight tamper run``: the Sleight of Word sweep on one model, resumable, into a run directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from sleight.cli.common import RESUME, add_model_args, add_progress_arg
from sleight.tamper.job import TRIAL_KEYS, TamperJob, TrialSettings


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` to the ``tamper`` subcommands."""
    p = sub.add_parser(
        "run",
        help="run the trials: a clean reply per question, then every substitute swapped in while the model writes",
        description=(
            "Sleight of Word on one model: for each question, the clean greedy reply, then one trial per "
            "substitute in which every whole-word trigger the model writes is replaced by the substitute "
            "as it writes. Results go to RUN_DIR (manifest.json, clean.parquet/, trials.parquet/); "
            "a killed run resumes where it stopped when started again with the same command."
        ),
    )
    add_trial_args(p)
    p.add_argument("--out", type=Path, default=None, metavar="RUN_DIR", help="run directory (default: runs/<model-name>)")
    p.add_argument(
        "--shard", default=None, metavar="K/N",
        help="run only shard K of N: the questions whose 0-based index i has i %% N == K-1; shards may run at once "
        "(other processes or machines) into one --out, which then holds exactly the records of one unsharded run",
    )
    p.add_argument("--overwrite", action="store_true", help=RESUME)
    add_progress_arg(p)
    add_model_args(p)
    p.set_defaults(func=cmd_run)


def add_trial_args(p: argparse.ArgumentParser) -> None:
    """The flags that decide a run's trials (shared by ``tamper run`` and ``tamper sweep``)."""
    p.add_argument("--questions", type=int, default=None, metavar="N", help="use only the first N questions (default: all)")
    p.add_argument("--substitutes", type=int, default=None, metavar="N", help="use only the first N substitutes (default: all 101)")
    p.add_argument("--questions-file", type=Path, default=None, metavar="FILE", help='JSONL of {"id": ..., "question": ...} (default: the shipped 100)')
    p.add_argument("--substitutes-file", type=Path, default=None, metavar="FILE", help="one substitute per line, '#' comments; the first is the entity condition (default: the shipped 101)")
    p.add_argument("--trigger", default="the", metavar="WORD", help="the word swapped whenever the model writes it (default: the)")
    p.add_argument("--max-new-tokens", type=int, default=256, metavar="N", help="reply budget, injected tokens included (default: 256)")
    p.add_argument(
        "--conventions", default="study", choices=["study", "sleight"],
        help="study: the study's phase-1 conventions (one-token triggers, its splice, the end-of-turn token kept, "
        "substitutes never cut); sleight: sleight's own word-level detector and surgery (default: study; docs/tamper.md)",
    )
    p.add_argument(
        "--punctuation-led", action="store_true",
        help="study conventions: also swap a trigger token led by punctuation ('\"the', '(The'), which the study leaves to stand",
    )
    p.add_argument(
        "--decoding", default=None, choices=["lockstep", "two-phase"],
        help="lockstep: swap triggers during decoding (hf); two-phase: decide the tokens by greedy requests, then score "
        "them once (vllm) (default: lockstep on hf, two-phase on vllm)",
    )
    p.add_argument(
        "--schedule", default="sweep", choices=["question", "sweep"],
        help="sweep: all clean runs and every question's trials as requests to one continuously batched decode (hf lockstep; "
        "the same trials as question by question, 1.5x faster on a 2-core CPU, see docs/results.md); question: one question "
        "after the other (default: sweep)",
    )
    p.add_argument("--live-rows", type=int, default=None, metavar="N", help="sweep schedule: rows decoding together at most (default: 202)")


def trial_settings(args: argparse.Namespace) -> TrialSettings:
    """The :class:`TrialSettings` the trial flags give (checked)."""
    return TrialSettings(**{k: getattr(args, k) for k in TRIAL_KEYS if hasattr(args, k)})


def job_from_args(args: argparse.Namespace) -> TamperJob:
    """The flags as one typed job: the model's spec, the trials, the output (built once, here)."""
    from sleight.cli.common import model_spec_from_args

    return TamperJob(
        model_spec_from_args(args), trial_settings(args), out=args.out, shard=getattr(args, "shard", None),
        overwrite=getattr(args, "overwrite", False), progress=not getattr(args, "no_progress", False),
    )


def cmd_run(args: argparse.Namespace) -> int:
    from sleight.tamper.runner import execute

    for line in execute(job_from_args(args)):
        print(line)
    return 0
