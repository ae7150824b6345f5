"""``sleight tamper run`` as a function: the sweep loop over questions, committing one question at a time.

The Python API mirrors the CLI::

    from sleight.backends import ModelSpec, load_model
    from sleight.tamper.job import TamperJob, TrialSettings, prepare
    from sleight.tamper.runner import run_tamper
    job = TamperJob(ModelSpec("smollm2-135m-instruct"), TrialSettings(questions=5, substitutes=10), out="runs/x")
    run_tamper(load_model(job.model), prepare(job))

or, with explicit inputs, ``run_tamper(model, plan_run(spec, questions, substitutes, out, config))``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from sleight.backends.base import LanguageModel
from sleight.errors import UserError
from sleight.progress import SweepProgress
from sleight.rundir import ALL, Shard, versions
from sleight.tamper import two_phase
from sleight.tamper.data import ENTITY_INDEX
from sleight.tamper.engine import Rendered, batched_trials, clean_run, render_question
from sleight.tamper.job import Prepared, TamperJob, prepare
from sleight.tamper.records import clean_table, trials_table
from sleight.tamper.schedule import SCHEDULES, StreamStats, can_schedule, scheduled_questions
from sleight.tamper.store import RunStore

LIVE_ROWS = 202  # the sweep order's bound on rows decoding together (benchmarks/sweep.py measures the knob)


@dataclass
class RunSummary:
    run_dir: Path
    questions: int
    substitutes: int
    resumed_questions: int  # already committed when this session started
    new_questions: int
    seconds: float
    tokens: int  # tokens decoded by this session (clean runs and trial batches)
    untouched_questions: int = 0  # committed questions whose clean reply never emits the trigger
    shard: Shard = ALL
    shard_questions: int | None = None  # questions in this shard (None: the whole run)
    decoding: str = "lockstep"
    disagreements: int = 0  # two-phase: scored argmax != decided token, model-chosen positions, this session
    schedule: str = "question"  # the order this session decoded in ("sweep": continuous batching)

    @property
    def trials(self) -> int:
        return self.questions * self.substitutes


def run_tamper(model: LanguageModel, prep: Prepared, *, progress: bool = True, schedule: str = "sweep", live_rows: int = LIVE_ROWS) -> RunSummary:
    """Run (or resume) the prepared run (:func:`sleight.tamper.job.plan_run` built its config and
    checked its directory); each question's trials are committed atomically.

    The shard K/N runs only the questions whose index i has i % N == K - 1; several shards may run at
    once, in several processes or machines, into one run directory.
    ``prep.decoding``: ``"lockstep"`` (per-step surgery, hf) or ``"two-phase"`` (:mod:`sleight.tamper.two_phase`).
    ``schedule``: ``"sweep"`` (the default) decodes every clean run and every question's trials as
    requests to one continuously batched decode of at most ``live_rows`` rows
    (:mod:`sleight.tamper.schedule`; lockstep on an engine that batches continuously, else question
    by question); ``"question"`` decodes one question after the other. Both give the same trials;
    results are committed per question either way. With ragged batches the sweep order measured
    1.52x the question order on a 2-core CPU (docs/results.md, "The full sweep").
    """
    questions, substitutes, config, decoding, shard, store = prep.questions, prep.substitutes, prep.config, prep.decoding, prep.shard, prep.store
    if decoding not in two_phase.DECODINGS:
        raise ValueError(f"decoding must be one of {two_phase.DECODINGS}, not {decoding!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")
    if live_rows < len(substitutes):
        raise UserError(f"--live-rows {live_rows} is below one question's {len(substitutes)} trial rows")
    info = model.info.as_dict()
    _check_loaded(info, prep)
    sweep = schedule == "sweep" and decoding == "lockstep" and can_schedule(model)
    cfg = prep.run_config
    prompts = {q.id: render_question(model, q.question) for q in questions}
    store.open(cfg, info, {k: r.text for k, r in prompts.items()}, versions(), shard=shard)
    mine = prep.mine
    done = store.done(mine)
    todo = [i for i in mine if i not in done]
    n_sub = len(substitutes)
    start = time.perf_counter()
    desc = "tamper" if shard.whole else f"tamper {shard}"
    prog = SweepProgress(len(mine) * n_sub, initial=len(done) * n_sub, unit="trial", desc=desc, enabled=progress)
    untouched = _untouched_committed(store, done)
    stats = _DecodeStats(decoding, int(info.get("threads") or 0))
    stream = StreamStats(live_rows) if sweep else None
    completed = False

    def commit(i: int, clean: Any, trials: list[Any]) -> None:
        q = questions[i]
        stats.add(q.id, clean, trials)
        store.commit(
            i,
            q.id,
            clean_table(info["spec"], i, q.id, q.question, clean, config, model.decode),
            trials_table(info["spec"], i, q.id, q.question, clean, trials, config, model.decode, ENTITY_INDEX),
        )
        prog.finish_item(n_sub, q.id)

    try:
        for i, clean, trials in _decoded(model, prep, todo, prompts, prog, live_rows=live_rows if sweep else None, stream=stream):
            untouched += not clean.triggers
            commit(i, clean, trials)
        completed = True
    finally:
        prog.close()
        if store.session is not None:
            store.session.record.update(stats.record())
            store.session.record["schedule"] = {"order": "sweep", **stream.record()} if stream else {"order": "question"}
            if hasattr(model, "engine_stats"):  # vLLM's own counters (prefix-cache queries, hits, hit rate)
                store.session.record["engine_stats"] = model.engine_stats()
        store.finish(completed)
    return RunSummary(
        prep.out, len(questions), n_sub, len(done), len(todo), time.perf_counter() - start, prog.total_tokens, untouched,
        shard, None if shard.whole else len(mine), decoding, stats.disagreements, "sweep" if sweep else "question",
    )


def _check_loaded(info: dict[str, Any], prep: Prepared) -> None:
    """The loaded model must be the one the run's config was built for (engine and load settings)."""
    loaded = {"engine": info["engine"], "load": info.get("load") or {}}
    planned = {"engine": prep.spec.engine, "load": prep.spec.load_record()}
    if loaded != planned:
        raise UserError(f"the model loaded ({loaded}) is not the one the run was prepared for ({planned})")


