"""Issue 34, "every printed number as a cell": App. C.1, C.3, C.4, C.5 (Table 6) and D's numbers that sat only
in their configs' ``notes:`` are cells now, compared with what the configs' own runs measure.

Each config is checked as printed (its columns, ``paper:`` values, summaries and what is left in its
notes); the new cells are recomputed by hand, from synthetic readings through the aggregation (App.
C.1, App. D) and from a bundled-model run's ``readings.parquet`` (App. C.4, Table 6)."""

from __future__ import annotations

import statistics

import pyarrow.parquet as pq
import pytest

from sleight.readout.audit import token_rules
from sleight.readout.reproduce import load_table
from sleight.readout.reproduce.aggregate import aggregate
from tolerances import FLOAT64_RTOL, MASS_ATOL

N_ITEMS = 2  # items per run in the bundled-model reproductions (the paper: 64 and 16)


def _column(table, key):
    return next(c for c in table.columns if c.key == key)


def _spec(table, key):
    c = _column(table, key)
    return (c.run, dict(c.where), c.stat, c.column, c.equals)


def _cells(table, row):
    return {k: c.estimate for k, c in next(r for r in table.rows if r.name == row).cells.items()}


# ------------------------------------------------------------------------------------------------
# the configs as printed
# ------------------------------------------------------------------------------------------------


def test_appendix_c4_fenced_mass_range_is_two_cells():
    """App. C.4: "fencing gives 3.74×10^-3 and 21 of 64, with mass from 9.10×10^-9 to 0.99995": the
    fenced variant's per-item option mass, its minimum and maximum, on Qwen3-4B's 64 items."""
    t = load_table("appendix-c4")
    assert _spec(t, "fenced_min") == ("probe", {"variant": "fenced"}, "min", "option_mass", None)
    assert _spec(t, "fenced_max") == ("probe", {"variant": "fenced"}, "max", "option_mass", None)
    paper = t.paper["qwen3-4b"]
    assert (paper["fenced_min"], paper["fenced_mass"], paper["fenced_max"]) == (9.10e-9, 0.00374, 0.99995)
    assert paper["fenced_min"] < paper["fenced_mass"] < paper["fenced_max"]  # the median inside its range
    assert not any("9.10e-9" in n or "0.99995" in n for n in t.notes)


def test_appendix_c3_mass_extremes_are_two_cells():
    """App. C.3: "The median option mass is 1.42×10^-15; its extremes are 1.73×10^-19 and 4.64×10^-6" on
    Qwen3-4B's 120 probe rows: the original position's per-row option mass, its minimum and maximum."""
    t = load_table("appendix-c3")
    assert _spec(t, "mass_max") == ("probe", {"variant": "original"}, "max", "option_mass", None)
    paper = t.paper["qwen3-4b"]
    assert (paper["mass_min"], paper["mass"], paper["mass_max"]) == (1.73e-19, 1.42e-15, 4.64e-6)
    assert not any("4.64e-6" in n for n in t.notes)


def test_appendix_c3_counts_and_named_rows_are_cells():
    """App. C.3: the letter argmax "on 118 of these rows" (Figure 1: "58 of 60" with unrelated notes), and the
    two exceptions it names by passage file, high1845.txt ('None' at 0.868) and high14114.txt ('0' at
    0.99998), as cells, recomputed by hand through the readings' derived ``passage_file``. Nothing is
    left in the notes."""
    from sleight.readout.audit.measure import derived_columns

    t = load_table("appendix-c3")
    paper = t.paper["qwen3-4b"]
    assert (paper["letter_count"], paper["unrelated_letter_count"]) == (118, 58)
    assert round(paper["letter_count"] / paper["rows"], 5) == paper["letter"]  # the printed share, to its 5 digits
    assert (paper["high1845_none"], paper["high1845_prob"], paper["high14114_zero"], paper["high14114_prob"]) == (1.0, 0.868, 1.0, 0.99998)
    assert _spec(t, "high1845_prob") == ("probe", {"variant": "original", "passage_file": "high1845.txt"}, "median", "argmax_prob", None)
    assert not t.notes

    def row(item, token, prob, target):
        return {"item_id": item, "variant": "original", "argmax_token": token, "argmax_prob": prob, "argmax_class": "answer_letter" if token.strip() in "ABCD" else "prose", "target": target}

    rows = derived_columns([row("high1845.txt:2", "None", 0.868, 1.0), row("high14114.txt:0", "0", 0.99998, 0.0), row("high7.txt:1", " A", 0.9, 0.0), row("high8.txt:0", "B", 0.8, 1.0)])
    assert [r["passage_file"] for r in rows] == ["high1845.txt", "high14114.txt", "high7.txt", "high8.txt"]
    name = t.checkpoints[0].name
    got = _cells(aggregate(t, t.checkpoints[:1], {name: {"probe": rows}}), name)
    assert (got["letter_count"], got["unrelated_letter_count"]) == (2, 1)
    assert (got["high1845_none"], got["high1845_prob"], got["high14114_zero"], got["high14114_prob"]) == (1.0, 0.868, 1.0, 0.99998)
    absent = _cells(aggregate(t, t.checkpoints[:1], {name: {"probe": rows[2:]}}), name)  # data without the named items: no value, not 0
    assert all(absent[k] != absent[k] for k in ("high1845_none", "high1845_prob", "high14114_zero", "high14114_prob"))


