"""``sleight readout reproduce`` (issue #19 item 4): the shipped table configs, the aggregation on shared
bootstrap replicates (by hand), the writers' exact Markdown/CSV/LaTeX, and every shipped table
written end to end for the bundled model on the shipped fixtures."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pytest

from sleight.errors import UserError
from sleight.readout.reproduce import load_table, shipped_tables
from sleight.readout.reproduce.aggregate import (
    Cell,
    TableResult,
    TableRow,
    aggregate,
    average_cell,
    metric_cell,
    shared_counts,
    stat_cell,
)
from sleight.readout.reproduce.config import Average, Checkpoint, Column, RunSpec, TableConfig
from sleight.readout.reproduce.writers import to_csv, to_latex, to_markdown
from sleight.stats import auroc, resample
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL

# ------------------------------------------------------------------------------------------------
# the shipped configs
# ------------------------------------------------------------------------------------------------


def test_the_paper_tables_are_shipped():
    names = shipped_tables()
    for t in ("table2", "table3", "table4", "table9", "table10", "table13"):
        assert t in names
    assert names[:6] == ["table2", "table3", "table4", "table9", "table10", "table13"]  # in the paper's order


@pytest.mark.parametrize("name", shipped_tables())
def test_every_shipped_table_loads_and_its_fixture_data_serves_its_command(name):
    from sleight.readout import data
    from sleight.readout.audit.presets import PRESETS

    config = load_table(name)
    assert config.name == name and config.title and config.inferred  # every config says what is inferred
    assert config.paper == {} or all(config.paper.values())  # no invented numbers: empty unless known
    assert config.checkpoints and config.columns
    for spec in config.runs.values():
        assert spec.command in ("forecast", "ptrue", "audit")
        if spec.command == "audit" and spec.settings.get("preset"):
            assert spec.settings["preset"] in PRESETS
        for text in (spec.paper_data, spec.fixture_spec()):
            assert data.is_data_spec(text)
        ds = data.load_data(spec.fixture_spec())  # the shipped fixture is read offline
        use = {"forecast": "forecast", "ptrue": "qa"}.get(spec.command) or spec.settings.get("preset") or "mcq"
        assert ds.view(use, 2)
    assert {c.run for c in config.columns} <= set(config.runs)
    qwen = [c for c in config.checkpoints if c.group == "qwen3"]
    assert qwen and all(c.chat_template_kwargs.get("enable_thinking") is False for c in qwen)  # the paper runs Qwen3 with thinking off


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(text, encoding="utf-8")
    return p


BASE = """\
checkpoints: [{name: a, model: smollm2-135m-instruct}]
runs:
  f: {command: forecast, data: {paper: "race-h:hub", fixture: "race-h:{fixtures}/ehovy/race/high/test-00000-of-00001.parquet"}}
columns:
  - {key: x, run: f, where: {position: stem}, metric: auroc}
