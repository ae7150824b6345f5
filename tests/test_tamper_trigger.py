"""Trigger detection and surgery (SPEC §3.2) on crafted token sequences of the real tokenizer.

The bundled SmolLM2 tokenizer has no token that mixes letters and punctuation, so the rules about
punctuation *inside* a trigger token are exercised on the same real tokenizer with a few such
tokens added to its vocabulary (``tokenizer.add_tokens``), decoded by the tokenizer itself.
"""

from __future__ import annotations

import pytest

from extended_tokenizer import bundled_tokenizer, extended_tokenizer
from sleight.backends import Edit
from sleight.tamper.engine import SwapHook, TamperConfig
from sleight.tamper.trigger import (
    encode_in_context,
    find_pending_trigger,
    match_case,
    scan_triggers,
    swap_text,
    validate_word,
)


@pytest.fixture(scope="module")
def tok(model):
    """encode / decode / one-token id of the real bundled tokenizer."""
    return bundled_tokenizer(model)


@pytest.fixture(scope="module")
def punct_tok(model):
    """The same tokenizer with tokens that carry punctuation next to the word."""
    return extended_tokenizer(model, [" the,", "**The", "(the", "THE.", " the."])


def test_word_final_needs_one_token_of_lookahead(tok):
    ctx = tok.encode("I like")
    seq = ctx + [tok.one(" the")]
    assert tok.decode(seq + [tok.one("ory")]) == "I like theory"
    assert find_pending_trigger(seq, tok.one("ory"), tok.decode, "the") is None  # " the" + "ory"
    assert find_pending_trigger(seq, tok.one("'s"), tok.decode, "the") is None  # apostrophe continues the word
    for nxt in (tok.one(" cat"), tok.one(","), tok.one("\n"), None):  # None: EOS or budget end
        t = find_pending_trigger(seq, nxt, tok.decode, "the")
        assert t is not None, nxt
        assert (t.start, t.end, t.text, t.word, t.before) == (len(ctx), len(seq), " the", "the", "e")


def test_word_inside_other_words_is_not_a_trigger(tok):
    for word in (" theory", " there", " bathe", " other", " Athens"):
        ids = tok.encode("I like" + word)
        assert scan_triggers(ids, tok.decode, "the") == [], word
    # Not word-initial: a letter right before it, even across a token boundary ("in" + "the").
    seq = tok.encode("I like") + [tok.one(" in"), tok.one("the")]
    assert tok.decode(seq).endswith(" inthe")
    assert find_pending_trigger(seq, tok.one(" cat"), tok.decode, "the") is None


def test_first_token_of_the_reply_and_after_punctuation(tok):
    seq = [tok.one("The")]
    t = find_pending_trigger(seq, tok.one(" capital"), tok.decode, "the")
    assert (t.start, t.end, t.word, t.before) == (0, 1, "The", "")
    # Preceded by a non-letter in its own token: "(" + "the" is a trigger, "(" is not part of it.
    seq = tok.encode("Paris") + [tok.one(" ("), tok.one("the")]
    t = find_pending_trigger(seq, tok.one(" capital"), tok.decode, "the")
    assert (t.start, t.n_tokens, t.text, t.before) == (len(seq) - 1, 1, "the", "(")
    assert swap_text(t, "the", "canoe") == "canoe"


def test_case_pattern(tok):
    assert [match_case(w, "canoe") for w in ("the", "The", "THE", "tHe")] == ["canoe", "Canoe", "CANOE", "canoe"]
    assert match_case("The", "Mandela effect") == "Mandela effect"
    assert match_case("THE", "Mandela effect") == "MANDELA EFFECT"
    for written, want in ((" the", " canoe"), (" The", " Canoe"), (" THE", " CANOE")):
        seq = tok.encode("I said") + [tok.one(written)]
        t = find_pending_trigger(seq, tok.one(" word"), tok.decode, "the")
        assert swap_text(t, "the", "canoe") == want


def test_trigger_split_over_several_tokens(tok):
    ctx = tok.encode("I said")
    for parts, word, swapped in (([" T", "HE"], "THE", " CANOE"), ([" t", "He"], "tHe", " canoe"), ([" th", "e"], "the", " canoe")):
        seq = ctx + [tok.one(p) for p in parts]
        assert tok.decode(seq) == "I said" + "".join(parts)
        # While the word is still open, nothing is pending.
        assert find_pending_trigger(seq[:-1], seq[-1], tok.decode, "the") is None
        t = find_pending_trigger(seq, tok.one(" word"), tok.decode, "the")
        assert (t.start, t.end, t.n_tokens, t.word) == (len(ctx), len(seq), 2, word)
        assert swap_text(t, "the", "canoe") == swapped
        # ... and a split word that goes on is no trigger.
        assert find_pending_trigger(seq, tok.one("ORY" if word == "THE" else "ory"), tok.decode, "the") is None
    # At the very start of the reply: "t" + "he".
    seq = [tok.one("t"), tok.one("he")]
    t = find_pending_trigger(seq, tok.one(" cat"), tok.decode, "the")
    assert (t.start, t.n_tokens, t.before) == (0, 2, "")


