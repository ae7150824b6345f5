"""Issue 34, items 6 and 7 and item 3's B: what the table configs mark ``inferred:`` against what the
readout paper prints (``../shared/papers/001_61c440078e9030e1.txt``), and App. E's answer step.

Each test names the section whose text it holds the config to; each fails on the config or code
the issue found (a printed rule marked inferred, an inference left unmarked, a cell on the wrong
row, a departure called an inference, no newline stop, no word on the sampled answers' spread).
"""

from __future__ import annotations

import inspect
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sleight.readout.reproduce import load_table
from sleight.readout.reproduce.config import table_path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "readout.md"


def _column(table, key):
    return next(c for c in table.columns if c.key == key)


# ------------------------------------------------------------------------------------------------
# item 6: marks that were wrong
# ------------------------------------------------------------------------------------------------


def test_table3_letter_rate_is_app_is_printed_letter_count():
    """App. I: "The letter count strips whitespace and a tokeniser's leading word-boundary marker",
    and C0's letter rates all agree with Table 3's. Table 3's Letter is that printed rule (App. D's
    token class), not an inferred one; App. I's article exception belongs to Table 15's letter pull,
    not to Table 14 (Table 14's caption counts the article)."""
    from sleight.readout.audit.token_rules import token_class

    t = load_table("table3")
    assert (_column(t, "letter").column, _column(t, "letter").equals) == ("token_class", "answer_letter")
    assert "letter rule" not in t.inferred and "parenthesis" not in t.inferred
    assert "applies to Table 14" not in t.inferred and "Table 15" in t.inferred
    # the printed rule: whitespace and a leading word-boundary marker stripped, nothing else
    assert [token_class(x) for x in ("A", " B", "\u0120C", "\u2581D")] == ["answer_letter"] * 4
    assert token_class("(A") == "prose" and token_class("\u2581") == "whitespace"


def test_article_exception_is_table15s_letter_pull_not_table14s_count():
    """App. I: Table 14's caption, "Llama's counted letters are the article A"; Table 15's caption and
    App. I, letter pull excludes Llama-3-8B-Instruct's A when its continuation begins A clever,
    A classic or A nice. Table 14 counts ``letter`` (article counted); Table 15's answer-letter row
    is letter pull (article left out); neither config calls the split an inference of Table 14."""
    from sleight.readout.audit.conditions import holding, letter_columns

    cols = letter_columns("\u0120A", ("A", "B", "C", "D"), " A clever question! The passage")
    assert cols == {"letter": True, "letter_pull": False, "prose_opening": True}
    t14, t15 = load_table("table14"), load_table("table15")
    assert {c.column for c in t14.columns if c.key.endswith("_letters")} == {"letter"}
    assert {c.column for c in t15.columns if c.key.endswith("_answer_letters")} == {"answer_letters"}
    assert "article exception" not in t14.inferred and "letter pull" not in t14.inferred
    assert "Letter pull excludes" not in table_path("table14").read_text(encoding="utf-8")
    # every item's argmax the article A before prose: Table 14 counts 64 letters, Table 15 no letter pull
    rows = [{"option_mass": 1e-4, "ends_with_whitespace": True, "first_tokens_distinct": True, "options": ["10"], **cols}] * 64
    assert sum(r["letter"] for r in rows) == 64
    held = holding(rows, [{"option_mass": 0.99}] * 64)
    assert held["below_floor"] and not held["answer_letters"] and held["prose_holds"]


def test_appendix_c1_marks_what_c5_prints_as_printed():
    """App. C.1: isolated and in-context masses coincide bitwise on all nine combinations "for the
    five checkpoints with distinct isolated first tokens"; C.5 names the two sentencepiece cases
    (Phi-3-mini-4k-instruct, Mistral-7B-Instruct-v0.3); §5 prints the argmax check. Not inferences."""
    t = load_table("appendix-c1")
    assert "five checkpoints" not in t.inferred and "option class" not in t.inferred and "argmax check" not in t.inferred
    text = table_path("appendix-c1").read_text(encoding="utf-8")
    assert "Printed, not inferred" in text and "C.5" in text
    five = {r for r, v in t.paper.items() if v.get("isolated_equal") == 9}
    assert five == {"qwen3-4b", "qwen3-8b", "qwen3-14b", "falcon-7b", "smollm2-1.7b"}
    assert not {"phi-3-mini", "mistral-7b"} & {r for r, v in t.paper.items() if "isolated_equal" in v}


