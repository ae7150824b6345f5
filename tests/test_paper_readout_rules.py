"""Issue #27 item 3: the paper's rules in the data, P(True), forecast and statistics layers, each as
the paper prints it (the section is cited in each test)."""

from __future__ import annotations

import hashlib
import math
import random

import numpy as np
import pyarrow.parquet as pq
import pytest

from sleight.readout.data import load_data
from sleight.readout.data.fixtures import fixtures_dir
from sleight.stats import auroc, brier, resample
from sleight.stats.downstream import answer_letter_auroc, answer_letter_auroc_interval, leave_one_out_intervals, log_median
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL


def _race_dir():
    return fixtures_dir() / "ehovy" / "race" / "high"


def _a1_by_the_letter(n: int) -> list[tuple[str, str]]:
    """App. A.1 restated independently: test, validation, train in stored order; rows grouped by the MD5
    of the UTF-8 passage (first occurrence's position, questions in encounter order); passages of at
    least 200 words; random.Random(0) shuffles them and picks one question each. (passage id, question)."""
    groups: dict[str, list] = {}
    for split in ("test", "validation", "train"):
        for row in pq.read_table(_race_dir() / f"{split}-00000-of-00001.parquet").to_pylist():
            key = hashlib.md5(row["article"].encode("utf-8")).hexdigest()
            groups.setdefault(key, [row["example_id"], row["article"], []])[2].append(row["question"])
    passages = [g for g in groups.values() if len(g[1].split()) >= 200]
    rng = random.Random(0)
    rng.shuffle(passages)
    return [(g[0], rng.choice(g[2])) for g in passages[:3052]][:n]


def test_race_h_is_app_a1s_draw_on_the_shipped_fixture():
    """App. A.1: the same passage ids (and questions) as the paper's procedure, read from all three splits,
    a passage seen again in another split joining its first occurrence, short passages dropped."""
    ds = load_data(f"race-h:{_race_dir() / 'test-00000-of-00001.parquet'}")
    got = [(r["passage_id"], r["question"]) for r in ds.records]
    assert got == _a1_by_the_letter(100)
    ids = [p for p, _q in got]
    assert ids == ["high6.txt", "high3.txt", "high8.txt", "high4.txt", "high1.txt", "high5.txt", "high11.txt", "high10.txt"]
    assert "high2.txt" not in ids and "high9.txt" not in ids  # 199 and 120 words
    assert ds.provenance["rule"]["order"] == ["test", "validation", "train"]
    assert ds.provenance["counts"] == {"rows": 15, "passages": 10, "long_enough": 8, "listed": 8, "drawn": 8}
    high4 = next(r for r in ds.records if r["passage_id"] == "high4.txt")
    assert high4["question"] in {"How long did the walk take at the end?", "What did the walk take at last?"}  # validation's high7 joined it


def test_race_h_samples_are_prefixes_of_one_list():
    """§3 and App. A.1: every RACE-H sample (64 items, 120 rows, 240 passages) is a prefix of the same list."""
    spec = f"race-h:{_race_dir() / 'test-00000-of-00001.parquet'}"
    full = [r["id"] for r in load_data(spec).records]
    for n in (1, 3, 5):
        assert [r["id"] for r in load_data(f"{spec}:n={n}").records] == full[:n]
    assert load_data(spec).provenance["rule"]["seed"] == 0 and load_data(spec).provenance["rule"]["n"] == 3052


def test_the_500_item_subsets_are_the_librarys_subsample():
    """App. E: 500 shared MMLU/TriviaQA items, drawn by lm-polygraph's subsampling with seed 1
    (``np.random.RandomState(1).choice(n, 500, replace=False)``), the same for every checkpoint."""
    from sleight.readout.data.mmlu import polygraph_subsample

    records = [{"id": f"q{k}"} for k in range(1400)]
    got = polygraph_subsample(records, 500, 1)
    want = np.random.RandomState(1).choice(1400, 500, replace=False)
    assert [r["id"] for r in got] == [f"q{k}" for k in want] and len({r["id"] for r in got}) == 500
    assert polygraph_subsample(records, 500, 1) == got


