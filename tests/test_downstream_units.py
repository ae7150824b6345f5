"""The downstream commands' pure parts: correctness rules, the notes' summary, item loading, the
scoring summaries (against sleight.stats directly) and the report rendering. No model here."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sleight.errors import UserError
from sleight.readout import downstream_report as dr
from sleight.readout.forecast import pipeline as fp
from sleight.readout.ptrue import pipeline as pp
from sleight.readout.ptrue.answers import (
    QAItem,
    alias_match,
    first_standalone_letter,
    judge_answer,
    load_qa_items,
)
from sleight.stats import auroc, bootstrap_ci, brier, paired_bootstrap, prr, resample
from sleight.stats.downstream import (
    clean,
    cluster_codes,
    mass_summary,
    metric_interval,
    paired_difference,
)
from tolerances import FLOAT64_ATOL

# ---------------------------------------------------------------------------------------------
# correctness rules
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, aliases, expected",
    [
        ("The capital of Germany is Berlin.", ["Berlin"], "Berlin"),
        ("berlin, of course", ["Berlin"], "Berlin"),
        ("A dog has 4 legs.", ["4", "four"], "4"),
        ("There are 40 of them.", ["4", "four"], None),  # whole words: 4 is not in 40
        ("He was a cowboy.", ["cow"], None),
        ("It is a cow.", ["cow", "a cow"], "cow"),
        ("The symbol is Na.", ["Na"], "Na"),
        ("na na na", ["Na"], None),  # short capitalised aliases match case-sensitively
        ("Saturn's rings", ["Saturn"], "Saturn"),
        ("Marie Skłodowska-Curie won it", ["Marie Skłodowska-Curie"], "Marie Skłodowska-Curie"),
        ("The   answer is   Jane\nAusten", ["Jane Austen"], "Jane Austen"),  # whitespace folded
        ("", ["x"], None),
    ],
)
def test_alias_match_on_word_boundaries(text, aliases, expected):
    assert alias_match(text, aliases) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("B", "B"),
        ("The answer is (C).", "C"),
        ("**D** because", "D"),
        ("Answer: A.", "A"),
        ("CAB", None),  # letters inside a word do not stand alone
        ("B2 then C", "C"),  # touching a digit does not stand alone either
        ("none of them", None),
        ("A rabbit ate it", "A"),  # the rule is literal: an article "A" counts
    ],
)
def test_first_standalone_letter(text, expected):
    assert first_standalone_letter(text) == expected


def test_judge_answer_uses_the_rule_of_the_item_kind():
    free = QAItem("f", "Capital of Spain?", aliases=("Madrid",), wrong="Barcelona")
    assert judge_answer(free, "Madrid.\nIt is in Spain") == (True, "Madrid")  # the first line, normalised
    assert judge_answer(free, "It is Madrid.") == (False, None)  # the paper's first-line rule (issue #19)
    assert judge_answer(free, "It is Madrid.", rule="anywhere") == (True, "Madrid")  # the earlier rule, kept by name
    assert judge_answer(free, "It is Barcelona.", rule="anywhere") == (False, None)
    lettered = QAItem("r", "Why?", choices=("w", "x", "y", "z"), gold_letter="B")
    assert judge_answer(lettered, "The answer is B: x") == (True, "B")
    assert judge_answer(lettered, "(C) y, not B") == (False, "C")
    assert "A. w\nB. x" in lettered.prompt and lettered.gold_text == "B. x"


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------


def test_fixture_loaders_and_limits():
    race = fp.load_race_items(fp_fixture("race_items.jsonl"))
    qa = load_qa_items(fp_fixture("qa_items.jsonl"))
    assert len(race) == 28 and len(qa) == 36
    assert all(it.answer in "ABCD" and len(it.choices) == 4 for it in race)
    assert len(fp.load_race_items(fp_fixture("race_items.jsonl"), limit=3)) == 3
    both = load_qa_items(fp_fixture("race_items.jsonl"), limit=2)  # ptrue also takes lettered items
    assert all(it.lettered for it in both)


def fp_fixture(name: str) -> str:
    return str(fp.DEFAULT_ITEMS.parent / name)


@pytest.mark.parametrize(
    "line, needle",
    [
        ('{"id": "x", "passage": "p", "question": "q", "choices": ["a","b","c"], "answer": "A"}', "line 2: 'choices' must be a list of 4"),
        ('{"id": "x", "passage": "p", "question": "q", "choices": ["a","b","c","d"], "answer": "E"}', "line 2: 'answer' must be one of A, B, C, D"),
        ('{"id": "x", "passage": "", "question": "q", "choices": ["a","b","c","d"], "answer": "A"}', "line 2: 'passage' must be a non-empty string"),
        ('{"id": "r1", "passage": "p", "question": "q", "choices": ["a","b","c","d"], "answer": "A"}', "line 2: duplicate id 'r1'"),
        ("{not json", "line 2: not valid JSON"),
    ],
)
def test_race_loader_names_the_bad_line(tmp_path, line, needle):
    good = '{"id": "r1", "passage": "p", "question": "q", "choices": ["a","b","c","d"], "answer": "A"}'
    path = tmp_path / "items.jsonl"
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(UserError, match=needle):
        fp.load_race_items(path)


def test_qa_loader_errors(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"id": "f1", "question": "q", "answers": []}\n')
    with pytest.raises(UserError, match="qa.jsonl line 1: needs 'answers'"):
        load_qa_items(path)
    with pytest.raises(UserError, match="items file not found"):
        load_qa_items(tmp_path / "missing.jsonl")
    with pytest.raises(UserError, match="--limit must be at least 1"):
        load_qa_items(fp_fixture("qa_items.jsonl"), limit=0)


# ---------------------------------------------------------------------------------------------
# pipeline text pieces
# ---------------------------------------------------------------------------------------------


def test_note_summary_counts_app_hs_writer():
    """App. H: the writer keeps a note of 1-32 words after up to four retries; the summary counts the
    kept notes, those that took a retry, the mean attempts and the kept notes' mean length; readings
    from the old cutting writer (no ``note_ok``) have no counts."""
    rows = [
        {"note": "one two three", "note_ok": True, "note_attempts": 1},
        {"note": "a b c d e", "note_ok": True, "note_attempts": 3},
        {"note": "", "note_ok": False, "note_attempts": 5},
    ]
    assert fp.note_summary(rows).as_json() == {
        "max_words": 32, "retries": 4, "kept": 2, "not_kept": 1, "retried": 1, "mean_attempts": 3.0, "mean_words": 4.0,
    }
    old = fp.note_summary([{"note": "x y"}])
    assert old.kept is None and old.retried is None and math.isnan(old.mean_attempts) and math.isnan(old.mean_words)


def test_reader_prompt_has_the_note_and_item_but_not_the_passage():
    it = fp.load_race_items(fp_fixture("race_items.jsonl"), limit=1)[0]
    prompt = fp.reader_prompt("NOTE TEXT", it)
    assert prompt.startswith("Note: NOTE TEXT\n\n") and it.question in prompt
    # Appendix H prints the choices "D: ..." (was "D. ..." before issue #19)
    assert "\nD: " + it.choices[3] + "\n" in prompt and prompt.endswith("Answer with exactly one of: A, B, C, D.")
    assert it.passage[:40] not in prompt
    f_item = fp.forecast_item(it, "NOTE TEXT", 1.0)
    assert f_item.options == ("10", "30", "50", "70", "90") and f_item.stem == "Out of 100 such readers, about "
    assert fp.quoted_item(it) in f_item.messages[0]["content"]


def test_pick_is_argmax_and_none_without_a_boundary():
    assert fp.pick([-3.0, -1.0, -2.0, -1.0]) == 1  # first on ties
    assert fp.pick([-1.0, None, -2.0, -3.0]) is None


def test_constructed_pairs_balance_gold_and_wrong():
    items = load_qa_items(fp_fixture("qa_items.jsonl"), limit=3) + load_qa_items(fp_fixture("race_items.jsonl"), limit=1)
    pairs = pp.constructed_pairs(items)
    assert [p["label"] for p in pairs] == [1.0, 0.0] * 4
    assert pairs[0]["answer"] == "blue" and pairs[1]["answer"] == "green"
    # App. E: a lettered item prints bare letters, the gold one and a seeded non-gold one
    assert pairs[-2]["answer"] == items[-1].gold_letter and pairs[-1]["answer"] in "ABCD" and pairs[-1]["answer"] != items[-1].gold_letter
    with pytest.raises(UserError, match="unknown --answers"):
        pp.parse_settings("all")


# ---------------------------------------------------------------------------------------------
# scoring: the summaries are sleight.stats applied as documented
# ---------------------------------------------------------------------------------------------


def _forecast_rows(n: int, seed: int = 0, per_passage: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        correct = bool(rng.integers(0, 2)) if i > 1 else bool(i)
        for pos, mass in (("original", 0.03), ("stem", 0.7)):
            rows.append(
                {
                    "item_id": f"r{i}",
                    "cluster": i // per_passage,
                    "position": pos,
                    "gold": "ABCD"[i % 4],
                    "correct": correct,
                    "correct_spaced": correct if i % 3 else not correct,
                    "reader_choice": "A",
                    "reader_choice_spaced": "A" if i % 3 else "B",
                    "reader_agree": bool(i % 3),
                    "reader_mass": 0.8,
                    "reader_mass_spaced": 1e-4,
                    "note": " ".join(["w"] * (30 + i % 3)) if i % 2 else "",
                    "note_ok": bool(i % 2),
                    "note_attempts": 1 + i % 2 + (4 if i % 2 == 0 else 0),
                    "score": float(np.clip(0.3 * correct + rng.uniform(0, 0.7), 0, 1)) if pos == "stem" else float(rng.uniform(0.1, 0.9)),
                    "option_mass": mass * (1 + 0.1 * rng.uniform()),
                    "first_tokens_distinct": True,
                    "argmax_class": "answer_letter" if pos == "original" else "option",
                    "argmax_token": "A" if pos == "original" else "9",
                    "continuation_class": "answers_item" if pos == "original" else "forecast",
                }
            )
    return rows


def test_forecast_summary_is_stats_on_the_rows():
    rows = _forecast_rows(30, per_passage=2)
    s = fp.summarise(rows, B=500, seed=3)
    orig = [r for r in rows if r["position"] == "original"]
    stem = [r for r in rows if r["position"] == "stem"]
    y = np.array([float(r["correct"]) for r in orig])
    clusters = np.array([r["cluster"] for r in orig])
    so, ss = np.array([r["score"] for r in orig]), np.array([r["score"] for r in stem])
    assert s.n_clusters == 15
    assert s.positions["stem"].auroc.estimate == pytest.approx(auroc(ss, y))
    assert s.positions["original"].brier.estimate == pytest.approx(brier(so, y))
    ci = bootstrap_ci(auroc, ss, y, B=500, seed=3, clusters=clusters)
    assert (s.positions["stem"].auroc.low, s.positions["stem"].auroc.high) == (ci.low, ci.high)
    pb = paired_bootstrap(auroc, (ss, y), (so, y), clusters=clusters, B=500, seed=3)
    g = s.gain["auroc"]
    assert (g.diff, g.low, g.high) == (pb.diff, pb.ci_diff.low, pb.ci_diff.high)
    # Brier: lower is better, so the gain is original minus stem, its interval mirrored.
    pbb = paired_bootstrap(brier, (ss, y), (so, y), clusters=clusters, B=500, seed=3)
    gb = s.gain["brier"]
    assert gb.gain == pytest.approx(-pbb.diff) and (gb.gain_low, gb.gain_high) == pytest.approx((-pbb.ci_diff.high, -pbb.ci_diff.low))
    assert s.brier_reference.constant_half == 0.25 == pytest.approx(brier(np.full(y.size, 0.5), y))
    assert s.brier_reference.base_rate == pytest.approx(brier(np.full(y.size, y.mean()), y))
    assert s.reader.spaced_unspaced_agreement == pytest.approx(np.mean([bool(i % 3) for i in range(30)]))
    assert s.reader.n_agree == sum(bool(i % 3) for i in range(30)) and s.reader.n_compared == 30
    assert s.positions["original"].mass.below_floor == 30 and s.positions["stem"].mass.below_floor == 0
    assert (s.notes.kept, s.notes.not_kept, s.notes.retried, s.notes.mean_attempts) == (15, 15, 15, 3.5)
    assert s.notes.mean_words == pytest.approx(np.mean([30 + i % 3 for i in range(1, 30, 2)]))
    json.dumps(s.as_json(), allow_nan=False)  # JSON-ready (no NaN)
    back = fp.ForecastSummary.from_json(json.loads(json.dumps(s.as_json())))  # read field by field from the types
    assert json.dumps(back.as_json()) == json.dumps(s.as_json()) and back.reader.choices == s.reader.choices


def test_paired_difference_shares_replicates_and_is_narrower_than_unpaired():
    rng = np.random.default_rng(1)
    n = 80
    y = rng.integers(0, 2, n).astype(float)
    common = y + rng.normal(0, 1.0, n)  # what both readouts share
    a, b = common + rng.normal(0, 0.2, n), common + rng.normal(0, 0.2, n)
    d = paired_difference("auroc", a, b, y, B=2000, seed=0)
    # The difference's replicates are a's minus b's on the same resample (reconstructed here).
    counts = resample(n, 2000, 0).counts
    reps = auroc(a, y, weights=counts) - auroc(b, y, weights=counts)
    assert (d.low, d.high) == tuple(np.quantile(reps, [0.025, 0.975]))
    # Pairing removes the shared item noise: the interval is much narrower than a's own.
    ci_a = metric_interval("auroc", a, y, B=2000, seed=0)
    assert d.high - d.low < 0.6 * (ci_a.high - ci_a.low)


def test_undefined_metrics_are_null_not_errors():
    y = np.ones(6)
    m = metric_interval("auroc", np.arange(6.0), y, B=100)
    assert math.isnan(m.estimate) and clean(m)["estimate"] is None and clean(m)["low"] is None
    d = paired_difference("prr", np.arange(6.0), np.arange(6.0)[::-1], y, B=100)
    assert clean(d)["gain"] is None


def test_prr_summary_and_cluster_codes():
    assert cluster_codes(["p2", "p1", "p2", "p3"]).tolist() == [0, 1, 0, 2]
    assert mass_summary([0.2, None, 0.9, 0.7]).as_json() == {
        "n": 4, "n_defined": 3, "n_boundary_not_preserved": 1, "median": 0.7, "min": 0.2, "below_floor": 1, "floor": 0.5, "collapsed": False,
    }
    rows = []
    rng = np.random.default_rng(0)
    for k in range(12):
        label = float(k % 2)
        for r in pp.READOUT_LABELS:
            score = float(np.log(rng.uniform(0.01, 1))) if r == "library" else (None if (r == "moved" and k == 0) else float(rng.uniform()))
            rows.append({"setting": "constructed", "item_id": f"q{k // 2}", "label": label, "readout": r, "score": score, "option_mass": 0.1,
                         "first_tokens_distinct": True, "argmax_class": "prose", "argmax_token": "The", "continuation_class": "prose"})
    s = pp.summarise(rows, B=300, seed=0).settings["constructed"]
    assert s.n_pairs == 12 and s.n_clusters == 6 and s.readouts["moved"].n_scored == 11
    lib = np.array([r["score"] for r in rows if r["readout"] == "library"])
    ren = np.array([r["score"] for r in rows if r["readout"] == "renormalised"])
    y = np.array([r["label"] for r in rows if r["readout"] == "library"])
    assert s.readouts["library"].prr.estimate == pytest.approx(prr(lib, y))
    pb = paired_bootstrap(prr, (ren, y), (lib, y), clusters=cluster_codes([r["item_id"] for r in rows if r["readout"] == "library"]), B=300, seed=0)
    assert (s.vs_library["renormalised"]["prr"].diff, s.vs_library["renormalised"]["prr"].low) == (pb.diff, pb.ci_diff.low)
    assert s.vs_library["moved"]["auroc"].n == 11  # compared on the items both readouts score
    whole = pp.summarise(rows, B=300, seed=0)
    back = pp.PTrueSummary.from_json(json.loads(json.dumps(whole.as_json())))  # nested mappings of records, read by type
    assert json.dumps(back.as_json()) == json.dumps(whole.as_json()) and isinstance(back.settings["constructed"].pairs["auroc"], dict)


def test_records_write_and_read_back_their_json():
    """The records' JSON is summary.json's (keys in order, NaN as null) and reads back to the same
    record; an undefined metric's record too. The run description heads summary.json the same way."""
    from sleight.readout.downstream_report import RunMeta
    from sleight.stats import downstream as d

    rng = np.random.default_rng(3)
    y = (np.arange(20) % 2).astype(float)
    s, t = y + rng.normal(0, 1, 20), y + rng.normal(0, 1, 20)
    undefined = d.answer_letter_auroc_interval(s, np.ones(20), np.zeros(20), B=50)
    records = [
        metric_interval("auroc", s, y, B=50), metric_interval("auroc", s, np.ones(20), B=50),
        paired_difference("brier", 1 / (1 + np.exp(-s)), 1 / (1 + np.exp(-t)), y, B=50), paired_difference("prr", s, t, np.ones(20), B=50),
        mass_summary([0.2, None, 0.9]), mass_summary([None]), *d.per_letter_auroc(s, y, ["ABCD"[i % 4] for i in range(20)]).values(),
        d.answer_letter_auroc_interval(s, y, np.arange(20) % 3, B=50), undefined,
        *d.leave_one_out_intervals({"a": s, "b": t}, {"a": 0.1, "b": 0.2}).values(), d.leave_one_out({"a": 1.0, "b": 3.0}),
    ]
    assert list(clean(records[0])) == ["metric", "better", "n", "estimate", "low", "high", "B", "level", "n_invalid"]
    assert "n_invalid" not in clean(undefined) and clean(undefined)["estimate"] is None  # one class: no interval, no n_invalid key
    for rec in records:
        back = type(rec).from_json(json.loads(json.dumps(clean(rec))))
        assert json.dumps(clean(back)) == json.dumps(clean(rec)), type(rec).__name__
    manifest = {"kind": "ptrue", "command": "sleight readout ptrue", "items": "x.jsonl", "n_items": 2, "model": {"model_id": "m"}, "config": {"instruct": False}}
    meta = RunMeta.from_manifest(manifest, 1.5, 400, 0)
    assert list(meta.as_json()) == ["kind", "command", "items", "n_items", "model", "instruct", "seconds", "B", "seed"] and meta.instruct is False
    assert RunMeta.from_json({**meta.as_json(), "n_scored": 3}) == meta
    assert "instruct" not in RunMeta.from_manifest({**manifest, "kind": "forecast"}, None, 400, 0).as_json()


