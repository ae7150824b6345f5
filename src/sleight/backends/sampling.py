"""Seeded sampling for :meth:`LanguageModel.sample`: the hf loop over one KV cache, and vLLM's request.

The draw follows transformers' ``generate(do_sample=True)`` (``generation/utils.py``,
``_get_logits_processor``): the float32 logits, end-of-sequence set to -inf while fewer than
``min_new_tokens`` tokens are out (``MinNewTokensLengthLogitsProcessor``), then the warpers in
their order -- ``TemperatureLogitsWarper`` (when not 1), ``TopKLogitsWarper`` (when not 0: every
token below the k-th largest score removed, ties kept), ``TopPLogitsWarper`` (when below 1: sorted
ascending, tokens whose cumulative probability is at most ``1 - top_p`` removed, the most probable
kept) -- then softmax and ``torch.multinomial``. What a :class:`Sample` records per token is the
model's own log-softmax at temperature 1, before any of that: the number a sequence-level
uncertainty estimator reads, equal to what ``score_tokens`` gives for the same tokens.

Seeds: each prompt draws from its own generator, seeded from ``Sampling.seed`` and the prompt's ids
(:func:`prompt_seed`), so a prompt's samples do not depend on the other prompts of the call, nor on
how the call was batched. On vLLM the same per-prompt seed goes into ``SamplingParams.seed`` (vLLM
gives the ``n`` children ``seed + j``); the two engines draw different streams.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sleight.backends.base import Completion, Sample, Sampling
from sleight.backends.cache_ops import CachedModel, select_cache
from sleight.backends.vllm_wire import SamplingKwargs


def prompt_seed(seed: int, prompt: Sequence[int]) -> int:
    """The seed of one prompt's draws: ``seed`` mixed with a CRC of its token ids (31 bits, so vLLM's
    ``seed + j`` per child stays a valid torch seed)."""
    crc = zlib.crc32(np.asarray(list(prompt), dtype=np.int64).tobytes())
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, crc]).generate_state(1, np.uint32)[0]) & 0x7FFFFFFF


def warp(scores: torch.Tensor, s: Sampling) -> torch.Tensor:
    """``(rows, vocab)`` float32 scores through transformers' temperature, top-k and top-p warpers,
    in that order (removed tokens at -inf); softmax of the result is the draw's distribution."""
    if s.temperature != 1.0:
        scores = scores / s.temperature
    if s.top_k:
        k = min(s.top_k, scores.shape[-1])
        scores = scores.masked_fill(scores < torch.topk(scores, k)[0][..., -1, None], -float("inf"))
    if s.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        remove = sorted_scores.softmax(dim=-1).cumsum(dim=-1) <= (1 - s.top_p)
        remove[..., -1:] = False  # min_tokens_to_keep = 1
        scores = scores.masked_fill(remove.scatter(1, order, remove), -float("inf"))
    return scores


