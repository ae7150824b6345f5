"""The audit's composed interventions, App. D's two prediction rules and the judge's records, wired into
``sleight readout reproduce`` (issue #27 item 3): ``appendix-c1``, ``appendix-c2``, ``appendix-d`` and
``table5`` on the bundled model, each reproduced cell recomputed here by hand from the run's own
readings."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from importlib import resources
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from conftest import AUDIT_ITEMS as N_ITEMS  # items per run in the end-to-end fixture (the paper: 64, the judge's 32)
from conftest import AUDIT_TABLES as TABLES
from sleight.readout.audit import composed as comp
from sleight.readout.audit import conditions as cond
from sleight.readout.audit import judge, token_rules
from sleight.readout.audit.measure import DERIVED, derived_columns, measure, opens_with
from sleight.readout.audit.presets import FORECAST_QUESTION, FORECAST_STEM
from sleight.readout.audit.variants import (
    COMPOSED,
    ENDINGS,
    FORMS,
    SEPARATOR,
    SPACE_APPENDED,
    SUBSTITUTES,
    Skipped,
    make_variant,
    parse_variants,
    render,
)
from sleight.readout.reproduce import kinds, load_table
from tolerances import FLOAT64_RTOL


def _race(n: int = 2) -> list[dict]:
    text = resources.files("sleight").joinpath("data/fixtures/race_items.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()][:n]


@pytest.fixture(scope="module")
def item():
    """Table 3's first fixed-note item (App. I's C0): the items every one of these tables reads."""
    return cond.fixed_note_items(_race(1))[0]


@pytest.fixture(scope="module")
def tables(audit_tables):
    """The four tables reproduced for the bundled model on the shipped fixtures (conftest's
    ``audit_tables``, which tests/test_reproduce.py's end-to-end test reads too)."""
    return audit_tables


def _cells(results, name):
    return {k: c.estimate for k, c in results[name].table.rows[0].cells.items()}


def _readings(out, table, run):
    return pq.read_table(out / table / "smollm2-135m-instruct" / run / "readings.parquet").to_pylist()


def _by_variant(rows):
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["variant"], []).append(r)
    return out


# ------------------------------------------------------------------------------------------------
# the configs
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TABLES)
def test_the_four_configs_run_and_cite_their_section(name):
    """App. C.1, C.2, D and Table 5 (App. C.2): runnable configs (no ``pending:``), each run an audit of
    Table 3's fixed-note items (App. I's C0), every column measured or a printed cell of a hosted judge."""
    config = load_table(name)
    assert config.runnable and not config.pending
    assert "App. C" in config.section or "App. D" in config.section
    for spec in config.runs.values():
        assert spec.command == "audit" and spec.settings["condition"] == "C0" and spec.settings["preset"] == "forecast"
    hosted = [c.key for c in config.columns if not c.run]
    assert all(k.endswith(("_exec", "item_answers", "forecasts_deleted")) for k in hosted)  # App. D's Grok columns only
    if name == "appendix-d":
        assert config.runs["judge"].settings["max_new_tokens"] == judge.JUDGE_CONTINUATION_TOKENS == 64
        assert config.runs["judge"].items == 32 and config.runs["rules"].items == 64
        assert any("cannot run offline" in n for n in config.notes)


def test_the_named_sets_are_planned_and_checked_by_their_members():
    """The audit kind counts a named set of variants by its members (the plan), and refuses an unknown name in one line."""
    audit = kinds.kind("audit")
    assert audit.per_item({"variants": ["composed"], "max_new_tokens": 16}) == (9, 9 * 16)
    assert audit.per_item({"variants": ["separator"], "max_new_tokens": 64}) == (8, 8 * 64)  # the original ending is always read
    assert audit.check({"preset": "forecast", "variants": ["composed", "nope"]}) is not None
    assert audit.check({"preset": "forecast", "variants": ["deleted_instruction", "space-appended"]}) is None
    assert set(DERIVED) <= set(audit.columns())


# ------------------------------------------------------------------------------------------------
# App. C.1: the composed grid
# ------------------------------------------------------------------------------------------------


