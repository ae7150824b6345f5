"""Human labels for readout continuations, and the agreement tables of the paper's Tables 8 and 16.

People label the greedy unrestricted continuations an audit records (``readings.parquet``, one per
(item, variant)) with the readout judge's classes (:data:`sleight.readout.audit.judge.CLASSES`;
``instruction`` is offered for substituted variants only, as the judge's ballot offers it). The
labelling page (:mod:`sleight.readout.audit.labels_page`) posts each label as it is saved; it is
committed at once to ``AUDIT/human_labels.parquet/`` through the jury's keyed store
(:mod:`sleight.jury.store`: one atomic Parquet part per save, the newest row per key wins), keyed by
(item_id, variant, labeller). A killed server loses nothing saved; a page opened again resumes with
the labeller's stored labels; several labellers label side by side under their own names.
``--sample N`` draws a seeded sample stratified by variant group and the jury's class
(:func:`draw_labels_sample`, :mod:`sleight.jury.sample` as ``tamper gold`` draws) into
``AUDIT/labels_sample.json``.

Agreement (:func:`agreement_table`, pure): Fleiss' κ between the people over the continuations every
labeller labelled, Cohen's κ for every pair of people, and Cohen's κ of each juror, of the jury's
majority and of the rule classes against the people's majority (the jury's rule,
:func:`sleight.jury.verdict.majority`, over the people who labelled that continuation). Every κ is the
project's own (:func:`sleight.stats.fleiss_kappa`, :func:`sleight.stats.cohen_kappa` through
:func:`sleight.jury.verdict.agreement`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pandas as pd
import pyarrow as pa

from sleight import rundir
from sleight.errors import UserError
from sleight.jury import store
from sleight.jury.sample import SampleStore, draw, read_labels_file
from sleight.jury.verdict import agreement, majority
from sleight.readout.audit import judge
from sleight.stats import fleiss_kappa

LABELS_DIR = "human_labels.parquet"
SAMPLE_FILE = "labels_sample.json"
SAMPLE_FORMAT = "sleight-readout-labels-sample"
AGREEMENT_MD = "human_agreement.md"
AGREEMENT_CSV = "human_agreement.csv"
EXPORT_FORMAT = "sleight-readout-labels"
EXPORT_VERSION = 1
SAMPLE = SampleStore(SAMPLE_FILE, "continuations", ("item_id", "variant"), "sleight readout labels {folder} --sample N")
LABEL_KEY: tuple[str, ...] = ("item_id", "variant", "labeller")
LABEL_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("variant", pa.string()),
        ("labeller", pa.string()),
        ("class", pa.string()),
        ("labelled_at", pa.string()),
    ]
)
AGREEMENT_COLUMNS = ["variants", "rater", "measure", "n", "agreement %", "κ"]

# One stored human label, as LABEL_SCHEMA's row (committed to the store as it is); ``class`` is a
# keyword, hence the functional form.
Label = TypedDict("Label", {"item_id": str, "variant": str, "labeller": str, "class": str, "labelled_at": str})


class LabelsExport(TypedDict):
    """``--export``'s JSON object: the stored labels of one audit, which :func:`read_export` takes back."""

    format: str
    version: int
    audit: str
    exported_at: str
    labels: list[Label]


# One row of the κ table (AGREEMENT_COLUMNS, in order): it goes to the DataFrame, the CSV and the page as it is.
AgreementRow = TypedDict("AgreementRow", {"variants": str, "rater": str, "measure": str, "n": int, "agreement %": float, "κ": float})
GROUPS: tuple[str, ...] = ("all", "substituted", "deleted", "other")
_LABELLER = re.compile(r"^[^\x00-\x1f\x7f]{1,64}$")


def group_of(variant: str) -> str:
    """``substituted``, ``deleted`` (the judge's two kinds), or ``other`` (original, space, stem, fenced)."""
    if variant.startswith("substituted:"):
        return "substituted"
    return "deleted" if variant.startswith("deleted_") else "other"


def class_options(variant: str) -> list[str]:
    """The classes a person is offered for one continuation: the readout judge's ballot for it."""
    return [str(v) for v in judge.ballot_for(variant).fields[0].values]


def check_labeller(name: str) -> str:
    """A labeller's name, stripped: 1-64 printable characters."""
    name = str(name).strip()
    if not _LABELLER.match(name):
        raise UserError(f"labeller name {name!r} must be 1 to 64 printable characters")
    return name


