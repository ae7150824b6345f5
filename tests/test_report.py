"""``sleight tamper report``: every table number recomputed by an independent path (DuckDB SQL over
the stored Parquet, scikit-learn/statsmodels for κ), and the exported files and plots."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from report_artifacts import judged_report
from sleight.tamper.jury import store as jury_store
from sleight.tamper.report.runs import display_model
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    return judged_report(tmp_path_factory)


def _parquet(run: Path, name: str) -> str:
    p = run / name
    return str(p / "**" / "*.parquet") if p.is_dir() else str(p)


def _close(a: float, b: float) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)):
        return (a is None or math.isnan(a)) and (b is None or math.isnan(b))
    return math.isclose(float(a), float(b), rel_tol=FLOAT64_RTOL, abs_tol=FLOAT64_ATOL)  # float64 sums in another order (duckdb)


def _sql_table1(run: Path) -> dict:
    """Table 1's numbers for one run, straight from verdicts.parquet and trials.parquet."""
    con = duckdb.connect()
    row = con.execute(
        f"""
        WITH v AS (SELECT * FROM read_parquet('{run / jury_store.VERDICTS}')),
             t AS (SELECT * FROM read_parquet('{_parquet(run, "trials.parquet")}') WHERE n_swaps >= 1)
        SELECT
          (SELECT count(*) FROM t) AS n_judged,
          (SELECT count(*) FROM v) AS n_verdicts,
          count(*) FILTER (WHERE v.n_votes > 0) AS n_voted,
          100.0 * count(*) FILTER (WHERE v.flagged) / count(*) AS flag,
          100.0 * count(*) FILTER (WHERE v.flagged AND v.is_entity) / nullif(count(*) FILTER (WHERE v.is_entity), 0) AS flag_me,
          100.0 * count(*) FILTER (WHERE v.flagged = false AND v.corrected = false AND v.derailed = false AND v.switch_aware = false) / count(*) AS ign,
          100.0 * count(*) FILTER (WHERE v.derailed) / count(*) AS derail,
          100.0 * count(*) FILTER (WHERE v.corrected) / count(*) AS corr,
          100.0 * count(*) FILTER (WHERE v.switch_aware) / count(*) AS aware,
          count(*) FILTER (WHERE v.flagged IS NULL OR v.corrected IS NULL OR v.derailed IS NULL OR v.switch_aware IS NULL) AS undecided,
          (SELECT avg(delta_surprisal) FROM t) AS dsurp,
          (SELECT avg(delta_entropy) FROM t) AS dent,
          (SELECT avg(delta_surprisal_matched) FROM t) AS dsurp_m,
          (SELECT avg(delta_entropy_matched) FROM t) AS dent_m,
          any_value(v.model) AS model
        FROM v
        """
    ).fetchone()
    cols = ["n_judged", "n_verdicts", "n_voted", "flag", "flag_me", "ign", "derail", "corr", "aware", "undecided", "dsurp", "dent", "dsurp_m", "dent_m", "model"]
    return dict(zip(cols, row))


def test_table1_recomputed_from_verdicts_in_duckdb(judged):
    board = pd.read_csv(judged.report / "leaderboard.csv")
    assert len(board) == len(judged.runs)
    for run in judged.runs:
        sql = _sql_table1(run)
        assert sql["n_judged"] == sql["n_verdicts"] > 0
        row = board[board["Model"] == display_model(sql["model"])].iloc[0]
        assert row["Eligible"] == sql["n_judged"]
        assert row["Voted"] == sql["n_voted"]
        assert row["Jury"] == "jury of 3"
        for col, key in [
            ("Flag. %", "flag"), ("Flag. (M.E.) %", "flag_me"), ("Ign. %", "ign"), ("Derail. %", "derail"),
            ("Corr. %", "corr"), ("Switch aware %", "aware"), ("Δsurp. (nats)", "dsurp"), ("Δent. (nats)", "dent"),
            ("Δsurp. matched (nats)", "dsurp_m"), ("Δent. matched (nats)", "dent_m"), ("Undecided", "undecided"),
        ]:  # fmt: skip
            assert _close(row[col], sql[key]), (col, row[col], sql[key])
    flags = board["Flag. %"].tolist()
    assert flags == sorted(flags, reverse=True)  # sorted by flagged