def test_c1_grid_is_the_nine_combinations_rendered_as_composed(model, item):
    """Paper: App. C.1, three prompts (production, fenced, production with the answer stem) x three
    quoted-item endings (the letter instruction, its deletion, "Summarise in one sentence."); the cells
    that are plain variants go by their names, each rendered exactly as the composition renders it."""
    assert parse_variants("composed") == COMPOSED
    assert COMPOSED[:3] == ("original", "deleted_instruction", "substituted:summarise") and COMPOSED[3] == "fenced" and COMPOSED[6] == "stem"
    assert [comp.variant_cell(v) for v in COMPOSED] == [(f, e) for f in FORMS for e in ENDINGS]
    assert parse_variants("production\u00d7instruction,stemmed\u00d7instruction,fenced\u00d7deleted") == ("original", "stem", "fenced\u00d7deleted")
    for name, spec in zip(COMPOSED, comp.composed_grid(item)):
        assert render(model, make_variant(item, name)) == render(model, spec)
    assert render(model, make_variant(item, "stemmed\u00d7summarise")).endswith(FORECAST_STEM)


@pytest.mark.slow
def test_c1_cells_are_the_grids_readings(tables):
    """Paper: App. C.1, distinct first tokens per combination (on every item), isolated and in-context
    masses equal bitwise, the mass/argmax disagreement on Table 3's two prompts, falcon's stemmed argmax."""
    results, out = tables
    rows = _readings(out, "appendix-c1", "grid")
    by = _by_variant(rows)
    assert list(by) == list(COMPOSED) and all(len(v) == N_ITEMS for v in by.values())
    distinct = {v: all(r["first_tokens_distinct"] is True for r in rs) for v, rs in by.items()}
    equal = {v: all(r["option_mass"] is not None and r["option_mass"] == r["option_mass_isolated"] for r in rs) for v, rs in by.items()}

    def disagree(v):
        return sum((r["option_mass"] >= 0.5) != (r["argmax_class"] == "option") for r in by[v] if r["option_mass"] is not None)

    got = _cells(results, "appendix-c1")
    assert got["distinct_unstemmed"] == sum(distinct[v] for v in COMPOSED if comp.variant_cell(v)[0] != "stemmed")
    assert got["distinct_stemmed"] == sum(distinct[v] for v in COMPOSED if comp.variant_cell(v)[0] == "stemmed")
    assert got["isolated_equal"] == sum(equal.values())
    assert (got["disagree_production"], got["disagree_stemmed"]) == (disagree("original"), disagree("stem"))
    assert got["stem_argmax_90"] == sum(token_rules.bare_token(r["argmax_token"]) == "90" for r in by["stem"])
    assert got["stem_win_median"] == pytest.approx(statistics.median(r["argmax_prob"] for r in by["stem"]), rel=FLOAT64_RTOL)
    assert got["stem_win_min"] == min(r["argmax_prob"] for r in by["stem"])


def test_c1_mass_and_argmax_disagree_as_defined():
    """Paper: App. C.1, the options' mass (at or above §3's floor 0.5) and the argmax check (an option's
    first token at the argmax) disagree: an option argmax under half the mass, or a letter above it."""
    base = {"item_id": "a", "variant": "original", "skipped": False, "argmax_token": "A", "continuation": "A", "continuation_class": "answers_item"}
    rows = [
        {**base, "option_mass": 0.4, "argmax_class": "option"},
        {**base, "item_id": "b", "option_mass": 0.6, "argmax_class": "answer_letter"},
        {**base, "item_id": "c", "option_mass": 0.6, "argmax_class": "option"},
        {**base, "item_id": "d", "option_mass": 0.1, "argmax_class": "answer_letter"},
        {**base, "item_id": "e", "option_mass": None, "argmax_class": "option"},
    ]
    assert [r["mass_argmax_disagree"] for r in derived_columns(rows)] == [True, True, False, False, None]


# ------------------------------------------------------------------------------------------------
# App. C.2: the space-appended ending
# ------------------------------------------------------------------------------------------------


def test_c2_space_appended_ending_is_the_variant_plus_one_space(model, item):
    """Paper: App. C.2, deletion and substitution at the space-appended ending: the deleted or substituted
    instruction as the original ending renders it, then one space (``space`` keeps the instruction)."""
    assert parse_variants("space-appended") == ("original", *SPACE_APPENDED) and len(SPACE_APPENDED) == 8
    for name in SPACE_APPENDED:
        rest = name.partition("+")[2]
        plain = "original" if name == "space" else ("deleted_instruction" if rest == "deleted" else rest)
        assert render(model, make_variant(item, name)) == render(model, make_variant(item, plain)) + " "
        assert comp.variant_cell(name) == ("space", comp.variant_cell(plain)[1])
    assert isinstance(make_variant(item, "space+fenced"), Skipped)


