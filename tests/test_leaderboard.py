"""Table 1 as a reader meets it: counts first (eligible, voted, undecided), "—" rather than 0.0 for
a rate without votes, a warning that cannot be missed, the page fits a 1400 px window (headless
Chromium), and the swap-profile legend draws the clean line dashed as the plot does."""

from __future__ import annotations

import pandas as pd
import pytest

from chromium import Chromium, chromium_binary
from fault_server import scripted
from report_artifacts import judged_report
from sleight.cli.main import main
from sleight.tamper.jury.run import judge_run
from sleight.tamper.report import tables
from tamper_artifacts import copy_run, real_run

WINDOW = 1400


@pytest.fixture(scope="module")
def abstained(tmp_path_factory):
    """A real run judged by a juror that never gives a parsable vote, and its report."""
    base = tmp_path_factory.mktemp("abstained")
    run = copy_run(real_run(tmp_path_factory), base / "run")
    with scripted({"mute": lambda body: "I would rather not say."}) as srv:
        judge_run(run, [srv.spec("mute")], progress=False, conventions="sleight")  # abstentions: no vote, so no rate
    report = base / "report"
    assert main(["tamper", "report", str(run), "--out", str(report)]) == 0
    return run, report


def test_rates_without_a_vote_are_missing_not_zero(abstained):
    _, report = abstained
    board = pd.read_csv(report / "leaderboard.csv")
    row = board.iloc[0]
    assert row["Eligible"] > 0 and row["Voted"] == 0 and row["Undecided"] == row["Eligible"]
    for col in tables.RATE_COLUMNS:
        assert pd.isna(row[col]), col  # empty in the CSV, "—" in the tables
    md = (report / "leaderboard.md").read_text()
    table = md.split("## Table 1 — counts", 1)[1].split("## Table 1 with", 1)[0]
    header, _, body = [ln for ln in table.splitlines() if ln.startswith("|")][:3]
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in body.strip("|").split("|")]))
    assert [cells[c] for c in tables.RATE_COLUMNS] == ["—"] * len(tables.RATE_COLUMNS)
    assert cells["Eligible"] == cells["Undecided"] and cells["Voted"] == "0"
    assert "**Read with care:**" in table and "cast no valid vote" in table
    t2 = pd.read_csv(report / "table2.csv")
    assert t2[["Flag. entity", "Flag. neutral"]].isna().all().all()
    paper_t1 = (report / "leaderboard.md").read_text().split("## Table 1 — main sweep", 1)[1].split("##", 1)[0]
    assert "| — | — | — | — | — | — |" in paper_t1  # the paper's Table 1 says the same: no rate, not 0


@pytest.fixture(scope="module")
def unreadable_study(tmp_path_factory):
    """A real run judged under the study's conventions by a juror whose replies are all unparsable
    (each a false vote by the study's rule), and its report."""
    base = tmp_path_factory.mktemp("unreadable")
    run = copy_run(real_run(tmp_path_factory), base / "run")
    with scripted({"mute": lambda body: "I would rather not say."}) as srv:
        judge_run(run, [srv.spec("mute")], progress=False, conventions="study")
    report = base / "report"
    assert main(["tamper", "report", str(run), "--out", str(report)]) == 0
    return run, report


def test_an_all_unparsable_study_jury_shows_what_the_rule_made_of_the_replies(unreadable_study):
    """Under the study's rule (``scripts/panel_combine.py`` lines 71-75 at 08d2bae: only true votes
    count) every unparsable reply is a false vote, so each trial is decided with every label false:
    Table 1 shows those verdicts (Ign. 100 %, the rest 0 %), not "—", and says why."""
    _, report = unreadable_study
    row = pd.read_csv(report / "leaderboard.csv").iloc[0]
    assert row["Eligible"] > 0 and row["Voted"] == 0 and row["Undecided"] == 0
    assert row["Ign. %"] == 100.0
    assert all(row[col] == 0.0 for col in ("Flag. %", "Derail. %", "Corr. %", "Switch aware %"))
    md = (report / "leaderboard.md").read_text()
    table = md.split("## Table 1 — counts", 1)[1].split("## Table 1 with", 1)[0]
    assert "**Read with care:**" in table and "all abstained" not in table and "rates are missing" not in table
    n = int(row["Eligible"])
    assert f"the jury wrote no readable reply on any of its {n} eligible trials; under the study's rule each unparsable reply is a false vote" in table
    assert f"so {n} of them are decided with every label false (ignored) and its rates are those verdicts." in table


