"""Two-phase decoding (SPEC §2, §3.1): decide a question's tokens with plain greedy requests, then
score them once. For engines that cannot afford per-step surgery (vLLM); engine-agnostic.

*Phase A* decides the tokens. Every trial row is one request: the rendered chat plus the reply
decided so far (on the first round: the clean prefix and the forced substitute). It generates
greedily within the budget left and stops at end-of-sequence, at the budget, or at a token after
which the trigger may be complete (the stop list, a fast path). On return the project's own detector
(the conventions' detector, one token of look-ahead) reads the new tokens in order. A confirmed
trigger keeps the tokens before it, drops the trigger tokens, the look-ahead and everything after,
appends the substitute encoded in context, and the row goes out again (a prefix cache makes that
cost only the new tail). When the last token may end the word but its look-ahead was not generated,
the row goes out for exactly one token. The detector decides, not the stop list: a trigger the stop
list does not know is found in the returned tokens all the same (the tokens after it are wasted), and
a false stop costs one request. All live rows of a question go out together, one call per round; on
an engine that streams (vLLM: ``scored_stream``) there are no rounds, and each row's next request
joins the running batch as soon as its last one returns.

*Phase B* computes every record with the engine's teacher-forced :meth:`score_tokens` over the final
replies (the shared prefix once, forked). An engine that reads a token's records as it generates it
(vLLM scoring its own tokens: ``generate_scored``) needs no Phase B: a kept token's records are
those of the request that generated it (its context is the final reply's, up to it), and a
substitute's are read by a one-token request forced to it, sent beside its row's next request;
both read the prefix cache, where a scoring pass over each reply would not. Under the study's conventions a reply the model ended is
scored with an end-of-turn token after it, which is kept (:func:`~sleight.tamper.engine.adopt_end`),
and a substitute is never cut by the budget. Where the scoring pass's argmax is not the token Phase A
chose at a model-chosen position (two engines' numerics), it is counted per trial, never hidden.

The functions mirror :mod:`sleight.tamper.engine` (``clean_run``, ``batched_trials``) and return the
same objects, so a run records the same tables whichever path made it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sleight.backends.base import Completion, LanguageModel, Rendered, Scored, ScoredGeneration
from sleight.tamper.engine import (
    Clean,
    Cost,
    Reply,
    Substitution,
    TamperConfig,
    Trial,
    WordEnd,
    adopt_end,
    end_placeholder,
    find_triggers,
    plan_substitution,
    untouched_trials,
)
from sleight.tamper.trigger import is_word_end, is_word_start

DECODINGS = ("lockstep", "two-phase")

_STOPS: weakref.WeakKeyDictionary[object, dict[str, tuple[int, ...]]] = weakref.WeakKeyDictionary()


def trigger_stop_ids(model: LanguageModel, word: str) -> tuple[int, ...]:
    """Token ids after which the trigger may be complete: Phase A's stop list.

    A token qualifies when its surface holds the whole word where a word may start (the token's
    start, or after a non-letter) and ending where a word may end (the token's end, or before a
    non-letter). A split trigger (``"T" + "he"``) is not in it; the detector still finds it.
    """
    try:
        per_model = _STOPS.setdefault(model, {})
    except TypeError:  # a model that cannot be weakly referenced: no memo
        per_model = {}
    if word in per_model:
        return per_model[word]
    w = word.lower()
    found = []
    for tid in range(model.vocab_size):
        try:
            s = model.token_text(tid).lower()
        except Exception:  # ids past the tokenizer's table (padded output layers)
            continue
        at = s.find(w)
        while at >= 0:
            end = at + len(w)
            if is_word_start(s[at - 1] if at else "") and (end == len(s) or is_word_end(s[end])):
                found.append(tid)
                break
            at = s.find(w, at + 1)
    per_model[word] = tuple(found)
    return per_model[word]


_Rec = tuple[float, np.ndarray, np.ndarray]  # one position's records: the token's log-prob, top-k ids, top-k log-probs


def _recs(sc: Scored) -> list[_Rec | None]:
    return [(float(sc.logprobs[j]), sc.top_ids[j], sc.top_logprobs[j]) for j in range(len(sc.token_ids))]


def _scored(tokens: Sequence[int], recs: Sequence[_Rec | None], k: int) -> Scored:
    """Records gathered while generating, as the scoring pass would return them (entropy NaN: the
    engine returns no full distribution)."""
    if any(r is None for r in recs) or len(recs) != len(tokens):
        raise RuntimeError("a reply's records are incomplete")
    rs = [r for r in recs if r is not None]
    return Scored(
        list(tokens),
        np.asarray([r[0] for r in rs], dtype=np.float64),
        np.asarray([r[1] for r in rs], dtype=np.int64).reshape(len(rs), k),
        np.asarray([r[2] for r in rs], dtype=np.float32).reshape(len(rs), k),
        np.full(len(rs), np.nan, dtype=np.float32),
    )


def scores_while_generating(model: LanguageModel) -> bool:
    """Whether ``model`` reads each token's records as it generates it (no Phase B)."""
    return _scorer(model) is not None


