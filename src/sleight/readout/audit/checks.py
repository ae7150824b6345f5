"""The per-variant summary and the six checks of SPEC §4.2, as pure functions of the readings.

Verdict rules (fixed; ``floor`` = 0.5 unless told):

1. **Option mass** (original): ``fail`` if the median mass is below the floor (collapse) or no mass is
   defined; ``warn`` if any item is below the floor or has no mass (prefix condition failed);
   else ``pass``.
2. **Unrestricted argmax** (original): ``fail`` if under half of the argmaxes are an option's first
   token; ``warn`` if not all are, or any is an answer letter of the quoted item; else ``pass``.
3. **Continuation** (original): ``fail`` if under half of the continuations start on task (with a
   declared option); ``warn`` if not all do; else ``pass``.
4. **Distinct first tokens** (original): ``fail`` if any item's options share a first token in
   context; ``warn`` if the boundary is not preserved for some item (no first token to compare);
   else ``pass``.
5. **Rendered ending**: ``fail`` if no context ends in whitespace and the space-appended ending
   raises the median mass by at least 0.1 (a missing separator that costs mass); ``warn`` if some
   contexts end without whitespace, or options start with whitespace after a context that already
   ends with it (lm-evaluation-harness's ``"\\n" + option`` after ``assistant``); else ``pass``.
6. **Answer stem**: checks 1-4 at the stemmed position. ``fail`` if its median mass is below the
   floor or under half of its continuations start on task; ``warn`` if any of checks 1-4 would warn
   or fail there, or the downstream metric (AUROC for a binary target, Spearman otherwise) drops by
   more than 0.05 from the original; else ``pass``; ``skipped`` without a stem.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from sleight.readout.audit.classify import ARGMAX_CLASSES, CONTINUATION_CLASSES
from sleight.readout.audit.summary import (
    MASS_FLOOR,
    AuditSummary,
    CheckOutcome,
    DownstreamMetric,
    VariantSummary,
    at_floor,
    mass_interval,
)

STEM_DROP = 0.05
SEPARATOR_GAIN = 0.1
CHANGE_MIN_ITEMS = 10
CHANGE_B = 2000


def _finite(values: Sequence[Any]) -> np.ndarray:
    arr = np.array([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))], dtype=np.float64)
    return arr


def _rate(mask: pd.Series) -> float | None:
    mask = mask.dropna()
    return float(mask.astype(bool).mean()) if len(mask) else None


def downstream(scores: Sequence[Any], targets: Sequence[Any]) -> DownstreamMetric | None:
    """Does the score rank the target? AUROC for a binary target, Spearman's rho otherwise.
    None when either is missing everywhere or the target is constant."""
    pairs = [(float(s), float(t)) for s, t in zip(scores, targets) if s is not None and t is not None and not (math.isnan(float(s)) or math.isnan(float(t)))]
    if len(pairs) < 2:
        return None
    s = np.array([p[0] for p in pairs])
    t = np.array([p[1] for p in pairs])
    if len(np.unique(t)) < 2:
        return None
    if set(np.unique(t)) <= {0.0, 1.0}:
        from sleight.stats.metrics import auroc

        return DownstreamMetric("auroc", float(auroc(s, t)), len(pairs))
    from sleight.stats.metrics import average_ranks

    rs, rt = average_ranks(s), average_ranks(t)
    if rs.std() == 0:
        return DownstreamMetric("spearman", 0.0, len(pairs))
    return DownstreamMetric("spearman", float(np.corrcoef(rs, rt)[0, 1]), len(pairs))


def _spearman(s: np.ndarray, t: np.ndarray) -> Any:
    """Spearman's rho on the last axis (0 when the scores are constant), rows batched."""
    from sleight.stats.metrics import average_ranks

    def rho(a: np.ndarray, b: np.ndarray) -> float:
        ra, rb = average_ranks(a), average_ranks(b)
        return 0.0 if ra.std() == 0 or rb.std() == 0 else float(np.corrcoef(ra, rb)[0, 1])

    if np.ndim(s) == 1:
        return rho(s, t)
    return np.array([rho(a, b) for a, b in zip(s, t)])


