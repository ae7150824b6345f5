"""The run-directory format (sleight.rundir): manifests, sessions, refusal, verified parts, atomic
writes; and, on the real model, the forecast and P(True) commands resumed after SIGKILL.

The fast tests use real files, real processes (several racing to create one run, one killed while
it holds a session) and real Parquet; nothing is mocked.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleight import rundir
from sleight.errors import UserError
from sleight.rundir import ALL, RunDir, Shard, kind_of, parse_shard

SCHEMA = pa.schema([("unit", pa.int32()), ("value", pa.float64())])


def _table(unit: int, n: int = 2) -> pa.Table:
    return pa.table({"unit": pa.array([unit] * n, pa.int32()), "value": pa.array(np.arange(n, dtype=float))}, schema=SCHEMA)


# ------------------------------------------------------------------------------------------------
# JSON and atomic writes
# ------------------------------------------------------------------------------------------------


def test_dumps_is_json_safe():
    obj = {
        "nan": math.nan,
        "inf": -math.inf,
        "np": np.float32(0.5),
        "arr": np.arange(3),
        "t": (1, 2),
        3: Path("/x"),
        "s": {"b", "a"},
    }
    text = rundir.dumps(obj)
    assert json.loads(text) == {"nan": None, "inf": None, "np": 0.5, "arr": [0, 1, 2], "t": [1, 2], "3": "/x", "s": ["a", "b"]}
    assert "NaN" not in text and "Infinity" not in text


def test_atomic_writes_leave_no_temporary_files(tmp_path):
    rundir.write_json(tmp_path / "a.json", {"x": math.nan})
    rundir.write_text(tmp_path / "sub" / "b.txt", "é")
    rundir.write_table(tmp_path / "c.parquet", _table(1), schema=SCHEMA)
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": None}
    assert (tmp_path / "sub" / "b.txt").read_text(encoding="utf-8") == "é"
    assert pq.read_table(tmp_path / "c.parquet").equals(_table(1))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.json", "b.txt", "c.parquet", "sub"]


def test_rows_must_fit_the_schema():
    with pytest.raises(ValueError, match="columns the schema lacks: extra"):
        rundir.table_from_rows([{"unit": 1, "value": 2.0, "extra": 3}], SCHEMA)
    t = rundir.table_from_rows([{"unit": 1}], SCHEMA)
    assert t.schema.equals(SCHEMA) and t.column("value").to_pylist() == [None]


# ------------------------------------------------------------------------------------------------
# parts
# ------------------------------------------------------------------------------------------------


def test_verify_part_names_what_is_wrong(tmp_path):
    good = rundir.write_table(tmp_path / "good.parquet", _table(1, 3))
    data = good.read_bytes()
    (tmp_path / "empty.parquet").write_bytes(b"")
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    rundir.write_table(tmp_path / "norows.parquet", SCHEMA.empty_table())
    rundir.write_table(tmp_path / "other.parquet", pa.table({"unit": pa.array([1], pa.int64())}))
    assert rundir.verify_part(good, schema=SCHEMA, rows=3) is None
    assert rundir.verify_part(tmp_path / "empty.parquet") == "empty file"
    assert rundir.verify_part(tmp_path / "cut.parquet").startswith("unreadable")
    assert rundir.verify_part(tmp_path / "norows.parquet") == "no rows"
    assert rundir.verify_part(good, rows=4) == "3 rows, expected 4"
    assert rundir.verify_part(tmp_path / "other.parquet", schema=SCHEMA) == "columns differ from the table's schema"


def test_damaged_parts_are_set_aside_with_one_line_and_never_trusted(tmp_path):
    parts = rundir.Parts(tmp_path, "t.parquet", SCHEMA)
    for k in range(4):
        parts.write(f"{k:05d}", _table(k))
    (parts.path("00001")).write_bytes(b"")
    data = parts.path("00002").read_bytes()
    parts.path("00002").write_bytes(data[:-20])
    parts.write("00003", _table(3, n=1))  # one row where two are expected
    lines: list[str] = []
    good = parts.verified(rows=lambda _k: 2, redo=lambda k: f"unit {k} is redone", warn=lines.append)
    assert good == {"00000"}
    assert len(lines) == 3 and all("is damaged" in line and "moved it to" in line for line in lines)
    assert (
        "empty file" in lines[0]
        and "unit 00001 is redone" in lines[0]
        and "unreadable" in lines[1]
        and "1 rows, expected 2" in lines[2]
    )
    assert parts.keys() == ["00000"]
    aside = sorted(p.name for p in (tmp_path / rundir.DAMAGED_DIR / "t.parquet").iterdir())
    assert [n.split(".")[0] for n in aside] == ["00001", "00002", "00003"]  # kept, not deleted
    # A reader never moves anything: it names the damaged part in one line.
    parts.path("00009").write_bytes(b"PAR1")
    with pytest.raises(UserError, match=r"00009\.parquet is damaged \(unreadable.*; rerun it"):
        parts.read(hint="rerun it")
    assert (parts.path("00009")).exists()


# ------------------------------------------------------------------------------------------------
# manifest, refusal, sessions
# ------------------------------------------------------------------------------------------------

MODEL = {
    "spec": "m",
    "model_id": "m.gguf",
    "revision": "abc",
    "chat_template_sha256": "t",
    "engine": "hf",
    "dtype": "float32",
    "device": "cpu",
    "batch_size": 8,
}
CONFIG = {"trigger": "the", "questions": {"n": 4, "sha256": "q"}, "source": "/a/path"}


def test_manifest_schema_sessions_and_completion(tmp_path):
    run = RunDir(tmp_path / "r", "tamper", identity_keys=("trigger", "questions"))
    assert run.check(CONFIG) is None
    s1 = run.open(CONFIG, MODEL, units=4, extra={"prompts": {"q1": "p"}}, shard=Shard(1, 2))
    s1.committed(2)
    s1.finish(True)
    m = run.read_manifest()
    assert list(m)[:8] == ["format", "version", "kind", "created", "model", "config", "fingerprint", "units"]
    assert set(rundir.MANIFEST_FIELDS) <= set(m) and set(rundir.DERIVED_FIELDS) <= set(m)
    assert (m["format"], m["version"], m["kind"], m["units"], m["prompts"]) == ("sleight-run", 1, "tamper", 4, {"q1": "p"})
    assert m["fingerprint"] == rundir.fingerprint(CONFIG, MODEL, ("trigger", "questions"))
    assert m["completed"] is False and m["finished"] is None  # shard 2/2 not done yet
    assert set(rundir.SESSION_FIELDS) <= set(m["sessions"][0])
    s2 = run.open(CONFIG, {**MODEL, "device": "cuda", "batch_size": 64}, units=4, shard=Shard(2, 2))  # another device may join
    s2.finish(True)
    m = run.read_manifest()
    assert m["completed"] is True and m["finished"] and [s["shard"] for s in m["sessions"]] == ["1/2", "2/2"]
    assert m["sessions"][0]["new_units"] == 2 and m["sessions"][1]["device"] == "cuda"
    assert not (run.dir / rundir.TMP_DIR).exists()
    # Only the identity keys are compared: another machine's path to the same questions is fine.
    assert run.check({**CONFIG, "source": "/elsewhere"}) is not None


def test_a_different_config_or_model_is_refused_in_one_line_and_overwrite_starts_over(tmp_path):
    run = RunDir(tmp_path / "r", "tamper", identity_keys=("trigger", "questions"))
    run.open(CONFIG, MODEL, units=4).finish(True)
    with pytest.raises(UserError) as e:
        run.check({**CONFIG, "questions": {"n": 4, "sha256": "other"}})
    assert "different config (questions.sha256: 'q' there, 'other' here)" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError, match=r"different model \(revision: 'abc' there, 'xyz' here\)"):
        run.open(CONFIG, {**MODEL, "revision": "xyz"}, units=4)
    with pytest.raises(UserError, match="holds a 'tamper' run, not 'audit'"):
        RunDir(tmp_path / "r", "audit").check({})
    assert run.check({**CONFIG, "trigger": "a"}, overwrite=True) is None
    assert list(run.dir.iterdir()) == []
    # A folder that is not a run is never emptied, --overwrite or not.
    (run.dir / "mine.txt").write_text("x")
    for overwrite in (False, True):
        with pytest.raises(UserError, match="is not empty and holds no manifest.json"):
            run.check(CONFIG, overwrite=overwrite)


def test_chat_template_arguments_are_part_of_the_model_identity(tmp_path):
    """--thinking off and on render different prompts: a resume with the other is refused; a run
    made before the arguments were recorded (none given) keeps its fingerprint."""
    assert rundir.fingerprint(CONFIG, {**MODEL, "chat_template_kwargs": {}}) == rundir.fingerprint(CONFIG, MODEL)
    run = RunDir(tmp_path / "r", "tamper", identity_keys=("trigger", "questions"))
    run.open(CONFIG, {**MODEL, "chat_template_kwargs": {"enable_thinking": False}}, units=4).finish(True)
    with pytest.raises(UserError, match=r"different model \(chat_template_kwargs.enable_thinking: False there, True here\)"):
        run.open(CONFIG, {**MODEL, "chat_template_kwargs": {"enable_thinking": True}}, units=4)


def test_a_served_models_tokenizer_hash_is_part_of_its_identity_a_local_tokenizers_path_is_not(tmp_path):
    """A served model's name is whatever its server was told to call it: the hash of the tokenizer it
    shows (issue #36 item 4) tells two models apart, so a resume against another is refused. A local
    tokenizer's record names a folder, which moves between machines: not part of the identity."""
    served = {**MODEL, "engine": "openai", "tokenizer": "served:" + "a" * 64}
    run = RunDir(tmp_path / "r", "tamper", identity_keys=("trigger", "questions"))
    run.open(CONFIG, served, units=4).finish(True)
    with pytest.raises(UserError, match=r"different model \(tokenizer: 'served:a+\.\.\. there, 'served:b+\.\.\. here\)"):
        run.open(CONFIG, {**served, "tokenizer": "served:" + "b" * 64}, units=4)
    run.open(CONFIG, dict(served), units=4).finish(True)  # the same server's model resumes
    local = RunDir(tmp_path / "l", "tamper", identity_keys=("trigger", "questions"))
    local.open(CONFIG, {**MODEL, "tokenizer": "GPT2TokenizerFast:/home/a/m"}, units=4).finish(True)
    local.open(CONFIG, {**MODEL, "tokenizer": "GPT2TokenizerFast:/srv/b/m"}, units=4).finish(True)


def test_a_manifest_of_another_format_is_refused_and_overwrite_starts_over(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "sleight-tamper-run/1", "config": CONFIG, "completed": True}))
    (tmp_path / "trials.parquet").mkdir()
    with pytest.raises(UserError, match="is not a sleight-run manifest .format 'sleight-tamper-run/1'.; use another --out, or --overwrite"):
        RunDir(tmp_path, "tamper").check(CONFIG)
    assert kind_of(tmp_path) is None
    assert RunDir(tmp_path, "tamper").check(CONFIG, overwrite=True) is None
    assert list(tmp_path.iterdir()) == []


