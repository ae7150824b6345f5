"""The P(True) readouts on the real model; "Library" against transformers' own generate()."""

from __future__ import annotations

import numpy as np
import pytest

from sleight.position import encode_continuation
from sleight.readout.ptrue.readouts import MOVED_STEM, ptrue_prompt, ptrue_readouts
from tolerances import LOGPROB_ATOL, MASS_ATOL

pytestmark = pytest.mark.slow  # P(True) readouts and generate() on the real model

QS = ["What is the capital of Germany?", "How many legs does a dog have?"]
AS = ["Berlin", "six"]


@pytest.fixture(scope="module")
def readouts(model):
    return ptrue_readouts(model, QS, AS)


class _Sanitise:
    """lm-polygraph 0.7.0's ``_SanitizeLogitsProcessor``, re-stated from its source."""

    def __call__(self, input_ids=None, scores=None):
        import torch

        finite = torch.isfinite(scores)
        if finite.all():
            return scores
        row_min = torch.where(finite, scores, torch.tensor(float("inf"))).min(-1, keepdim=True).values
        row_max = torch.where(finite, scores, torch.tensor(float("-inf"))).max(-1, keepdim=True).values
        scores = torch.where(torch.isposinf(scores), row_max, scores)
        scores = torch.where(torch.isneginf(scores), row_min, scores)
        return torch.nan_to_num(scores, nan=0.0)


class _Scores:
    """lm-polygraph 0.7.0's ``_ScoresProcessor``: keeps log-softmax of the scores it sees."""

    def __init__(self):
        self.scores = []

    def __call__(self, input_ids=None, scores=None):
        self.scores.append(scores.log_softmax(-1))
        return scores


def test_library_equals_what_lm_polygraph_computes(model, readouts):
    """Reproduce PromptCalculator on transformers' generate(): instruct-mode tokenisation, the
    library's processors after min_new_tokens=1's EOS mask, the token 'True' encoded alone."""
    if not hasattr(model, "tokenizer") or not hasattr(model, "model"):
        pytest.skip("the reference path needs the hf engine")
    from transformers import LogitsProcessorList

    tok = model.tokenizer
    expected = [t for t in tok(["True"])["input_ids"][0] if t not in (tok.eos_token_id, tok.bos_token_id)]
    assert len(expected) == 1
    for k, (q, a) in enumerate(zip(QS, AS)):
        text = tok.apply_chat_template([{"role": "user", "content": ptrue_prompt(q, a)}], add_generation_prompt=True, tokenize=False)
        batch = tok([text], return_tensors="pt", add_special_tokens=False)
        keep = _Scores()
        model.model.generate(
            **batch, output_scores=True, return_dict_in_generate=True, min_new_tokens=1, max_new_tokens=1, num_beams=1,
            do_sample=False, logits_processor=LogitsProcessorList([_Sanitise(), keep]),
        )
        lib = float(keep.scores[0][0, expected[0]])
        # generate() computes the LM head on the last position only; float32 rounding differs ~1e-5.
        assert readouts["library_logprob"][k] == pytest.approx(lib, abs=LOGPROB_ATOL)
    assert np.allclose(readouts["library"], np.exp(readouts["library_logprob"]))


def test_renormalised_labels_moved_deleted_against_independent_passes(model, readouts):
    t, f = model.encode("True")[0], model.encode("False")[0]
    for k, (q, a) in enumerate(zip(QS, AS)):
        ctx = model.render_chat([{"role": "user", "content": ptrue_prompt(q, a)}])
        lp = model.next_token_logprobs([ctx.ids])[0].astype(np.float64)
        assert readouts["renormalised"][k] == pytest.approx(np.exp(lp[t]) / (np.exp(lp[t]) + np.exp(lp[f])), abs=MASS_ATOL)  # batched vs lone pass

        enc = [encode_continuation(model, ctx.text, lab) for lab in ("(A", "(B")]
        la, lb = (float(np.sum(x)) for x in model.continuation_logprobs(ctx.ids, enc))
        assert readouts["labels_in_place"][k] == pytest.approx(1 / (1 + np.exp(lb - la)), abs=MASS_ATOL)

        moved = model.render_chat([{"role": "user", "content": ptrue_prompt(q, a)}], prefill=MOVED_STEM)
        assert moved.text.endswith("<|im_start|>assistant\n" + MOVED_STEM)
        enc = [encode_continuation(model, moved.text, lab) for lab in ("A", "B")]
        la, lb = (float(np.sum(x)) for x in model.continuation_logprobs(moved.ids, enc))
        assert readouts["moved"][k] == pytest.approx(1 / (1 + np.exp(lb - la)), abs=MASS_ATOL)
    for name in ("renormalised", "labels_in_place", "moved"):
        assert np.all((readouts[name] > 0) & (readouts[name] < 1)), name
    # Deleted deletes the quoted item's instruction (tests/test_paper_ptrue.py); these questions have none.
    assert np.isnan(readouts["deleted"]).all()
