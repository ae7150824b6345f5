"""``LanguageModel.sample`` on the hf engine (the vLLM engine's: tests/test_vllm.py).

The warpers are held equal to transformers' own classes; the samples are seeded, KV-cached, their
log-probs are the model's own (``score_tokens`` on the same tokens), top-k 1 is the greedy reply and
``min_new_tokens`` bars the end of sequence.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sleight.backends.base import Sampling
from sleight.backends.sampling import prompt_seed, warp
from sleight.errors import UserError
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL, LOGPROB_ATOL


@pytest.fixture(scope="module")
def prompts(model):
    qs = ["Name a colour.", "What is the capital of France? One word.", "Say a number."]
    return [model.render_chat([{"role": "user", "content": q}]).ids for q in qs]


def test_warpers_equal_transformers_own():
    """temperature, then top-k, then top-p: the processors ``generate(do_sample=True)`` builds, in its order."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    scores = torch.randn(4, 300, generator=torch.Generator().manual_seed(0)) * 3
    for s in (Sampling(temperature=0.7, top_k=50, top_p=0.9), Sampling(top_k=1), Sampling(top_p=0.3), Sampling(temperature=1.3)):
        procs = LogitsProcessorList()
        if s.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(s.temperature))
        if s.top_k:
            procs.append(TopKLogitsWarper(s.top_k))
        if s.top_p < 1.0:
            procs.append(TopPLogitsWarper(s.top_p))
        want = procs(torch.zeros(4, 1, dtype=torch.long), scores.clone())
        assert torch.equal(warp(scores, s), want), s


def test_warpers_by_hand():
    """p = (0.5, 0.3, 0.2): top-k 2 gives (5/8, 3/8, 0); top-p 0.6 drops 0.2 (cumulative 0.2 <= 0.4);
    temperature 1/2 squares: (25, 9, 4) / 38."""
    lp = torch.log(torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64))
    for s, want in ((Sampling(top_k=2), [5 / 8, 3 / 8, 0]), (Sampling(top_p=0.6), [5 / 8, 3 / 8, 0]), (Sampling(temperature=0.5), np.array([25, 9, 4]) / 38)):
        np.testing.assert_allclose(warp(lp, s).softmax(-1)[0].numpy(), want, rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL)


def test_bad_settings_are_one_line(model, prompts):
    for s, what in ((Sampling(temperature=0.0), "temperature"), (Sampling(top_k=-1), "top-k"), (Sampling(top_p=0.0), "top-p")):
        with pytest.raises(UserError, match=what):
            model.sample(prompts[:1], 2, sampling=s)
    with pytest.raises(UserError, match="n >= 1"):
        model.sample(prompts[:1], 2, n=0)


def test_seeded_and_independent_of_the_batch(model, prompts):
    s = Sampling(seed=3, top_k=50)
    a = model.sample(prompts, 8, n=3, sampling=s)
    assert [[x.token_ids for x in r] for r in a] == [[x.token_ids for x in r] for r in model.sample(prompts, 8, n=3, sampling=s)]
    alone = model.sample(prompts[1:2], 8, n=3, sampling=s)  # a prompt's draws are its own (prompt_seed)
    assert [x.token_ids for x in alone[0]] == [x.token_ids for x in a[1]]
    other = model.sample(prompts, 8, n=3, sampling=Sampling(seed=4, top_k=50))
    assert [[x.token_ids for x in r] for r in other] != [[x.token_ids for x in r] for r in a]
    assert prompt_seed(3, prompts[0]) != prompt_seed(3, prompts[1]) and prompt_seed(3, prompts[0]) == prompt_seed(3, list(prompts[0]))
    assert all(len(r) == 3 for r in a) and all(x.finish_reason in ("stop", "length") for r in a for x in r)


def test_logprobs_are_the_models_own(model, prompts):
    """Each sampled token's log-prob is the unwarped log-softmax: ``score_tokens`` on the same tokens."""
    drawn = model.sample(prompts, 10, n=4, sampling=Sampling(temperature=0.8, top_k=40, top_p=0.95, seed=1))
    for p, per in zip(prompts, drawn):
        live = [x for x in per if x.token_ids]
        for x, sc in zip(live, model.score_tokens(p, [x.token_ids for x in live])):
            assert sc.token_ids == x.token_ids
            np.testing.assert_allclose(x.logprobs, sc.logprobs, atol=LOGPROB_ATOL)
        for x in live:
            np.testing.assert_allclose(x.logprobs, model.continuation_logprobs(p, [x.token_ids])[0], atol=LOGPROB_ATOL)


def test_top_k_one_is_greedy(model, prompts):
    top1 = model.sample(prompts, 12, n=2, sampling=Sampling(top_k=1, seed=9))
    greedy = model.generate_until(prompts, 12)
    for per, g in zip(top1, greedy):
        assert all(x.token_ids == g.token_ids and x.finish_reason == g.finish_reason for x in per)


def test_min_new_tokens_bars_the_end(model):
    """Where greedy ends after L tokens, top-k 1 with ``min_new_tokens = L + 2`` writes on past L."""
    p = model.render_chat([{"role": "user", "content": "What is the capital of France? One word."}]).ids
    (g,) = model.generate_until([p], 24)
    assert g.finish_reason == "stop"
    L = len(g.token_ids)
    (per,) = model.sample([p], 24, n=2, sampling=Sampling(top_k=1, min_new_tokens=L + 2))
    for x in per:
        assert x.token_ids[:L] == g.token_ids and len(x.token_ids) >= L + 2
    stopped = model.sample([p], 24, n=4, sampling=Sampling(seed=2, min_new_tokens=3))[0]
    assert all(len(x.token_ids) >= 3 for x in stopped)


def test_stop_token_and_empty_budget(model, prompts):
    (g,) = model.generate_until(prompts[1:2], 12)
    stop = g.token_ids[1]
    (per,) = model.sample(prompts[1:2], 12, sampling=Sampling(top_k=1), stop_token_ids=[stop])
    assert per[0].token_ids == g.token_ids[:2] and per[0].finish_reason == "stop_token"
    assert model.sample(prompts[:1], 0, n=2)[0][1].token_ids == []
