"""The forecast pipeline against Appendix H of the paper (issue #19, item 3): what is built here.

The paper's own text is not available here; docs/readout.md ("Paper fidelity") lists what is not built.
"""

from __future__ import annotations

import inspect
import json

import pytest

from sleight.errors import UserError
from sleight.readout.audit.run import load_audit
from sleight.readout.audit.variants import make_variant


def test_user_stem_wins_over_the_preset_stem():
    """Paper: Appendix H, ``audit --preset forecast --stem`` honoured (issue #19 item 3): the
    user's stem is the one every item's stem variant reads, never silently replaced by the preset's."""
    items, config, _ = load_audit(preset="forecast", limit=2, stem="Forecast: ")
    assert config.stem == "Forecast: " and {i.stem for i in items} == {"Forecast: "}
    spec = make_variant(items[0], "stem", config.stem)
    assert spec.prefill == "Forecast: "
    items, config, _ = load_audit(preset="forecast", limit=2)
    assert {i.stem for i in items} == {config.stem} and config.stem == "Out of 100 such readers, about "


def test_user_stem_refused_when_items_carry_their_own(tmp_path):
    """Paper: Appendix H, ``--stem`` honoured or refused in one line, never silently overridden
    (issue #19 item 3): items with their own stem and a run stem are refused."""
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "Pick.", "options": ["1", "2"], "stem": "Number: "}) + "\n")
    with pytest.raises(UserError, match=r"--stem given but 1 item\(s\) carry their own 'stem' \(first: a\)"):
        load_audit(items=path, stem="Forecast: ")
    items, config, _ = load_audit(items=path)
    assert items[0].stem == "Number: " and config.stem is None


# ---------------------------------------------------------------------------------------------
# Appendix H's prompt and readouts, Table 4's reader
# ---------------------------------------------------------------------------------------------


def _race(limit: int = 2):
    from sleight.readout.forecast.pipeline import DEFAULT_ITEMS, load_race_items

    return load_race_items(DEFAULT_ITEMS, limit=limit)


def test_choices_printed_with_a_colon():
    """Paper: Appendix H prints the quoted item's choices ``A: <choice>`` (issue #19 item 3: not
    ``A. <choice>``): in the forecast prompt, the reader's prompt and the audit's forecast preset."""
    from sleight.readout.audit.presets import choices_block, forecast_prompt, preset_items
    from sleight.readout.forecast.pipeline import reader_prompt

    it = _race(1)[0]
    want = "\n".join(f"{x}: {c}" for x, c in zip("ABCD", it.choices))
    assert choices_block(it.choices) == want
    prompt, quoted, block = forecast_prompt("a note", it.question, it.choices)
    assert block == want and f"{it.question}\n{want}\n" in quoted and quoted in prompt
    assert want in reader_prompt("a note", it)
    for text in (prompt, reader_prompt("a note", it)):
        assert not any(f"\n{x}. " in text for x in "ABCD")
    item = preset_items("forecast", limit=1)[0]
    assert item.choices_block == want and want in item.messages[0]["content"]


def test_readout_f_decodes_48_tokens():
    """Paper: Appendix H, readout (f) is read from 48 greedy tokens (issue #19 item 3: was 16): the
    pipeline's default, ``readout forecast``'s default and the library config's."""
    from sleight.cli.main import build_parser
    from sleight.readout.downstream_run import ForecastConfig
    from sleight.readout.forecast import pipeline as fp

    assert fp.CONTINUATION_TOKENS == 48
    assert inspect.signature(fp.run_forecast).parameters["continuation_tokens"].default == 48
    assert ForecastConfig().continuation_tokens == 48
    assert build_parser().parse_args(["readout", "forecast"]).continuation_tokens == 48
    assert build_parser().parse_args(["readout", "ptrue"]).continuation_tokens == 16  # P(True) keeps its own


def test_spaced_reader_is_the_target_in_the_summary():
    """Paper: Table 4 reads the spaced letters ``" A"``..``" D"`` (issue #19 item 3): the summary
    names the target reader and its accuracy is the spaced one; readings from before the setting
    (no ``reader_target`` column) were the unspaced reader's."""
    from sleight.readout.forecast.pipeline import summarise

    rows = []
    for k, (uns, sp, gold) in enumerate((("A", "B", "B"), ("C", "C", "C"), ("D", "A", "D"), ("A", "B", "A"))):
        for pos, score in (("original", 0.1 * k), ("stem", 0.2 + 0.1 * k)):
            rows.append({
                "item_id": f"i{k}", "cluster": k, "position": pos, "gold": gold, "reader_choice": uns, "reader_choice_spaced": sp,
                "reader_agree": uns == sp, "correct": sp == gold, "correct_spaced": sp == gold, "reader_target": "spaced",
                "reader_mass": 0.5, "reader_mass_spaced": 0.5, "note": "a note", "note_ok": True, "note_attempts": 1, "score": score,
                "option_mass": 0.5, "first_tokens_distinct": True, "argmax_class": "x", "argmax_token": "x", "continuation_class": "x",
            })
    s = summarise(rows, B=20).reader
    assert s.target == "spaced"
    assert s.accuracy_target == s.accuracy_spaced == 0.5 and s.accuracy == 0.75  # spaced: B=B, C=C, A!=D, B!=A
    assert [r["correct"] for r in rows[::2]] == [True, True, False, False]
    old = [{k: v for k, v in r.items() if k != "reader_target"} | {"correct": r["reader_choice"] == r["gold"]} for r in rows]
    s = summarise(old, B=20).reader
    assert s.target == "unspaced" and s.accuracy_target == s.accuracy == 0.75


