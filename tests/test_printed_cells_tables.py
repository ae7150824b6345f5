"""Issue 34: every printed number as a cell, and a difference computed for every cell a run measures.

Tables 14, 10 and 9 carried App. I's and App. E's printed numbers only in their notes. Those a run of the
config already measures are cells now (Table 14's stemmed medians and letter counts with two summaries, its separator control,
Table 10's label-token argmax count); the others stay notes that say why no cell carries them. Each
test cites the section it holds the config to, checks the config as printed and computes a cell by hand
from readings of the run's kind."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sleight.readout.reproduce import load_table
from sleight.readout.reproduce.aggregate import aggregate, stat_cell
from sleight.readout.reproduce.config import Checkpoint, Summary
from tolerances import FLOAT64_ATOL

CONDITIONS = ("c0", "n1", "s1", "d1", "a1", "a2", "t1", "t2")


def _column(table, key):
    return next(c for c in table.columns if c.key == key)


# -- Table 14 (App. I): the medians and letters at each condition's own answer stem ------------------------------
def test_table14_stemmed_medians_are_cells_as_printed():
    """App. I: "With their own answer stems ... all eight medians clear the floor under T1 and seven under
    T2. Falcon's stemmed medians are 0.45421 with MMLU-Pro and 0.33207 under T2"; "With the stem,
    Llama-3-8B-Instruct's C0 median is 0.99352" (also §3); "No item has an item-letter or A-D
    answer-letter argmax with the primary stem in any of the eight conditions on the eight checkpoints".
    Each condition's run reads its own stem (variant stem): a median and a letter count per condition,
    the three printed medians as paper cells, the exceptions' count (2, marked inferred) and the letter
    total (0) as summaries."""
    t = load_table("table14")
    for c in CONDITIONS:
        mass, letters = _column(t, f"{c}_stem_mass"), _column(t, f"{c}_stem_letters")
        assert (mass.run, dict(mass.where), mass.stat, mass.column) == (c, {"variant": "stem"}, "median", "option_mass")
        assert (letters.run, dict(letters.where), letters.stat, letters.column, letters.equals) == (c, {"variant": "stem"}, "count", "letter", True)
        assert t.runs[c].settings["variants"] == ["original", "stem", "separator+original"]
    assert {(r, k): v for r, row in t.paper.items() for k, v in row.items() if "_stem_" in k} == {
        ("falcon-7b", "d1_stem_mass"): 0.45421, ("falcon-7b", "t2_stem_mass"): 0.33207, ("llama-3-8b", "c0_stem_mass"): 0.99352,
    }  # fmt: skip
    below, letters = (next(s for s in t.summaries if s.key == k) for k in ("stem_below", "stem_letters"))
    assert (below.how, below.paper, below.columns) == ("below", 2.0, tuple(f"{c}_stem_mass" for c in CONDITIONS))
    assert (letters.how, letters.paper, letters.columns) == ("sum", 0.0, tuple(f"{c}_stem_letters" for c in CONDITIONS))
    assert "stemmed medians under the floor, 2" in t.inferred
    assert not any(p in n for n in t.notes for p in ("0.45421", "0.33207", "0.99352"))  # cells now, not notes


def test_table14_falcon_separator_supplied_cells_as_printed():
    """App. I ("The omitted separator"): falcon's medians with the separator supplied, 0.38482 ... 0.14991 in
    the condition order, and its option-argmax counts 63, 63, 64, 61, 63, 63, 62, 40 of 64. Each condition's
    run reads the separator control (variant separator+original: one space where the rendered ending lacks
    whitespace), so the sixteen printed numbers are cells with a difference, not a note; Mistral's "exceeds
    the floor in all eight" is printed without values and stays a note beside its measured cells."""
    t = load_table("table14")
    for c in CONDITIONS:
        mass, options = _column(t, f"{c}_sep_mass"), _column(t, f"{c}_sep_options")
        assert (mass.run, dict(mass.where), mass.stat, mass.column) == (c, {"variant": "separator+original"}, "median", "option_mass")
        assert (options.run, dict(options.where), options.stat, options.column, options.equals) == (c, {"variant": "separator+original"}, "count", "argmax_class", "option")
    falcon = t.paper["falcon-7b"]
    assert [falcon[f"{c}_sep_mass"] for c in CONDITIONS] == [0.38482, 0.39438, 0.69728, 0.33924, 0.34499, 0.37506, 0.44811, 0.14991]
    assert [falcon[f"{c}_sep_options"] for c in CONDITIONS] == [63, 63, 64, 61, 63, 63, 62, 40]
    assert not any("_sep_" in k for r, row in t.paper.items() if r != "falcon-7b" for k in row)
    assert load_table("appendix-c2").paper["falcon-7b"]["mass_space"] == falcon["c0_sep_mass"]  # C.2 prints C0's too
    (note,) = [n for n in t.notes if "separator supplied" in n]
    assert "Mistral" in note and "0.14991" not in note
    t15 = load_table("table15")  # Table 15 reads the same runs (App. I), so reproducing both runs them once
    assert {k: (r.paper_data, r.items, r.settings) for k, r in t15.runs.items()} == {k: (r.paper_data, r.items, r.settings) for k, r in t.runs.items()}


