"""``sleight tamper judge``: ask every juror about every judged trial, keep votes, derive verdicts.

Resumable: votes already stored for (trial, juror, prompt variant) are skipped, so a killed judge
run picks up where it stopped; a vote lost to a transport error is recorded as an abstention and
asked again on the next run. An unparsable reply is retried once, then recorded as an abstention.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm.auto import tqdm

from sleight.backends.chat import ChatModel, ChatReply, load_chat
from sleight.tamper import jury_store
from sleight.tamper.judged import judged_trials, load_run_trials
from sleight.errors import UserError
from sleight.tamper.jury import (
    LABELS,
    PROMPT_VARIANTS,
    Case,
    accepted_answers,
    judge_messages,
    parse_jury,
    parse_vote,
    retry_messages,
)

Loader = Callable[[str], ChatModel]


@dataclass
class JurorSummary:
    juror: str
    asked: int = 0  # votes requested in this call
    skipped: int = 0  # already stored
    abstained: int = 0  # of the asked: unparsable after the retry, or a transport error
    retried: int = 0
    errors: int = 0
    seconds: float = 0.0


@dataclass
class JudgeSummary:
    run_dir: Path
    prompt_variant: str
    n_judged_trials: int
    jurors: list[JurorSummary] = field(default_factory=list)
    verdicts_path: Path | None = None


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


def _vote_row(trial: dict[str, Any], juror: str, variant: str, first: ChatReply, second: ChatReply | None) -> dict[str, Any]:
    """One stored vote from the reply (and the retry's reply, when there was one)."""
    final = second if second is not None else first
    vote = parse_vote(final.text) if not final.error else None
    row: dict[str, Any] = {
        "model": trial["model"],
        "question_id": trial["question_id"],
        "substitute": trial["substitute"],
        "juror": juror,
        "prompt_variant": variant,
        "reason": vote.reason if vote else None,
        "abstained": vote is None,
        "attempts": 1 if second is None else 2,
        "raw_reply": final.text,
        "first_reply": first.text if second is not None else None,
        "error": final.error,
        "latency_s": float(first.latency_s + (second.latency_s if second is not None else 0.0)),
        "judged_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    for label in LABELS:
        row[label] = getattr(vote, label) if vote else None
    return row


def judge_batch(
    chat: ChatModel, trials: Sequence[dict[str, Any]], juror: str, variant: str, *, max_tokens: int
) -> list[dict[str, Any]]:
    """Votes for a batch of trials from one juror: ask all, retry the unparsable ones once, together."""
    convs = [judge_messages(case_of(t), variant) for t in trials]
    firsts = chat.chat_many(convs, max_tokens=max_tokens)
    redo = [i for i, r in enumerate(firsts) if not r.error and parse_vote(r.text) is None]
    seconds: dict[int, ChatReply] = {}
    if redo:
        again = chat.chat_many([retry_messages(convs[i], firsts[i].text) for i in redo], max_tokens=max_tokens)
        seconds = dict(zip(redo, again))
    return [_vote_row(t, juror, variant, firsts[i], seconds.get(i)) for i, t in enumerate(trials)]


def judge_run(
    run_dir: Path,
    jury: Sequence[str] | str,
    *,
    variant: str = "default",
    max_tokens: int = 200,
    batch: int = 16,
    limit: int | None = None,
    loader: Loader | None = None,
    progress: bool = True,
) -> JudgeSummary:
    """Judge every trial with ≥1 swap in ``run_dir`` by every juror, then write the verdicts.

    ``loader(spec)`` builds a juror (default: :func:`sleight.backends.chat.load_chat`, which fails
    fast when an endpoint is down); jurors with nothing left to judge are not loaded at all.
    ``limit`` asks each juror about at most that many pending trials in this call (a quick look;
    the rest stay pending and count as missing votes until judged).
    """
    run_dir = Path(run_dir)
    jurors = parse_jury(jury) if isinstance(jury, str) else parse_jury(",".join(jury))
    if variant not in PROMPT_VARIANTS:
        raise UserError(f"unknown judge prompt '{variant}' (choose from {', '.join(PROMPT_VARIANTS)})")
    trials, _ = load_run_trials(run_dir)
    judged = judged_trials(trials)
    records = judged.to_dict("records")
    load = loader or (lambda spec: load_chat(spec))
    summary = JudgeSummary(run_dir, variant, len(records))
    for juror in jurors:
        js = JurorSummary(juror)
        summary.jurors.append(js)
        done = jury_store.stored_keys(jury_store.load_judgements(run_dir), juror, variant)
        todo = [t for t in records if (t["question_id"], t["substitute"]) not in done]
        js.skipped = len(records) - len(todo)
        if limit is not None:
            todo = todo[: max(limit, 0)]
        if not todo:
            continue
        chat = load(juror)
        start = time.perf_counter()
        bar = tqdm(total=len(todo), desc=f"judge {_short(juror)}", unit="trial", disable=not progress, dynamic_ncols=True)
        try:
            for chunk in jury_store.iter_chunks(todo, batch):
                rows = judge_batch(chat, chunk, juror, variant, max_tokens=max_tokens)
                jury_store.append_judgements(run_dir, rows)  # committed per batch: a crash keeps it
                js.asked += len(rows)
                js.abstained += sum(r["abstained"] for r in rows)
                js.retried += sum(r["attempts"] == 2 for r in rows)
                js.errors += sum(r["error"] is not None for r in rows)
                bar.update(len(rows))
                bar.set_postfix(abstained=js.abstained)
        finally:
            bar.close()
            js.seconds = time.perf_counter() - start
    verdicts = jury_store.compute_verdicts(judged, jury_store.load_judgements(run_dir), jurors, variant)
    summary.verdicts_path = jury_store.write_verdicts(
        run_dir,
        verdicts,
        {
            "jury": jurors,
            "jury_size": len(jurors),
            "prompt_variant": variant,
            "max_tokens": max_tokens,
            "answers_sha256": _answers_hash(),
            "written_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        },
    )
    return summary


def _answers_hash() -> str:
    data = resources.files("sleight").joinpath("data/sleight_answers.json").read_bytes()
    return hashlib.sha256(data).hexdigest()


def _short(juror: str) -> str:
    return juror.rsplit("#", 1)[-1] if juror.startswith("openai:") else juror