def _scorer(model: LanguageModel) -> ScoredGeneration | None:
    """``model`` where it reads each token's records as it generates it, else None."""
    return model if isinstance(model, ScoredGeneration) and bool(model.scores_while_generating) else None


@dataclass
class _Row:
    """One trial's Phase A state: the reply decided so far and what the engine has cached of it."""

    reply: list[int]
    injected: list[bool]
    substitutions: list[Substitution]
    checked: int  # a trigger ending at a token before this index has been decided
    seen: list[int]  # the sequence the engine last computed for this row (its prefix-cache entry)
    records: list[_Rec | None] = field(default_factory=list)  # per reply token, read while generating (None: not yet)
    end: _Rec | None = None  # the end-of-sequence step's, when the model ended the reply
    pending: bool = False  # the last token may end a trigger whose look-ahead is not generated yet
    done: bool = False
    finish: str = "length"
    cost: Cost = field(default_factory=Cost)


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _Decider:
    """Phase A over the rows of one question."""

    def __init__(self, model: LanguageModel, prompt: Sequence[int], substitutes: Sequence[str], config: TamperConfig) -> None:
        self.model = model
        self.prompt = list(prompt)
        self.substitutes = list(substitutes)
        self.config = config
        self.budget = config.max_new_tokens
        self.may_end = WordEnd(model, config.trigger)
        self.stop_ids = trigger_stop_ids(model, config.trigger)
        self.find = config.finder()
        self.scorer = _scorer(model)
        self.scoring = self.scorer is not None
        self.rounds = 0

    def run(self, rows: list[_Row], progress: Callable[[int], None] | None) -> None:
        if self.scoring:
            return self._run_stream(rows, progress)
        while True:
            live = [i for i, r in enumerate(rows) if not r.done]
            if not live:
                return
            prompts = [self.prompt + rows[i].reply for i in live]
            room = [1 if rows[i].pending else self.budget - len(rows[i].reply) for i in live]
            outs = self.model.generate_until(prompts, room, stop_token_ids=self.stop_ids)
            self.rounds += 1
            steps = 0
            for i, p, out in zip(live, prompts, outs):
                steps += self._returned(i, rows[i], p, out)
            if progress:
                progress(steps)

    def _run_stream(self, rows: list[_Row], progress: Callable[[int], None] | None) -> None:
        """Phase A on an engine that reads records as it generates: no rounds, a row's next request
        (and a one-token request forced to each new substitute token) goes out as soon as its last
        one returns, into the engine's running batch."""
        assert self.scorer is not None
        stream = self.scorer.scored_stream(top_k=self.config.top_k, stop_token_ids=self.stop_ids)
        waiting: dict[str, tuple[int, int | None, list[int]]] = {}  # request id -> (row, forced position or None, prompt)
        asked: set[tuple[int, int]] = set()

        def send(i: int) -> None:
            r = rows[i]
            for j, rec in enumerate(r.records):
                if rec is None and (i, j) not in asked:
                    asked.add((i, j))
                    p = self.prompt + r.reply[:j]
                    waiting[stream.submit(p, 1, forced=r.reply[j])] = (i, j, p)
            if not r.done:
                p = self.prompt + r.reply
                waiting[stream.submit(p, 1 if r.pending else self.budget - len(r.reply))] = (i, None, p)

        for i in range(len(rows)):
            send(i)
        for rid, out in stream:
            i, j, p = waiting.pop(rid)
            r = rows[i]
            if j is None:
                steps = self._returned(i, r, p, out)
                send(i)
            else:  # a substitute's records; substitutes are never cut, so position j still holds it
                assert out.records is not None and out.token_ids == [r.reply[j]]
                r.records[j] = _recs(out.records)[0]
                r.cost.requests += 1
                r.cost.prefilled += len(p) - min(_common(r.seen, p), len(r.seen))
                r.cost.decoded += 1
                steps = 1
            if progress:
                progress(steps)
        self.rounds = max((r.cost.requests for r in rows), default=0)

    def _returned(self, i: int, r: _Row, p: list[int], out: Completion) -> int:
        """Book a returned request of row ``i`` (sent as ``p``) and read its tokens; the steps it took."""
        n = out.decoded  # the end-of-sequence step counts
        r.cost.requests += 1
        r.cost.prefilled += len(p) - min(_common(r.seen, p), len(r.seen))
        r.cost.decoded += n
        # The engine computed every token it was fed: the prompt, and all generated tokens but
        # the last (unless it went on to choose end-of-sequence after it).
        r.seen = p + list(out.token_ids if out.finish_reason == "stop" else out.token_ids[:-1])
        self._absorb(i, r, out)
        return n

    def _absorb(self, i: int, r: _Row, out: Completion) -> None:
        """Read the new tokens with the detector: swap the first confirmed trigger, or go on."""
        full = r.reply + list(out.token_ids)
        flags = r.injected + [False] * len(out.token_ids)
        ended = out.finish_reason == "stop" or len(full) >= self.budget
        if self.scoring:
            assert out.records is not None
            got = _recs(out.records)
            r.records += got[: len(out.token_ids)]
            r.end = got[-1] if out.finish_reason == "stop" else None
        for e in range(r.checked, len(full)):
            if flags[e] or not self.may_end(full[e]):
                continue
            if e + 1 < len(full):
                nxt: int | None = full[e + 1]
            elif ended:
                nxt = None
            else:  # the look-ahead is not generated yet: ask for exactly one token
                r.reply, r.injected, r.checked, r.pending = full, flags, e, True
                return
            trig = self.find(full[: e + 1], nxt, self.model.decode, self.config.trigger, flags)
            if trig is None:
                continue
            sub = plan_substitution(full[: e + 1], trig, self.substitutes[i], self.model, self.config)
            r.reply = full[: trig.start] + list(sub.ids)
            r.injected = flags[: trig.start] + [True] * len(sub.ids)
            if self.scoring:
                r.records = r.records[: trig.start] + [None] * len(sub.ids)
                r.end = None
            r.substitutions.append(sub)
            r.checked, r.pending = len(r.reply), False
            if not sub.ids or len(r.reply) >= self.budget:
                r.done, r.finish = True, "length"
            return
        r.reply, r.injected, r.checked, r.pending = full, flags, len(full), False
        if ended:
            r.done, r.finish = True, ("stop" if out.finish_reason == "stop" else "length")


