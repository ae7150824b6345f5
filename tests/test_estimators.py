"""lm-polygraph's estimators on sleight's records: the reported values against the library's own
classes on the same statistics, the project's own three against the library, and the statistics
against independent passes of the model and against the library's own stat calculators."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sleight.readout.ptrue.answers import DEFAULT_ITEMS, Sampling, greedy_answers, load_qa_items
from sleight.readout.ptrue.attention import (
    ELICITING_PROMPT,
    ELICITING_SUFFIX,
    answer_span,
    attention_stats,
    eager_attention,
    eliciting_attention,
    generation_attention,
)
from sleight.readout.ptrue.estimators import render_markdown, run_estimators
from sleight.readout.ptrue.readouts import polygraph_logprob, ptrue_readouts
from sleight.readout.ptrue.uncertainty import (
    ESTIMATOR_COLUMNS,
    ESTIMATORS,
    SKIPPED,
    TOKEN_ESTIMATORS,
    AnswerTokens,
    answer_tokens,
    comparison,
    estimate,
    greedy_distributions,
    greedy_stats,
    library_values,
    lm_log_likelihoods,
    own_values,
    ptrue_sampling_logprobs,
    sample_answers,
    sample_stats,
)
from tolerances import ENTROPY_ATOL, FLOAT64_ATOL, FLOAT64_RTOL, LOGPROB_ATOL, MASS_ATOL

N_SAMPLES = 3
TOKENS = 12


def test_the_three_formulas():
    a = AnswerTokens((5, 6, 2), (math.log(0.5), math.log(0.25), math.log(0.8)), (1.0, 2.0, 0.5), True)
    assert TOKEN_ESTIMATORS["MaximumSequenceProbability"](a) == pytest.approx(-math.log(0.5 * 0.25 * 0.8))
    assert TOKEN_ESTIMATORS["Perplexity"](a) == pytest.approx(-math.log(0.5 * 0.25 * 0.8) / 3)
    assert TOKEN_ESTIMATORS["MeanTokenEntropy"](a) == pytest.approx(3.5 / 3)


def test_the_default_set_is_accounted_for():
    """Every entry of default_estimators.yaml (v0.7.0, 107 lines, 50 entries) is computed or skipped
    with a reason: the computed ones by their line, the skipped ones by their line ranges."""
    covered: set[int] = set()
    for lines in [e.lines for e in ESTIMATORS] + [s[1] for s in SKIPPED]:
        lo, _, hi = lines.partition("-")
        covered |= set(range(int(lo), int(hi or lo) + 1))
    entry_starts = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 18, 21, 24, 25, 29, 33, 36, 40, 44, 47, 51, 55, 58, 59, 62, 63, 64, 65, 66, 67, 68, 69}
    entry_starts |= {70, 71, 72, 73, 76, 79, 91, 94, 98, 102, 103, 104, 105, 106, 107}
    assert len(entry_starts) == 50 and entry_starts <= covered
    assert len(set(ESTIMATOR_COLUMNS)) == len(ESTIMATORS) == 24
    assert all(reason for _, _, reason in SKIPPED)


def test_attention_layouts_are_the_librarys_on_a_known_array():
    """App. E's attention estimators read lm-polygraph's layouts: ``attention_all`` row ``j`` holds the
    attention of the query that produced answer token ``j`` (the position of token ``j - 1``) over the
    answer's first ``j`` tokens, layer-major, zeros elsewhere, so RAUQ's offset -1 diagonal is each
    answer position's attention to itself; a bfloat16 model's values pass through float16 as the
    library converts them; the eliciting prompt's answer span is the last match at or before
    ``len(ids) - n``, ``(-4 - n, -4)`` where none matches."""
    layers, heads, p, n = 2, 3, 4, 3
    full = np.arange(layers * heads * (p + n) ** 2, dtype=np.float32).reshape(layers, heads, p + n, p + n)
    gen = generation_attention(full, p, n)
    assert gen.shape == (layers * heads, n, n) and gen.dtype == np.float64
    for layer in range(layers):
        for head in range(heads):
            for j in range(n):
                for k in range(n):
                    assert gen[layer * heads + head, j, k] == (full[layer, head, p + j - 1, p + k] if k < j else 0.0)
    diag = np.diagonal(gen.reshape(layers, heads, n, n), offset=-1, axis1=2, axis2=3)
    assert (diag == np.diagonal(full[:, :, p : p + n - 1, p : p + n - 1], axis1=2, axis2=3)).all()
    tiny = np.full((1, 1, p + n, p + n), 1e-7, dtype=np.float32)  # below float16's normal range
    assert (generation_attention(tiny, p, n, float16=True)[0][np.tril_indices(n, -1)] == float(np.float16(1e-7))).all()
    ids = [5, 1, 2, 9, 1, 2, 7, 8]
    assert answer_span(ids, [1, 2]) == (4, 6) and answer_span(ids, [3]) == (-5, -4)
    last = np.arange(layers * heads * len(ids), dtype=np.float32).reshape(layers, heads, len(ids))
    assert (eliciting_attention(last, ids, [1, 2]) == last[:, :, 4:6].reshape(layers * heads, 2)).all()


@pytest.fixture(scope="module")
def decoded(model):
    items = load_qa_items(DEFAULT_ITEMS, limit=3)
    prompts = [model.encode(model.render_chat([{"role": "user", "content": it.prompt}]).text) for it in items]
    gens = model.greedy(prompts, TOKENS)
    return items, prompts, gens, answer_tokens(model, prompts, gens)


@pytest.fixture(scope="module")
def stats(model, decoded):
    """The statistics every default estimator consumes, from the bundled model and its answers."""
    items, prompts, gens, toks = decoded
    texts = [model.decode(g.token_ids) for g in gens]
    drawn = sample_answers(model, prompts, N_SAMPLES, TOKENS, Sampling())
    st = {**greedy_stats(toks), "greedy_lm_log_likelihoods": lm_log_likelihoods(model, toks), **sample_stats(drawn)}
    st["greedy_log_probs"] = greedy_distributions(model, prompts, toks)
    st["p_true"] = ptrue_readouts(model, [it.prompt for it in items], texts)["library_logprob"]
    st["p_true_sampling"] = ptrue_sampling_logprobs(model, [it.prompt for it in items], texts, drawn)
    st.update(attention_stats(model, prompts, [list(t.token_ids) for t in toks], [it.prompt for it in items]))
    return st


@pytest.mark.slow
def test_records_equal_an_independent_teacher_forced_pass(model, decoded):
    items, prompts, gens, toks = decoded
    eos = min(model.eos_ids)
    # the estimators' greedy decode has no newline stop (the ptrue answer step's POLYGRAPH_STOP; issue 34 item 7)
    assert [model.decode(g.token_ids) for g in gens] == [a.text for a in greedy_answers(model, items, TOKENS, stop=())]
    for p, g, t in zip(prompts, gens, toks):
        assert list(t.token_ids[: len(g.token_ids)]) == list(g.token_ids)
        assert t.ended == (g.finish_reason == "stop") and (t.token_ids[-1] == eos) == t.ended
        lp = model.continuation_logprobs(p, [list(t.token_ids)])[0]
        assert list(t.logprobs) == pytest.approx([float(v) for v in lp], abs=LOGPROB_ATOL)
        for k in range(len(t.token_ids)):  # the entropy of the full distribution at each answer position
            full = model.next_token_logprobs([list(p) + list(t.token_ids[:k])])[0].astype(np.float64)
            assert t.entropies[k] == pytest.approx(float(-(np.exp(full) * full).sum()), abs=ENTROPY_ATOL)


def test_own_three_equal_the_librarys_classes_on_the_same_stats(decoded, stats):
    """The project's own implementations stay because they equal lm-polygraph's on the same stats."""
    pytest.importorskip("lm_polygraph.estimators")
    own = own_values(decoded[3])
    lib = library_values(stats, [e for e in ESTIMATORS if e.column in TOKEN_ESTIMATORS])
    assert set(own) == set(lib) == set(TOKEN_ESTIMATORS)
    for name in TOKEN_ESTIMATORS:
        np.testing.assert_allclose(own[name], lib[name], rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL)


def test_reported_values_are_the_librarys_classes_on_the_same_stats(model, decoded, stats):
    """What ``estimate`` reports, column by column, equals lm-polygraph's own class (constructed here
    from the library, with the default set's config) applied to the same statistics."""
    lib = pytest.importorskip("lm_polygraph.estimators")
    items, prompts, gens, toks = decoded
    texts = [model.decode(g.token_ids) for g in gens]
    got, engine, notes = estimate(
        model, prompts, toks, questions=[it.prompt for it in items], answer_texts=texts, keys=[it.id for it in items],
        p_true=stats["p_true"], max_new_tokens=TOKENS, samples=N_SAMPLES,
    )  # fmt: skip
    assert engine == "lm-polygraph 0.7.0"
    assert list(got) == list(ESTIMATOR_COLUMNS)
    assert len(notes) == len(SKIPPED)
    layers = model.model.config.num_hidden_layers
    for e in ESTIMATORS:
        est = getattr(lib, e.cls)(**dict(e.kwargs))
        # AttentionScore's str() carries the layer it resolves from stats["model"] when called
        assert str(est) == (e.column if e.cls != "AttentionScore" else "AttentionScore (layer=None)")
        assert set(est.stats_dependencies) <= set(stats), e.column
        want = np.asarray(est(stats), dtype=np.float64)
        assert e.cls != "AttentionScore" or str(est) == f"AttentionScore (layer={layers // 2})"
        assert want.shape == (len(items),) and np.isfinite(want).all(), e.column
        np.testing.assert_allclose(got[e.column], want, rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL, err_msg=e.column)
    # each value its own; rouge-1 and rouge-L coincide whenever every sample pair's longest common
    # subsequence is its unigram overlap (short samples), so they count as one here
    distinct = {tuple(np.round(v, 9)) for k, v in got.items() if k != "LexicalSimilarity_rougeL"}
    assert len(distinct) == len(got) - 1


