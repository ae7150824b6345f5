"""A tamper run directory (SPEC §3.5, §7): the :mod:`sleight.rundir` format with two tables of parts.

Layout (see docs/rundir.md)::

    RUN_DIR/manifest.json                        kind "tamper": config, model, rendered prompts
    RUN_DIR/sessions/<id>.json                   one record per process (shard, host, versions, ...)
    RUN_DIR/clean.parquet/NNNNN-<id>.parquet     one part per question (one row)
    RUN_DIR/trials.parquet/NNNNN-<id>.parquet    one part per question (one row per substitute)

A question is committed by writing its clean part, then its trials part (the commit point), each
atomically. A run killed at any moment (``kill -9`` included) leaves every question fully present or
absent, never twice; a restart verifies the committed parts (a damaged one is moved aside and its
question redone) and skips the rest. Shards (``--shard K/N``) of one run may be written by several
processes at once: they share the manifest, and each writes only its own questions' parts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from sleight.rundir import ALL, Manifest, RunDir, Session, Shard
from sleight.tamper.records import CLEAN_SCHEMA, TRIALS_SCHEMA

if TYPE_CHECKING:
    from sleight.tamper.engine import TamperRunConfig

KIND = "tamper"
CLEAN_DIR = "clean.parquet"
TRIALS_DIR = "trials.parquet"

# Config keys whose change would change the records; a run directory refuses a different value.
IDENTITY_KEYS = ("model", "engine", "dtype", "load", "decoding", "trigger", "max_new_tokens", "top_k", "window", "questions", "substitutes")


def part_name(question_index: int, question_id: str) -> str:
    """File name of a question's part: sortable by question order, the id kept readable."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", question_id)[:80]
    return f"{question_index:05d}-{safe}.parquet"


def _index(key: str) -> int | None:
    head = key.split("-", 1)[0]
    return int(head) if head.isdigit() else None


class RunStore:
    """One tamper run directory: opened against a config, then written one committed question at a time."""

    def __init__(self, run_dir: Path | str) -> None:
        self.dir = Path(run_dir)
        self.run = RunDir(self.dir, KIND, identity_keys=IDENTITY_KEYS)
        self.clean = self.run.parts(CLEAN_DIR, CLEAN_SCHEMA)
        self.trials = self.run.parts(TRIALS_DIR, TRIALS_SCHEMA)
        self.session: Session | None = None

    # -- opening ---------------------------------------------------------------------------------
    def read_manifest(self) -> Manifest | None:
        return self.run.read_manifest()

    def check_config(self, config: TamperRunConfig, *, overwrite: bool = False) -> None:
        """Refuse a directory made with a different config (before any model is loaded); with
        ``overwrite``, empty it instead."""
        self.run.check(config.as_record(), overwrite=overwrite)

    def open(
        self,
        config: TamperRunConfig,
        model_info: Mapping[str, object],
        prompts: dict[str, str],
        versions: dict[str, str],
        *,
        shard: Shard = ALL,
    ) -> None:
        """Create the run (or join it, as a resumed or a concurrent shard): check the config and the
        model, and record this session."""
        self.session = self.run.open(
            config.as_record(), model_info, units=config.questions.n, extra={"prompts": prompts}, shard=shard, versions_=versions
        )

    # -- progress --------------------------------------------------------------------------------
    def done(self, indices: Iterable[int] | None = None) -> set[int]:
        """Question indices (among ``indices``, default all) whose parts are committed and sound.

        Each part is verified (footer, schema, one row per substitute / one clean row); a damaged part
        is moved aside with one line naming it, and its question counts as not done.
        """
        manifest = self.read_manifest()
        if manifest is None:
            return set()
        subs = (manifest.get("config") or {}).get("substitutes")
        n_sub = int((subs.get("n") if isinstance(subs, Mapping) else None) or 0) or None
        wanted = None if indices is None else set(indices)
        keys = [k for k in self.trials.keys() if (i := _index(k)) is not None and (wanted is None or i in wanted)]
        redo = lambda key: f"question {key.split('-', 1)[-1]} is redone"  # noqa: E731
        good_trials = self.trials.verified(keys, rows=lambda _k: n_sub, redo=redo)
        good_clean = self.clean.verified(sorted(good_trials), rows=lambda _k: 1, redo=redo)
        return {i for k in good_trials & good_clean if (i := _index(k)) is not None}

    def commit(self, question_index: int, question_id: str, clean: pa.Table, trials: pa.Table) -> None:
        """Write one question atomically: its clean part, then its trials part (the commit point)."""
        key = part_name(question_index, question_id)[: -len(".parquet")]
        tmp = self.session.tmp_dir if self.session else None
        self.clean.write(key, clean, tmp_dir=tmp)
        self.trials.write(key, trials, tmp_dir=tmp)
        if self.session:
            self.session.committed()

    def finish(self, completed: bool) -> None:
        if self.session is not None:
            self.session.finish(completed)


_HINT = "rerun 'sleight tamper run' with --out {run} to redo that question"


def load_trials(run_dir: Path | str) -> pd.DataFrame:
    """Every committed trial of a run, one row per (question, substitute), in question/substitute order."""
    store = RunStore(run_dir)
    df = store.trials.read(hint=_HINT.format(run=run_dir)).to_pandas()
    return df.sort_values(["question_index", "substitute_index"], kind="stable").reset_index(drop=True)


def load_clean(run_dir: Path | str) -> pd.DataFrame:
    """The clean run of every question of a run that has one, in question order."""
    store = RunStore(run_dir)
    df = store.clean.read(hint=_HINT.format(run=run_dir)).to_pandas()
    return df.sort_values("question_index", kind="stable").reset_index(drop=True)


def load_manifest(run_dir: Path | str) -> Manifest:
    """The run's manifest (with its sessions); a clear error when ``run_dir`` is not a tamper run."""
    return RunDir(run_dir, KIND).require("make one with 'sleight tamper run'")
