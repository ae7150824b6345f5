"""The token-based uncertainty estimators against independent recomputations on the real model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sleight.readout.ptrue.answers import DEFAULT_ITEMS, greedy_answers, load_qa_items
from sleight.readout.ptrue.estimators import render_markdown, run_estimators
from sleight.readout.ptrue.uncertainty import TOKEN_ESTIMATORS, AnswerTokens, answer_tokens, comparison, estimate
from tolerances import ENTROPY_ATOL, LOGPROB_ATOL


def test_the_three_formulas():
    a = AnswerTokens((5, 6, 2), (math.log(0.5), math.log(0.25), math.log(0.8)), (1.0, 2.0, 0.5), True)
    assert TOKEN_ESTIMATORS["MaximumSequenceProbability"](a) == pytest.approx(-math.log(0.5 * 0.25 * 0.8))
    assert TOKEN_ESTIMATORS["Perplexity"](a) == pytest.approx(-math.log(0.5 * 0.25 * 0.8) / 3)
    assert TOKEN_ESTIMATORS["MeanTokenEntropy"](a) == pytest.approx(3.5 / 3)


@pytest.fixture(scope="module")
def decoded(model):
    items = load_qa_items(DEFAULT_ITEMS, limit=3)
    prompts = [model.encode(model.render_chat([{"role": "user", "content": it.prompt}]).text) for it in items]
    gens = model.greedy(prompts, 12)
    return items, prompts, gens, answer_tokens(model, prompts, gens)


@pytest.mark.slow
def test_records_equal_an_independent_teacher_forced_pass(model, decoded):
    items, prompts, gens, toks = decoded
    eos = min(model.eos_ids)
    assert [model.decode(g.token_ids) for g in gens] == [a.text for a in greedy_answers(model, items, 12)]
    for p, g, t in zip(prompts, gens, toks):
        assert list(t.token_ids[: len(g.token_ids)]) == list(g.token_ids)
        assert t.ended == (g.finish_reason == "stop") and (t.token_ids[-1] == eos) == t.ended
        lp = model.continuation_logprobs(p, [list(t.token_ids)])[0]
        assert list(t.logprobs) == pytest.approx([float(v) for v in lp], abs=LOGPROB_ATOL)
        for k in range(len(t.token_ids)):  # the entropy of the full distribution at each answer position
            full = model.next_token_logprobs([list(p) + list(t.token_ids[:k])])[0].astype(np.float64)
            assert t.entropies[k] == pytest.approx(float(-(np.exp(full) * full).sum()), abs=ENTROPY_ATOL)
    est, engine = estimate(toks, use_polygraph=False)
    assert engine == "sleight"
    for k, t in enumerate(toks):
        assert est["MaximumSequenceProbability"][k] == pytest.approx(-float(np.sum(t.logprobs)))
        assert est["Perplexity"][k] == pytest.approx(-float(np.mean(t.logprobs)))
        assert est["MeanTokenEntropy"][k] == pytest.approx(float(np.mean(t.entropies)))


def test_lm_polygraph_values_are_the_reported_ones(decoded):
    estimators = pytest.importorskip("lm_polygraph.estimators")
    toks = decoded[3]
    est, engine = estimate(toks)
    assert engine.startswith("lm-polygraph")
    stats = {"greedy_log_likelihoods": [np.asarray(t.logprobs) for t in toks], "entropy": [np.asarray(t.entropies) for t in toks]}
    for cls in (estimators.MaximumSequenceProbability, estimators.Perplexity, estimators.MeanTokenEntropy):
        assert est[str(cls())] == pytest.approx(np.asarray(cls()(stats)))


def test_comparison_pairs_every_readout_with_every_estimator():
    y = [1, 0, 1, 0, 1, 1]
    unc = {"Perplexity": [0.1, 0.9, 0.2, 0.8, 0.3, 0.4]}
    pt = {"moved": [0.9, 0.1, 0.8, None, 0.7, 0.6], "library": [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]}
    s = comparison(y, ["a", "b", "c", "d", "e", "f"], unc, pt, B=200)
    assert s["estimators"]["Perplexity"]["auroc"]["estimate"] == pytest.approx(1.0)
    assert s["ptrue"]["moved"]["auroc"]["n"] == 5  # the undefined answer left out
    assert set(s["differences"]) == {"moved - Perplexity", "library - Perplexity"}
    assert s["differences"]["library - Perplexity"]["auroc"]["diff"] == pytest.approx(0.5 - 1.0)


@pytest.mark.slow
def test_run_estimators_end_to_end(model):
    items = load_qa_items(DEFAULT_ITEMS, limit=4)
    res = run_estimators(model, items, max_new_tokens=12, B=200)
    assert len(res["rows"]) == 4 and len(res["summary"]["differences"]) == 5 * 3
    assert "MeanTokenEntropy" in render_markdown(res, "m")
