"""Table 11 (App. F), App. G and App. E's estimators as reproduce runs: the rules each follows, on the
real bundled model where one is involved, and the resume of their run directories."""

from __future__ import annotations

import dataclasses
import math
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from sleight.readout.reproduce.aggregate import stat_cell
from sleight.readout.reproduce.config import Column, load_table
from sleight.readout.scan import grades
from sleight.readout.scan.run import READINGS, ROWS_DIR, ScanConfig, part_key, run_scan
from sleight.readout.scan.scorers import get_scorer, geval_dimension, records_from_data, scorer_items
from sleight.stats.downstream import log_median
from sleight.stats.rank import spearman_rows
from sleight.tamper.report import paper
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=FLOAT64_RTOL, abs_tol=FLOAT64_ATOL)


# -- Spearman: one implementation (sleight.stats.rank), both callers -------------------------------
def test_spearman_by_hand_and_both_callers_share_it() -> None:
    # ranks (1,2,3,4) vs (1,3,2,4): d = (0,1,1,0), rho = 1 - 6*2 / (4*(16-1)) = 0.8
    x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 30.0, 20.0, 40.0])
    assert close(float(spearman_rows(x, y)), 0.8)
    assert close(grades.spearman(x, y), 0.8)
    assert close(float(paper.spearman(x, y)), 0.8)
    assert paper._spearman_rows is spearman_rows
    assert math.isnan(float(spearman_rows(x, np.ones(4))))  # no spread: undefined, never 0
    assert grades.spearman(x, [5.0] * 4) is None


def test_app_g_rho_is_within_each_document_then_averaged() -> None:
    """App. G: Spearman within each document across its summaries, averaged over the documents where
    it is defined (a constant human rating leaves its document out)."""
    rows = [
        *({"doc_id": "a", "score_first": s, "human": h} for s, h in zip([1, 2, 3], [1, 2, 3])),  # rho 1
        *({"doc_id": "b", "score_first": s, "human": h} for s, h in zip([1, 2, 3], [2, 3, 1])),  # ranks (2,3,1): rho -0.5
        *({"doc_id": "c", "score_first": s, "human": h} for s, h in zip([1, 2, 3], [4, 4, 4])),  # constant: undefined
    ]
    cell = stat_cell(rows, Column(key="k", label="k", run="r", stat="doc_spearman", column="score_first", target="human"))
    assert close(cell.estimate, (1.0 - 0.5) / 2) and cell.n == 2


def _app_g_rows() -> list[dict[str, object]]:
    """Three documents: G-Eval's score (score_first) and the repaired one (score_full_spaced) against the
    human grade; document c's grade is constant, so neither rho exists there (App. G's missing documents)."""
    rows = []
    for doc, first, spaced, human in (
        ("a", [1, 2, 3], [1, 3, 2], [1, 2, 3]),  # rho_first 1, rho_spaced 0.5
        ("b", [1, 2, 3], [3, 1, 2], [2, 3, 1]),  # rho_first -0.5, rho_spaced -0.5
        ("c", [1, 2, 3], [1, 2, 3], [4, 4, 4]),  # undefined for both
    ):
        rows += [{"doc_id": doc, "score_first": f, "score_full_spaced": g, "human": h} for f, g, h in zip(first, spaced, human)]
    return rows


def test_app_g_delta_rho_is_a_paired_document_bootstrap() -> None:
    """App. G: Δρ = ρ(bare first token) − ρ(space-prefixed sequence), each averaged over the documents
    where it is defined; every replicate draws documents and recomputes both averages on the same draw."""
    from sleight.readout.reproduce.aggregate import doc_rho_cell, shared_counts, unit_index

    rows = _app_g_rows()
    col = Column(key="d", label="d", run="g", metric="doc_spearman", score="score_first", minus_score="score_full_spaced", target="human")
    units = unit_index({"ck": rows}, "doc_id")
    counts = shared_counts(len(units), 10_000, 0)
    cell = doc_rho_cell(rows, col, units, counts)
    assert close(cell.estimate, (1.0 - 0.5) / 2 - (0.5 - 0.5) / 2) and cell.n == 2
    # each replicate by hand: documents a and b weighted by their draws (c never counts)
    wa, wb = counts[:, units["a"]].astype(float), counts[:, units["b"]].astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        by_hand = (wa * 1.0 + wb * -0.5) / (wa + wb) - (wa * 0.5 + wb * -0.5) / (wa + wb)
    assert np.allclose(cell.replicates, by_hand, rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL, equal_nan=True)
    ok = by_hand[np.isfinite(by_hand)]
    assert close(cell.low, float(np.percentile(ok, 2.5))) and close(cell.high, float(np.percentile(ok, 97.5)))
    missing = stat_cell(rows, Column(key="m", label="m", run="g", stat="doc_undefined", column="score_first", target="human"))
    assert missing.estimate == 1 and missing.n == 3


