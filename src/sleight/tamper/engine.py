"""The Sleight of Word decoder (SPEC §3.1, §3.2, §6): one clean run, then one forked batch per question.

Per question the clean reply is decoded once, without a hook, and its triggers are located with the
same detector the hook uses. Every trial shares the clean tokens before the first trigger, so all
substitutes of a question run as ONE batched ``greedy`` call: its prompt is the rendered chat plus
that shared prefix (the backend computes it once and forks its KV cache across rows), each row is
forced its own substitute first, and a hook swaps every later trigger in place (retracting the
trigger tokens, discarding the look-ahead token, forcing the substitute). Nothing is regenerated.
The prefix records (log-probs, top-k, entropy) are the clean run's own.

Conventions (``TamperConfig.conventions``, docs/tamper.md): ``"study"`` (the default) follows the
study's phase-1 code: a trigger is one token, the substitute is spaced, capitalised and encoded as
the study did and never cut by the budget, and a reply the model ended keeps its end-of-turn token
(:func:`finish_replies` records what the backend does not: the end-of-turn step and substitute
tokens past the budget). ``"sleight"`` is sleight's own text-level detector and surgery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial

import numpy as np

from sleight.backends.base import Edit, EndStep, Generation, LanguageModel, Rendered, Scored
from sleight.tamper.trigger import (
    Finder,
    Trigger,
    encode_in_context,
    find_pending_trigger,
    find_token_trigger,
    scan_triggers,
    study_swap_text,
    swap_text,
)

CONVENTIONS = ("study", "sleight")


@dataclass(frozen=True)
class TamperConfig:
    """What decides a trial's tokens (all of it goes into the run manifest)."""

    trigger: str = "the"
    max_new_tokens: int = 256  # the reply budget (study conventions: a substitute may end past it)
    top_k: int = 20
    window: int = 8  # tokens per post-swap window (signals)
    conventions: str = "study"  # "study": the study's phase-1 code; "sleight": sleight's own (docs/tamper.md)
    punctuation_led: bool = False  # study conventions: also swap a trigger token led by punctuation ('"the')

    def __post_init__(self) -> None:
        if self.conventions not in CONVENTIONS:
            raise ValueError(f"conventions must be one of {CONVENTIONS}, not {self.conventions!r}")
        if self.punctuation_led and self.conventions != "study":
            raise ValueError("punctuation_led applies to the study's conventions (sleight's detector always swaps punctuation-led words)")

    @property
    def study(self) -> bool:
        return self.conventions == "study"

    def finder(self) -> Finder:
        """The trigger detector of these conventions, called ``(tokens, next_token, decode, word, injected)``."""
        if self.study:
            return partial(find_token_trigger, punctuation_led=self.punctuation_led)
        return find_pending_trigger


@dataclass(frozen=True)
class QuestionSet:
    """Which questions a run asks: how many, their digest, the first id (the manifest's ``questions``)."""

    n: int
    sha256: str
    first: str

    def as_record(self) -> dict[str, object]:
        return {"n": self.n, "sha256": self.sha256, "first": self.first}


@dataclass(frozen=True)
class SubstituteSet:
    """Which substitutes a run swaps in: how many, their digest, the entity (the manifest's ``substitutes``)."""

    n: int
    sha256: str
    entity: str

    def as_record(self) -> dict[str, object]:
        return {"n": self.n, "sha256": self.sha256, "entity": self.entity}


@dataclass(frozen=True)
class TamperRunConfig:
    """The manifest's ``config`` as a typed record: everything that decides a run's records, so a
    directory made under another one is refused. :meth:`as_record` is the JSON object the manifest
    has always held (its keys in their order; :data:`sleight.tamper.store.IDENTITY_KEYS` among them),
    ``load`` absent for a plain load and the :class:`TamperConfig` fields spread in its own order."""

    model: str
    engine: str
    dtype: str | None
    decoding: str
    load: Mapping[str, object]  # the spec's load settings that change the records; {} for a plain load
    tamper: TamperConfig
    questions: QuestionSet
    substitutes: SubstituteSet
    question_source: str
    substitute_source: str

    def as_record(self) -> dict[str, object]:
        return {
            "model": self.model,
            "engine": self.engine,
            "dtype": self.dtype,
            "decoding": self.decoding,
            **({"load": dict(self.load)} if self.load else {}),
            **asdict(self.tamper),
            "questions": self.questions.as_record(),
            "substitutes": self.substitutes.as_record(),
            "question_source": self.question_source,
            "substitute_source": self.substitute_source,
        }


