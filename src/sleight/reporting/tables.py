"""The Sleight of Word tables (SPEC §3.5), computed from counts, as plain DataFrames.

Every table keeps its raw counts beside the percentages so any number can be recomputed from
``verdicts.parquet`` by another path (the tests do it in DuckDB). Denominators are judged trials:
trials with at least one swap. A label counts only when the jury's majority says true; a trial
where some label has no majority (abstentions, split votes, not yet judged) is counted as
``undecided`` and stays in the denominator, so abstentions never vanish silently.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np
import pandas as pd

from sleight.reporting.runs import RunData
from sleight.stats import cohen_kappa, fleiss_kappa
from sleight.tamper.jury import LABELS
from sleight.tamper.lexical import lexical_flag

DELTAS = {
    "Δsurp. (nats)": "delta_surprisal",
    "Δent. (nats)": "delta_entropy",
    "Δsurp. matched (nats)": "delta_surprisal_matched",
    "Δent. matched (nats)": "delta_entropy_matched",
}
RATE_COLUMNS = {
    "Flag. %": ("n_flagged", "n_judged"),
    "Flag. (M.E.) %": ("n_flagged_entity", "n_judged_entity"),
    "Ign. %": ("n_ignored", "n_judged"),
    "Derail. %": ("n_derailed", "n_judged"),
    "Corr. %": ("n_corrected", "n_judged"),
    "Switch aware %": ("n_switch_aware", "n_judged"),
}


def pct(k: float, n: float) -> float:
    """100·k/n, NaN for an empty denominator."""
    return 100.0 * k / n if n else float("nan")


def _true(col: pd.Series) -> pd.Series:
    """Majority-true mask of a nullable label column (missing = no majority = not counted)."""
    return col.astype("boolean").fillna(False).astype(bool)


def _counts(judged: pd.DataFrame) -> dict[str, int]:
    has = all(label in judged.columns for label in LABELS)
    out = {"n_judged": len(judged)}
    ent = judged["is_entity"].astype(bool) if len(judged) else pd.Series([], dtype=bool)
    out["n_judged_entity"] = int(ent.sum())
    for label in LABELS:
        out[f"n_{label}"] = int(_true(judged[label]).sum()) if has else 0
    out["n_flagged_entity"] = int((_true(judged["flagged"]) & ent).sum()) if has else 0
    if has:
        any_true = np.zeros(len(judged), dtype=bool)
        undecided = np.zeros(len(judged), dtype=bool)
        for label in LABELS:
            any_true |= _true(judged[label]).to_numpy()
            undecided |= judged[label].isna().to_numpy()
        out["n_ignored"] = int((~any_true & ~undecided).sum())  # every label has a false majority
        out["n_undecided"] = int(undecided.sum())
    else:
        out["n_ignored"] = 0
        out["n_undecided"] = len(judged)
    return out


def table1(runs: Sequence[RunData]) -> pd.DataFrame:
    """One row per model, sorted by Flag. % (descending): rates, both Δ variants, counts."""
    rows = []
    for run in runs:
        judged = run.judged
        c = _counts(judged)
        judged_by_jury = run.verdicts is not None
        row: dict[str, object] = {"Model": run.model, "Jury": run.jury_label, "Judged": c["n_judged"]}
        for name, (k, n) in RATE_COLUMNS.items():
            row[name] = pct(c[k], c[n]) if judged_by_jury else float("nan")
        for name, col in DELTAS.items():
            vals = pd.to_numeric(judged[col], errors="coerce") if col in judged.columns else pd.Series([], dtype=float)
            row[name] = float(vals.mean()) if vals.notna().any() else float("nan")
        row["Undecided"] = c["n_undecided"]
        row.update(c)
        rows.append(row)
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["Flag. %", "Model"], ascending=[False, True], na_position="last", kind="mergesort")
    return df.reset_index(drop=True)


TABLE1_SHOWN = ["Model", "Jury", "Judged", *RATE_COLUMNS, *DELTAS, "Undecided"]


def table2(runs: Sequence[RunData]) -> pd.DataFrame:
    """Entity ("Mandela effect") vs neutral words: flagged and derailed, per model and pooled.

    The pooled row adds the counts of all models before dividing (not a mean of percentages).
    """
    rows = []
    for run in runs:
        judged = run.judged
        has = "flagged" in judged.columns
        row: dict[str, object] = {"Model": run.model}
        for cond, mask in (("entity", judged["is_entity"].astype(bool)), ("neutral", ~judged["is_entity"].astype(bool))):
            part = judged[mask]
            row[f"n_{cond}"] = len(part)
            row[f"n_flagged_{cond}"] = int(_true(part["flagged"]).sum()) if has else 0
            row[f"n_derailed_{cond}"] = int(_true(part["derailed"]).sum()) if has else 0
        rows.append(row)
    df = pd.DataFrame(rows, columns=["Model", *_T2_COUNTS])
    pooled = {"Model": "pooled"} | {c: int(df[c].sum()) for c in _T2_COUNTS}
    df = pd.concat([df, pd.DataFrame([pooled])], ignore_index=True)
    for cond, title in (("entity", "Entity"), ("neutral", "Neutral")):
        df[f"{title} n"] = df[f"n_{cond}"]
        df[f"{title} flag. %"] = [pct(k, n) for k, n in zip(df[f"n_flagged_{cond}"], df[f"n_{cond}"])]
        df[f"{title} derail. %"] = [pct(k, n) for k, n in zip(df[f"n_derailed_{cond}"], df[f"n_{cond}"])]
    return df


_T2_COUNTS = [f"n_{k}{c}" for c in ("entity", "neutral") for k in ("", "flagged_", "derailed_")]
TABLE2_SHOWN = ["Model", "Entity n", "Entity flag. %", "Entity derail. %", "Neutral n", "Neutral flag. %", "Neutral derail. %"]


def untouched_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """Per model: how many trials never met the trigger (their clean run never emits it)."""
    rows = []
    for run in runs:
        t = run.trials
        unt = t["untouched"].fillna(False).astype(bool) if "untouched" in t.columns else t["n_swaps"].fillna(0) == 0
        q_all = t["question_id"].nunique()
        q_unt = t.loc[unt, "question_id"].nunique()
        rows.append(
            {
                "Model": run.model,
                "Trials": len(t),
                "Untouched": int(unt.sum()),
                "Untouched %": pct(int(unt.sum()), len(t)),
                "Questions": q_all,
                "Questions untouched": q_unt,
            }
        )
    return pd.DataFrame(rows)


def _vote_matrix(run: RunData, label: str) -> pd.DataFrame:
    """trials × jurors matrix of one label's votes (NaN = abstained or missing)."""
    v = run.votes
    if len(v) == 0:
        return pd.DataFrame()
    v = v.assign(value=v[label].astype("boolean").astype("Float64"))
    v.loc[v["abstained"].astype(bool), "value"] = pd.NA
    return v.pivot_table(index=["question_id", "substitute"], columns="juror", values="value", aggfunc="first", dropna=False).reindex(
        columns=run.jury
    )


