"""Label-slot votes on the bundled model: the demo's jury of one votes on every trial, and every
stored slot reading equals an independent computation (transformers, its own forward pass over the
same prompt and prefill, no sleight code in the way)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.judged import judged_trials, load_run_trials
from sleight.tamper.jury.prompt import LABELS, judge_messages
from sleight.tamper.jury.run import REACTION, case_of
from tamper_artifacts import copy_run, real_run, sleight
from tolerances import MASS_ATOL

JUROR = "smollm2-135m-instruct"
pytestmark = pytest.mark.slow  # the default model votes on every trial, then a second copy checks it


@pytest.fixture(scope="module")
def slot_run(tmp_path_factory):
    """``sleight tamper judge --vote slots`` by the default model alone, then ``tamper report``."""
    run = copy_run(real_run(tmp_path_factory), tmp_path_factory.mktemp("slots") / "run")
    proc = sleight("tamper", "judge", "--run", str(run), "--jury", JUROR, "--vote", "slots")
    report = run.parent / "report"
    sleight("tamper", "report", str(run), "--out", str(report), "--no-site")
    return run, report, proc.stdout


@pytest.fixture(scope="module")
def hf_reference():
    """The bundled model loaded by transformers itself, for the independent forward pass."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sleight.backends import resolve

    path = resolve(JUROR).load_path
    tok = AutoTokenizer.from_pretrained(path)
    lm = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    return tok, lm


def test_a_jury_of_one_by_slots_votes_on_every_trial(slot_run):
    run, report, stdout = slot_run
    trials, _ = load_run_trials(run)
    n = len(judged_trials(trials))
    j = jury_store.load_judgements(run)
    assert len(j) == n and not j["abstained"].any() and (j["vote_path"] == "slots").all()
    assert j[list(LABELS)].notna().all().all()
    for label in LABELS:
        assert j[f"{label}_p_true"].between(0, 1).all() and j[f"{label}_mass"].between(0, 1).all()
    v = jury_store.load_verdicts(run)
    assert not v["undecided"].any() and (v["n_votes"] == 1).all()
    assert f"cast {n} valid vote(s)" in stdout and "slot mass: median" in stdout
    # the report: real percentages, labelled as a jury of one, with the juror's median slot mass
    board = pd.read_csv(report / "leaderboard.csv")
    assert board["Jury"].tolist() == ["jury of one"]
    for col in ("Flag. %", "Corr. %", "Derail. %", "Switch aware %"):
        assert not math.isnan(board[col].iloc[0])
    assert board["Corr. %"].iloc[0] == pytest.approx(100.0 * j["corrected"].sum() / n)
    ab = pd.read_csv(report / "abstentions.csv")
    masses = np.concatenate([j[f"{label}_mass"].to_numpy() for label in LABELS])
    assert ab["Median slot mass"].iloc[0] == pytest.approx(float(np.median(masses)))
    assert ab["Below floor"].iloc[0] == int((masses < 0.5).sum()) and ab["Path"].iloc[0] == "slots"
    md = (report / "leaderboard.md").read_text()
    assert "JURY OF ONE" in md and "Median slot mass" in md
    assert ("median slot mass of" in md) == bool(np.median(masses) < 0.5)  # the warning, when it applies


def test_slot_votes_equal_an_independent_forward_pass(slot_run, hf_reference):
    import torch

    run, _, _ = slot_run
    tok, lm = hf_reference
    trials, _ = load_run_trials(run)
    by_key = {(t["question_id"], t["substitute"]): t for t in judged_trials(trials).to_dict("records")}
    j = jury_store.load_judgements(run)
    for row in j.to_dict("records"):
        trial = by_key[(row["question_id"], row["substitute"])]
        # the run was made, so judged, under the study's conventions: the judge reads the reply as the
        # study's judges did, every token decoded by the subject's tokenizer (Sleight-of-Word 08d2bae,
        # src/awareness/runner.py line 391; this tokenizer is the bundled model's, which wrote the run)
        study_reply = tok.decode([int(i) for i in trial["token_ids"]])
        msgs = judge_messages(case_of({**trial, REACTION: study_reply}), "default")
        for label in LABELS:
            # the readout paper's rule: the generation prompt, then the slot prefix as plain text
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + f'{{"{label}":'
            ctx = tok(text, add_special_tokens=False)["input_ids"]
            firsts = []
            for option in (" true", " false"):
                full = tok(text + option, add_special_tokens=False)["input_ids"]
                assert full[: len(ctx)] == ctx  # the prefix condition holds here
                firsts.append(full[len(ctx)])
            with torch.no_grad():
                logits = lm(torch.tensor([ctx])).logits[0, -1].double()
            lp = torch.log_softmax(logits, -1)[firsts].numpy()
            p_true = float(np.exp(lp[0]) / np.exp(lp).sum())
            assert row[f"{label}_p_true"] == pytest.approx(p_true, abs=MASS_ATOL)
            assert row[f"{label}_mass"] == pytest.approx(float(np.exp(lp).sum()), abs=MASS_ATOL)
            assert bool(row[label]) == bool(lp[0] > lp[1])