def _decoded(
    model: LanguageModel, prep: Prepared, todo: Sequence[int], prompts: dict[str, Rendered], prog: SweepProgress, *,
    live_rows: int | None, stream: StreamStats | None,
) -> Iterator[tuple[int, Any, list[Any]]]:
    """Each question still to do as (index, clean run, trials), as it is decoded: all of them as one
    continuously batched decode of at most ``live_rows`` rows, or (``live_rows`` None) one question
    after the other on the run's decoding path."""
    questions, substitutes, config = prep.questions, prep.substitutes, prep.config
    if live_rows is not None:
        if todo:  # nothing left (a finished run again): no empty progress line
            prog.start_item(f"{len(todo)} questions, <= {live_rows} rows", None)
            work = [(i, prompts[questions[i].id]) for i in todo]
            yield from scheduled_questions(model, work, substitutes, config, live_rows=live_rows, progress=prog.tokens, stats=stream)
        return
    first, rest = (two_phase.clean_run, two_phase.batched_trials) if prep.decoding == "two-phase" else (clean_run, batched_trials)
    n_sub = len(substitutes)
    for i in todo:
        q = questions[i]
        # The inner count restarts per question with what that phase can decode at most (SPEC §5).
        prog.start_item(f"{q.id} clean", config.max_new_tokens)
        clean = first(model, prompts[q.id], config, prog.tokens)
        if clean.triggers:
            prog.start_item(f"{q.id} x{n_sub}", n_sub * (config.max_new_tokens - clean.triggers[0].start), new_item=False)
        else:
            prog.start_item(f"{q.id} untouched", 0, new_item=False)
        yield i, clean, rest(model, clean, substitutes, config, prog.tokens)


