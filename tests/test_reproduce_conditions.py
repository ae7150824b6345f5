"""App. I's conditions (Tables 14 and 15), Figure 1's named item and Table 7's constructed notes as
``reproduce`` runs them: the rules each run kind wires, on the real bundled model and the shipped
fixtures (hand-built rows only where the arithmetic is exact)."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest
import yaml

from sleight.errors import UserError
from sleight.readout.audit import conditions as cond
from sleight.readout.audit.presets import FORECAST_OPTIONS, constructed_note, select_ids
from sleight.readout.data import load_data
from sleight.readout.data.fixtures import FIGURE1_LEAD, fixtures_dir
from sleight.readout.reproduce import reproduce
from tolerances import LOGPROB_ATOL, MASS_ATOL

BUNDLED = "smollm2-135m-instruct"
TABLE15_COLUMNS = ("below_floor", "answer_letters", "letters_separated", "omitted_separator", "shared_first_token", "prose_holds",
                   "below_other", "options_hold", "repaired")  # fmt: skip


def _race_spec(folder: str = "") -> str:
    return f"race-h:{fixtures_dir()}/{folder}ehovy/race/high/test-00000-of-00001.parquet"


def _config(tmp_path, name: str, runs: dict, columns: list, checkpoints: list | None = None):
    raw = {
        "table": name, "title": name, "section": "App. I",
        "checkpoints": checkpoints or [{"name": BUNDLED, "model": BUNDLED}],
        "runs": runs, "columns": columns,
    }
    path = tmp_path / "cfg" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


# -- App. I / Table 14: the letter rule as Table 14 counts it and Table 15 pulls it ------------------
def test_table14_counts_the_article_and_table15_leaves_it_out(model):
    """App. I, Tables 14/15: Table 14's letter count takes the argmax stripped of whitespace and the
    word-boundary marker (Llama-3-8B-Instruct's article "A" counted, its caption says); Table 15's
    letter pull leaves that article out when the continuation opens "A clever" / "A classic" /
    "A nice", and counts it as a prose opening. The tokens are the bundled tokenizer's own."""
    (spaced_a,) = model.encode(" A")
    token = model.token_text(spaced_a)
    assert cond.letter_columns(token, cond.LETTERS_AD, "A: her English was poor") == {"letter": True, "letter_pull": True, "prose_opening": False}
    assert cond.letter_columns(token, cond.LETTERS_AD, " A clever question! The note") == {"letter": True, "letter_pull": False, "prose_opening": True}
    (answer,) = model.encode("Answer")
    assert cond.letter_columns(model.token_text(answer), cond.LETTERS_AD, "Answer: B") == {"letter": False, "letter_pull": False, "prose_opening": True}
    (five,) = model.encode("5")
    assert cond.letter_columns(model.token_text(five), cond.LETTERS_AD, "50") == {"letter": False, "letter_pull": False, "prose_opening": False}
    assert cond.letter_columns("J", tuple("ABCDEFGHIJ"), "J") == {"letter": True, "letter_pull": True, "prose_opening": False}  # D1: the item's own letters


def _reading(mass, *, pull=False, prose=False, distinct=True, ws=True):
    return {"option_mass": mass, "letter_pull": pull, "prose_opening": prose, "first_tokens_distinct": distinct,
            "ends_with_whitespace": ws, "options": list(FORECAST_OPTIONS)}


def test_table15_rows_from_one_checkpoints_readings():
    """App. I, Table 15: below the floor is a median under 0.5; answer letters are letter pull on at
    least half the items (32 of 64), split by the separator and distinct first tokens; an omitted
    separator is a rendered ending without the whitespace the options need; options hold at or above
    the floor with distinct first tokens; repaired is the own-stem median at or above the floor."""
    stem = [_reading(0.9)] * 4
    qwen_like = cond.holding([_reading(1e-15, pull=True)] * 2 + [_reading(1e-15, prose=True)] * 2, stem)
    assert qwen_like == {"below_floor": True, "answer_letters": True, "letters_separated": True, "omitted_separator": False,
                         "shared_first_token": False, "prose_holds": True, "below_other": False, "options_hold": False, "repaired": True}
    short = cond.holding([_reading(1e-15, pull=True)] + [_reading(1e-15, prose=True)] * 3, stem)  # 1 of 4: no pull
    assert not short["answer_letters"] and short["prose_holds"]
    mistral_like = cond.holding([_reading(3e-6, ws=False)] * 4, [_reading(0.99)] * 3 + [_reading(0.002)])
    assert mistral_like["omitted_separator"] and not mistral_like["below_other"] and mistral_like["repaired"]
    phi_like = cond.holding([_reading(6e-4, pull=True, distinct=False)] * 4, [_reading(0.2)] * 4)
    assert phi_like["answer_letters"] and phi_like["shared_first_token"] and not phi_like["letters_separated"] and not phi_like["repaired"]
    held = cond.holding([_reading(0.3), _reading(0.9), _reading(1.0)], stem)  # median 0.9
    assert not held["below_floor"] and held["options_hold"] and not any(held[k] for k in ("answer_letters", "below_other"))
    assert cond.holding([_reading(0.2)] * 2, stem)["below_other"]


def test_table15_counts_are_a_sum_row_beside_the_papers_72_counts():
    """App. I, Table 15 counts checkpoints: its printed counts sit on a sum row (``how: sum``) in the
    measured columns, so each of the 72 gets a difference; the share row stays a mean. Hand-built
    readings: 1/0 per checkpoint, so the sum row is the number of checkpoints where a row holds."""
    from sleight.readout.reproduce.aggregate import aggregate
    from sleight.readout.reproduce.config import load_table

    config = load_table("table15")
    assert [(a.name, a.how) for a in config.averages] == [("Share of checkpoints", "mean"), ("Checkpoints holding", "sum")]
    printed = config.paper["Checkpoints holding"]
    assert len(printed) == 72 and printed["c0_below_floor"] == 8 and printed["t2_repaired"] == 7 and printed["d1_prose_holds"] == 4
    assert set(printed) == {c.key for c in config.columns}
    holds = {"below_floor": 1.0, "answer_letters": 0.0}
    readings = {
        ck.name: {run: [{"variant": "original", **{c: holds.get(c, 0.0) if i < 5 else 0.0 for c in TABLE15_COLUMNS}}] for run in config.runs}
        for i, ck in enumerate(config.checkpoints)
    }
    table = aggregate(config, config.checkpoints, readings, B=10)
    rows = {r.name: r for r in table.rows}
    assert rows["Checkpoints holding"].cells["c0_below_floor"].estimate == 5  # five of the eight hold it
    assert rows["Share of checkpoints"].cells["c0_below_floor"].estimate == 5 / 8
    assert rows["Checkpoints holding"].cells["t2_answer_letters"].estimate == 0


def test_table7s_printed_rows_are_the_checkpoints_measured_columns():
    """App. C.7, Table 7: the paper's two rows (the spaced and unspaced strings) are the two strings'
    columns of Qwen3-4B-Instruct-2507's row, with C.7's agreement (96.25%) and accuracies (0.6958,
    0.7208) as cells: every printed number sits where a run measures it."""
    from sleight.readout.reproduce.config import load_table

    config = load_table("table7")
    assert [c.name for c in config.checkpoints] == ["qwen3-4b"] and not config.paper_rows
    printed = config.paper["qwen3-4b"]
    measured = {c.key for c in config.columns if c.run}
    assert set(printed) == measured and len(printed) == 15
    assert (printed["agree"], printed["spaced_acc"], printed["unspaced_acc"]) == (0.9625, 0.6958, 0.7208)
    assert math.isclose((printed["spaced_acc_gold"] + printed["spaced_acc_unrelated"]) / 2, printed["spaced_acc"], abs_tol=1e-4)


# -- App. I: the conditions over their own records, on the bundled model ----------------------------
@pytest.mark.slow
def test_d1_reads_mmlu_pro_rows_and_n1_the_writers_twelve_word_notes(tmp_path, monkeypatch):
    """App. I: D1 reads the first MMLU-Pro test rows in stored order, each lettered to its last option
    with "Answer with exactly one of: <letters>."; N1 reads the twelve-word notes one checkpoint writes
    with App. H's writer, the same notes for every checkpoint (here two checkpoints on the bundled
    model: the second reads the first's notes, as the paper's read Qwen3-4B-Instruct-2507's)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pro = f"mmlu-pro:{fixtures_dir()}/TIGER-Lab/MMLU-Pro/data/test-00000-of-00001.parquet"
    runs = {
        "d1": {"command": "conditions", "data": {"paper": "mmlu-pro:hub:n=64", "fixture": pro}, "settings": {"condition": "D1"}},
        "n1": {"command": "conditions", "data": {"paper": "race-h:hub:n=64", "fixture": _race_spec()},
               "settings": {"condition": "N1", "notes_by": "writer", "note_words": 12, "note_tokens": 32}},
    }
    columns = [{"key": "d1_letters", "label": "D1 letters", "run": "d1", "where": {"variant": "original"}, "stat": "count", "column": "letter", "equals": True}]
    cks = [{"name": "writer", "model": BUNDLED}, {"name": "reader", "model": BUNDLED}]
    said: list[str] = []
    res = reproduce(_config(tmp_path, "conds", runs, columns, cks), tmp_path / "out", limit=2, B=20, status=said.append)
    d1 = pq.read_table(tmp_path / "out" / "conds" / "writer" / "d1" / "readings.parquet").to_pylist()
    first = load_data(pro).records[0]
    letters = "ABCDEFGHIJ"[: len(first["choices"])]
    assert d1[0]["item_id"] == first["id"] and f"Answer with exactly one of: {', '.join(letters)}." in d1[0]["context"]
    assert f"J: {first['choices'][9]}" in d1[0]["context"] and {r["variant"] for r in d1} == {"original", "stem"}
    written = json.loads((tmp_path / "out" / "conds" / "writer" / "n1" / "notes.json").read_text(encoding="utf-8"))
    read = json.loads((tmp_path / "out" / "conds" / "reader" / "n1" / "notes.json").read_text(encoding="utf-8"))
    assert written["writer"] == read["writer"] == "writer" and read["notes"] == written["notes"] and written["words"] == 12
    assert written["tokens"] == 32  # a cap the run sets reaches the writer (the bundled model keeps no note of these
    # two passages at App. H's 256 tokens either: `benchmarks/notes.py --words 12`)
    assert all(len(n.split()) <= 12 for n, ok in zip(written["notes"], written["ok"]) if ok)
    rows = pq.read_table(tmp_path / "out" / "conds" / "reader" / "n1" / "readings.parquet").to_pylist()
    for r, note in zip([r for r in rows if r["variant"] == "original"], written["notes"]):
        assert f"Note: {note}\n" in r["context"]
    assert res.table.rows[0].cells["d1_letters"].n == 2


# -- Figure 1: one named item of A.1's list ---------------------------------------------------------
def test_figure1_item_is_selected_by_id_with_its_constructed_note():
    """§1, App. B: Figure 1 names its item (high6240.txt), not a position in A.1's list; its
    constructed note is the passage's first two sentences and "The correct answer is A: her English
    was poor." as App. B prints it. An id the list does not hold is one line."""
    recs = load_data(_race_spec("figure1/")).view("forecast") + load_data(_race_spec()).view("forecast")
    (item,) = select_ids(recs, ["high6240.txt"])
    assert item["id"] == "high6240.txt:0" and select_ids(recs, ["high6240.txt:0"]) == [item]
    assert constructed_note(item) == f"{FIGURE1_LEAD} The correct answer is A: her English was poor."
    assert [r["id"] for r in select_ids(recs, [recs[2]["example_id"], "high6240.txt"])] == [recs[2]["id"], item["id"]]
    with pytest.raises(UserError, match="item 'high9999.txt': no record of the") as err:
        select_ids(recs, ["high9999.txt"])
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_figure1_named_tokens_are_read_where_the_options_are(tmp_path, monkeypatch):
    """Figure 1: p(token) at the original position of the named item; read through the same position
    reading as the options, a named token's probability is the audit's first-token probability of
    the option it equals (the bundled model, the fixture's high6240.txt)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    runs = {"item": {"command": "named-items", "data": {"paper": "race-h:hub:n=3052", "fixture": _race_spec("figure1/")},
                     "settings": {"ids": ["high6240.txt"], "note": "constructed", "tokens": [*FORECAST_OPTIONS, "A", "Answer"]}}}
    columns = [{"key": "p_A", "label": "p(A)", "run": "item", "where": {"variant": "named_token", "token": "A"}, "stat": "median", "column": "token_prob"}]
    res = reproduce(_config(tmp_path, "fig", runs, columns), tmp_path / "out", B=20, status=lambda _m: None)
    rows = pq.read_table(tmp_path / "out" / "fig" / BUNDLED / "item" / "readings.parquet").to_pylist()
    (orig,) = [r for r in rows if r["variant"] == "original"]
    assert orig["item_id"] == "high6240.txt:0" and f"Note: {FIGURE1_LEAD} The correct answer is A: her English was poor." in orig["context"]
    tokens = json.loads((tmp_path / "out" / "fig" / BUNDLED / "item" / "named_tokens.json").read_text(encoding="utf-8"))["rows"]
    got = {t["token"]: t["token_prob"] for t in tokens}
    for o, p in zip(FORECAST_OPTIONS, orig["option_first_probs"]):
        assert math.log(got[o]) == pytest.approx(math.log(p), abs=LOGPROB_ATOL)
    assert 0 < got["A"] <= 1 and res.table.rows[0].cells["p_A"].estimate == pytest.approx(got["A"], abs=MASS_ATOL)


# -- Table 7: the reader on constructed notes -------------------------------------------------------
def test_table7_rows_from_the_readers_two_option_strings():
    """App. C.7, Table 7: per row the option mass, whether the argmax is an option, the pick (the
    highest full-sequence log-probability) scored against the gold letter, and whether the spaced and
    unspaced strings pick the same option. Hand-built readings with known picks."""
    from sleight.readout.forecast.constructed import reader_rows
    from sleight.readout.items import RaceItem

    items = [RaceItem("i1", "p", "q", ("a", "b", "c", "d"), "B"), RaceItem("i2", "p", "q", ("a", "b", "c", "d"), "A")]
    unspaced = {"option_logprobs": [-3.0, -0.1, -4.0, -5.0], "option_mass": 0.99, "argmax_class": "option"}
    spaced = {"option_logprobs": [-9.0, -8.0, -7.0, -9.5], "option_mass": 1e-12, "argmax_class": "answer_letter"}
    rows = reader_rows(items, ["constructed", "unrelated"], [(unspaced, spaced), (unspaced, unspaced)])
    assert [(r["item_id"], r["spacing"], r["choice"], r["correct"], r["agree"], r["argmax_on_option"]) for r in rows] == [
        ("i1", "unspaced", "B", 1.0, 0.0, 1.0), ("i1", "spaced", "C", 0.0, 0.0, 0.0),
        ("i2", "unspaced", "B", 0.0, 1.0, 1.0), ("i2", "spaced", "B", 0.0, 1.0, 1.0),
    ]
    assert [r["note_kind"] for r in rows] == ["constructed"] * 2 + ["unrelated"] * 2 and rows[1]["mass"] == 1e-12


@pytest.mark.slow
def test_table7_reads_constructed_notes_not_the_checkpoints_own(model):
    """App. C.7 / §3: half the notes state the answer (first two sentences and "The correct answer is
    X: ..."), half are another passage's opening; the reader is the forecast pipeline's, so its masses
    and picks are read_notes' on the same notes (the bundled model, the shipped RACE-H fixture)."""
    from sleight.readout.data import race_items
    from sleight.readout.forecast.constructed import constructed_notes, read_constructed
    from sleight.readout.forecast.pipeline import read_notes

    ds, items = race_items(_race_spec(), 4)
    records = ds.view("forecast", 4)
    notes = constructed_notes(records)
    assert [k for k, _ in notes] == ["constructed", "unrelated"] * 2
    assert notes[0][1] == constructed_note(records[0]) and notes[1][1] == notes[2][1].split(" The correct answer is")[0]
    rows = read_constructed(model, items, records)
    picks = read_notes(model, items, [text for _k, text in notes])
    for k, p in enumerate(picks):
        un, sp = rows[2 * k], rows[2 * k + 1]
        assert (un["spacing"], sp["spacing"]) == ("unspaced", "spaced")
        assert un["mass"] == pytest.approx(p["reader_mass"], abs=MASS_ATOL) and sp["mass"] == pytest.approx(p["reader_mass_spaced"], abs=MASS_ATOL)
        assert (un["choice"], sp["choice"]) == (p["reader_choice"], p["reader_choice_spaced"])
        assert sp["correct"] == float(p["correct_spaced"])


def test_n1_writer_settings_are_checked():
    """App. I: the writer's budget and cap are N1's settings (App. H's 256 tokens unless set); on
    another condition, or as anything but a positive whole number, they are one line."""
    from sleight.readout.reproduce.kinds import kind

    check = kind("conditions").check
    assert "belong to condition N1" in str(check({"condition": "C0", "note_tokens": 32}))
    assert str(check({"condition": "N1", "note_tokens": 0})).startswith("note_tokens: expected a whole number")
    assert str(check({"condition": "N1", "note_words": True})).startswith("note_words: expected a whole number")
    assert check({"condition": "N1", "note_tokens": 32, "note_words": 12}) is None
