"""``tamper judge`` when the judges' servers misbehave: every fault is a recorded abstention or one
line, never a traceback, and the vote folder stays one row per (trial, juror, prompt variant).

Real runs (``sleight tamper run`` on the bundled model) judged by scripted servers on 127.0.0.1.
"""

from __future__ import annotations

import pandas as pd
import pytest

from fault_server import Answer, FaultServer, reply
from sleight.backends.chat import OpenAIChat
from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.judged import judged_trials, load_run_trials
from sleight.tamper.jury.run import judge_run, judge_runs
from tamper_artifacts import copy_run, real_run, sleight

GOOD = '{"flagged": false, "corrected": true, "derailed": false, "switch_aware": false, "reason": "fine"}'


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return real_run(tmp_path_factory)


@pytest.fixture(scope="module")
def n_judged(run_dir):
    trials, _ = load_run_trials(run_dir)
    n = len(judged_trials(trials))
    assert n >= 4, "the fixture run must contain enough swapped trials"
    return n


def _fast(srv: FaultServer, **kw):
    return lambda spec: OpenAIChat(srv.base_url, spec.rsplit("#", 1)[1], backoff_s=0.01, **kw)


FAULTS = {
    "short": lambda b, n: Answer(json=reply(GOOD).json, short_by=50),  # IncompleteRead
    "junk": lambda b, n: Answer(raw=b"\x00\x01 not http at all\r\n"),  # BadStatusLine
    "nullmsg": lambda b, n: reply(message=None),
    "number": lambda b, n: reply(12345),
}


