"""The paper's tables as report sections, printed as the paper prints them (:mod:`.paper` computes).

Table 1: integer percentages, switch-aware to one decimal, Δ to two with a sign, sorted by flagged,
thinking-capable rows marked († in Markdown, shaded in LaTeX and HTML, as the paper shades them).
Table 2: entity and neutral rates and their difference per label, in Table 1's order, and the pooled
row. App. D: untouched rates to one decimal. Then the claims of §5: the pooled switch-aware rate, the
size statistic and the matched thinking pairs. Each printed table has a twin with the 95% cluster
bootstrap interval in every cell; the CSVs carry the unrounded numbers, counts and bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from sleight.render import MISSING as DASH
from sleight.tamper.report import paper
from sleight.tamper.report.export import Section
from sleight.tamper.report.meta import ReportMeta
from sleight.tamper.report.paper import AWARE, DELTAS, RATES, TABLE1, Estimate, ModelTrials, PaperTables
from sleight.tamper.report.runs import RunData

THINK_NOTE = "† thinking-capable: a native reasoning-trace mode, whether or not the default chat template turns it on (the paper shades these rows)."
POOLED = "Pooled (all models)"


# --------------------------------------------------------------------------- inputs


def _true(col: pd.Series) -> np.ndarray:
    return col.astype("boolean").fillna(False).astype(bool).to_numpy()


def model_trials(run: RunData, meta: ReportMeta | None = None) -> ModelTrials:
    """What the paper's tables read of one run; named and marked from ``meta`` where it knows the run
    (by its folder name, then its model spec), else by the run's model and unmarked."""
    spec = run.manifest.get("config", {}).get("model") if isinstance(run.manifest.get("config"), dict) else None
    found = meta.lookup((run.run_dir.name, run.model, str(spec))) if meta is not None else None
    key = found[0] if found else run.model
    info = found[1] if found else None
    judged = run.judged
    labels: dict[str, np.ndarray] | None = None
    if run.verdicts is not None and all(c in judged.columns for c in paper.LABELS) and judged[list(paper.LABELS)].notna().any().any():
        labels = {label: _true(judged[label]) for label in paper.LABELS}
        undecided = judged[list(paper.LABELS)].isna().any(axis=1).to_numpy()
        labels["ignored"] = ~np.any([labels[label] for label in paper.LABELS], axis=0) & ~undecided
    t = run.trials
    untouched = t["untouched"].fillna(False).astype(bool) if "untouched" in t.columns else t["n_swaps"].fillna(0) == 0

    def deltas(col: str) -> np.ndarray:
        return pd.to_numeric(t[col], errors="coerce").to_numpy(dtype=float) if col in t.columns else np.full(len(t), np.nan)

    return ModelTrials(
        key=key,
        display=info.display if info else run.model,
        thinking_capable=bool(info and info.thinking_capable),
        params_b=info.params_b if info else None,
        active_params_b=info.active_params_b if info else None,
        question=judged["question_id"].astype(str).to_numpy(),
        entity=judged["is_entity"].astype(bool).to_numpy(),
        labels=labels,
        all_question=t["question_id"].astype(str).to_numpy(),
        untouched=untouched.to_numpy(dtype=bool),
        delta_surprisal=deltas("delta_surprisal"),
        delta_entropy=deltas("delta_entropy"),
    )


# --------------------------------------------------------------------------- how a cell reads


def pct0(x: float) -> str:
    """An integer percentage, rounded as the study's ``round(100 * a / b)``."""
    return str(int(round(x)))


def pct1(x: float) -> str:
    return f"{round(x, 1):.1f}"


def pct2(x: float) -> str:
    return f"{round(x, 2):.2f}"


def signed2(x: float) -> str:
    return f"{x:+.2f}"


def signed_int(x: float) -> str:
    return f"{int(x):+d}"


def signed1(x: float) -> str:
    return f"{x:+.1f}"


def _scaled(e: Estimate, scale: float) -> float:
    return math.nan if e.missing else scale * e.value