def test_appendix_c1_falcons_winning_probability_range_is_three_cells():
    """App. C.1: "With the answer stem, falcon's argmax is '90' on 49 of 64 items and '10' on the other 15;
    its winning probabilities range from 0.1225 to 0.3147, with median 0.2133": the argmax token's own
    probability on the stemmed prompt (not renormalised: 0.1225 < 1/5, which the largest of five
    renormalised options cannot be; §5 sets the range beside "roughly 47% of mass off the grid"),
    printed for falcon only."""
    t = load_table("appendix-c1")
    for key, stat in (("stem_win_min", "min"), ("stem_win_median", "median"), ("stem_win_max", "max")):
        assert _spec(t, key) == ("grid", {"variant": "stem"}, stat, "argmax_prob", None)
        assert {row for row, cells in t.paper.items() if key in cells} == {"falcon-7b"}
    falcon = t.paper["falcon-7b"]
    assert (falcon["stem_win_min"], falcon["stem_win_median"], falcon["stem_win_max"]) == (0.1225, 0.2133, 0.3147)
    assert falcon["stem_win_min"] < 1 / 5 and falcon["stem_argmax_90"] + falcon["stem_argmax_10"] == 64
    assert "argmax_prob" in t.inferred and "not renormalised" in t.inferred
    assert not any("0.3147" in n or "0.1225" in n for n in t.notes)


def test_appendix_d_deletion_medians_and_the_letter_bound_are_cells():
    """App. D: "Deletion raises the median above the floor on four checkpoints: the three Qwen3 checkpoints
    and SmolLM2, which rises from 0.3895 to 0.58023; falcon begins at 1.05×10^-4"; "With the instruction
    already deleted, Phi-3 reads 0.500 with the choices and 0.000 without them; the other six read at most
    0.016 either way". The medians with the instruction are the rules run's original ending; the bound is a
    summary (the highest letter rate with both deleted, marked inferred); Grok's bounds stay a note."""
    t = load_table("appendix-d")
    assert _spec(t, "mass_original") == ("rules", {"variant": "original"}, "median", "option_mass", None)
    assert {row: cells["mass_original"] for row, cells in t.paper.items() if "mass_original" in cells} == {"smollm2-1.7b": 0.3895, "falcon-7b": 1.05e-4}
    smol = t.paper["smollm2-1.7b"]
    assert round(smol["mass_deleted"] / smol["mass_original"], 2) == smol["mass_factor_deleted"] == 1.49  # the printed factor
    (s,) = t.summaries
    assert (s.key, s.columns, s.how, s.paper, s.average) == ("letter_deleted_both_highest", ("letter_deleted_both",), "max", 0.016, None)
    assert t.paper["phi-3-mini"]["letter_deleted_both"] == 0.0 < s.paper  # Phi-3's own cannot raise the highest
    six = [row for row in t.paper if row != "phi-3-mini"]
    assert max(t.paper[row]["letter_deleted"] for row in six) == 0.016  # with the choices kept: printed per checkpoint (§4)
    assert "at most 0.016" in t.inferred
    assert not any(x in n for n in t.notes for x in ("0.3895", "0.58023", "1.05e-4", "0.016"))
    assert any("0.3750" in n for n in t.notes)  # Grok's listing bound: the hosted judge is not measured here
    assert all(not _column(t, k).run for k in ("list_exec", "summarise_exec", "count_exec"))


