"""The paper's tables as it prints them, and the claims as statistics (issue 26, item 4).

Three models are built so that their true rates are three rows of the paper's Table 1 (§4:
Qwen2.5-14B, Magistral-Small-24B, Mistral-Small-24B); the report must print those rows character for
character, sorted by flagged, with the thinking-capable row marked. The rounding and the sort are the
study's (``scripts/update_paper_tables.py`` lines 74-93 at 08d2bae); the intervals resample questions.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from sleight.stats import bootstrap_ci, mean
from sleight.tamper.report import paper
from sleight.tamper.report.export import to_latex, to_markdown
from sleight.tamper.report.meta import ModelMeta, ReportMeta
from sleight.tamper.report.paper import ACTIVE, FLAG, TABLE1, TOTAL, Boot, ModelTrials, paper_tables, rate, rate_diff
from sleight.tamper.report.paper_sections import claims_sections, table1_section, table2_section, untouched_section
from sleight.tamper.report.site import html_table
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL

N_Q, N_SUB = 100, 101  # the study's 100 questions x 101 substitutes
BOOT = Boot(B=400, seed=3)


def synthetic(key: str, display: str, *, flag: int, flag_me: int, derail: int, corr: int, aware: int, ds: float, de: float,
              thinking: bool = False, params: float | None = None, untouched_q: int = 0) -> ModelTrials:  # fmt: skip
    """A model whose judged trials carry exactly these counts (of 10,100; ``flag_me`` of the 100
    entity trials), every trial with at least one label (Ign. 0), every Δ equal; the last
    ``untouched_q`` questions' trials untouched (not judged)."""
    i = np.arange(N_Q * N_SUB)
    q = np.array([f"q{k:03d}" for k in i // N_SUB])
    entity = i % N_SUB == 0
    flagged = np.zeros(len(i), bool)
    flagged[np.flatnonzero(entity)[:flag_me]] = True
    flagged[np.flatnonzero(~entity)[: flag - flag_me]] = True
    labels = {"flagged": flagged, "derailed": i < derail, "corrected": i >= len(i) - corr, "switch_aware": i < aware}
    labels["ignored"] = ~(labels["flagged"] | labels["derailed"] | labels["corrected"] | labels["switch_aware"])
    untouched = i >= (N_Q - untouched_q) * N_SUB
    judged = ~untouched
    return ModelTrials(
        key, display, thinking, params, q[judged], entity[judged], {k: v[judged] for k, v in labels.items()},
        q, untouched, np.where(untouched, np.nan, ds), np.where(untouched, np.nan, de),
    )  # fmt: skip


@pytest.fixture(scope="module")
def three():
    return [
        synthetic("mistral-small-24b", "Mistral-Small-24B", flag=303, flag_me=0, derail=8282, corr=2828, aware=0, ds=0.40, de=0.70, params=23.6),
        synthetic("qwen2.5-14b", "Qwen2.5-14B", flag=4646, flag_me=78, derail=7676, corr=4848, aware=131, ds=0.18, de=0.38, params=14.7),
        synthetic("magistral-small-24b", "Magistral-Small-24B", flag=505, flag_me=3, derail=8484, corr=2626, aware=0, ds=0.28, de=0.53,
                  thinking=True, params=24.0),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def tables(three):
    return paper_tables(three, [("magistral-small-24b", "mistral-small-24b"), ("deepseek-r1-distill-32b", "qwen2.5-32b-awq")], BOOT)


def _md_rows(md: str) -> list[str]:
    return [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| Model")]


def test_table1_prints_the_papers_rows(tables):
    t1, t1_ci = table1_section(tables)
    md = to_markdown([t1], "t")
    assert "| Model | Flag. | Flag. (M.E.) | Ign. | Derail. | Corr. | Switch aware | Δsurp. (nats) | Δent. (nats) |" in md
    assert _md_rows(md) == [  # §4, Table 1: the rows, in the paper's order, the thinking-capable one marked
        "| Qwen2.5-14B | 46 | 78 | 0 | 76 | 48 | 1.3 | +0.18 | +0.38 |",
        "| Magistral-Small-24B † | 5 | 3 | 0 | 84 | 26 | 0.0 | +0.28 | +0.53 |",
        "| Mistral-Small-24B | 3 | 0 | 0 | 82 | 28 | 0.0 | +0.40 | +0.70 |",
    ]
    tex = to_latex([t1])
    lines = tex.splitlines()
    assert lines[lines.index("\\rowcolor{thinkrow}") + 1].startswith("Magistral-Small-24B & 5 & 3 & 0 & 84 & 26 & 0.0 & +0.28 & +0.53")
    assert tex.count("\\rowcolor{thinkrow}") == 1 and "\\definecolor{thinkrow}" in tex
    page = html_table(t1)
    assert page.count('<tr class="think"') == 1 and page.index("Magistral") > page.index('<tr class="think"') > page.index("Qwen2.5-14B")
    # the twin table: every cell an estimate with its interval, in the same format
    cells = dict(zip(t1_ci.shown, t1_ci.cells()[0]))
    assert cells["Flag."].startswith("46 [") and cells["Switch aware"].startswith("1.3 [") and cells["Δsurp. (nats)"] == "+0.18 [+0.18, +0.18]"
    csv = t1.frame.set_index("Model")
    assert csv.loc["Qwen2.5-14B", "Flag."] == 100 * 4646 / 10100 and csv.loc["Qwen2.5-14B", "Flag. low"] < 46 < csv.loc["Qwen2.5-14B", "Flag. high"]


def test_ties_in_flagged_sort_by_run_name():
    a = synthetic("b-model", "B", flag=101, flag_me=1, derail=10100, corr=0, aware=0, ds=0.1, de=0.1)
    b = synthetic("a-model", "A", flag=101, flag_me=1, derail=10100, corr=0, aware=0, ds=0.1, de=0.1)
    t = paper_tables([a, b], boot=Boot(B=20))
    assert [r.model.display for r in t.rows] == ["A", "B"]  # the study's glob order breaks the tie


def test_table2_rounds_each_side_then_subtracts_and_pools_counts(three, tables):
    t2, _ = table2_section(tables)
    md = to_markdown([t2], "t")
    rows = _md_rows(md)
    # Qwen2.5-14B: entity 78/100, neutral 4568/10000 = 45.68 -> 46; the printed difference is 78 - 46
    assert rows[0] == "| Qwen2.5-14B | 78 | 46 | +32 | 76 | 76 | +0 |"  # derailed: 76 of 100 and 7600 of 10,000
    assert rows[-1].startswith("| Pooled (all models) |") and "\\midrule\nPooled (all models)" in to_latex([t2])
    ent = sum(int(m.labels["flagged"][m.entity].sum()) for m in three)
    n_ent = sum(int(m.entity.sum()) for m in three)
    neu = sum(int(m.labels["flagged"][~m.entity].sum()) for m in three)
    n_neu = sum(int((~m.entity).sum()) for m in three)
    pooled = t2.frame.iloc[-1]
    assert pooled["Flag. entity"] == 100 * ent / n_ent and pooled["Flag. neutral"] == 100 * neu / n_neu
    assert pooled["Flag. Δ"] == round(100 * ent / n_ent) - round(100 * neu / n_neu)
    assert math.isclose(pooled["Flag. Δ exact"], 100 * (ent / n_ent - neu / n_neu), rel_tol=FLOAT64_RTOL, abs_tol=FLOAT64_ATOL)
    assert pooled["Flag. Δ low"] < pooled["Flag. Δ exact"] < pooled["Flag. Δ high"]


def test_untouched_rates_to_one_decimal(tables):
    one = synthetic("u", "U", flag=10, flag_me=0, derail=10100, corr=0, aware=0, ds=0.2, de=0.3, untouched_q=1)
    unt = untouched_section(paper_tables([one], boot=Boot(B=20)))
    assert unt.cells()[0][:2] == ["U", "1.0"]  # App. D: one question of 100 never fired the trigger
    assert unt.frame.iloc[0]["Untouched"] == N_SUB and unt.frame.iloc[0]["Trials"] == N_Q * N_SUB
    assert untouched_section(tables).cells()[0][1] == "0.0"
    assert paper_tables([one], boot=Boot(B=20)).rows[0].table1["Δsurp. (nats)"].n == (N_Q - 1) * N_SUB  # Δ over trials that have one


def test_the_question_bootstrap_is_the_trial_level_cluster_bootstrap(three):
    """Per-question sums resampled as rows equal the trial-level cluster bootstrap: the same draws."""
    m = three[1]
    x = m.labels["flagged"].astype(float)
    ours = rate(m.question, x, BOOT)
    theirs = bootstrap_ci(mean, x, B=BOOT.B, seed=BOOT.seed, clusters=m.question)
    for a, b in ((ours.value, theirs.estimate), (ours.low, theirs.low), (ours.high, theirs.high)):
        assert math.isclose(a, b, rel_tol=FLOAT64_RTOL, abs_tol=FLOAT64_ATOL)
    # a difference resamples both sides by the same questions: its replicate is the difference of theirs
    e = m.entity
    d = rate_diff(m.question[e], x[e], m.question[~e], x[~e], BOOT)
    assert math.isclose(d.value, x[e].mean() - x[~e].mean(), rel_tol=FLOAT64_RTOL, abs_tol=FLOAT64_ATOL) and d.low < d.value < d.high


def test_the_pooled_switch_aware_rate(three, tables):
    aware = tables.pooled_switch_aware
    judged = sum(len(m.question) for m in three)
    assert (aware.k, aware.n) == (131, judged) and aware.value == 131 / judged and aware.low <= aware.value <= aware.high


def test_the_size_statistic_is_spearman_over_models(three, tables):
    assert [(s.size, s.column) for s in tables.size] == [(TOTAL, c) for c in TABLE1] + [(ACTIVE, c) for c in TABLE1]
    by_col = {(s.size, s.column): s for s in tables.size}
    flags = [r.table1[FLAG].value for r in tables.rows]
    sizes = [r.model.params_b for r in tables.rows]
    s = by_col[TOTAL, FLAG]
    assert s.n_models == 3 and math.isclose(s.rho, spearmanr(sizes, flags).statistic, rel_tol=FLOAT64_RTOL, abs_tol=FLOAT64_ATOL)
    assert -1 <= s.low <= s.high <= 1
    assert by_col[ACTIVE, FLAG] == dataclasses.replace(s, size=ACTIVE)  # all three dense: active is total, the same draws
    none = paper_tables([synthetic("x", "X", flag=1, flag_me=0, derail=1, corr=10100, aware=0, ds=0.1, de=0.1)], boot=Boot(B=20))
    assert all(math.isnan(z.rho) and z.n_models == 0 for z in none.size)  # no sizes given: no statistic
    ties = paper.spearman(np.array([1.0, 2.0, 2.0, 3.0]), np.array([4.0, 1.0, 1.0, 0.0]))
    assert math.isclose(ties, spearmanr([1, 2, 2, 3], [4, 1, 1, 0]).statistic, rel_tol=FLOAT64_RTOL, abs_tol=FLOAT64_ATOL)


def _sized(key: str, flagged: int, params: float | None, active: float | None) -> ModelTrials:
    """Ten judged trials (one per question), ``flagged`` of them flagged; every other label false."""
    q = np.array([f"q{k}" for k in range(10)])
    flags = np.arange(10) < flagged
    none = np.zeros(10, bool)
    labels = {"flagged": flags, "derailed": none, "corrected": none, "switch_aware": none, "ignored": ~flags}
    return ModelTrials(key, key, False, params, q, none, labels, q, none, np.full(10, 0.1), np.full(10, 0.2), active)


# (run, flagged of 10, params_b, active_params_b): the study's sizes (data/sweeps/study.yaml) for two mixtures of
# experts and Gemma 4's E-models, two dense models (active = total) and one whose size the config does not give.
SIZED = [
    ("gemma4-26b-a4b", 1, 25.2, 3.8), ("gpt-oss-20b", 6, 20.9, 3.6), ("gemma4-e2b", 2, 5.1, 2.0), ("gemma4-e4b", 4, 8.0, 4.0),
    ("qwen2.5-14b", 9, 14.7, None), ("yi-1.5-34b", 3, 34.4, None), ("unsized", 7, None, None),
]  # fmt: skip


def test_the_size_statistic_over_total_and_active_parameters():
    """§6's "no clear correlation" with the number of parameters names no size; §4's "roughly 2B to 72B" counts Gemma 4
    E2B as 2B, its active size. Each size's ρ is scipy's Spearman over the models that have one: a dense model's active
    size is its total, a model without a size is left out."""
    t = paper_tables([_sized(*row) for row in SIZED], boot=Boot(B=200, seed=1))
    by = {(s.size, s.column): s for s in t.size}
    sized = [row for row in SIZED if row[2] is not None]
    flags = [f / 10 for _, f, _, _ in sized]
    total = [p for _, _, p, _ in sized]
    active = [p if a is None else a for _, _, p, a in sized]
    assert active == [3.8, 3.6, 2.0, 4.0, 14.7, 34.4]
    for size, xs in ((TOTAL, total), (ACTIVE, active)):
        s = by[size, FLAG]
        assert s.n_models == 6 and s.rho == pytest.approx(spearmanr(xs, flags).statistic, rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)
        assert -1 <= s.low <= s.rho <= s.high <= 1
    # by hand: total ranks (5, 4, 1, 2, 3, 6), active ranks (3, 2, 1, 4, 5, 6); flagged ranks (1, 5, 2, 4, 6, 3)
    assert by[TOTAL, FLAG].rho == pytest.approx(1 - 6 * 40 / (6 * 35), rel=FLOAT64_RTOL)
    assert by[ACTIVE, FLAG].rho == pytest.approx(1 - 6 * 24 / (6 * 35), rel=FLOAT64_RTOL)
    assert by[ACTIVE, "Ign."].n_models == 6 and by[ACTIVE, "Ign."].rho == pytest.approx(-by[ACTIVE, FLAG].rho, rel=FLOAT64_RTOL)
    # an active size without a total counts under active only
    t2 = paper_tables([_sized(*row) for row in SIZED[:3]] + [_sized("moe-only", 5, None, 1.0)], boot=Boot(B=20))
    assert {(s.size, s.n_models) for s in t2.size if s.column == FLAG} == {(TOTAL, 3), (ACTIVE, 4)}

    # every output says which size each row uses: the section's Size column, its CSV frame, Markdown, LaTeX, HTML
    _, size, _ = claims_sections(t)
    assert list(size.shown[:2]) == ["Size", "Column"]
    assert size.frame["Size"].tolist() == [TOTAL] * len(TABLE1) + [ACTIVE] * len(TABLE1)
    frame = size.frame.set_index(["Size", "Column"])
    assert frame.loc[(ACTIVE, FLAG), "Spearman ρ"] == by[ACTIVE, FLAG].rho and frame.loc[(TOTAL, FLAG), "Models"] == 6
    md = to_markdown([size], "t")
    assert f"| total | Flag. | {by[TOTAL, FLAG].rho:+.2f} |" in md and f"| active | Flag. | {by[ACTIVE, FLAG].rho:+.2f} |" in md
    assert "active_params_b" in size.note and "E2B" in size.note and "§4" in size.note
    assert "\\begin{tabular}{llrrr}" in to_latex([size]) and "active & Flag." in to_latex([size])
    assert html_table(size).count(">active<") == len(TABLE1)
    # Table 1's CSV carries each model's sizes: the active one resolved (a dense model's is its total)
    t1 = table1_section(t)[0].frame.set_index("run")
    assert t1.loc["gpt-oss-20b", "active_params_b"] == 3.6 and t1.loc["yi-1.5-34b", "active_params_b"] == 34.4
    assert t1.loc["yi-1.5-34b", "params_b"] == 34.4 and pd.isna(t1.loc["unsized", "active_params_b"])


def test_matched_pairs_from_the_config(tables):
    (pair,) = tables.pairs
    assert (pair.thinking.display, pair.sibling.display) == ("Magistral-Small-24B", "Mistral-Small-24B")
    assert pair.thinking_rate.n == pair.sibling_rate.n == 10100 and pair.sibling_rate.value == 303 / 10100
    assert math.isclose(pair.diff.value, pair.thinking_rate.value - pair.sibling_rate.value, rel_tol=FLOAT64_RTOL, abs_tol=FLOAT64_ATOL)
    assert pair.thinking_rate.k == 505 and pair.diff.low < pair.diff.value < pair.diff.high
    assert tables.pairs_missing == (("deepseek-r1-distill-32b", "qwen2.5-32b-awq"),)


@pytest.mark.slow  # the judged real runs shared with the report tests
def test_the_report_names_and_marks_models_from_metadata(tmp_path_factory, tmp_path):
    """``write_report`` with per-model metadata built here: display names, marks, pairs and sizes."""
    from report_artifacts import judged_report
    from sleight.tamper.report.report import write_report

    judged = judged_report(tmp_path_factory)
    names = [r.name for r in judged.runs]  # run0, run1: the runs' folder names, as a sweep names them
    meta = ReportMeta({names[0]: ModelMeta("SmolLM2 (by name)", True, 0.135), names[1]: ModelMeta("SmolLM2 (GGUF)", False, 0.2)}, ((names[0], names[1]),))
    paths = write_report(judged.runs, tmp_path / "r", meta=meta, B=50, progress=False)
    md = paths.markdown.read_text()
    paper_t1 = md.split("## Table 1 — main sweep", 1)[1].split("##", 1)[0]
    assert "SmolLM2 (by name) †" in paper_t1 and "SmolLM2 (GGUF) |" in paper_t1
    assert "\\rowcolor{thinkrow}\nSmolLM2 (by name)" in paths.latex.read_text()
    index = (paths.out / "index.html").read_text()
    assert '<tr class="think"' in index and 'href="models/' in index.split('id="t-table1"', 1)[1].split("</table>", 1)[0]
    pairs = pd.read_csv(paths.out / "pairs.csv")
    assert pairs["Thinking model"].tolist() == ["SmolLM2 (by name)"] and pairs["Sibling"].tolist() == ["SmolLM2 (GGUF)"]
    size = pd.read_csv(paths.out / "size.csv")
    assert (size["Models"] == 2).all() and size["Spearman ρ"].isna().all()  # two models: too few for a correlation
    t1 = pd.read_csv(paths.out / "table1.csv")
    assert set(t1["run"]) == set(names) and t1["thinking_capable"].tolist().count(True) == 1

    # the same through the CLI from a sweep file (tamper report --config FILE)
    from sleight.cli.main import main

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"subjects:\n  - {{name: {names[0]}, model: a/model, display: Tiny one, thinking_capable: true, params_b: 0.135}}\n"
        f"  - {{name: {names[1]}, model: b/model, display: Other one, params_b: 0.2}}\npairs:\n  - [{names[0]}, {names[1]}]\n"
    )
    out = tmp_path / "cli"
    assert main(["tamper", "report", *map(str, judged.runs), "--out", str(out), "--config", str(sweep), "--bootstrap", "50", "--no-site"]) == 0
    assert "| Tiny one † |" in (out / "leaderboard.md").read_text()
    assert pd.read_csv(out / "pairs.csv")["Sibling"].tolist() == ["Other one"]
    assert main(["tamper", "report", str(judged.runs[0]), "--out", str(out), "--bootstrap", "0"]) == 2


# §4, Table 1 as printed: display name, Flag., Flag. (M.E.), Ign., Derail., Corr., Switch aware, Δsurp., Δent.
PAPER_TABLE1 = [
    ("Qwen2.5-14B", 46, 78, 0, 76, 48, "1.3", "+0.18", "+0.38"),
    ("DeepSeek-R1-Distill-7B", 46, 54, 0, 83, 37, "0.0", "+0.18", "+0.36"),
    ("Qwen2.5-72B (AWQ)", 45, 10, 0, 83, 38, "0.1", "+0.16", "+0.31"),
    ("DeepSeek-R1-Distill-32B", 42, 50, 0, 84, 31, "0.0", "+0.19", "+0.39"),
    ("Qwen2.5-32B (AWQ)", 33, 25, 0, 75, 43, "0.2", "+0.16", "+0.35"),
    ("Llama 3.3 70B (AWQ)", 14, 38, 0, 82, 32, "0.0", "+0.38", "+0.74"),
    ("Gemma 3 27B", 13, 29, 0, 74, 42, "0.1", "+0.14", "+0.31"),
    ("gpt-oss-20B", 13, 47, 0, 97, 12, "0.0", "+0.54", "+0.92"),
    ("Qwen3 32B (AWQ)", 11, 6, 0, 64, 44, "0.0", "+0.19", "+0.38"),
    ("Gemma 4 31B", 9, 3, 0, 66, 47, "0.0", "+0.10", "+0.23"),
    ("Yi-1.5-34B", 6, 2, 0, 73, 38, "0.0", "+0.26", "+0.50"),
    ("Qwen3.6 27B", 5, 22, 0, 85, 17, "0.1", "+0.23", "+0.56"),
    ("Magistral-Small-24B", 5, 3, 0, 84, 26, "0.0", "+0.28", "+0.53"),
    ("Gemma 4 E4B", 4, 5, 1, 76, 32, "0.0", "+0.29", "+0.59"),
    ("Mistral-Small-24B", 3, 0, 0, 82, 28, "0.0", "+0.40", "+0.70"),
    ("Gemma 4 12B", 2, 24, 0, 77, 38, "0.0", "+0.15", "+0.36"),
    ("Gemma 4 E2B", 2, 4, 0, 82, 27, "0.0", "+0.13", "+0.31"),
    ("Gemma 4 26B-A4B", 1, 2, 0, 79, 36, "0.0", "+0.06", "+0.16"),
    ("Phi-4 (14B)", 1, 3, 0, 62, 48, "0.0", "+0.30", "+0.56"),
]
# The shaded rows: the study's THINKING set (scripts/update_paper_tables.py lines 27-29 at 08d2bae).
STUDY_THINKING = {"deepseek-r1-distill-32b", "deepseek-r1-distill-7b", "qwen3-32b-awq", "gpt-oss-20b", "gemma4-26b-a4b", "gemma4-31b",
                  "gemma4-12b", "gemma4-e2b", "gemma4-e4b", "qwen3.6-27b", "magistral-small-24b"}  # fmt: skip


def _paper_model(key: str, meta: ModelMeta, row: tuple, extra: int) -> ModelTrials:
    """Counts over 10,100 judged trials that give the printed rates (``extra`` flagged trials break
    the paper's ties in its order); Ign. trials are the last ones, with no label at all."""
    _, flag, flag_me, ign, derail, corr, aware, ds, de = row
    n = N_Q * N_SUB
    i = np.arange(n)
    q = np.array([f"q{k:03d}" for k in i // N_SUB])
    entity = i % N_SUB == 0
    flagged = np.zeros(n, bool)
    flagged[np.flatnonzero(entity)[:flag_me]] = True
    flagged[np.flatnonzero(~entity)[: flag * N_SUB + extra - flag_me]] = True
    n_ign = ign * N_SUB
    labels = {
        "flagged": flagged, "derailed": i < derail * N_SUB, "corrected": (i >= n - n_ign - corr * N_SUB) & (i < n - n_ign),
        "switch_aware": i < round(float(aware) * N_SUB),
    }  # fmt: skip
    labels["ignored"] = ~np.any(list(labels.values()), axis=0)
    return ModelTrials(key, meta.display, meta.thinking_capable, meta.params_b, q, entity, labels, q, np.zeros(n, bool),
                       np.full(n, float(ds)), np.full(n, float(de)), meta.active_params_b)  # fmt: skip


def test_the_study_config_reproduces_table_1_as_printed():
    """The study sweep's metadata (display names, thinking marks, sizes, pairs: data/sweeps/study.yaml)
    and trials whose rates are the printed ones give the paper's Table 1, row for row, in its order."""
    from sleight.tamper.report.meta import meta_from_config

    meta = meta_from_config("study")
    by_display = {m.display: name for name, m in meta.models.items()}
    assert set(by_display) == {r[0] for r in PAPER_TABLE1}
    assert {name for name, m in meta.models.items() if m.thinking_capable} == STUDY_THINKING
    assert set(meta.pairs) == {("magistral-small-24b", "mistral-small-24b"), ("deepseek-r1-distill-32b", "qwen2.5-32b-awq")}  # §5
    assert all(m.params_b for m in meta.models.values())
    models = []
    for j, row in enumerate(PAPER_TABLE1):
        ties_after = sum(1 for later in PAPER_TABLE1[j + 1 :] if later[1] == row[1])
        name = by_display[row[0]]
        models.append(_paper_model(name, meta.models[name], row, ties_after))
    t = paper_tables(models[::-1], meta.pairs, Boot(B=50))  # given in reverse: the report sorts
    t1, _ = table1_section(t)
    expected = []
    for name, *cells in PAPER_TABLE1:
        mark = " †" if by_display[name] in STUDY_THINKING else ""
        expected.append("| " + " | ".join([name + mark, *map(str, cells)]) + " |")
    assert _md_rows(to_markdown([t1], "t")) == expected
    pairs = {(p.thinking.display, p.sibling.display): (round(100 * p.thinking_rate.value), round(100 * p.sibling_rate.value)) for p in t.pairs}
    assert pairs == {("Magistral-Small-24B", "Mistral-Small-24B"): (5, 3), ("DeepSeek-R1-Distill-32B", "Qwen2.5-32B (AWQ)"): (42, 33)}  # §5
    n_models = {(s.size, s.column): s.n_models for s in t.size}
    assert n_models[TOTAL, FLAG] == n_models[ACTIVE, FLAG] == 19
    # the sizes through meta_of: the mixtures of experts and the E-models give an active size, the dense models none
    active = {name: m.active_params_b for name, m in meta.models.items() if m.active_params_b is not None}
    assert active == {"gemma4-26b-a4b": 3.8, "gpt-oss-20b": 3.6, "gemma4-e2b": 2.0, "gemma4-e4b": 4.0}
    # §4's "roughly 2B to 72B" is the active range (E2B as 2B); by total parameters the smallest is E2B's 5.1B
    sizes = {kind: [paper.model_size(m, kind) for m in models] for kind in (TOTAL, ACTIVE)}
    assert (min(sizes[ACTIVE]), max(sizes[ACTIVE])) == (2.0, 72.7) and min(sizes[TOTAL]) == 5.1
    flags = [r.table1[FLAG].value for r in t.rows]
    for kind in (TOTAL, ACTIVE):
        s = next(z for z in t.size if (z.size, z.column) == (kind, FLAG))
        xs = [paper.model_size(r.model, kind) for r in t.rows]
        assert s.rho == pytest.approx(spearmanr(xs, flags).statistic, rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)