# ---------------------------------------------------------------------------------------------
# report rendering
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [False, True])
def test_roc_points_area_is_the_auroc(tied):
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 60).astype(float)
    s = rng.integers(0, 5, 60).astype(float) if tied else rng.normal(size=60)
    fpr, tpr = dr.roc_points(s, y)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert np.trapezoid(tpr, fpr) == pytest.approx(auroc(s, y), abs=FLOAT64_ATOL)


def test_markdown_and_html_render_the_same_blocks(tmp_path):
    rep = dr.Report("T")
    dr.plot_roc({"x": ([0.1, 0.9, 0.4], [0, 1, 1], 1.0)}, tmp_path / "roc.png", "roc")
    rep.add(dr.Heading("H"), dr.Para("a `b` **c** <d>"), dr.Table(["k", "v|w"], [["1", "2"]], note="n"), dr.Figure("roc.png", "cap"), dr.Code("x < y"))
    md, page = dr.write_report(rep, tmp_path)
    text = md.read_text()
    assert "# T" in text and "| k | v\\|w |" in text and "![cap](roc.png)" in text and "```\nx < y\n```" in text
    h = page.read_text()
    assert "<code>b</code>" in h and "<strong>c</strong>" in h and "&lt;d&gt;" in h and "data:image/png;base64," in h
    assert (tmp_path / "roc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