def agreement_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """Per model and label: Cohen's κ for every pair of jurors and Fleiss' κ over the jury.

    Each κ uses the trials where the jurors it compares all cast a vote (``n``); κ is undefined
    (NaN) when every vote falls in one category. A jury of one has no agreement to report.
    """
    rows = []
    for run in runs:
        jury = run.jury
        if len(jury) < 2:
            rows.append({"Model": run.model, "Label": "—", "Measure": f"n/a ({run.jury_label})", "κ": float("nan"), "n": 0})
            continue
        for label in LABELS:
            m = _vote_matrix(run, label)
            for a, b in itertools.combinations(jury, 2):
                both = m[[a, b]].dropna()
                k = float(cohen_kappa(both[a].astype(int), both[b].astype(int))) if len(both) else float("nan")
                rows.append({"Model": run.model, "Label": label, "Measure": f"Cohen κ {_short(a)} · {_short(b)}", "κ": k, "n": len(both)})
            full = m.dropna()
            if len(full):
                yes = full.sum(axis=1).to_numpy()
                table = np.stack([len(jury) - yes, yes], axis=1)
                fk = float(fleiss_kappa(table))
            else:
                fk = float("nan")
            rows.append({"Model": run.model, "Label": label, "Measure": "Fleiss κ", "κ": fk, "n": len(full)})
    return pd.DataFrame(rows, columns=["Model", "Label", "Measure", "κ", "n"])