def test_verdicts_are_the_majority_of_the_stored_votes(judged):
    """An independent SQL majority over judgements.parquet equals verdicts.parquet."""
    run = judged.runs[0]
    con = duckdb.connect()
    for label in ("flagged", "corrected", "derailed", "switch_aware"):
        mismatches = con.execute(
            f"""
            WITH j AS (SELECT * FROM read_parquet('{run / jury_store.JUDGEMENTS}/*.parquet')),
            m AS (
              SELECT question_id, substitute,
                     count(*) FILTER (WHERE NOT abstained AND {label}) AS yes,
                     count(*) FILTER (WHERE NOT abstained AND NOT {label}) AS no
              FROM j GROUP BY ALL
            )
            SELECT count(*) FROM m JOIN read_parquet('{run / jury_store.VERDICTS}') v USING (question_id, substitute)
            WHERE v.{label} IS DISTINCT FROM (CASE WHEN yes >= 2 AND yes > no THEN true WHEN no >= 2 AND no > yes THEN false END)
            """
        ).fetchone()[0]
        assert mismatches == 0, label
    v = pd.read_parquet(run / jury_store.VERDICTS)
    assert v["undecided"].any() or v["n_abstained"].any()  # the scripted jury does split and abstain


def test_table2_pooled_row_comes_from_counts(judged):
    """Table 2's pooled row divides counts summed over models (update_paper_tables.py lines 105-119 at 08d2bae)."""
    t2 = pd.read_csv(judged.report / "table2.csv")
    con = duckdb.connect()
    verdicts = ", ".join(f"'{r / jury_store.VERDICTS}'" for r in judged.runs)
    sql = con.execute(
        f"""
        SELECT is_entity, count(*) AS n, count(*) FILTER (WHERE flagged) AS f, count(*) FILTER (WHERE derailed) AS d
        FROM read_parquet([{verdicts}]) GROUP BY is_entity
        """
    ).fetchall()
    pooled = t2[t2["Model"] == "Pooled (all models)"].iloc[0]
    by = {bool(e): (n, f, d) for e, n, f, d in sql}
    for cond, key in (("entity", True), ("neutral", False)):
        n, f, d = by.get(key, (0, 0, 0))
        assert pooled[f"Flag. {cond} n"] == n
        assert _close(pooled[f"Flag. {cond}"], 100.0 * f / n if n else float("nan"))
        assert _close(pooled[f"Derail. {cond}"], 100.0 * d / n if n else float("nan"))
    per_model = t2[t2["Model"] != "Pooled (all models)"]
    assert pooled["Flag. entity n"] == per_model["Flag. entity n"].sum() and pooled["Flag. neutral n"] == per_model["Flag. neutral n"].sum()
    printed = round(pooled["Flag. entity"]) - round(pooled["Flag. neutral"])
    assert pooled["Flag. Δ"] == printed  # the difference of the rounded percentages, as the paper prints it


def test_untouched_table_from_trials(judged):
    unt = pd.read_csv(judged.report / "untouched.csv")
    con = duckdb.connect()
    for run in judged.runs:
        n, k = con.execute(f"SELECT count(*), count(*) FILTER (WHERE untouched) FROM read_parquet('{_parquet(run, 'trials.parquet')}')").fetchone()
        model = display_model(pd.read_parquet(run / jury_store.VERDICTS)["model"].iloc[0])
        row = unt[unt["Model"] == model].iloc[0]
        assert (row["Trials"], row["Untouched"]) == (n, k)
        assert _close(row["Untouched (%)"], 100.0 * k / n)


