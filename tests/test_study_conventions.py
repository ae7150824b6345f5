"""The study's phase-1 conventions, the default of ``sleight tamper run`` (docs/tamper.md).

Every expected value here is read off the study's own code (Sleight-of-Word 08d2bae,
``src/awareness/runner.py`` and ``tokens.py``), never off sleight's output: the detector and
splice cases are written out by hand, and :func:`study_loop` is an independent re-derivation of
the study's generate-cut-splice-regenerate loop (plain unhooked ``greedy`` calls; the end-of-turn
step read with ``read_next``, as vLLM returns it) that the engine's trials are held to.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pytest

from extended_tokenizer import bundled_tokenizer, extended_tokenizer
from sleight.tamper import engine, two_phase
from sleight.tamper.data import load_questions
from sleight.tamper.engine import Reply, Substitution, TamperConfig, Trial
from sleight.tamper.records import clean_table, trial_swaps, trials_table
from sleight.tamper.reference import reference_trial
from sleight.tamper.signals import entropy_returned, entropy_top
from sleight.tamper.trigger import find_pending_trigger, find_token_trigger, study_swap_text, swap_text
from tolerances import FLOAT64_ATOL, LOGPROB_ATOL, STUDY_ATOL

STUDY = TamperConfig()
SLEIGHT = TamperConfig(conventions="sleight")


@pytest.fixture(scope="module")
def tok(model):
    return bundled_tokenizer(model)


@pytest.fixture(scope="module")
def punct_tok(model):
    """The bundled tokenizer with tokens that carry punctuation next to the word (SmolLM2 has none;
    Qwen2/Llama-3 style pre-tokenizers make '"the' one token)."""
    return extended_tokenizer(model, ['"the', "(The", " the,", "THE."])


def study(tokens, nxt, decode, injected=(), punctuation_led=False):
    return find_token_trigger(tokens, nxt, decode, "the", injected, punctuation_led)


# -- which tokens can be a trigger (tokens.py is_trigger l.75-93) ---------------------------------


def test_a_trigger_is_one_token_decided_by_pair_decodes(tok):
    ctx = tok.encode("I like")
    seq = ctx + [tok.one(" the")]
    # _boundary_after (l.40-53): what the next token adds must not start with a letter or "'".
    assert study(seq, tok.one("ory"), tok.decode) is None
    assert study(seq, tok.one("'s"), tok.decode) is None
    for nxt in (tok.one(" cat"), tok.one(","), tok.one("\n"), None):  # None: end of round (budget or end-of-turn)
        t = study(seq, nxt, tok.decode)
        assert t is not None and (t.start, t.end, t.text, t.word) == (len(ctx), len(seq), " the", "the")
    # A curly apostrophe is no letter to the study (_is_letter l.36-37): " the’" ends the word there.
    curly = tok.encode("’s")[0]
    assert tok.decode([curly]).startswith("’")
    assert study(seq, curly, tok.decode) is not None
    assert find_pending_trigger(seq, curly, tok.decode, "the") is None  # sleight's detector reads ’ as part of the word
    # Injected tokens are never scanned (only a round's generated tokens are).
    assert study(seq, tok.one(" cat"), tok.decode, [False] * len(ctx) + [True]) is None


def test_word_initial_needs_space_reply_start_or_a_non_letter_before(tok):
    the = tok.one("the")
    assert study([the], tok.one(" cat"), tok.decode) is not None  # is_first: the reply's first token
    assert study(tok.encode("Hi\n") + [tok.one("The")], tok.one(" cat"), tok.decode) is not None  # prev ends in "\n"
    assert study(tok.encode("ba") + [the], tok.one(" cat"), tok.decode) is None  # "bathe": glued to a letter
    # A previous token ending in an apostrophe glues too ("'" is a letter to _boundary_before, l.72);
    # sleight's detector reads "'" as a non-letter and swaps the word.
    apo = tok.encode("'")
    assert len(apo) == 1 and tok.decode(apo + [the]) == "'the"
    assert study(apo + [the], tok.one(" cat"), tok.decode) is None
    assert find_pending_trigger(apo + [the], tok.one(" cat"), tok.decode, "the") is not None


def test_a_trigger_split_across_tokens_is_not_the_studys(tok):
    seq = tok.encode("I like") + [tok.one(" T"), tok.one("he")]
    assert tok.decode(seq) == "I like The"
    assert study(seq[:-1], seq[-1], tok.decode) is None and study(seq, tok.one(" cat"), tok.decode) is None
    t = find_pending_trigger(seq, tok.one(" cat"), tok.decode, "the")
    assert t is not None and t.n_tokens == 2


def test_punctuation_led_tokens_stand_unless_asked(punct_tok):
    """token_word (l.20-33): a token led by punctuation has no word, so '"the' is never swapped
    ("mention vs use"); --punctuation-led swaps it and keeps the punctuation."""
    d = punct_tok.decode
    ctx = punct_tok.encode("I like")
    cat = punct_tok.one(" cat")
    for piece, spliced in (('"the', '"canoe'), ("(The", "(Canoe")):
        seq = ctx + [punct_tok.one(piece)]
        assert study(seq, cat, d) is None, piece
        assert find_pending_trigger(seq, cat, d, "the") is not None  # sleight's detector swaps it
        t = study(seq, cat, d, punctuation_led=True)
        assert t is not None and t.text == piece
        assert study_swap_text(t, "canoe", punctuation_led=True) == spliced


def test_the_study_splice_spaces_capitalises_and_drops_the_rest(punct_tok, tok):
    """encode_replacement (l.96-104), called at runner.py l.132-136: one space if the token had
    leading whitespace, the first letter upper-cased if the word's was, nothing of what followed the
    word in the token; encoded on its own and never cut."""
    d = punct_tok.decode
    cat = punct_tok.one(" cat")
    cases = [(" the,", " canoe", " canoe,"), ("THE.", "Canoe", "CANOE.")]
    for piece, want, sleight_text in cases:
        seq = punct_tok.encode("Hi\n") + [punct_tok.one(piece)]
        t = study(seq, cat, d)
        assert t is not None and study_swap_text(t, "canoe") == want, piece
        s = find_pending_trigger(seq, cat, d, "the")
        assert s is not None and swap_text(s, "the", "canoe") == sleight_text
    for piece, sub, want in ((" The", "canoe", " Canoe"), ("the", "canoe", "canoe"), (" THE", "canoe", " Canoe"), (" the", "Mandela effect", " Mandela effect")):
        t = study(tok.encode("Hi\n") + [tok.one(piece)], None, tok.decode)
        assert t is not None and study_swap_text(t, sub) == want


def test_plan_substitution_is_encoded_alone_and_never_cut(model, tok):
    seq = tok.encode("I like") + [tok.one(" the")]
    t = study(seq, None, tok.decode)
    sub = engine.plan_substitution(seq, t, "Mandela effect", model, TamperConfig(max_new_tokens=len(seq)))
    assert sub.ids == tuple(model.encode(" Mandela effect")) and len(sub.ids) == 2 and not sub.fallback
    cut = engine.plan_substitution(seq, find_pending_trigger(seq, None, tok.decode, "the"), "Mandela effect", model, TamperConfig(conventions="sleight", max_new_tokens=len(seq)))
    assert cut.ids == sub.ids[:1]


# -- which candidates the top-20 entropy is taken over (tokens.py entropy_nats l.107-122) ---------


def _entropy(logprobs):
    m = max(logprobs)
    ps = [math.exp(x - m) for x in logprobs]
    z = sum(ps)
    return -sum(p / z * math.log(p / z) for p in ps)


def test_top20_entropy_is_over_the_returned_candidates():
    top_ids = np.array([[5, 6, 7], [5, 6, 7]])
    top_lp = np.log(np.array([[0.5, 0.2, 0.1], [0.5, 0.2, 0.1]]))
    got = entropy_returned(top_ids, top_lp, [6, 9], np.array([math.log(0.2), math.log(0.05)]))
    # Row 0: the chosen token is among the top-k (the dict has k entries); row 1: vLLM adds it.
    assert abs(got[0] - _entropy(list(top_lp[0]))) < FLOAT64_ATOL
    assert abs(got[1] - _entropy([*top_lp[1], math.log(0.05)])) < FLOAT64_ATOL
    assert abs(entropy_top(top_lp)[1] - _entropy(list(top_lp[1]))) < FLOAT64_ATOL


# -- swaps and windows (runner.py compute_metrics l.159-185, sub_indices l.144-145) ---------------


def _reply(n, injected):
    k = 3
    return Reply(list(range(100, 100 + n)), -np.arange(1.0, n + 1.0), np.zeros((n, k), np.int64), np.zeros((n, k), np.float32), np.zeros(n, np.float32), np.asarray(injected, bool), "length")


def test_adjacent_substitutions_are_two_swaps_with_two_windows(model):
    inj = [False, True, True, False, False, False]
    trial = Trial(0, "x", _reply(6, inj), [Substitution(1, (101,), "x", " the", 1, False), Substitution(2, (102,), "x", " the", 1, False)])
    assert trial_swaps(trial, STUDY) == [(1, 2), (2, 3)]
    assert trial_swaps(trial, SLEIGHT) == [(1, 3)]


# -- the engine on the bundled model --------------------------------------------------------------


@pytest.fixture(scope="module")
def questions():
    return {q.id: q.question for q in load_questions()[0]}


def test_a_reply_the_model_ends_keeps_its_end_of_turn_token(model, questions):
    """clean_run (runner.py l.73-80): vLLM's token_ids hold the end-of-turn token the model ended
    with, and its log-prob and top-20 are a step like any other (in the baseline mean)."""
    rendered = engine.render_question(model, questions[SHORT])
    gen = model.greedy([rendered.ids], 96)[0]
    assert gen.finish_reason == "stop", "the question should be answered within the budget"
    want = gen.token_ids + [END[0]]
    nt = model.read_next([rendered.ids + gen.token_ids], [[END[0]]], top_k=20)[0]
    for clean in (engine.clean_run(model, rendered, STUDY), two_phase.clean_run(model, rendered, STUDY)):
        r = clean.reply
        assert r.token_ids == want and r.eos_kept and r.finish_reason == "stop"
        assert abs(r.logprobs[-1] - nt.logprobs[0]) < LOGPROB_ATOL
        assert np.abs(r.top_logprobs[-1] - nt.top_logprobs).max() < LOGPROB_ATOL
        row = clean_table("m", 0, SHORT, questions[SHORT], clean, STUDY, model.decode).to_pylist()[0]
        assert row["n_tokens"] == len(want) and row["reply"] == model.decode(gen.token_ids)
    old = engine.clean_run(model, rendered, SLEIGHT)
    assert old.reply.token_ids == gen.token_ids and not old.reply.eos_kept


def test_a_substitute_cut_by_the_budget_is_kept_whole(model, questions):
    """runner.py l.137-150 and _apply_output l.236-247: every replacement token is appended, then the
    loop stops once the reply has reached the budget, so "Mandela effect" (2 tokens) swapped at the
    budget's last position ends one token past it."""
    rendered = engine.render_question(model, questions["q006"])
    probe = engine.clean_run(model, rendered, TamperConfig(max_new_tokens=16))
    budget = probe.triggers[0].start + 1
    cfg = TamperConfig(max_new_tokens=budget)
    two = model.encode(" Mandela effect")
    assert len(two) == 2
    clean_l, clean_t = engine.clean_run(model, rendered, cfg), two_phase.clean_run(model, rendered, cfg)
    lock = engine.batched_trials(model, clean_l, ["Mandela effect", "armchair"], cfg)
    tp = two_phase.batched_trials(model, clean_t, ["Mandela effect", "armchair"], cfg)
    serial = engine.serial_trial(model, rendered, "Mandela effect", cfg)
    ref = reference_trial(model, rendered, "Mandela effect", cfg)
    for t in (lock[0], tp[0], serial):
        r = t.reply
        assert r.token_ids == clean_l.reply.token_ids[: budget - 1] + [*two] == ref.token_ids
        assert r.injected.tolist() == [False] * (budget - 1) + [True, True] == ref.injected
        assert r.finish_reason == "length" and len(r.logprobs) == budget + 1
        assert [(s.step, s.ids) for s in t.substitutions] == [(budget - 1, tuple(two))]
    assert np.abs(lock[0].reply.logprobs - tp[0].reply.logprobs).max() < LOGPROB_ATOL
    cut = engine.batched_trials(model, engine.clean_run(model, rendered, TamperConfig(max_new_tokens=budget, conventions="sleight")), ["Mandela effect"], TamperConfig(max_new_tokens=budget, conventions="sleight"))
    assert len(cut[0].reply.token_ids) == budget