def test_table14_stem_cells_and_summaries_by_hand():
    """The stemmed cells read only the stem rows (the original ending's rows left out), the separator cells
    only the separator control's rows (its option argmax counted by class), and the summaries
    count the stemmed medians under §3's floor of 0.5 and add the stemmed letter counts, on Table 14's
    own config."""
    t = load_table("table14")
    rng = np.random.default_rng(3)
    readings: dict[str, dict[str, list[dict]]] = {}
    for k, ck in enumerate(("a", "b")):
        readings[ck] = {}
        for j, c in enumerate(CONDITIONS):
            stem = rng.uniform(0.2, 1.0, size=5)
            rows = [{"item_id": f"q{i}", "variant": "original", "option_mass": 1e-6, "letter": True} for i in range(5)]
            rows += [{"item_id": f"q{i}", "variant": "stem", "option_mass": float(m), "letter": i < (j + k) % 3} for i, m in enumerate(stem)]
            rows += [{"item_id": f"q{i}", "variant": "separator+original", "option_mass": float(m) / 2, "argmax_class": "option" if i <= j % 4 else "digit"} for i, m in enumerate(stem)]
            readings[ck][c] = rows
    res = aggregate(t, [Checkpoint("a", "ma"), Checkpoint("b", "mb")], readings, B=20)
    medians, counts = [], 0
    for row in (r for r in res.rows if r.kind == "checkpoint"):
        for c in CONDITIONS:
            stem = [r for r in readings[row.name][c] if r["variant"] == "stem"]
            m = float(np.median([r["option_mass"] for r in stem]))
            assert row.cells[f"{c}_stem_mass"].estimate == pytest.approx(m, abs=FLOAT64_ATOL)
            assert row.cells[f"{c}_stem_letters"].estimate == sum(r["letter"] for r in stem)
            sep = [r for r in readings[row.name][c] if r["variant"] == "separator+original"]
            assert row.cells[f"{c}_sep_mass"].estimate == pytest.approx(float(np.median([r["option_mass"] for r in sep])), abs=FLOAT64_ATOL)
            assert row.cells[f"{c}_sep_options"].estimate == sum(r["argmax_class"] == "option" for r in sep)
            medians.append(m)
            counts += sum(r["letter"] for r in stem)
    got = {s.summary.key: (s.value, s.n) for s in res.summaries}
    assert got["stem_below"] == (sum(m < 0.5 for m in medians), 16) and got["stem_letters"] == (counts, 16)


def test_s1_letter_a_is_a_cell_as_printed():
    """App. C.2: under S1 Mistral has a letter at the argmax on 57 of 64 items (Table 14), "with A the modal
    token on 18": the S1 run's letter rows whose bare argmax (the conditions run's ``argmax_bare``) is A."""
    t = load_table("table14")
    col = _column(t, "s1_letter_a")
    assert (col.run, dict(col.where), col.stat, col.column, col.equals) == ("s1", {"variant": "original", "letter": True}, "count", "argmax_bare", "A")
    assert (t.paper["mistral-7b"]["s1_letters"], t.paper["mistral-7b"]["s1_letter_a"]) == (57, 18)
    rows = [{"variant": "original", "letter": True, "argmax_bare": b} for b in "AABCA"] + [{"variant": "original", "letter": False, "argmax_bare": "None"}]
    rows += [{"variant": "stem", "letter": True, "argmax_bare": "A"}]  # another ending: not counted
    assert stat_cell(rows, col).estimate == 3


def test_below_summary_counts_cells_under_the_floor():
    """``how: below`` counts the defined cells under 0.5 (§3's floor); an undefined cell is not counted."""
    from sleight.readout.reproduce.aggregate import Cell, TableRow, summary_cell

    rows = [TableRow("a", "a", "checkpoint", ("a",), {"x": Cell(0.49999), "y": Cell(0.5)}), TableRow("b", "b", "checkpoint", ("b",), {"x": Cell(math.nan), "y": Cell(0.1)})]
    s = summary_cell(Summary("s", "s", ("x", "y"), "below", 2.0), rows)
    assert (s.value, s.n) == (2.0, 3)


