"""What an engine that takes whole requests shares (vLLM in process, a model an OpenAI-compatible
server serves): the interface's operations built from a few requests the engine sends its own way.

Such an engine never does per-step surgery and never ships a whole distribution. Scoring is a
``prompt_logprobs`` request over context + reply (:meth:`RequestEngine.prompt_logprobs`), plain
generation a whole request per prompt (:meth:`RequestEngine.until_requests`), unhooked greedy
decoding the two in turn, scored generation (two-phase decoding) its engine's stream of scored
requests. The rows it reads are vLLM's, in process or as a server returns them (:mod:`.vllm_wire`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from sleight.backends.base import (
    Completion,
    Decoding,
    Generation,
    Hook,
    HookFn,
    LanguageModel,
    Scored,
    ScoredGeneration,
    check_continuations,
)
from sleight.backends.vllm_wire import Rows, prompt_token_logprobs, scored

Done = Callable[[Completion], None]


class RequestEngine(Decoding, ScoredGeneration):
    """The interface's whole-request operations over an engine's own requests; an engine supplies
    ``check_k``, ``prompt_logprobs``, ``until_requests``, ``sample_rows``, ``stepwise`` and
    ``scored_stream``, and the operations it does its own way (``read_next``)."""

    _eos: frozenset[int]

    # -- what the engine supplies ---------------------------------------------------------------
    def check_k(self, top_k: int) -> None:
        """One line when ``top_k`` log-probs a position are more than the engine returns."""
        raise NotImplementedError

    def prompt_logprobs(self, seqs: Sequence[Sequence[int]], k: int) -> list[Rows]:
        """One ``prompt_logprobs=k`` request a sequence: per position, its own token's entry and the top-k."""
        raise NotImplementedError

    def until_requests(
        self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], stop_token_ids: Sequence[int], stop: Sequence[str], done: Done | None
    ) -> list[Completion]:
        """One greedy request a prompt (every budget positive); ``done`` sees each completion as it is read."""
        raise NotImplementedError

    def stepwise(self) -> LanguageModel:
        """The model that decodes with per-step edits in this engine's place (whole requests cannot
        serve them), or a one-line refusal."""
        raise NotImplementedError

    # -- the interface ----------------------------------------------------------------------------
    def continuation_logprobs(self, context: Sequence[int], continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Each continuation's own log-probs, read from its request's ``prompt_logprobs=0``."""
        check_continuations(context, continuations)
        rows = self.prompt_logprobs([list(context) + list(c) for c in continuations], 0)
        return [prompt_token_logprobs(r, [int(t) for t in c], len(context)) for r, c in zip(rows, continuations)]

    def score_tokens(self, context: Sequence[int], replies: Sequence[Sequence[int]], *, top_k: int = 20) -> list[Scored]:
        """The engine's own records of each reply's tokens: ``prompt_logprobs=top_k`` over context +
        reply gives, at every reply position, the token's log-prob and the top-k with ranks. Entropy
        NaN: no whole distribution (the study's top-k entropy is computed from the top-k)."""
        if not context:
            raise ValueError("score_tokens needs a non-empty context")
        self.check_k(top_k)
        out = [Scored.empty(top_k) for _ in replies]
        todo = [i for i, r in enumerate(replies) if len(r)]
        rows = self.prompt_logprobs([list(context) + list(replies[i]) for i in todo], top_k)
        for i, r in zip(todo, rows):
            out[i] = scored(r, [int(t) for t in replies[i]], len(context), top_k)
        return out

    def until_rows(
        self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], stop_token_ids: Sequence[int], stop: Sequence[str],
        progress: Callable[[int], None] | None,
    ) -> list[Completion]:  # fmt: skip
        """One request a prompt (:meth:`until_requests`), ``progress`` told each reply's steps as it is read."""

        def steps(done: Completion) -> None:
            if progress:
                progress(done.decoded)

        return self.until_requests(prompts, budgets, stop_token_ids, stop, steps)

    def greedy_rows(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, hook: Hook | HookFn | None, forced: Sequence[Sequence[int]],
        top_k: int, progress: Callable[[int], None] | None,
    ) -> list[Generation]:  # fmt: skip
        """Unhooked: the engine decides the tokens (:meth:`generate_until`, the forced ones fed
        first) and scores them (:meth:`score_tokens`). Hooked: the :meth:`stepwise` model's."""
        if hook is not None:
            return self.stepwise().greedy(prompts, max_new_tokens, hook=hook, forced=forced, top_k=top_k, progress=progress)
        heads = [list(f)[:max_new_tokens] for f in forced]
        outs = self.generate_until([list(p) + f for p, f in zip(prompts, heads)], [max_new_tokens - len(f) for f in heads], progress=progress)
        gens = []
        for p, f, o in zip(prompts, heads, outs):
            sc = self.score_tokens(p, [f + list(o.token_ids)], top_k=top_k)[0]
            forced_flags = np.asarray([True] * len(f) + [False] * len(o.token_ids), dtype=bool)
            gens.append(Generation.from_scored(sc, forced_flags, "stop" if o.finish_reason == "stop" else "length"))
        return gens