@pytest.mark.slow
def test_spaced_reader_is_the_target_on_the_model(model):
    """Paper: Table 4 reads the spaced letters (issue #19 item 3): ``correct`` is the spaced
    reader's correctness, the pick with the highest full-sequence log-probability of ``" A"``..``" D"``
    recomputed here from the model's forward pass; ``reader="unspaced"`` keeps the old target; App. C.7's
    generated letter is the first standalone letter of the reader's 16 greedy tokens, on either."""
    import numpy as np

    from sleight.position import encode_continuation
    from sleight.readout.forecast.pipeline import read_notes, reader_prompt
    from sleight.readout.ptrue.answers import first_standalone_letter

    items = _race(2)
    notes = [f"The passage says the answer is {it.answer}." for it in items]
    spaced = read_notes(model, items, notes)
    unspaced = read_notes(model, items, notes, reader="unspaced")
    for it, n, sp, un in zip(items, notes, spaced, unspaced):
        ctx = model.render_chat([{"role": "user", "content": reader_prompt(n, it)}])
        lps = [float(np.sum(a)) for a in model.continuation_logprobs(ctx.ids, [encode_continuation(model, ctx.text, f" {x}") for x in "ABCD"])]
        assert sp["reader_choice_spaced"] == "ABCD"[int(np.argmax(lps))]
        assert sp["correct"] == (sp["reader_choice_spaced"] == it.answer) == sp["correct_spaced"] and sp["reader_target"] == "spaced"
        assert un["correct"] == (un["reader_choice"] == it.answer) and un["reader_target"] == "unspaced"
        # App. C.7's third reading: the first standalone letter of the reader's 16 greedy tokens, decoded here
        text = model.decode([t for t in model.greedy([ctx.ids], 16)[0].token_ids if t not in model.eos_ids])
        letter = first_standalone_letter(text, ("A", "B", "C", "D"))
        assert sp["reader_generated"] == un["reader_generated"] == letter
        assert sp["correct_generated"] == (None if letter is None else letter == it.answer)
    with pytest.raises(UserError, match="unknown reader 'both'"):
        read_notes(model, items, notes, reader="both")


@pytest.mark.slow
def test_short_stems_are_readouts(model):
    """Paper: Appendix H's short stems ``"Number: "`` and ``"Forecast: "`` are readouts (g) and (h)
    beside (a)-(f) (issue #19 item 3): each is the forecast prompt rendered with the generation
    prompt, the stem appended as text, renormalised over 10..90, recomputed here by hand."""
    import numpy as np

    from sleight.position import encode_continuation
    from sleight.readout.audit.presets import FORECAST_OPTIONS, forecast_prompt
    from sleight.readout.forecast.pipeline import run_forecast
    from sleight.readout.forecast.readouts import READOUTS, SHORT_STEMS, extra_readouts
    from tolerances import MASS_ATOL

    assert SHORT_STEMS == {"stem_number": "Number: ", "stem_forecast": "Forecast: "} and set(SHORT_STEMS) <= set(READOUTS)
    items = _race(1)
    rows = run_forecast(model, items, note_max_new_tokens=12, continuation_tokens=2)
    (rec,) = extra_readouts(model, items, rows)
    prompt = forecast_prompt(rows[0]["note"], items[0].question, items[0].choices)[0]
    for key, stem in SHORT_STEMS.items():
        rendered = model.render_chat([{"role": "user", "content": prompt}], prefill=stem)
        text, ids = rendered.text, rendered.ids
        assert text == model.render_chat([{"role": "user", "content": prompt}]).text + stem  # the generation prompt, then the stem as text
        lps = np.array([float(np.sum(a)) for a in model.continuation_logprobs(ids, [encode_continuation(model, text, o) for o in FORECAST_OPTIONS])])
        p = np.exp(lps - lps.max())
        want = float(sum(int(o) / 100 * q for o, q in zip(FORECAST_OPTIONS, p / p.sum())))
        assert rec[key] == pytest.approx(want, abs=MASS_ATOL), key


