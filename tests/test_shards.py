"""``sleight tamper run --shard K/N``: shards started at the same time into one run directory give
the records of one unsharded run; a shard with another config is refused in one line; a damaged
part is named by the readers, set aside on resume and redone (real model, subprocesses).

"The same records": every token, id, text and count identical, and the float records within the
engine's noise: under ``--schedule sweep`` a shard's questions decode in other batches than the whole
run's, and a row's floats move with its batch at the 1e-6 level (tests/tolerances.py); in the default
question order they are bit-identical (tests/test_schedule.py holds both orders)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from sleight.tamper.store import load_clean, load_manifest, load_trials
from tolerances import DELTA_ATOL, ENTROPY_ATOL, FLOAT16_STORED_RTOL, LOGPROB_ATOL

pytestmark = pytest.mark.slow

SMALL = ["--questions", "3", "--substitutes", "3", "--max-new-tokens", "16", "--threads", "1", "--no-progress"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}


def _run_argv(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sleight.cli.main", "tamper", "run", *SMALL, "--out", str(out), *extra]


def _sleight(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sleight.cli.main", *argv], env=ENV, capture_output=True, text=True, timeout=900)


def _floats(cell: object) -> np.ndarray | None:
    """A cell's values as a float array, or None when the cell does not hold floats."""
    try:
        arr = np.asarray(cell)
        if arr.dtype == object and arr.size:
            arr = np.stack(list(arr))
    except (ValueError, TypeError):
        return None
    return arr.astype(float) if arr.dtype.kind == "f" else None


def _bounds(column: str) -> tuple[float, float]:
    """(rtol, atol) of a float column: a difference of two records (delta_*), a float16 top-20
    log-prob, an entropy, or a log-prob."""
    if column.startswith("delta_"):
        return 0.0, DELTA_ATOL
    if column == "top20_logprobs":
        return FLOAT16_STORED_RTOL, LOGPROB_ATOL
    return 0.0, ENTROPY_ATOL if "entropy" in column else LOGPROB_ATOL


def same_records(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Record for record in the tables' own order: non-float values identical, floats within noise."""
    if len(a) != len(b) or list(a.columns) != list(b.columns):
        return False
    for c in a.columns:
        for x, y in zip(a[c].tolist(), b[c].tolist()):
            fx, fy = _floats(x), _floats(y)
            if fx is None or fy is None:
                if repr(x) != repr(y):
                    return False
            elif fx.shape != fy.shape or not np.allclose(fx, fy, *_bounds(c), equal_nan=True):
                return False
    return True


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    ref = tmp / "unsharded"
    done = subprocess.run(_run_argv(ref), env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    sharded = tmp / "sharded"
    procs = [
        subprocess.Popen(
            _run_argv(sharded, "--shard", f"{k}/2"), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for k in (1, 2)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    return {"ref": ref, "sharded": sharded, "procs": procs, "outs": outs, "tmp": tmp}


def test_concurrent_shards_give_the_records_of_one_unsharded_run(runs):
    for p, (out, err) in zip(runs["procs"], runs["outs"]):
        assert p.returncode == 0, err
        assert "shard " in out and "trials (" in out
    sharded, ref = runs["sharded"], runs["ref"]
    m = load_manifest(sharded)
    assert m["format"] == "sleight-run" and m["kind"] == "tamper" and m["units"] == 3 and m["completed"] is True
    assert sorted(s["shard"] for s in m["sessions"]) == ["1/2", "2/2"] and sum(s["new_units"] for s in m["sessions"]) == 3
    assert not (sharded / ".tmp").exists()
    trials, clean = load_trials(sharded), load_clean(sharded)
    assert same_records(trials, load_trials(ref)) and same_records(clean, load_clean(ref))
    n, distinct = (
        duckdb.connect()
        .execute(
            f"select count(*), count(distinct (question_id, substitute)) from read_parquet('{sharded}/trials.parquet/*.parquet')"
        )
        .fetchone()
    )
    assert n == distinct == 9
    again = _sleight("tamper", "run", *SMALL, "--out", str(sharded), "--shard", "1/2")
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_a_shard_with_another_config_is_refused_in_one_line(runs):
    before = sorted(p.name for p in (runs["sharded"] / "trials.parquet").iterdir())
    other = _sleight("tamper", "run", *SMALL, "--out", str(runs["sharded"]), "--shard", "2/2", "--max-new-tokens", "8")
    err = other.stderr.strip().splitlines()
    assert other.returncode == 2 and len(err) == 1, other.stderr
    assert "different config (max_new_tokens: 16 there, 8 here)" in err[0] and "Traceback" not in other.stderr
    assert sorted(p.name for p in (runs["sharded"] / "trials.parquet").iterdir()) == before


def test_a_damaged_part_is_named_by_readers_and_redone_on_resume(runs):
    import shutil

    run = runs["tmp"] / "damaged"
    shutil.copytree(runs["sharded"], run)
    trials_part = sorted((run / "trials.parquet").glob("00001-*.parquet"))[0]  # question 2: shard 2/2
    data = trials_part.read_bytes()
    trials_part.write_bytes(data[: len(data) // 3])
    clean_part = sorted((run / "clean.parquet").glob("00002-*.parquet"))[0]  # question 3: shard 1/2
    clean_part.write_bytes(b"")

    report = _sleight("tamper", "report", str(run), "--out", str(runs["tmp"] / "report"), "--no-site")
    err = report.stderr.strip().splitlines()
    assert report.returncode == 2 and len(err) == 1 and f"{trials_part} is damaged (unreadable" in err[0], report.stderr

    for k, part in (("2/2", trials_part), ("1/2", clean_part)):
        resumed = _sleight("tamper", "run", *SMALL, "--out", str(run), "--shard", k)
        assert resumed.returncode == 0, resumed.stderr
        lines = [line for line in resumed.stderr.splitlines() if "is damaged" in line]
        assert len(lines) == 1 and str(part) in lines[0] and "moved it to" in lines[0] and "is redone" in lines[0], resumed.stderr
        assert "this session: 1 question(s)" in resumed.stdout
    assert len([p for p in (run / "damaged").rglob("*.parquet") if p.is_file()]) == 2  # set aside, not deleted
    assert same_records(load_trials(run), load_trials(runs["ref"])) and same_records(load_clean(run), load_clean(runs["ref"]))
    assert load_manifest(run)["completed"] is True
