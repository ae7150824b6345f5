"""``sleight tamper judge``: ask every juror about every judged trial, keep votes, derive verdicts.

Resumable: votes already stored for (trial, juror, prompt variant) are skipped, so a killed judge
run picks up where it stopped; a vote lost to a transport error is recorded as an abstention and
asked again on the next run (its old row is then compacted away). An unparsable reply is retried
once, then recorded as an abstention. A local juror votes by label slots unless told otherwise
(:mod:`sleight.jury.slots`), a server juror by JSON schema with the text path as its fallback.
Several runs are judged in one pass per juror, so a server juror keeps its requests in flight
across runs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm.auto import tqdm

from sleight.backends.chat import ChatModel, load_chat
from sleight.errors import UserError
from sleight.jury.cast import Cast
from sleight.jury.jurors import make_juror, resolve_mode
from sleight.jury.slots import MASS_FLOOR
from sleight.tamper import jury_store
from sleight.tamper.judged import judged_trials, load_run_trials
from sleight.tamper.jury import BALLOT, LABELS, PROMPT_VARIANTS, Case, accepted_answers, judge_messages, parse_jury

Loader = Callable[[str], ChatModel]


@dataclass
class JurorSummary:
    juror: str
    vote: str = ""  # how this juror votes: slots, schema or text
    asked: int = 0  # votes requested in this call
    skipped: int = 0  # already stored
    abstained: int = 0  # of the asked: unparsable after the retry, or a transport error
    retried: int = 0
    errors: int = 0
    seconds: float = 0.0
    paths: dict[str, int] = field(default_factory=dict)  # votes per path that produced them
    masses: list[float] = field(default_factory=list)  # slot masses of this call's votes
    last_error: str | None = None

    @property
    def cast(self) -> int:
        """Valid votes cast in this call."""
        return self.asked - self.abstained

    @property
    def votes_per_s(self) -> float:
        return self.asked / self.seconds if self.seconds > 0 else 0.0

    @property
    def median_mass(self) -> float | None:
        return statistics.median(self.masses) if self.masses else None

    @property
    def below_floor(self) -> int:
        return sum(m < MASS_FLOOR for m in self.masses)


@dataclass
class JudgeSummary:
    run_dirs: list[Path]
    prompt_variant: str
    n_judged_trials: int
    jurors: list[JurorSummary] = field(default_factory=list)
    verdicts_paths: list[Path] = field(default_factory=list)
    compacted: int = 0  # superseded vote rows dropped

    @property
    def run_dir(self) -> Path:
        return self.run_dirs[0]

    @property
    def verdicts_path(self) -> Path | None:
        return self.verdicts_paths[0] if self.verdicts_paths else None

    @property
    def asked(self) -> int:
        return sum(j.asked for j in self.jurors)

    @property
    def cast(self) -> int:
        return sum(j.cast for j in self.jurors)


@lru_cache(maxsize=1)
def _shipped_questions() -> dict[str, str]:
    text = resources.files("sleight").joinpath("data/sleight_questions.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return {r["id"]: r["question"].strip().lower() for r in rows}


def answers_for(question_id: str, question: str) -> tuple[str, ...]:
    """Accepted answers only for the shipped question with that id and text (a user's own q001 gets none)."""
    if _shipped_questions().get(question_id) != str(question).strip().lower():
        return ()
    return accepted_answers().get(question_id, ())


def case_of(trial: dict[str, Any]) -> Case:
    return Case(
        question=str(trial["question"]),
        trigger=str(trial["trigger"]),
        substitute=str(trial["substitute"]),
        reply=str(trial["reply"]),
        answers=answers_for(str(trial["question_id"]), str(trial["question"])),
    )


def vote_row(trial: dict[str, Any], juror: str, variant: str, cast: Cast) -> dict[str, Any]:
    """One stored vote (a row of ``judgements.parquet``) from a cast vote; pure apart from the clock."""
    row: dict[str, Any] = {
        "model": trial["model"],
        "question_id": trial["question_id"],
        "substitute": trial["substitute"],
        "juror": juror,
        "prompt_variant": variant,
        "reason": cast.reason,
        "abstained": cast.abstained,
        "attempts": cast.attempts,
        "raw_reply": cast.raw_reply,
        "first_reply": cast.first_reply,
        "error": cast.error,
        "latency_s": float(cast.latency_s),
        "judged_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "vote_path": cast.path,
        "finish_reason": cast.finish_reason,
        "reasoning": cast.reasoning,
    }
    for label in LABELS:
        row[label] = None if cast.values is None else bool(cast.values[label])
        soft = cast.soft.get(label)
        row[f"{label}_p_true"] = None if soft is None else float(soft[0])
        row[f"{label}_mass"] = cast.mass.get(label)
    return row


@dataclass
class _Run:
    """One run being judged: its directory, judged trials, and rows not yet committed."""

    path: Path
    trials: Any
    pending: list[dict[str, Any]] = field(default_factory=list)


def judge_runs(
    run_dirs: Sequence[Path],
    jury: Sequence[str] | str,
    *,
    variant: str = "default",
    vote: str = "auto",
    max_tokens: int = 200,
    batch: int = 16,
    limit: int | None = None,
    loader: Loader | None = None,
    progress: bool = True,
) -> JudgeSummary:
    """Judge every trial with ≥1 swap in each run by every juror, then write each run's verdicts.

    ``vote``: ``auto`` (label slots on local jurors, the JSON-schema path on servers), ``slots``,
    ``schema`` or ``text``. ``loader(spec)`` builds a juror (default:
    :func:`sleight.backends.chat.load_chat`, which fails fast when an endpoint is down or refuses the
    key); jurors with nothing left to judge are not loaded at all. ``batch`` is how many votes are
    committed at a time (and a local juror's batch); a server juror keeps up to its concurrency in
    flight whatever the batch. ``limit`` asks each juror about at most that many pending trials in
    this call, over all runs (the rest stay pending and count as missing votes until judged).
    """
    jurors = parse_jury(jury) if isinstance(jury, str) else parse_jury(",".join(jury))
    if variant not in PROMPT_VARIANTS:
        raise UserError(f"unknown judge prompt '{variant}' (choose from {', '.join(PROMPT_VARIANTS)})")
    for spec in jurors:  # a wrong --vote is refused before any model loads
        resolve_mode(vote, local=not spec.startswith("openai:"))
    runs = []
    for d in run_dirs:
        trials, _ = load_run_trials(Path(d))
        runs.append(_Run(Path(d), judged_trials(trials)))
    load = loader or (lambda spec: load_chat(spec))
    summary = JudgeSummary([r.path for r in runs], variant, sum(len(r.trials) for r in runs))
    for juror in jurors:
        js = JurorSummary(juror)
        summary.jurors.append(js)
        todo: list[tuple[_Run, dict[str, Any]]] = []
        for run in runs:
            done = jury_store.stored_keys(jury_store.load_judgements(run.path, repair=True), juror, variant)
            mine = [t for t in run.trials.to_dict("records") if (t["question_id"], t["substitute"]) not in done]
            js.skipped += len(run.trials) - len(mine)
            todo += [(run, t) for t in mine]
        if limit is not None:
            todo = todo[: max(limit, 0)]
        if not todo:
            continue
        judge = make_juror(load(juror), vote, batch=batch)
        js.vote = judge.mode
        _ask(judge, js, todo, variant, max_tokens=max_tokens, batch=batch, progress=progress)
    meta = {
        "jury": jurors,
        "jury_size": len(jurors),
        "prompt_variant": variant,
        "vote": vote,
        "max_tokens": max_tokens,
        "answers_sha256": _answers_hash(),
        "written_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    for run in runs:
        summary.compacted += jury_store.compact_judgements(run.path)
        verdicts = jury_store.compute_verdicts(run.trials, jury_store.load_judgements(run.path), jurors, variant)
        summary.verdicts_paths.append(jury_store.write_verdicts(run.path, verdicts, meta))
    return summary


def _ask(judge: Any, js: JurorSummary, todo: list[tuple[_Run, dict[str, Any]]], variant: str, *, max_tokens: int, batch: int, progress: bool) -> None:
    """Cast one juror's votes on ``todo`` and commit them ``batch`` at a time, per run."""
    convs = [judge_messages(case_of(t), variant) for _, t in todo]
    start = time.perf_counter()
    desc = f"judge {_short(js.juror)} ({judge.mode})"
    bar = tqdm(total=len(todo), desc=desc, unit="vote", dynamic_ncols=True) if progress and sys.stderr.isatty() else None
    touched: list[_Run] = []

    def report(committed: bool) -> None:
        elapsed = time.perf_counter() - start
        rate = js.asked / elapsed if elapsed > 0 else 0.0
        if bar is not None:
            bar.update(1)
            bar.set_postfix(abstained=js.abstained, votes_s=f"{rate:.2f}")
        elif progress and committed:  # off a terminal: one plain line per committed batch
            print(f"{desc}: {js.asked}/{len(todo)} votes, {js.abstained} abstained, {rate:.2f} votes/s", file=sys.stderr, flush=True)

    try:
        for i, cast in judge.cast(convs, BALLOT, max_tokens=max_tokens):
            run, trial = todo[i]
            run.pending.append(vote_row(trial, js.juror, variant, cast))
            if run not in touched:
                touched.append(run)
            js.asked += 1
            js.abstained += cast.abstained
            js.retried += cast.attempts == 2
            js.errors += cast.error is not None
            js.last_error = cast.error or js.last_error
            js.paths[cast.path] = js.paths.get(cast.path, 0) + 1
            js.masses += [m for m in cast.mass.values() if m is not None]
            full = len(run.pending) >= max(batch, 1)
            if full:
                _commit(run)  # committed per batch: a crash keeps it
            report(full or js.asked == len(todo))
    finally:
        for run in touched:
            _commit(run)
        if bar is not None:
            bar.close()
        js.seconds = time.perf_counter() - start


def _commit(run: _Run) -> None:
    if run.pending:
        jury_store.append_judgements(run.path, run.pending)
        run.pending = []


def judge_run(run_dir: Path, jury: Sequence[str] | str, **kwargs: Any) -> JudgeSummary:
    """:func:`judge_runs` on one run directory."""
    return judge_runs([Path(run_dir)], jury, **kwargs)


def _answers_hash() -> str:
    data = resources.files("sleight").joinpath("data/sleight_answers.json").read_bytes()
    return hashlib.sha256(data).hexdigest()


def _short(juror: str) -> str:
    return juror.rsplit("#", 1)[-1] if juror.startswith("openai:") else juror


def summary_lines(summary: JudgeSummary) -> list[str]:
    """What ``tamper judge`` prints: per juror what was asked, cast, abstained, how fast, and for
    slot votes the median slot mass and the slots below the floor."""
    lines = [f"trials to judge (>=1 swap): {summary.n_judged_trials} in {len(summary.run_dirs)} run(s) (prompt '{summary.prompt_variant}')"]
    for j in summary.jurors:
        line = (
            f"  {j.juror}: asked {j.asked}, cast {j.cast} valid vote(s), already stored {j.skipped}, abstained {j.abstained} "
            f"(retried {j.retried}, transport errors {j.errors}), {j.seconds:.1f}s"
        )
        if j.asked:
            line += f" ({j.votes_per_s:.2f} votes/s; " + ", ".join(f"{k} {v}" for k, v in sorted(j.paths.items())) + ")"
        lines.append(line)
        if j.median_mass is not None:
            lines.append(f"    slot mass: median {j.median_mass:.3f} over {len(j.masses)} slots, {j.below_floor} below {MASS_FLOOR}")
            if j.median_mass < MASS_FLOOR:
                lines.append("    warning: this juror's label slots hold less than half the next-token mass; it is read where it was about to write something else")
    if len(summary.jurors) == 1:
        lines.append("  note: a jury of one -- its vote is the verdict; the report labels it as such")
    if summary.compacted:
        lines.append(f"  {summary.compacted} superseded vote row(s) compacted away")
    total = sum(j.asked for j in summary.jurors)
    lines.append(f"valid votes cast: {summary.cast} of {total} asked")
    lines += [f"verdicts: {p}" for p in summary.verdicts_paths]
    return lines


def no_vote_line(summary: JudgeSummary) -> str:
    """The one line ``tamper judge`` fails with when the jury cast no valid vote at all."""
    errors = sum(j.errors for j in summary.jurors)
    abstained = sum(j.abstained for j in summary.jurors) - errors
    failing = next((j for j in summary.jurors if j.last_error), None)
    last = "" if failing is None else f"; last error from {_short(failing.juror)}: {failing.last_error[:160]}"
    return (
        f"the jury cast no valid vote: {summary.asked} asked, {errors} failed request(s), {abstained} unreadable reply(ies)"
        f"{last}; stored votes are kept, rerun to ask again".replace("\n", " ")
    )
