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
from typing import Any

import numpy as np

from sleight.backends.base import (
    UNWARPED,
    Completion,
    Generation,
    Hook,
    HookFn,
    LanguageModel,
    Sample,
    Sampling,
    Scored,
    ScoredRequests,
    check_continuations,
    until_budgets,
)
from sleight.backends.vllm_wire import prompt_token_logprobs, scored

Rows = Sequence[Any]  # one request's prompt log-prob rows: per prompt position, None or {token id: entry with .logprob, .rank}
Done = Callable[[Completion], None]


class RequestEngine:
    """The interface's whole-request operations over an engine's own requests; an engine supplies
    ``check_k``, ``prompt_logprobs``, ``until_requests``, ``sample_requests``, ``stepwise`` and
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

    def sample_requests(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, n: int, sampling: Sampling, stop_token_ids: Sequence[int]
    ) -> list[list[Sample]]:
        """One request of ``n`` seeded samples a prompt (arguments checked, a positive budget)."""
        raise NotImplementedError

    def stepwise(self) -> LanguageModel:
        """The model that decodes with per-step edits in this engine's place (whole requests cannot
        serve them), or a one-line refusal."""
        raise NotImplementedError

    def scored_stream(self, *, top_k: int = 20, stop_token_ids: Sequence[int] = ()) -> ScoredRequests:
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

    def generate_until(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: int | Sequence[int],
        *,
        stop_token_ids: Sequence[int] = (),
        stop: Sequence[str] = (),
        progress: Callable[[int], None] | None = None,
    ) -> list[Completion]:
        """One request a prompt with a budget; a prompt with none stays empty."""
        budgets = until_budgets(prompts, max_tokens)
        result = [Completion([], "length") for _ in prompts]
        todo = [i for i, b in enumerate(budgets) if b > 0]

        def steps(done: Completion) -> None:
            if progress:
                progress(done.decoded)

        for i, done in zip(todo, self.until_requests([prompts[i] for i in todo], [budgets[i] for i in todo], stop_token_ids, stop, steps)):
            result[i] = done
        return result

    def generate_scored(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: Sequence[int],
        *,
        forced: Sequence[int | None],
        top_k: int = 20,
        stop_token_ids: Sequence[int] = (),
    ) -> list[Completion]:
        """:meth:`generate_until` whose completions carry each generated token's records, read as
        the engine generates it (two-phase decoding then needs no scoring pass: SPEC §3.1). A row
        whose ``forced[i]`` is a token id generates exactly that token instead: the records of a
        substitute the run placed there. Every row goes into the stream at once, each completion
        lands in its row's place (a row with no budget and nothing forced stays empty)."""
        stream = self.scored_stream(top_k=top_k, stop_token_ids=stop_token_ids)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("generate_scored needs non-empty prompts")
        if not len(prompts) == len(max_tokens) == len(forced):
            raise ValueError("generate_scored needs one budget and one forced entry per prompt")
        result = [Completion([], "length", Scored.empty(top_k)) for _ in prompts]
        asked = {stream.submit(p, b, forced=f): i for i, (p, b, f) in enumerate(zip(prompts, max_tokens, forced)) if b > 0 or f is not None}
        for rid, done in stream:
            result[asked[rid]] = done
        return result

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        n: int = 1,
        sampling: Sampling = UNWARPED,
        stop_token_ids: Sequence[int] = (),
    ) -> list[list[Sample]]:
        """``n`` seeded samples of each prompt from the engine's own sampler, seeded per prompt
        (:func:`sleight.backends.sampling.prompt_seed`), each sampled token's raw log-prob."""
        from sleight.backends.sampling import check_sampling

        check_sampling(sampling, n, max_new_tokens)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("sample needs non-empty prompts")
        if max_new_tokens == 0:
            return [[Sample([], np.zeros(0), "length") for _ in range(n)] for _ in prompts]
        return self.sample_requests(prompts, max_new_tokens, n, sampling, stop_token_ids)

    def greedy(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        hook: Hook | HookFn | None = None,
        forced: Sequence[Sequence[int]] | None = None,
        top_k: int = 20,
        progress: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        """Unhooked: the engine decides the tokens (:meth:`generate_until`, the forced ones fed
        first) and scores them (:meth:`score_tokens`). Hooked: the :meth:`stepwise` model's."""
        if hook is not None:
            return self.stepwise().greedy(prompts, max_new_tokens, hook=hook, forced=forced, top_k=top_k, progress=progress)
        heads = [list(f)[:max_new_tokens] for f in (forced or [[] for _ in prompts])]
        outs = self.generate_until([list(p) + f for p, f in zip(prompts, heads)], [max_new_tokens - len(f) for f in heads], progress=progress)
        gens = []
        for p, f, o in zip(prompts, heads, outs):
            sc = self.score_tokens(p, [f + list(o.token_ids)], top_k=top_k)[0]
            gens.append(
                Generation(
                    token_ids=sc.token_ids,
                    logprobs=sc.logprobs,
                    top_ids=sc.top_ids,
                    top_logprobs=sc.top_logprobs,
                    entropy=sc.entropy,
                    forced=np.asarray([True] * len(f) + [False] * len(o.token_ids), dtype=bool),
                    finish_reason="stop" if o.finish_reason == "stop" else "length",
                )
            )
        return gens
