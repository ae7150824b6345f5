"""A run's trials as the jury and the report see them: named model, trigger, entity flag, judged set.

The engine's ``trials.parquet`` is read through :func:`sleight.tamper.store.load_trials`; the few
fields the jury and the tables need are filled in from the manifest where the table lacks them, so
older or foreign runs still tabulate.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final, NotRequired, TypedDict, cast

import pandas as pd

from sleight.errors import UserError
from sleight.rundir import Manifest

ENTITY = "Mandela effect"  # the entity condition, first line of the shipped substitutes

# The column that holds the text a judge reads of a trial, where the rules give it another text
# than the stored ``reply`` (:mod:`sleight.tamper.jury.reaction`).
REACTION: Final = "_reaction"


class JudgedTrial(TypedDict):
    """The columns of a judged trial (a record of :func:`judged_trials`' table) that the jury reads
    to ask about it and to store its votes; the record holds the other trial columns too."""

    model: str
    question_id: str
    question: str
    trigger: str
    substitute: str
    reply: str
    _reaction: NotRequired[str]  # REACTION


def load_manifest(run_dir: Path) -> Manifest:
    """The run's manifest (:func:`sleight.tamper.store.load_manifest`)."""
    from sleight.tamper.store import load_manifest as _load

    return _load(run_dir)


def model_name(manifest: Mapping[str, object], run_dir: Path) -> str:
    """The model a run used, as the leaderboard names it."""
    m = manifest.get("model")
    if isinstance(m, dict):
        for key in ("spec", "model_id", "name"):
            if m.get(key):
                return str(m[key])
    if isinstance(m, str) and m:
        return m
    return Path(run_dir).resolve().name


def trigger_word(manifest: Mapping[str, object]) -> str:
    config = manifest.get("config")
    cfg: Mapping[str, object] = config if isinstance(config, dict) else manifest
    return str(cfg.get("trigger") or "the")


def normalize_trials(trials: pd.DataFrame, manifest: Mapping[str, object], run_dir: Path) -> pd.DataFrame:
    """Add ``model``, ``trigger`` and ``is_entity`` where the stored table lacks them."""
    df = trials.copy()
    if "model" not in df.columns or df["model"].isna().all():
        df["model"] = model_name(manifest, run_dir)
    if "trigger" not in df.columns:
        df["trigger"] = trigger_word(manifest)
    if "is_entity" not in df.columns:
        if "substitute_index" in df.columns:
            df["is_entity"] = df["substitute_index"] == 0
        else:
            df["is_entity"] = df["substitute"].str.strip().str.lower() == ENTITY.lower()
    if "substitute_index" not in df.columns:
        df["substitute_index"] = pd.NA
    df["is_entity"] = df["is_entity"].astype(bool)
    return df


def load_run_trials(run_dir: Path) -> tuple[pd.DataFrame, Manifest]:
    """The run's trials (normalized) and its manifest; a clear error when the run has no trials."""
    from sleight.tamper.store import load_trials

    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    trials = load_trials(run_dir)
    if trials is None or len(trials) == 0:
        raise UserError(f"run {run_dir} has no trials yet; finish it with 'sleight tamper run --out {run_dir}'")
    return normalize_trials(trials, manifest, run_dir), manifest


def trial_records(trials: pd.DataFrame) -> list[JudgedTrial]:
    """The records of a table of judged trials, each read as a :class:`JudgedTrial`."""
    return cast("list[JudgedTrial]", trials.to_dict("records"))


def judged_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials a jury labels: at least one swap (untouched trials equal the clean run)."""
    mask = trials["n_swaps"].fillna(0).astype(int) >= 1
    if "untouched" in trials.columns:
        mask &= ~trials["untouched"].fillna(False).astype(bool)
    return trials[mask].reset_index(drop=True)
