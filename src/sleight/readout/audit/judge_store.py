"""Where ``sleight readout judge`` keeps an audit's votes and verdicts, and the audit report's
section that reads them back.

Both the judge run (which writes them) and the audit's own report (which shows them once they
exist) use this module, so neither imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from sleight import rundir
from sleight.jury import store
from sleight.readout.audit import judge

JUDGEMENTS = "judgements.parquet"
VERDICTS = "verdicts.parquet"
JURY_META = "jury.json"
JUDGE_REPORT = "judge.md"
VOTE_KEY: tuple[str, ...] = ("item_id", "variant", "juror")

JUDGEMENT_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("variant", pa.string()),
        ("juror", pa.string()),
        ("class", pa.string()),  # null when the juror abstained
        ("reason", pa.string()),
        ("abstained", pa.bool_()),
        ("attempts", pa.int8()),
        ("raw_reply", pa.string()),
        ("first_reply", pa.string()),
        ("error", pa.string()),
        ("latency_s", pa.float64()),
        ("judged_at", pa.string()),
        ("vote_path", pa.string()),  # slots | schema:json_schema | schema:json_object | text | text (schema refused)
        ("finish_reason", pa.string()),
        ("reasoning", pa.string()),
        ("class_options", pa.list_(pa.string())),  # the classes offered (substituted variants add 'instruction')
        ("class_probs", pa.list_(pa.float64())),  # soft vote over class_options (label slots)
        ("class_mass", pa.float64()),  # the class options' next-token mass at the slot
    ]
)


def load_judgements(out_dir: Path, *, repair: bool = False) -> pd.DataFrame:
    hint = f"run 'sleight readout judge {out_dir} --jury ...' again to set it aside and re-ask its votes"
    return store.load(Path(out_dir) / JUDGEMENTS, JUDGEMENT_SCHEMA, VOTE_KEY, repair=repair, hint=hint)


def section_lines(out_dir: Path) -> list[str]:
    """The jury's section of the audit report (Markdown); ``[]`` when the audit was not judged."""
    out_dir = Path(out_dir)
    if not (out_dir / VERDICTS).is_file() or not (out_dir / JURY_META).is_file():
        return []
    meta = rundir.read_json(out_dir / JURY_META)
    jury = [str(j) for j in meta.get("jury") or []]
    verdicts = pd.read_parquet(out_dir / VERDICTS)
    votes = load_judgements(out_dir)
    votes = votes[votes["juror"].isin(jury)]
    who = ", ".join(jury) + (" — a JURY OF ONE: its single vote is the verdict" if len(jury) == 1 else f" (jury of {len(jury)}; majority = two agreeing votes)")
    lines = [
        "",
        "## What the continuations do: the jury's classes beside the rule classes",
        "",
        f"Judges: {who}. Classes: " + "; ".join(f"`{c}` = {judge.DEFINITIONS[c]}" for c in judge.CLASSES)
        + ". The rule classes map onto them as answers_item → item, forecast → forecast, recites/prose/other → other "
        "(no rule detects an executed substituted instruction, so every `instruction` verdict is a disagreement).",
        "",
    ]
    lines += judge.markdown_table(judge.agreement_rows(verdicts))
    lines += ["", "Rule class (rows) against the jury's majority class (columns; none = no majority):", ""]
    ct = judge.crosstab(verdicts)
    lines += judge.markdown_table([{"rule class": str(idx), **{str(c): int(v) for c, v in row.items()}} for idx, row in ct.iterrows()])
    per_juror: list[dict[str, Any]] = []
    for j in jury:
        mine = votes[votes["juror"] == j]
        masses = pd.to_numeric(mine["class_mass"], errors="coerce").dropna()
        per_juror.append(
            {
                "juror": j,
                "votes": len(mine),
                "abstained": int(mine["abstained"].astype(bool).sum()),
                "errors": int(mine["error"].notna().sum()),
                "path": ", ".join(f"{k} {int(n)}" for k, n in mine["vote_path"].fillna("text").value_counts().items()) or "—",
                "median slot mass": float(masses.median()) if len(masses) else float("nan"),
                "slots below 0.5": int((masses < 0.5).sum()),
            }
        )
    lines += ["", "Per juror (abstentions, how the votes were cast, the slot mass of label-slot votes):", ""]
    lines += judge.markdown_table(per_juror)
    low = [r for r in per_juror if r["median slot mass"] == r["median slot mass"] and r["median slot mass"] < 0.5]
    for r in low:
        lines += ["", f"> **Warning:** juror {r['juror']}'s class slots hold a median mass of {r['median slot mass']:.3f} (< 0.5): it is read where it was about to write something else."]
    if len(jury) > 1:
        lines += ["", "Agreement between jurors (Cohen's κ over the continuations both classified):", ""]
        lines += judge.markdown_table(judge.juror_kappas(votes, jury))
    lines.append("")
    return lines
