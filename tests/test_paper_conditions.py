"""The Appendix C/D/I conditions the audit builds (issue #19, item 3): what is built here.

Only the conditions the issue states can be built from its text; docs/readout.md ("Paper fidelity")
lists the others and why they are not.
"""

from __future__ import annotations

import pytest

from sleight.errors import UserError
from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.presets import FORECAST_ITEM_INSTRUCTION, preset_items
from sleight.readout.audit.variants import PAPER_CONDITIONS, VARIANTS, Skipped, make_variant, parse_variants


def test_instruction_and_choices_deleted():
    """Paper: Appendix C/D/I, "instruction + choices deleted" (issue #19 item 3): the quoted item
    keeps its question only; both its instruction and its choice list are gone, the rest of the
    prompt is as it was, and no run of blank lines is left where they were."""
    item = preset_items("forecast", limit=1)[0]
    original = item.messages[0]["content"]
    spec = make_variant(item, "deleted_instruction_choices")
    assert not isinstance(spec, Skipped)
    text = spec.messages[0]["content"]
    assert item.choices_block in original and FORECAST_ITEM_INSTRUCTION in original
    assert item.choices_block not in text and FORECAST_ITEM_INSTRUCTION not in text
    assert item.question is not None and item.question in text and "\n\n\n" not in text
    # each deletion alone is the audit's existing variant; both together delete exactly the two parts
    only_i = make_variant(item, "deleted_instruction").messages[0]["content"]  # type: ignore[union-attr]
    only_c = make_variant(item, "deleted_choices").messages[0]["content"]  # type: ignore[union-attr]
    assert item.choices_block in only_i and FORECAST_ITEM_INSTRUCTION in only_c
    assert text == original.replace(f"{item.question}\n{item.choices_block}\n{FORECAST_ITEM_INSTRUCTION}", item.question)
    assert spec.prefill is None and spec.chat_template == item.chat_template


def test_instruction_and_choices_deleted_is_named_not_default():
    """Paper: Appendix C/D/I (issue #19 item 3): the condition is taken by name in ``--variants``;
    the default set (``all``) is unchanged, so a default audit reads and resumes as before; an item
    that lacks either part says so instead of being read half-deleted."""
    assert PAPER_CONDITIONS == ("deleted_instruction_choices",) and "deleted_instruction_choices" not in VARIANTS
    assert parse_variants("deleted_instruction_choices") == ("original", "deleted_instruction_choices")
    assert parse_variants("all") == VARIANTS
    with pytest.raises(UserError, match="unknown variant"):
        parse_variants("deleted_everything")
    bare = AuditItem(id="a", messages=({"role": "user", "content": "Q?\nA. x\nB. y"},), options=("A", "B"), choices_block="A. x\nB. y")
    skipped = make_variant(bare, "deleted_instruction_choices")
    assert isinstance(skipped, Skipped) and "quoted_instruction" in skipped.reason
    absent = AuditItem(id="b", messages=({"role": "user", "content": "Q?\nA. x\nB. y\nPick."},), options=("A", "B"),
                       choices_block="A. x\nB. y", quoted_instruction="Answer A or B.")
    assert isinstance(make_variant(absent, "deleted_instruction_choices"), Skipped)


# ---------------------------------------------------------------------------------------------
# issue #27 item 3: the audit-side rules as the paper prints them
# ---------------------------------------------------------------------------------------------
import json  # noqa: E402
from importlib import resources  # noqa: E402

import numpy as np  # noqa: E402

from sleight.readout.audit import composed as comp  # noqa: E402
from sleight.readout.audit import conditions as cond  # noqa: E402
from sleight.readout.audit import judge, notes, reader, token_rules  # noqa: E402
from sleight.readout.audit.presets import FORECAST_QUESTION, FORECAST_STEM, forecast_prompt  # noqa: E402
from sleight.readout.audit.variants import FENCE_BEGIN, SUBSTITUTES, render  # noqa: E402


