"""``sleight tamper run`` end to end: a real subprocess killed with SIGKILL mid-run, then resumed.

The resumed run directory is then checked against the issue's invariants: every trial once, no
whole-word trigger left in a tampered reply, ``n_swaps`` = injected runs, clean reply = unhooked
greedy answer, stored surprisal = an independent forward pass, Δ columns recomputed from the lists.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from sleight.tamper.store import load_clean, load_manifest, load_trials
from tolerances import FLOAT32_STORED_ATOL, LOGPROB_ATOL, TOP20_ENTROPY_FLOAT16_ATOL

# q001 starts with its trigger, q006 has a 4-token prefix before its first one, q089 has none.
QUESTION_IDS = ["q001", "q006", "q089"]
N_SUBS = 3
BUDGET = 16
TRIGGER_RE = re.compile(r"(?<![^\W\d_])the(?![^\W\d_]|['\u2019])", re.IGNORECASE)  # whole word, any case


def _cli(out: Path, qfile: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sleight.cli.main", "tamper", "run", "--questions-file", str(qfile), "--substitutes", str(N_SUBS),
            "--max-new-tokens", str(BUDGET), "--out", str(out), "--no-progress", *extra]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """Start a run, SIGKILL it as soon as its first question is committed, start it again."""
    tmp = tmp_path_factory.mktemp("tamper_run")
    shipped = {json.loads(line)["id"]: line for line in Path(__file__).parents[1].joinpath("src/sleight/data/sleight_questions.jsonl").read_text().splitlines()}
    qfile = tmp / "questions.jsonl"
    qfile.write_text("".join(shipped[q] + "\n" for q in QUESTION_IDS))
    out = tmp / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(_cli(out, qfile), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 400
    parts: list[Path] = []
    while time.time() < deadline and proc.poll() is None:
        parts = sorted((out / "trials.parquet").glob("*.parquet"))
        if parts:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    first = {p.name: p.stat().st_mtime_ns for p in sorted((out / "trials.parquet").glob("*.parquet"))}
    manifest_after_kill = load_manifest(out)
    rerun = subprocess.run(_cli(out, qfile), env=env, capture_output=True, text=True, timeout=600)
    return {"out": out, "qfile": qfile, "killed_rc": proc.returncode, "first": first, "manifest_after_kill": manifest_after_kill, "rerun": rerun}


@pytest.fixture(scope="module")
def run_dir(killed_and_resumed):
    return killed_and_resumed["out"]


@pytest.mark.slow
def test_killed_run_resumes_with_every_trial_exactly_once(killed_and_resumed):
    k = killed_and_resumed
    out = k["out"]
    assert k["killed_rc"] == -signal.SIGKILL, "the run finished before it could be killed"
    assert 1 <= len(k["first"]) < len(QUESTION_IDS)
    assert k["manifest_after_kill"]["completed"] is False
    assert k["rerun"].returncode == 0, k["rerun"].stderr
    assert "already done" in k["rerun"].stdout
    # Committed parts were not redone.
    for name, mtime in k["first"].items():
        assert (out / "trials.parquet" / name).stat().st_mtime_ns == mtime
    trials = load_trials(out)
    assert len(trials) == len(QUESTION_IDS) * N_SUBS
    assert not trials.duplicated(["question_id", "substitute"]).any()
    assert trials["question_id"].tolist() == [q for q in QUESTION_IDS for _ in range(N_SUBS)]
    # Other readers see the same rows once each.
    assert len(pd.read_parquet(out / "trials.parquet")) == len(trials)
    con = duckdb.connect()
    n, distinct = con.execute(
        f"select count(*), count(distinct (question_id, substitute)) from read_parquet('{out}/trials.parquet/*.parquet')"
    ).fetchone()
    assert n == distinct == len(trials)
    assert len(load_clean(out)) == len(QUESTION_IDS)
    m = load_manifest(out)
    assert m["completed"] is True and len(m["sessions"]) == 2 and m["sessions"][-1]["finished"]
    assert set(m["prompts"]) == set(QUESTION_IDS)
    assert m["model"]["revision"] and m["model"]["chat_template_sha256"] and m["versions"]["torch"]
    assert m["config"]["trigger"] == "the" and m["config"]["max_new_tokens"] == BUDGET
    assert not list((out / ".tmp").glob("*"))


@pytest.mark.slow
def test_run_again_does_nothing_and_other_config_is_refused(killed_and_resumed):
    out, qfile = killed_and_resumed["out"], killed_and_resumed["qfile"]
    before = {p.name: p.stat().st_mtime_ns for p in (out / "trials.parquet").glob("*.parquet")}
    again = subprocess.run(_cli(out, qfile), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in (out / "trials.parquet").glob("*.parquet")} == before
    other = subprocess.run(_cli(out, qfile, "--trigger", "a"), capture_output=True, text=True, timeout=120)
    assert other.returncode == 2
    err = other.stderr.strip().splitlines()
    assert len(err) == 1 and "different config" in err[0] and "trigger" in err[0] and "Traceback" not in other.stderr


@pytest.mark.slow
def test_replies_budget_swaps_and_untouched(run_dir):
    trials, clean = load_trials(run_dir), load_clean(run_dir).set_index("question_id")
    for _, t in trials.iterrows():
        inj = np.asarray(t["injected"], dtype=bool)
        # The study's conventions (the default): a substitute may end past the budget, and a swap is
        # one substitution (two adjacent ones are two swaps inside one injected run).
        steps, ids = list(t["swap_steps"]), [list(x) for x in t["swap_ids"]]
        assert len(t["token_ids"]) == len(inj) == t["n_tokens"] <= BUDGET + max([len(x) - 1 for x in ids], default=0)
        assert t["n_swaps"] == len(steps) == t["n_substitutions"] and set(a for a, _ in _runs(inj)) <= set(steps)
        assert ids == [list(t["token_ids"][a : a + len(x)]) for a, x in zip(steps, ids)] and all(inj[a : a + len(x)].all() for a, x in zip(steps, ids))
        assert inj.sum() == sum(len(x) for x in ids)
        assert t["is_entity"] == (t["substitute_index"] == 0)
        c = clean.loc[t["question_id"]]
        if t["untouched"]:
            assert t["n_swaps"] == 0 and list(t["token_ids"]) == list(c["token_ids"]) and t["reply"] == c["reply"]
            assert c["n_triggers"] == 0 and not TRIGGER_RE.search(c["reply"])
        else:
            assert t["n_swaps"] >= 1 and not TRIGGER_RE.search(t["reply"]), t["reply"]
            k = c["trigger_steps"][0]
            assert list(t["token_ids"][:k]) == list(c["token_ids"][:k])
    assert trials.groupby("question_id")["untouched"].all().to_dict() == {"q001": False, "q006": False, "q089": True}


@pytest.mark.slow
def test_clean_reply_is_the_unhooked_greedy_answer(model, run_dir):
    for _, c in load_clean(run_dir).iterrows():
        ids = model.encode(c["rendered_prompt"])
        assert ids == model.render_chat([{"role": "user", "content": c["question"]}]).ids
        gen = model.greedy([ids], BUDGET)[0]
        # The study's conventions: a reply the model ended keeps its end-of-turn token.
        assert list(c["token_ids"]) == gen.token_ids + ([min(model.eos_ids)] if gen.finish_reason == "stop" else [])
        assert c["reply"] == model.decode(gen.token_ids) and c["finish_reason"] == gen.finish_reason


@pytest.mark.slow
def test_stored_surprisal_matches_an_independent_forward_pass(model, run_dir):
    clean, trials = load_clean(run_dir), load_trials(run_dir)
    for _, c in clean.iterrows():
        rows = [(c["token_ids"], np.zeros(len(c["token_ids"]), bool), c["surprisal"], c["logprobs"])]
        rows += [(t["token_ids"], np.asarray(t["injected"], bool), t["surprisal"], t["logprobs"]) for _, t in trials[trials.question_id == c["question_id"]].iterrows()]
        # One plain forward pass over prompt + stored tokens per row (the prompt computed once).
        lps = model.continuation_logprobs(model.encode(c["rendered_prompt"]), [[int(x) for x in r[0]] for r in rows])
        for (_ids, inj, surprisal, logprobs), lp in zip(rows, lps):
            s = np.asarray(surprisal, dtype=np.float64)
            assert np.isnan(s[inj]).all() and not np.isnan(s[~inj]).any()
            assert np.allclose(s[~inj], -lp[~inj], atol=LOGPROB_ATOL)
            assert np.allclose(np.asarray(logprobs, dtype=np.float64), lp, atol=LOGPROB_ATOL)  # injected tokens too


@pytest.mark.slow
def test_delta_columns_recompute_from_the_stored_lists(run_dir):
    trials, clean = load_trials(run_dir), load_clean(run_dir).set_index("question_id")
    width = 8
    for _, t in trials.iterrows():
        c = clean.loc[t["question_id"]]
        # entropy_top20 is the renormalised entropy of the stored top-20 (float16) log-probs.
        top = np.stack(list(c["top20_logprobs"])).astype(np.float64)
        p = np.exp(top) / np.exp(top).sum(1, keepdims=True)
        assert np.allclose(-(p * np.log(p)).sum(1), np.asarray(c["entropy_top20"], np.float64), atol=TOP20_ENTROPY_FLOAT16_ATOL)
        inj = list(t["injected"])
        steps = list(t["swap_steps"])
        n = len(inj)
        for sig, col in (("surprisal", "delta_surprisal"), ("entropy_top20", "delta_entropy"), ("entropy_full", "delta_entropy_full")):
            vals, cvals = list(t[sig]), [float(x) for x in c[sig]]
            if not steps:
                assert pd.isna(t[col]) and pd.isna(t[col + "_matched"])
                continue
            study, matched = [], []
            for i, s in enumerate(steps):
                after = [j for j in range(s, n) if not inj[j]]
                study += [vals[j] for j in after[:width]]
                stop = steps[i + 1] if i + 1 < len(steps) else n
                matched += [vals[j] for j in after if j < stop][:width]
            base = []
            cs, ce = list(c["trigger_steps"]), list(c["trigger_ends"])
            for i, e in enumerate(ce):
                stop = cs[i + 1] if i + 1 < len(cs) else len(cvals)
                base += cvals[e : min(e + width, stop)]
            want = np.mean(study) - np.mean(cvals) if study else None
            want_m = np.mean(matched) - np.mean(base) if matched and base else None
            assert (pd.isna(t[col]) if want is None else np.isclose(t[col], want, atol=FLOAT32_STORED_ATOL)), (col, t[col], want)
            assert (pd.isna(t[col + "_matched"]) if want_m is None else np.isclose(t[col + "_matched"], want_m, atol=FLOAT32_STORED_ATOL))


def _runs(flags: np.ndarray):
    i, n = 0, len(flags)
    while i < n:
        if flags[i]:
            j = i
            while j < n and flags[j]:
                j += 1
            yield i, j
            i = j
        else:
            i += 1


def test_inputs_and_bad_input_errors(tmp_path, capsys):
    from sleight.cli.main import main
    from sleight.tamper.data import load_questions, load_substitutes

    qs, src = load_questions()
    subs, _ = load_substitutes()
    assert (len(qs), len(subs), src) == (100, 101, "shipped")
    assert (qs[0].id, qs[-1].id, subs[0]) == ("q001", "q100", "Mandela effect")
    assert not any(s.startswith("#") for s in subs)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "ok?"}\n{"id": "b", "question": \n')
    dup = tmp_path / "dup.txt"
    dup.write_text("# comment\ncanoe\ncanoe\n")
    cases = [
        (["--questions-file", str(tmp_path / "missing.jsonl")], "file not found"),
        (["--questions-file", str(bad)], "line 2"),
        (["--substitutes-file", str(dup)], "duplicate substitute 'canoe'"),
        (["--questions", "0"], "--questions must be at least 1"),
        (["--trigger", "two words"], "--trigger"),
        (["--max-new-tokens", "0"], "--max-new-tokens"),
    ]
    for args, msg in cases:
        assert main(["tamper", "run", "--out", str(tmp_path / "never"), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], (args, err)
    assert not (tmp_path / "never").exists()