def test_stats_equal_independent_passes(model, decoded, stats):
    """``greedy_lm_log_likelihoods`` is log p(y_t | y_<t) without the question; ``greedy_log_probs``
    the full distribution at each answer position; the samples' log-likelihoods are the model's own
    (EOS masked in the first two steps) and their sum with the EOS token is ``sample_log_probs``."""
    items, prompts, _, toks = decoded
    eos = sorted(model.eos_ids)
    for t, lm, dist in zip(toks, stats["greedy_lm_log_likelihoods"], stats["greedy_log_probs"]):
        assert math.isnan(lm[0]) and len(lm) == len(t.token_ids) == len(dist)
        for k in range(1, len(t.token_ids)):
            alone = model.next_token_logprobs([list(t.token_ids[:k])])[0]
            assert lm[k] == pytest.approx(float(alone[t.token_ids[k]]), abs=LOGPROB_ATOL)
        assert [float(d[i]) for d, i in zip(dist, t.token_ids)] == pytest.approx(list(t.logprobs), abs=LOGPROB_ATOL)
    for p, toks_i, lls_i, total_i in zip(prompts, stats["sample_tokens"], stats["sample_log_likelihoods"], stats["sample_log_probs"]):
        assert len(toks_i) == N_SAMPLES
        for s, ll, tot in zip(toks_i, lls_i, total_i):
            full = model.next_token_logprobs([list(p) + s[:k] for k in range(len(s) + 1)]).astype(np.float64)
            want = [polygraph_logprob(float(full[k, s[k]]), [float(full[k, e]) for e in eos]) if k < 2 else float(full[k, s[k]]) for k in range(len(s))]
            assert ll == pytest.approx(want, abs=LOGPROB_ATOL)
            ended = tot - sum(ll)  # the EOS token's log-prob where the sample ended, 0 where the budget cut it
            assert len(s) == TOKENS or ended == pytest.approx(max(float(full[len(s), e]) for e in eos), abs=LOGPROB_ATOL)


