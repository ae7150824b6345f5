"""Readings at the scored position on the real tokenizer and model (SPEC §4.1).

Every number the audit reports is checked here against an independent forward pass of the model.
"""

from __future__ import annotations

import numpy as np
import pytest

from sleight.position import encode_continuation
from sleight.readout.audit.items import item_from_record
from sleight.readout.audit.measure import measure
from tolerances import LOGPROB_ATOL, MASS_ATOL

pytestmark = pytest.mark.slow  # the audit's measurement of 8 contexts on the real model

PAREN = item_from_record({"id": "paren", "prompt": "Pick one: (A) yes or (B) no.", "options": [" (A)", " (B)"], "stem": "The answer is"}, "t")
TF = item_from_record({"id": "tf", "prompt": "Is water wet? Answer True or False.", "options": ["True", "False"], "stem": "Out of 100 such readers, about "}, "t")
NEW = 8  # continuation budget (the audit's default is 16; the rule is the same)
APOS = item_from_record({"id": "apos", "prompt": "Finish the word.", "options": ["'s", "'t"], "stem": "It is..."}, "t")


@pytest.fixture(scope="module")
def rows(model):
    """One measurement of every case (8 contexts) shared by the tests below."""
    out = measure(model, [PAREN], ["original", "space", "stem"], max_new_tokens=NEW)
    out += measure(model, [TF, APOS], ["original", "stem"], max_new_tokens=NEW)
    return {(r["item_id"], r["variant"]): r for r in out}


def independent(model, context: str) -> np.ndarray:
    return model.next_token_logprobs([model.encode(context)])[0].astype(np.float64)


def test_prefix_condition_fails_and_mass_is_null_not_zero(model, rows):
    r = rows[("tf", "stem")]
    assert r["context"].endswith("about ")
    # "about " + "True" merges the space into " True": tok(c) is not a prefix of tok(c + o).
    assert encode_continuation(model, r["context"], "True") is None
    assert r["boundary_preserved"] is False
    assert r["option_mass"] is None and r["option_mass"] != 0
    assert r["score"] is None and r["option_mass_divergent"] is None
    assert r["option_mass_isolated"] is not None  # the isolated encoding still gives a (misleading) number
    ok = rows[("tf", "original")]
    assert ok["boundary_preserved"] is True and ok["option_mass"] > 0


def test_mass_matches_an_independent_forward_pass(model, rows):
    for key in [("tf", "original"), ("paren", "original"), ("paren", "space"), ("paren", "stem")]:
        r = rows[key]
        lp = independent(model, r["context"])
        firsts = {encode_continuation(model, r["context"], o)[0] for o in r["options"]}
        assert r["option_mass"] == pytest.approx(float(np.exp(lp[sorted(firsts)]).sum()), abs=MASS_ATOL), key
        assert r["argmax_id"] == int(np.argmax(lp))
        # argmax and top tokens come from the batched greedy decode's first step (prefix computed
        # once, rows padded), which agrees with the lone pass to float32 rounding, not bit for bit.
        assert r["argmax_prob"] == pytest.approx(float(np.exp(lp.max())), abs=MASS_ATOL)
        assert [t["id"] for t in r["top_tokens"]] == list(np.argsort(-lp)[:6])


