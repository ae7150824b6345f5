"""Readout audit inputs, presets, variants and rules: everything that runs before a model is loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from sleight.errors import UserError
from sleight.readout.audit.classify import classify_continuation, classify_token
from sleight.readout.audit.items import parse_options, resolve_options
from sleight.readout.audit.lm_eval import load_lm_eval_task
from sleight.readout.audit.loading import load_items
from sleight.readout.audit.presets import (
    FORECAST_ITEM_INSTRUCTION,
    FORECAST_LEAD,
    FORECAST_QUESTION,
    FORECAST_STEM,
    load_fixture,
    preset_items,
    split_sentences,
)
from sleight.readout.audit.sources import load_source, mmlu_records, race_records, triviaqa_records
from sleight.readout.audit.variants import FENCE_BEGIN, FENCE_END, SUBSTITUTES, VARIANTS, Skipped, make_variant, parse_variants
from sleight.readout.ptrue.readouts import PTRUE_TEMPLATE, polygraph_logprob, ptrue_deleted_prompt, ptrue_prompt
from tolerances import FLOAT64_ATOL


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


GOOD = {"id": "a", "prompt": "Q? A. x\nB. y\nAnswer A or B.", "quoted_instruction": "Answer A or B.", "choices_block": "A. x\nB. y"}


# -- loading and validation -------------------------------------------------------------------------
def test_jsonl_items_load_with_prompt_or_messages(tmp_path):
    lines = [json.dumps(GOOD), json.dumps({"id": 7, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "options": ["x", "y"], "target": True})]
    items = load_items(write(tmp_path, "i.jsonl", "\n".join(lines) + "\n\n"))
    assert [i.id for i in items] == ["a", "7"]
    assert items[0].messages == ({"role": "user", "content": GOOD["prompt"]},)
    assert items[1].options == ("x", "y") and items[1].target == 1.0
    resolved = resolve_options(items, ("10", "30"))
    assert resolved[0].options == ("10", "30") and resolved[1].options == ("x", "y")


@pytest.mark.parametrize(
    "line, needle",
    [
        ('{"id": "b", "prompt": "x"', "i.jsonl line 2: not valid JSON"),
        ('{"prompt": "x"}', "i.jsonl line 2: missing 'id'"),
        ('{"id": "b"}', "i.jsonl line 2: needs 'messages'"),
        ('{"id": "a", "prompt": "x"}', "i.jsonl line 2: duplicate id 'a' (first at i.jsonl line 1)"),
        ('{"id": "b", "prompt": "x", "options": ["1", "1"]}', "options are not distinct strings"),
        ('{"id": "b", "prompt": "x", "options": []}', "non-empty list"),
        ('{"id": "b", "prompt": "x", "quoted_instruction": "nope"}', "'quoted_instruction' does not occur"),
        ('{"id": "b", "messages": [{"role": "user"}]}', "messages[0] must have string 'role' and 'content'"),
        ('[1, 2]', "expected a JSON object"),
        ('{"id": "b", "prompt": "x", "target": "yes"}', "'target' must be a number"),
    ],
)
def test_malformed_line_names_its_line(tmp_path, line, needle):
    path = write(tmp_path, "i.jsonl", json.dumps(GOOD) + "\n" + line + "\n")
    with pytest.raises(UserError) as exc:
        load_items(path)
    assert needle in str(exc.value)


def test_missing_or_empty_file(tmp_path):
    with pytest.raises(UserError, match="items file not found"):
        load_items(tmp_path / "nope.jsonl")
    with pytest.raises(UserError, match="items file is empty"):
        load_items(write(tmp_path, "e.jsonl", "\n"))


def test_items_without_options_need_run_options(tmp_path):
    items = load_items(write(tmp_path, "i.jsonl", json.dumps(GOOD)))
    with pytest.raises(UserError, match="item 'a' has no options"):
        resolve_options(items, None)


def test_csv_items(tmp_path):
    import csv

    path = tmp_path / "i.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerows([["id", "prompt", "options", "target"], ["q1", "Is it? Say yes", "yes", "1"], ["q2", "Other", json.dumps([" A", " B"]), "0"]])
    items = load_items(path)
    assert items[0].options == ("yes",) and items[0].target == 1.0
    assert items[1].options == (" A", " B")
    bad = write(tmp_path, "b.csv", "id,prompt,target\nq1,x,notanumber\n")
    with pytest.raises(UserError, match="b.csv row 2: column 'target' must be a number"):
        load_items(bad)


def test_parse_options():
    assert parse_options("10,30, 50") == ("10", "30", "50")
    assert parse_options('[" (A)", " (B)"]') == (" (A)", " (B)")
    for bad, needle in (("", "empty"), ("1,1", "not distinct"), ("[1, 2]", "non-empty string"), ("[oops", "JSON list")):
        with pytest.raises(UserError, match=needle):
            parse_options(bad)


def test_cli_rejects_malformed_line_before_loading_a_model(tmp_path):
    path = write(tmp_path, "i.jsonl", json.dumps(GOOD) + "\n{not json}\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    start = time.time()
    # --model names a model that does not exist: if the model were loaded first, that error would win.
    proc = subprocess.run(
        [sys.executable, "-m", "sleight.cli.main", "readout", "audit", "--items", str(path), "--options", "A,B", "--model", "no-such-model", "--out", str(tmp_path / "o")],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "i.jsonl line 2: not valid JSON" in lines[0], proc.stderr
    assert not (tmp_path / "o").exists()
    assert time.time() - start < 60


# -- presets ----------------------------------------------------------------------------------------
def test_fixtures_are_shipped_and_large_enough():
    race = load_fixture("race_items.jsonl")
    assert len(race) >= 24 and all(len(r["choices"]) == 4 and r["answer"] in "ABCD" for r in race)
    assert len(load_fixture("qa_items.jsonl")) >= 24


def test_forecast_prompt_is_the_studys():
    items = preset_items("forecast", note="both", limit=2)
    assert [i.id for i in items] == ["r01:constructed", "r01:unrelated", "r02:constructed", "r02:unrelated"]
    text = items[0].messages[0]["content"]
    assert FORECAST_LEAD in text and text.endswith(FORECAST_QUESTION)
    assert "The correct answer is B: To protect the remaining plants from rabbits." in text
    assert FORECAST_ITEM_INSTRUCTION in text and items[0].stem == FORECAST_STEM
    assert text.index(FORECAST_LEAD) < text.index(items[0].quoted) < text.index(FORECAST_QUESTION)
    assert items[0].target == 1.0 and items[1].target == 0.0
    assert "The correct answer" not in items[1].messages[0]["content"]
    assert FORECAST_QUESTION == "Out of 100 such readers, how many answer correctly? Reply with exactly one of: 10, 30, 50, 70, 90."
    mixed = preset_items("forecast", limit=4)
    assert [i.target for i in mixed] == [1.0, 0.0, 1.0, 0.0]


def test_sentence_split_keeps_abbreviations():
    s = split_sentences("Every spring, Ms. Alvarez's class plants a garden. They grow beans at 8 a.m. Daily. Then rest!")
    assert s[0] == "Every spring, Ms. Alvarez's class plants a garden."
    assert len(s) == 3


def test_ptrue_prompt_matches_lm_polygraph():
    assert PTRUE_TEMPLATE == "Question: {q}\n Possible answer:{a}\n Is the possible answer:\n (A) True\n (B) False\n The possible answer is:"
    assert ptrue_prompt("Q?", "Berlin") == "Question: Q?\n Possible answer:Berlin\n Is the possible answer:\n (A) True\n (B) False\n The possible answer is:"
    assert ptrue_deleted_prompt("Q?", "Berlin") == "Question: Q?\n Possible answer:Berlin\n"
    items = preset_items("ptrue", limit=2)
    assert [i.target for i in items] == [1.0, 0.0, 1.0, 0.0]
    v = make_variant(items[0], "deleted_instruction")
    assert v.messages[0]["content"] == ptrue_deleted_prompt(items[0].meta["question_text"], items[0].meta["answer"])


def test_grade_preset():
    items = preset_items("grade", limit=2)
    assert items[0].options == ("1", "2", "3", "4", "5") and items[0].score_scale == 1.0
    assert items[0].messages[0]["content"].endswith("- Consistency:")


def test_library_convention_from_log_probs():
    """lm-polygraph 0.7.0 on raw logits: EOS -> -inf (min_new_tokens=1) -> the row's smallest finite
    logit (``_SanitizeLogitsProcessor``) -> log-softmax. The same number from log-probabilities."""
    x = np.array([1.0, 5.0, -30.0, 2.0, 0.5])
    eos = [1, 4]
    s = x.copy()
    s[eos] = -np.inf
    s[eos] = s[np.isfinite(s)].min()
    want = s - np.log(np.exp(s).sum())
    lp = x - np.log(np.exp(x).sum())
    # Only the sanitiser's |EOS| * p_min term (exp(-30) here) is left out.
    assert polygraph_logprob(lp[0], lp[eos]) == pytest.approx(want[0], abs=FLOAT64_ATOL)
    assert polygraph_logprob(lp[0], []) == pytest.approx(lp[0])


# -- variants ---------------------------------------------------------------------------------------
def test_variants_edit_the_quoted_item():
    item = preset_items("forecast", limit=1)[0]
    text = item.messages[0]["content"]
    assert len(VARIANTS) == 12 and [v for v in VARIANTS if v.startswith("substituted:")] == [f"substituted:{k}" for k in SUBSTITUTES]
    d = make_variant(item, "deleted_instruction").messages[0]["content"]
    assert FORECAST_ITEM_INSTRUCTION not in d and "\n\n\n" not in d and FORECAST_QUESTION in d
    c = make_variant(item, "deleted_choices").messages[0]["content"]
    assert item.choices_block not in c and FORECAST_ITEM_INSTRUCTION in c
    f = make_variant(item, "fenced").messages[0]["content"]
    assert f"{FENCE_BEGIN}\n{item.quoted}\n{FENCE_END}\n" in f and "do not answer it" in f
    s = make_variant(item, "substituted:french").messages[0]["content"]
    assert s == text.replace(FORECAST_ITEM_INSTRUCTION, "Translate the passage into French.")
    assert make_variant(item, "space").append == " "
    assert make_variant(item, "stem").prefill == FORECAST_STEM


def test_variants_are_skipped_when_the_item_lacks_a_part():
    from sleight.readout.audit.items import item_from_record

    bare = item_from_record({"id": "x", "prompt": "hello"}, "t")
    for v in ("stem", "deleted_instruction", "deleted_choices", "fenced", "substituted:empty"):
        assert isinstance(make_variant(bare, v), Skipped), v
    assert not isinstance(make_variant(bare, "stem", stem="So "), Skipped)
    assert parse_variants("stem,space")[0] == "original"
    with pytest.raises(UserError, match="unknown variant"):
        parse_variants("nope")


# -- classification rules ---------------------------------------------------------------------------
def test_argmax_classes_and_precedence():
    letters = ("A", "B", "C", "D")
    assert classify_token("<|im_end|>", is_special=True, is_option_first=True, letters=letters) == "special"
    assert classify_token("A", is_special=False, is_option_first=True, letters=letters) == "option"
    for t in ("A", " B", "(C", " (D", "A)", "**B"):
        assert classify_token(t, is_special=False, is_option_first=False, letters=letters) == "answer_letter", t
    assert classify_token("7", is_special=False, is_option_first=False, letters=letters) == "digit"
    assert classify_token("\n", is_special=False, is_option_first=False, letters=letters) == "whitespace"
    assert classify_token(" The", is_special=False, is_option_first=False, letters=letters) == "prose"
    assert classify_token("E", is_special=False, is_option_first=False, letters=letters) == "prose"


GRID = ("10", "30", "50", "70", "90")
CHOICES = ("To stop students walking through", "To protect the remaining plants from rabbits", "To hold up tomatoes", "To mark pumpkins")


@pytest.mark.parametrize(
    "text, cls, then_grid, anywhere",
    [
        ("70", "forecast", False, True),
        (" About 70% of readers", "forecast", False, True),
        ("Out of 100 such readers, about 50 answer correctly.", "forecast", False, True),
        ("B. To protect the remaining plants", "answers_item", False, False),
        ("B\n\n70", "answers_item", True, True),
        ("The correct answer is (B). So 90.", "answers_item", True, True),
        ("To protect the remaining plants from rabbits", "answers_item", False, False),
        ("A. To stop students walking through\nB. To protect", "recites", False, False),
        ("10, 30, 50, 70, 90", "recites", False, True),
        ("Why did the students build a fence? Because", "recites", False, False),
        ("A future reader would guess", "prose", False, False),
        ("   ", "other", False, False),
        ("...", "other", False, False),
    ],
)
def test_continuation_classes(text, cls, then_grid, anywhere):
    r = classify_continuation(text, options=GRID, choices=CHOICES, echoes=("Why did the students build a fence?",))
    assert (r.cls, r.answer_then_grid, r.grid_anywhere) == (cls, then_grid, anywhere)


def test_on_task_and_text_options():
    assert classify_continuation("70 readers", options=GRID).on_task
    assert not classify_continuation("100 readers", options=GRID).on_task
    r = classify_continuation("True, because", options=("True", "False"), letters=("A", "B"))
    assert r.cls == "forecast" and r.on_task
    r = classify_continuation("(A) True", options=("True", "False"), letters=("A", "B"))
    assert r.cls == "answers_item" and r.answer_then_grid and not r.on_task


# -- real-data loaders -------------------------------------------------------------------------------
def test_lm_eval_task_yaml_with_local_data(tmp_path):
    write(tmp_path, "docs.jsonl", "\n".join(json.dumps(d) for d in [
        {"q": "2+2?", "opts": ["3", "4"], "label": 1},
        {"q": "Sky?", "opts": ["blue", "red"], "label": 0},
    ]))
    yml = write(tmp_path, "task.yaml", (
        "task: toy\ndataset_path: json\ndataset_kwargs:\n  data_files: {test: docs.jsonl}\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: \"Question: {{q}}\\nAnswer:\"\ndoc_to_choice: opts\ndoc_to_target: label\n"
    ))
    items = load_lm_eval_task(yml)
    assert items[0].messages[0]["content"] == "Question: 2+2?\nAnswer:"
    assert items[0].options == (" 3", " 4") and items[0].meta["gold"] == 1
    assert not items[0].chat_template and items[0].move_trailing_whitespace  # _encode_pair, both modes
    chat = load_lm_eval_task(yml, chat=True)
    assert chat[0].chat_template and chat[0].options == ("3", "4")  # --apply_chat_template drops the delimiter
    assert [i.id for i in load_items(yml)] == ["toy-0", "toy-1"]
    bad = write(tmp_path, "bad.yaml", "task: t\ndataset_path: json\ndoc_to_text: !function utils.f\ndoc_to_choice: opts\n")
    with pytest.raises(UserError, match="!function"):
        load_lm_eval_task(bad)


def test_hf_converters_and_missing_datasets_package():
    race = race_records([{"example_id": "h1.txt", "article": "P.", "question": "Q?", "options": ["a", "b", "c", "d"], "answer": "C"}])
    assert race[0]["choices"] == ["a", "b", "c", "d"] and race[0]["answer"] == "C"
    mm = mmlu_records([{"subject": "x", "question": "Q?", "choices": ["a", "b", "c", "d"], "answer": 2}])
    assert mm[0]["answer"] == "C" and mm[0]["passage"] == ""
    tq = triviaqa_records([{"question_id": "t1", "question": "Q1?", "answer": {"value": "A1", "aliases": ["a1"]}}, {"question_id": "t2", "question": "Q2?", "answer": {"value": "A2", "aliases": []}}])
    assert tq[0]["answers"] == ["A1", "a1"] and tq[0]["wrong"] == "A2"
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(UserError, match="pip install 'sleight\\[data\\]'"):
            load_source("hf:race")
    with pytest.raises(UserError, match="unknown data source"):
        load_source("hf:nope")