def _reply(scored: Scored, injected: Sequence[bool], finish: str, eos_ids: frozenset[int] | None = None) -> tuple[Reply, int]:
    """Phase B's records as a :class:`Reply`, and how many model-chosen positions' argmax differs.

    With ``eos_ids``, the last scored token is an end-of-turn placeholder that the reply keeps as
    the model's own end-of-turn token (study conventions)."""
    flags = np.asarray(list(injected) + ([False] if eos_ids is not None else []), dtype=bool)
    reply = Reply(
        token_ids=list(scored.token_ids),
        logprobs=np.asarray(scored.logprobs, dtype=np.float64),
        top_ids=np.asarray(scored.top_ids),
        top_logprobs=np.asarray(scored.top_logprobs, dtype=np.float32),
        entropy=np.asarray(scored.entropy, dtype=np.float32),
        injected=flags,
        finish_reason=finish,
    )
    if eos_ids is not None:
        adopt_end(reply, eos_ids)
    toks = np.asarray(reply.token_ids, dtype=np.int64)
    if not len(toks):
        return reply, 0
    return reply, int(((reply.top_ids[:, 0] != toks) & ~flags).sum())


def clean_run(model: LanguageModel, rendered: Rendered, config: TamperConfig, progress: Callable[[int], None] | None = None) -> Clean:
    """The unhooked greedy reply (Phase A: one request), its records scored (Phase B) or read as
    it was generated."""
    scorer = _scorer(model)
    scoring = scorer is not None
    if scorer is not None:
        out = scorer.generate_scored([rendered.ids], [config.max_new_tokens], forced=[None], top_k=config.top_k)[0]
    else:
        out = model.generate_until([rendered.ids], config.max_new_tokens)[0]
    if progress:
        progress(out.decoded)
    eos = _keeps_end(model, config, out.finish_reason)
    tail = [end_placeholder(model)] if eos is not None else []
    if scoring:
        assert out.records is not None
        recs = _recs(out.records)
        scored = _scored(list(out.token_ids) + tail, recs[: len(out.token_ids) + len(tail)], config.top_k)
    else:
        scored = model.score_tokens(rendered.ids, [list(out.token_ids) + tail], top_k=config.top_k)[0]
    reply, dis = _reply(scored, [False] * len(out.token_ids), out.finish_reason, eos)
    cost = Cost(requests=1, decoded=out.decoded, prefilled=len(rendered.ids))
    return Clean(rendered, reply, find_triggers(model, reply, config), disagreements=dis, cost=cost)