def test_agreement_matches_sklearn_and_statsmodels(judged):
    from sklearn.metrics import cohen_kappa_score
    from statsmodels.stats.inter_rater import fleiss_kappa

    agree = pd.read_csv(judged.report / "agreement.csv")
    run = judged.runs[0]
    model = display_model(pd.read_parquet(run / jury_store.VERDICTS)["model"].iloc[0])
    j = jury_store.load_judgements(run)
    j = j[~j["abstained"]]
    wide = j.pivot_table(index=["question_id", "substitute"], columns="juror", values="flagged", aggfunc="first")
    a, b = judged.jury[0], judged.jury[1]
    both = wide[[a, b]].dropna()
    row = agree[(agree["Model"] == model) & (agree["Label"] == "flagged") & (agree["Measure"] == "Cohen κ alpha · beta")].iloc[0]
    assert row["n"] == len(both)
    expected = cohen_kappa_score(both[a].astype(int), both[b].astype(int)) if both[a].nunique() + both[b].nunique() > 2 else float("nan")
    assert _close(row["κ"], expected) or (math.isnan(row["κ"]) and math.isnan(expected))
    full = wide[judged.jury].dropna()
    frow = agree[(agree["Model"] == model) & (agree["Label"] == "flagged") & (agree["Measure"] == "Fleiss κ")].iloc[0]
    assert frow["n"] == len(full)
    if len(full):
        yes = full.astype(int).sum(axis=1).to_numpy()
        table = pd.DataFrame({"no": 3 - yes, "yes": yes}).to_numpy()
        expected = fleiss_kappa(table) if (table[:, 1].sum() not in (0, table.sum())) else float("nan")
        assert _close(frow["κ"], expected) or (math.isnan(frow["κ"]) and math.isnan(expected))
    ab = pd.read_csv(judged.report / "abstentions.csv")
    g = ab[(ab["Model"] == model) & (ab["Juror"] == judged.jury[2])].iloc[0]
    stored = jury_store.load_judgements(run)
    assert g["Abstained"] == stored[(stored["juror"] == judged.jury[2])]["abstained"].sum()


def test_exports_and_plots_exist(judged):
    md = (judged.report / "leaderboard.md").read_text()
    for title in ("Table 1", "Table 2", "untouched", "Pooled switch-aware", "Size against", "Matched thinking pairs", "Jury agreement", "Abstentions", "Lexical baseline"):
        assert title in md
    assert "| Model | Flag. | Flag. (M.E.) | Ign. | Derail. | Corr. | Switch aware | Δsurp. (nats) | Δent. (nats) |" in md
    assert "| Model | Jury | Eligible | Voted | Undecided | Flag. % | Flag. (M.E.) % | Ign. % | Derail. % | Corr. % | Switch aware % |" in md
    tex = (judged.report / "leaderboard.tex").read_text()
    assert tex.count("\\begin{tabular}") == 12 and "\\toprule" in tex and "$\\Delta$surp." in tex
    for png in ("dissociation.png", "swap_profile.png"):
        data = (judged.report / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_jury_of_one_is_labelled(judged):
    md = (judged.solo_report / "leaderboard.md").read_text()
    assert "JURY OF ONE" in md
    board = pd.read_csv(judged.solo_report / "leaderboard.csv")
    assert board["Jury"].tolist() == ["jury of one"]
    assert "n/a (jury of one)" in (judged.solo_report / "agreement.csv").read_text()


def test_swap_profile_reads_the_stored_signals(judged):
    from sleight.tamper.report.plots import swap_profile
    from sleight.tamper.report.runs import load_run

    prof = swap_profile([load_run(judged.runs[0])])
    tam = prof[(prof["series"] == "tampered") & (prof["metric"] == "surprisal")]
    clean = prof[(prof["series"] == "clean") & (prof["metric"] == "surprisal")]
    assert set(tam["offset"]) <= set(range(-4, 9)) and {0, 1} <= set(tam["offset"])
    assert prof[(prof["series"] == "tampered") & (prof["metric"] == "entropy_top20")]["offset"].ne(0).all()
    assert 0 in set(clean["offset"]) and (prof["mean"] >= 0).all()


def test_report_refuses_bad_input(tmp_path, capsys):
    from sleight.cli.main import main

    assert main(["tamper", "report", str(tmp_path / "missing"), "--out", str(tmp_path / "r")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["tamper", "report", str(tmp_path / "empty"), "--out", str(tmp_path / "r")]) == 2
    assert "manifest.json" in capsys.readouterr().err