class ArgmaxDisagreements(TypedDict):
    """Two-phase decoding's argmax disagreements: their total and, per question, the nonzero counts."""

    total: int
    by_question: dict[str, dict[str, int]]


class _DecodePath(TypedDict):
    decoding: str
    threads: int


class DecodeRecord(_DecodePath, total=False):
    """What a session record says of its decoding path (merged into the session's JSON as it is);
    the two-phase keys only on that path."""

    argmax_disagreements: ArgmaxDisagreements
    two_phase_cost: dict[str, int]


class _DecodeStats:
    """What this session's decoding path did, for its session record: the path, torch threads, and
    (two-phase) the argmax disagreements per trial and the engine cost, never hidden."""

    def __init__(self, decoding: str, threads: int) -> None:
        self.decoding, self.threads = decoding, threads
        self.disagreements = 0
        self.by_question: dict[str, dict[str, int]] = {}
        self.cost = {"questions": 0, "rounds": 0, "requests": 0, "decoded": 0, "prefilled": 0}

    def add(self, qid: str, clean: Any, trials: Sequence[Any]) -> None:
        if self.decoding != "two-phase":
            return
        counts = {"clean": clean.disagreements, **{str(t.substitute_index): t.disagreements for t in trials if not t.untouched}}
        self.disagreements += sum(counts.values())
        if any(counts.values()):
            self.by_question[qid] = {k: v for k, v in counts.items() if v}
        costs = [c for c in [clean.cost, *(t.cost for t in trials if not t.untouched)] if c is not None]
        self.cost["questions"] += 1
        self.cost["rounds"] += 1 + max((t.cost.requests for t in trials if t.cost is not None), default=0)
        for key in ("requests", "decoded", "prefilled"):
            self.cost[key] += sum(getattr(c, key) for c in costs)

    def record(self) -> DecodeRecord:
        out: DecodeRecord = {"decoding": self.decoding, "threads": self.threads}
        if self.decoding == "two-phase":
            out["argmax_disagreements"] = {"total": self.disagreements, "by_question": self.by_question}
            out["two_phase_cost"] = dict(self.cost)
        return out


def _untouched_committed(store: RunStore, done: set[int]) -> int:
    """How many already committed questions never met the trigger (read from their clean parts)."""
    if not done:
        return 0
    from sleight.tamper.store import load_clean

    clean = load_clean(store.dir)
    if "n_triggers" not in clean.columns:
        return 0
    clean = clean[clean["question_index"].isin(sorted(done))]
    return int((clean["n_triggers"].fillna(0) == 0).sum())


def trigger_note(trigger: str, questions: int, untouched: int) -> str | None:
    """What to tell the user when the trigger never (or only sometimes) fired; None when it always did."""
    if untouched <= 0:
        return None
    if untouched >= questions:
        return (
            f"note: the trigger {trigger!r} never fired: none of the {questions} clean replies contains it as a whole word "
            f"(any case), so every trial is untouched (equal to its clean run) and there is nothing to judge; check --trigger"
        )
    return f"note: {untouched} of {questions} questions never met the trigger {trigger!r}; their trials are untouched (not judged)"


def execute(job: TamperJob) -> list[str]:
    """Run the job; its summary lines (a sweep task calls this in its worker)."""
    from sleight.backends import load_model

    prep = prepare(job)
    if not prep.left:
        return [prep.nothing_to_do()]
    out, shard, t = prep.out, prep.shard, job.trials
    model = load_model(job.model)
    summary = run_tamper(model, prep, progress=job.progress, schedule=t.schedule, live_rows=t.live_rows or LIVE_ROWS)
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
    note = trigger_note(t.trigger, n_q, summary.untouched_questions)
    if note:
        lines.append(note)
    return lines