# -- hf: one lockstep loop over a KV cache ------------------------------------------------------------
def sample_hf(
    model: CachedModel, prompts: Sequence[Sequence[int]], max_new_tokens: int, n: int, s: Sampling, stop_token_ids: Sequence[int]
) -> list[list[Sample]]:
    """``n`` samples of each prompt on the hf engine: prompts in groups of at most ``batch_size``
    rows, each group's prompts prefilled once (:meth:`~.cache_ops.CachedModel.prefill`, a shared prefix once) and
    the cache forked ``n`` ways, then one forward pass per step over the live rows. The arguments
    come checked (:meth:`~sleight.backends.base.Decoding.sample`), the budget positive."""
    per = max(1, model.batch_size // n)
    out: list[list[Sample]] = []
    for start in range(0, len(prompts), per):
        out.extend(_sample_group(model, list(prompts[start : start + per]), max_new_tokens, n, s, frozenset(int(t) for t in stop_token_ids)))
    return out


@torch.inference_mode()
def _sample_group(
    model: CachedModel, prompts: list[Sequence[int]], max_new_tokens: int, n: int, s: Sampling, stops: frozenset[int]
) -> list[list[Sample]]:
    dev = model.device
    logits, cache, mask = model.prefill(prompts)
    if n > 1:  # fork each prompt's cache n ways: rows p*n .. p*n+n-1 belong to prompt p
        cache.batch_repeat_interleave(n)
        logits, mask = logits.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
    gens = [torch.Generator(device=dev).manual_seed(prompt_seed(s.seed, p)) for p in prompts]
    eos = torch.tensor(sorted(model.eos_ids), dtype=torch.long, device=dev)
    rows = len(prompts) * n
    toks: list[list[int]] = [[] for _ in range(rows)]
    lps: list[list[float]] = [[] for _ in range(rows)]
    finish = ["length"] * rows
    alive = list(range(rows))
    for step in range(max_new_tokens):
        raw = logits.float()
        lp = torch.log_softmax(raw, dim=-1)
        scores = raw.index_fill(-1, eos, -float("inf")) if step < s.min_new_tokens else raw
        probs = warp(scores, s).softmax(dim=-1)
        drawn = torch.empty(len(alive), dtype=torch.long, device=dev)
        for p, g in enumerate(gens):  # each prompt's live rows from its own generator
            at = [b for b, r in enumerate(alive) if r // n == p]
            if at:
                idx = torch.tensor(at, device=dev)
                drawn[idx] = torch.multinomial(probs[idx], 1, generator=g)[:, 0]
        got = lp.gather(-1, drawn[:, None])[:, 0].double().cpu().tolist()
        keep = []
        for b, (r, tok) in enumerate(zip(alive, drawn.cpu().tolist())):
            if tok in model.eos_ids:
                finish[r] = "stop"
                continue
            toks[r].append(int(tok))
            lps[r].append(float(got[b]))
            if tok in stops:
                finish[r] = "stop_token"
            elif len(toks[r]) < max_new_tokens:
                keep.append(b)
        if not keep:
            break
        feed = torch.tensor([toks[alive[b]][-1] for b in keep], device=dev)[:, None]
        mask = torch.cat([mask, torch.ones((len(alive), 1), dtype=torch.long, device=dev)], 1)
        if len(keep) < len(alive):
            idx = torch.tensor(keep, device=dev)
            cache = select_cache(cache, idx)
            mask = mask[idx]
            alive = [alive[b] for b in keep]
        pos = (mask.sum(-1) - 1)[:, None]
        step_logits, cache = model.forward(feed, mask, pos, cache, last_only=True)
        logits = step_logits[:, -1, :]
    samples = [Sample(t, np.asarray(v, dtype=np.float64), f) for t, v, f in zip(toks, lps, finish)]
    return [samples[p * n : (p + 1) * n] for p in range(len(prompts))]


# -- vLLM: its own sampler ------------------------------------------------------------------------------
def vllm_params(prompt: Sequence[int], max_new_tokens: int, n: int, s: Sampling, stop_token_ids: Sequence[int]) -> SamplingKwargs:
    """``SamplingParams`` of one prompt's ``n`` samples: vLLM applies min-tokens, then temperature,
    then top-k and top-p (``v1/sample/sampler.py`` 22-60; ``top_k=0``: no cut), and with
    ``logprobs=0`` returns each sampled token's log-prob, raw (the model's log-softmax before any
    processing) under the engine's default ``logprobs_mode="raw_logprobs"`` (``config/model.py`` 287,
    ``sampler.py`` 83-92). vLLM's min-tokens also bars the stop token ids, transformers' only EOS."""
    return SamplingKwargs(
        n=int(n),
        temperature=float(s.temperature),
        top_k=int(s.top_k),
        top_p=float(s.top_p),
        min_tokens=int(s.min_new_tokens),
        seed=prompt_seed(s.seed, prompt),
        max_tokens=int(max_new_tokens),
        logprobs=0,
        stop_token_ids=[int(t) for t in stop_token_ids],
        detokenize=False,
    )


def vllm_sample(out: Any, completion: Completion) -> Sample:
    """One ``CompletionOutput`` (already read as a :class:`Completion`: an EOS dropped, a stop token
    kept) with the raw log-prob of each kept token."""
    rows = out.logprobs or []
    lps = [float(rows[j][int(t)].logprob) for j, t in enumerate(completion.token_ids)]
    return Sample(list(completion.token_ids), np.asarray(lps, dtype=np.float64), completion.finish_reason)