def test_app_g_config_prints_its_summaries_beside_the_paper() -> None:
    """App. G prints the range and signs of its 28 cells: each is a summary with the printed number, over
    Δρ columns bootstrapped 10,000 times by document."""
    from sleight.readout.reproduce.aggregate import Cell, TableRow, summary_cell

    config = load_table("appendix-g")
    assert (config.B, config.seed) == (10_000, 0)
    drho = [c for c in config.columns if c.metric == "doc_spearman"]
    assert [c.where["preset"] for c in drho] == [f"geval:{d}" for d in ("coherence", "consistency", "fluency", "relevance")]
    assert all((c.score, c.minus_score) == ("score_first", "score_full_spaced") for c in drho)
    # the scored position only: one greedy token (the audit's least), no column read from a continuation
    assert config.runs["geval"].settings["max_new_tokens"] == 1
    assert {c.column for c in config.columns if c.column} == {"argmax_option", "score_first", "score_full_spaced", "distinct"}
    printed = {s.key: s.paper for s in config.summaries}
    assert printed == {
        "rho_low": -0.0598, "rho_high": 0.6306, "drho_low": -0.2194, "drho_high": 0.0831, "drho_negative": 19, "drho_positive": 9,
        "drho_excluding_zero": 14, "argmax_rows": 0, "missing_all": 42, "missing_consistency_all": 28, "missing_fluency_all": 14, "distinct_all": 1,
    }
    rows = [
        TableRow("x", "x", "checkpoint", ("x",), {"d1": Cell(-0.2, -0.3, -0.1), "d2": Cell(0.05, -0.01, 0.1)}),
        TableRow("y", "y", "checkpoint", ("y",), {"d1": Cell(0.1, 0.02, 0.2), "d2": Cell(math.nan)}),
        TableRow("avg", "avg", "average", ("x", "y"), {"d1": Cell(-5.0, -6.0, -4.0), "d2": Cell(9.0)}),  # not a checkpoint: not read
    ]
    summaries = {s.how: s for s in config.summaries}

    def value(how: str) -> tuple[float, int]:
        sc = summary_cell(dataclasses.replace(summaries[how], columns=("d1", "d2")), rows)
        return sc.value, sc.n

    assert value("min") == (-0.2, 3) and value("max") == (0.1, 3) and close(value("sum")[0], -0.05)
    assert value("negative") == (1, 3) and value("positive") == (2, 3) and value("excludes_zero") == (2, 3)


def test_app_g_table_computes_its_summaries_and_writes_them(tmp_path) -> None:
    """App. G end to end without a model: two checkpoints' hand-built rows on the four dimensions give
    Δρ cells with paired document intervals, and the summaries (with their differences from the
    printed numbers) reach table.md and table.json."""
    import json

    from sleight.readout.reproduce.aggregate import aggregate
    from sleight.readout.reproduce.runner import write_table

    config = load_table("appendix-g")
    base = _app_g_rows()
    rows = [
        {**r, "preset": f"geval:{d}", "item_id": f"{d}:{i}", "argmax_option": False, "distinct": True}
        for d in ("coherence", "consistency", "fluency", "relevance") for i, r in enumerate(base)
    ]
    cks = config.checkpoints[:2]
    result = aggregate(config, cks, {ck.name: {"geval": rows} for ck in cks}, B=200)
    got = {sc.summary.key: (sc.value, sc.n) for sc in result.summaries}
    assert got["drho_low"] == (0.25, 8) and got["drho_high"] == (0.25, 8) and got["drho_positive"] == (8, 8)
    assert got["argmax_rows"] == (0, 2) and got["missing_all"] == (8, 8) and got["distinct_all"] == (1, 8)
    files = write_table(result, tmp_path)
    md = files["table.md"].read_text(encoding="utf-8")
    assert "Across the checkpoints' cells" in md and "| Highest Δρ | 0.250 | 0.083 | +0.167 | 8 |" in md
    record = json.loads(files["table.json"].read_text(encoding="utf-8"))
    low = next(x for x in record["summaries"] if x["key"] == "drho_low")
    assert low["paper"] == -0.2194 and math.isclose(low["difference"], 0.25 + 0.2194)


def test_table11_median_is_log_scale() -> None:
    """Table 11: 10^median(log10 mu), linear interpolation on the log scale."""
    assert close(log_median([1e-4, 1e-2]), 1e-3)
    cell = stat_cell([{"mass": 1e-6}, {"mass": 1e-2}, {"mass": None}], Column(key="k", label="k", run="r", stat="log_median", column="mass"))
    assert close(cell.estimate, 1e-4) and cell.n == 2