def test_own_answers_sample_at_each_checkpoints_generation_config():
    """App. E: the library's answer step samples at each checkpoint's own generation settings: its
    GenerationParameters defaults (temperature 1, top-k 50, top-p 1) overridden by generation_config."""
    from sleight.readout.ptrue.answers import generation_sampling
    from sleight.readout.reproduce import load_table
    from sleight.readout.reproduce.kinds import run_settings

    assert generation_sampling(None) == {"temperature": 1.0, "top_k": 50, "top_p": 1.0}
    assert generation_sampling({"temperature": 0.6, "top_k": 20, "top_p": 0.95, "do_sample": True}) == {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
    assert generation_sampling({"temperature": 0.6, "top_p": 0.9}) == {"temperature": 0.6, "top_k": 50, "top_p": 0.9}
    t9 = load_table("table9")
    spec = t9.runs["ptrue-mmlu"]
    llama = next(c for c in t9.checkpoints if c.name == "llama-3-8b")
    assert run_settings(spec, llama) == {**spec.settings, "decode": "sampled", "temperature": 0.6, "top_k": 50, "top_p": 0.9}
    qwen = next(c for c in t9.checkpoints if c.name == "qwen3-4b")
    assert run_settings(spec, qwen)["top_k"] == 20


def test_the_checkpoints_own_generation_config_is_read_where_it_can_be(tmp_path, monkeypatch):
    """App. E's "own generation settings" are the checkpoint's file: a model folder's
    generation_config.json wins over the values a config records; the bundled model's sets no
    sampling key (the library's defaults); a hub checkpoint is read from the local cache at the
    pinned, abbreviated revision, and only without one do the recorded values stand."""
    import dataclasses
    import json
    import shutil

    from sleight.backends.resolve import own_generation_config, resolve
    from sleight.readout.reproduce import load_table
    from sleight.readout.reproduce.kinds import run_settings

    t9 = load_table("table9")
    spec = t9.runs["ptrue-mmlu"]
    llama = next(c for c in t9.checkpoints if c.name == "llama-3-8b")
    folder = tmp_path / "llama"
    shutil.copytree(resolve("smollm2-135m-instruct").load_path, folder)
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.3, "top_p": 0.5}))
    own = dataclasses.replace(llama, model=str(folder))
    assert run_settings(spec, own) == {**spec.settings, "decode": "sampled", "temperature": 0.3, "top_k": 50, "top_p": 0.5}
    bundled = dataclasses.replace(llama, model="smollm2-135m-instruct")
    assert run_settings(spec, bundled)["temperature"] == 1.0 and run_settings(spec, bundled)["top_p"] == 1.0
    cache = tmp_path / "hub"
    snap = cache / "models--meta-llama--Meta-Llama-3-8B-Instruct" / "snapshots" / f"{llama.revision}{'0' * 32}"
    snap.mkdir(parents=True)
    (snap / "generation_config.json").write_text(json.dumps({"temperature": 0.25, "top_p": 0.75}))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    assert own_generation_config(llama.model, llama.revision) == {"temperature": 0.25, "top_p": 0.75}
    assert run_settings(spec, llama)["temperature"] == 0.25
    assert own_generation_config(llama.model, "0123abc") is None  # another revision: not this snapshot


@pytest.mark.parametrize(
    "answer, aliases, matched",
    [
        ("Answer: Paris\nIt is in France.", ["Paris"], "Paris"),  # a leading "Answer:" stripped
        ("Paris ✓", ["Paris"], "Paris"),  # a non-ASCII symbol stripped
        ("Beyoncé", ["Beyonce"], "Beyonce"),  # a nonspacing mark stripped (after NFD)
        ("The Seine.", ["Seine"], "Seine"),  # the library's normalisation: article, punctuation
        ("It is Paris.", ["Paris"], None),  # the first line must equal an alias
        ("Answer: Answer: Paris", ["Paris"], None),  # one leading "Answer:" only
        ("\nParis", ["Paris"], "Paris"),
    ],
)
def test_triviaqa_rule_as_printed(answer, aliases, matched):
    """App. E: correct when the first line, stripped of a leading Answer:, matches a gold alias after both
    are stripped of non-ASCII symbols and nonspacing marks and passed through the library's normalisation."""
    from sleight.readout.ptrue.answers import first_line_match

    assert first_line_match(answer, aliases) == matched