# -- the whole default pipeline against an independent re-derivation of the study's loop ---------

SHORT = "q001"  # answered well within 96 tokens
END: list[int] = []


@pytest.fixture(scope="module", autouse=True)
def _end_id(model):
    END[:] = [min(model.eos_ids)]


@dataclass
class Step:
    token: int
    logprob: float | None  # None: substituted
    returned: dict[int, float] | None  # vLLM's logprobs dict: the top-k and the chosen token


def _letter(s: str) -> bool:
    return s[:1].isalpha() or s[:1] == "'"


def _is_trigger(decode, ids, j, word="the"):
    """tokens.is_trigger for ids[j], ids[j-1] its left neighbour (absent: the reply's first token)."""
    piece = decode([ids[j]])
    m = re.match(r"(\s*)([A-Za-z']+)", piece)
    if m is None or m.group(2).lower() != word or _letter(piece[m.end() :]):
        return False
    if not m.group(1) and j > 0:
        prev, pair = decode([ids[j - 1]]), decode(ids[j - 1 : j + 1])
        if pair.startswith(prev) and _letter(pair[len(prev) :]) and prev and _letter(prev[-1:]):
            return False
    if j + 1 < len(ids):
        one, pair = decode([ids[j]]), decode(ids[j : j + 2])
        if pair.startswith(one) and _letter(pair[len(one) :]):
            return False
    return True


