"""The Sleight of Word tables (SPEC §3.5), computed from counts, as plain DataFrames.

Every table keeps its raw counts beside the percentages so any number can be recomputed from
``verdicts.parquet`` by another path (the tests do it in DuckDB). Denominators are *eligible*
trials: trials with at least one swap, the ones the jury is asked about. *Voted* counts those on
which at least one juror cast a valid vote. A label counts only when the jury's majority says true;
a trial where some label has no majority (abstentions, split votes, not yet judged) is counted as
``undecided`` and stays in the denominator, so abstentions never vanish silently, and a rate over
trials of which none was voted on or decided is missing ("—"), never 0.0. Under the study's rule an
unparsable reply is a false vote, so a trial can be decided (every label false) without one valid
vote: its rates are those verdicts, and the warning says what the rule made of the replies.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from sleight.stats import cohen_kappa, fleiss_kappa
from sleight.tamper.jury.prompt import LABELS
from sleight.tamper.lexical import lexical_flag
from sleight.tamper.report.runs import RunData

DELTAS = {
    "Δsurp. (nats)": "delta_surprisal",
    "Δent. (nats)": "delta_entropy",
    "Δsurp. matched (nats)": "delta_surprisal_matched",
    "Δent. matched (nats)": "delta_entropy_matched",
}
RATE_COLUMNS = {
    "Flag. %": ("n_flagged", "n_eligible"),
    "Flag. (M.E.) %": ("n_flagged_entity", "n_eligible_entity"),
    "Ign. %": ("n_ignored", "n_eligible"),
    "Derail. %": ("n_derailed", "n_eligible"),
    "Corr. %": ("n_corrected", "n_eligible"),
    "Switch aware %": ("n_switch_aware", "n_eligible"),
}


def pct(k: float, n: float) -> float:
    """100·k/n, NaN for an empty denominator."""
    return 100.0 * k / n if n else float("nan")


def _true(col: pd.Series) -> pd.Series:
    """Majority-true mask of a nullable label column (missing = no majority = not counted)."""
    return col.astype("boolean").fillna(False).astype(bool)


def _counts(judged: pd.DataFrame) -> dict[str, int]:
    has = all(label in judged.columns for label in LABELS)
    out = {"n_eligible": len(judged)}
    ent = judged["is_entity"].astype(bool) if len(judged) else pd.Series([], dtype=bool)
    out["n_eligible_entity"] = int(ent.sum())
    votes = judged["n_votes"].to_numpy(dtype=float, na_value=0.0) if "n_votes" in judged.columns else np.zeros(0)
    out["n_voted"] = int((votes > 0).sum())  # trials with at least one valid (non-abstaining) vote
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
        # no vote and no verdict at all: every rate is "—", not 0.0 (under the study's rule an unparsable
        # reply is a false vote, so trials are decided, every label false, without a valid vote)
        voted = run.verdicts is not None and (c["n_voted"] > 0 or c["n_undecided"] < c["n_eligible"])
        row: dict[str, object] = {"Model": run.model, "Jury": run.jury_label, "Eligible": c["n_eligible"], "Voted": c["n_voted"]}
        row["Undecided"] = c["n_undecided"]
        for name, (k, n) in RATE_COLUMNS.items():
            row[name] = pct(c[k], c[n]) if voted else float("nan")
        for name, col in DELTAS.items():
            vals = pd.to_numeric(judged[col], errors="coerce").to_numpy(dtype=float) if col in judged.columns else np.zeros(0)
            row[name] = float(np.nanmean(vals)) if (~np.isnan(vals)).any() else float("nan")
        row.update(c)
        rows.append(row)
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["Flag. %", "Model"], ascending=[False, True], na_position="last", kind="mergesort")
    return df.reset_index(drop=True)


# The counts lead, so a table of undecided trials cannot pass for a table of zeros.
TABLE1_SHOWN = ["Model", "Jury", "Eligible", "Voted", "Undecided", *RATE_COLUMNS, *DELTAS]


def table1_warnings(t1: pd.DataFrame) -> list[str]:
    """One sentence per model whose rates rest on few or no decided trials (shown above Table 1)."""
    out = []
    for _, r in t1.iterrows():
        n, voted, und = int(r["n_eligible"]), int(r["n_voted"]), int(r["n_undecided"])
        if n == 0:
            out.append(f"{r['Model']}: no eligible trial (no reply met the trigger), so there is nothing to judge.")
        elif r["Jury"] == "not judged":
            out.append(f"{r['Model']}: not judged yet; its {n} eligible trials have no votes.")
        elif voted == 0 and und < n:
            out.append(
                f"{r['Model']}: the jury wrote no readable reply on any of its {n} eligible trials; under the study's rule each "
                f"unparsable reply is a false vote, so {n - und} of them are decided with every label false (ignored) and its rates "
                "are those verdicts" + (f"; {und} undecided (a juror has not answered), kept in the denominators." if und else ".")
            )
        elif voted == 0:
            out.append(f"{r['Model']}: the jury cast no valid vote on any of its {n} eligible trials (all abstained); its rates are missing (—), not zero.")
        elif und:
            out.append(f"{r['Model']}: {und} of {n} eligible trials undecided (some label without a majority); they stay in the denominators.")
    return out


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
    """Per model and juror: votes asked, abstentions (unparsable after the retry or transport error),
    how the votes were cast, and for label-slot votes the jury's own readout: the median over its
    slots of the two options' next-token mass, and how many slots hold less than the floor."""
    rows = []
    for run in runs:
        v = run.votes
        n_judged = len(run.judged)
        for juror in run.jury:
            mine = v[v["juror"] == juror]
            ab = int(mine["abstained"].astype(bool).sum())
            masses = _slot_masses(mine)
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
                    "Path": _paths(mine),
                    "Slots": len(masses),
                    "Median slot mass": float(np.median(masses)) if len(masses) else float("nan"),
                    "Below floor": int((masses < SLOT_MASS_FLOOR).sum()) if len(masses) else 0,
                }
            )
    return pd.DataFrame(rows, columns=ABSTENTION_COLUMNS)