# -- Table 10 (App. E): a label token at the library's position ---------------------------------------------------
def test_table10_label_token_argmax_is_a_cell_as_printed():
    """App. E ("A second task: TriviaQA"): "At the scored position, one of the library's option-label
    tokens (A and (B is the unrestricted argmax on 500, 500 and 463 items on the three Qwen3 checkpoints
    without thinking and 396 on Llama-3-8B-Instruct." Labels in place reads the library's position with
    (A and (B as its options: a count of its argmax class option (the reading of a label token marked
    inferred)."""
    t = load_table("table10")
    col = _column(t, "label_argmax")
    assert (col.run, dict(col.where), col.stat, col.column, col.equals) == ("ptrue-triviaqa", {"setting": "own", "readout": "labels_in_place"}, "count", "argmax_class", "option")
    assert {r: v["label_argmax"] for r, v in t.paper.items() if "label_argmax" in v} == {"qwen3-4b": 500, "qwen3-8b": 500, "qwen3-14b": 463, "llama-3-8b": 396}
    assert "first token of (A or (B" in t.inferred


def test_table10_library_label_aurocs_are_cells_as_printed():
    """App. E ("A second task: TriviaQA"): "With the library's own correctness label, the Qwen3-averaged
    AUROCs are 0.418 for Library and 0.866 for Moved", the label using "the full answer without these
    extra removals". Every own answer records that label (label_library), so the two numbers are cells
    of the Qwen3 average with a difference, not a note."""
    t = load_table("table10")
    for key, readout in (("auroc_library_own_label", "library"), ("auroc_moved_own_label", "moved")):
        col = _column(t, key)
        assert (col.run, dict(col.where), col.metric, col.target) == ("ptrue-triviaqa", {"setting": "own", "readout": readout}, "auroc", "label_library")
    printed = {(r, k): v for r, row in t.paper.items() for k, v in row.items() if k.endswith("_own_label")}
    assert printed == {("Qwen3 average", "auroc_library_own_label"): 0.418, ("Qwen3 average", "auroc_moved_own_label"): 0.866}
    assert not any("0.418" in n or "0.866" in n for n in t.notes)


LIBRARY_LABEL_CASES = [  # (own answer, aliases): App. E's removals make the first three differ between the two labels
    ("Answer: Paris\n", ["Paris", "City of Light"]),
    ("Paris ✓\n", ["Paris"]),
    ("Pelé\n", ["Pele"]),
    ("The Beatles.\n", ["Beatles", "The Fab Four"]),
    ("paris, france\n", ["Paris"]),
    (" city_of light", ["Paris", "City of Light"]),
    ("London\n", ["Paris"]),
    ("", ["Paris"]),
]


def test_library_label_is_lm_polygraphs_own_metric():
    """App. E: the library's label is lm-polygraph 0.7.0's own TriviaQA accuracy, its classes composed as
    ``polygraph_eval`` composes them (lines 316-323: ``AggregatedMetric(PreprocessOutputTarget(AccuracyMetric(),
    out, target))`` over the aliases, with the triviaqa processing script's normalisation); sleight's
    :func:`library_match` gives the same 0/1 on every case, and App. E's first-line rule differs from it
    exactly on the answers its extra removals change."""
    from lm_polygraph.generation_metrics import AccuracyMetric, AggregatedMetric
    from lm_polygraph.generation_metrics.preprocess_output_target import PreprocessOutputTarget

    from sleight.readout.ptrue.answers import first_line_match, library_match, normalize_answer

    metric = AggregatedMetric(PreprocessOutputTarget(AccuracyMetric(), normalize_answer, normalize_answer))
    answers = [a for a, _ in LIBRARY_LABEL_CASES]
    theirs = metric({"greedy_texts": answers}, [aliases for _, aliases in LIBRARY_LABEL_CASES])
    ours = [float(library_match(a, aliases) is not None) for a, aliases in LIBRARY_LABEL_CASES]
    assert list(theirs) == ours == [0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    app_e = [float(first_line_match(a, aliases) is not None) for a, aliases in LIBRARY_LABEL_CASES]
    assert app_e == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]


def test_table10_label_argmax_by_hand_on_the_bundled_model(model):
    """Labels in place and Library read the same context, so their argmax is the same token; the cell
    counts the items whose argmax is the first token of (A or (B in that context."""
    from sleight.readout.ptrue.readouts import READOUTS, score_pairs

    questions = ["Which planet is known as the Red Planet? Answer the following question as briefly as possible.", "Who wrote Hamlet?"]
    rows = score_pairs(model, questions, [" Mars", " Dickens"], continuation_tokens=0)
    n = len(READOUTS)
    names = [r.name for r in READOUTS]
    library, labels = rows[names.index("library") :: n], rows[names.index("labels_in_place") :: n]
    assert [r["argmax_id"] for r in library] == [r["argmax_id"] for r in labels]
    for r in labels:  # option: the argmax is a label's first token in context (where the boundary holds)
        if r["boundary_preserved"] and r["argmax_class"] != "special":
            assert (r["argmax_class"] == "option") == (r["argmax_id"] in r["first_token_ids"])
    by_hand = sum(r["argmax_class"] == "option" for r in labels)
    readings = [{"setting": "own", "item_id": f"q{i}", "readout": "labels_in_place", **r} for i, r in enumerate(labels)]
    assert stat_cell(readings, _column(load_table("table10"), "label_argmax")).estimate == by_hand


