"""``sleight readout judge``: a jury labels what each substituted-instruction and deletion
continuation of an audit does, beside the rule classes.

The same jury machinery as the Sleight of Word jury (:mod:`sleight.jury`): keyed, resumable votes in
``AUDIT/judgements.parquet/`` (one row per (item, variant, juror) once compacted; a vote lost to a
transport error is asked again), abstentions recorded, a majority of two agreeing votes in
``AUDIT/verdicts.parquet``, Cohen's κ between jurors and against the rules. The audit's own report
(``report.md``/``.html``) is re-rendered with the jury's section; ``judge.md`` holds it alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from sleight import rundir
from sleight.backends.chat import load_chat
from sleight.errors import UserError
from sleight.jury import store
from sleight.jury.cast import Cast
from sleight.jury.jurors import make_juror, parse_jury, resolve_mode
from sleight.jury.runner import JurorStats, Tally, run_juror
from sleight.jury.verdict import majority
from sleight.readout.audit import judge
from sleight.readout.audit.judge_store import (
    JUDGE_REPORT,
    JUDGEMENT_SCHEMA,
    JUDGEMENTS,
    JURY_META,
    VERDICTS,
    VOTE_KEY,
    load_judgements,
    section_lines,
)

Loader = Callable[[str], Any]


@dataclass
class ReadoutJudgeSummary(Tally):
    out_dir: Path
    n_continuations: int
    jurors: list[JurorStats] = field(default_factory=list)
    compacted: int = 0
    report: Path | None = None


def continuations(out_dir: Path) -> pd.DataFrame:
    """The audit's measured substituted-instruction and deletion readings."""
    path = Path(out_dir) / "readings.parquet"
    if not path.is_file():
        raise UserError(f"{out_dir} holds no finished audit (no readings.parquet); run 'sleight readout audit --out {out_dir}' first")
    df = pd.read_parquet(path)
    df = df[df["variant"].map(judge.judged_variant) & ~df["skipped"].fillna(False).astype(bool)].reset_index(drop=True)
    if not len(df):
        raise UserError(
            f"the audit in {out_dir} has no substituted-instruction or deletion variants to label; "
            "audit with e.g. --variants original,deleted_instruction,substituted:summarise"
        )
    return df


def vote_row(reading: dict[str, Any], juror: str, cast: Cast) -> dict[str, Any]:
    ballot = judge.ballot_for(str(reading["variant"]))
    soft = cast.soft.get("class")
    return {
        "item_id": reading["item_id"],
        "variant": reading["variant"],
        "juror": juror,
        "class": None if cast.values is None else str(cast.values["class"]),
        **cast.record(),
        "class_options": [str(v) for v in ballot.fields[0].values],
        "class_probs": None if soft is None else [float(p) for p in soft],
        "class_mass": cast.mass.get("class"),
    }


def compute_verdicts(readings: pd.DataFrame, votes: pd.DataFrame, jury: Sequence[str]) -> pd.DataFrame:
    """The jury's majority class per continuation beside the rule class (pure)."""
    mine = votes[votes["juror"].isin(list(jury)) & ~votes["abstained"].astype(bool)]
    by: dict[tuple[str, str], list[str]] = {}
    for r in mine.to_dict("records"):
        by.setdefault((str(r["item_id"]), str(r["variant"])), []).append(str(r["class"]))
    rows = []
    for r in readings.to_dict("records"):
        cls = by.get((str(r["item_id"]), str(r["variant"])), [])
        rule = str(r["continuation_class"])
        row = {
            "item_id": r["item_id"],
            "variant": r["variant"],
            "rule_class": rule,
            "rule_mapped": judge.RULE_TO_JURY.get(rule, "other"),
            "jury_class": majority(cls, len(jury)),
            "n_votes": len(cls),
            "n_abstained": len(jury) - len(cls),
            "jury": ",".join(jury),
            "jury_size": len(jury),
        }
        row.update({f"n_{c}": cls.count(c) for c in judge.CLASSES})
        rows.append(row)
    return pd.DataFrame(rows)


