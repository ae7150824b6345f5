"""A human gold subset: a sample drawn stratified by the jury's labels, people's labels for it, and
each juror's and the jury's agreement with the people (accuracy and Cohen's κ per label).

The study's own limitation is that its labels come from a jury of models. ``tamper gold`` draws the
sample into ``RUN/gold_sample.json``; the trial viewer's labelling mode shows those trials without
the jury's votes, takes four checkboxes per trial, and exports a JSON file (the static site needs no
server); ``tamper report --gold FILE`` reads it back. Pure functions apart from the two file helpers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sleight.errors import UserError
from sleight.jury.sample import SampleStore, draw, read_labels_file
from sleight.jury.sample import allocate as allocate  # re-exported: the gold sample's allocation
from sleight.jury.verdict import agreement
from sleight.tamper.jury.prompt import LABELS

SAMPLE_FILE = "gold_sample.json"
SAMPLE = SampleStore(SAMPLE_FILE, "trials", ("question_id", "substitute"), "sleight tamper gold {folder} --sample N")
GOLD_FORMAT = "sleight-gold"
GOLD_VERSION = 1


def stratum(row: Mapping[Any, Any]) -> str:
    """The jury's labels of one trial as a stratum name: ``flagged=T corrected=F ...`` (``?`` = no majority)."""
    def one(v: Any) -> str:
        return "?" if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else ("T" if bool(v) else "F")

    return " ".join(f"{label}={one(row.get(label))}" for label in LABELS)


def draw_sample(verdicts: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """``n`` trials stratified by the jury's labels (seeded; the same inputs give the same sample)."""
    if n < 1:
        raise UserError(f"--sample must be at least 1 (got {n})")
    df = verdicts.reset_index(drop=True).copy()
    df["stratum"] = [stratum(r) for r in df.to_dict("records")]
    return draw(df, n, seed)[["question_id", "substitute", "stratum"]]


def write_sample(run_dir: Path, sample: pd.DataFrame, *, seed: int, n_requested: int, model: str) -> Path:
    header = {"format": "sleight-gold-sample", "version": GOLD_VERSION, "model": model}
    return SAMPLE.write(run_dir, sample, header=header, seed=seed, requested=n_requested)


def load_sample(run_dir: Path) -> list[tuple[str, str]]:
    """The sampled trial keys of a run, ``[]`` when no sample was drawn."""
    return SAMPLE.load(run_dir)


@dataclass(frozen=True)
class GoldFile:
    """People's labels for one model's trials, as the viewer exports them."""

    path: Path
    model: str
    labels: pd.DataFrame  # question_id, substitute, and one bool column per label


def read_gold(path: Path) -> GoldFile:
    """A gold file, checked: one line naming the problem for anything the viewer would not write."""
    path = Path(path)
    obj = read_labels_file(path, what="gold file", fmt=GOLD_FORMAT, writer="the viewer's labelling mode exports")
    rows = obj.get("labels")
    if not isinstance(rows, list) or not rows:
        raise UserError(f"gold file {path} has no labels")
    clean = []
    for i, r in enumerate(rows, 1):
        if not isinstance(r, dict) or not isinstance(r.get("question_id"), str) or not isinstance(r.get("substitute"), str):
            raise UserError(f"gold file {path}: label {i} lacks question_id/substitute")
        bad = [label for label in LABELS if not isinstance(r.get(label), bool)]
        if bad:
            raise UserError(f"gold file {path}: label {i} ({r['question_id']}, {r['substitute']}) has no true/false for {', '.join(bad)}")
        clean.append({"question_id": r["question_id"], "substitute": r["substitute"], **{label: r[label] for label in LABELS}})
    df = pd.DataFrame(clean).drop_duplicates(["question_id", "substitute"], keep="last").reset_index(drop=True)
    return GoldFile(path, str(obj.get("model") or ""), df)


def gold_agreement(model: str, gold: pd.DataFrame, votes: pd.DataFrame, verdicts: pd.DataFrame | None, jury: Sequence[str]) -> pd.DataFrame:
    """Per label, each juror's and the jury's agreement with the people on the gold trials.

    A juror's abstentions and a label without majority are left out of its ``n`` (and counted in
    ``Not voted``), never scored as a disagreement.
    """
    key = ["question_id", "substitute"]
    rows = []
    raters: list[tuple[str, pd.DataFrame]] = []
    for juror in jury:
        mine = votes[(votes["juror"] == juror) & ~votes["abstained"].astype(bool)]
        raters.append((juror, mine))
    if verdicts is not None and len(jury) > 0:
        raters.append(("jury" if len(jury) > 1 else "jury (of one)", verdicts))
    for label in LABELS:
        for name, table in raters:
            merged = gold[[*key, label]].merge(table[[*key, label]], on=key, how="left", suffixes=("_gold", "_rater"))
            other = [None if pd.isna(v) else bool(v) for v in merged[f"{label}_rater"]]
            a = agreement([bool(v) for v in merged[f"{label}_gold"]], other)
            rows.append(
                {"Model": model, "Label": label, "Rater": name, "n": a.n, "Not voted": len(merged) - a.n, "Accuracy %": 100.0 * a.accuracy, "κ": a.kappa}
            )
    return pd.DataFrame(rows, columns=GOLD_COLUMNS)


GOLD_COLUMNS = ["Model", "Label", "Rater", "n", "Not voted", "Accuracy %", "κ"]