def test_warnings_name_what_the_rates_rest_on():
    t1 = pd.DataFrame(
        [
            {"Model": "a", "Jury": "jury of 3", "n_eligible": 10, "n_voted": 10, "n_undecided": 0},
            {"Model": "b", "Jury": "jury of 3", "n_eligible": 10, "n_voted": 9, "n_undecided": 4},
            {"Model": "c", "Jury": "jury of one", "n_eligible": 6, "n_voted": 0, "n_undecided": 6},
            {"Model": "d", "Jury": "not judged", "n_eligible": 3, "n_voted": 0, "n_undecided": 3},
            {"Model": "e", "Jury": "not judged", "n_eligible": 0, "n_voted": 0, "n_undecided": 0},
            {"Model": "f", "Jury": "jury of 3", "n_eligible": 8, "n_voted": 0, "n_undecided": 2},  # the study's rule: unparsable = false
        ]
    )
    w = tables.table1_warnings(t1)
    assert len(w) == 5 and not any(s.startswith("a:") for s in w)
    assert w[0] == "b: 4 of 10 eligible trials undecided (some label without a majority); they stay in the denominators."
    assert "c: the jury cast no valid vote" in w[1] and "d: not judged yet" in w[2] and "e: no eligible trial" in w[3]
    assert w[4] == (
        "f: the jury wrote no readable reply on any of its 8 eligible trials; under the study's rule each unparsable reply is a "
        "false vote, so 6 of them are decided with every label false (ignored) and its rates are those verdicts; 2 undecided "
        "(a juror has not answered), kept in the denominators."
    )


@pytest.fixture(scope="module")
def browser():
    binary = chromium_binary()
    if binary is None:
        pytest.fail("chromium is not installed (make test installs Debian's chromium package)")
    c = Chromium(binary)
    yield c
    c.close()


GEOMETRY = """(() => {
  const t = document.getElementById('t-leaderboard');
  const heads = Array.from(t.querySelectorAll('thead th'));
  const und = heads.find(h => h.textContent === 'Undecided').getBoundingClientRect();
  const warn = document.querySelector('p.warn');
  return {
    right: t.getBoundingClientRect().right, page: document.documentElement.scrollWidth, window: innerWidth,
    clipped: Array.from(t.querySelectorAll('th, td')).filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent),
    undecided: [und.left, und.right, und.bottom],
    warn: warn ? [warn.getBoundingClientRect().bottom, warn.textContent] : null,
    height: innerHeight,
  };
})()"""


@pytest.mark.slow
def test_table1_fits_a_1400px_window_with_undecided_in_view(tmp_path_factory, abstained, browser):
    reports = [judged_report(tmp_path_factory).report, abstained[1]]
    for report in reports:
        page = browser.new_page()
        try:
            page.call("Emulation.setDeviceMetricsOverride", width=WINDOW, height=900, deviceScaleFactor=1, mobile=False)
            page.goto((report / "index.html").as_uri())
            g = page.eval(GEOMETRY)
        finally:
            page.close()
        assert g["window"] == WINDOW and g["page"] <= WINDOW and g["right"] <= WINDOW, g  # no horizontal scrolling
        assert g["clipped"] == [], g  # every header and cell shows its whole text
        left, right, bottom = g["undecided"]
        assert 0 <= left < right <= WINDOW and bottom <= g["height"], g  # on the first screen
        if report == abstained[1]:
            assert g["warn"] and g["warn"][0] <= g["height"] and "cast no valid vote" in g["warn"][1], g


def test_swap_profile_legend_draws_the_clean_line_dashed():
    from sleight.tamper.report.plots import _pyplot, draw_swap_profile

    rows = [("m", s, k, "surprisal", 1.0 + k / 10, 3) for s in ("tampered", "clean") for k in (-1, 0, 1)]
    fig = draw_swap_profile(pd.DataFrame(rows, columns=["model", "series", "offset", "metric", "mean", "n"]))
    try:
        legend = fig.axes[0].get_legend()
        styles = {t.get_text(): h.get_linestyle() for t, h in zip(legend.get_texts(), legend.legend_handles)}
        plotted = {ln.get_label(): ln.get_linestyle() for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")}
        assert styles == plotted == {"m · tampered": "-", "m · clean": "--"}
        assert legend.handlelength >= 4  # long enough for the dashes to show beside the marker
    finally:
        _pyplot().close(fig)
