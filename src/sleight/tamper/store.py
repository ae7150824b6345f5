"""A tamper run directory (SPEC §3.5, §7): manifest plus append-safe, resumable Parquet tables.

Layout::

    RUN_DIR/manifest.json                 config, versions, hashes, rendered prompts, sessions
    RUN_DIR/clean.parquet/NNNNN-<id>.parquet    one part per question (one row)
    RUN_DIR/trials.parquet/NNNNN-<id>.parquet   one part per question (one row per substitute)

``clean.parquet`` and ``trials.parquet`` are directories of parts, which pandas, pyarrow and DuckDB
(``read_parquet('RUN_DIR/trials.parquet/*.parquet')``) read as one table. A question is committed
by writing its parts under ``RUN_DIR/.tmp/`` and ``os.replace``-ing them into place (clean first,
trials last: the trials part is the commit). A rename is atomic, so a run killed at any moment
(``kill -9`` included) leaves every question either fully present or absent, never twice; a
restart skips the committed ones.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sleight.errors import UserError
from sleight.tamper.records import CLEAN_SCHEMA, TRIALS_SCHEMA

MANIFEST = "manifest.json"
CLEAN_DIR = "clean.parquet"
TRIALS_DIR = "trials.parquet"
TMP_DIR = ".tmp"

# Config keys whose change would change the records; a run directory refuses a different value.
IDENTITY_KEYS = ("model", "engine", "dtype", "trigger", "max_new_tokens", "top_k", "window", "questions", "substitutes")
MODEL_IDENTITY_KEYS = ("model_id", "revision", "chat_template_sha256")


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def part_name(question_index: int, question_id: str) -> str:
    """File name of a question's part: sortable by question order, the id kept readable."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", question_id)[:80]
    return f"{question_index:05d}-{safe}.parquet"


def _atomic_write_bytes(path: Path, data: bytes, tmp_dir: Path) -> None:
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = tmp_dir / f"{path.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _atomic_write_table(table: pa.Table, path: Path, tmp_dir: Path) -> None:
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = tmp_dir / f"{path.name}.{os.getpid()}.tmp"
    pq.write_table(table, tmp, compression="zstd")
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _config_diff(old: dict[str, Any], new: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    return [f"{k}: {old.get(k)!r} there, {new.get(k)!r} here" for k in keys if old.get(k) != new.get(k)]


class RunStore:
    """One run directory: opened against a config, then written one committed question at a time."""

    def __init__(self, run_dir: Path | str) -> None:
        self.dir = Path(run_dir)
        self.clean_dir = self.dir / CLEAN_DIR
        self.trials_dir = self.dir / TRIALS_DIR
        self.tmp_dir = self.dir / TMP_DIR
        self.manifest: dict[str, Any] = {}

    # -- opening ---------------------------------------------------------------------------------
    def read_manifest(self) -> dict[str, Any] | None:
        path = self.dir / MANIFEST
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            raise UserError(f"{path} is not valid JSON ({exc}); use another --out") from None

    def check_config(self, config: dict[str, Any]) -> None:
        """Refuse a directory made with a different config (before any model is loaded)."""
        if self.dir.exists() and not self.dir.is_dir():
            raise UserError(f"--out {self.dir} exists and is not a directory")
        old = self.read_manifest()
        if old is None:
            stray = [p.name for p in self.dir.iterdir() if p.name != TMP_DIR] if self.dir.is_dir() else []
            if stray:
                raise UserError(f"--out {self.dir} is not empty and holds no {MANIFEST}; choose a new or empty directory")
            return
        diff = _config_diff(old.get("config", {}), config, IDENTITY_KEYS)
        if diff:
            raise UserError(f"run directory {self.dir} was made with a different config ({'; '.join(diff)}); use another --out")

    def open(self, config: dict[str, Any], model_info: dict[str, Any], prompts: dict[str, str], versions: dict[str, str]) -> None:
        """Create the run (or resume it): check the config and model, record this session."""
        self.check_config(config)
        old = self.read_manifest()
        if old is not None:
            diff = _config_diff(old.get("model", {}), model_info, MODEL_IDENTITY_KEYS)
            if diff:
                raise UserError(f"run directory {self.dir} was made with a different model ({'; '.join(diff)}); use another --out")
            manifest = old
        else:
            manifest = {"format": "sleight-tamper-run/1", "created": now(), "config": config, "model": model_info, "prompts": prompts, "sessions": []}
        manifest.update(versions=versions, completed=False, finished=None)
        manifest["sessions"].append(
            {"started": now(), "finished": None, "device": model_info.get("device"), "batch_size": model_info.get("batch_size"), "engine_version": model_info.get("engine_version")}
        )
        for d in (self.clean_dir, self.trials_dir):
            d.mkdir(parents=True, exist_ok=True)
        if self.tmp_dir.is_dir():  # leftovers of a killed session: never part of the tables
            for p in self.tmp_dir.iterdir():
                p.unlink(missing_ok=True)
        self.manifest = manifest
        self._write_manifest()

    def _write_manifest(self) -> None:
        _atomic_write_bytes(self.dir / MANIFEST, (json.dumps(self.manifest, indent=1, ensure_ascii=False) + "\n").encode(), self.tmp_dir)

    # -- progress --------------------------------------------------------------------------------
    def done(self) -> set[int]:
        """Question indices whose trials are committed."""
        if not self.trials_dir.is_dir():
            return set()
        return {int(p.name.split("-", 1)[0]) for p in self.trials_dir.glob("*.parquet") if p.name[:5].isdigit()}

    def commit(self, question_index: int, question_id: str, clean: pa.Table, trials: pa.Table) -> None:
        """Write one question atomically: its clean part, then its trials part (the commit point)."""
        name = part_name(question_index, question_id)
        _atomic_write_table(clean, self.clean_dir / name, self.tmp_dir)
        _atomic_write_table(trials, self.trials_dir / name, self.tmp_dir)

    def finish(self, completed: bool) -> None:
        self.manifest["sessions"][-1]["finished"] = now()
        self.manifest["completed"] = completed
        self.manifest["finished"] = now() if completed else None
        self._write_manifest()


def _load(path: Path, schema: pa.Schema) -> pd.DataFrame:
    files = sorted(path.glob("*.parquet")) if path.is_dir() else []
    if not files:
        return schema.empty_table().to_pandas()
    table = ds.dataset([str(f) for f in files], format="parquet", schema=schema).to_table()
    return table.to_pandas()


def load_trials(run_dir: Path | str) -> pd.DataFrame:
    """Every committed trial of a run, one row per (question, substitute), in question/substitute order."""
    df = _load(Path(run_dir) / TRIALS_DIR, TRIALS_SCHEMA)
    return df.sort_values(["question_index", "substitute_index"], kind="stable").reset_index(drop=True)


def load_clean(run_dir: Path | str) -> pd.DataFrame:
    """The clean run of every question of a run that has one, in question order."""
    df = _load(Path(run_dir) / CLEAN_DIR, CLEAN_SCHEMA)
    return df.sort_values("question_index", kind="stable").reset_index(drop=True)


def load_manifest(run_dir: Path | str) -> dict[str, Any]:
    """The run's manifest; a clear error when ``run_dir`` is not a tamper run."""
    m = RunStore(run_dir).read_manifest()
    if m is None:
        raise UserError(f"{run_dir} is not a tamper run directory (no {MANIFEST}); make one with 'sleight tamper run'")
    return m
