"""The engine on the real bundled model: forked batch == one trial at a time, budget edge, untouched.

Small budgets keep this quick on CPU; the questions are the shipped ones (q006's reply has its first
trigger after a 4-token prefix, so the batch really forks a shared prefix).
"""

from __future__ import annotations

import numpy as np
import pytest

from sleight.tamper.data import load_questions
from sleight.tamper.engine import TamperConfig, batched_trials, clean_run, render_question, serial_trial
from sleight.tamper.reference import reference_trial
from sleight.tamper.trigger import encode_in_context, match_case
from tolerances import LOGPROB_ATOL


@pytest.fixture(scope="module")
def questions():
    qs, _ = load_questions()
    return {q.id: q.question for q in qs}


@pytest.mark.slow
@pytest.mark.parametrize("conventions", ["study", "sleight"])
def test_batched_trials_equal_one_trial_at_a_time(model, questions, conventions):
    cfg = TamperConfig(max_new_tokens=16, conventions=conventions)
    rendered = render_question(model, questions["q006"])
    clean = clean_run(model, rendered, cfg)
    assert clean.triggers and clean.triggers[0].start > 0, "q006's clean reply should have a prefix before its first trigger"
    subs = ["Mandela effect", "armchair"]
    fed: list[int] = []
    batched = batched_trials(model, clean, subs, cfg, fed.append)
    # Each row decodes only its own tokens after the shared prefix, plus at most the trigger tokens
    # it withdrew when swapping later triggers; nothing is regenerated.
    k = clean.triggers[0].start
    # (study conventions: a kept end-of-turn token and a substitute's tokens past the budget are
    # recorded by a scoring pass, not decoded)
    kept = sum(len(t.reply.token_ids) - k - t.reply.eos_kept - max(0, len(t.reply.token_ids) - cfg.max_new_tokens) for t in batched)
    assert kept <= sum(fed) <= kept + sum(s.trigger_tokens for t in batched for s in t.substitutions[1:])
    for sub, trial in zip(subs, batched):
        alone = serial_trial(model, rendered, sub, cfg)
        assert trial.reply.token_ids == alone.reply.token_ids, sub
        assert np.array_equal(trial.reply.injected, alone.reply.injected)
        assert np.allclose(trial.reply.logprobs, alone.reply.logprobs, atol=LOGPROB_ATOL)
        assert trial.reply.finish_reason == alone.reply.finish_reason
        assert [s.step for s in trial.substitutions] == [s.step for s in alone.substitutions]
        # The prefix records are the clean run's own.
        assert trial.reply.token_ids[:k] == clean.reply.token_ids[:k]
        assert np.array_equal(trial.reply.logprobs[:k], clean.reply.logprobs[:k])
        if conventions == "sleight":
            assert len(trial.reply.token_ids) <= cfg.max_new_tokens
    # The naive generate-cut-splice-regenerate algorithm gives the same trial.
    ref = reference_trial(model, rendered, subs[1], cfg)
    assert ref.token_ids == batched[1].reply.token_ids
    assert ref.injected == batched[1].reply.injected.tolist()


def test_trigger_at_the_budget_end_is_swapped_and_cut_to_the_budget(model, questions):
    # "The tallest mountain on Earth is Mount Everest...": with the trigger "mount", " mountain" is
    # not one (look-ahead "ain"), " Mount" is; a budget ending on " Mount" leaves it pending at the end.
    rendered = render_question(model, questions["q011"])
    probe = clean_run(model, rendered, TamperConfig(trigger="mount", max_new_tokens=12, conventions="sleight"))
    assert "mountain" in model.decode(probe.reply.token_ids).lower()
    mounts = [t for t in probe.triggers if t.word == "Mount"]
    assert mounts, model.decode(probe.reply.token_ids)
    cfg = TamperConfig(trigger="mount", max_new_tokens=mounts[0].end, conventions="sleight")  # the study's: test_study_conventions
    clean = clean_run(model, rendered, cfg)
    assert clean.reply.finish_reason == "length" and clean.triggers[-1].end == cfg.max_new_tokens
    for trial in batched_trials(model, clean, ["Mandela effect", "bookshelf"], cfg) + [serial_trial(model, rendered, "Mandela effect", cfg)]:
        r = trial.reply
        assert len(r.token_ids) == cfg.max_new_tokens  # never exceeded
        assert r.injected[-1] and not r.injected[:-1].any()
        # The substitute, in the case of "Mount", encoded after the reply so far, cut to its first token.
        want, _ = encode_in_context(model.encode, model.decode(r.token_ids[:-1]), " " + match_case("Mount", trial.substitute))
        assert r.token_ids[-1] == want[0] and len(want) >= 1
        assert trial.substitutions[-1].step == cfg.max_new_tokens - 1


def test_reply_without_trigger_gives_untouched_trials_at_no_cost(model, questions):
    cfg = TamperConfig(trigger="zebra", max_new_tokens=12)
    fed: list[int] = []
    clean = clean_run(model, render_question(model, questions["q001"]), cfg, fed.append)
    n_clean = sum(fed)
    trials = batched_trials(model, clean, ["Mandela effect", "armchair", "stool"], cfg, fed.append)
    assert sum(fed) == n_clean  # no decoding at all for the trials
    assert all(t.untouched and not t.substitutions and t.reply.token_ids == clean.reply.token_ids for t in trials)
