"""The vLLM adapter without a GPU: the exact vLLM 0.33 arguments it builds, and its translation of
vLLM's output shapes, end to end against a recording stand-in of ``vllm.LLM`` (tests/vllm_standin.py)
whose numbers come from the real bundled model."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from sleight.backends import vllm as adapter
from sleight.errors import UserError
from sleight.tamper import engine, two_phase
from sleight.tamper.data import load_questions
from vllm_standin import LLM, CompletionOutput, SamplingParams, VLLMValidationError, module


@pytest.fixture(scope="module")
def vmodel(model):
    return adapter.VLLMModel(model.resolved, vllm_module=module(model), twin=model)


@pytest.fixture(scope="module")
def prompts(model):
    qs = ["What is the capital of France?", "Why is the sky blue?", "Name three primary colors."]
    return [model.render_chat([{"role": "user", "content": q}]).ids for q in qs]


def test_engine_arguments_are_exactly_the_documented_ones():
    assert adapter.engine_kwargs("/m") == dict(
        model="/m", dtype="bfloat16", tensor_parallel_size=1, pipeline_parallel_size=1,
        gpu_memory_utilization=0.5, enable_prefix_caching=True, max_logprobs=20, seed=0,
    )
    kw = adapter.engine_kwargs("/m", dtype="float16", tensor_parallel_size=2, pipeline_parallel_size=3, gpu_memory_utilization=0.8, max_model_len=4096)
    assert (kw["tensor_parallel_size"], kw["pipeline_parallel_size"], kw["max_model_len"], kw["gpu_memory_utilization"]) == (2, 3, 4096, 0.8)
    with pytest.raises(UserError):
        adapter.engine_kwargs("/m", max_logprobs=-1)  # never a full vocabulary


def test_sampling_params_are_exactly_the_documented_ones():
    assert adapter.until_params(7, [5, 9]) == dict(
        temperature=0.0, max_tokens=7, stop_token_ids=[5, 9], stop=[], include_stop_str_in_output=True, detokenize=False
    )
    # vLLM searches stop strings only in detokenized text: a request with them detokenizes.
    assert adapter.until_params(3, (), ["the"])["detokenize"] is True
    assert adapter.top_params(20) == dict(temperature=0.0, max_tokens=1, logprobs=20, detokenize=False)
    assert adapter.asked_params([3, 4]) == dict(temperature=0.0, max_tokens=1, logprob_token_ids=[3, 4], detokenize=False)
    assert adapter.continuation_params(10, [7, 8]) == dict(
        temperature=0.0, max_tokens=1, prompt_logprob_token_ids=[[7], [8]], prompt_logprob_start=9, detokenize=False
    )
    for p in (adapter.until_params(7, [5]), adapter.until_params(3, (), ["x"]), adapter.top_params(20), adapter.asked_params([1])):
        SamplingParams(**p).verify(20, 100)  # accepted by vLLM's checks
    with pytest.raises(VLLMValidationError):
        SamplingParams(stop=["x"], detokenize=False)


def test_output_translation():
    eos = frozenset({2, 7})
    c = lambda toks, fin, why=None: CompletionOutput(0, "", toks, None, None, fin, why)  # noqa: E731
    assert adapter.completion(c([5, 6, 2], "stop"), eos, 10) == adapter.Completion([5, 6], "stop")
    assert adapter.completion(c([5, 7], "stop", 7), eos, 10) == adapter.Completion([5], "stop")  # generation-config EOS
    assert adapter.completion(c([5, 9], "stop", 9), eos, 10) == adapter.Completion([5, 9], "stop_token")
    assert adapter.completion(c([5, 9], "stop", "the"), eos, 10) == adapter.Completion([5, 9], "stop_token")
    assert adapter.completion(c([5, 9, 4], "length"), eos, 3) == adapter.Completion([5, 9, 4], "length")
    with pytest.raises(UserError, match="max-model-len"):
        adapter.completion(c([5], "length"), eos, 3)
    with pytest.raises(RuntimeError):
        adapter.completion(c([5], "abort"), eos, 3)
    entry = {9: adapter_logprob(-3.0, 7), 4: adapter_logprob(-0.1, 1), 9 + 1: adapter_logprob(-0.5, 2)}
    ids, lps = adapter.ranked(entry, 2)
    assert ids.tolist() == [4, 10] and lps.tolist() == [-0.1, -0.5]


def adapter_logprob(lp, rank):
    return types.SimpleNamespace(logprob=lp, rank=rank, decoded_token=None)


def test_the_llm_is_built_with_the_engine_arguments(vmodel, model):
    llm = vmodel.llm
    assert isinstance(llm, LLM) and llm.model == model.resolved.load_path
    assert llm.kwargs == {k: v for k, v in adapter.engine_kwargs(model.resolved.load_path).items() if k != "model"}
    info = vmodel.info.as_dict()
    assert info["engine"] == "vllm" and info["dtype"] == "bfloat16" and info["engine_version"].startswith("vllm 0.33.0")
    assert vmodel.eos_ids == model.eos_ids and vmodel.vocab_size == model.vocab_size


@pytest.mark.slow
def test_generate_until_equals_the_hf_engine(vmodel, model, prompts):
    the = model.encode(" the")[0]
    for kw in ({}, {"stop_token_ids": [the]}):
        got = vmodel.generate_until(prompts, [12, 20, 0], **kw)
        want = model.generate_until(prompts, [12, 20, 0], **kw)
        assert got == want, kw
    assert {c.finish_reason for c in vmodel.generate_until(prompts, 24, stop_token_ids=[the])} == {"stop", "stop_token"}
    call = vmodel.llm.calls[-1]
    assert all(p.kwargs == adapter.until_params(24, [the]) for p in call.params)
    assert all(p.logprobs is None and p.logprob_token_ids is None for p in call.params)  # Phase A ships no log-probs


def test_read_next_through_logprob_token_ids(vmodel, model, prompts):
    asked = [model.encode(" Paris") + model.encode(" London"), [], model.encode(" Red")]
    n_calls = len(vmodel.llm.calls)
    got = vmodel.read_next(prompts, asked, top_k=20)
    want = model.read_next(prompts, asked, top_k=20)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-4)
        np.testing.assert_allclose(g.top_logprobs, w.top_logprobs, atol=1e-4)
        assert g.top_ids[:5].tolist() == w.top_ids[:5].tolist()
        assert math.isnan(g.entropy)  # vLLM computes no entropy: said, not faked
    calls = vmodel.llm.calls[n_calls:]
    assert len(calls) == 2  # top-k and asked ids never share a batch
    assert all(p.kwargs == adapter.top_params(20) for p in calls[0].params)
    assert [p.kwargs for p in calls[1].params] == [adapter.asked_params(a) for a in asked if a]
    with pytest.raises(UserError, match="max_logprobs"):
        vmodel.read_next(prompts[:1], [[]], top_k=21)


def test_continuation_logprobs_through_prompt_logprob_token_ids(vmodel, model, prompts):
    conts = [model.encode(" Paris is the capital."), model.encode(" Lyon")]
    for g, w in zip(vmodel.continuation_logprobs(prompts[0], conts), model.continuation_logprobs(prompts[0], conts)):
        np.testing.assert_allclose(g, w, atol=1e-4)


@pytest.mark.slow
def test_dense_reads_and_unhooked_greedy(vmodel, model, prompts):
    np.testing.assert_allclose(vmodel.next_token_logits(prompts[:1]), model.next_token_logits(prompts[:1]), atol=1e-5)
    hello = model.encode(" Hello")
    for g, w in zip(vmodel.greedy(prompts, 10, forced=[hello, [], []]), model.greedy(prompts, 10, forced=[hello, [], []])):
        assert g.token_ids == w.token_ids and g.finish_reason == w.finish_reason
        assert g.forced.tolist() == w.forced.tolist()
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-4)
    assert not any(p.logprobs == -1 for c in vmodel.llm.calls for p in c.params)


@pytest.mark.slow
def test_two_phase_tamper_on_the_adapter_equals_hf_lockstep(vmodel, model):
    qs = {q.id: q.question for q in load_questions()[0]}
    cfg = engine.TamperConfig(max_new_tokens=16)
    rendered = engine.render_question(model, qs["q006"])
    subs = ["Mandela effect", "armchair"]
    lock = engine.batched_trials(model, engine.clean_run(model, rendered, cfg), subs, cfg)
    clean = two_phase.clean_run(vmodel, rendered, cfg)
    vtrials = two_phase.batched_trials(vmodel, clean, subs, cfg)
    for a, b in zip(lock, vtrials):
        assert a.reply.token_ids == b.reply.token_ids and a.reply.injected.tolist() == b.reply.injected.tolist()
        np.testing.assert_allclose(a.reply.logprobs, b.reply.logprobs, atol=1e-4)
        assert b.disagreements == 0 and b.cost.requests >= 1