# -- what is labelled --------------------------------------------------------------------------------
def targets(out_dir: Path, variants: Sequence[str] | None = None) -> pd.DataFrame:
    """The audit's measured continuations to label (``variants`` restricts them; ``judged`` names the
    judge's variants), with their offered classes."""
    out_dir = Path(out_dir)
    path = out_dir / "readings.parquet"
    if not path.is_file():
        raise UserError(f"{out_dir} holds no finished audit (no readings.parquet); run 'sleight readout audit --out {out_dir}' first")
    cols = ["item_id", "variant", "skipped", "context", "continuation", "continuation_class", "options"]
    df = pd.read_parquet(path, columns=cols)
    df = df[~df["skipped"].fillna(False).astype(bool) & df["continuation"].notna()]
    if variants:
        wanted = set(variants)
        keep = df["variant"].map(lambda v: v in wanted or ("judged" in wanted and judge.judged_variant(str(v))))
        unknown = sorted(w for w in wanted if w != "judged" and w not in set(df["variant"]))
        if unknown:
            raise UserError(f"the audit in {out_dir} has no measured continuations of variant(s) {', '.join(unknown)} (it has {', '.join(dict.fromkeys(df['variant']))})")
        df = df[keep]
    if not len(df):
        raise UserError(f"the audit in {out_dir} has no measured continuations to label")
    df = df.drop(columns=["skipped"]).reset_index(drop=True)
    df["class_options"] = [class_options(str(v)) for v in df["variant"]]
    return df


def stratum_of(variant: str, jury_class: Any, judged: bool) -> str:
    """A continuation's stratum: its variant group, and for the judge's variants of a judged audit
    the jury's majority class (``none`` without one)."""
    group = group_of(variant)
    if not judged or group == "other":
        return group
    return f"{group} jury={'none' if jury_class is None or pd.isna(jury_class) else jury_class}"


def draw_labels_sample(targets_df: pd.DataFrame, verdicts: pd.DataFrame | None, n: int, seed: int) -> pd.DataFrame:
    """``n`` continuations stratified by :func:`stratum_of` (seeded; every stratum gets one while
    ``n`` allows, the rest in proportion): item_id, variant, stratum."""
    if n < 1:
        raise UserError(f"--sample must be at least 1 (got {n})")
    df = targets_df[["item_id", "variant"]].copy()
    jury: dict[tuple[str, str], Any] = {}
    if verdicts is not None:
        jury = {(str(r["item_id"]), str(r["variant"])): r["jury_class"] for r in verdicts.to_dict("records")}
    df["stratum"] = [stratum_of(str(v), jury.get((str(i), str(v))), verdicts is not None) for i, v in zip(df["item_id"], df["variant"])]
    return draw(df, n, seed)


def write_labels_sample(out_dir: Path, sample: pd.DataFrame, *, seed: int, requested: int) -> Path:
    return SAMPLE.write(out_dir, sample, header={"format": SAMPLE_FORMAT, "version": EXPORT_VERSION}, seed=seed, requested=requested)


def load_labels_sample(out_dir: Path) -> list[tuple[str, str]]:
    """The drawn continuations of an audit, ``[]`` when none were drawn."""
    return SAMPLE.load(out_dir)


# -- storage -------------------------------------------------------------------------------------------
def load_labels(out_dir: Path, *, repair: bool = False) -> pd.DataFrame:
    """One row per (item, variant, labeller): the newest label saved."""
    hint = f"run 'sleight readout labels {out_dir}' again to set the damaged part aside (its labels are then lost)"
    return store.load(Path(out_dir) / LABELS_DIR, LABEL_SCHEMA, LABEL_KEY, repair=repair, hint=hint)


def compact_labels(out_dir: Path) -> int:
    """Rewrite the label folder with one row per key; the superseded labels dropped."""
    return store.compact(Path(out_dir) / LABELS_DIR, LABEL_SCHEMA, LABEL_KEY)


def check_label(row: Mapping[str, object], offered: Mapping[tuple[str, str], Sequence[str]]) -> Label:
    """One label, checked against the continuations on offer: a one-line error for anything else."""
    item, variant, cls = row.get("item_id"), row.get("variant"), row.get("class")
    if not isinstance(item, str) or not isinstance(variant, str):
        raise UserError("a label needs an item_id and a variant")
    if (item, variant) not in offered:
        raise UserError(f"({item}, {variant}) is not a continuation of this audit on offer for labelling")
    if cls not in offered[(item, variant)]:
        raise UserError(f"class {cls!r} is not offered for ({item}, {variant}) (offered: {', '.join(offered[(item, variant)])})")
    at = row.get("labelled_at")
    return Label(
        {
            "item_id": item,
            "variant": variant,
            "labeller": check_labeller(str(row.get("labeller", ""))),
            "class": str(cls),  # one of the offered class names
            "labelled_at": at if isinstance(at, str) and at else rundir.now(),
        }
    )