@dataclass(frozen=True)
class DownstreamChange:
    """The downstream metric at one variant minus at another on the items scored at both (check 6),
    as :func:`downstream_change` computes it. ``too_few``: under :data:`CHANGE_MIN_ITEMS` items, no
    interval (``low``/``high`` None, ``B``/``level`` absent); its JSON object keeps the keys the
    evidence has always shown, in their order."""

    metric: str
    n: int
    estimate_a: float
    estimate_b: float
    diff: float
    too_few: bool
    low: float | None
    high: float | None
    B: int | None = None
    level: float | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "metric": self.metric, "n": self.n, "estimate_a": self.estimate_a, "estimate_b": self.estimate_b,
            "diff": self.diff, "too_few": self.too_few, "low": self.low, "high": self.high,
        }
        if not self.too_few:
            out.update(B=self.B, level=self.level)
        return out


def downstream_change(readings: pd.DataFrame, a: str = "stem", b: str = "original") -> DownstreamChange | None:
    """The downstream metric at variant ``a`` minus at ``b`` on the items scored at both, with its
    paired bootstrap interval; ``too_few`` (no interval) under :data:`CHANGE_MIN_ITEMS` items.
    None when the metric is undefined there (no target, or a constant one)."""
    from sleight.stats import auroc, paired_bootstrap

    def scored(v: str) -> pd.DataFrame:
        df = _live(readings, v)
        df = df[df["score"].notna() & df["target"].notna()]
        return df.drop_duplicates("item_id").set_index("item_id")

    da, db = scored(a), scored(b)
    common = [i for i in db.index if i in da.index]
    y = db.loc[common, "target"].to_numpy(dtype=np.float64)
    if len(common) < 2 or len(np.unique(y)) < 2:
        return None
    sa, sb = da.loc[common, "score"].to_numpy(dtype=np.float64), db.loc[common, "score"].to_numpy(dtype=np.float64)
    binary = set(np.unique(y)) <= {0.0, 1.0}
    metric, fn = ("auroc", auroc) if binary else ("spearman", _spearman)
    est_a, est_b = float(fn(sa, y)), float(fn(sb, y))
    if len(common) < CHANGE_MIN_ITEMS:
        return DownstreamChange(metric, len(common), est_a, est_b, est_a - est_b, too_few=True, low=None, high=None)
    from sleight.stats import gathered

    stat: Any = fn if binary else gathered(_spearman)
    pb = paired_bootstrap(stat, (sa, y), (sb, y), B=CHANGE_B, seed=0)
    return DownstreamChange(metric, len(common), est_a, est_b, est_a - est_b, too_few=False, low=pb.ci_diff.low, high=pb.ci_diff.high, B=CHANGE_B, level=pb.level)


def summarise_variant(df: pd.DataFrame, floor: float = MASS_FLOOR) -> VariantSummary:
    """Numbers for one variant's rows (skipped rows counted, not measured)."""
    live = df[~df["skipped"].astype(bool)]
    mass = _finite(live["option_mass"].tolist())
    bounds = [mass_interval({str(k): v for k, v in r.items()}) for r in live.to_dict("records")]
    interval = [(lo, hi) for (lo, hi), m in zip(bounds, live["option_mass"].tolist()) if lo is not None and hi is not None and not _is_num(m)]
    sides = [at_floor(lo, hi, floor) for lo, hi in interval]
    counts = VariantSummary(
        n_items=int(len(df)),
        n_measured=int(len(live)),
        n_skipped=int(len(df) - len(live)),
        skip_reasons=tuple(sorted(set(df.loc[df["skipped"].astype(bool), "skip_reason"].dropna()))),
    )
    if not len(live):
        return counts
    return replace(
        counts,
        mass_median=float(np.median(mass)) if len(mass) else None,
        mass_min=float(mass.min()) if len(mass) else None,
        mass_below_floor=int((mass < floor).sum()) + sides.count(False),
        mass_null=int(live["option_mass"].isna().sum()) - len(interval),
        mass_isolated_median=float(np.median(_finite(live["option_mass_isolated"].tolist()))) if len(_finite(live["option_mass_isolated"].tolist())) else None,
        mass_divergent_median=float(np.median(_finite(live["option_mass_divergent"].tolist()))) if len(_finite(live["option_mass_divergent"].tolist())) else None,
        boundary_preserved_rate=_rate(live["boundary_preserved"]),
        answer_letter_rate=float((live["argmax_class"] == "answer_letter").mean()),
        option_argmax_rate=float((live["argmax_class"] == "option").mean()),
        distinct_rate=_rate(live["first_tokens_distinct"]),
        on_task_rate=_rate(live["continuation_on_task"]),
        argmax_classes={c: int((live["argmax_class"] == c).sum()) for c in ARGMAX_CLASSES},
        continuation_classes={c: int((live["continuation_class"] == c).sum()) for c in CONTINUATION_CLASSES},
        answer_then_grid=int(live["answer_then_grid"].fillna(False).astype(bool).sum()),
        grid_anywhere=int(live["grid_anywhere"].fillna(False).astype(bool).sum()),
        ends_with_whitespace_rate=_rate(live["ends_with_whitespace"]),
        score_mean=float(np.mean(_finite(live["score"].tolist()))) if len(_finite(live["score"].tolist())) else None,
        downstream=downstream(live["score"].tolist(), live["target"].tolist()),
        mass_interval=len(interval) or None,
        mass_undecided=sides.count(None) or None,
    )