def _join(args: tuple[str, dict, int]) -> str:
    path, config, k = args
    s = RunDir(path, "tamper").open(config, MODEL, units=4, shard=Shard(k, 4))
    s.finish(True)
    return "ok"


def _join_or_refusal(args: tuple[str, dict, int]) -> str:
    try:
        return _join(args)
    except UserError as exc:
        return f"refused: {exc}"


def test_racing_processes_create_one_manifest_and_record_every_session(tmp_path):
    path = str(tmp_path / "r")
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        out = pool.map(_join_or_refusal, [(path, CONFIG, k) for k in range(1, 5)] * 2)
    assert out == ["ok"] * 8
    m = RunDir(path, "tamper").require()
    assert m["completed"] is True and len(m["sessions"]) == 8 and len({s["id"] for s in m["sessions"]}) == 8
    assert sorted(p.name for p in Path(path).iterdir()) == ["manifest.json", "sessions"]
    # Racing with different configs: exactly one wins, every loser is refused in one line.
    path2 = str(tmp_path / "r2")
    configs = [{**CONFIG, "trigger": w} for w in ("the", "a", "of", "in")]
    with ctx.Pool(4) as pool:
        out = pool.map(_join_or_refusal, [(path2, c, 1) for c in configs])
    assert out.count("ok") == 1 and all(o.startswith("refused: ") and "different config (trigger:" in o for o in out if o != "ok")