def test_appendix_c2_letter_rate_and_falcons_mass_are_printed():
    """App. I prints the letter count's rule; C.2 prints that the digits include 56 grid first
    tokens; App. I prints falcon's separator-supplied medians in Table 14's condition order, C0's
    first (0.38482). The letter columns use the printed rule; none of these is marked inferred."""
    t = load_table("appendix-c2")
    for key in ("letter", "letter_deleted", "letter_space", "letter_space_deleted"):
        assert (_column(t, key).column, _column(t, key).equals) == ("token_class", "answer_letter")
    assert "letter rate" not in t.inferred and "falcon" not in t.inferred and "digit" not in t.inferred
    assert t.paper["falcon-7b"]["mass_space"] == 0.38482
    assert t.paper["mistral-7b"]["grid_space"] + t.paper["mistral-7b"]["zero_space"] == t.paper["mistral-7b"]["digit_space"]


def test_table6s_sixteen_items_are_marked_inferred():
    """App. C.5 / Table 6 say only "the same 16-item forward passes"; that they are the first 16 of
    A.1's list (A.1: every RACE-H sample is a prefix of it) with Table 3's fixed note is inferred."""
    t = load_table("table6")
    assert "first 16" in t.inferred and "A.1" in t.inferred and "fixed note" in t.inferred
    assert t.runs["probe"].paper_data == "race-h:hub:n=16" and t.runs["probe"].settings["condition"] == "C0"


def test_table8s_fleiss_kappa_is_the_whole_first_labelling():
    """Table 8 (App. D): the row "First labelling's three labellers, pairwise" prints 99, 99, 100 and
    one Fleiss' κ, 0.983, for the three labellers together: not for the first pair."""
    t = load_table("table8")
    assert "kappa" not in t.paper["First labelling pairwise 1"]
    assert t.paper["First labelling"] == {"rows": 100.0, "kappa": 0.983}
    assert t.paper["Second labelling"]["kappa"] == 0.983
    assert [t.paper[f"First labelling pairwise {k}"]["agreement"] for k in (1, 2, 3)] == [99, 99, 100]


def test_table4s_notes_are_app_hs_writers():
    """App. H, "Writer and reader": the writer retries an over-budget or unfinished note up to four
    times; the forecast command writes its notes with that writer (issue 34 item 1), so Table 4's
    config credits App. H, marks no departure and no inference about retries, and its run comment
    and those of the configs reading the same run (Tables 12, 13, App. C.7, App. H) name the writer."""
    t = load_table("table4")
    assert "retr" not in t.inferred and not any(n.startswith("Departure") and "writer" in n for n in t.notes)
    (note,) = [n for n in t.notes if "writer" in n]
    assert note.startswith("App. H") and "sleight.readout.audit.notes.write_notes" in note and "four retries" in note
    assert "not its note writer" not in table_path("table4").read_text(encoding="utf-8")
    for name in ("table4", "table12", "table13", "appendix-c7", "appendix-h"):
        text = table_path(name).read_text(encoding="utf-8")
        assert "App. H's writer, sleight.readout.audit.notes.write_notes" in text and "end-of-sequence" in text, name
    assert "App. H's writer (`sleight.readout.audit.notes.write_notes`" in DOCS.read_text(encoding="utf-8")