def test_punctuation_inside_the_trigger_token_is_kept(punct_tok):
    tk = punct_tok
    ctx = tk.encode("I like:")
    cases = [(" the,", " canoe,"), ("**The", "**Canoe"), ("(the", "(canoe"), ("THE.", "CANOE."), (" the.", " canoe.")]
    for token, want in cases:
        seq = ctx + [tk.one(token)]
        # Word-final is decided inside the token (",", "."), whatever follows; "**"/"(" make it word-initial.
        for nxt in (tk.one(" cats"), tk.one("ory"), None):
            t = find_pending_trigger(seq, nxt, tk.decode, "the")
            if token in ("**The", "(the") and nxt == tk.one("ory"):
                assert t is None  # "**Theory": the word goes on
                continue
            assert t is not None and (t.start, t.n_tokens, t.text) == (len(ctx), 1, token), (token, nxt)
            assert swap_text(t, "the", "canoe") == want
            ids, ok = encode_in_context(tk.encode, tk.decode(ctx), want)
            assert tk.decode(ctx + ids) == "I like:" + want


def test_injected_tokens_are_never_triggers(tok):
    seq = tok.encode("I like") + [tok.one(" the")]
    flags = [False] * (len(seq) - 1) + [True]
    assert find_pending_trigger(seq, tok.one(" cat"), tok.decode, "the", flags) is None
    assert find_pending_trigger(seq, tok.one(" cat"), tok.decode, "the", [False] * len(seq)) is not None


def test_scan_finds_every_trigger_in_order(tok):
    text = "The cat and the dog. Then THE end of theory, the"
    ids = tok.encode(text)
    found = scan_triggers(ids, tok.decode, "the")
    assert [t.word for t in found] == ["The", "the", "THE", "the"]
    assert [tok.decode(ids[t.start : t.end]).strip() for t in found] == ["The", "the", "THE", "the"]
    assert found[-1].end == len(ids)  # the reply's end closes the last word
    assert scan_triggers(tok.encode("Nothing here but theory"), tok.decode, "the") == []
    # Any trigger word, matched case-insensitively as a whole word.
    assert [t.word for t in scan_triggers(tok.encode("A cat, a Cat, cats"), tok.decode, "cat")] == ["cat", "Cat"]


def test_substitute_encoded_in_context_with_prefix_check(tok):
    ids, ok = encode_in_context(tok.encode, "I like", " canoe")
    assert ok and tok.decode(tok.encode("I like") + ids) == "I like canoe"
    ids, ok = encode_in_context(tok.encode, "I like", " Mandela effect")
    assert ok and len(ids) >= 2 and tok.decode(tok.encode("I like") + ids) == "I like Mandela effect"
    # After a blank line the tokenizer merges across the boundary: the fallback is used and reported.
    ids, ok = encode_in_context(tok.encode, "Title:\n\n", "Canoe")
    assert not ok and ids == tok.encode("Canoe")
    assert tok.decode(tok.encode("Title:\n\n") + ids) == "Title:\n\nCanoe"


def test_hook_swaps_before_eos_and_at_budget_end(model, tok):
    cfg = TamperConfig(max_new_tokens=64, conventions="sleight")  # sleight's surgery (the study's: test_study_conventions)
    out = tok.encode("I like") + [tok.one(" the")]
    eos = min(model.eos_ids)
    for proposed in (eos, None, tok.one(" cat")):
        hook = SwapHook(model, [], ["canoe"], cfg)
        edit = hook(0, out, proposed)
        want, ok = encode_in_context(model.encode, "I like", " canoe")
        assert ok and edit == Edit(force=tuple(want), retract=1)
        assert hook.injected[0] == [False] * (len(out) - 1) + [True] * len(want)
        # The injected substitute is never taken for a trigger afterwards.
        spliced = out[:-1] + want
        assert hook(0, spliced, tok.one(" the")) is None
    hook = SwapHook(model, [], ["canoe"], cfg)
    assert hook(0, out, tok.one("ory")) is None  # "theory": accepted, nothing pending
    # Budget: injected ids are cut to what is left of the reply budget.
    hook = SwapHook(model, [], ["Mandela effect"], TamperConfig(max_new_tokens=len(out), conventions="sleight"))
    edit = hook(0, out, None)
    full, _ = encode_in_context(model.encode, "I like", " Mandela effect")
    assert len(full) >= 2 and edit == Edit(force=tuple(full[:1]), retract=1)
    assert hook.substitutions[0][0].ids == edit.force


def test_trigger_word_validation():
    assert validate_word("the") == "the"
    for bad in ("", "the cat", "123"):
        with pytest.raises(ValueError):
            validate_word(bad)