def test_samples_are_the_model_layers_seeded_draws(model, decoded):
    """The samples are :meth:`LanguageModel.sample`'s with lm-polygraph's settings (top-k 50, two
    tokens before EOS, seed 1): the same tokens, seeded, another seed another draw."""
    _, prompts, _, _ = decoded
    a = sample_answers(model, prompts[:1], 2, 4, Sampling())
    assert a == sample_answers(model, prompts[:1], 2, 4, Sampling())
    assert a != sample_answers(model, prompts[:1], 2, 4, Sampling(seed=2))
    direct = model.sample(prompts[:1], 4, n=2, sampling=Sampling())[0]
    assert a[0].tokens == tuple(tuple(x.token_ids) for x in direct if x.token_ids)


@pytest.mark.parametrize("instruct", [True, False])
def test_p_true_stats_equal_lm_polygraphs_prompt_calculators(model, instruct):
    """``p_true`` and ``p_true_sampling`` against lm-polygraph's own ``PromptCalculator`` and
    ``SamplingPromptCalculator`` run on a ``WhiteboxModel`` around the same weights."""
    pytest.importorskip("lm_polygraph.estimators")
    from lm_polygraph.stat_calculators.prompt import PromptCalculator, SamplingPromptCalculator
    from lm_polygraph.utils.model import WhiteboxModel

    from sleight.readout.ptrue.uncertainty import Samples

    wb = WhiteboxModel(model.model, model.tokenizer, instruct=instruct)
    qs, ans, ss = ["What is the capital of Germany?", "What is 2 + 2?"], ["Berlin", " 5"], [("Berlin", "Munich"), ("4", "four", "5")]
    # one question per call: the tokenizer pads on the right, so a shorter prompt in a batch of the
    # library's would be read at a padding position
    deps = [{"input_texts": [q], "greedy_texts": [a], "sample_texts": [list(s)]} for q, a, s in zip(qs, ans, ss)]
    want_pt = [float(PromptCalculator()(d, d["input_texts"], wb)["p_true"][0]) for d in deps]
    want_pts = [float(SamplingPromptCalculator()(d, d["input_texts"], wb)["p_true_sampling"][0]) for d in deps]
    samples = [Samples(((1,),) * len(s), ((0.0,),) * len(s), (0.0,) * len(s), s) for s in ss]
    assert ptrue_readouts(model, qs, ans, instruct=instruct)["library_logprob"] == pytest.approx(want_pt, abs=LOGPROB_ATOL)
    assert ptrue_sampling_logprobs(model, qs, ans, samples, instruct=instruct) == pytest.approx(want_pts, abs=LOGPROB_ATOL)