def test_appendix_e_estimators_departures_are_notes_and_b_is_printed():
    """App. E: the estimators score Table 10's sampled answers: the run samples at each checkpoint's
    generation_config, the same settings and seed as table10's ptrue run for that checkpoint, so the
    same draw on the same engine; PRR's best library estimator is MaximumSequenceProbability at 1.0 and
    RAUQ's entropy variant at 0.5, and the two differences are taken against those computed columns,
    no departure. App. E's item bootstrap: B = 10,000 (issue 34 item 3)."""
    from sleight.readout.downstream_run import PTrueConfig
    from sleight.readout.ptrue.uncertainty import ESTIMATOR_COLUMNS
    from sleight.readout.reproduce.kinds.base import run_settings
    from sleight.readout.reproduce.kinds.estimators import answer_sampling_of

    t = load_table("appendix-e-estimators")
    assert (t.B, t.seed) == (10000, 0)
    assert "greedy" not in t.inferred and "MaximumSequenceProbability" not in t.inferred
    assert not [n for n in t.notes if n.startswith("Departure")]
    (run,) = t.runs.values()
    t10 = load_table("table10")
    (ptrue,) = t10.runs.values()
    assert run.sampling_from == ptrue.sampling_from == "generation_config" and run.settings["max_new_tokens"] == ptrue.settings["max_new_tokens"]
    table10_cks = {c.name: c for c in t10.checkpoints}
    for ck in t.checkpoints:  # each checkpoint as table10 names it (model, revision, generation_config)
        got = answer_sampling_of(run_settings(run, ck))
        table10 = PTrueConfig(**run_settings(ptrue, table10_cks[ck.name])).sampling()
        assert got is not None and got == table10, ck.name
    assert any("Table 10's answers" in n and "sampled_generations" in n for n in t.notes)
    best = {c.key: c.minus for c in t.columns if c.key in ("prr_moved_minus_best", "prr05_moved_minus_best")}
    assert best == {"prr_moved_minus_best": {"scorer": "MaximumSequenceProbability"}, "prr05_moved_minus_best": {"scorer": "RAUQ (entropy)"}}
    assert {"MaximumSequenceProbability", "RAUQ (entropy)"} <= set(ESTIMATOR_COLUMNS)
    assert any("RAUQ" in n and "prr05_moved_minus_best" in n for n in t.notes if n.startswith("App. E"))


# ------------------------------------------------------------------------------------------------
# item 7: the answer step
# ------------------------------------------------------------------------------------------------


class _Scripted:
    """A model whose greedy and sampled continuations are fixed token lists (text per id)."""

    VOCAB = {0: "Paris", 1: "\n", 2: "It", 3: " is", 4: ".\n", 5: " big", 6: "\n\n"}

    def __init__(self, scripts):
        self.scripts = scripts

    def render_chat(self, messages, **_kw):
        return SimpleNamespace(text="<user>" + messages[-1]["content"] + "<assistant>")

    def encode(self, text):
        return [7] * len(text)

    def decode(self, ids):
        return "".join(self.VOCAB[i] for i in ids)

    def greedy(self, ids, max_new_tokens, progress=None):
        return [SimpleNamespace(token_ids=list(s[:max_new_tokens]), finish_reason=f) for s, f in self.scripts]

    def sample(self, prompts, max_new_tokens, *, n=1, sampling=None):
        return [[SimpleNamespace(token_ids=list(s[:max_new_tokens]), finish_reason=f)] for s, f in self.scripts]