def save_labels(out_dir: Path, rows: Iterable[Mapping[str, object]], offered: Mapping[tuple[str, str], Sequence[str]]) -> int:
    """Check and commit labels as one atomic part; returns how many."""
    clean = [check_label(r, offered) for r in rows]
    store.append(Path(out_dir) / LABELS_DIR, LABEL_SCHEMA, clean)
    return len(clean)


def offered_of(targets_df: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    return {(str(r["item_id"]), str(r["variant"])): list(r["class_options"]) for r in targets_df.to_dict("records")}


def export_obj(labels: pd.DataFrame, audit: str) -> LabelsExport:
    """The stored labels as a JSON object that :func:`read_export` takes back."""
    rows = [
        Label({"item_id": r["item_id"], "variant": r["variant"], "labeller": r["labeller"], "class": r["class"], "labelled_at": r["labelled_at"]})
        for r in labels.to_dict("records")
    ]
    return {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "audit": audit, "exported_at": rundir.now(), "labels": rows}


def read_export(path: Path) -> list[dict[str, object]]:
    """The labels of an exported file (checked against the audit when saved)."""
    path = Path(path)
    obj = read_labels_file(path, what="readout labels file", fmt=EXPORT_FORMAT, writer="--export writes")
    rows = obj.get("labels")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise UserError(f"labels file {path} has no list of labels")
    return rows


# -- agreement (pure) ------------------------------------------------------------------------------------
def people_majority(labels: pd.DataFrame) -> pd.DataFrame:
    """Per labelled continuation: the people's majority class (``None`` without one) and how many labelled it."""
    rows = []
    for (item, variant), g in labels.groupby(["item_id", "variant"], sort=True):
        cls = [str(c) for c in g["class"]]
        rows.append({"item_id": item, "variant": variant, "people": majority(cls, len(cls)), "n_people": len(cls)})
    return pd.DataFrame(rows, columns=["item_id", "variant", "people", "n_people"])


def _kappa_row(group: str, rater: str, measure: str, reference: Sequence[Any], other: Sequence[Any]) -> AgreementRow:
    a = agreement(list(reference), list(other))
    return {"variants": group, "rater": rater, "measure": measure, "n": a.n, "agreement %": 100.0 * a.accuracy if a.n else float("nan"), "κ": a.kappa}


def fleiss_between(labels: pd.DataFrame, people: Sequence[str]) -> tuple[int, float]:
    """Fleiss' κ over the continuations every one of ``people`` labelled: (n, κ)."""
    wide = labels.pivot_table(index=["item_id", "variant"], columns="labeller", values="class", aggfunc="first")
    if len(people) < 2 or any(p not in wide.columns for p in people):
        return 0, float("nan")
    full = wide[list(people)].dropna()
    if not len(full):
        return 0, float("nan")
    cats = sorted(set(full.to_numpy().ravel().tolist()))
    table = np.array([[sum(1 for v in row if v == c) for c in cats] for row in full.to_numpy().tolist()], dtype=np.float64)
    return len(full), float(fleiss_kappa(table))


def agreement_table(
    labels: pd.DataFrame,
    *,
    votes: pd.DataFrame | None = None,
    verdicts: pd.DataFrame | None = None,
    jury: Sequence[str] = (),
    rules: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The κ table: per variant group (all, substituted, deleted, other), Fleiss' κ between the people,
    Cohen's κ for each pair of people, and Cohen's κ of each juror, the jury's majority and the rule
    classes against the people's majority.

    ``labels`` holds (item_id, variant, labeller, class); ``votes`` the readout judge's votes
    (abstentions left out of a juror's ``n``), ``verdicts`` its majority (``jury_class``), ``rules``
    (item_id, variant, rule_mapped). A rater's ``n`` counts the continuations with a people's
    majority and a class from that rater; κ is NaN (—) where undefined.
    """
    people = sorted(str(p) for p in labels["labeller"].unique())
    maj = people_majority(labels)
    key = ["item_id", "variant"]
    raters: list[tuple[str, pd.DataFrame]] = []
    if votes is not None:
        cast = votes[~votes["abstained"].astype(bool)]
        for j in jury:
            mine = cast[cast["juror"] == j][[*key, "class"]].rename(columns={"class": "rater"})
            raters.append((j, mine))
    if verdicts is not None and len(jury):
        raters.append(("jury" if len(jury) > 1 else "jury (of one)", verdicts[[*key, "jury_class"]].rename(columns={"jury_class": "rater"})))
    if rules is not None:
        raters.append(("rules", rules[[*key, "rule_mapped"]].rename(columns={"rule_mapped": "rater"})))
    out: list[AgreementRow] = []
    for group in GROUPS:
        lab = labels if group == "all" else labels[labels["variant"].map(group_of) == group]
        if not len(lab):
            continue
        n, fk = fleiss_between(lab, people)
        out.append({"variants": group, "rater": f"people ({len(people)})", "measure": "Fleiss κ", "n": n, "agreement %": float("nan"), "κ": fk})
        wide = lab.pivot_table(index=key, columns="labeller", values="class", aggfunc="first")
        for a, b in itertools.combinations(people, 2):
            both = wide[[a, b]].dropna() if a in wide.columns and b in wide.columns else pd.DataFrame(columns=[a, b])
            out.append(_kappa_row(group, f"{a} · {b}", "Cohen κ", list(both[a]), list(both[b])))
        m = maj if group == "all" else maj[maj["variant"].map(group_of) == group]
        m = m[m["people"].notna()]
        for name, table in raters:
            merged = m.merge(table, on=key, how="left")
            theirs = [None if pd.isna(v) else str(v) for v in merged["rater"]]
            out.append(_kappa_row(group, name, "Cohen κ vs people's majority", list(merged["people"]), theirs))
    return pd.DataFrame(out, columns=AGREEMENT_COLUMNS)


# -- the run directory's table ---------------------------------------------------------------------------
def judge_tables(out_dir: Path) -> tuple[pd.DataFrame | None, pd.DataFrame | None, list[str]]:
    """The readout judge's votes, verdicts and jury, where ``sleight readout judge`` ran (else ``None``s)."""
    from sleight.readout.audit.judge_store import JURY_META, VERDICTS, load_judgements

    out_dir = Path(out_dir)
    if not (out_dir / JURY_META).is_file() or not (out_dir / VERDICTS).is_file():
        return None, None, []
    listed = rundir.read_json(out_dir / JURY_META).get("jury")
    jury = [str(j) for j in listed] if isinstance(listed, list) else []
    return load_judgements(out_dir), pd.read_parquet(out_dir / VERDICTS), jury


def rule_classes(out_dir: Path) -> pd.DataFrame:
    df = pd.read_parquet(Path(out_dir) / "readings.parquet", columns=["item_id", "variant", "skipped", "continuation_class"])
    df = df[~df["skipped"].fillna(False).astype(bool) & df["continuation_class"].notna()]
    return df.assign(rule_mapped=[judge.RULE_TO_JURY.get(str(c), "other") for c in df["continuation_class"]])[["item_id", "variant", "rule_mapped"]]


def table_markdown(table: pd.DataFrame, labels: pd.DataFrame, jury: Sequence[str], audit: str) -> str:
    people = sorted(str(p) for p in labels["labeller"].unique())
    counts = labels.groupby("labeller").size()
    who = ", ".join(f"{p} ({int(counts[p])})" for p in people)
    judges = ", ".join(jury) + (" (a jury of one)" if len(jury) == 1 else "") if jury else "none: no readout judge has run on this audit ('sleight readout judge')"
    lines = [
        f"# Human labels for readout continuations — {audit}",
        "",
        f"People (labels): {who}. Judges: {judges}.",
        "Classes: " + "; ".join(f"`{c}` = {judge.DEFINITIONS[c]}" for c in judge.CLASSES) + ".",
        "Fleiss' κ over the continuations every person labelled; Cohen's κ for each pair of people over those both labelled;"
        " each juror, the jury's majority and the rule classes (mapped as the readout judge maps them) against the people's"
        " majority (two agreeing labels that outnumber every other class; a single labeller's label stands alone)."
        " n: the continuations counted; — where κ is undefined.",
        "",
    ]
    rows = [{c: r[c] for c in AGREEMENT_COLUMNS} for r in table.to_dict("records")]
    lines += judge.markdown_table(rows)
    return "\n".join(lines) + "\n"


def write_agreement(out_dir: Path) -> tuple[pd.DataFrame, Path, Path]:
    """``human_agreement.md`` and ``.csv`` in the audit directory, from its stored labels."""
    out_dir = Path(out_dir)
    labels = load_labels(out_dir)
    if not len(labels):
        raise UserError(f"no human labels in {out_dir} yet; label its continuations first: sleight readout labels {out_dir}")
    votes, verdicts, jury = judge_tables(out_dir)
    table = agreement_table(labels, votes=votes, verdicts=verdicts, jury=jury, rules=rule_classes(out_dir))
    csv = out_dir / AGREEMENT_CSV
    rundir.write_text(csv, table.to_csv(index=False))
    md = rundir.write_text(out_dir / AGREEMENT_MD, table_markdown(table, labels, jury, out_dir.name))
    return table, md, csv
