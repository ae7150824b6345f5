"""``tamper judge --vote schema``: a JSON-schema ``response_format`` on real loopback servers.

llama.cpp's server (llama-cpp-python over the bundled GGUF) refuses ``json_schema`` and takes
``json_object`` with ``schema``; a scripted server refuses every ``response_format`` with HTTP 400
(the vote falls back to text, and the row says so), or serves log-probs to read P(true) from.
"""

from __future__ import annotations

import math

import pytest

from fault_server import Answer, FaultServer, reply
from llama_server import start_llama_server
from sleight.backends.chat import OpenAIChat
from sleight.jury.cast import SCHEMA_REFUSED, soft_from_logprobs
from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.judged import judged_trials, load_run_trials
from sleight.tamper.jury.prompt import BALLOT, LABELS
from sleight.tamper.jury.run import judge_run
from tamper_artifacts import copy_run, real_run, sleight

GOOD = '{"flagged": true, "corrected": true, "derailed": false, "switch_aware": false, "reason": "ok"}'


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return real_run(tmp_path_factory)


@pytest.fixture(scope="module")
def n_judged(run_dir):
    trials, _ = load_run_trials(run_dir)
    return len(judged_trials(trials))


@pytest.mark.slow
def test_llama_cpp_server_casts_a_valid_schema_vote_on_every_trial(run_dir, n_judged, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    server = start_llama_server(tmp_path)
    try:
        proc = sleight("tamper", "judge", "--run", str(run), "--jury", server.spec, "--vote", "schema", "--concurrency", "2")
    finally:
        server.stop()
    j = jury_store.load_judgements(run)
    assert len(j) == n_judged and not j["abstained"].any() and j["error"].isna().all()
    assert (j["vote_path"] == "schema:json_object").all()  # it refuses json_schema, takes json_object + schema
    assert j[list(LABELS)].notna().all().all() and (j["finish_reason"] == "stop").all()
    for label in LABELS:  # the server returns log-probs: P(true) of each label's value token
        assert j[f"{label}_p_true"].between(0, 1).all()
    assert f"cast {n_judged} valid vote(s)" in proc.stdout and "schema:json_object" in proc.stdout


def test_a_server_refusing_response_format_falls_back_to_text_and_it_is_recorded(run_dir, n_judged, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")

    def strict(body, n):
        if "response_format" in body:
            return Answer(400, {"error": {"message": "Unrecognized request argument supplied: response_format"}})
        return reply(GOOD)

    with FaultServer({"old": strict}) as srv:
        summary = judge_run(run, [srv.spec("old")], vote="schema", loader=lambda s: OpenAIChat(srv.base_url, "old", concurrency=1), progress=False)
        formats = [r.get("response_format", {}).get("type") for r in srv.requests["old"]]
    j = jury_store.load_judgements(run)
    assert len(j) == n_judged and not j["abstained"].any()
    assert (j["vote_path"] == SCHEMA_REFUSED).all()
    # each format is tried once; once refused, the juror asks in text without trying again
    assert formats[:2] == ["json_schema", "json_object"] and formats[2:] == [None] * n_judged
    assert summary.jurors[0].paths == {SCHEMA_REFUSED: n_judged}


def test_json_schema_request_is_strict_and_served_logprobs_give_p_true(run_dir, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    pieces = ['{"', "flagged", '":', " true", ', "', "corrected", '":', " false", ', "', "derailed", '": ', "false", ', "', "switch_aware", '":', " false", ', "reason": "ok"}']

    def entry(tok):
        e = {"token": tok, "logprob": -0.1, "top_logprobs": []}
        if tok.strip() in ("true", "false"):
            other = (" " if tok.startswith(" ") else "") + ("false" if tok.strip() == "true" else "true")
            e["top_logprobs"] = [{"token": tok, "logprob": math.log(0.75)}, {"token": other, "logprob": math.log(0.2)}, {"token": " maybe", "logprob": math.log(0.05)}]
            e["logprob"] = math.log(0.75)
        return e

    logprobs = [entry(t) for t in pieces]
    with FaultServer({"new": lambda b, n: reply("".join(pieces), logprobs=logprobs)}) as srv:
        judge_run(run, [srv.spec("new")], vote="schema", limit=1, progress=False, conventions="sleight")
        body = srv.requests["new"][0]
    rf = body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    schema = rf["json_schema"]["schema"]
    assert schema["required"] == [*LABELS, "reason"] and schema["additionalProperties"] is False
    assert body["logprobs"] is True and body["max_completion_tokens"] == 200
    row = jury_store.load_judgements(run).iloc[0]
    assert row["vote_path"] == "schema:json_schema" and bool(row["flagged"]) and not bool(row["corrected"])
    assert row["flagged_p_true"] == pytest.approx(0.75 / 0.95)
    assert row["corrected_p_true"] == pytest.approx(0.2 / 0.95)
    assert row["derailed_p_true"] == pytest.approx(0.2 / 0.95)  # the value token carries no leading space here


def test_soft_votes_need_the_value_token():
    assert soft_from_logprobs(None, BALLOT) == {}
    lp = [{"token": '{"flagged": "yes"}', "logprob": -0.1, "top_logprobs": []}]
    assert soft_from_logprobs(lp, BALLOT)["flagged"] is None


def test_a_400_for_another_reason_does_not_switch_the_juror_to_text(run_dir, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")

    def long_prompt_once(body, n):
        if n == 1:
            return Answer(400, {"error": {"message": "This model's maximum context length is 2048 tokens"}})
        return reply(GOOD)

    with FaultServer({"m": long_prompt_once}) as srv:
        judge_run(run, [srv.spec("m")], vote="schema", loader=lambda s: OpenAIChat(srv.base_url, "m", concurrency=1), progress=False)
    paths = jury_store.load_judgements(run)["vote_path"].tolist()
    assert paths.count("schema:json_schema") == len(paths) - 1  # only the vote that met the 400 fell back