def test_answer_step_stops_after_the_first_newline_token_kept():
    """App. E runs lm-polygraph's answer step with its MMLU / TriviaQA configs, which set
    ``generation_params.stop_strings: ["\\n"]``: generation ends with the first token holding a
    newline, that token kept in the text (the library cuts at EOS only), greedy or sampled alike;
    ``stop=()`` leaves the decode as it was."""
    from sleight.readout.ptrue.answers import POLYGRAPH_STOP, QAItem, Sampling, greedy_answers, sampled_answers, stop_at

    assert POLYGRAPH_STOP == ("\n",)
    scripts = [([0, 1, 2, 3], "length"), ([2, 3, 4, 5], "length"), ([0], "stop"), ([6, 0], "stop")]
    m = _Scripted(scripts)
    items = [QAItem(f"q{k}", "Q?") for k in range(len(scripts))]
    for answers in (greedy_answers(m, items, 8), sampled_answers(m, items, 8, Sampling())):
        assert [(a.text, a.n_tokens, a.finish_reason) for a in answers] == [
            ("Paris\n", 2, "stop_token"), ("It is.\n", 3, "stop_token"), ("Paris", 1, "stop"), ("\n\n", 1, "stop_token")]
    assert [a.text for a in greedy_answers(m, items, 8, stop=())] == ["Paris\nIt is", "It is.\n big", "Paris", "\n\nParis"]
    assert stop_at(m, [2, 3, 5]) is None and stop_at(m, [0, 1], stop=()) is None
    for fn in (greedy_answers, sampled_answers):  # the default every caller (run_ptrue) gets
        assert inspect.signature(fn).parameters["stop"].default == POLYGRAPH_STOP


def test_answer_step_stop_equals_transformers_stop_string_criteria(model):
    """App. E / lm-polygraph 0.7.0 ``WhiteboxModel.generate`` (utils/model.py 515-528): the stop
    strings go to transformers' ``StopStringCriteria``. On the bundled model, greedy answers cut by
    :data:`POLYGRAPH_STOP` equal transformers' own greedy ``generate`` with that criterion, cut at
    EOS as ``GreedyProbsCalculator`` cuts (including a raw prompt whose first token is a newline)."""
    import torch
    from transformers import StoppingCriteriaList
    from transformers.generation.stopping_criteria import StopStringCriteria

    from sleight.readout.ptrue.answers import QAItem, greedy_answers

    if not hasattr(model, "model"):
        pytest.skip("the reference path needs the hf engine")
    items = [QAItem("q0", "List three colours."), QAItem("q1", "Write a haiku about the sea.")]
    budget, cut = 24, 0
    for instruct in (True, False):
        answers = greedy_answers(model, items, budget, instruct=instruct)
        for it, a in zip(items, answers):
            ids = torch.tensor([model.encode(a.prompt_text)])
            out = model.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget, do_sample=False, num_beams=1,
                stopping_criteria=StoppingCriteriaList([StopStringCriteria(tokenizer=model.tokenizer, stop_strings=["\n"])]),
            )[0, ids.shape[1] :].tolist()
            if model.tokenizer.eos_token_id in out:
                out = out[: out.index(model.tokenizer.eos_token_id)]
            assert (a.text, a.n_tokens) == (model.tokenizer.decode(out), len(out)), (instruct, it.prompt)
            cut += a.finish_reason == "stop_token"
    assert cut >= 2  # the stop decided some of these answers