@dataclass
class Reply:
    """A reply's tokens and, per token, the model's view of that position (arrays aligned)."""

    token_ids: list[int]
    logprobs: np.ndarray  # the model's log-prob of each token, injected ones included
    top_ids: np.ndarray  # (n, k)
    top_logprobs: np.ndarray  # (n, k)
    entropy: np.ndarray  # exact full-distribution entropy (nats)
    injected: np.ndarray  # bool
    finish_reason: str  # "stop" | "length"
    eos_kept: bool = False  # the last token is the end-of-turn token the model ended with (study conventions)

    @classmethod
    def from_generation(cls, gen: Generation) -> Reply:
        return cls(
            token_ids=list(gen.token_ids),
            logprobs=np.asarray(gen.logprobs, dtype=np.float64),
            top_ids=np.asarray(gen.top_ids),
            top_logprobs=np.asarray(gen.top_logprobs, dtype=np.float32),
            entropy=np.asarray(gen.entropy, dtype=np.float32),
            injected=np.asarray(gen.forced, dtype=bool),
            finish_reason=gen.finish_reason,
        )

    def head(self, n: int) -> Reply:
        return Reply(
            self.token_ids[:n],
            self.logprobs[:n],
            self.top_ids[:n],
            self.top_logprobs[:n],
            self.entropy[:n],
            self.injected[:n],
            self.finish_reason,
            self.eos_kept and n >= len(self.token_ids),
        )

    @property
    def text_ids(self) -> list[int]:
        """The tokens the reply reads as: all of them but a kept end-of-turn token."""
        return self.token_ids[:-1] if self.eos_kept else self.token_ids

    def then(self, tail: Reply) -> Reply:
        """This reply's records followed by ``tail``'s (the finish reason is the tail's)."""
        return Reply(
            self.token_ids + tail.token_ids,
            np.concatenate([self.logprobs, tail.logprobs]),
            np.concatenate([self.top_ids, tail.top_ids]),
            np.concatenate([self.top_logprobs, tail.top_logprobs]),
            np.concatenate([self.entropy, tail.entropy]),
            np.concatenate([self.injected, tail.injected]),
            tail.finish_reason,
            tail.eos_kept,
        )


@dataclass(frozen=True)
class Substitution:
    """One replacement of a trigger: where it landed in the reply and what was injected."""

    step: int  # reply index of the first injected token
    ids: tuple[int, ...]  # injected ids (sleight conventions: cut to the budget; study: never cut)
    text: str  # the text forced in place of the trigger tokens' text
    trigger_text: str  # what the trigger tokens read as
    trigger_tokens: int  # how many tokens the trigger took (withdrawn when swapped during decoding)
    fallback: bool  # sleight conventions: the in-context encoding failed its prefix condition; encoded on its own


@dataclass
class Cost:
    """What deciding one reply's tokens took from the engine (counted by two-phase decoding).

    ``requests``: generation requests sent for it (one per round it was live in); ``decoded``:
    tokens the engine generated, discarded look-ahead and post-trigger tokens and the end-of-sequence
    step included; ``prefilled``: prompt tokens not already in the engine's prefix cache, counted per
    token (the row's own earlier sequence is cached; the question's shared prompt counts once, in the
    clean run).
    """

    requests: int = 0
    decoded: int = 0
    prefilled: int = 0


@dataclass
class Clean:
    """The clean (untampered) run of one question and the triggers it contains."""

    rendered: Rendered
    reply: Reply
    triggers: list[Trigger]
    disagreements: int = 0  # two-phase: positions where the scoring pass's argmax is not the decided token
    cost: Cost | None = None


@dataclass
class Trial:
    """One (question, substitute) trial."""

    substitute_index: int
    substitute: str
    reply: Reply
    substitutions: list[Substitution] = field(default_factory=list)
    untouched: bool = False
    disagreements: int = 0  # two-phase: model-chosen positions whose scored argmax is another token
    cost: Cost | None = None


def render_question(model: LanguageModel, question: str) -> Rendered:
    """The model's own chat template, one user turn, no system prompt of ours (SPEC §3.1)."""
    return model.render_chat([{"role": "user", "content": question}])


