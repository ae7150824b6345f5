"""``sleight tamper judge`` end to end on a real run: real HTTP servers on 127.0.0.1.

The OpenAI-compatible path runs against llama.cpp's server over the bundled GGUF; the parsing
cases (garbage, "false" strings, a truncated object, a failing endpoint) against a scripted
chat-completions server, because no real model produces them on demand.
"""

from __future__ import annotations

import json
import socket

import pandas as pd
import pytest

from fault_server import FaultServer, scripted
from llama_server import start_llama_server
from sleight.backends.chat import LocalChat
from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.judged import judged_trials, load_run_trials
from sleight.tamper.jury.prompt import LABELS, parse_vote
from sleight.tamper.jury.run import judge_run
from tamper_artifacts import copy_run, real_run, sleight

pytestmark = pytest.mark.slow  # a real run judged by real servers (module fixtures)


FALSE_STRINGS = 'Sure:\n{"flagged": "false", "corrected": "true", "derailed": "false", "switch_aware": "false", "reason": "reads fine"}'
TRUNCATED = '```json\n{"flagged": false, "corrected": true, "derail'


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return real_run(tmp_path_factory)


@pytest.fixture(scope="module")
def n_judged(run_dir):
    trials, _ = load_run_trials(run_dir)
    n = len(judged_trials(trials))
    assert n >= 2, "the fixture run must contain swapped trials"
    return n


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    server = start_llama_server(tmp_path_factory.mktemp("llama"))
    yield server
    server.stop()


def _n_requests(srv: FaultServer, model: str) -> int:
    return len(srv.requests.get(model, []))