@pytest.mark.slow
def test_c2_cells_are_the_controls_readings(tables):
    """Paper: App. C.2, the letter rate at the original ending, deleted and with the space appended; the
    space-appended argmax (digits, grid first tokens); App. D's token-class checks at that ending."""
    results, out = tables
    by = _by_variant(_readings(out, "appendix-c2", "controls"))
    assert set(by) == {"original", "deleted_instruction", *SPACE_APPENDED}
    assert all(r["context"].endswith(" ") for v in SPACE_APPENDED for r in by[v])

    def letters(v):  # App. I's letter count: whitespace and a leading word-boundary marker stripped
        return sum(token_rules.token_class(r["argmax_token"]) == "answer_letter" for r in by[v]) / len(by[v])

    got = _cells(results, "appendix-c2")
    assert (got["letter"], got["letter_deleted"], got["letter_space"]) == (letters("original"), letters("deleted_instruction"), letters("space"))
    assert got["digit_space"] == sum(token_rules.token_class(r["argmax_token"]) == "digit" for r in by["space"])
    assert got["grid_space"] == sum(r["argmax_class"] == "option" for r in by["space"])
    # App. C.2's histogram of Mistral's argmax classes as counts: 30 letters and 4 prose words at the original ending,
    # one letter deleted and one with the separator supplied
    def count(v, cls):
        return sum(token_rules.token_class(r["argmax_token"]) == cls for r in by[v])

    assert (got["letters"], got["prose"], got["letters_deleted"], got["letters_space"]) == (
        count("original", "answer_letter"), count("original", "prose"), count("deleted_instruction", "answer_letter"), count("space", "answer_letter"))
    from sleight.readout.reproduce import load_table

    mistral = load_table("appendix-c2").paper["mistral-7b"]
    assert (mistral["letters"], mistral["whitespace"], mistral["prose"]) == (30, 30, 4) and round(mistral["letters"] / 64, 3) == mistral["letter"]
    assert (mistral["letters_deleted"], mistral["whitespace_deleted"], mistral["letters_space"], mistral["digit_space"]) == (1, 63, 1, 63)
    endings = {"space": "instruction", **{f"space+substituted:{k}": k for k in SUBSTITUTES}}
    fails = sum(not token_rules.token_class_check([r["argmax_token"] for r in by[v]], e) for v, e in endings.items())
    assert got["class_failures_space"] == fails


# ------------------------------------------------------------------------------------------------
# App. D: the separator the template omits, the two prediction rules, the judge's records
# ------------------------------------------------------------------------------------------------


class _Template:
    """A chat template that ends its rendering with ``end`` (Mistral's "[/INST]", a Qwen3 newline)."""

    def __init__(self, end: str) -> None:
        self.end = end

    def render_chat(self, messages, add_generation_prompt=True, prefill=None):
        return SimpleNamespace(text="<s>[INST] " + messages[-1]["content"] + self.end + (prefill or ""))


def test_separator_is_supplied_only_where_the_template_omits_it(model, item):
    """Paper: App. D / C.2, the token-class readings and the judge's rows use the original ending on the
    five checkpoints whose templates end in whitespace and one appended space on Mistral and falcon,
    whose templates omit the separator."""
    assert parse_variants("separator") == ("original", *SEPARATOR) and len(SEPARATOR) == 7
    for name in SEPARATOR:
        plain = name.partition("+")[2]
        assert render(model, make_variant(item, name)) == render(model, make_variant(item, plain))  # SmolLM2's ends in "\n"
        assert render(_Template(" [/INST]"), make_variant(item, name)) == render(_Template(" [/INST]"), make_variant(item, plain)) + " "
        assert render(_Template("\n"), make_variant(item, name)) == render(_Template("\n"), make_variant(item, plain))
    assert isinstance(comp.separator_supplied(item, "fenced"), Skipped)
    # on the real model: a rendering without a template ends with the forecast question, no separator
    bare = replace(item, chat_template=False)
    rows = derived_columns(measure(model, [bare], ["original", "separator+original"], max_new_tokens=2))
    assert rows[0]["context"].endswith(FORECAST_QUESTION) and not rows[0]["ends_with_whitespace"]
    assert rows[1]["context"] == rows[0]["context"] + " " and rows[1]["ends_with_whitespace"] and rows[1]["form"] == "separator"


def test_appendix_d_rules_on_the_readings(model, item):
    """Paper: App. D's two token-level rules on the unrestricted argmax of each ending: the opening-word
    rule (the substitute's own opening word) and the token-class rule (letter / digit / prose, holding on
    more than half the items), read on the bundled model's readings."""
    items = cond.fixed_note_items(_race(2))
    rows = derived_columns(measure(model, items, parse_variants("separator"), max_new_tokens=2))
    by = _by_variant(rows)
    for name in SEPARATOR:
        key = "instruction" if name == "separator+original" else name.split(":", 1)[1]
        tokens = [r["argmax_token"] for r in by[name]]
        for r in by[name]:
            assert r["ending"] == key and r["token_class"] == token_rules.token_class(r["argmax_token"])
            want = token_rules.opening_word_match(r["argmax_token"], key) if key not in ("instruction", "empty") else None
            assert r["opening_word"] == want
            assert r["variant_class_check"] == token_rules.token_class_check(tokens, key)
        assert [r["variant_row"] for r in by[name]] == [True, False]