def _is_num(v: Any) -> bool:
    return v is not None and bool(np.isfinite(v))


def summarise(readings: pd.DataFrame, floor: float = MASS_FLOOR) -> AuditSummary:
    """The floor and each variant's numbers, in the readings' variant order."""
    order = list(dict.fromkeys(readings["variant"].tolist()))
    return AuditSummary(floor=floor, variants={v: summarise_variant(readings[readings["variant"] == v], floor) for v in order})


class TopToken(TypedDict):
    """One of the top next tokens at the scored position: a ``top_tokens`` struct of readings.parquet
    (:data:`sleight.readout.audit.measure.TOP_TOKEN_TYPE`), shown as it is."""

    id: int
    token: str
    prob: float


@dataclass(frozen=True)
class ExampleOption:
    """One option of a worked example: its first token in context and that token's probability."""

    option: str
    first_token_id: int | None
    prob: float | None

    def as_json(self) -> dict[str, object]:
        return {"option": self.option, "first_token_id": self.first_token_id, "prob": self.prob}


@dataclass(frozen=True)
class WorkedExample:
    """One reading shown under a check (:func:`example_of`): the rendered ending, the top next
    tokens, the options' mass, the argmax and the continuation; values as the readings hold them.
    ``original_ending``: check 5 shows the original's ending beside the space variant's."""

    item_id: str
    variant: str
    ending: str | None
    top_tokens: tuple[TopToken, ...]
    options: tuple[ExampleOption, ...]
    option_mass: float | None
    boundary_preserved: bool | None
    argmax_token: str | None
    argmax_class: str | None
    continuation: str | None
    continuation_class: str | None
    original_ending: str | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "item_id": self.item_id, "variant": self.variant, "ending": self.ending,
            "top_tokens": [dict(t) for t in self.top_tokens], "options": [o.as_json() for o in self.options],
            "option_mass": self.option_mass, "boundary_preserved": self.boundary_preserved,
            "argmax_token": self.argmax_token, "argmax_class": self.argmax_class,
            "continuation": self.continuation, "continuation_class": self.continuation_class,
        }
        if self.original_ending is not None:
            out["original_ending"] = self.original_ending
        return out


@dataclass(frozen=True)
class SubCheck:
    """One of checks 1-4 repeated at the answer stem (check 6): its verdict and why."""

    check: str  # mass | argmax | continuation | distinct
    verdict: str
    reason: str

    def as_json(self) -> dict[str, object]:
        return {"check": self.check, "verdict": self.verdict, "reason": self.reason}


# What a check's evidence holds: numbers, flags, class counts, and the downstream records (shown as JSON).
EvidenceValue = float | int | bool | str | Mapping[str, int] | DownstreamMetric | DownstreamChange | None


def evidence_json(value: EvidenceValue) -> object:
    """An evidence value as the reports show it: a record as its JSON object."""
    return value.as_json() if isinstance(value, (DownstreamMetric, DownstreamChange)) else value


@dataclass
class Check:
    """One check of the audit: a verdict, the numbers behind it, and one worked example."""

    number: int
    name: str
    verdict: str  # pass | warn | fail | skipped
    reason: str
    evidence: dict[str, EvidenceValue]
    example: WorkedExample | None = None
    sub: list[SubCheck] = field(default_factory=list)

    def shown_evidence(self) -> dict[str, object]:
        """The evidence as the reports show it (records as their JSON objects)."""
        return {k: evidence_json(v) for k, v in self.evidence.items()}

    def as_dict(self) -> dict[str, object]:
        return {
            "number": self.number, "name": self.name, "verdict": self.verdict, "reason": self.reason,
            "evidence": self.shown_evidence(), "example": self.example.as_json() if self.example is not None else None,
            "sub": [s.as_json() for s in self.sub],
        }

    def outcome(self) -> CheckOutcome:
        """The verdict as summary.json records it."""
        return CheckOutcome(self.number, self.name, self.verdict, self.reason)