def _pct_value(e: Estimate) -> float:
    """100·k/n computed as the study computes it (so the rounding lands where the study's did)."""
    return math.nan if e.missing or not e.n else 100 * e.k / e.n


def with_interval(e: Estimate, f: Callable[[float], str], scale: float = 1.0) -> str:
    """``value [low, high]`` in the table's own format, or the missing mark."""
    if e.missing:
        return DASH
    lo, hi = scale * e.low, scale * e.high
    bounds = "" if math.isnan(lo) else f" [{f(lo)}, {f(hi)}]"
    return f"{f(scale * e.value)}{bounds}"


COLUMN_FORMAT: Mapping[str, Callable[[float], str]] = {c: pct0 for c in RATES} | {AWARE: pct1} | {c: signed2 for c in DELTAS}
SCALE: dict[str, float] = {c: 100.0 for c in RATES} | {c: 1.0 for c in DELTAS}


def _value(col: str, e: Estimate) -> float:
    return _pct_value(e) if col in RATES else _scaled(e, 1.0)


# --------------------------------------------------------------------------- sections


def table1_section(t: PaperTables) -> tuple[Section, Section]:
    """Table 1 as printed, and its twin with intervals."""
    rows, ci_rows = [], []
    for r in t.rows:
        m = r.model
        row: dict[str, Any] = {"Model": m.display}
        ci: dict[str, Any] = {"Model": m.display}
        for col in TABLE1:
            e = r.table1.get(col, paper.MISSING)
            row[col] = _value(col, e)
            ci[col] = with_interval(e, COLUMN_FORMAT[col], SCALE[col])
        row |= {"run": m.key, "thinking_capable": m.thinking_capable, "params_b": m.params_b, "active_params_b": paper.model_size(m, paper.ACTIVE), "judged": int(len(m.question)) if m.labels is not None else 0}
        for col in TABLE1:
            e = r.table1.get(col, paper.MISSING)
            row[f"{col} low"], row[f"{col} high"] = SCALE[col] * e.low, SCALE[col] * e.high
            row[f"{col} n"] = e.n
        rows.append(row)
        ci_rows.append(ci)
    marks = tuple(r.model.thinking_capable for r in t.rows)
    level = f"{t.level:.0%}"
    note = (
        "As printed in the paper (Table 1): the jury's labels as percentages of judged trials (trials with ≥1 swap), "
        "Flag. (M.E.) over the entity substitute ('Mandela effect') alone, Ign. when no label is true, switch aware to "
        "one decimal; Δsurp./Δent.: mean rise in surprisal/entropy over the post-swap windows vs the clean answer, "
        f"over every trial that has one; sorted by flagged. {THINK_NOTE}"
    )
    ci_note = (
        f"Each cell: the estimate [{level} interval], a percentile cluster bootstrap that resamples questions "
        f"({t.B} replicates); the CSV (table1.csv) has the unrounded values and bounds."
    )
    return (
        Section("table1", "Table 1 — main sweep results, as printed in the paper (sorted by flagged)", pd.DataFrame(rows), ["Model", *TABLE1],
                note, formats=COLUMN_FORMAT, marks=marks),
        Section("table1_ci", f"Table 1 with {level} intervals (questions resampled)", pd.DataFrame(ci_rows), ["Model", *TABLE1], ci_note, marks=marks),
    )  # fmt: skip


T2_COLUMNS = ("Flag. entity", "Flag. neutral", "Flag. Δ", "Derail. entity", "Derail. neutral", "Derail. Δ")


