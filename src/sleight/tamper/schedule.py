"""Schedule the sweep, not the question: every clean run and every question's trials as requests
to one continuously batched lockstep decode (:class:`sleight.backends.decode_stream.GreedyStream`).

Question by question, each question's clean reply decodes alone at batch 1 and its trial batch
empties as rows finish. Here all the clean runs are submitted up front (they decode together, as
full a batch as there are questions, up to ``live_rows``), a question's trial request is submitted
as soon as its clean run passes its first trigger (the trials need only the prefix before it;
queued requests join longest clean reply first once that is known, so that the batch ends on short
rows rather than waiting on a long tail), and its rows are admitted as rows retire, up to
``live_rows``: on
a ragged batch (:mod:`sleight.backends.ragged`) in pieces, so the batch stays full until the queue
runs dry, with no padding; otherwise whole, once all its rows fit. A question's trials are still
forked from its own clean prefix, decided by the same hook, and finished and committed per question
(:func:`scheduled_questions` yields them as they complete, in any order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sleight.backends.base import ContinuousBatching, DecodeStream, Generation, LanguageModel, Rendered
from sleight.tamper.engine import (
    Clean,
    TamperConfig,
    Trial,
    TrialRequest,
    WordEnd,
    collect_trials,
    finish_clean,
    fork_request,
    trial_request,
    untouched_trials,
)
from sleight.tamper.trigger import Trigger

SCHEDULES = ("sweep", "question")


def can_schedule(model: LanguageModel) -> bool:
    """The sweep order needs an engine that batches continuously (the hf engine's ``stream``)."""
    return isinstance(model, ContinuousBatching)


@dataclass
class StreamStats:
    """What the stream did, for the session record and the benchmark."""

    live_rows: int
    peak_rows: int = 0
    peak_columns: int = 0
    requests: int = 0
    steps: int = 0  # forward passes of the batch (ragged batches)
    columns_live: int = 0  # key columns one layer's attention read, summed over the steps (a shared prefix once)
    columns_masked: int = 0  # masked columns it read (the tails of rows shorter than their segment's longest)
    early_forks: int = 0  # trial requests submitted while their clean run still decoded

    def record(self) -> dict[str, Any]:
        return {
            "live_rows": self.live_rows,
            "peak_rows": self.peak_rows,
            "peak_columns": self.peak_columns,
            "requests": self.requests,
            "steps": self.steps,
            "columns_live": self.columns_live,
            "columns_masked": self.columns_masked,
            "early_forks": self.early_forks,
        }


class _Fork:
    """A clean run's watcher: a hook that never edits, reading each accepted token with the proposal
    after it as the look-ahead (the detector's one token, as the finished reply's scan reads it), and
    calling ``found(prefix, trigger)`` at the first confirmed trigger, while the clean run decodes on."""

    def __init__(self, model: LanguageModel, config: TamperConfig, found: Callable[[list[int], Trigger], None]) -> None:
        self.model, self.config, self.found = model, config, found
        self.may_end = WordEnd(model, config.trigger)
        self.find = config.finder()
        self.checked = 0
        self.done = False

    def __call__(self, _row: int, out: Sequence[int], proposed: int | None) -> None:
        if self.done or proposed is None or proposed in self.model.eos_ids:
            return None  # a trigger at the reply's very end is read from the finished reply
        for e in range(self.checked, len(out)):
            if not self.may_end(out[e]):
                continue
            nxt = out[e + 1] if e + 1 < len(out) else proposed
            trig = self.find(list(out[: e + 1]), nxt, self.model.decode, self.config.trigger, [False] * (e + 1))
            if trig is not None:
                self.done = True
                self.found(list(out[: trig.start]), trig)
                return None
        self.checked = len(out)
        return None


def scheduled_questions(
    model: Any,
    work: Sequence[tuple[int, Rendered]],
    substitutes: Sequence[str],
    config: TamperConfig,
    *,
    live_rows: int,
    progress: Callable[[int], None] | None = None,
    stats: StreamStats | None = None,
) -> Iterator[tuple[int, Clean, list[Trial]]]:
    """``(index, clean run, trials)`` for every ``(index, rendered prompt)`` of ``work``, as each
    question's trials finish. Untouched questions (no trigger) come as soon as their clean run ends.

    A question's trials are forked at its clean run's first trigger, while the clean run decodes on
    (they need only the prefix before it), so a long clean reply does not hold its trials back;
    they are collected when both have finished."""
    stream: DecodeStream = model.stream(top_k=config.top_k, live_rows=live_rows, progress=progress)
    cleans: dict[int, tuple[int, Rendered]] = {}
    trials: dict[int, tuple[int, TrialRequest]] = {}
    forked: dict[int, tuple[int, TrialRequest]] = {}  # question index -> its trial request's id and the request
    done: dict[int, list[Generation]] = {}  # trial request id -> its rows, finished before their clean run

    def fork(i: int, rendered: Rendered) -> Callable[[list[int], Trigger], None]:
        def found(prefix: list[int], first: Trigger) -> None:
            req = fork_request(model, rendered, prefix, first, substitutes, config)
            gid = stream.submit([req.prompt] * len(substitutes), req.budget, hook=req.hook, forced=req.forced)
            trials[gid] = (i, req)
            forked[i] = (gid, req)
            if stats is not None:
                stats.early_forks += 1

        return found

    for i, rendered in work:  # every clean run ahead of every trial request
        watch = _Fork(model, config, fork(i, rendered))
        cleans[stream.submit([rendered.ids], config.max_new_tokens, hook=watch, priority=math.inf)] = (i, rendered)
    try:
        for gid, gens in stream:
            if gid in cleans:
                i, rendered = cleans.pop(gid)
                clean = finish_clean(model, rendered, gens[0], config)
                if not clean.triggers:
                    if i in forked:
                        raise RuntimeError(f"question {i}: trials were forked at a trigger its finished clean run does not have")
                    yield i, clean, untouched_trials(clean, substitutes)
                    continue
                if i in forked:
                    tid, req = forked.pop(i)
                    if req.first != clean.triggers[0]:
                        raise RuntimeError(f"question {i}: the fork's first trigger {req.first} is not the finished clean run's {clean.triggers[0]}")
                    req.clean = clean
                    stream.reprioritize(tid, len(clean.reply.token_ids))
                    if tid in done:
                        del trials[tid]
                        yield i, clean, collect_trials(model, req, done.pop(tid), config)
                    continue
                req = trial_request(model, clean, substitutes, config)
                # longest clean reply first: its trials likely decode longest, and the batch drains on short ones
                tid = stream.submit([req.prompt] * len(substitutes), req.budget, hook=req.hook, forced=req.forced, priority=len(clean.reply.token_ids))
                trials[tid] = (i, req)
            else:
                i, req = trials[gid]
                if req.clean is None:  # its clean run still decodes
                    done[gid] = gens
                    continue
                del trials[gid]
                yield i, req.clean, collect_trials(model, req, gens, config)
    finally:
        if stats is not None:
            stats.peak_rows, stats.peak_columns, stats.requests = stream.peak_rows, stream.peak_columns, stream.requests
            stats.steps = stream.steps
            stats.columns_live, stats.columns_masked = stream.columns_live, stream.columns_masked