def plan_substitution(tokens: Sequence[int], trigger: Trigger, substitute: str, model: LanguageModel, config: TamperConfig) -> Substitution:
    """The tokens that replace ``trigger`` in ``tokens``.

    Study conventions: the study's text (:func:`study_swap_text`) encoded on its own, whole, even
    past the budget. Sleight conventions: the trigger tokens' text with the word swapped, encoded in
    context, cut to the budget.
    """
    if config.study:
        text = study_swap_text(trigger, substitute, config.punctuation_led)
        return Substitution(trigger.start, tuple(model.encode(text)), text, trigger.text, trigger.n_tokens, False)
    text = swap_text(trigger, config.trigger, substitute)
    before = model.decode(tokens[: trigger.start])
    ids, ok = encode_in_context(model.encode, before, text)
    return Substitution(
        step=trigger.start,
        ids=tuple(ids[: max(config.max_new_tokens - trigger.start, 0)]),
        text=text,
        trigger_text=trigger.text,
        trigger_tokens=trigger.n_tokens,
        fallback=not ok,
    )


class WordEnd:
    """Cheap filter: a token can only end the word if it carries the word's last letter."""

    def __init__(self, model: LanguageModel, word: str) -> None:
        self.model = model
        self._last = word[-1].lower() if word.isascii() else None
        self._surface: dict[int, str] = {}

    def __call__(self, token: int) -> bool:
        if self._last is None:
            return True
        s = self._surface.get(token)
        if s is None:
            s = self._surface[token] = self.model.token_text(token).lower()
        return self._last in s


class SwapHook:
    """The decoding hook: replaces every whole-word trigger of each row as soon as it is complete.

    Row ``r`` decodes the reply ``prefix + output``; ``injected[r]`` marks injected reply positions
    (a substitute is never re-triggered). The hook's own bookkeeping of what it injected is checked
    against the decoder's ``forced`` flags afterwards.
    """

    def __init__(
        self,
        model: LanguageModel,
        prefix: Sequence[int],
        substitutes: Sequence[str],
        config: TamperConfig,
        injected: Sequence[Sequence[bool]] | None = None,
    ) -> None:
        self.model = model
        self.prefix = list(prefix)
        self.substitutes = list(substitutes)
        self.config = config
        self.word = config.trigger
        self.injected = [list(f) for f in injected] if injected is not None else [[] for _ in substitutes]
        self.substitutions: list[list[Substitution]] = [[] for _ in substitutes]
        self._eos = frozenset(model.eos_ids)
        self._may_end_word = WordEnd(model, self.word)
        self._find = config.finder()

    def __call__(self, row: int, output: Sequence[int], proposed: int | None) -> Edit | None:
        if not output and not self.prefix:
            return None
        last = output[-1] if output else self.prefix[-1]
        if not self._may_end_word(last):
            return None
        tokens = self.prefix + list(output)
        nxt = None if proposed is None or proposed in self._eos else proposed
        trig = self._find(tokens, nxt, self.model.decode, self.word, self.injected[row])
        if trig is None:
            return None
        if trig.start < len(self.prefix):
            raise RuntimeError(f"row {row}: a trigger reaches into the shared prefix (internal error)")
        sub = plan_substitution(tokens, trig, self.substitutes[row], self.model, self.config)
        flags = self.injected[row]
        del flags[trig.start :]
        flags.extend([False] * (trig.start - len(flags)))
        flags.extend([True] * len(sub.ids))
        self.substitutions[row].append(sub)
        return Edit(force=sub.ids, retract=trig.n_tokens)


def end_placeholder(model: LanguageModel) -> int:
    """The end-of-turn id appended before scoring; :func:`adopt_end` makes it the model's own choice."""
    if not model.eos_ids:
        raise RuntimeError("the model has no end-of-sequence id, so a reply it ended cannot keep one")
    return min(model.eos_ids)


def adopt_end(reply: Reply, eos_ids: frozenset[int]) -> Reply:
    """Mark ``reply``'s last token as the kept end-of-turn token and make it greedy's own choice: the
    argmax at that position when that is an end-of-sequence id (a model with several, e.g. Qwen's
    ``<|im_end|>`` and ``<|endoftext|>``), with its log-prob. A scored position's records do not
    depend on the token placed there, so only the id and its log-prob change."""
    best = int(reply.top_ids[-1, 0]) if len(reply.token_ids) and reply.top_ids.shape[1] else None
    if best is not None and best in eos_ids and best != reply.token_ids[-1]:
        reply.token_ids[-1] = best
        reply.logprobs[-1] = float(reply.top_logprobs[-1, 0])
    reply.eos_kept = True
    return reply