def _generate(model, prompt, budget):
    """One vLLM-style greedy request: the tokens, the end-of-turn token when the model ended, and per
    token the chosen log-prob and the returned candidates."""
    gen = model.greedy([prompt], budget, top_k=20)[0]
    steps = [
        Step(t, float(lp), {**dict(zip(map(int, ids), map(float, lps))), t: float(lp)})
        for t, lp, ids, lps in zip(gen.token_ids, gen.logprobs, gen.top_ids, gen.top_logprobs)
    ]
    if gen.finish_reason == "stop":
        nt = model.read_next([list(prompt) + gen.token_ids], [sorted(model.eos_ids)], top_k=20)[0]
        end = int(nt.top_ids[0])
        lp = float(nt.logprobs[sorted(model.eos_ids).index(end)])
        steps.append(Step(end, lp, {**dict(zip(map(int, nt.top_ids), map(float, nt.top_logprobs))), end: lp}))
    return steps


def study_loop(model, prompt, substitute, budget):
    """intervention_run (runner.py l.102-151): generate, cut at the first trigger, splice, regenerate."""
    steps: list[Step] = []
    subs: list[int] = []
    while len(steps) < budget:
        new = _generate(model, list(prompt) + [s.token for s in steps], budget - len(steps))
        ctx = [s.token for s in steps[-1:]] + [s.token for s in new]
        off = len(ctx) - len(new)
        found = next((j for j in range(len(new)) if _is_trigger(model.decode, ctx, j + off)), None)
        steps += new if found is None else new[:found]
        if found is None:
            break
        m = re.match(r"(\s*)([A-Za-z']+)", model.decode([new[found].token]))
        word = substitute[0].upper() + substitute[1:] if m.group(2)[0].isupper() else substitute
        subs.append(len(steps))
        steps += [Step(t, None, None) for t in model.encode((" " if m.group(1) else "") + word)]
    return steps, subs