def _hold_session(path: str) -> None:
    session = RunDir(path, "tamper").open(CONFIG, MODEL, units=4)  # held (and so locked) while it sleeps
    time.sleep(600)
    session.finish(False)


def test_a_killed_sessions_leftovers_are_cleared_and_a_live_ones_kept(tmp_path):
    path = tmp_path / "r"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_hold_session, args=(str(path),), daemon=True) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list((path / rundir.SESSIONS_DIR).glob("*.json"))) < 2:
            time.sleep(0.05)
        live = {p.name for p in (path / rundir.TMP_DIR).iterdir()}
        assert len(live) == 2
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].join()
        dead = next(s["id"] for s in RunDir(path, "tamper").sessions() if s["pid"] == procs[0].pid)
        (path / rundir.TMP_DIR / dead / "half-written.parquet").write_bytes(b"x")
        s = RunDir(path, "tamper").open(CONFIG, MODEL, units=4)
        left = {p.name for p in (path / rundir.TMP_DIR).iterdir()}
        assert dead not in left and (live - {dead}) <= left and s.id in left  # the live one is untouched
        s.finish(False)
    finally:
        for p in procs:
            p.kill()
            p.join()


# ------------------------------------------------------------------------------------------------
# shards, discovery, docs
# ------------------------------------------------------------------------------------------------


