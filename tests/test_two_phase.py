"""Two-phase decoding on the hf engine (real bundled model, float32 CPU) against the lockstep engine
and the naive reference loop: the same tokens, the same records within 1e-4."""

from __future__ import annotations

import numpy as np
import pytest

from sleight.backends.base import Scored
from sleight.tamper import engine, two_phase
from sleight.tamper.data import load_questions
from sleight.tamper.reference import reference_trial
from sleight.tamper.trigger import find_pending_trigger

SUBS = ["Mandela effect", "armchair", "bookshelf"]


@pytest.fixture(scope="module")
def questions():
    return {q.id: q.question for q in load_questions()[0]}


def assert_same_reply(a: engine.Reply, b: engine.Reply, tol: float = 1e-4) -> None:
    assert a.token_ids == b.token_ids
    assert a.injected.tolist() == b.injected.tolist() and a.finish_reason == b.finish_reason
    for x, y in ((a.logprobs, b.logprobs), (a.top_logprobs, b.top_logprobs), (a.entropy, b.entropy)):
        assert x.shape == y.shape and (not x.size or np.abs(x - y).max() < tol)
    for i, j in zip(*np.nonzero(a.top_ids != b.top_ids)):  # only where two log-probs tie
        near = [a.top_logprobs[i, jj] for jj in (j - 1, j + 1) if 0 <= jj < a.top_logprobs.shape[1]]
        assert any(abs(a.top_logprobs[i, j] - x) < tol for x in near), (i, j)


def both(model, question, cfg, subs=SUBS):
    rendered = engine.render_question(model, question)
    clean_l = engine.clean_run(model, rendered, cfg)
    clean_t = two_phase.clean_run(model, rendered, cfg)
    return rendered, clean_l, clean_t, engine.batched_trials(model, clean_l, subs, cfg), two_phase.batched_trials(model, clean_t, subs, cfg)


def test_stop_list_is_the_whole_word_tokens(model):
    ids = two_phase.trigger_stop_ids(model, "the")
    texts = {model.token_text(i) for i in ids}
    assert {" the", " The", "The", "the"} <= texts
    assert not texts & {" there", " them", " other", "bathe", " they"}
    for i in ids:  # each one completes the word at a reply's start, before a space
        assert find_pending_trigger([i], model.encode(" x")[0], model.decode, "the") is not None


@pytest.mark.slow
def test_two_phase_equals_lockstep_and_the_reference(model, questions):
    cfg = engine.TamperConfig(max_new_tokens=16)
    rendered, clean_l, clean_t, lock, tp = both(model, questions["q006"], cfg)
    assert_same_reply(clean_l.reply, clean_t.reply)
    assert [t.start for t in clean_l.triggers] == [t.start for t in clean_t.triggers] and clean_t.disagreements == 0
    for a, b in zip(lock, tp):
        assert_same_reply(a.reply, b.reply)
        assert [(s.step, s.ids) for s in a.substitutions] == [(s.step, s.ids) for s in b.substitutions]
        assert b.disagreements == 0
        # Cost: at least one request, and every model-chosen token after the prefix was decoded.
        chosen = int((~b.reply.injected[clean_t.triggers[0].start :]).sum())
        assert b.cost.requests >= 1 and b.cost.decoded >= chosen and b.cost.prefilled >= len(b.substitutions[0].ids)
    ref = reference_trial(model, rendered, SUBS[1], cfg)
    assert ref.token_ids == tp[1].reply.token_ids and ref.injected == tp[1].reply.injected.tolist()