def _t2_cells(ent: Mapping[str, Estimate], neu: Mapping[str, Estimate], diff: Mapping[str, Estimate]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One row of Table 2 (values; Δ the difference of the rounded percentages, as printed) and its
    interval twin (Δ the exact difference in points)."""
    row: dict[str, Any] = {}
    ci: dict[str, Any] = {}
    for label, short in (("flagged", "Flag."), ("derailed", "Derail.")):
        e, n, d = ent.get(label, paper.MISSING), neu.get(label, paper.MISSING), diff.get(label, paper.MISSING)
        ev, nv = _pct_value(e), _pct_value(n)
        row[f"{short} entity"], row[f"{short} neutral"] = ev, nv
        row[f"{short} Δ"] = math.nan if math.isnan(ev) or math.isnan(nv) else int(round(ev)) - int(round(nv))
        row[f"{short} Δ exact"] = _scaled(d, 100.0)
        row[f"{short} Δ low"], row[f"{short} Δ high"] = 100.0 * d.low, 100.0 * d.high
        row[f"{short} entity n"], row[f"{short} neutral n"] = e.n, n.n
        ci[f"{short} entity"] = with_interval(e, pct0, 100.0)
        ci[f"{short} neutral"] = with_interval(n, pct0, 100.0)
        ci[f"{short} Δ"] = with_interval(d, signed1, 100.0)
    return row, ci


T2_FORMAT: Mapping[str, Callable[[float], str]] = {c: (signed_int if c.endswith("Δ") else pct0) for c in T2_COLUMNS}


def table2_section(t: PaperTables) -> tuple[Section, Section]:
    """Table 2: entity − neutral per label, in Table 1's order, and the pooled row from summed counts."""
    rows, ci_rows = [], []
    for r in t.rows:
        row, ci = _t2_cells(r.entity, r.neutral, r.entity_minus_neutral)
        rows.append({"Model": r.model.display, **row})
        ci_rows.append({"Model": r.model.display, **ci})
    row, ci = _t2_cells(t.pooled_entity, t.pooled_neutral, t.pooled_diff)
    rows.append({"Model": POOLED, **row})
    ci_rows.append({"Model": POOLED, **ci})
    marks = (*(r.model.thinking_capable for r in t.rows), False)
    note = (
        "As in the paper (Table 2, App. B): flagged and derailed among the entity trials ('Mandela effect') and among "
        "the 100 neutral words, and their difference in points (the difference of the rounded percentages, as printed); "
        f"the pooled row divides counts summed over models. {THINK_NOTE}"
    )
    ci_note = f"Each cell: the estimate [{t.level:.0%} interval], questions resampled; Δ here is the exact difference in points, both conditions resampled by the same questions."
    return (
        Section("table2", "Table 2 — entity vs neutral substitutes (flagged, derailed)", pd.DataFrame(rows), ["Model", *T2_COLUMNS], note,
                formats=T2_FORMAT, marks=marks),
        Section("table2_ci", f"Table 2 with {t.level:.0%} intervals", pd.DataFrame(ci_rows), ["Model", *T2_COLUMNS], ci_note, marks=marks),
    )  # fmt: skip


UNTOUCHED = "Untouched (%)"


def untouched_section(t: PaperTables) -> Section:
    """App. D: the share of each model's trials in which the trigger never fired (not judged)."""
    rows = []
    for r in t.rows:
        e = r.untouched
        rows.append({
            "Model": r.model.display, UNTOUCHED: _pct_value(e), f"{t.level:.0%} interval": with_interval(e, pct1, 100.0),
            "Trials": e.n, "Untouched": int(e.k), "low": 100.0 * e.low, "high": 100.0 * e.high,
        })  # fmt: skip
    return Section(
        "untouched", "Appendix D — untouched trials (the trigger never fired)", pd.DataFrame(rows),
        ["Model", UNTOUCHED, f"{t.level:.0%} interval", "Trials", "Untouched"],
        "Trials whose reply never emitted the trigger word: they equal the clean run and are not judged. In Table 1's order; "
        f"interval: questions resampled. {THINK_NOTE}",
        formats={UNTOUCHED: pct1}, marks=tuple(r.model.thinking_capable for r in t.rows),
    )  # fmt: skip


def claims_sections(t: PaperTables) -> list[Section]:
    """§5's claims as statistics: the pooled switch-aware rate, size against each rate, the pairs."""
    level = f"{t.level:.0%}"
    aware = t.pooled_switch_aware
    pooled = Section(
        "pooled", "Pooled switch-aware rate (§5)",
        pd.DataFrame([{"Claim": "switch aware, pooled over models (%)", "Value": with_interval(aware, pct2, 100.0), "Judged trials": aware.n,
                       "Switch aware": int(aware.k), "estimate": 100.0 * aware.value, "low": 100.0 * aware.low, "high": 100.0 * aware.high}]),
        ["Claim", "Value", "Judged trials", "Switch aware"],
        f"Every model's judged trials together (the paper: below 0.1%); {level} interval, questions resampled.",
    )  # fmt: skip
    size_rows = [
        {"Size": s.size, "Column": s.column, "Spearman ρ": s.rho, f"{level} interval": DASH if math.isnan(s.low) else f"[{signed2(s.low)}, {signed2(s.high)}]",
         "Models": s.n_models, "low": s.low, "high": s.high}
        for s in t.size
    ]  # fmt: skip
    size = Section(
        "size", "Size against each rate (§6: 'no clear correlation' with the number of parameters)", pd.DataFrame(size_rows),
        ["Size", "Column", "Spearman ρ", f"{level} interval", "Models"],
        f"Spearman's ρ of each model's size against each Table 1 column, over the models whose size the config gives (at least three); "
        f"{level} interval: models resampled ({t.B} replicates). The paper does not say which size it means, so each row names its own: "
        "total is params_b (every parameter); active is active_params_b (those read per token: a mixture of experts such as "
        "Gemma 4 26B-A4B or gpt-oss-20b reads fewer), a dense model's active size being its total. Gemma 4 E2B/E4B count by their "
        "effective size (2B/4B, their names) under active and their full parameter count under total; the paper's 'roughly 2B to 72B' "
        "(§4) counts E2B as 2B, i.e. by active size.",
        formats={"Spearman ρ": signed2},
    )  # fmt: skip
    pair_rows = [
        {"Thinking model": p.thinking.display, "Sibling": p.sibling.display, "Flag. (thinking)": _pct_value(p.thinking_rate),
         "Flag. (sibling)": _pct_value(p.sibling_rate), "Difference (points)": with_interval(p.diff, signed1, 100.0),
         "diff": 100.0 * p.diff.value, "low": 100.0 * p.diff.low, "high": 100.0 * p.diff.high}
        for p in t.pairs
    ]  # fmt: skip
    missing = "; ".join(f"{a} vs {b}" for a, b in t.pairs_missing)
    pairs = Section(
        "pairs", "Matched thinking pairs (§5, 'The thinking factor')",
        pd.DataFrame(pair_rows, columns=["Thinking model", "Sibling", "Flag. (thinking)", "Flag. (sibling)", "Difference (points)", "diff", "low", "high"]),
        ["Thinking model", "Sibling", "Flag. (thinking)", "Flag. (sibling)", "Difference (points)"],
        f"Each thinking-capable model beside its non-thinking sibling (the config's pairs): flagged as in Table 1, and the "
        f"difference with a {level} interval that resamples the same questions for both."
        + (f" Not in these runs: {missing}." if missing else "")
        + ("" if t.pairs or t.pairs_missing else " The config names no pairs (or no --config was given)."),
        formats={"Flag. (thinking)": pct0, "Flag. (sibling)": pct0},
    )  # fmt: skip
    return [pooled, size, pairs]


def paper_sections(runs: list[RunData], meta: ReportMeta | None = None, *, B: int = paper.B_DEFAULT, seed: int = 0) -> tuple[PaperTables, list[Section]]:
    """The paper's tables over ``runs`` and their sections, in the paper's order."""
    tables = paper.paper_tables([model_trials(r, meta) for r in runs], meta.pairs if meta else (), paper.Boot(B, seed))
    t1, t1_ci = table1_section(tables)
    t2, t2_ci = table2_section(tables)
    return tables, [t1, t1_ci, t2, t2_ci, untouched_section(tables), *claims_sections(tables)]