# the readings' columns a worked example shows as they are, under their own names
SHOWN_COLUMNS = ("item_id", "variant", "option_mass", "boundary_preserved", "argmax_token", "argmax_class", "continuation", "continuation_class")


def example_of(row: pd.Series | None) -> WorkedExample | None:
    """A worked example: the rendered ending, the top next tokens, the options' mass, the continuation."""
    if row is None:
        return None
    opts = list(row["options"]) if row["options"] is not None else []
    firsts = list(row["option_first_probs"]) if row["option_first_probs"] is not None else [None] * len(opts)
    ids = list(row["first_token_ids"]) if row["first_token_ids"] is not None else [None] * len(opts)
    return WorkedExample(
        ending=row["context_tail"],
        top_tokens=tuple(TopToken(id=t["id"], token=t["token"], prob=t["prob"]) for t in (row["top_tokens"] if row["top_tokens"] is not None else [])),
        options=tuple(ExampleOption(o, None if i is None or (isinstance(i, float) and math.isnan(i)) else int(i), p) for o, i, p in zip(opts, ids, firsts)),
        **{k: row[k] for k in SHOWN_COLUMNS},
    )


def _live(readings: pd.DataFrame, variant: str) -> pd.DataFrame:
    df = readings[(readings["variant"] == variant)]
    return df[~df["skipped"].astype(bool)]


def _first(df: pd.DataFrame, mask: pd.Series | None = None) -> pd.Series | None:
    sel = df if mask is None else df[mask.fillna(False).astype(bool)]
    return sel.iloc[0] if len(sel) else (df.iloc[0] if len(df) else None)


def _mass_check(s: VariantSummary, floor: float) -> tuple[str, str]:
    median = s.mass_median
    if median is None:
        return "fail", "no option mass is defined (the prefix condition fails everywhere)"
    if median < floor:
        return "fail", f"median option mass {median:.3f} is below the floor {floor} (collapse)"
    undecided = f", {s.mass_undecided} whose interval holds the floor (options outside a server's listed top-k)" if s.mass_undecided else ""
    if s.mass_below_floor or s.mass_null or s.mass_undecided:
        return "warn", f"{s.mass_below_floor} item(s) below the floor, {s.mass_null} without a defined mass{undecided}"
    return "pass", f"median option mass {median:.3f}, none below the floor"


def _argmax_check(s: VariantSummary) -> tuple[str, str]:
    opt, letter = s.option_argmax_rate or 0.0, s.answer_letter_rate or 0.0  # both set wherever a row was measured
    msg = f"argmax is an option for {opt:.0%} of items, an answer letter for {letter:.0%}"
    if opt < 0.5:
        return "fail", msg
    if opt < 1.0 or letter > 0:
        return "warn", msg
    return "pass", msg


def _continuation_check(s: VariantSummary) -> tuple[str, str]:
    rate = s.on_task_rate or 0.0
    classes = ", ".join(f"{k} {v}" for k, v in (s.continuation_classes or {}).items() if v)
    msg = f"{rate:.0%} of continuations start with an option ({classes})"
    if rate < 0.5:
        return "fail", msg
    if rate < 1.0:
        return "warn", msg
    return "pass", msg


def _distinct_check(s: VariantSummary) -> tuple[str, str]:
    rate, kept = s.distinct_rate, s.boundary_preserved_rate
    if rate is not None and rate < 1.0:
        return "fail", f"options share a first token in context for {1 - rate:.0%} of items (the mass counts it once)"
    if kept is None or kept < 1.0:
        return "warn", f"boundary not preserved for {1 - (kept or 0):.0%} of items: no first token to compare there"
    return "pass", "every option has its own first token in context"