@pytest.mark.slow
def test_appendix_d_cells_are_the_rules_readings(tables):
    """Paper: App. D, the letter rates with the instruction, the choices or both deleted (original ending),
    the median-mass factor, the failing token-class checks and the opening-word rates at App. D's ending."""
    results, out = tables
    by = _by_variant(_readings(out, "appendix-d", "rules"))
    got = _cells(results, "appendix-d")

    def share(v, cls="answer_letter"):
        return sum(r["argmax_class"] == cls for r in by[v]) / len(by[v])

    assert got["letter_deleted"] == share("deleted_instruction") and got["letter_no_choices"] == share("deleted_choices")
    assert got["letter_deleted_both"] == share("deleted_instruction_choices")
    factor = statistics.median(r["option_mass"] for r in by["deleted_instruction"]) / statistics.median(r["option_mass"] for r in by["original"])
    assert got["mass_factor_deleted"] == pytest.approx(factor, rel=FLOAT64_RTOL)
    fails = 0
    for name in SEPARATOR:
        key = "instruction" if name == "separator+original" else name.split(":", 1)[1]
        fails += not token_rules.token_class_check([r["argmax_token"] for r in by[name]], key)
    assert got["token_class_failures"] == fails
    for col, key in (("opening_word_list", "keywords"), ("opening_word_translate", "french"), ("opening_word_count", "count")):
        assert got[col] == token_rules.opening_word_rate([r["argmax_token"] for r in by[f"separator+substituted:{key}"]], key)
    assert [c.key for c in results["appendix-d"].table.columns if not c.run] == [
        "translate_exec", "list_exec", "summarise_exec", "count_exec", "item_answers", "forecasts_deleted"
    ]
    for key in ("translate_exec", "item_answers", "forecasts_deleted"):  # the hosted judges: the paper's cells, nothing measured
        assert got[key] != got[key]