class _Recording:
    """The real model, with each ``generate_until`` call's prompts, budget and outputs kept."""

    def __init__(self, model):
        self._m, self.calls = model, []

    def __getattr__(self, name):
        return getattr(self._m, name)

    def generate_until(self, prompts, max_tokens, **kw):
        outs = self._m.generate_until(prompts, max_tokens, **kw)
        self.calls.append(([list(p) for p in prompts], max_tokens, outs))
        return outs


def _writer_calls(rec):
    return [c for c in rec.calls if "Source text: " in rec.decode(c[0][0])]


@pytest.mark.slow
def test_downstream_notes_are_written_by_app_hs_writer(model):
    """Paper: App. H, "Writer and reader" (and §6, "The forecast that is evaluated downstream"):
    Table 4's notes -- the run Tables 12 and 13, App. C.7's unspaced reader and App. H's readouts
    read -- come from App. H's writer: its printed prompt (the passage without its question), greedy
    within 256 new tokens, a note kept only when it ends at end-of-sequence with 1 to 32 words, an
    unfinished or over-budget attempt retried up to four times at floor(32 / (r + 1)) words (issue 34
    item 1). The forecast pipeline has no writer of its own; on the bundled model its notes are the
    writer's greedy outputs, and a cap no attempt can finish in leaves five attempts and no note."""
    from sleight.readout.audit import notes
    from sleight.readout.downstream_run import ForecastConfig
    from sleight.readout.forecast import pipeline as fp
    from sleight.readout.reproduce import load_table

    assert fp.write_notes is notes.write_notes and not hasattr(fp, "NOTE_PROMPT") and not hasattr(fp, "truncate_words")
    assert inspect.signature(fp.run_forecast).parameters["note_max_new_tokens"].default == notes.NOTE_MAX_NEW_TOKENS == 256
    assert inspect.signature(fp.run_forecast).parameters["max_words"].default == notes.NOTE_WORDS == 32
    assert (ForecastConfig().note_tokens, ForecastConfig().note_words) == (256, 32)
    assert ForecastConfig()._fixed() == {"note_writer": "App. H", "note_retries": 4}
    for name in ("table4", "table12", "table13", "appendix-c7", "appendix-h"):
        (run,) = load_table(name).runs.values()
        assert run.command in ("forecast", "forecast-readouts")  # both write their notes through run_forecast
        assert (run.settings["note_words"], run.settings["note_tokens"]) == (32, 256), name

    items = _race(1)
    rec = _Recording(model)
    (orig, stem) = fp.run_forecast(rec, items, continuation_tokens=2)
    calls = _writer_calls(rec)
    assert [len(c[0]) for c in calls] in ([1], [1, 4])  # the first attempt, then the four retries together
    attempts = [(p, c[1], o) for c in calls for p, o in zip(c[0], c[2])]
    for r, (prompt, cap, _out) in enumerate(attempts):
        want = model.render_chat([{"role": "user", "content": notes.writer_prompt(items[0].passage, r)}]).ids
        assert prompt == list(want) and cap == 256
    assert 1 <= orig["note_attempts"] <= len(attempts)
    last = attempts[orig["note_attempts"] - 1][2]  # the kept attempt, or the last one
    assert orig["note_raw"] == model.decode(last.token_ids).strip() and orig["note_tokens"] == len(last.token_ids)
    assert orig["note_finish"] == last.finish_reason
    earlier = attempts[: orig["note_attempts"] - 1]
    assert all(not notes.note_ok(model.decode(o.token_ids).strip(), o.finish_reason) for _p, _c, o in earlier)
    if orig["note_ok"]:
        assert orig["note"] == orig["note_raw"] and orig["note_finish"] == "stop" and 1 <= len(orig["note"].split()) <= 32
        assert notes.note_ok(orig["note"], orig["note_finish"])
    else:
        assert orig["note"] == "" and orig["note_attempts"] == len(attempts) == 5
    for row in (orig, stem):
        assert (row["note"], row["note_ok"], row["note_attempts"]) == (orig["note"], orig["note_ok"], orig["note_attempts"])

    rec = _Recording(model)
    (short, _) = fp.run_forecast(rec, items, note_max_new_tokens=3, continuation_tokens=2)
    calls = _writer_calls(rec)
    asked = [rec.decode(p) for c in calls for p in c[0]]
    assert [len(c[0]) for c in calls] == [1, 4] and [c[1] for c in calls] == [3, 3]
    assert [int(a.split("Budget: at most ")[1].split()[0]) for a in asked] == [32, 16, 10, 8, 6]
    assert all("one compact phrase" in a for a in asked[1:]) and "one compact phrase" not in asked[0]
    assert (short["note"], short["note_ok"], short["note_attempts"], short["note_finish"], short["note_tokens"]) == ("", False, 5, "length", 3)