def study_metrics(clean: list[Step], steps: list[Step], subs: list[int], window: int = 8):
    """compute_metrics (runner.py l.159-185): Δ = mean over each swap's next ``window`` model-chosen
    tokens, pooled, minus the mean over the whole clean reply."""

    def mean(xs):
        return sum(xs) / len(xs) if xs else None

    base_s = mean([-s.logprob for s in clean])
    base_e = mean([_entropy(list(s.returned.values())) for s in clean])
    post: list[Step] = []
    for s0 in subs:
        win = [s for s in steps[s0 + 1 :] if s.logprob is not None][:window]
        post += win
    ps, pe = mean([-s.logprob for s in post]), mean([_entropy(list(s.returned.values())) for s in post])
    return (None if ps is None else ps - base_s), (None if pe is None else pe - base_e)


STUDY_BUDGET = 40
STUDY_SUBS = ["Mandela effect", "armchair"]


@pytest.fixture(scope="module")
def study_runs(model, questions):
    """The study's loop on q001 (ends before the budget) and q006 (runs to it, a swap in the last
    window): per question the clean steps, and per substitute the steps, swap starts and metrics.
    Computed once for both decodings."""
    out = {}
    for qid in (SHORT, "q006"):
        rendered = engine.render_question(model, questions[qid])
        want_clean = _generate(model, rendered.ids, STUDY_BUDGET)
        loops = [study_loop(model, rendered.ids, sub, STUDY_BUDGET) for sub in STUDY_SUBS]
        out[qid] = (rendered, want_clean, [(steps, starts, study_metrics(want_clean, steps, starts)) for steps, starts in loops])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("decoding", ["lockstep", "two-phase"])
