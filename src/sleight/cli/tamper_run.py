"""``sleight tamper run``: the Sleight of Word sweep on one model, resumable, into a run directory."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sleight.cli.common import RESUME, add_model_args, add_progress_arg, check_writable
from sleight.errors import UserError


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
        "--schedule", default="question", choices=["question", "sweep"],
        help="question: one question after the other; sweep: all clean runs and every question's trials as requests to one "
        "continuously batched decode (hf lockstep; same trials; slower on a 2-core CPU, see docs/results.md) (default: question)",
    )
    p.add_argument("--live-rows", type=int, default=None, metavar="N", help="sweep schedule: rows decoding together at most (default: 202)")


def live_rows(args: argparse.Namespace) -> int:
    from sleight.tamper.runner import LIVE_ROWS

    n = getattr(args, "live_rows", None)
    if n is not None and n < 1:
        raise UserError(f"--live-rows must be at least 1, not {n}")
    return LIVE_ROWS if n is None else int(n)


def default_out(model_spec: str) -> Path:
    """runs/<model-name>: the file or folder name of a path, the hub id with '/' made '--'."""
    p = Path(model_spec)
    name = p.stem if model_spec.endswith(".gguf") else (p.name if (p.exists() or model_spec.startswith((".", "/", "~"))) else model_spec.replace("/", "--"))
    return Path("runs") / (re.sub(r"[^A-Za-z0-9_.+-]", "_", name) or "model")


def cmd_run(args: argparse.Namespace) -> int:
    for line in execute(args):
        print(line)
    return 0


@dataclass
class Prepared:
    """A ``tamper run`` checked and ready, before any model is loaded."""

    out: Path
    store: Any  # sleight.tamper.store.RunStore
    shard: Any  # sleight.rundir.Shard
    questions: list[Any]
    substitutes: list[str]
    sources: tuple[str, str]
    config: Any  # sleight.tamper.engine.TamperConfig
    decoding: str
    mine: list[int]  # this shard's question indices
    left: bool  # whether any of them is still to do

    def nothing_to_do(self) -> str:
        """Record the (no-op) session that may complete the run, and say so in one line."""
        if not (self.store.read_manifest() or {}).get("completed"):
            self.store.run.record_session(self.shard, completed=True)
        n = len(self.mine) * len(self.substitutes)
        what = f"{n} trials" if self.shard.whole else f"shard {self.shard}: {n} trials"
        return f"{what} already in {self.out}; this session: 0 question(s), nothing to do"


def prepare(args: argparse.Namespace) -> Prepared:
    """Everything before the model: inputs validated, the output checked, a different config refused,
    the committed parts verified (a sweep's driver calls this for every task before scheduling)."""
    from sleight.tamper.data import load_questions, load_substitutes
    from sleight.tamper.trigger import validate_word

    # Inputs and the output folder first, with light imports only: a bad flag answers in a second.
    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be at least 1 (got {args.max_new_tokens})")
    try:
        validate_word(args.trigger)
    except ValueError as exc:
        raise UserError(f"--trigger: {exc}") from None
    from sleight.rundir import parse_shard  # pyarrow: only once the flags above are good

    shard = parse_shard(getattr(args, "shard", None))
    questions, qsrc = load_questions(args.questions_file, args.questions)
    substitutes, ssrc = load_substitutes(args.substitutes_file, args.substitutes)
    out = args.out or default_out(args.model)
    check_writable(out, "--out")

    from sleight.cli.common import resolved_dtype
    from sleight.tamper.engine import TamperConfig
    from sleight.tamper.runner import check_conventions, run_config
    from sleight.tamper.store import RunStore

    try:
        config = TamperConfig(
            trigger=args.trigger,
            max_new_tokens=args.max_new_tokens,
            conventions=getattr(args, "conventions", "study"),
            punctuation_led=getattr(args, "punctuation_led", False),
        )
    except ValueError as exc:
        raise UserError(f"--punctuation-led: {exc}") from None
    decoding = getattr(args, "decoding", None) or ("two-phase" if args.engine == "vllm" else "lockstep")
    # Refuse a directory made with another config before spending time loading the model.
    store = RunStore(out)
    cfg = run_config(args.model, args.engine, resolved_dtype(args), config, questions, substitutes, qsrc, ssrc, decoding)
    if not getattr(args, "overwrite", False):
        check_conventions(store, cfg)
    store.check_config(cfg, overwrite=getattr(args, "overwrite", False))
    mine = shard.indices(len(questions))
    left = store.read_manifest() is None or not store.done(mine) >= set(mine)
    return Prepared(Path(out), store, shard, questions, substitutes, (qsrc, ssrc), config, decoding, mine, left)


def execute(args: argparse.Namespace) -> list[str]:
    """``tamper run`` without printing: the summary lines (a sweep task calls this in its worker)."""
    from sleight.cli.common import model_from_args
    from sleight.tamper.runner import run_tamper, trigger_note

    prep = prepare(args)
    if not prep.left:
        return [prep.nothing_to_do()]
    out, shard, questions, substitutes, config, decoding = prep.out, prep.shard, prep.questions, prep.substitutes, prep.config, prep.decoding
    qsrc, ssrc = prep.sources

    model = model_from_args(args)
    summary = run_tamper(
        model, questions, substitutes, out, config, question_source=qsrc, substitute_source=ssrc, progress=not args.no_progress, shard=shard,
        decoding=decoding, schedule=getattr(args, "schedule", "question"), live_rows=live_rows(args),
    )
    rate = summary.new_questions * summary.substitutes / summary.seconds if summary.seconds > 0 else 0.0
    resumed = f", {summary.resumed_questions} question(s) were already done" if summary.resumed_questions else ""
    n_q = summary.shard_questions if summary.shard_questions is not None else summary.questions
    what = (
        f"{summary.trials} trials ({summary.questions} questions x {summary.substitutes} substitutes)"
        if shard.whole
        else f"shard {shard}: {n_q * summary.substitutes} trials ({n_q} of {summary.questions} questions x {summary.substitutes} substitutes)"
    )
    lines = [
        f"{what} in {out}{resumed}; "
        f"this session: {summary.new_questions} question(s), {summary.tokens} tokens in {summary.seconds:.1f}s ({rate:.2f} trials/s)"
    ]
    if summary.decoding == "two-phase":
        lines.append(f"two-phase decoding: {summary.disagreements} position(s) where the scoring pass's argmax is not the decided token")
    note = trigger_note(args.trigger, n_q, summary.untouched_questions)
    if note:
        lines.append(note)
    return lines
