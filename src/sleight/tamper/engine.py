"""The Sleight of Word decoder (SPEC §3.1, §3.2, §6): one clean run, then one forked batch per question.

Per question the clean reply is decoded once, without a hook, and its triggers are located with the
same detector the hook uses. Every trial shares the clean tokens before the first trigger, so all
substitutes of a question run as ONE batched ``greedy`` call: its prompt is the rendered chat plus
that shared prefix (the backend computes it once and forks its KV cache across rows), each row is
forced its own substitute first, and a hook swaps every later trigger in place (retracting the
trigger tokens, discarding the look-ahead token, forcing the substitute). Nothing is regenerated.
The prefix records (log-probs, top-k, entropy) are the clean run's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sleight.backends.base import Edit, Generation, LanguageModel, Rendered
from sleight.tamper.trigger import Trigger, encode_in_context, find_pending_trigger, scan_triggers, swap_text


@dataclass(frozen=True)
class TamperConfig:
    """What decides a trial's tokens (all of it goes into the run manifest)."""

    trigger: str = "the"
    max_new_tokens: int = 256  # the reply budget: prefix, injected and generated tokens together
    top_k: int = 20
    window: int = 8  # tokens per post-swap window (signals)


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
            self.token_ids[:n], self.logprobs[:n], self.top_ids[:n], self.top_logprobs[:n], self.entropy[:n], self.injected[:n], self.finish_reason
        )

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
        )


@dataclass(frozen=True)
class Substitution:
    """One replacement of a trigger: where it landed in the reply and what was injected."""

    step: int  # reply index of the first injected token
    ids: tuple[int, ...]  # injected ids (cut to the budget)
    text: str  # the text forced in place of the trigger tokens' text
    trigger_text: str  # what the trigger tokens read as
    trigger_tokens: int  # how many tokens the trigger took (withdrawn when swapped during decoding)
    fallback: bool  # the in-context encoding failed its prefix condition; encoded on its own


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


def plan_substitution(
    tokens: Sequence[int], trigger: Trigger, substitute: str, word: str, model: LanguageModel, budget: int
) -> Substitution:
    """The tokens that replace ``trigger`` in ``tokens``: swapped text, encoded in context, cut to budget."""
    text = swap_text(trigger, word, substitute)
    before = model.decode(tokens[: trigger.start])
    ids, ok = encode_in_context(model.encode, before, text)
    return Substitution(
        step=trigger.start,
        ids=tuple(ids[: max(budget - trigger.start, 0)]),
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

    def __call__(self, row: int, output: Sequence[int], proposed: int | None) -> Edit | None:
        if not output and not self.prefix:
            return None
        last = output[-1] if output else self.prefix[-1]
        if not self._may_end_word(last):
            return None
        tokens = self.prefix + list(output)
        nxt = None if proposed is None or proposed in self._eos else proposed
        trig = find_pending_trigger(tokens, nxt, self.model.decode, self.word, self.injected[row])
        if trig is None:
            return None
        if trig.start < len(self.prefix):
            raise RuntimeError(f"row {row}: a trigger reaches into the shared prefix (internal error)")
        sub = plan_substitution(tokens, trig, self.substitutes[row], self.word, self.model, self.config.max_new_tokens)
        flags = self.injected[row]
        del flags[trig.start :]
        flags.extend([False] * (trig.start - len(flags)))
        flags.extend([True] * len(sub.ids))
        self.substitutions[row].append(sub)
        return Edit(force=sub.ids, retract=trig.n_tokens)


def clean_run(
    model: LanguageModel, rendered: Rendered, config: TamperConfig, progress: Callable[[int], None] | None = None
) -> Clean:
    """The model's unhooked greedy reply, with its triggers located by the hook's own detector."""
    gen = model.greedy([rendered.ids], config.max_new_tokens, top_k=config.top_k, progress=progress)[0]
    reply = Reply.from_generation(gen)
    return Clean(rendered=rendered, reply=reply, triggers=scan_triggers(reply.token_ids, model.decode, config.trigger))


def untouched_trials(clean: Clean, substitutes: Sequence[str]) -> list[Trial]:
    """No trigger in the clean reply: every trial IS the clean run, decoded zero more times."""
    return [Trial(i, s, clean.reply, [], untouched=True) for i, s in enumerate(substitutes)]


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
    first = clean.triggers[0]
    prefix = clean.reply.token_ids[: first.start]
    budget = config.max_new_tokens - len(prefix)
    firsts = [plan_substitution(prefix, first, s, config.trigger, model, config.max_new_tokens) for s in substitutes]
    hook = SwapHook(model, prefix, substitutes, config, injected=[[False] * len(prefix) + [True] * len(f.ids) for f in firsts])
    gens = model.greedy(
        [list(clean.rendered.ids) + prefix] * len(substitutes),
        budget,
        hook=hook,
        forced=[list(f.ids) for f in firsts],
        top_k=config.top_k,
        progress=progress,
    )
    head = clean.reply.head(len(prefix))
    trials = []
    for i, (s, gen) in enumerate(zip(substitutes, gens)):
        reply = head.then(Reply.from_generation(gen))
        _check_injected(reply, hook.injected[i], i)
        trials.append(Trial(i, s, reply, [firsts[i], *hook.substitutions[i]]))
    return trials


def serial_trial(
    model: LanguageModel, rendered: Rendered, substitute: str, config: TamperConfig, progress: Callable[[int], None] | None = None
) -> Trial:
    """One trial on its own, from the bare prompt, with the same hook (the batched engine's check)."""
    hook = SwapHook(model, [], [substitute], config)
    gen = model.greedy([rendered.ids], config.max_new_tokens, hook=hook, top_k=config.top_k, progress=progress)[0]
    reply = Reply.from_generation(gen)
    _check_injected(reply, hook.injected[0], 0)
    subs = hook.substitutions[0]
    return Trial(0, substitute, reply, subs, untouched=not subs)


def _check_injected(reply: Reply, flags: Sequence[bool], row: int) -> None:
    """The hook's record of what it injected must be what the decoder marked forced."""
    want = np.zeros(len(reply.token_ids), dtype=bool)
    k = min(len(flags), len(want))
    want[:k] = np.asarray(flags[:k], dtype=bool)
    if not np.array_equal(want, reply.injected):
        raise RuntimeError(f"row {row}: injected positions disagree with the decoder's forced flags (internal error)")