"""


@pytest.mark.parametrize(
    "edit, message",
    [
        (("metric: auroc", "metric: roc"), "bad.yaml: columns[0].metric: 'roc' is not one of"),
        (("run: f,", "run: g,"), "bad.yaml: columns[0].run: 'g' is not one of the runs"),
        (("position: stem", "position: middle"), "bad.yaml: columns[0].where.position: 'middle' is not one of original, stem"),
        (("command: forecast", "command: ptrue"), "bad.yaml: runs.f.settings"),  # placeholder, replaced below
        (('"race-h:hub"', '"summeval:hub"'), "bad.yaml: runs.f.data.paper: summeval data does not serve forecast"),
        (("test-00000", "nothere-00000"), "bad.yaml: runs.f.data.fixture: fixture file not found"),
        (("model: smollm2-135m-instruct", "model: m, thinking: maybe"), "bad.yaml: checkpoints[0].thinking: expected on or off"),
    ],
)
def test_config_errors_are_one_line_naming_file_and_key(tmp_path, edit, message):
    text = BASE.replace(*edit)
    if edit[0] == "command: forecast":  # a setting the command does not have
        text = BASE.replace("fixture: \"race-h", "fixture: \"race-h").replace("}}\ncolumns", "}, settings: {answers: own}}\ncolumns")
        message = "bad.yaml: runs.f.settings.answers: not a setting of readout forecast"
    with pytest.raises(UserError) as err:
        load_table(_write(tmp_path, text))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_unknown_table_is_one_line():
    with pytest.raises(UserError, match="no shipped table 'table99'"):
        load_table("table99")
    assert load_table("2").name == "table2"


# ------------------------------------------------------------------------------------------------
# aggregation on shared replicates, by hand
# ------------------------------------------------------------------------------------------------


def _config(columns, averages=(), B=50) -> TableConfig:
    run = RunSpec("r", "ptrue", "mmlu:hub", "mmlu:x.parquet")
    return TableConfig("t", "T", Path("t.yaml"), (), {"r": run}, tuple(columns), tuple(averages), B=B, seed=3)


def _rows(scores, labels, readout="library"):
    return [
        {"setting": "own", "item_id": f"q{i}", "answer_source": "own", "readout": readout, "score": s, "label": y, "option_mass": s}
        for i, (s, y) in enumerate(zip(scores, labels))
    ]


def test_shared_counts_are_the_bootstrap_modules_draws():
    c = shared_counts(5, 40, 7)
    assert c.shape == (40, 5) and (c.sum(axis=1) == 5).all()
    np.testing.assert_array_equal(c, resample(5, 40, 7).counts)


def test_checkpoint_cells_and_their_average_on_the_same_replicates():
    a = _rows([0.9, 0.2, 0.7, 0.4], [1, 0, 1, 0]) + _rows([0.8, 0.3, 0.6, 0.1], [1, 0, 1, 0], readout="moved")
    b = _rows([0.1, 0.2, 0.7, 0.4], [1, 0, 0, 1]) + _rows([0.5, 0.6, 0.4, 0.3], [1, 0, 0, 1], readout="moved")
    b = b[1:4] + b[5:]  # checkpoint b has no row for q0: its cells rest on q1..q3, on the same draws
    mean_col = Column("m", "Mean", "r", {"readout": "library"}, metric="mean", score="label")
    auc_col = Column("a", "AUROC", "r", {"readout": "library"}, metric="auroc")
    diff_col = Column("d", "Δ", "r", {"readout": "moved"}, metric="auroc", minus={"readout": "library"})
    med_col = Column("s", "Mass", "r", {"readout": "library"}, stat="median", column="option_mass")
    config = _config([mean_col, auc_col, diff_col, med_col], [Average("avg", "all")])
    cks = [Checkpoint("a", "ma"), Checkpoint("b", "mb")]
    table = aggregate(config, cks, {"a": {"r": a}, "b": {"r": b}})
    counts = resample(4, 50, 3).counts  # units q0..q3 pooled over checkpoints, first appearance order
    ra, rb, avg = table.rows
    assert [r.name for r in table.rows] == ["a", "b", "avg"] and avg.kind == "average" and avg.members == ("a", "b")

    # mean: per checkpoint the weighted mean on each replicate
    ya, yb = np.array([1, 0, 1, 0.0]), np.array([0, 0, 1.0])
    assert ra.cells["m"].estimate == pytest.approx(0.5, rel=FLOAT64_RTOL)
    np.testing.assert_allclose(ra.cells["m"].replicates, (counts * ya).sum(1) / counts.sum(1), rtol=FLOAT64_RTOL)
    wb = counts[:, 1:]
    with np.errstate(invalid="ignore", divide="ignore"):
        expect_b = (wb * yb).sum(1) / wb.sum(1)
    np.testing.assert_allclose(rb.cells["m"].replicates, expect_b, rtol=FLOAT64_RTOL)
    assert rb.cells["m"].n == 3
    # the average: mean of the estimates; interval = percentiles of the per-replicate means
    reps = (ra.cells["m"].replicates + rb.cells["m"].replicates) / 2
    valid = reps[np.isfinite(reps)]
    low, high = np.quantile(valid, [0.025, 0.975])
    assert avg.cells["m"].estimate == pytest.approx((0.5 + 1 / 3) / 2, rel=FLOAT64_RTOL)
    assert avg.cells["m"].low == pytest.approx(low, rel=FLOAT64_RTOL) and avg.cells["m"].high == pytest.approx(high, rel=FLOAT64_RTOL)
    assert avg.cells["m"].n_invalid == int(reps.size - valid.size)

    # AUROC of checkpoint a, and the paired difference moved - library, replicate by replicate
    sa = np.array([0.9, 0.2, 0.7, 0.4])
    sm = np.array([0.8, 0.3, 0.6, 0.1])
    assert ra.cells["a"].estimate == pytest.approx(float(auroc(sa, ya)), rel=FLOAT64_RTOL)
    np.testing.assert_allclose(ra.cells["a"].replicates, auroc(sa, ya, counts), rtol=FLOAT64_RTOL, equal_nan=True)
    assert ra.cells["d"].estimate == pytest.approx(float(auroc(sm, ya)) - float(auroc(sa, ya)), abs=FLOAT64_ATOL)
    np.testing.assert_allclose(ra.cells["d"].replicates, auroc(sm, ya, counts) - auroc(sa, ya, counts), atol=FLOAT64_ATOL, equal_nan=True)
    # descriptive: the median, no interval; averaged as a plain mean
    assert ra.cells["s"].estimate == pytest.approx(0.55, rel=FLOAT64_RTOL) and math.isnan(ra.cells["s"].low)
    assert avg.cells["s"].estimate == pytest.approx((0.55 + 0.4) / 2, rel=FLOAT64_RTOL)
    assert table.leave_one_out["avg"]["s"]["without"] == {"a": pytest.approx(0.4, rel=FLOAT64_RTOL), "b": pytest.approx(0.55, rel=FLOAT64_RTOL)}


def test_cells_by_hand_edge_cases():
    col = Column("a", "AUROC", "r", {"readout": "library"}, metric="auroc")
    counts = shared_counts(2, 10, 0)
    one_class = metric_cell(_rows([0.1, 0.9], [1, 1]), col, "ptrue", {"q0": 0, "q1": 1}, counts)
    assert math.isnan(one_class.estimate) and one_class.n == 2 and one_class.n_invalid == 10
    empty = metric_cell([], col, "ptrue", {}, counts)
    assert math.isnan(empty.estimate) and empty.n == 0
    rows = [{"v": "option"}, {"v": "prose"}, {"v": "option"}, {"v": None}]
    assert stat_cell(rows, Column("s", "S", "r", stat="share", column="v", equals="option")).estimate == pytest.approx(0.5, rel=FLOAT64_RTOL)
    assert stat_cell(rows, Column("c", "C", "r", stat="count")).estimate == 4
    assert math.isnan(average_cell([Cell(0.5), Cell(math.nan)]).estimate)  # undefined when a member is


def test_an_average_without_members_is_left_out_and_one_member_is_said():
    col = Column("s", "S", "r", {"readout": "library"}, stat="mean", column="score")
    config = _config([col], [Average("Qwen3 average", "group:qwen3"), Average("All", "all")])
    table = aggregate(config, [Checkpoint("a", "m")], {"a": {"r": _rows([0.2, 0.4], [0, 1])}})
    assert [r.label for r in table.rows] == ["a", "All (1 checkpoint)"]


# ------------------------------------------------------------------------------------------------
# the writers, exactly
# ------------------------------------------------------------------------------------------------


def _small_table() -> TableResult:
    cols = (
        Column("auroc", "AUROC (stem)", "f", metric="auroc"),
        Column("mass", "Mass_1 & 2", "f", stat="median", column="option_mass"),
        Column("n", "Items", "f", stat="count"),
    )
    rows = (
        TableRow("m1", "M1", "checkpoint", ("m1",), {"auroc": Cell(0.6125, 0.5, 0.75, 10), "mass": Cell(0.25, n=10), "n": Cell(10.0, n=10)}),
        TableRow("m2", "M2", "checkpoint", ("m2",), {"auroc": Cell(math.nan, n=10), "mass": Cell(0.5, n=10), "n": Cell(10.0, n=10)}),
        TableRow("avg", "Average", "average", ("m1", "m2"), {"auroc": Cell(math.nan), "mass": Cell(0.375, n=2), "n": Cell(10.0, n=2)}),
    )
    return TableResult("t9", "Table 9: small", cols, rows, paper={"m1": {"auroc": 0.7}}, digits=2, level=0.95, B=100, seed=0, notes=("a note",))


CAPTION = (
    "Intervals: 95% percentile bootstrap, 100 replicates (seed 0) shared by every checkpoint of a run; averages are means "
    "over checkpoints on the same replicates. paper: the paper's value where known."
)


def test_markdown_exactly():
    assert to_markdown(_small_table()) == (
        "# Table 9: small\n\n"
        "| Checkpoint | AUROC (stem) | paper | Mass_1 & 2 | paper | Items | paper |\n"
        "|---|---|---|---|---|---|---|\n"
        "| M1 | 0.61 [0.50, 0.75] | 0.70 | 0.25 | — | 10 | — |\n"
        "| M2 | — | — | 0.50 | — | 10 | — |\n"
        "| Average | — | — | 0.38 | — | 10 | — |\n"
        f"\n{CAPTION}\n- a note\n"
    )


def test_csv_exactly():
    text = to_csv(_small_table())
    assert text.splitlines()[0] == (
        "row,label,kind,members,auroc,auroc_low,auroc_high,auroc_n,auroc_paper,mass,mass_low,mass_high,mass_n,mass_paper,n,n_low,n_high,n_n,n_paper"
    )
    assert text.splitlines()[1:] == [
        "m1,M1,checkpoint,m1,0.6125,0.5,0.75,10,0.7,0.25,,,10,,10.0,,,10,",
        "m2,M2,checkpoint,m2,,,,10,,0.5,,,10,,10.0,,,10,",
        "avg,Average,average,m1;m2,,,,,,0.375,,,2,,10.0,,,2,",
    ]
    assert len(list(csv.reader(io.StringIO(text)))) == 4


def test_latex_exactly():
    assert to_latex(_small_table()) == (
        "\\begin{table}[t]\n"
        "\\centering\n"
        f"\\caption{{Table 9: small. {CAPTION}}}\n".replace("%", "\\%")
        + "\\label{tab:t9}\n"
        "\\begin{tabular}{lrrrrrr}\n"
        "\\toprule\n"
        "Checkpoint & AUROC (stem) & paper & Mass\\_1 \\& 2 & paper & Items & paper \\\\\n"
        "\\midrule\n"
        "M1 & 0.61 [0.50, 0.75] & 0.70 & 0.25 & -- & 10 & -- \\\\\n"
        "M2 & -- & -- & 0.50 & -- & 10 & -- \\\\\n"
        "\\midrule\n"
        "Average & -- & -- & 0.38 & -- & 10 & -- \\\\\n"
        "\\bottomrule\n"
        "\\end{tabular}\n"
        "\\end{table}\n"
    )


# ------------------------------------------------------------------------------------------------
# end to end: every shipped table for the bundled model, offline, on the shipped fixtures
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_shipped_table_is_written_for_the_bundled_model(tmp_path, monkeypatch):
    from sleight.cli.main import main
    from sleight.readout.reproduce import ModelCache, ModelSettings, reproduce

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = ModelCache(ModelSettings())
    out = tmp_path / "out"
    try:
        results = {t: reproduce(t, out, models=["smollm2-135m-instruct"], limit=1, B=50, cache=cache, status=lambda _m: None) for t in shipped_tables()}
    finally:
        cache.close()
    assert cache.loads == 1  # one model for every table; runs shared between tables are copied, not redone
    for name, res in results.items():
        config = load_table(name)
        folder = out / name
        assert {"table.md", "table.csv", "table.tex", "table.json"} <= {p.name for p in folder.iterdir()}
        assert (folder / "smollm2-135m-instruct" / "runs.json").is_file()
        for run in config.runs:
            assert (folder / "smollm2-135m-instruct" / run / "readings.parquet").is_file()
        md = (folder / "table.md").read_text(encoding="utf-8").splitlines()
        header = md[2]
        assert header == "| Checkpoint | " + " | ".join(f"{c.label} | paper" for c in config.columns) + " |"
        labels = [r.label for r in res.table.rows]
        assert labels[0] == "smollm2-135m-instruct" and all(lab.endswith("(1 checkpoint)") for lab in labels[1:])
        assert any("shipped fixture" in line for line in md)  # the data is said, not passed off as the paper's
        rows = list(csv.DictReader(io.StringIO((folder / "table.csv").read_text(encoding="utf-8"))))
        assert [r["row"] for r in rows] == [r.name for r in res.table.rows]
        tex = (folder / "table.tex").read_text(encoding="utf-8")
        assert tex.count("\\\\\n") == 1 + len(res.table.rows) and "\\begin{tabular}{l" + "rr" * len(config.columns) + "}" in tex
    # the point estimates are the run's own: P(True) AUROC of Library on constructed answers = summary.json's
    import json

    summary = json.loads((out / "table13" / "smollm2-135m-instruct" / "ptrue-mmlu" / "summary.json").read_text())
    mine = results["table13"].table.rows[0].cells["auroc_library"].estimate
    theirs = summary["settings"]["constructed"]["readouts"]["library"]["auroc"]["estimate"]
    assert (mine == pytest.approx(theirs, rel=FLOAT64_RTOL)) if theirs is not None else math.isnan(mine)
    # a rerun resumes: nothing left, no model loaded, the same table written
    before = (out / "table2" / "table.csv").read_text()
    assert main(["readout", "reproduce", "table2", "--models", "smollm2-135m-instruct", "--limit", "1", "--B", "50", "--out", str(out), "--no-progress"]) == 0
    assert (out / "table2" / "table.csv").read_text() == before