def _race(n=6):
    text = resources.files("sleight").joinpath("data/fixtures/race_items.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()][:n]


class _Recording:
    """The real model, with the prompts of each ``generate_until`` call kept (what the writer asked)."""

    def __init__(self, model):
        self._m, self.asked = model, []

    def __getattr__(self, name):
        return getattr(self._m, name)

    def generate_until(self, prompts, max_tokens, **kw):
        self.asked.append([self._m.decode(p) for p in prompts])
        return self._m.generate_until(prompts, max_tokens, **kw)


def test_note_writer_prompt_budget_and_acceptance():
    """Paper: App. H, the note writer: its printed prompt, 256 new tokens, a note ends at EOS, has
    1-32 words and no thinking token; retry r asks for floor(32 / (r + 1)) words."""
    p = notes.writer_prompt("PASSAGE TEXT")
    assert p.startswith("Source text: PASSAGE TEXT") and "using ONLY your note. You do not get to see the question." in p
    assert "Budget: at most 32 words. Write only the note and then stop." in p
    assert [notes.retry_budget(r) for r in range(5)] == [32, 16, 10, 8, 6] and notes.NOTE_RETRIES == 4
    assert "at most 10 words." in notes.writer_prompt("x", 2) and notes.NOTE_MAX_NEW_TOKENS == 256
    assert notes.note_ok("A short note.", "stop") and not notes.note_ok("A short note.", "length")
    assert not notes.note_ok("", "stop") and not notes.note_ok(" ".join(["w"] * 33), "stop") and notes.note_ok(" ".join(["w"] * 32), "stop")
    assert not notes.note_ok("<think>\n</think> ok", "stop")


def test_n1_notes_use_the_writer_at_a_twelve_word_budget():
    """Paper: App. I, N1: the per-item notes were written with a twelve-word budget; App. H's writer
    asks for it, retries at floor(12 / (r + 1)) words and keeps 1-12 words."""
    assert cond.N1_NOTE_WORDS == 12
    assert "Budget: at most 12 words. Write only the note" in notes.writer_prompt("P", 0, cond.N1_NOTE_WORDS)
    assert [notes.retry_budget(r, 12) for r in range(5)] == [12, 6, 4, 3, 2] and "at most 4 words." in notes.writer_prompt("P", 2, 12)
    assert notes.note_ok(" ".join(["w"] * 12), "stop", 12) and not notes.note_ok(" ".join(["w"] * 13), "stop", 12)


def test_note_writer_retries_at_a_shrinking_budget(model):
    """Paper: App. H: an unfinished attempt is retried up to four times, each at the smaller budget;
    after five failures no note is kept. (A 3-token cap leaves every attempt unfinished.) The retries
    are asked together, as one batch."""
    rec = _Recording(model)
    (got,) = notes.write_notes(rec, [_race(1)[0]["passage"]], max_new_tokens=3)
    assert (got.text, got.attempts, got.ok, got.n_tokens, got.finish_reason) == ("", 5, False, 3, "length")
    budgets = [[int(p.split("at most ")[1].split()[0]) for p in call] for call in rec.asked]
    assert budgets == [[32], [16, 10, 8, 6]]  # the first attempt, then the four retries as one batch
    (full,) = notes.write_notes(model, [_race(1)[0]["passage"]])
    assert not full.ok or (notes.note_ok(full.text, "stop") and 1 <= full.attempts <= 5)


def test_fixed_note_mode_over_frozen_items():
    """Paper: Table 3: one fixed note ("Landlord only gives when told to take, not give.") over the
    first 64 frozen items, each the production prompt of App. B, in the records' order."""
    recs = _race(28)
    items = cond.fixed_note_items(recs)
    assert len(items) == min(cond.FROZEN_ITEMS, len(recs)) and [it.id for it in items] == [str(r["id"]) for r in recs]
    assert cond.FIXED_NOTE == "Landlord only gives when told to take, not give."
    for it, r in zip(items, recs):
        assert it.messages[0]["content"] == forecast_prompt(cond.FIXED_NOTE, r["question"], r["choices"])[0]
        assert it.stem == FORECAST_STEM and it.meta["note"] == cond.FIXED_NOTE
    assert len(cond.fixed_note_items(recs, n=3)) == 3


def test_appendix_i_conditions_as_printed(model):
    """Paper: App. I, conditions C0, N1, S1, D1, A1, A2, T1, T2 (S1 to T2 printed): each built from
    C0's fixed note and item block, S1 in a system turn, A1/A2 inserted before the forecast
    question, T1/T2 with their own stems; D1's MMLU-Pro block lettered to its last option."""
    recs = _race(2)
    c0 = cond.condition_items("C0", recs)[0]
    text = c0.messages[0]["content"]
    s1 = cond.condition_items("S1", recs)[0]
    assert [m["role"] for m in s1.messages] == ["system", "user"] and s1.messages[0]["content"] == cond.S1_SYSTEM
    assert s1.messages[1]["content"].startswith(f"Note: {cond.FIXED_NOTE}") and "Quoted question: " + c0.quoted in s1.messages[1]["content"]
    a1 = cond.condition_items("A1", recs)[0].messages[0]["content"]
    a2 = cond.condition_items("A2", recs)[0].messages[0]["content"]
    assert a1 == text.replace(FORECAST_QUESTION, cond.A1_SENTENCE + " " + FORECAST_QUESTION)
    assert a2 == text.replace(FORECAST_QUESTION, cond.A1_SENTENCE + " " + cond.A2_SENTENCE + " " + FORECAST_QUESTION)
    for name, stem in (("T1", "Estimate: "), ("T2", "Predicted number correct: ")):
        t = cond.condition_items(name, recs)[0]
        body = t.messages[0]["content"]
        assert body.count(c0.quoted) == 1 and body.count(cond.FIXED_NOTE) == 1 and t.stem == stem
        assert cond.condition_items(name, recs, own_stem=False)[0].stem == FORECAST_STEM
    n1 = cond.condition_items("N1", recs, notes=["first note", "second note"])
    assert [it.messages[0]["content"].split("\n")[0] for it in n1] == ["Note: first note", "Note: second note"]
    with pytest.raises(UserError, match="N1 needs one note per item"):
        cond.condition_items("N1", recs)
    with pytest.raises(UserError, match="unknown App. I condition"):
        cond.condition_items("C9", recs)
    pro = [{"id": "p1", "question": "Which?", "options": [f"opt{k}" for k in range(10)], "answer": "C"}]
    d1 = cond.condition_items("D1", pro)[0]
    assert d1.quoted == "Which?\n" + "\n".join(f"{chr(65 + k)}: opt{k}" for k in range(10)) + "\nAnswer with exactly one of: A, B, C, D, E, F, G, H, I, J."
    assert d1.letters == tuple("ABCDEFGHIJ")
    for name in cond.CONDITIONS:  # every condition renders through the model's own template
        it = cond.condition_items(name, recs, notes=["n", "n"])[0]
        assert render(model, make_variant(it, "original")).endswith(model.render_chat([{"role": "user", "content": "x"}]).text[-10:])


def test_answer_letter_rule_and_letter_pull():
    """Paper: App. I, the answer-letter rule: whitespace and a word-boundary marker stripped, one of
    the item's own letters; Llama-3-8B-Instruct's article "A" (A clever / A classic / A nice) is
    prose, not a letter; letter pull is a letter on at least half the items (Table 15)."""
    assert cond.is_answer_letter("\u0120B") and cond.is_answer_letter("\u2581C") and cond.is_answer_letter(" D")
    assert not cond.is_answer_letter("A", continuation="A clever question! The note") and cond.is_answer_letter("A", continuation="A: her English")
    assert not cond.is_answer_letter("A", continuation=" A nice") and not cond.is_answer_letter("E") and cond.is_answer_letter("E", tuple("ABCDEFGHIJ"))
    letters = [cond.LETTERS_AD] * 64
    assert cond.letter_pull(["B"] * 32 + ["Answer"] * 32, letters, [None] * 64)
    assert not cond.letter_pull(["B"] * 31 + ["Answer"] * 33, letters, [None] * 64)
    assert not cond.letter_pull(["A"] * 64, letters, ["A classic tale"] * 64)


def test_composed_interventions_of_c1_and_c2(model):
    """Paper: App. C.1, three prompt forms (production, fenced, stemmed) x three endings (the letter
    instruction, deleted, "Summarise in one sentence."); App. C.2, deletion and substitution at the
    space-appended ending."""
    item = cond.fixed_note_items(_race(1))[0]
    grid = comp.composed_grid(item)
    assert [g.variant for g in grid] == [f"{f}\u00d7{e}" for f in comp.FORMS for e in comp.ENDINGS]
    by = {g.variant: g for g in grid}
    assert by["production\u00d7instruction"].messages == item.messages and by["production\u00d7instruction"].prefill is None
    for f in comp.FORMS:
        dele = by[f"{f}\u00d7deleted"].messages[0]["content"]
        summ = by[f"{f}\u00d7summarise"].messages[0]["content"]
        assert item.quoted_instruction not in dele and "\n\n\n" not in dele
        assert item.quoted_instruction not in summ and "Summarise in one sentence." in summ
        assert (FENCE_BEGIN in dele) == (f == "fenced") and (by[f"{f}\u00d7instruction"].prefill == FORECAST_STEM) == (f == "stemmed")
    ctx = [render(model, g) for g in grid]
    assert len(set(ctx)) == 9 and ctx[6].endswith(FORECAST_STEM)
    for ending in comp.SPACE_ENDINGS:
        sp = comp.space_appended(item, ending)
        base = make_variant(item, "deleted_instruction" if ending == "deleted" else ending)
        assert sp.append == " " and sp.messages == base.messages and sp.variant == f"space+{ending}"
        assert render(model, sp) == render(model, base) + " "
    assert isinstance(comp.space_appended(item, "fenced"), Skipped)


def test_appendix_d_prediction_rules():
    """Paper: App. D, the opening-word rule (the argmax is the substitute's own opening word) and the
    token-class rule (letter for the item's instruction, digit for the empty and numeric endings,
    prose for the other four; holds on more than half the items)."""
    assert token_rules.opening_word_match("\u0120List", "keywords") and token_rules.opening_word_match("Translate", "french")
    assert not token_rules.opening_word_match("Keywords", "keywords") and not token_rules.opening_word_match("", "empty")
    assert token_rules.opening_word_rate(["Count", "3", "Count", "The"], "count") == 0.5
    assert [token_rules.token_class(t) for t in ("\u0120B", "7", "\u010a", "Note", ",")] == ["answer_letter", "digit", "whitespace", "prose", "prose"]
    assert set(token_rules.PREDICTED_CLASS) == {"instruction", *SUBSTITUTES}
    assert token_rules.token_class_check(["7", "3", "B"], "integer") and not token_rules.token_class_check(["7", "B"], "empty")
    assert token_rules.token_class_check(["Note", "Keywords", "1"], "keywords") and token_rules.token_class_check(["A", "B", "x"], "instruction")


def test_judge_continuations_and_bare_number_rule():
    """Paper: App. D / §4, the judge reads 64-token greedy continuations, and a continuation that is
    only a number counts as a forecast whatever its label."""
    assert judge.JUDGE_CONTINUATION_TOKENS == 64
    assert judge.is_bare_number(" 70\n") and judge.is_bare_number("3.5") and not judge.is_bare_number("70 readers") and not judge.is_bare_number("")
    assert judge.counted_class("instruction", "42") == "forecast" and judge.counted_class("instruction", "Le texte") == "instruction"
    assert judge.execution_rate(["instruction", "instruction", "item", "instruction"], ["Voici", "12", "B", "Le"]) == 0.5


def test_reader_scored_by_its_generated_letter(model):
    """Paper: App. C.7, the note-only reader's greedy continuation of at most 16 tokens, read as its
    first standalone letter; no letter, no answer."""
    assert reader.generated_letter("The answer is B: it is easy") == "B" and reader.generated_letter("Bropical") is None
    assert reader.READER_GENERATED_TOKENS == 16
    assert [reader.letter_correct(x, g) for x, g in zip(["B", None, "C"], ["B", "A", "A"])] == [True, None, False]
    ctx = [model.render_chat([{"role": "user", "content": cond.fixed_note_items(_race(2))[k].quoted}]).ids for k in range(2)]
    got = reader.reader_generated_letters(model, ctx)
    want = [reader.generated_letter(model.decode(c.token_ids)) for c in model.generate_until(ctx, 16)]
    assert got == want and all(x is None or x in "ABCD" for x in got)
    assert np.all([len(c.token_ids) <= 16 for c in model.generate_until(ctx, 16)])
