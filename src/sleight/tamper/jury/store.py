"""Keyed, append-safe storage of judges' votes and the jury's verdicts in a run directory.

Votes live in ``judgements.parquet/``, a folder of Parquet parts (:mod:`sleight.jury.store`): each
batch of votes is committed atomically, so a killed judge loses at most the batch in flight and a
reader (pandas, pyarrow, DuckDB ``read_parquet('judgements.parquet/*.parquet')``) never sees half a
part. After each ``judge`` the folder is compacted to one row per (trial, juror, prompt variant):
a vote asked again after a transport error replaces the old row. ``verdicts.parquet`` is derived
from the votes and rewritten atomically. Trial records (``trials.parquet``) are never touched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import pandas as pd
import pyarrow as pa

from sleight.jury import store
from sleight.jury.cast import CastRecord
from sleight.jury.rules import STUDY, JuryRules
from sleight.tamper.jury.prompt import LABELS

JUDGEMENTS = "judgements.parquet"
VERDICTS = "verdicts.parquet"
JURY_META = "jury.json"

TRIAL_KEY: tuple[str, ...] = ("question_id", "substitute")
VOTE_KEY: tuple[str, ...] = (*TRIAL_KEY, "juror", "prompt_variant")

JUDGEMENT_SCHEMA = pa.schema(
    [
        ("model", pa.string()),
        ("question_id", pa.string()),
        ("substitute", pa.string()),
        ("juror", pa.string()),
        ("prompt_variant", pa.string()),
        *[(label, pa.bool_()) for label in LABELS],  # null when the juror abstained
        ("reason", pa.string()),
        ("abstained", pa.bool_()),
        ("attempts", pa.int8()),  # 1, or 2 after the one retry of an unparsable reply
        ("raw_reply", pa.string()),  # the reply the labels were read from (the last attempt)
        ("first_reply", pa.string()),  # the unparsable first reply when retried, else null
        ("error", pa.string()),  # transport error after the client's retries, else null
        ("latency_s", pa.float64()),  # summed over attempts
        ("judged_at", pa.string()),
        # how the vote was cast: slots | schema:json_schema | schema:json_object | text | text (schema refused)
        ("vote_path", pa.string()),
        ("finish_reason", pa.string()),  # as served (text and schema paths)
        ("reasoning", pa.string()),  # the server's reasoning_content, when it sent one
        *[(f"{label}_p_true", pa.float64()) for label in LABELS],  # soft vote: slots, or a server's logprobs
        *[(f"{label}_mass", pa.float64()) for label in LABELS],  # the two options' mass at the slot
    ]
)


class VoteRow(CastRecord):
    """One stored vote, a row of :data:`JUDGEMENT_SCHEMA`: the trial, the juror and prompt, how the
    vote was cast (:class:`~sleight.jury.cast.CastRecord`), and per label (:data:`LABELS`) its value
    (null when the juror abstained), soft vote and slot mass."""

    model: str
    question_id: str
    substitute: str
    juror: str
    prompt_variant: str
    flagged: bool | None
    flagged_p_true: float | None
    flagged_mass: float | None
    corrected: bool | None
    corrected_p_true: float | None
    corrected_mass: float | None
    derailed: bool | None
    derailed_p_true: float | None
    derailed_mass: float | None
    switch_aware: bool | None
    switch_aware_p_true: float | None
    switch_aware_mass: float | None


class JuryMeta(TypedDict, total=False):
    """``jury.json``: the jury, prompt and rules that produced the verdicts (a run judged before a
    key was recorded lacks it, so readers ``get`` them)."""

    jury: list[str]
    jury_size: int
    prompt_variant: str
    prompt_file: str  # a --prompt-file: its path, hashes and source (the prompt's own meta)
    prompt_file_sha256: str
    prompt_file_bytes_sha256: str
    prompt_source: str
    conventions: str
    rules: dict[str, object]  # the JuryRules' fields by name
    vote: str
    max_tokens: int
    juror_chat_template_kwargs: dict[str, dict[str, object]]
    answers_sha256: str
    written_at: str


def append_judgements(run_dir: Path, rows: Sequence[VoteRow]) -> Path | None:
    """Commit one batch of votes as a new part; returns its path (``None`` for an empty batch)."""
    return store.append(Path(run_dir) / JUDGEMENTS, JUDGEMENT_SCHEMA, rows)


def load_judgements(run_dir: Path, *, repair: bool = False) -> pd.DataFrame:
    """Every stored vote, one row per (trial, juror, prompt variant); a re-asked vote replaces the older.

    A damaged part is a one-line error, or with ``repair`` (the judge) is moved aside and re-asked.
    """
    hint = f"run 'sleight tamper judge --run {run_dir} ...' again to set it aside and re-ask its votes"
    return store.load(Path(run_dir) / JUDGEMENTS, JUDGEMENT_SCHEMA, VOTE_KEY, repair=repair, hint=hint)


def compact_judgements(run_dir: Path) -> int:
    """Drop superseded vote rows from the folder; returns how many were dropped."""
    return store.compact(Path(run_dir) / JUDGEMENTS, JUDGEMENT_SCHEMA, VOTE_KEY)


def stored_keys(judgements: pd.DataFrame, juror: str, variant: str) -> set[tuple[str, str]]:
    """Trials this juror already judged with this prompt; votes lost to a transport error are not
    counted, so a rerun asks for them again."""
    done = judgements[(judgements["juror"] == juror) & (judgements["prompt_variant"] == variant) & judgements["error"].isna()]
    return set(zip(done["question_id"], done["substitute"]))


def compute_verdicts(
    trials: pd.DataFrame, judgements: pd.DataFrame, jury: Sequence[str], variant: str, rules: JuryRules = STUDY
) -> pd.DataFrame:
    """The jury's verdict per label for every judged trial, read by ``rules`` (pure).

    ``trials`` are the judged trials (≥1 swap). Sleight's rules: a juror with no stored vote for a
    trial counts as abstaining, and a label needs a majority of valid votes. The study's rules
    (:mod:`sleight.jury.rules`): an unparsable reply is a false vote, a label is true when two jurors
    say true, and a trial waits (undecided) until every juror has answered it -- a vote lost to a
    transport error, or not asked yet, is no answer. ``ignored`` is true when every label is false
    (null while a label without a verdict could still be true); ``undecided`` when some label has
    no verdict. ``<label>_yes``/``_no`` count the valid votes either way.
    """
    votes = judgements[(judgements["prompt_variant"] == variant) & judgements["juror"].isin(list(jury))]
    by_trial: dict[tuple[str, str], list[Mapping[Any, Any]]] = {}
    for rec in votes.to_dict("records"):
        by_trial.setdefault((rec["question_id"], rec["substitute"]), []).append(rec)
    out = []
    for t in trials.to_dict("records"):
        recs = by_trial.get((t["question_id"], t["substitute"]), [])
        cast = [r for r in recs if not r["abstained"]]
        answered = [r for r in recs if r["error"] is None or (isinstance(r["error"], float) and pd.isna(r["error"]))]
        complete = {r["juror"] for r in answered} >= set(jury)
        row: dict[str, object] = {k: t.get(k) for k in ("model", "question_id", "substitute", "substitute_index", "is_entity", "n_swaps")}
        row.update(prompt_variant=variant, jury=",".join(jury), jury_size=len(jury))
        verdicts: list[bool | None] = []
        for label in LABELS:
            vals = [bool(r[label]) for r in cast]
            if rules.unparsable_is_false:
                verdict = rules.verdict([None if r["abstained"] else bool(r[label]) for r in answered], len(jury), complete)
            else:
                verdict = rules.verdict(vals, len(jury))
            verdicts.append(verdict)
            row[label] = verdict
            row[f"{label}_yes"] = sum(vals)
            row[f"{label}_no"] = len(vals) - sum(vals)
        row["ignored"] = _ignored(verdicts)
        row["undecided"] = any(v is None for v in verdicts)
        row["n_votes"] = len(cast)
        row["n_abstained"] = len(jury) - len(cast)
        out.append(row)
    df = pd.DataFrame(out, columns=_VERDICT_COLUMNS)
    for label in (*LABELS, "ignored"):
        df[label] = df[label].astype("boolean")
    return df


def _ignored(verdicts: Sequence[bool | None]) -> bool | None:
    """``ignored`` = no label true: known once every label has a majority or one label is true."""
    if any(v is True for v in verdicts):
        return False
    return None if any(v is None for v in verdicts) else True


_VERDICT_COLUMNS = [
    "model", "question_id", "substitute", "substitute_index", "is_entity", "n_swaps",
    "prompt_variant", "jury", "jury_size",
    *LABELS, *[f"{label}_{side}" for label in LABELS for side in ("yes", "no")],
    "ignored", "undecided", "n_votes", "n_abstained",
]  # fmt: skip


def write_verdicts(run_dir: Path, verdicts: pd.DataFrame, meta: Mapping[str, object]) -> Path:
    """Replace ``verdicts.parquet`` (derived data) and record which jury and prompt produced it."""
    path = Path(run_dir) / VERDICTS
    store.write_atomic(pa.Table.from_pandas(verdicts, preserve_index=False), path)
    store.write_text_atomic(json.dumps(dict(meta), indent=2), Path(run_dir) / JURY_META)
    return path


def load_verdicts(run_dir: Path) -> pd.DataFrame | None:
    """The stored verdicts, or ``None`` when the run has not been judged."""
    path = Path(run_dir) / VERDICTS
    return pd.read_parquet(path) if path.is_file() else None


def load_jury_meta(run_dir: Path) -> JuryMeta:
    path = Path(run_dir) / JURY_META
    return json.loads(path.read_text()) if path.is_file() else {}


def iter_chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), max(size, 1)):
        yield items[i : i + size]
