"""The model layer on the real bundled model: decoding, scoring, forking, edits, rendering."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sleight.backends import Edit
from sleight.position import encode_continuation

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


def test_unhooked_greedy_equals_transformers_generate(model, rendered, one_at_a_time):
    for ids, gen in zip(rendered, one_at_a_time):
        ref = model.model.generate(torch.tensor([ids]), max_new_tokens=BUDGET, do_sample=False)[0, len(ids) :].tolist()
        if ref and ref[-1] in model.eos_ids:
            ref = ref[:-1]
            assert gen.finish_reason == "stop"
        assert gen.token_ids == ref


def test_batched_left_padded_equals_one_at_a_time(model, rendered, one_at_a_time):
    assert len({len(p) for p in rendered}) > 1  # the batch really is ragged
    batched = model.greedy(rendered, BUDGET)
    for b, s in zip(batched, one_at_a_time):
        assert b.token_ids == s.token_ids
        np.testing.assert_allclose(b.logprobs, s.logprobs, atol=1e-4)
        np.testing.assert_allclose(b.entropy, s.entropy, atol=1e-3)
        assert (b.top_ids[:, :5] == s.top_ids[:, :5]).all()


def test_records_are_the_models_own_distribution(model, rendered, one_at_a_time):
    gen = one_at_a_time[1]
    seqs = [rendered[1] + gen.token_ids[:i] for i in range(len(gen.token_ids))]
    lp = model.next_token_logprobs(seqs)
    for i, tok in enumerate(gen.token_ids):
        assert tok == int(lp[i].argmax())
        assert gen.logprobs[i] == pytest.approx(lp[i, tok], abs=1e-4)
        full_entropy = float(-(np.exp(lp[i]) * lp[i]).sum())
        assert gen.entropy[i] == pytest.approx(full_entropy, abs=1e-3)
        assert list(gen.top_ids[i][:3]) == list(np.argsort(-lp[i])[:3])


def test_forced_token_is_marked_and_scored_by_the_model(model, rendered):
    hello = model.encode(" Hello")[0]
    gen = model.greedy([rendered[0]], 6, forced=[[hello]])[0]
    assert gen.token_ids[0] == hello and gen.forced[0] and not gen.forced[1:].any()
    own = model.next_token_logprobs([rendered[0]])[0, hello]
    assert gen.logprobs[0] == pytest.approx(own, abs=1e-4)
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
    assert gen.logprobs[i] == pytest.approx(model.next_token_logprobs([ctx])[0, london[0]], abs=1e-4)
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
    np.testing.assert_allclose(got[0], direct, atol=1e-4)
    assert got[1].sum() == pytest.approx(float(lp[n - 1, short[0]]) + (got[1][1:].sum() if len(short) > 1 else 0), abs=1e-4)


def test_forked_prefix_matches_recomputation(model, rendered):
    from sleight.backends.hf import _repeat_cache

    prefix = rendered[2]
    tails = [model.encode(" Sure"), model.encode(" Photosynthesis is"), model.encode(" It")]
    with torch.inference_mode():
        ids = torch.tensor([prefix])
        out = model.model(ids, use_cache=True)
        cache = _repeat_cache(out.past_key_values, len(tails))
        tid, tmask, _ = model._padded(tails, "right")
        mask = torch.cat([torch.ones((len(tails), len(prefix)), dtype=torch.long), tmask], 1)
        pos = len(prefix) + torch.arange(tid.shape[1]).expand(len(tails), -1)
        forked = model.model(input_ids=tid, attention_mask=mask, position_ids=pos, past_key_values=cache).logits
    for i, t in enumerate(tails):
        fresh = model.next_token_logprobs([prefix + t])[0]
        got = torch.log_softmax(forked[i, len(t) - 1].float(), -1).numpy()
        assert np.abs(got - fresh).max() < 1e-4


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


def test_vllm_missing_is_a_clear_error():
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        from sleight.backends.resolve import ResolvedModel
        from sleight.backends.vllm import VLLMModel
        from sleight.errors import UserError

        with pytest.raises(UserError, match="vllm"):
            VLLMModel(ResolvedModel("x", "x", "x", "", "folder"))
    else:  # pragma: no cover - only on GPU machines
        pytest.skip("vllm is installed here")


def test_vllm_dense_logprobs_and_summary():
    from sleight.backends.vllm import dense_logprobs, step_summary

    lp = np.log(np.array([0.5, 0.3, 0.2], dtype=np.float32))
    dense = dense_logprobs({0: lp[0], 2: lp[2], 1: lp[1]}, 3)
    np.testing.assert_allclose(dense, lp)
    ids, top, ent = step_summary(dense, 2)
    assert list(ids) == [0, 1] and ent == pytest.approx(-(np.exp(lp) * lp).sum(), abs=1e-6)