def test_p_true_position_counts_a_to_d_as_answer_letters(monkeypatch):
    """§4 and App. E: at the library's position an A-D letter is an answer letter (C and D too, which the
    prompt's (A)/(B) labels do not offer). The real model's rows are classed with A-D."""
    from sleight.backends import load_model
    from sleight.readout.audit.classify import classify_token
    from sleight.readout.ptrue import readouts

    assert readouts.QUOTED_LETTERS == ("A", "B", "C", "D")
    for tok in ("C", " D", "(C", "D."):
        assert classify_token(tok, is_special=False, is_option_first=False, letters=readouts.QUOTED_LETTERS) == "answer_letter"
    seen: list[tuple[str, ...]] = []
    real = readouts.position_columns

    def spy(*args, letters):
        seen.append(tuple(letters))
        return real(*args, letters=letters)

    monkeypatch.setattr(readouts, "position_columns", spy)
    rows = readouts.score_pairs(load_model(), ["Which is largest?\nA. 1\nB. 2\nC. 3\nD. 4"], ["C"], continuation_tokens=0)
    assert seen and set(seen) == {("A", "B", "C", "D")}
    assert rows[0]["argmax_class"] in ("answer_letter", "prose", "whitespace", "digit", "option", "special")


def test_the_wrong_printed_answer_is_a_bare_seeded_non_gold_letter():
    """App. E: lm-polygraph's printed possible answer replaced by a non-gold letter drawn per item with a
    fixed seed; the gold row prints the gold letter."""
    from sleight.readout.ptrue.answers import qa_item_from_record
    from sleight.readout.ptrue.pipeline import _letters, constructed_pairs, printed_wrong_letter

    items = [qa_item_from_record({"id": f"q{k}", "question": "Q?", "choices": ["w", "x", "y", "z"], "answer": "C"}, "t") for k in range(30)]
    pairs = constructed_pairs(items)
    wrong = [p["answer"] for p in pairs if p["answer_source"] == "wrong"]
    assert wrong == [printed_wrong_letter(f"q{k}", "C") for k in range(30)]
    assert set(wrong) == {"A", "B", "D"} and all(p["answer"] == "C" for p in pairs if p["answer_source"] == "gold")
    gold, printed = _letters(pairs)
    assert set(gold) == {"C"} and printed[1::2] == wrong


def test_answer_letter_auroc_by_hand():
    """App. E: AUROC within each *answer* letter, weighted by its correct-incorrect pairs, with an interval."""
    s = np.array([0.9, 0.1, 0.8, 0.3, 0.2, 0.6, 0.5, 0.4])
    y = np.array([1, 0, 1, 0, 1, 0, 1, 1], dtype=float)
    g = np.array([0, 0, 0, 0, 1, 1, 2, 2], dtype=float)  # answer letters A, A, A, A, B, B, C, C
    # A: 2x2 pairs, AUROC 1; B: 1 pair, AUROC 0; C: no incorrect answer, no pair
    assert answer_letter_auroc(s, y, g) == pytest.approx((4 * 1.0 + 1 * 0.0) / 5, rel=FLOAT64_RTOL)
    assert math.isnan(answer_letter_auroc(s[6:], y[6:], g[6:]))
    counts = resample(8, 30, 5).counts
    reps = answer_letter_auroc(s, y, g, counts)
    for b in range(30):  # each replicate is the statistic on the resampled items
        idx = np.repeat(np.arange(8), counts[b])
        want = answer_letter_auroc(s[idx], y[idx], g[idx])
        assert (reps[b] == pytest.approx(want, abs=FLOAT64_ATOL)) if math.isfinite(want) else math.isnan(reps[b])
    out = answer_letter_auroc_interval(s, y, g, B=200, seed=0)
    assert out.estimate == pytest.approx(0.8, rel=FLOAT64_RTOL) and out.low <= out.estimate <= out.high and out.B == 200


