"""The paper's P(True) readouts and answer rules (issue #19, item 3): Deleted, the TriviaQA
first-line rule, sampled answers, the seeded printed answer and the gold / printed / neither split.

The issue names no section number for these; each docstring says which of its rules it holds. The
paper's own text is not available here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sleight.readout.ptrue import pipeline as pp
from sleight.readout.ptrue.answers import (
    LETTERED_INSTRUCTION,
    QAItem,
    Sampling,
    first_line,
    first_line_match,
    greedy_answers,
    normalize_answer,
    qa_item_from_record,
    sampled_answers,
    sampling_probs,
)
from sleight.readout.ptrue.readouts import READOUTS, ptrue_prompt, score_pairs
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL, LOGPROB_ATOL


@pytest.mark.parametrize(
    "answer, aliases, expected",
    [
        ("Paris", ["Paris"], "Paris"),
        ("Paris.\nIt is the capital of France.", ["Paris"], "Paris"),  # the first line only
        ("\n The Beatles!", ["Beatles"], "Beatles"),  # leading break dropped; articles and punctuation normalised
        ("It is Paris.", ["Paris"], None),  # an alias inside the line is not the line
        ("Jane_Austen", ["jane austen"], "jane austen"),  # underscores are spaces
        ("Rome\nParis", ["Paris"], None),  # an alias on a later line does not count
        ("", ["Paris"], None),
    ],
)
def test_triviaqa_first_line_rule(answer, aliases, expected):
    """Paper: TriviaQA correctness by the first-line rule (issue #19 item 3): the answer's first
    line, normalised SQuAD-style as lm-polygraph's ``normalize_em_triviaqa`` does, equals an alias."""
    assert first_line_match(answer, aliases) == expected


def test_squad_normalisation_by_hand():
    """Paper: TriviaQA correctness, the normalisation (issue #19 item 3): lowercase, punctuation
    (with curly quotes) to spaces, the articles a/an/the removed, whitespace collapsed."""
    assert normalize_answer("  The Lord of the Rings: An Epic!  ") == "lord of rings epic"
    assert normalize_answer("Saturn’s rings") == "saturn s rings"
    assert first_line("\n\nBerlin\nGermany") == "Berlin"


def test_items_carry_their_instruction():
    """Paper: Deleted deletes the quoted item's instruction (issue #19 item 3): the letter
    instruction of a lettered item, a record's own ``instruction`` (the "answer briefly" line);
    None, and so no Deleted reading, when an item has none."""
    lettered = QAItem("m", "Why?", choices=("w", "x", "y", "z"), gold_letter="B")
    assert lettered.instruction_text == LETTERED_INSTRUCTION
    assert lettered.prompt_without_instruction == "Why?\nA. w\nB. x\nC. y\nD. z"
    brief = qa_item_from_record(
        {"id": "t", "question": "Who wrote Emma?", "answers": ["Jane Austen"], "input": "Answer the question briefly.\nQ: Who wrote Emma?\nA:", "instruction": "Answer the question briefly."},
        "x",
    )
    assert brief.prompt_without_instruction == "Q: Who wrote Emma?\nA:"
    bare = qa_item_from_record({"id": "b", "question": "Who wrote Emma?", "answers": ["Jane Austen"]}, "x")
    assert bare.prompt_without_instruction is None
    assert pp.no_instruction_note([bare, lettered]) == "Deleted not read for 1 of 2 items: no 'instruction' in the item (first: b)"
    assert pp.no_instruction_note([lettered]) is None
    pairs = pp.constructed_pairs([lettered, bare])
    assert [p["deleted_question"] for p in pairs] == [lettered.prompt_without_instruction] * 2 + [None]


def test_deleted_is_the_library_reading_of_the_deleted_question(model):
    """Paper: Deleted (issue #19 item 3): the quoted item's instruction deleted, the True/False
    block kept, read as Library reads it (the same position, token and value)."""
    deleted = {r.name: r for r in READOUTS}["deleted"]
    assert (deleted.value, deleted.options, deleted.stem) == ("polygraph", ("True", "False"), None)
    item = QAItem("m", "Which planet is largest?", choices=("Mars", "Jupiter", "Venus", "Earth"), gold_letter="B")
    dq = item.prompt_without_instruction
    rows = score_pairs(model, [item.prompt, dq], ["B. Jupiter", "B. Jupiter"], deleted_questions=[dq, None], continuation_tokens=0)
    by = {(k // len(READOUTS), r["readout"]): r for k, r in enumerate(rows)}
    assert by[(0, "deleted")]["score"] == pytest.approx(by[(1, "library")]["score"], abs=LOGPROB_ATOL)
    assert "(A) True\n (B) False" in by[(0, "deleted")]["context"] and LETTERED_INSTRUCTION not in by[(0, "deleted")]["context"]
    assert by[(1, "deleted")]["score"] is None and by[(1, "deleted")]["context"] is None
    assert by[(0, "library")]["context"].count(ptrue_prompt(item.prompt, "B. Jupiter")) == 1


def test_printed_answer_is_a_seeded_draw():
    """Paper: the seeded non-gold printed answer (issue #19 item 3): never the gold letter, the same
    for the same (seed, item), not always the first non-gold letter."""
    draws = [pp.printed_wrong_letter(f"q{k}", "A") for k in range(40)]
    assert "A" not in draws and set(draws) == {"B", "C", "D"}
    assert draws == [pp.printed_wrong_letter(f"q{k}", "A") for k in range(40)]
    assert draws != [pp.printed_wrong_letter(f"q{k}", "A", seed=1) for k in range(40)]


def test_gold_printed_neither_split():
    """Paper: the gold / printed / neither split of the argmax (issue #19 item 3)."""
    assert pp.argmax_split(" B", "B", "D") == "gold"
    assert pp.argmax_split("(D", "B", "D") == "printed"
    assert pp.argmax_split(" True", "B", "D") == "neither"
    assert pp.argmax_split("B", None, "D") is None
    rows = []
    for k, (src, ans, tok) in enumerate((("gold", "B. x", "B"), ("wrong", "D. z", "D"), ("gold", "A. w", " C"), ("wrong", "C. y", " A"))):
        for r in pp.READOUT_LABELS:
            rows.append({"setting": "constructed", "item_id": f"q{k // 2}", "label": float(src == "gold"), "readout": r, "score": 0.1 * k - (r == "library"),
                         "answer": ans, "answer_source": src, "option_mass": 0.5, "first_tokens_distinct": True, "argmax_class": "x",
                         "argmax_token": tok, "continuation_class": "x"})
    s = pp.summarise(rows, B=20).settings["constructed"]
    assert s.readouts["library"].argmax_split == {"gold": 2, "printed": 1, "neither": 1}
    assert set(s.readouts["library"].per_letter_auroc) == {"A", "B", "C", "D"}
    assert len(s.pairs["auroc"]) == len(READOUTS) * (len(READOUTS) - 1) // 2
    assert "prr_0.5" in s.readouts["moved"].as_json()


def test_sampling_probabilities_by_hand():
    """Paper: sampled answers as lm-polygraph samples them (issue #19 item 3): transformers'
    temperature, top-k and top-p warpers from log-probabilities. p = (0.5, 0.3, 0.2): top-k 2 gives
    (5/8, 3/8); top-p 0.6 drops 0.2 (cumulative 0.2 <= 0.4) and gives (5/8, 3/8); temperature 1/2
    squares: (25, 9, 4) / 38."""
    lp = np.log([0.5, 0.3, 0.2])
    np.testing.assert_allclose(sampling_probs(lp, Sampling(top_k=2)), [5 / 8, 3 / 8], rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL)
    np.testing.assert_allclose(sampling_probs(lp, Sampling(top_p=0.6)), [5 / 8, 3 / 8, 0.0], rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL)
    np.testing.assert_allclose(sampling_probs(lp, Sampling(temperature=0.5)), np.array([25, 9, 4]) / 38, rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL)
    assert math.isclose(float(sampling_probs(lp, Sampling(top_p=0.01)).sum()), 1.0)


def test_sampled_answers_are_seeded_and_top1_is_greedy(model):
    """Paper: sampled answers (issue #19 item 3), seeded; greedy stays: top-k 1 without the
    two-token minimum is the greedy answer."""
    items = [QAItem("q1", "Name a colour."), QAItem("q2", "Say a number.")]
    s = Sampling(seed=3)
    a, b = sampled_answers(model, items, 6, s), sampled_answers(model, items, 6, s)
    assert [x.text for x in a] == [x.text for x in b]
    assert all(x.n_tokens >= 2 for x in a)  # min_new_tokens=2: no end of sequence in the first two steps
    top1 = sampled_answers(model, items, 6, Sampling(top_k=1, min_new_tokens=0))
    assert [x.text for x in top1] == [x.text for x in greedy_answers(model, items, 6)]


# ---------------------------------------------------------------------------------------------
# the seeded printed answer on every path; the audit's Deleted reads the instruction; --decode
# ---------------------------------------------------------------------------------------------


def _lettered(k: int, gold: str = "A", **extra) -> dict:
    return {"id": f"q{k}", "question": f"Question {k}?", "choices": ["w", "x", "y", "z"], "answer": gold, **extra}


def test_lettered_records_print_the_seeded_wrong_answer():
    """Paper: the seeded non-gold printed answer (issue #19 item 3) on the data layer's path too:
    ``lettered_ptrue_records`` (``readout audit --preset ptrue`` on lettered data) prints the wrong
    answer :func:`printed_wrong_letter` draws, the one ``readout ptrue --answers constructed`` prints."""
    from sleight.readout.data.common import lettered_ptrue_records

    recs = [_lettered(k) for k in range(40)]
    out = lettered_ptrue_records(recs)
    items = [qa_item_from_record(r, "t") for r in recs]
    wrong = [p["answer"] for p in pp.constructed_pairs(items) if p["answer_source"] == "wrong"]
    assert [o["wrong"] for o in out] == wrong
    assert [o["wrong"][0] for o in out] == [pp.printed_wrong_letter(f"q{k}", "A") for k in range(40)]
    assert {o["wrong"][0] for o in out} == {"B", "C", "D"}  # not the first non-gold choice every time
    assert all(len(o["wrong"]) == 1 for o in out)  # App. E: the printed answer is a bare letter
    assert [o["answers"] for o in out[:2]] == [["A"], ["A"]] and out[0]["question"] == items[0].prompt
    # the quoted item's instruction travels with the record (what the paper's Deleted deletes)
    assert out[0]["instruction"] == LETTERED_INSTRUCTION
    (own,) = lettered_ptrue_records([_lettered(0, input="Pick one.\n\nQuestion 0?", instruction="Pick one.")])
    assert own["instruction"] == "Pick one." and own["question"] == "Pick one.\n\nQuestion 0?"


def test_audit_ptrue_preset_reads_the_records_instruction():
    """Paper: Deleted deletes the quoted item's own instruction (issue #19 item 3): the audit's
    P(True) preset reads a record's ``instruction`` as ``readout ptrue`` does, and its items carry
    the question with it deleted, the text the Deleted readout quotes (the same as
    :func:`constructed_pairs`'s ``deleted_question``)."""
    from sleight.errors import UserError
    from sleight.readout.audit.presets import ptrue_items
    from sleight.readout.data.common import lettered_ptrue_records

    rec = {"id": "t1", "question": "Answer as briefly as possible.\n\nQuestion: Who wrote Hamlet?\nAnswer: ", "answers": ["Shakespeare"],
           "wrong": "Marlowe", "instruction": "Answer as briefly as possible."}
    items = ptrue_items([rec])
    want = qa_item_from_record(rec, "t").prompt_without_instruction
    assert want == "Question: Who wrote Hamlet?\nAnswer: "
    assert [i.meta["deleted_question"] for i in items] == [want, want]
    assert [p["deleted_question"] for p in pp.constructed_pairs([qa_item_from_record(rec, "t")])] == [want, want]
    assert items[0].meta["instruction"] == "Answer as briefly as possible." and items[0].meta["question_text"] == rec["question"]
    bare = ptrue_items([{k: v for k, v in rec.items() if k != "instruction"}])
    assert bare[0].meta["deleted_question"] is None  # no instruction: Deleted has no reading, as in readout ptrue
    lettered = _lettered(3)
    (item, _wrong) = ptrue_items(lettered_ptrue_records([lettered]))
    assert item.meta["deleted_question"] == qa_item_from_record(lettered, "t").prompt_without_instruction
    assert LETTERED_INSTRUCTION not in item.meta["deleted_question"] and "Question 3?" in item.meta["deleted_question"]
    with pytest.raises(UserError, match="'instruction' must be a non-empty string"):
        ptrue_items([{**rec, "instruction": " "}])


def test_decode_flag_reaches_the_sampling_setting():
    """Paper: sampled answers as the library samples them, greedy kept (issue #19 item 3), from the
    command line: ``readout ptrue --decode sampled`` (with ``--temperature``, ``--top-k``, ``--top-p``,
    ``--sample-seed``) is the :class:`Sampling` the pipeline runs, recorded in the run's config; a
    greedy run records none of it (runs from before resume), and sampling flags without
    ``--decode sampled`` are refused in one line."""
    from sleight.cli.main import build_parser
    from sleight.cli.readout_downstream import _config
    from sleight.errors import UserError
    from sleight.readout.downstream_run import PTrueConfig

    parser = build_parser()
    args = parser.parse_args(["readout", "ptrue", "--decode", "sampled", "--top-k", "20", "--sample-seed", "7"])
    config = _config("ptrue", args)
    config.check()
    assert config.sampling() == Sampling(top_k=20, seed=7)
    rec = config.record("items.jsonl", [])
    assert {k: rec[k] for k in ("decode", "temperature", "top_k", "top_p", "sample_seed")} == {
        "decode": "sampled", "temperature": 1.0, "top_k": 20, "top_p": 1.0, "sample_seed": 7}
    assert "--decode sampled" in config.command("out", "items.jsonl") and "--sample-seed 7" in config.command("out", "items.jsonl")
    greedy = _config("ptrue", parser.parse_args(["readout", "ptrue"]))
    assert greedy == PTrueConfig() and greedy.sampling() is None
    assert not {"decode", "temperature", "top_k", "top_p", "sample_seed"} & set(greedy.record("items.jsonl", []))
    with pytest.raises(UserError, match="--top-k only apply with --decode sampled"):
        _config("ptrue", parser.parse_args(["readout", "ptrue", "--top-k", "5"])).check()
    with pytest.raises(UserError, match="sampling top-p must be in"):
        PTrueConfig(decode="sampled", top_p=0.0).check()
    # readout estimators takes the same flags (App. E scores sampled answers), checked by the same rule before any load
    est = parser.parse_args(["readout", "estimators", "--decode", "sampled", "--top-k", "20", "--sample-seed", "7"])
    assert (est.decode, est.top_k, est.sample_seed) == ("sampled", 20, 7)
    bad = parser.parse_args(["readout", "estimators", "--top-k", "5", "--out", "/nonexistent/never-made"])
    with pytest.raises(UserError, match="--top-k only apply with --decode sampled"):
        bad.func(bad)


@pytest.mark.slow
def test_sampled_run_from_the_command_line(model, tmp_path, capsys):
    """Paper: sampled answers (issue #19 item 3): ``readout ptrue --decode sampled`` writes the
    answers :func:`sampled_answers` draws with the library's settings, and a resume with another
    decode or seed is refused in one line, like any other config key."""
    import pyarrow.parquet as pq

    from sleight.cli.main import main
    from sleight.readout.ptrue.answers import DEFAULT_ITEMS, load_qa_items

    out = tmp_path / "run"
    argv = ["readout", "ptrue", "--limit", "1", "--answers", "own", "--max-new-tokens", "5", "--continuation-tokens", "1",
            "--B", "20", "--out", str(out), "--no-progress"]
    assert main([*argv, "--decode", "sampled"]) == 0
    rows = pq.read_table(out / "readings.parquet").to_pylist()
    (want,) = sampled_answers(model, load_qa_items(DEFAULT_ITEMS, limit=1), 5, Sampling())
    assert {r["answer"] for r in rows} == {want.text} and {r["answer_tokens"] for r in rows} == {want.n_tokens}
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "different config" in err and "decode: 'sampled' there" in err
    assert main([*argv, "--decode", "sampled", "--sample-seed", "2"]) == 2
    assert "sample_seed: 1 there, 2 here" in capsys.readouterr().err