def test_shards_partition_the_units():
    assert parse_shard(None) == ALL and str(parse_shard("2/3")) == "2/3"
    for bad in ("2", "a/b", "0/3", "4/3", "1/0"):
        with pytest.raises(UserError, match="--shard"):
            parse_shard(bad)
    for n in (1, 2, 3, 7):
        seen = sorted(i for k in range(1, n + 1) for i in Shard(k, n).indices(10))
        assert seen == list(range(10))
        assert all((i in Shard(k, n)) == (i % n == k - 1) for k in range(1, n + 1) for i in range(10))
    assert rundir.covered(5, [Shard(1, 2), Shard(2, 2)]) and not rundir.covered(5, [Shard(1, 2)])
    assert rundir.covered(5, [Shard(1, 2), Shard(1, 1)]) and rundir.covered(0, [])


def test_find_runs_expands_a_sweep_folder(tmp_path):
    for name in ("b", "a"):
        RunDir(tmp_path / "sweep" / name, "tamper").open(CONFIG, MODEL, units=4).finish(True)
    RunDir(tmp_path / "sweep" / "f", "forecast").open({}, MODEL, units=1).finish(True)
    (tmp_path / "sweep" / "notes").mkdir()
    runs = rundir.find_runs([tmp_path / "sweep", tmp_path / "sweep" / "a"], "tamper")
    assert runs == [tmp_path / "sweep" / "a", tmp_path / "sweep" / "b"]
    with pytest.raises(UserError, match="is neither a tamper run directory nor a folder of them"):
        rundir.find_runs([tmp_path / "sweep" / "notes"], "tamper")


def test_schema_markdown_renders_the_schema_objects():
    from sleight.tamper.records import TRIALS_SCHEMA

    md = rundir.schema_markdown(TRIALS_SCHEMA, {"model": "the model | spec"})
    lines = md.splitlines()
    assert lines[:2] == ["| column | type | note |", "|---|---|---|"] and len(lines) == 2 + len(TRIALS_SCHEMA)
    assert (
        "| `model` | `string` | the model \\| spec |" in lines
        and "| `top20_logprobs` | `list<item: list<item: halffloat>>` |  |" in lines
    )
    assert rundir.fields_markdown(rundir.MANIFEST_FIELDS).count("\n") == 2 + len(rundir.MANIFEST_FIELDS)


# ------------------------------------------------------------------------------------------------
# forecast and P(True): resumed after SIGKILL, a changed config refused (real model, subprocesses)
# ------------------------------------------------------------------------------------------------

DOWNSTREAM = {
    "forecast": ["--limit", "2", "--note-tokens", "16", "--continuation-tokens", "2", "--note-words", "12"],
    "ptrue": ["--limit", "2", "--answers", "own", "--max-new-tokens", "8", "--continuation-tokens", "2"],
}


def _readout(kind: str, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sleight.cli.main",
        "readout",
        kind,
        *DOWNSTREAM[kind],
        "--B",
        "50",
        "--chunk",
        "1",
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


@pytest.mark.slow
@pytest.mark.parametrize("kind, field", [("forecast", "note_words"), ("ptrue", "max_new_tokens")])
def test_downstream_resumes_after_sigkill_and_refuses_a_changed_config(tmp_path, kind, field):
    out = tmp_path / kind
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(_readout(kind, out), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline, first = time.time() + 500, []
    while time.time() < deadline and proc.poll() is None and not first:
        first = sorted((out / "parts").glob("*.parquet")) if (out / "parts").is_dir() else []
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert [p.name for p in sorted((out / "parts").glob("*.parquet"))] == ["00000.parquet"]
    kept = tmp_path / "kept.parquet"
    shutil.copy(first[0], kept)
    assert RunDir(out, kind).require()["completed"] is False

    rerun = subprocess.run(_readout(kind, out), env=env, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr
    m = RunDir(out, kind).require()
    assert m["completed"] is True and [s["new_units"] for s in m["sessions"]] == [1, 1]  # the killed item was not redone
    assert not (out / "parts").exists() and not (out / rundir.TMP_DIR).exists()
    rows = pq.read_table(out / "readings.parquet")
    first_id = pq.read_table(kept).column("item_id")[0].as_py()
    ids = rows.column("item_id").to_pylist()
    per_item = len(ids) // 2
    assert ids[:per_item] == [first_id] * per_item and len(set(ids[per_item:])) == 1 and ids[-1] != first_id
    assert rows.slice(0, per_item).to_pylist() == pq.read_table(kept).to_pylist()  # the committed rows, as they were
    assert json.loads((out / "summary.json").read_text())["kind"] == kind

    again = subprocess.run(_readout(kind, out), env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert len(RunDir(out, kind).require()["sessions"]) == 2  # finished: no session did model work again

    flag = "--" + field.replace("_", "-")
    other = subprocess.run(_readout(kind, out, flag, "9"), env=env, capture_output=True, text=True, timeout=300)
    err = other.stderr.strip().splitlines()
    assert other.returncode == 2 and len(err) == 1 and "different config" in err[0] and f"{field}:" in err[0], other.stderr