def _binomial_se(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


def test_the_binomial_se_bounds_a_redrawn_accuracy():
    """The spread the notes state (App. E's 500 fixed items): a redraw's accuracy has variance
    sum p_i(1 - p_i)/n^2, at most p(1 - p)/n at the mean p (p(1 - p) is concave)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        p_i = rng.beta(rng.uniform(0.2, 3), rng.uniform(0.2, 3), size=500)
        assert (p_i * (1 - p_i)).sum() / 500**2 <= _binomial_se(float(p_i.mean()), 500) ** 2 + 1e-15


@pytest.mark.parametrize("name, run", [("table9", "ptrue-mmlu"), ("table10", "ptrue-triviaqa")])
def test_sampled_tables_say_they_match_only_statistically(name, run):
    """App. E: Tables 9 and 10 sample each checkpoint's own answers; sleight's streams are not the
    library's torch stream, so the notes say the tables match only statistically, with each printed
    accuracy's binomial SE at the run's item count, the Qwen3 average's, and the 95% band of
    reproduced − published; the answer step's newline stop and the lm-polygraph revision too."""
    t = load_table(name)
    n = t.runs[run].items
    assert n == 500 and t.runs[run].sampling_from == "generation_config"
    (note,) = [x for x in t.notes if "only statistically" in x]
    acc = {r: v["accuracy"] for r, v in t.paper.items() if "accuracy" in v and r != "Qwen3 average"}
    assert set(acc) == {"qwen3-4b", "qwen3-8b", "qwen3-14b", "llama-3-8b"}
    band = 1.96 * math.sqrt(2)
    for r, p in acc.items():
        se = _binomial_se(p, n)
        assert f"{r} {se:.3f}" in note and f"{r} ±{band * se:.3f}" in note
    avg = math.sqrt(sum(_binomial_se(p, n) ** 2 for r, p in acc.items() if r.startswith("qwen3"))) / 3
    assert f"Qwen3 average {avg:.3f}" in note and f"Qwen3 average ±{band * avg:.3f}" in note
    assert any("POLYGRAPH_STOP" in x and "stop_strings" in x for x in t.notes)
    assert any("32cdf4a7" in x and "6d3a5740" in x for x in t.notes)


def test_table2_says_it_matches_only_statistically():
    """§4 / App. E: Table 2 averages Tables 9 and 10's runs; its note gives the Qwen3-averaged
    accuracy's binomial SE on each task, the newline stop and the lm-polygraph revision."""
    t = load_table("table2")
    (note,) = [x for x in t.notes if "only statistically" in x]
    for other, run, task in (("table9", "ptrue-mmlu", "MMLU"), ("table10", "ptrue-triviaqa", "TriviaQA")):
        o = load_table(other)
        q = [v["accuracy"] for r, v in o.paper.items() if r.startswith("qwen3")]
        se = math.sqrt(sum(_binomial_se(p, o.runs[run].items) ** 2 for p in q)) / len(q)
        assert f"{se:.3f} on {task}" in note
    assert any("POLYGRAPH_STOP" in x for x in t.notes) and any("32cdf4a7" in x and "6d3a5740" in x for x in t.notes)


def test_docs_record_which_lm_polygraph():
    """App. E reads lm-polygraph at 32cdf4a7: docs/readout.md records that no branch, tag or pull
    request reaches it, that 0.7.0 is tag v0.7.0 (6d3a5740), and the answer step's newline stop."""
    text = DOCS.read_text(encoding="utf-8")
    assert "**Which lm-polygraph.**" in text and "`32cdf4a7`" in text and "`6d3a5740`" in text
    assert "POLYGRAPH_STOP" in text and re.search(r"Tables 2, 9 and 10 can match the paper only\s+statistically", text)


def test_estimator_answers_stop_at_the_same_newline_with_their_records(model):
    """App. E: the estimators' own answers (``readout estimators``) end where the answer step's do:
    the greedy records cut after the token that completes the newline, aligned, no end-of-sequence
    read after it; an answer with no newline is left as decoded."""
    from sleight.readout.ptrue.answers import QAItem, greedy_answers, stop_at, stopped_generation

    items = [QAItem("q0", "List three colours."), QAItem("q1", "Write a haiku about the sea.")]
    budget = 24
    prompts = [model.render_chat([{"role": "user", "content": it.prompt}]).text for it in items]
    gens = model.greedy([model.encode(p) for p in prompts], budget)
    answers = greedy_answers(model, items, budget)
    cut = 0
    for g, a in zip(gens, answers):
        s = stopped_generation(model, g)
        k = stop_at(model, g.token_ids)
        assert (model.decode(s.token_ids), len(s.token_ids)) == (a.text, a.n_tokens)
        assert len(s.logprobs) == len(s.entropy) == len(s.top_ids) == len(s.token_ids)
        if k is None:
            assert s is g
        else:
            cut += 1
            assert s.finish_reason == "stop_token" and s.end is None and s.token_ids == g.token_ids[:k]
            np.testing.assert_array_equal(s.logprobs, g.logprobs[:k])
    assert cut >= 1


def test_a_ptrue_run_records_its_answer_stop():
    """A run directory made before the stop (answers to EOS) is refused on resume, not mixed."""
    from sleight.readout.downstream_run import PTrueConfig

    assert PTrueConfig().record("items.jsonl", [])["answer_stop"] == ["\n"]