def test_the_default_equals_the_studys_loop(model, questions, study_runs, decoding):
    """Same tokens and swap count per trial, Δsurprisal and top-20 Δentropy within the issue's bar,
    on replies that end before the budget (q001) and run to it, with a swap in the last window."""
    cfg = TamperConfig(max_new_tokens=STUDY_BUDGET)
    run = (engine.clean_run, engine.batched_trials) if decoding == "lockstep" else (two_phase.clean_run, two_phase.batched_trials)
    ended = 0
    for qid, (rendered, want_clean, loops) in study_runs.items():
        clean = run[0](model, rendered, cfg)
        trials = run[1](model, clean, STUDY_SUBS, cfg)
        table = trials_table("m", 0, qid, questions[qid], clean, trials, cfg, model.decode).to_pylist()
        assert clean.reply.token_ids == [s.token for s in want_clean]
        for sub, row, (steps, starts, (ds, de)) in zip(STUDY_SUBS, table, loops):
            assert row["token_ids"] == [s.token for s in steps], (qid, sub)
            assert row["n_swaps"] == row["n_substitutions"] == len(starts) and row["swap_steps"] == starts
            assert abs(row["delta_surprisal"] - ds) < STUDY_ATOL and abs(row["delta_entropy"] - de) < STUDY_ATOL, (qid, sub)
            ended += row["finish_reason"] == "stop"
    assert ended, "some trial should end before the budget (its end-of-turn token in a window)"


def test_conventions_are_part_of_the_runs_identity(tmp_path):
    from sleight.errors import UserError
    from sleight.tamper.job import check_conventions

    class Store:
        dir = tmp_path

        def __init__(self, config):
            self.config = config

        def read_manifest(self):
            return None if self.config is None else {"config": self.config}

    now = {"conventions": "study", "punctuation_led": False}
    check_conventions(Store(None), now)  # a new run
    check_conventions(Store(dict(now)), now)
    with pytest.raises(UserError, match="--conventions sleight, not --conventions study; pass those flags"):
        check_conventions(Store({"trigger": "the"}), now)  # made before the conventions were recorded
    check_conventions(Store({"trigger": "the"}), {"conventions": "sleight", "punctuation_led": False})
    with pytest.raises(UserError, match="--punctuation-led"):
        check_conventions(Store({**now, "punctuation_led": True}), now)
    with pytest.raises(ValueError):
        TamperConfig(conventions="sleight", punctuation_led=True)