@pytest.mark.parametrize("conventions", ["study", "sleight"])
def test_trigger_at_the_budget_end(model, questions, conventions):
    # q011 with trigger "mount": the budget ends on " Mount", whose look-ahead is the reply's end.
    probe = engine.clean_run(model, engine.render_question(model, questions["q011"]), engine.TamperConfig(trigger="mount", max_new_tokens=12))
    mount = [t for t in probe.triggers if t.word == "Mount"][0]
    cfg = engine.TamperConfig(trigger="mount", max_new_tokens=mount.end, conventions=conventions)
    _, _, clean_t, lock, tp = both(model, questions["q011"], cfg, ["Mandela effect", "bookshelf"])
    assert clean_t.triggers[-1].end == cfg.max_new_tokens
    for a, b in zip(lock, tp):
        assert_same_reply(a.reply, b.reply)
        # sleight: cut to the budget; study: the substitute whole, ending at or past it
        n = len(b.reply.token_ids)
        assert (n == cfg.max_new_tokens if conventions == "sleight" else n == cfg.max_new_tokens - 1 + len(b.substitutions[-1].ids))
        assert b.reply.injected[-1]


def test_untouched_question_costs_nothing_more(model, questions):
    cfg = engine.TamperConfig(trigger="zebra", max_new_tokens=12)
    _, clean_l, clean_t, lock, tp = both(model, questions["q001"], cfg)
    assert all(t.untouched and t.reply is clean_t.reply for t in tp)
    assert_same_reply(lock[0].reply, tp[0].reply)


@pytest.mark.slow
def test_the_detector_decides_not_the_stop_list(model, questions, monkeypatch):
    """No stop list at all (every trigger found after the fact) and one full of false stops
    (every token with an 'e'): the same trials, at a different cost."""
    cfg = engine.TamperConfig(max_new_tokens=16)
    rendered = engine.render_question(model, questions["q006"])
    clean = two_phase.clean_run(model, rendered, cfg)
    base = two_phase.batched_trials(model, clean, SUBS, cfg)
    e_tokens = tuple(i for i in range(model.vocab_size) if "e" in model.token_text(i))
    for stops in ((), e_tokens):
        monkeypatch.setattr(two_phase, "trigger_stop_ids", lambda m, w, s=stops: s)
        other = two_phase.batched_trials(model, clean, SUBS, cfg)
        for a, b in zip(base, other):
            assert_same_reply(a.reply, b.reply)
        cost = lambda ts, f: sum(getattr(t.cost, f) for t in ts)  # noqa: E731
        if stops:  # false stops cost requests
            assert cost(other, "requests") > cost(base, "requests")
        else:  # a missed trigger costs the tokens generated after it
            assert cost(other, "decoded") >= cost(base, "decoded") and cost(other, "requests") <= cost(base, "requests")


def test_argmax_disagreements_are_counted_on_model_chosen_tokens_only():
    k = 3
    s = Scored([5, 6, 7, 8], np.zeros(4), np.array([[5, 1, 2], [9, 6, 1], [1, 7, 2], [3, 8, 1]]), np.zeros((4, k), np.float32), np.zeros(4, np.float32))
    reply, n = two_phase._reply(s, [False, False, True, False], "stop")
    assert n == 2  # positions 1 and 3; position 2 is injected (never the argmax)
    assert reply.injected.tolist() == [False, False, True, False] and reply.finish_reason == "stop"


@pytest.mark.slow
def test_two_phase_equals_lockstep_on_longer_replies(model, questions):
    cfg = engine.TamperConfig(max_new_tokens=64)
    # q005: 61 tokens, four triggers (at 0, 4, 32, 39); q006: two triggers, then the end-of-turn token.
    # (q011's long reply is in test_trigger_at_the_budget_end, q001's one-trigger reply in the vLLM tests.)
    for qid in ("q005", "q006"):
        _, clean_l, clean_t, lock, tp = both(model, questions[qid], cfg, ["Mandela effect", "armchair", "stool", "wardrobe"])
        assert_same_reply(clean_l.reply, clean_t.reply)
        for a, b in zip(lock, tp):
            assert_same_reply(a.reply, b.reply)
            assert b.disagreements == 0


@pytest.mark.slow
def test_gpu_check_runs_in_its_cpu_smoke_mode(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--device", "cpu", "--questions", "1", "--substitutes", "2", "--budget", "10"]) == 0
    out = capsys.readouterr().out
    assert "hf two-phase     2/2 trials" in out and "argmax disagreements 0" in out