def _clean_records(clean: Clean, n: int) -> list[_Rec | None]:
    """The first ``n`` positions' records of the clean reply (the trials' shared prefix)."""
    rep = clean.reply
    return [(float(rep.logprobs[j]), rep.top_ids[j], rep.top_logprobs[j]) for j in range(n)]


def _keeps_end(model: LanguageModel, config: TamperConfig, finish: str) -> frozenset[int] | None:
    """The end ids when the reply keeps an end-of-turn token (study conventions, ended by the model)."""
    return model.eos_ids if config.study and finish == "stop" else None


def batched_trials(
    model: LanguageModel,
    clean: Clean,
    substitutes: Sequence[str],
    config: TamperConfig,
    progress: Callable[[int], None] | None = None,
) -> list[Trial]:
    """All substitutes of one question: Phase A rounds from the shared clean prefix, then one
    scoring pass over the final replies."""
    if not clean.triggers:
        return untouched_trials(clean, substitutes)
    first = clean.triggers[0]
    prefix = clean.reply.token_ids[: first.start]
    prompt = list(clean.rendered.ids)
    scoring = scores_while_generating(model)
    rows = []
    for s in substitutes:
        sub = plan_substitution(prefix, first, s, model, config)
        reply = prefix + list(sub.ids)
        # The clean run's request already computed the rendered chat and the prefix (prefix cache).
        row = _Row(reply, [False] * len(prefix) + [True] * len(sub.ids), [sub], len(reply), seen=prompt + prefix)
        if scoring:  # the prefix's records are the clean run's; the substitute's are read in the first round
            row.records = _clean_records(clean, len(prefix)) + [None] * len(sub.ids)
        row.done = not sub.ids or len(reply) >= config.max_new_tokens
        rows.append(row)
    _Decider(model, prompt, substitutes, config).run(rows, progress)
    ends = [_keeps_end(model, config, r.finish) for r in rows]
    replies = [r.reply + ([end_placeholder(model)] if e is not None else []) for r, e in zip(rows, ends)]
    if scoring:
        scored = [_scored(rep, r.records + ([r.end] if e is not None else []), config.top_k) for rep, r, e in zip(replies, rows, ends)]
    else:
        scored = model.score_tokens(prompt, replies, top_k=config.top_k)
    trials = []
    for i, (s, r, sc, e) in enumerate(zip(substitutes, rows, scored, ends)):
        final, dis = _reply(sc, r.injected, r.finish, e)
        trials.append(Trial(i, s, final, r.substitutions, disagreements=dis, cost=r.cost))
    return trials