def test_table6_phi3_minimum_hits_and_argmax_digits_are_cells():
    """App. C.5: on Phi-3's stemmed prompt "Eq. 2 on those same 16-item passes gives 0.9331, minimum 0.8977,
    and 16 of 16 hits. The argmax there is '7' in 9 items, '3' in 6 and '5' in 1"; Mistral's "Eq. 2 gives
    3.93×10^-6 with 0 of 16 hits on the original ending". App. A's 64-item reading ("0.0368 instead of
    0.9334 on the 64-item stemmed prompt") has a run of its own (stem64: the probe's settings on 64 items)
    and two cells, no note."""
    t = load_table("table6")
    assert _spec(t, "stem_in_context_min") == ("probe", {"variant": "stem"}, "min", "option_mass", None)
    assert _spec(t, "stem_hits") == ("probe", {"variant": "stem"}, "count", "argmax_class", "option")
    assert _spec(t, "hits") == ("probe", {"variant": "original"}, "count", "argmax_class", "option")
    for digit in ("7", "3", "5"):
        assert _spec(t, f"stem_argmax_{digit}") == ("probe", {"variant": "stem"}, "count", "argmax_bare", digit)
    phi = t.paper["phi-3-mini"]
    assert (phi["stem_in_context_min"], phi["stem_hits"], phi["stem_argmax_7"], phi["stem_argmax_3"], phi["stem_argmax_5"]) == (0.8977, 16, 9, 6, 1)
    assert phi["stem_argmax_7"] + phi["stem_argmax_3"] + phi["stem_argmax_5"] == phi["stem_hits"] == t.runs["probe"].items
    assert phi["stem_in_context_min"] < phi["stem_in_context"]
    assert t.paper["mistral-7b"]["hits"] == 0
    # App. C.5: "the divergent companion 0.0392 with 0 of 16 argmax hits", counted at the divergent position
    assert _spec(t, "stem_divergent_hits") == ("probe", {"variant": "stem"}, "count", "divergent_argmax_hit", True)
    assert (phi["stem_divergent"], phi["stem_divergent_hits"]) == (0.0392, 0)
    assert not t.notes  # every printed count of C.5 is a cell
    assert "hit" in t.inferred
    assert not any("0.8977" in n for n in t.notes)
    assert not any("0.0368" in n for n in t.notes) and t.runs["probe"].items == 16
    stem64 = t.runs["stem64"]
    assert (stem64.items, stem64.paper_data, stem64.settings) == (64, "race-h:hub:n=64", t.runs["probe"].settings)
    t3 = load_table("table3").runs["probe"]  # Table 3's own 64-item run, so reproducing both reads it once
    assert (t3.command, t3.items, t3.paper_data, t3.settings) == (stem64.command, stem64.items, stem64.paper_data, stem64.settings)
    assert _spec(t, "stem64_divergent") == ("stem64", {"variant": "stem"}, "median", "option_mass_divergent", None)
    assert _spec(t, "stem64_in_context") == ("stem64", {"variant": "stem"}, "median", "option_mass", None)
    assert (phi["stem64_divergent"], phi["stem64_in_context"]) == (0.0368, 0.9334)
    assert round(load_table("table3").paper["phi-3-mini"]["stem_mass"], 4) == phi["stem64_in_context"]  # App. A: Table 3's 0.93344


# ------------------------------------------------------------------------------------------------
# the cells by hand
# ------------------------------------------------------------------------------------------------


def test_c1_and_d_cells_and_summary_by_hand():
    """App. C.1 and D: the winning probability's range and median over the stemmed rows, the original
    ending's median mass, and the summary: the highest letter rate with the instruction and choices
    deleted over the checkpoints' cells."""
    c1 = load_table("appendix-c1")
    probs = [0.3147, 0.1225, 0.2133, 0.25]
    grid = [{"variant": "stem", "argmax_prob": p} for p in probs] + [{"variant": "original", "argmax_prob": 0.9}]
    got = _cells(aggregate(c1, c1.checkpoints[:1], {c1.checkpoints[0].name: {"grid": grid}}), c1.checkpoints[0].name)
    assert (got["stem_win_min"], got["stem_win_max"]) == (min(probs), max(probs))
    assert got["stem_win_median"] == pytest.approx(statistics.median(probs), rel=FLOAT64_RTOL)

    d = load_table("appendix-d")
    letters = {ck.name: k for k, ck in enumerate(d.checkpoints)}  # checkpoint k: k letters of 8 with both deleted

    def rules(k):
        both = [{"variant": "deleted_instruction_choices", "argmax_class": "answer_letter" if i < k else "digit"} for i in range(8)]
        return both + [{"variant": "original", "option_mass": m} for m in (0.0, 0.3895 + k, 10.0)]

    table = aggregate(d, d.checkpoints, {name: {"rules": rules(k)} for name, k in letters.items()})
    for name, k in letters.items():
        assert _cells(table, name)["letter_deleted_both"] == k / 8 and _cells(table, name)["mass_original"] == 0.3895 + k
    (s,) = table.summaries
    assert s.value == max(letters.values()) / 8 and s.n == len(d.checkpoints)