@pytest.mark.slow
def test_attention_stats_equal_lm_polygraphs_calculators(model):
    """App. E's attention estimators (AttentionScore, RAUQ at both settings, CSL) read three
    statistics; each equals what lm-polygraph 0.7.0's own calculator computes on a ``WhiteboxModel``
    around the same weights (eager attention, as the library needs it), one question per call: the
    prompt tokens are sleight's chat prompt, ``attention_all`` (read by the library during its cached
    decode, here from one full pass) agrees within float noise, the full pass and the eliciting
    prompt's pass are the same computation. The estimators then give the library's values on either."""
    lib = pytest.importorskip("lm_polygraph.estimators")
    from lm_polygraph.stat_calculators.attention_eliciting_prompt import AttentionElicitingPromptCalculator
    from lm_polygraph.stat_calculators.attention_forward_pass import AttentionForwardPassCalculator
    from lm_polygraph.stat_calculators.entropy import EntropyCalculator
    from lm_polygraph.stat_calculators.greedy_probs import GreedyProbsCalculator
    from lm_polygraph.utils.model import WhiteboxModel

    eliciting = AttentionElicitingPromptCalculator()
    assert (eliciting.prompt, eliciting.suffix_prompt) == (ELICITING_PROMPT, ELICITING_SUFFIX)
    wb = WhiteboxModel(model.model, model.tokenizer, instruct=True)
    entries = [e for e in ESTIMATORS if e.needs == "attention"]
    assert [e.column for e in entries] == ["AttentionScore", "RAUQ", "RAUQ (entropy)", "CSL"]
    before = model.model.config._attn_implementation
    for it in load_qa_items(DEFAULT_ITEMS, limit=2):
        with eager_attention(model.model):
            want = GreedyProbsCalculator()({}, [it.prompt], wb, max_new_tokens=TOKENS)
            want.update(AttentionForwardPassCalculator()(want, [it.prompt], wb))
            want.update(eliciting(want, [it.prompt], wb))
        want.update(EntropyCalculator()(want, [it.prompt], wb))
        assert model.model.config._attn_implementation == before  # the engine's own attention is back
        assert want["input_tokens"][0] == model.encode(model.render_chat([{"role": "user", "content": it.prompt}]).text)
        got = attention_stats(model, want["input_tokens"], want["greedy_tokens"], [it.prompt])
        assert model.model.config._attn_implementation == before
        fwd, gen, eli = got["forwardpass_attention_weights"][0], got["attention_all"][0], got["attention_weights_eliciting_prompt"][0]
        assert fwd.shape == want["forwardpass_attention_weights"][0].shape and fwd.dtype == np.float32
        np.testing.assert_array_equal(fwd, want["forwardpass_attention_weights"][0])
        np.testing.assert_array_equal(eli, want["attention_weights_eliciting_prompt"][0])
        assert gen.shape == want["attention_all"][0].shape
        np.testing.assert_allclose(gen, want["attention_all"][0], atol=MASS_ATOL)  # attention weights are probabilities
        ours = {**want, **got, "model": wb}
        for e in entries:
            a = getattr(lib, e.cls)(**dict(e.kwargs))(dict(want, model=wb))
            b = getattr(lib, e.cls)(**dict(e.kwargs))(ours)
            if e.cls == "RAUQ":  # a mean of log-confidences from log-probs and attention_all; measured 1e-7 apart
                np.testing.assert_allclose(b, a, atol=LOGPROB_ATOL, err_msg=e.column)
            else:  # AttentionScore and CSL read the two bit-identical statistics
                np.testing.assert_array_equal(b, a, err_msg=e.column)