def test_shared_first_tokens_are_counted_once_and_flagged(model, rows):
    r = rows[("paren", "original")]
    ids = r["first_token_ids"]
    assert len(ids) == 2 and ids[0] == ids[1] and model.token_text(ids[0]) == " ("
    assert r["first_tokens_distinct"] is False
    lp = independent(model, r["context"])
    assert r["option_mass"] == pytest.approx(float(np.exp(lp[ids[0]])), abs=MASS_ATOL)  # once, not twice
    # Divergent: after the shared " (", the mass of "A" and "B".
    after = model.next_token_logprobs([model.encode(r["context"]) + [ids[0]]])[0]
    a, b = (encode_continuation(model, r["context"], o)[1] for o in r["options"])
    assert r["option_mass_divergent"] == pytest.approx(float(np.exp(after[a]) + np.exp(after[b])), abs=MASS_ATOL)
    # App. C.5 counts argmax hits at the divergent position too: there the unrestricted argmax is read
    # again (after the context and " ("), a hit where it is one of the options' tokens there.
    assert r["divergent_argmax_id"] == int(np.argmax(after))
    assert r["divergent_argmax_hit"] is (int(np.argmax(after)) in {a, b})
    # Options that share no leading token: the divergent position is the scored one, its argmax the row's.
    tf = rows[("tf", "original")]
    assert tf["divergent_argmax_id"] == tf["argmax_id"] and tf["divergent_argmax_hit"] is (tf["argmax_id"] in tf["first_token_ids"])
    # No divergent position where the boundary breaks: no argmax there either.
    assert rows[("tf", "stem")]["divergent_argmax_id"] is None and rows[("tf", "stem")]["divergent_argmax_hit"] is None
    # Full-sequence log-probs, independently scored, and the renormalised score (first option's p).
    # The first token is read in the batched scored-position pass, the rest after it: float32
    # rounding against this lone pass is ~1e-5.
    want = [float(np.sum(x)) for x in model.continuation_logprobs(model.encode(r["context"]), [encode_continuation(model, r["context"], o) for o in r["options"]])]
    assert r["option_logprobs"] == pytest.approx(want, abs=LOGPROB_ATOL)
    assert r["score"] == pytest.approx(1 / (1 + np.exp(want[1] - want[0])), abs=MASS_ATOL)
    assert rows[("tf", "original")]["first_tokens_distinct"] is True


def test_space_variant_changes_the_ending(rows):
    o, s = rows[("paren", "original")], rows[("paren", "space")]
    assert s["context"] == o["context"] + " "
    assert s["context_tail"] != o["context_tail"] and s["context_tail"].endswith("assistant\n ")
    assert s["ends_with_whitespace"] and o["ends_with_whitespace"]
    assert s["option_mass"] != o["option_mass"]


def test_stem_stays_inside_the_assistant_turn(rows):
    r = rows[("paren", "stem")]
    head, _, turn = r["context"].rpartition("<|im_start|>assistant\n")
    assert head and turn == "The answer is"
    assert "<|im_end|>" not in turn
    assert r["context"].startswith(rows[("paren", "original")]["context"])


def test_isolated_and_in_context_encodings_differ(model, rows):
    r = rows[("apos", "stem")]
    assert r["context"].endswith("It is...")
    iso = [model.encode(o)[0] for o in r["options"]]  # "'s", "'t": two tokens alone
    ctx = [encode_continuation(model, r["context"], o)[0] for o in r["options"]]  # "'" shared after "..."
    assert iso[0] != iso[1] and ctx[0] == ctx[1] and set(iso).isdisjoint(ctx)
    lp = independent(model, r["context"])
    assert r["option_mass_isolated"] == pytest.approx(float(np.exp(lp[iso]).sum()), abs=MASS_ATOL)
    assert r["option_mass"] == pytest.approx(float(np.exp(lp[ctx[0]])), abs=MASS_ATOL)
    assert abs(r["option_mass"] - r["option_mass_isolated"]) > 0.1 * r["option_mass_isolated"]  # a real difference: over 10%, not noise


def test_continuation_and_classes_are_recorded(model, rows):
    for r in rows.values():
        assert isinstance(r["continuation"], str)
        assert r["continuation_class"] in ("answers_item", "forecast", "recites", "prose", "other")
        assert r["argmax_class"] in ("answer_letter", "option", "digit", "whitespace", "prose", "special")
    r = rows[("tf", "original")]
    gen = model.greedy([model.encode(r["context"])], NEW)[0]
    assert r["continuation"] == model.decode(gen.token_ids)