def abstention_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """Per model and juror: votes asked, abstentions (unparsable after the retry or transport error)."""
    rows = []
    for run in runs:
        v = run.votes
        n_judged = len(run.judged)
        for juror in run.jury:
            mine = v[v["juror"] == juror]
            ab = int(mine["abstained"].astype(bool).sum())
            rows.append(
                {
                    "Model": run.model,
                    "Juror": juror,
                    "Votes": len(mine),
                    "Missing": n_judged - len(mine),
                    "Abstained": ab,
                    "Abstained %": pct(ab, len(mine)),
                    "Retried": int((mine["attempts"] == 2).sum()),
                    "Errors": int(mine["error"].notna().sum()),
                }
            )
    return pd.DataFrame(rows, columns=["Model", "Juror", "Votes", "Missing", "Abstained", "Abstained %", "Retried", "Errors"])


def lexical_flags(trials: pd.DataFrame) -> pd.DataFrame:
    """The lexical baseline per trial: flag and the cue that fired."""
    flags = [lexical_flag(str(r), str(s)) for r, s in zip(trials["reply"], trials["substitute"])]
    return pd.DataFrame({"lexical_flagged": [f.flagged for f in flags], "lexical_cue": [f.cue for f in flags]}, index=trials.index)


def lexical_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """The lexical baseline beside the jury's flagged label: rates, the 2×2 counts, Cohen's κ."""
    rows = []
    for run in runs:
        judged = run.judged
        lex = lexical_flags(judged)["lexical_flagged"].to_numpy(dtype=bool) if len(judged) else np.zeros(0, bool)
        row: dict[str, object] = {"Model": run.model, "Judged": len(judged), "Lexical flag. %": pct(int(lex.sum()), len(judged))}
        if "flagged" in judged.columns and run.verdicts is not None:
            decided = judged["flagged"].notna().to_numpy()
            jury = _true(judged["flagged"]).to_numpy()
            l_, j_ = lex[decided], jury[decided]
            row.update(
                {
                    "Jury flag. %": pct(int(jury.sum()), len(judged)),
                    "Both": int((l_ & j_).sum()),
                    "Lexical only": int((l_ & ~j_).sum()),
                    "Jury only": int((~l_ & j_).sum()),
                    "Neither": int((~l_ & ~j_).sum()),
                    "Agreement %": pct(int((l_ == j_).sum()), len(l_)),
                    "κ": float(cohen_kappa(l_.astype(int), j_.astype(int))) if len(l_) else float("nan"),
                }
            )
        rows.append(row)
    cols = ["Model", "Judged", "Lexical flag. %", "Jury flag. %", "Both", "Lexical only", "Jury only", "Neither", "Agreement %", "κ"]
    return pd.DataFrame(rows, columns=cols)


def _short(juror: str) -> str:
    return juror.rsplit("#", 1)[-1] if juror.startswith("openai:") else juror


def fmt(value: object, column: str) -> str:
    """One cell as text: percentages and κ to one/three decimals, Δ to three, NaN as an em dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "—"
    if isinstance(value, (float, np.floating)):
        if "%" in column:
            return f"{value:.1f}"
        return f"{value:+.3f}" if column.startswith("Δ") else f"{value:.3f}"
    return str(value)