def run_checks(readings: pd.DataFrame, summary: AuditSummary | None = None, floor: float = MASS_FLOOR) -> list[Check]:
    """The six checks, each with a verdict, evidence and a worked example."""
    summary = summary or summarise(readings, floor)
    orig = _live(readings, "original")
    so = summary.variant("original")
    checks: list[Check] = []
    if not len(orig):
        return [Check(k, name, "skipped", "no measured original rows", {}) for k, name in enumerate(CHECK_NAMES, 1)]

    verdict, reason = _mass_check(so, floor)
    worst = orig.sort_values("option_mass", na_position="first").iloc[0]
    evidence: dict[str, EvidenceValue] = {
        "n_measured": so.n_measured,
        "mass_median": so.mass_median,
        "mass_min": so.mass_min,
        "mass_below_floor": so.mass_below_floor,
        "mass_null": so.mass_null,
        "mass_isolated_median": so.mass_isolated_median,
        "mass_divergent_median": so.mass_divergent_median,
    }
    checks.append(Check(1, CHECK_NAMES[0], verdict, reason, evidence, example_of(worst)))

    verdict, reason = _argmax_check(so)
    evidence = {"option_argmax_rate": so.option_argmax_rate, "answer_letter_rate": so.answer_letter_rate, "argmax_classes": _plain(so.argmax_classes)}
    checks.append(Check(2, CHECK_NAMES[1], verdict, reason, evidence, example_of(_first(orig, orig["argmax_class"] != "option"))))

    verdict, reason = _continuation_check(so)
    evidence = {"on_task_rate": so.on_task_rate, "continuation_classes": _plain(so.continuation_classes), "answer_then_grid": so.answer_then_grid, "grid_anywhere": so.grid_anywhere}
    checks.append(Check(3, CHECK_NAMES[2], verdict, reason, evidence, example_of(_first(orig, ~orig["continuation_on_task"].fillna(False).astype(bool)))))

    verdict, reason = _distinct_check(so)
    evidence = {"distinct_rate": so.distinct_rate, "boundary_preserved_rate": so.boundary_preserved_rate}
    checks.append(Check(4, CHECK_NAMES[3], verdict, reason, evidence, example_of(_first(orig, orig["first_tokens_distinct"] == False))))  # noqa: E712

    checks.append(_ending_check(readings, summary, orig))
    checks.append(_stem_check(readings, summary, floor))
    return checks


CHECK_NAMES = (
    "Option mass at the scored position",
    "Unrestricted argmax",
    "Unrestricted continuation",
    "First tokens distinct in context",
    "Rendered ending (separator)",
    "Answer stem",
)


def _plain(d: Mapping[str, int] | None) -> dict[str, int] | None:
    """A summary's class counts as the evidence shows them: a plain dict."""
    return dict(d) if d is not None else None


def _ending_check(readings: pd.DataFrame, summary: AuditSummary, orig: pd.DataFrame) -> Check:
    so, ss = summary.variant("original"), summary.variant("space")
    ws_rate = so.ends_with_whitespace_rate or 0.0
    opts_ws = orig["options"].apply(lambda o: o is not None and any(x[:1].isspace() for x in o))
    double = bool((orig["ends_with_whitespace"].fillna(False).astype(bool) & opts_ws).any())
    newline_opts = bool(orig["options"].apply(lambda o: o is not None and any(x.startswith("\n") for x in o)).any())
    evidence: dict[str, EvidenceValue] = {
        "ends_with_whitespace_rate": ws_rate,
        "original_mass_median": so.mass_median,
        "space_mass_median": ss.mass_median,
        "space_mass_null": ss.mass_null,
        "options_start_with_whitespace": bool(opts_ws.any()),
        "options_start_with_newline": newline_opts,
    }
    gain = None
    if so.mass_median is not None and ss.mass_median is not None:
        gain = ss.mass_median - so.mass_median
    evidence["space_gain"] = gain
    if ws_rate == 0 and gain is not None and gain >= SEPARATOR_GAIN:
        verdict, reason = "fail", f"no context ends in whitespace and appending a space raises the median mass by {gain:.3f}"
    elif ws_rate < 1.0:
        verdict, reason = "warn", f"{1 - ws_rate:.0%} of contexts end without whitespace (a separator may be missing)"
    elif double or newline_opts:
        verdict, reason = "warn", "options start with whitespace after a context that ends with it (e.g. lm-evaluation-harness's \"\\n\" + option after 'assistant')"
    else:
        verdict, reason = "pass", "every context ends with whitespace; options carry no extra separator"
    space = _live(readings, "space")
    ex = example_of(space.iloc[0]) if len(space) else example_of(orig.iloc[0])
    if ex is not None and len(orig):
        ex = replace(ex, original_ending=orig.iloc[0]["context_tail"])
    return Check(5, CHECK_NAMES[4], verdict, reason, evidence, ex)