# -- the templates ---------------------------------------------------------------------------------
def test_app_g_four_geval_prompts() -> None:
    """App. G: G-Eval's four SummEval dimensions, each ending at its own '- Dimension:' with no separator;
    fluency on 1-3, the others on 1-5."""
    for dim in ("coherence", "consistency", "fluency", "relevance"):
        p = geval_dimension(dim)
        items = scorer_items(p.name, [{"id": "d:0", "document": "An article.", "summary": "A summary.", dim: 3.0, "doc_id": "d"}])
        text = items[0].messages[-1]["content"]
        assert text.endswith(f"- {dim.capitalize()}:") and "An article." in text and "A summary." in text
        assert items[0].target == 3.0
        assert p.options == (("1", "2", "3") if dim == "fluency" else ("1", "2", "3", "4", "5"))
    assert get_scorer("geval:coherence").options == get_scorer("geval").options


def test_table11_specifications_end_where_app_f_says(model) -> None:
    """App. F: G-Eval, Zhuang and Kadavath are completion prompts ending at '- Coherence:', 'Output:' and
    'The proposed answer is:'; AlpacaEval goes through the checkpoint's chat template; Kadavath's question
    is the stem without lettered choices or instruction."""
    from sleight.readout.audit.variants import make_variant, render
    from sleight.readout.data import load_data
    from sleight.readout.data.fixtures import fixtures_dir

    spec = load_table("table11").runs["scan"].fixture_spec()
    recs = load_data(spec).view("forecast", 1)
    ends = {"geval": "- Coherence:", "relevance": "Output:", "kadavath": "The proposed answer is:"}
    for name in ("geval", "relevance", "alpacaeval", "kadavath"):
        preset = get_scorer(name)
        item = scorer_items(name, records_from_data(preset, recs))[0]
        ctx = render(model, make_variant(item, "original"))
        if name in ends:
            assert not item.chat_template and ctx.endswith(ends[name])
        else:
            assert item.chat_template and ctx.startswith(model.render_chat(list(item.messages)).text[:20])
    kad = scorer_items("kadavath", records_from_data(get_scorer("kadavath"), recs))[0].messages[-1]["content"]
    assert recs[0]["question"] in kad and "A: " not in kad and "Answer with exactly one of" not in kad
    assert fixtures_dir().is_dir()


# -- the run directories resume -------------------------------------------------------------------
def test_a_killed_scan_resumes_at_the_preset_not_done(model, tmp_path) -> None:
    """A scan commits one part per preset: with one preset's part lost (a kill before its commit) the
    rerun redoes only that preset, and a finished scan loads no model."""
    from sleight.readout.data.fixtures import fixtures_dir

    data = f"race-h:{fixtures_dir()}/ehovy/race/high/test-00000-of-00001.parquet"
    config = ScanConfig(presets=("kadavath", "relevance"), limit=1, data=data)
    first = run_scan(model, tmp_path, config, show_progress=False, B=20)
    assert first.new_presets == 2 and (tmp_path / READINGS).is_file()
    (tmp_path / "parts" / f"{part_key('relevance')}.parquet").unlink()
    (tmp_path / ROWS_DIR / f"{part_key('relevance')}.json").unlink()
    shutil.rmtree(tmp_path / part_key("relevance"))
    calls = []

    def load():
        calls.append(1)
        return model

    again = run_scan(load, tmp_path, config, show_progress=False, B=20)
    assert calls == [1] and again.new_presets == 1
    assert again.readings == first.readings
    done = run_scan(lambda: pytest.fail("a finished scan must not load the model"), tmp_path, config, show_progress=False, B=20)
    assert done.new_presets == 0 and done.readings == first.readings
    assert pq.read_table(tmp_path / READINGS).num_rows == 2


def test_a_killed_estimators_run_resumes_at_the_chunk_not_done(model, tmp_path) -> None:
    """App. E's estimators run commits one part per chunk of questions; a lost part is redone alone."""
    from sleight.readout.items import DEFAULT_QA_ITEMS, load_qa_items
    from sleight.readout.ptrue.estimators import CHUNK, run_estimators_dir
    from sleight.readout.ptrue.estimators import READINGS as EST_READINGS

    items = load_qa_items(DEFAULT_QA_ITEMS, limit=CHUNK + 1)
    assert len(items) == CHUNK + 1
    first = run_estimators_dir(lambda: model, items, tmp_path, samples=1, max_new_tokens=8, B=20)
    assert first.new_chunks == 2 and (tmp_path / EST_READINGS).is_file()
    (tmp_path / "parts" / f"{CHUNK:05d}.parquet").unlink()
    again = run_estimators_dir(lambda: model, items, tmp_path, samples=1, max_new_tokens=8, B=20)
    assert again.new_chunks == 1 and repr(again.readings) == repr(first.readings)  # repr: NaN equals NaN
    done = run_estimators_dir(lambda: pytest.fail("a finished run must not load the model"), items, tmp_path, samples=1, max_new_tokens=8, B=20)
    assert done.new_chunks == 0
    scorers = {r["scorer"] for r in first.readings}
    assert {"MaximumSequenceProbability", "ptrue_moved", "ptrue_renormalised"} <= scorers