def test_brier_reduction_with_its_interval():
    """Table 4 and App. H: a Brier difference is the reference minus the readout (original − stemmed),
    both on the same passage replicates."""
    from sleight.readout.reproduce.aggregate import metric_cell, shared_counts
    from sleight.readout.reproduce.config import Column

    y = [1.0, 0.0, 1.0, 0.0, 1.0]
    orig, stem = [0.1, 0.1, 0.1, 0.1, 0.1], [0.7, 0.3, 0.6, 0.5, 0.5]
    rows = [{"item_id": f"p{k}", "cluster": k, "position": pos, "score": sc, "correct": t}
            for k, t in enumerate(y) for pos, sc in (("original", orig[k]), ("stem", stem[k]))]
    col = Column("r", "R", "forecast", {"position": "original"}, metric="brier", minus={"position": "stem"})
    counts = shared_counts(5, 100, 0)
    cell = metric_cell(rows, col, "forecast", {str(k): k for k in range(5)}, counts)
    ya, so, ss = np.array(y), np.array(orig), np.array(stem)
    assert cell.estimate == pytest.approx(float(brier(so, ya)) - float(brier(ss, ya)), abs=FLOAT64_ATOL) and cell.estimate > 0
    np.testing.assert_allclose(np.asarray(cell.replicates), np.asarray(brier(so, ya, counts) - brier(ss, ya, counts)), atol=FLOAT64_ATOL)
    assert cell.low <= cell.estimate <= cell.high


def test_log_scale_median():
    """Table 11 (App. F): 10^median(log10 μ) with linear interpolation on the log scale."""
    assert log_median([1e-6, 1e-2, 1.0]) == pytest.approx(1e-2, rel=FLOAT64_RTOL)
    assert log_median([1e-6, 1e-2]) == pytest.approx(1e-4, rel=FLOAT64_RTOL)  # not the linear 0.0050005
    assert log_median([1e-4, None, 1e-2]) == pytest.approx(1e-3, rel=FLOAT64_RTOL) and math.isnan(log_median([]))


def test_leave_one_checkpoint_out_with_intervals():
    """App. E: dropping each checkpoint from an average, with the interval of the others' per-replicate means."""
    reps = {"a": np.array([0.1, 0.2, 0.3, 0.4]), "b": np.array([0.3, 0.3, 0.3, 0.3]), "c": np.array([0.5, 0.7, 0.9, 1.1])}
    est = {"a": 0.25, "b": 0.3, "c": 0.8}
    out = leave_one_out_intervals(reps, est, level=0.5)
    assert out["c"].estimate == pytest.approx(0.275, rel=FLOAT64_RTOL)
    lo, hi = np.quantile((reps["a"] + reps["b"]) / 2, [0.25, 0.75])
    assert (out["c"].low, out["c"].high) == (pytest.approx(lo, rel=FLOAT64_RTOL), pytest.approx(hi, rel=FLOAT64_RTOL))
    with pytest.raises(ValueError):
        leave_one_out_intervals({"a": reps["a"]}, {"a": 0.25})


def test_t1_template_and_its_stem_as_printed():
    """App. I's T1 with its stem "Estimate: " (Table 13's readouts (d) and (e)), and the paper's short stems (App. H)."""
    from sleight.readout.forecast.readouts import ALT_STEM, SHORT_STEMS, T1_STEM, T1_TEMPLATE, shipped_alt_template

    assert shipped_alt_template() == T1_TEMPLATE and ALT_STEM == T1_STEM == "Estimate: "
    assert T1_TEMPLATE.count("{note}") == 1 and T1_TEMPLATE.count("{item}") == 1
    for sentence in (
        "Someone read a passage and wrote the short note below.",
        "They will never see the passage.",
        "The question's instruction to answer with a letter is for the readers.",  # App. I's A1 sentence
        "Your task is to forecast their number of correct answers.",  # and A2's
        "Choose the closest of these five counts to your estimate: 10, 30, 50, 70, 90.",
        "Reply with exactly one of these values and nothing else.",
    ):
        assert sentence in T1_TEMPLATE
    assert SHORT_STEMS == {"stem_number": "Number: ", "stem_forecast": "Forecast: "}


def test_auroc_is_the_ranking_metric_of_the_tables():
    """App. H: AUC counts ties as one half."""
    assert float(auroc(np.array([0.5, 0.5]), np.array([1.0, 0.0]))) == pytest.approx(0.5, rel=FLOAT64_RTOL)