def _scored_tail(sc: Scored, n: int, injected: bool, finish: str) -> Reply:
    """Records of ``sc`` from position ``n`` on, as a reply tail."""
    m = len(sc.token_ids) - n
    return Reply(
        list(sc.token_ids[n:]),
        np.asarray(sc.logprobs[n:], dtype=np.float64),
        np.asarray(sc.top_ids[n:]),
        np.asarray(sc.top_logprobs[n:], dtype=np.float32),
        np.asarray(sc.entropy[n:], dtype=np.float32),
        np.full(m, injected, dtype=bool),
        finish,
    )


def finish_replies(
    model: LanguageModel,
    prompt: Sequence[int],
    replies: Sequence[Reply],
    tails: Sequence[Sequence[int]],
    top_k: int,
    ends: Sequence[EndStep | None] | None = None,
) -> list[Reply]:
    """Study conventions, for replies decoded by :meth:`greedy` (whose tokens record neither): a
    reply the model ended keeps its end-of-turn token, as the study's vLLM output did, and
    ``tails[i]``, the tokens of a substitute that the budget cut, are appended whole (injected), as
    the study spliced them. The end-of-turn token takes the records of the step that chose it where
    the decoder kept them (``ends[i]``, :class:`~sleight.backends.base.EndStep`); the rest are recorded
    by one teacher-forced :meth:`score_tokens` pass over the replies that need it (its shared prefix
    computed once); the other records are the decoder's own."""
    want: dict[int, tuple[list[int], bool]] = {}
    out = list(replies)
    for i, (r, tail, end) in enumerate(zip(replies, tails, ends or [None] * len(replies))):
        if tail:
            want[i] = (list(tail), True)
        elif r.finish_reason == "stop" and not r.eos_kept:
            if end is None:
                want[i] = ([end_placeholder(model)], False)
            else:
                step = Reply([end.token_id], np.array([end.logprob]), end.top_ids[None], end.top_logprobs[None],
                             np.array([end.entropy], dtype=np.float32), np.array([False]), r.finish_reason)
                out[i] = adopt_end(r.then(step), model.eos_ids)
    if not want:
        return out
    rows = sorted(want)
    scored = model.score_tokens(prompt, [replies[i].token_ids + want[i][0] for i in rows], top_k=top_k)
    for i, sc in zip(rows, scored):
        r = replies[i]
        extra, injected = want[i]
        full = r.then(_scored_tail(sc, len(r.token_ids), injected, r.finish_reason))
        out[i] = full if injected else adopt_end(full, model.eos_ids)
    return out


def cut_tail(reply: Reply, substitutions: Sequence[Substitution]) -> tuple[int, ...]:
    """The tokens of the last substitution that the decoder dropped at the budget (study conventions)."""
    if not substitutions:
        return ()
    last = substitutions[-1]
    have = len(reply.token_ids) - last.step
    return last.ids[have:] if 0 <= have < len(last.ids) else ()


def clean_run(
    model: LanguageModel, rendered: Rendered, config: TamperConfig, progress: Callable[[int], None] | None = None
) -> Clean:
    """The model's unhooked greedy reply, with its triggers located by the hook's own detector."""
    gen = model.greedy([rendered.ids], config.max_new_tokens, top_k=config.top_k, progress=progress)[0]
    return finish_clean(model, rendered, gen, config)


def finish_clean(model: LanguageModel, rendered: Rendered, gen: Generation, config: TamperConfig) -> Clean:
    """A clean run from its decoded reply (however it was scheduled)."""
    reply = Reply.from_generation(gen)
    if config.study:
        reply = finish_replies(model, rendered.ids, [reply], [()], config.top_k, [gen.end])[0]
    return Clean(rendered=rendered, reply=reply, triggers=find_triggers(model, reply, config))


def find_triggers(model: LanguageModel, reply: Reply, config: TamperConfig) -> list[Trigger]:
    """Every trigger of a finished reply (a kept end-of-turn token is the reply's end, never part of one)."""
    return scan_triggers(reply.text_ids, model.decode, config.trigger, find=config.finder())


def untouched_trials(clean: Clean, substitutes: Sequence[str]) -> list[Trial]:
    """No trigger in the clean reply: every trial IS the clean run, decoded zero more times."""
    return [Trial(i, s, clean.reply, [], untouched=True) for i, s in enumerate(substitutes)]