# -- Table 9 (App. E): the fused first letter ---------------------------------------------------------------------
def test_table9_fused_letter_gain_is_a_cell_as_printed():
    """App. E ("The floor and the ranking"): "Counting as correct the 11 Qwen3-4B answers with no
    standalone letter but a gold first letter fused to lowercase text, such as Bropical, gives a
    Qwen3-averaged gain of 0.120 [0.067, 0.173]." Every own answer records whether it is such an answer
    (fused_letter) and the label that counts it correct (label_fused): the count is Qwen3-4B's cell, the
    gain the Qwen3 average's Moved − Library under that label, the rule's reading marked inferred."""
    t = load_table("table9")
    count, gain = _column(t, "fused_letters"), _column(t, "moved_minus_library_fused")
    assert (count.run, dict(count.where), count.stat, count.column, count.equals) == ("ptrue-mmlu", {"setting": "own", "readout": "library"}, "count", "fused_letter", True)
    assert (gain.run, dict(gain.where), dict(gain.minus or {}), gain.metric, gain.target) == ("ptrue-mmlu", {"setting": "own", "readout": "moved"}, {"readout": "library"}, "auroc", "label_fused")
    assert t.paper["qwen3-4b"]["fused_letters"] == 11 and not any("fused_letters" in v for r, v in t.paper.items() if r != "qwen3-4b")
    assert t.paper["Qwen3 average"]["moved_minus_library_fused"] == 0.12 and t.paper_ci["Qwen3 average"]["moved_minus_library_fused"] == (0.067, 0.173)
    assert "Bropical" in t.inferred and not any("Bropical" in n for n in t.notes)


def test_fused_letter_label_by_hand():
    """The rule on its cases (a gold capital fused to lowercase text at the opening, no standalone letter
    anywhere), the labels own_pairs records from it, and the gain cell against the paired AUROC
    difference computed directly on hand-built rows."""
    from sleight.readout.ptrue.answers import Answer, QAItem, fused_gold_letter
    from sleight.readout.ptrue.pipeline import own_pairs
    from sleight.stats.metrics import auroc

    assert fused_gold_letter("Bropical", "B") and fused_gold_letter("  Cellular respiration", "C")
    assert not fused_gold_letter("Bropical", "A")  # not the gold letter
    assert not fused_gold_letter("Bropical, so B", "B")  # a standalone letter elsewhere: judged by it
    assert not fused_gold_letter("B", "B") and not fused_gold_letter("BROPICAL", "B") and not fused_gold_letter("", "B")
    item = QAItem(id="m1", question="Which?", choices=("x", "y", "z", "w"), gold_letter="B")
    free = QAItem(id="t1", question="Capital of France?", aliases=("Paris",))
    pairs = own_pairs([item, item, free], [Answer(t, 2, "stop_token", "") for t in ("Bropical\n", "C\n", "Answer: Paris\n")])
    assert [(p["label"], p.get("fused_letter"), p.get("label_fused"), p.get("label_library")) for p in pairs] == [
        (0.0, True, 1.0, None), (0.0, False, 0.0, None), (1.0, None, None, 0.0),
    ]
    rng = np.random.default_rng(5)
    rows = []
    for i in range(40):
        label, fused = float(rng.random() < 0.5), bool(rng.random() < 0.2)
        for readout in ("library", "moved"):
            rows.append({"setting": "own", "item_id": f"q{i}", "readout": readout, "score": float(rng.random()), "label": label,
                         "fused_letter": fused, "label_fused": float(label or fused)})
    res = aggregate(load_table("table9"), [Checkpoint("a", "ma")], {"a": {"ptrue-mmlu": rows}}, B=20)
    cells = next(r for r in res.rows if r.kind == "checkpoint").cells
    y = np.asarray([r["label_fused"] for r in rows if r["readout"] == "moved"])
    score = {k: np.asarray([r["score"] for r in rows if r["readout"] == k]) for k in ("moved", "library")}
    assert cells["moved_minus_library_fused"].estimate == pytest.approx(auroc(score["moved"], y) - auroc(score["library"], y), abs=FLOAT64_ATOL)
    assert cells["fused_letters"].estimate == sum(r["fused_letter"] for r in rows if r["readout"] == "library")