def test_without_the_library_the_own_three_are_reported(model, decoded):
    items, prompts, gens, toks = decoded
    got, engine, notes = estimate(
        model, prompts, toks, questions=[it.prompt for it in items], answer_texts=[""] * 3, keys=[it.id for it in items],
        p_true=[0.0] * 3, use_polygraph=False,
    )  # fmt: skip
    assert engine == "sleight" and list(got) == list(TOKEN_ESTIMATORS)
    assert len(notes) == len(ESTIMATORS) - len(TOKEN_ESTIMATORS) + len(SKIPPED)
    for k, t in enumerate(toks):
        assert got["MaximumSequenceProbability"][k] == pytest.approx(-float(np.sum(t.logprobs)))
        assert got["Perplexity"][k] == pytest.approx(-float(np.mean(t.logprobs)))
        assert got["MeanTokenEntropy"][k] == pytest.approx(float(np.mean(t.entropies)))


def test_comparison_pairs_every_readout_with_every_estimator():
    y = [1, 0, 1, 0, 1, 1]
    unc = {"Perplexity": [0.1, 0.9, 0.2, 0.8, 0.3, 0.4]}
    pt = {"moved": [0.9, 0.1, 0.8, None, 0.7, 0.6], "library": [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]}
    s = comparison(y, ["a", "b", "c", "d", "e", "f"], unc, pt, B=200)
    assert s.estimators["Perplexity"]["auroc"].estimate == pytest.approx(1.0)
    assert s.ptrue["moved"]["auroc"].n == 5  # the undefined answer left out
    assert set(s.differences) == {"moved - Perplexity", "library - Perplexity"}
    assert s.differences["library - Perplexity"]["auroc"].diff == pytest.approx(0.5 - 1.0)


@pytest.mark.slow
def test_run_estimators_end_to_end(model):
    items = load_qa_items(DEFAULT_ITEMS, limit=4)
    res = run_estimators(model, items, max_new_tokens=TOKENS, samples=N_SAMPLES, B=200)
    n_est = len(res.summary.estimators)
    assert len(res.rows) == 4 and len(res.summary.differences) == 5 * n_est
    assert n_est == (len(ESTIMATORS) if res.engine.startswith("lm-polygraph") else len(TOKEN_ESTIMATORS))
    md = render_markdown(res, "m")
    assert "MeanTokenEntropy" in md and "Not computed:" in md


@pytest.mark.slow
def test_sampled_answers_are_table10s_draw_with_a_decodes_records(model, tmp_path):
    """App. E: the estimators score Table 10's own answers, each one sample at the checkpoint's generation
    settings (issue 34 item 3). A sampled estimators answer is the ptrue run's own draw (the same seeded
    per-prompt stream, cut at the newline), and its records are those a decode reads at its tokens (the
    tokens fed as forced steps of the model's own decode). A run directory records the draw: a resume
    with greedy answers is refused in one line."""
    from sleight.errors import UserError
    from sleight.readout.ptrue.answers import sampled_answers, sampled_generations
    from sleight.readout.ptrue.estimators import run_estimators_dir

    items = load_qa_items(DEFAULT_ITEMS, limit=3)
    sampling = Sampling()  # lm-polygraph's defaults: temperature 1.0, top-k 50, seed 1
    prompts = [model.encode(model.render_chat([{"role": "user", "content": it.prompt}]).text) for it in items]
    gens = sampled_generations(model, prompts, TOKENS, sampling)
    texts = [model.decode(g.token_ids) for g in gens]
    assert texts == [a.text for a in sampled_answers(model, items, TOKENS, sampling)]
    assert texts != [a.text for a in greedy_answers(model, items, TOKENS)]
    forced = model.greedy(prompts, TOKENS, forced=[list(g.token_ids) for g in gens])
    for g, f in zip(gens, forced):
        n = len(g.token_ids)
        assert list(f.token_ids[:n]) == list(g.token_ids) and bool(f.forced[:n].all())
        assert list(g.logprobs) == pytest.approx([float(v) for v in f.logprobs[:n]], abs=LOGPROB_ATOL)
        assert list(g.entropy) == pytest.approx([float(v) for v in f.entropy[:n]], abs=ENTROPY_ATOL)

    run = run_estimators_dir(lambda: model, items[:1], tmp_path, samples=1, max_new_tokens=8, B=20, answer_sampling=sampling)
    assert [r["answer"] for r in run.rows] == [a.text for a in sampled_answers(model, items[:1], 8, sampling)]
    with pytest.raises(UserError) as refused:
        run_estimators_dir(lambda: model, items[:1], tmp_path, samples=1, max_new_tokens=8, B=20)
    assert "decode" in str(refused.value) and "\n" not in str(refused.value)