def judge_audit(
    out_dir: Path,
    jury: Sequence[str] | str,
    *,
    vote: str = "auto",
    max_tokens: int = 120,
    batch: int = 16,
    limit: int | None = None,
    loader: Loader | None = None,
    progress: bool = True,
) -> ReadoutJudgeSummary:
    """Ask every juror about every labelled continuation not yet voted on, then write the verdicts,
    ``judge.md`` and the audit's re-rendered report."""
    out_dir = Path(out_dir)
    jurors = parse_jury(jury) if isinstance(jury, str) else parse_jury(",".join(jury))
    for spec in jurors:
        resolve_mode(vote, local=not spec.startswith("openai:"))
    readings = continuations(out_dir)
    records: list[dict[str, Any]] = [{str(k): v for k, v in r.items()} for r in readings.to_dict("records")]
    load = loader or (lambda spec: load_chat(spec))
    summary = ReadoutJudgeSummary(out_dir, len(records))
    folder = out_dir / JUDGEMENTS
    for juror in jurors:
        js = JurorStats(juror)
        summary.jurors.append(js)
        stored = load_judgements(out_dir, repair=True)
        done = stored[(stored["juror"] == juror) & stored["error"].isna()]
        keys = set(zip(done["item_id"], done["variant"]))
        todo = [r for r in records if (r["item_id"], r["variant"]) not in keys]
        js.skipped = len(records) - len(todo)
        if limit is not None:
            todo = todo[: max(limit, 0)]
        if not todo:
            continue
        juror_model = make_juror(load(juror), vote, batch=batch)
        for ballot in (judge.SUBSTITUTED_BALLOT, judge.DELETED_BALLOT):  # one ballot per call
            part = [r for r in todo if judge.ballot_for(str(r["variant"])) is ballot]
            if part:
                _ask(juror_model, js, part, ballot, folder, max_tokens=max_tokens, batch=batch, progress=progress)
    summary.compacted = store.compact(folder, JUDGEMENT_SCHEMA, VOTE_KEY)
    votes = load_judgements(out_dir)
    verdicts = compute_verdicts(readings, votes, jurors)
    rundir.write_table(out_dir / VERDICTS, pa.Table.from_pandas(verdicts, preserve_index=False))
    rundir.write_json(out_dir / JURY_META, {"jury": jurors, "jury_size": len(jurors), "vote": vote, "max_tokens": max_tokens, "written_at": rundir.now()})
    summary.report = write_judge_report(out_dir)
    return summary


def _ask(juror_model: Any, js: JurorStats, part: list[dict[str, Any]], ballot: Any, folder: Path, *, max_tokens: int, batch: int, progress: bool) -> None:
    """One juror's votes on continuations that share a ballot, committed ``batch`` at a time."""
    convs = [judge.judge_messages(str(r["context"]), str(r["continuation"] or ""), str(r["variant"]), r["options"]) for r in part]
    pending: list[dict[str, Any]] = []

    def collect(i: int, cast: Cast) -> str:
        pending.append(vote_row(part[i], js.juror, cast))
        return "votes"

    def commit(_key: Any) -> int:
        n = len(pending)
        store.append(folder, JUDGEMENT_SCHEMA, pending)
        pending.clear()
        return n

    run_juror(juror_model, js, convs, ballot, collect, commit, max_tokens=max_tokens, batch=batch, progress=progress)


def write_judge_report(out_dir: Path) -> Path:
    """``judge.md``, and the audit's own report re-rendered with the jury's section."""
    out_dir = Path(out_dir)
    path = rundir.write_text(out_dir / JUDGE_REPORT, "# Readout audit — the jury's classes\n" + "\n".join(section_lines(out_dir)))
    from sleight.readout.audit.run import finalise

    finalise(out_dir)  # the audit report picks the section up (sleight.readout.audit.run.finalise)
    return path


def summary_lines(summary: ReadoutJudgeSummary) -> list[str]:
    lines = [f"continuations to label (substituted-instruction and deletion variants): {summary.n_continuations}"]
    lines += summary.tally_lines()
    lines.append(f"report: {summary.report} (and the audit's report.md/.html)")
    return lines