def test_transport_faults_are_recorded_abstentions_and_the_run_finishes(run_dir, n_judged, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    with FaultServer({**FAULTS, "good": lambda b, n: reply(GOOD)}) as srv:
        summary = judge_run(run, [srv.spec(m) for m in [*FAULTS, "good"]], vote="text", loader=_fast(srv, retries=1), progress=False)
    j = jury_store.load_judgements(run)
    assert len(j) == 5 * n_judged
    for model, why in (("short", "IncompleteRead"), ("junk", "BadStatusLine"), ("nullmsg", "message is null"), ("number", "content is a int")):
        mine = j[j["juror"] == srv.spec(model)]
        assert mine["abstained"].all() and mine["error"].str.contains(why).all(), model
    assert not j[j["juror"] == srv.spec("good")]["abstained"].any()
    assert [s.cast for s in summary.jurors] == [0, 0, 0, 0, n_judged]
    # transport faults are retried, deterministic malformed bodies are not
    assert len(srv.requests["short"]) == 2 * n_judged and len(srv.requests["nullmsg"]) == n_judged


def test_no_valid_vote_exits_non_zero_with_one_line(run_dir, n_judged, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    with FaultServer({"dead": lambda b, n: reply(message=None)}) as srv:
        proc = sleight("tamper", "judge", "--run", str(run), "--jury", srv.spec("dead"), "--vote", "text", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    err = [line for line in proc.stderr.strip().splitlines() if line.startswith("sleight: error")]
    assert len(err) == 1 and proc.stderr.strip().endswith(err[0])
    assert "cast no valid vote" in err[0] and f"{n_judged} asked" in err[0] and "message is null" in err[0]
    j = jury_store.load_judgements(run)
    assert len(j) == n_judged and j["abstained"].all()  # the attempt is on record
    with FaultServer({"ok": lambda b, n: reply(GOOD) if n % 2 else reply("no idea")}) as srv:
        proc = sleight("tamper", "judge", "--run", str(run), "--jury", srv.spec("ok"), "--vote", "text")
    assert proc.returncode == 0
    cast = int(proc.stdout.split("valid votes cast: ")[1].split()[0])
    assert 0 < cast <= n_judged and f"valid votes cast: {cast} of {n_judged} asked" in proc.stdout


def test_non_http_bytes_in_the_up_front_check_are_one_line(run_dir, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    garbage = Answer(raw=b"SSH-2.0-OpenSSH_9.6\r\n")
    with FaultServer({"m": lambda b, n: garbage}, models=garbage) as srv:
        proc = sleight("tamper", "judge", "--run", str(run), "--jury", srv.spec("m"), check=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "not reachable" in err[0] and "BadStatusLine" in err[0]
    assert not (run / jury_store.JUDGEMENTS).exists()


def test_401_is_one_line_naming_the_key_variable(run_dir, tmp_path, monkeypatch):
    run = copy_run(run_dir, tmp_path / "run")
    with FaultServer({"m": lambda b, n: Answer(401)}, models=Answer(401)) as srv:
        proc = sleight("tamper", "judge", "--run", str(run), "--jury", srv.spec("m"), "--api-key-env", "JUDGE_KEY", check=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "HTTP 401" in err[0] and "$JUDGE_KEY" in err[0]
    assert "Traceback" not in proc.stderr


def test_a_re_asked_vote_leaves_one_row_per_key_on_disk(run_dir, n_judged, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    state = {"up": False}
    with FaultServer({"flaky": lambda b, n: reply(GOOD) if state["up"] else Answer(500)}) as srv:
        judge_run(run, [srv.spec("flaky")], vote="text", batch=2, loader=_fast(srv, retries=0), progress=False)
        state["up"] = True
        second = judge_run(run, [srv.spec("flaky")], vote="text", batch=2, loader=_fast(srv, retries=0), progress=False)
    assert second.compacted == n_judged
    parts = sorted((run / jury_store.JUDGEMENTS).glob("*.parquet"))
    raw = pd.concat([pd.read_parquet(p) for p in parts])  # what DuckDB or pandas sees: no hidden duplicates
    assert len(raw) == n_judged and not raw.duplicated(list(jury_store.VOTE_KEY)).any()
    assert raw["error"].isna().all() and not raw["abstained"].any()


def test_a_damaged_vote_part_is_set_aside_and_its_votes_asked_again(run_dir, n_judged, tmp_path):
    run = copy_run(run_dir, tmp_path / "run")
    with FaultServer({"a": lambda b, n: reply(GOOD)}) as srv:
        judge_run(run, [srv.spec("a")], vote="text", batch=n_judged, progress=False)
        part = next((run / jury_store.JUDGEMENTS).glob("*.parquet"))
        part.write_bytes(part.read_bytes()[:100])  # truncated on disk
        proc = sleight("tamper", "report", str(run), "--out", str(tmp_path / "rep"), "--no-site", check=False)
        assert proc.returncode == 2 and "is damaged" in proc.stderr and "Traceback" not in proc.stderr
        judge_run(run, [srv.spec("a")], vote="text", progress=False)
    assert len(srv.requests["a"]) == 2 * n_judged
    assert list((run / "damaged").rglob("*.parquet"))
    assert len(jury_store.load_judgements(run)) == n_judged


@pytest.mark.slow
def test_requests_stay_in_flight_across_runs_bounded_by_concurrency_not_batch(run_dir, n_judged, tmp_path):
    runs = [copy_run(run_dir, tmp_path / f"run{i}") for i in range(2)]
    slow = lambda b, n: Answer(json=reply(GOOD).json, delay_s=1.5)  # noqa: E731  (long enough to fill every slot on a busy machine)
    with FaultServer({"slow": slow}) as srv:
        conc = n_judged + 2  # more than one run holds: only votes from both runs can fill it
        summary = judge_runs(runs, [srv.spec("slow")], vote="text", batch=2, loader=_fast(srv, concurrency=conc), progress=False)
    assert srv.max_in_flight == conc
    assert summary.jurors[0].asked == 2 * n_judged and summary.jurors[0].votes_per_s > 0
    for run in runs:
        assert len(jury_store.load_judgements(run)) == n_judged