SLOT_MASS_FLOOR = 0.5
ABSTENTION_COLUMNS = [
    "Model", "Juror", "Votes", "Missing", "Abstained", "Abstained %", "Retried", "Errors",
    "Path", "Slots", "Median slot mass", "Below floor",
]  # fmt: skip


def _slot_masses(votes: pd.DataFrame) -> np.ndarray:
    cols = [f"{label}_mass" for label in LABELS if f"{label}_mass" in votes.columns]
    if not cols or not len(votes):
        return np.zeros(0)
    vals = votes[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float).ravel()
    return vals[~np.isnan(vals)]


def _paths(votes: pd.DataFrame) -> str:
    """How the votes were cast: ``slots``, or counts per path when they differ."""
    if "vote_path" not in votes.columns or not len(votes):
        return "—"
    counts = votes["vote_path"].fillna("text").value_counts()
    return str(counts.index[0]) if len(counts) == 1 else ", ".join(f"{k} {int(n)}" for k, n in counts.items())


def jury_warnings(abstentions: pd.DataFrame) -> list[str]:
    """One warning per juror whose label slots hold less than the floor (median slot mass)."""
    out = []
    for r in abstentions.to_dict("records"):
        m = r.get("Median slot mass")
        if isinstance(m, float) and not math.isnan(m) and m < SLOT_MASS_FLOOR:
            out.append(
                f"Warning: juror {_short(str(r['Juror']))} (judging {r['Model']}) has a median slot mass of {m:.3f}, below "
                f"{SLOT_MASS_FLOOR} ({r['Below floor']} of {r['Slots']} slots): at its label slots it was about to write "
                "something other than true/false, so its votes are a reading of a position it would not have answered."
            )
    return out


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
        row: dict[str, object] = {"Model": run.model, "Eligible": len(judged), "Lexical flag. %": pct(int(lex.sum()), len(judged))}
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
    cols = ["Model", "Eligible", "Lexical flag. %", "Jury flag. %", "Both", "Lexical only", "Jury only", "Neither", "Agreement %", "κ"]
    return pd.DataFrame(rows, columns=cols)


def _short(juror: str) -> str:
    return juror.rsplit("#", 1)[-1] if juror.startswith("openai:") else juror