def _stem_check(readings: pd.DataFrame, summary: AuditSummary, floor: float) -> Check:
    stem = _live(readings, "stem")
    so, st = summary.variant("original"), summary.variant("stem")
    if not len(stem):
        reasons = st.skip_reasons or ("no stem variant in this run",)
        return Check(6, CHECK_NAMES[5], "skipped", "; ".join(reasons), {})
    sub: list[SubCheck] = []
    for name, fn in (("mass", lambda: _mass_check(st, floor)), ("argmax", lambda: _argmax_check(st)), ("continuation", lambda: _continuation_check(st)), ("distinct", lambda: _distinct_check(st))):
        v, r = fn()
        sub.append(SubCheck(name, v, r))
    change = downstream_change(readings)
    evidence: dict[str, EvidenceValue] = {
        "original_mass_median": so.mass_median,
        "stem_mass_median": st.mass_median,
        "stem_mass_below_floor": st.mass_below_floor,
        "original_answer_letter_rate": so.answer_letter_rate,
        "stem_answer_letter_rate": st.answer_letter_rate,
        "original_option_argmax_rate": so.option_argmax_rate,
        "stem_option_argmax_rate": st.option_argmax_rate,
        "original_on_task_rate": so.on_task_rate,
        "stem_on_task_rate": st.on_task_rate,
        "downstream_original": so.downstream,
        "downstream_stem": st.downstream,
        "downstream_change": change,
    }
    median = st.mass_median
    on_task = st.on_task_rate or 0.0
    drop = change is not None and not change.too_few and change.diff < -STEM_DROP
    if median is None or median < floor or on_task < 0.5:
        verdict = "fail"
        reason = f"at the stem: median mass {median if median is None else round(median, 3)}, {on_task:.0%} of continuations on task"
    elif any(s.verdict != "pass" for s in sub) or drop:
        verdict = "warn"
        reason = "the stem repairs the readout only partly" + (f"; {_change_text(change)}" if drop and change is not None else "")
    else:
        verdict = "pass"
        reason = f"at the stem: median mass {median:.3f}, every argmax an option, continuations on task"
    if change is not None and change.too_few and verdict != "fail":
        reason += f"; {_change_text(change)}"
    worst = stem.sort_values("option_mass", na_position="first").iloc[0]
    return Check(6, CHECK_NAMES[5], verdict, reason, evidence, example_of(worst), sub)


def _change_text(c: DownstreamChange) -> str:
    """The downstream change in words, with its interval or the reason there is none."""
    head = f"downstream {c.metric} {c.estimate_b:.3f} -> {c.estimate_a:.3f} on {c.n} items"
    if c.too_few:
        return f"{head}: too few items for an interval (at least {CHANGE_MIN_ITEMS}), not counted as a drop"
    return f"{head} (change {c.diff:+.3f}, {c.level:.0%} paired bootstrap interval [{c.low:+.3f}, {c.high:+.3f}])"


@dataclass(frozen=True)
class VariantRow:
    """One variant's row of the reports' comparison table (median mass, letter rate, floor); field
    names are the table's column keys (:data:`sleight.readout.audit.report.VARIANT_COLUMNS`)."""

    variant: str
    measured: int
    skipped: int
    mass_median: float | None
    mass_min: float | None
    below_floor: int | None
    mass_null: int | None
    mass_interval: int | None
    mass_undecided: int | None
    letter_rate: float | None
    option_argmax_rate: float | None
    on_task_rate: float | None
    score_mean: float | None
    downstream: str | None


def variant_table(summary: AuditSummary) -> list[VariantRow]:
    """One row per variant: the comparison table of the report (median mass, letter rate, floor)."""
    rows = []
    for v, s in summary.variants.items():
        d = s.downstream
        rows.append(
            VariantRow(
                variant=v,
                measured=s.n_measured,
                skipped=s.n_skipped,
                mass_median=s.mass_median,
                mass_min=s.mass_min,
                below_floor=s.mass_below_floor,
                mass_null=s.mass_null,
                mass_interval=s.mass_interval,
                mass_undecided=s.mass_undecided,
                letter_rate=s.answer_letter_rate,
                option_argmax_rate=s.option_argmax_rate,
                on_task_rate=s.on_task_rate,
                score_mean=s.score_mean,
                downstream=f"{d.metric} {d.value:.3f}" if d else None,
            )
        )
    return rows
