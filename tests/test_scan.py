"""``sleight readout scan`` on the real default model: the study's failure modes are detected, and
the report (Markdown + HTML, one row per preset, drill-down links) holds up in headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chromium import Chromium, chromium_binary
from sleight.cli.main import main
from sleight.position import read_positions
from sleight.readout.audit.variants import make_variant, render
from sleight.readout.scan.run import FLAG_RULES, repaired_context, scan_row
from sleight.readout.scan.scorers import SCORERS, scorer_items
from sleight.readout.scan.text_parsers import first_uppercase_ab, rotation_contrast
from tolerances import MASS_ATOL


def readings(model, name: str, limit: int = 2):
    """The preset's declared, space-prefixed and repaired option sets at its scored positions, and
    the row the scan makes of them (the audit summary reduced to the ending rate it contributes)."""
    preset = SCORERS[name]
    items = scorer_items(name, limit=limit)
    contexts = [render(model, make_variant(i, "original")) for i in items]
    pos = read_positions(model, contexts, [[preset.options, preset.spaced_options]] * len(items))
    rep = read_positions(model, [repaired_context(model, i, c, preset) for i, c in zip(items, contexts)], [[preset.repair.options]] * len(items))
    declared, spaced = [p.option_sets[0] for p in pos], [p.option_sets[1] for p in pos]
    summary = {"variants": {"original": {"n_measured": len(items), "ends_with_whitespace_rate": sum(c[-1].isspace() for c in contexts) / len(contexts)}}}
    row = scan_row(preset, summary, declared, spaced, [r.option_sets[0] for r in rep], report=f"{name}/report.html")
    return declared, spaced, row


@pytest.mark.slow
def test_geval_space_prefixed_grades_share_a_first_token(model):
    declared, spaced, row = readings(model, "geval")
    assert all(s.distinct for s in declared)  # bare 1-5: five first tokens
    space = model.encode(" ")
    for s in spaced:  # " 1" .. " 5" after "- Coherence:": " " then the digit, one shared first token
        assert s.boundary_preserved and not s.distinct
        assert set(s.first_ids) == {space[0]} and all(len(e) == 2 for e in s.encodings)
    assert "space-prefixed labels share a first token" in row.flags
    assert row.spaced.distinct_rate == 0.0


def test_kadavath_options_are_not_scorable_by_first_tokens(model):
    declared, _, row = readings(model, "kadavath")
    for s in declared:  # " (A)" and " (B)": " (" first for both
        assert s.boundary_preserved and not s.distinct and s.first_ids[0] == s.first_ids[1]
        assert model.token_text(s.first_ids[0]) == " ("
    assert "not scorable by first tokens" in row.flags and row.verdict == "fail"
    assert row.repair.position.distinct_rate == 1.0  # after the stem " (": "A" and "B" are their own tokens


@pytest.mark.slow
def test_a_missing_separator_is_flagged_where_the_template_ends_without_whitespace(model):
    for name in ("geval", "relevance"):
        _, _, row = readings(model, name, limit=1)
        assert row.separator_rate == 0.0 and "missing separator" in row.flags, name
    for name in ("kadavath", "alpacaeval"):  # labels carry their space / the chat template ends in "\n"
        _, _, row = readings(model, name, limit=1)
        assert "missing separator" not in row.flags, name


def test_opencompass_grader_reads_the_quoted_items_letter_as_a_verdict(model):
    """o1's gold choice rotated through A-D, the candidate's answer always correct: a grader that
    judges says A every time; on the default model the parsed verdict follows the gold letter."""
    items = scorer_items("opencompass", limit=1)
    assert [i.meta["gold_letter"] for i in items] == ["A", "B", "C", "D"] and all(i.target == 1.0 for i in items)
    gens = model.greedy([model.render_chat(list(i.messages)).ids for i in items], 32)
    replies = []
    for i, g in zip(items, gens):
        text = model.decode(g.token_ids)
        m = re.search("(A|B)", text)  # OpenCompass's own rule, written out
        assert first_uppercase_ab(text) == (m.group(0) if m else "unknown")
        replies.append({"item": i.meta["item"], "gold_letter": i.meta["gold_letter"], "verdict": first_uppercase_ab(text)})
    contrast = rotation_contrast(replies)
    assert contrast.tracking_items == ("o1",)  # A when the gold is A, B when the gold is B
    assert contrast.per_letter["B"].at_gold == 1.0 and contrast.accuracy < 1.0
    assert "letter read as verdict" in FLAG_RULES


# -- the whole scan, its CLI and its report ----------------------------------------------------------
@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    out = tmp_path_factory.mktemp("scan")
    assert main(["readout", "scan", "--limit", "1", "--out", str(out), "--no-progress"]) == 0
    return out


@pytest.mark.slow
def test_scan_writes_one_row_per_preset(scanned):
    data = json.loads((scanned / "scan.json").read_text())
    rows = {r["preset"]: r for r in data["rows"]}
    assert list(rows) == list(SCORERS)
    assert "space-prefixed labels share a first token" in rows["geval"]["flags"]
    assert "not scorable by first tokens" in rows["kadavath"]["flags"]
    assert "missing separator" in rows["geval"]["flags"] and "missing separator" in rows["relevance"]["flags"]
    assert "letter read as verdict" in rows["opencompass"]["flags"]
    for name, r in rows.items():
        assert (scanned / r["report"]).is_file(), name
        audit = json.loads((scanned / name / "summary.json").read_text())["variants"]["original"]
        assert r["declared"]["mass_median"] == pytest.approx(audit["mass_median"], abs=MASS_ATOL), name  # the scan re-reads the audit's position in its own batch
        assert r["argmax_classes"] == audit["argmax_classes"]
    md = (scanned / "scan.md").read_text()
    for name in SCORERS:
        assert f"| [{name}]({name}/report.html) |" in md
    assert "mass as declared" in md and "repair clears floor" in md and "nlpyang/geval" in md


@pytest.mark.slow
def test_scan_report_in_chromium(scanned):
    binary = chromium_binary()
    if binary is None:
        pytest.fail("chromium is not installed (make test installs Debian's chromium package)")
    browser = Chromium(binary)
    page = browser.new_page()
    try:
        page.goto((scanned / "scan.html").as_uri())
        presets = page.eval("Array.from(document.querySelectorAll('#scan tbody tr')).map(r => r.dataset.preset)")
        assert presets == list(SCORERS)
        headers = page.eval("Array.from(document.querySelectorAll('#scan thead th')).map(h => h.textContent)")
        assert headers[:4] == ["preset", "rendering", "parser", "mass as declared"] and "repair clears floor" in headers
        verdicts = page.eval("Array.from(document.querySelectorAll('#scan tbody tr')).map(r => r.cells[9].textContent)")
        assert all(v.split(":")[0].split()[0] in ("PASS", "WARN", "FAIL") for v in verdicts)
        links = page.eval("Array.from(document.querySelectorAll('#scan a.drill')).map(a => a.href)")
        assert len(links) == len(SCORERS)
        for href in links:  # every drill-down resolves to that preset's audit report
            page.goto(href)
            assert page.eval("document.title") == "Readout audit"
            assert page.eval("document.querySelectorAll('section').length") >= 6
            assert Path(href.removeprefix("file://")).is_file()
    finally:
        page.close()
        browser.close()


def test_scan_cli_input_errors(tmp_path, capsys):
    assert main(["readout", "scan", "--items", str(tmp_path / "x.jsonl")]) == 2
    assert "name the preset (PRESET=FILE)" in capsys.readouterr().err
    assert main(["readout", "scan", "--presets", "geval,nope"]) == 2
    assert "unknown scorer preset 'nope'" in capsys.readouterr().err
    assert main(["readout", "scan", "--presets", "geval", "--template", str(tmp_path / "missing.txt")]) == 2
    assert "file not found" in capsys.readouterr().err