@pytest.mark.slow
def test_judge_records_are_64_token_continuations_counted_by_the_bare_number_rule(model, tables):
    """Paper: App. D / §4, each rate uses 32 items and 64-token greedy continuations; a continuation that
    is only a number counts as a forecast whatever its label; the continuation begins with the argmax."""
    results, out = tables
    rows = _readings(out, "appendix-d", "judge")
    assert {r["variant"] for r in rows} == {"original", *SEPARATOR}
    first = rows[0]
    ids = model.encode(first["context"])
    want = model.decode(model.greedy([ids], judge.JUDGE_CONTINUATION_TOKENS, top_k=1)[0].token_ids)
    assert first["continuation"] == want  # the greedy continuation at the judge's 64-token budget
    manifest = json.loads((out / "appendix-d" / "smollm2-135m-instruct" / "judge" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["config"]["max_new_tokens"] == judge.JUDGE_CONTINUATION_TOKENS and manifest["config"]["n_items"] == N_ITEMS
    derived = derived_columns(rows)
    for r in derived:
        rule = judge.RULE_TO_JURY.get(r["continuation_class"], "other")
        assert r["bare_number"] == judge.is_bare_number(r["continuation"])
        assert r["counted_class"] == ("forecast" if judge.is_bare_number(r["continuation"]) else rule)
        assert r["argmax_opens"] == opens_with(r["continuation"], r["argmax_token"])
    got = _cells(results, "appendix-d")
    sep = [r for r in derived if r["form"] == "separator"]
    assert got["argmax_opens"] == sum(r["argmax_opens"] for r in sep)
    deleted = [r for r in derived if r["variant"] == "separator+substituted:empty"]
    assert got["bare_numbers_deleted"] == sum(r["bare_number"] for r in deleted)
    assert got["rule_forecasts_deleted"] == sum(r["counted_class"] == "forecast" for r in deleted)
    assert got["rule_item_answers"] == sum(r["counted_class"] == "item" for r in derived if r["variant"] == "separator+original")


def test_bare_number_rule_and_argmax_opening_on_rows():
    """Paper: App. D, a bare number is a forecast whatever the label (here: whatever the rule class);
    the continuation "begins with the recorded argmax" read on the text."""
    base = {"item_id": "a", "variant": "separator+substituted:integer", "skipped": False, "option_mass": 0.9, "argmax_class": "option"}
    rows = derived_columns([
        {**base, "argmax_token": " 7", "continuation": " 70\n", "continuation_class": "prose"},
        {**base, "item_id": "b", "argmax_token": "7", "continuation": "70 readers", "continuation_class": "forecast"},
        {**base, "item_id": "c", "argmax_token": "Le", "continuation": "Le texte", "continuation_class": "prose"},
        {**base, "item_id": "d", "argmax_token": "\n", "continuation": "B: yes", "continuation_class": "answers_item"},
    ])
    assert [r["bare_number"] for r in rows] == [True, False, False, False]
    assert [r["counted_class"] for r in rows] == ["forecast", "forecast", "other", "item"]
    assert [r["argmax_opens"] for r in rows] == [True, True, True, False]
    assert rows[0]["variant_class_check"] is False  # 2 of 4 digits is not more than half (App. D)


def test_the_judge_labels_app_ds_records():
    """Paper: App. D, the judge labels the item's instruction intact and every substitute at App. D's
    ending (and C.2's space-appended deletions and substitutions), each with its own ballot."""
    assert judge.judged_variant("separator+original") and judge.judged_variant("separator+substituted:french")
    assert judge.judged_variant("space+deleted") and judge.judged_variant("space+substituted:count")
    assert not judge.judged_variant("space") and not judge.judged_variant("original") and not judge.judged_variant("fenced\u00d7deleted")
    assert judge.ballot_for("separator+substituted:french") is judge.SUBSTITUTED_BALLOT
    assert judge.ballot_for("separator+original") is judge.DELETED_BALLOT and judge.ballot_for("space+deleted") is judge.DELETED_BALLOT
    assert "Translate the passage into French." in judge.what_changed("separator+substituted:french")
    assert "intact" in judge.what_changed("separator+original") and judge.kind("separator+original") == "intact"


def test_mass_factor_is_the_ratio_of_the_medians():
    """Paper: App. D, deleting the imperative raises (or lowers) the median mass by a factor: the
    deleted ending's median over the original's, on the rows of the same prompt form."""
    def row(v, i, mass):
        return {"item_id": i, "variant": v, "skipped": False, "option_mass": mass, "argmax_token": "A", "argmax_class": "answer_letter", "continuation": "A"}

    rows = derived_columns([row("original", "a", 1e-6), row("original", "b", 3e-6), row("original", "c", 2e-6),
                            row("deleted_instruction", "a", 0.5), row("deleted_instruction", "b", 0.7), row("deleted_instruction", "c", 0.1)])
    assert [r["variant_mass_factor"] for r in rows[3:]] == [pytest.approx(0.5 / 2e-6, rel=FLOAT64_RTOL)] * 3
    assert [r["variant_mass_factor"] for r in rows[:3]] == [1.0] * 3


# ------------------------------------------------------------------------------------------------
# Table 5: the boundary exposure classes as readings
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_table5_reads_the_rendered_ending_and_the_first_tokens(tables):
    """Paper: Table 5 / App. C.2, the boundary rule's exposure classes require opposite values of whether
    the rendered context ends in whitespace; read per checkpoint with its first-token distinctness, at the
    original ending and with the answer stem (Table 3's run)."""
    results, out = tables
    by = _by_variant(_readings(out, "table5", "probe"))
    got = _cells(results, "table5")

    def share(v, f):
        return sum(bool(f(r)) for r in by[v]) / len(by[v])

    assert got["ends_newline"] == share("original", lambda r: r["context"].endswith("\n")) == 1.0  # SmolLM2's template: "assistant\n"
    assert got["ends_whitespace"] == share("original", lambda r: r["ends_with_whitespace"])
    assert got["distinct"] == share("original", lambda r: r["first_tokens_distinct"] is True)
    assert got["stem_whitespace"] == share("stem", lambda r: r["context"].endswith(" ")) == 1.0  # the stem ends in its space
    assert got["stem_distinct"] == share("stem", lambda r: r["first_tokens_distinct"] is True)
    config = load_table("table5")
    assert {k: v["ends_newline"] for k, v in config.paper.items()} == {
        "qwen3-4b": 1, "qwen3-8b": 1, "qwen3-14b": 1, "phi-3-mini": 1, "mistral-7b": 0, "falcon-7b": 0, "smollm2-1.7b": 1
    }
    rows = derived_columns([{"item_id": "a", "variant": "original", "context": "[INST] q [/INST]", "skipped": False}])
    assert rows[0]["ends_with_newline"] is False and rows[0]["form"] == "production"