def test_garbage_false_strings_and_truncated_replies(run_dir, n_judged, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    scripts = {"garbage": lambda b: "I think the reply is fine.", "falsestr": lambda b: FALSE_STRINGS, "truncated": lambda b: TRUNCATED}
    with scripted(scripts) as srv:
        summary = judge_run(run, [srv.spec(m) for m in scripts], progress=False, conventions="sleight")
        # under sleight's rules an unparsable reply is retried exactly once; a readable one is not
        assert _n_requests(srv, "garbage") == 2 * n_judged
        assert _n_requests(srv, "truncated") == 2 * n_judged
        assert _n_requests(srv, "falsestr") == n_judged
        retry = srv.requests["garbage"][-1]["messages"]
        assert retry[-2] == {"role": "assistant", "content": "I think the reply is fine."} and "JSON" in retry[-1]["content"]
    j = jury_store.load_judgements(run)
    assert len(j) == 3 * n_judged
    by = {m: j[j["juror"] == srv.spec(m)] for m in scripts}
    # "false" is false, "true" is true: a real vote, not an abstention
    fs = by["falsestr"]
    assert not fs["abstained"].any() and (fs["attempts"] == 1).all()
    assert (fs["flagged"] == False).all() and (fs["corrected"] == True).all()  # noqa: E712
    assert (fs["reason"] == "reads fine").all()
    # garbage and truncated: recorded abstentions with the raw replies kept, labels null
    for m, raw in (("garbage", "I think the reply is fine."), ("truncated", TRUNCATED)):
        rows = by[m]
        assert rows["abstained"].all() and (rows["attempts"] == 2).all()
        assert (rows["raw_reply"] == raw).all() and (rows["first_reply"] == raw).all()
        assert rows[list(LABELS)].isna().all().all()
        assert rows["error"].isna().all()
    assert [js.abstained for js in summary.jurors] == [n_judged, 0, n_judged]
    # one vote of three is no majority: the verdict is "no majority", never a silent "no"
    v = jury_store.load_verdicts(run)
    assert len(v) == n_judged
    assert v[list(LABELS)].isna().all().all() and v["undecided"].all()
    assert (v["n_abstained"] == 2).all() and (v["flagged_no"] == 1).all()


def test_down_endpoint_is_one_clear_error_and_writes_nothing(run_dir, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = sleight("tamper", "judge", "--run", str(run), "--jury", f"openai:http://127.0.0.1:{port}/v1#judge", check=False)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and f"127.0.0.1:{port}" in err[0] and "not reachable" in err[0]
    assert "Traceback" not in proc.stderr
    assert not (run / jury_store.JUDGEMENTS).exists() and not (run / jury_store.VERDICTS).exists()


def test_endpoint_failing_mid_run_is_an_abstention_then_asked_again(run_dir, n_judged, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    state = {"up": False}

    def flaky(body):
        if not state["up"]:
            return 503  # the server fails every request (the client retries, then gives up)
        return '{"flagged": true, "corrected": true, "derailed": false, "switch_aware": false, "reason": "ok"}'

    with scripted({"flaky": flaky}) as srv:
        from sleight.backends.chat import OpenAIChat

        def loader(spec):
            return OpenAIChat(srv.base_url, "flaky", retries=1)

        first = judge_run(run, [srv.spec("flaky")], progress=False, loader=loader)
        j = jury_store.load_judgements(run)
        assert first.jurors[0].errors == n_judged and j["abstained"].all() and j["error"].notna().all()
        assert (j["raw_reply"] == "").all()
        state["up"] = True
        second = judge_run(run, [srv.spec("flaky")], progress=False, loader=loader)
    assert second.jurors[0].asked == n_judged and second.jurors[0].skipped == 0
    j = jury_store.load_judgements(run)
    assert len(j) == n_judged and not j["abstained"].any() and j["error"].isna().all()
    v = jury_store.load_verdicts(run)
    assert v["flagged"].all()  # a jury of one decides with its vote


def test_judging_is_resumable_and_skips_stored_votes(run_dir, n_judged, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    reply = '{"flagged": false, "corrected": true, "derailed": false, "switch_aware": false, "reason": "x"}'
    with scripted({"a": lambda b: reply, "b": lambda b: reply}) as srv:
        judge_run(run, [srv.spec("a")], progress=False, batch=1)
        parts = sorted((run / jury_store.JUDGEMENTS).glob("part-*.parquet"))
        assert len(parts) == n_judged  # one committed part per batch
        before = jury_store.load_judgements(run)
        again = judge_run(run, [srv.spec("a"), srv.spec("b")], progress=False)
        assert _n_requests(srv, "a") == n_judged and _n_requests(srv, "b") == n_judged
    assert again.jurors[0].asked == 0 and again.jurors[0].skipped == n_judged
    after = jury_store.load_judgements(run)
    assert len(after) == 2 * n_judged
    pd.testing.assert_frame_equal(
        after[after["juror"] == srv.spec("a")].reset_index(drop=True), before.reset_index(drop=True)
    )
    # the no-answers prompt is a different vote (no accepted answers in it)
    with scripted({"a": lambda b: reply}) as srv2:
        judge_run(run, [srv2.spec("a")], variant="no-answers", progress=False)
        assert all("Accepted answers" not in r["messages"][-1]["content"] for r in srv2.requests["a"])
    assert set(jury_store.load_judgements(run)["prompt_variant"]) == {"default", "no-answers"}
    meta = json.loads((run / jury_store.JURY_META).read_text())
    assert meta["prompt_variant"] == "no-answers" and meta["jury_size"] == 1


def test_trial_records_are_never_rewritten(run_dir, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with scripted({"a": lambda b: "nope"}) as srv:
        judge_run(run, [srv.spec("a")], progress=False)
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert all(after[k] == v for k, v in before.items())


@pytest.mark.slow
def test_real_openai_compatible_server_as_judge(run_dir, n_judged, llama, tmp_path):
    """The CLI against llama.cpp's server over the bundled GGUF: every vote is stored, readable
    replies are parsed, unreadable ones are abstentions -- whatever this tiny judge answers."""
    run = copy_run(run_dir, tmp_path / "run")
    proc = sleight("tamper", "judge", "--run", str(run), "--jury", llama.spec, "--max-new-tokens", "64", "--limit", "2", "--conventions", "sleight")
    assert "jury of one" in proc.stdout
    j = jury_store.load_judgements(run)
    assert len(j) == 2 and set(j["juror"]) == {llama.spec}
    assert j["error"].isna().all() and (j["latency_s"] > 0).all()
    for row in j.to_dict("records"):
        vote = parse_vote(row["raw_reply"])
        assert bool(row["abstained"]) == (vote is None)
        if vote is None:
            assert row["attempts"] == 2 and all(pd.isna(row[label]) for label in LABELS)
        else:
            assert all(row[label] == getattr(vote, label) for label in LABELS)
    v = jury_store.load_verdicts(run)
    assert len(v) == n_judged and (v["jury_size"] == 1).all()
    assert (v["n_votes"] + v["n_abstained"] == 1).all()  # the trials left for later count as missing votes
    assert (v["n_abstained"] == 1).sum() == n_judged - 2 + j["abstained"].sum()


def test_local_model_as_a_jury_of_one_by_text(run_dir, n_judged, model, tmp_path):
    """The default model itself, through the hf engine, on the free-text path (``--vote text``)."""
    run = copy_run(run_dir, tmp_path / "run")
    summary = judge_run(run, ["smollm2-135m-instruct"], vote="text", loader=lambda spec: LocalChat(model), max_tokens=32, limit=2, progress=False)
    assert summary.jurors[0].asked == 2
    j = jury_store.load_judgements(run)
    assert len(j) == 2 and (j["latency_s"] > 0).all()
    assert all(bool(r["abstained"]) == (parse_vote(r["raw_reply"]) is None) for r in j.to_dict("records"))
    assert (j["vote_path"] == "text").all()
    assert json.loads((run / jury_store.JURY_META).read_text())["jury"] == ["smollm2-135m-instruct"]