def test_c1_disagreements_by_direction_and_their_sum_by_hand():
    """App. C.1: SmolLM2's production prompt puts an option at the argmax on 6 items under half the mass and
    a letter there on 2 above it; falcon's 5 stemmed disagreements are options under half; §5 / C.1: 13 of
    the 1024 readings disagree, the sum over the eight checkpoints' two prompts."""
    t = load_table("appendix-c1")
    smol, falcon = t.paper["smollm2-1.7b"], t.paper["falcon-7b"]
    assert (smol["disagree_production"], smol["disagree_production_option"], smol["disagree_production_letter"]) == (8, 6, 2)
    assert (falcon["disagree_stemmed"], falcon["disagree_stemmed_option"]) == (5, 5)
    (summary,) = [s for s in t.summaries if s.key == "disagree_all"]
    assert (summary.columns, summary.how, summary.paper) == (("disagree_production", "disagree_stemmed"), "sum", 13)
    assert sum(t.paper[ck.name].get(k, 0) for ck in t.checkpoints for k in summary.columns) == 13 and len(t.checkpoints) * 2 * 64 == 1024
    assert not any("1024" in n for n in t.notes)

    def rows(option_under, letter_above, agree):
        out = [{"variant": "original", "mass_argmax_disagree": True, "argmax_class": "option"}] * option_under
        out += [{"variant": "original", "mass_argmax_disagree": True, "argmax_class": "answer_letter"}] * letter_above
        out += [{"variant": "original", "mass_argmax_disagree": False, "argmax_class": "answer_letter"}] * agree
        return out + [{"variant": "stem", "mass_argmax_disagree": True, "argmax_class": "option"}]  # one stemmed disagreement each

    readings = {t.checkpoints[0].name: {"grid": rows(6, 2, 3)}, t.checkpoints[1].name: {"grid": rows(1, 0, 9)}}
    table = aggregate(t, t.checkpoints[:2], readings)
    first, second = (_cells(table, ck.name) for ck in t.checkpoints[:2])
    assert (first["disagree_production"], first["disagree_production_option"], first["disagree_production_letter"], first["disagree_stemmed_option"]) == (8, 6, 2, 1)
    assert (second["disagree_production"], second["disagree_production_option"], second["disagree_production_letter"]) == (1, 1, 0)
    (got,) = [s for s in table.summaries if s.summary.key == "disagree_all"]
    assert got.value == 8 + 1 + 1 + 1  # both checkpoints' production and stemmed disagreements


@pytest.mark.slow
def test_c4_and_table6_cells_are_the_runs_readings(model, tmp_path):
    """App. C.4 and C.5: the fenced mass's minimum and maximum, Eq. 2's stemmed minimum, the argmax hits
    and the stemmed argmax digits, recomputed from the bundled model's readings.parquet."""
    from sleight.readout.reproduce import ModelCache, reproduce

    cache = ModelCache(loader=lambda _spec: model)  # the session's model, never closed here
    got = {}
    for name in ("appendix-c4", "table6"):
        res = reproduce(name, tmp_path, models=["smollm2-135m-instruct"], limit=N_ITEMS, B=20, cache=cache, status=lambda _m: None)
        got[name] = {k: c.estimate for k, c in res.table.rows[0].cells.items()}

    def by_variant(table):
        rows = pq.read_table(tmp_path / table / "smollm2-135m-instruct" / "probe" / "readings.parquet").to_pylist()
        out: dict[str, list[dict]] = {}
        for r in rows:
            out.setdefault(r["variant"], []).append(r)
        return out

    fenced = [r["option_mass"] for r in by_variant("appendix-c4")["fenced"] if r["option_mass"] is not None]
    assert len(fenced) == N_ITEMS
    assert (got["appendix-c4"]["fenced_min"], got["appendix-c4"]["fenced_max"]) == (min(fenced), max(fenced))
    by = by_variant("table6")
    stem, orig = by["stem"], by["original"]
    assert got["table6"]["stem_in_context_min"] == min(r["option_mass"] for r in stem if r["option_mass"] is not None)
    assert got["table6"]["stem_hits"] == sum(r["argmax_class"] == "option" for r in stem)
    assert got["table6"]["hits"] == sum(r["argmax_class"] == "option" for r in orig)
    assert got["table6"]["stem_divergent_hits"] == sum(r["divergent_argmax_hit"] is True for r in stem)
    for digit in ("7", "3", "5"):
        assert got["table6"][f"stem_argmax_{digit}"] == sum(token_rules.bare_token(r["argmax_token"]) == digit for r in stem)
    # App. A's 64-item run, cut to the same first items by the limit: the same stemmed readings as the probe's
    # (other rows share the batches, so within the mass noise, not bit for bit)
    stem64 = [r for r in pq.read_table(tmp_path / "table6" / "smollm2-135m-instruct" / "stem64" / "readings.parquet").to_pylist() if r["variant"] == "stem"]
    assert [r["item_id"] for r in stem64] == [r["item_id"] for r in stem]
    assert got["table6"]["stem64_divergent"] == pytest.approx(got["table6"]["stem_divergent"], abs=MASS_ATOL)
    assert got["table6"]["stem64_in_context"] == pytest.approx(got["table6"]["stem_in_context"], abs=MASS_ATOL)