@dataclass
class TrialRequest:
    """One question's trials as one decoding request: every row the clean prompt plus the shared
    prefix, forced its own first substitute, the hook swapping every later trigger. ``clean`` may
    arrive after the request was made (a fork at the clean run's first trigger, while it decodes);
    its trials are collected once it has."""

    clean: Clean | None
    substitutes: list[str]
    prompt: list[int]
    budget: int
    firsts: list[Substitution]
    hook: SwapHook
    first: Trigger | None = None

    @property
    def forced(self) -> list[list[int]]:
        return [list(f.ids) for f in self.firsts]


def trial_request(model: LanguageModel, clean: Clean, substitutes: Sequence[str], config: TamperConfig) -> TrialRequest:
    """The request of ``clean``'s trials (it must contain a trigger)."""
    req = fork_request(model, clean.rendered, clean.reply.token_ids[: clean.triggers[0].start], clean.triggers[0], substitutes, config)
    req.clean = clean
    return req


def fork_request(
    model: LanguageModel, rendered: Rendered, prefix: Sequence[int], first: Trigger, substitutes: Sequence[str], config: TamperConfig
) -> TrialRequest:
    """The trials of a clean reply whose first trigger is ``first`` after ``prefix``: all they need
    of the clean run, which may still be decoding."""
    prefix = list(prefix)
    firsts = [plan_substitution(prefix, first, s, model, config) for s in substitutes]
    hook = SwapHook(model, prefix, substitutes, config, injected=[[False] * len(prefix) + [True] * len(f.ids) for f in firsts])
    return TrialRequest(None, list(substitutes), list(rendered.ids) + prefix, config.max_new_tokens - len(prefix), firsts, hook, first)


def collect_trials(model: LanguageModel, req: TrialRequest, gens: Sequence[Generation], config: TamperConfig) -> list[Trial]:
    """The trials of a decoded request: the clean prefix's records, then each row's own."""
    if req.clean is None:
        raise RuntimeError("trials collected before their clean run finished")
    head = req.clean.reply.head(len(req.prompt) - len(req.clean.rendered.ids))
    replies, subs = [], []
    for i, gen in enumerate(gens):
        reply = head.then(Reply.from_generation(gen))
        _check_injected(reply, req.hook.injected[i], i)
        replies.append(reply)
        subs.append([req.firsts[i], *req.hook.substitutions[i]])
    if config.study:
        tails = [cut_tail(r, ss) for r, ss in zip(replies, subs)]
        replies = finish_replies(model, req.clean.rendered.ids, replies, tails, config.top_k, [g.end for g in gens])
    return [Trial(i, s, r, ss) for i, (s, r, ss) in enumerate(zip(req.substitutes, replies, subs))]


def batched_trials(
    model: LanguageModel,
    clean: Clean,
    substitutes: Sequence[str],
    config: TamperConfig,
    progress: Callable[[int], None] | None = None,
) -> list[Trial]:
    """All substitutes of one question in one decoding batch forked from the shared clean prefix."""
    if not clean.triggers:
        return untouched_trials(clean, substitutes)
    req = trial_request(model, clean, substitutes, config)
    gens = model.greedy([req.prompt] * len(substitutes), req.budget, hook=req.hook, forced=req.forced, top_k=config.top_k, progress=progress)
    return collect_trials(model, req, gens, config)


def serial_trial(
    model: LanguageModel, rendered: Rendered, substitute: str, config: TamperConfig, progress: Callable[[int], None] | None = None
) -> Trial:
    """One trial on its own, from the bare prompt, with the same hook (the batched engine's check)."""
    hook = SwapHook(model, [], [substitute], config)
    gen = model.greedy([rendered.ids], config.max_new_tokens, hook=hook, top_k=config.top_k, progress=progress)[0]
    reply = Reply.from_generation(gen)
    _check_injected(reply, hook.injected[0], 0)
    subs = hook.substitutions[0]
    if config.study:
        reply = finish_replies(model, rendered.ids, [reply], [cut_tail(reply, subs)], config.top_k, [gen.end])[0]
    return Trial(0, substitute, reply, subs, untouched=not subs)


def _check_injected(reply: Reply, flags: Sequence[bool], row: int) -> None:
    """The hook's record of what it injected must be what the decoder marked forced."""
    want = np.zeros(len(reply.token_ids), dtype=bool)
    k = min(len(flags), len(want))
    want[:k] = np.asarray(flags[:k], dtype=bool)
    if not np.array_equal(want, reply.injected):
        raise RuntimeError(f"row {row}: injected positions disagree with the decoder's forced flags (internal error)")
