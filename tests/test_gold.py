"""The human gold subset end to end: ``tamper gold`` draws a stratified sample, people label three
trials in the viewer's labelling mode (headless Chromium, from ``file://``: no server), the page
exports a JSON file, and ``tamper report --gold`` gives the κ scikit-learn gives on the same labels."""

from __future__ import annotations

import json
import math
import shutil
import time
import urllib.request
import warnings

import pandas as pd
import pytest

from chromium import Chromium, Page, chromium_binary
from report_artifacts import judged_report
from sleight.errors import UserError
from sleight.tamper.jury import gold
from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.prompt import LABELS
from tamper_artifacts import sleight
from tolerances import FLOAT64_ATOL

pytestmark = pytest.mark.slow  # whole-run fixtures (a judged run, Chromium)



@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """A private copy of a run judged by three scripted jurors, with a gold sample of 3 and a report."""
    judged = judged_report(tmp_path_factory)
    base = tmp_path_factory.mktemp("gold")
    run = base / "run"
    shutil.copytree(judged.runs[0], run)
    proc = sleight("tamper", "gold", str(run), "--sample", "3", "--seed", "7")
    sleight("tamper", "report", str(run), "--out", str(base / "report"))
    return run, base, proc.stdout


def test_the_sample_is_stratified_by_the_jury_labels(sampled):
    run, _, stdout = sampled
    keys = gold.load_sample(run)
    assert len(keys) == 3 == len(set(keys)) and "drew 3 of" in stdout
    v = jury_store.load_verdicts(run)
    strata = {gold.stratum(r) for r in v.to_dict("records")}
    picked = {gold.stratum(r) for r in v.to_dict("records") if (r["question_id"], r["substitute"]) in set(keys)}
    assert len(picked) == min(3, len(strata))  # one from each of the most common strata first
    again = gold.draw_sample(v, 3, 7)
    assert list(zip(again["question_id"], again["substitute"])) == keys  # the seed fixes the sample


def test_allocation_is_proportional_with_one_per_stratum():
    assert gold.allocate({"a": 10, "b": 1, "c": 1}, 4) == {"a": 2, "b": 1, "c": 1}
    assert gold.allocate({"a": 10, "b": 10}, 3) in ({"a": 2, "b": 1}, {"a": 1, "b": 2})
    assert gold.allocate({"a": 2, "b": 1}, 10) == {"a": 2, "b": 1}
    assert sum(gold.allocate({"a": 5, "b": 3, "c": 1, "d": 1}, 2).values()) == 2


def _browser_page(c: Chromium) -> Page:
    with urllib.request.urlopen(f"http://127.0.0.1:{c.port}/json/version", timeout=10) as r:
        return Page(json.loads(r.read())["webSocketDebuggerUrl"])


def test_label_three_trials_in_chromium_export_and_report_kappa_equals_sklearn(sampled, tmp_path):
    from sklearn.metrics import cohen_kappa_score

    run, base, _ = sampled
    binary = chromium_binary()
    if binary is None:
        pytest.fail("chromium is not installed (make test installs Debian's chromium package)")
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    viewer = next((base / "report" / "models").glob("*.html"))
    c = Chromium(binary)
    try:
        browser = _browser_page(c)
        browser.call("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))
        page = c.new_page()
        page.goto(viewer.as_uri())
        page.wait_for("document.querySelectorAll('#trial-list tbody tr').length > 0")
        page.eval("document.getElementById('label-mode').click()")
        page.wait_for("document.getElementById('gold-form')")
        listed = page.eval("Array.from(document.querySelectorAll('#trial-list tbody tr')).map(r => [r.dataset.q, r.dataset.sub])")
        assert sorted(map(tuple, listed)) == sorted(gold.load_sample(run))  # only the drawn trials
        assert page.eval("document.querySelector('#detail table.votes') === null")  # the jury's votes are hidden
        assert page.eval("document.querySelectorAll('#trial-list .badge').length") == 0
        labelled = {}
        for i in range(3):
            q = page.eval("decodeURIComponent(new URLSearchParams(location.hash.slice(1)).get('q'))")
            sub = page.eval("new URLSearchParams(location.hash.slice(1)).get('s')")
            want = {"flagged": i % 2 == 0, "corrected": i != 1, "derailed": i == 1, "switch_aware": i == 2}
            for label, on in want.items():
                page.eval(f"(() => {{ const b = document.getElementById('gold-{label}'); if (b.checked !== {str(on).lower()}) b.click(); }})()")
            labelled[(q, sub)] = want
            page.eval("document.getElementById('gold-save').click()")
            page.wait_for(f"document.getElementById('gold-count').textContent.startsWith('{i + 1} labelled')")
        assert page.eval("document.querySelectorAll('#trial-list tr.labelled').length") == 3
        page.eval("document.getElementById('gold-export').click()")
        deadline = time.monotonic() + 20
        files: list = []
        while time.monotonic() < deadline:
            files = [p for p in downloads.iterdir() if p.suffix == ".json"]
            if files:
                break
            time.sleep(0.1)
        page.close()
        browser.close()
    finally:
        c.close()
    assert len(files) == 1 and files[0].name.startswith("gold-")
    exported = json.loads(files[0].read_text())
    assert exported["format"] == "sleight-gold" and len(exported["labels"]) == 3
    assert {(r["question_id"], r["substitute"]): {k: r[k] for k in LABELS} for r in exported["labels"]} == labelled

    out = tmp_path / "report"
    sleight("tamper", "report", str(run), "--out", str(out), "--no-site", "--gold", str(files[0]))
    table = pd.read_csv(out / "gold.csv")
    votes = jury_store.load_judgements(run)
    verdicts = jury_store.load_verdicts(run)
    jury = json.loads((run / jury_store.JURY_META).read_text())["jury"]
    finite = 0
    for label in LABELS:
        for rater in [*jury, "jury"]:
            row = table[(table["Label"] == label) & (table["Rater"] == rater)].iloc[0]
            people, theirs = [], []
            for (q, sub), want in labelled.items():
                if rater == "jury":
                    v = verdicts[(verdicts["question_id"] == q) & (verdicts["substitute"] == sub)][label].iloc[0]
                else:
                    m = votes[(votes["question_id"] == q) & (votes["substitute"] == sub) & (votes["juror"] == rater)].iloc[0]
                    v = None if m["abstained"] else m[label]
                if v is not None and not pd.isna(v):
                    people.append(want[label])
                    theirs.append(bool(v))
            assert row["n"] == len(people) and row["Not voted"] == 3 - len(people)
            if people:
                assert row["Accuracy %"] == pytest.approx(100.0 * sum(a == b for a, b in zip(people, theirs)) / len(people))
                with warnings.catch_warnings():  # sklearn warns where κ is 0/0
                    warnings.simplefilter("ignore")
                    expected = cohen_kappa_score(people, theirs)
                if math.isnan(expected):
                    assert math.isnan(row["κ"])
                else:
                    assert row["κ"] == pytest.approx(expected, abs=FLOAT64_ATOL)
                    finite += 1
    assert finite > 0  # some κ is defined on these labels
    md = (out / "leaderboard.md").read_text()
    assert "Agreement with people" in md


def test_bad_gold_files_are_one_line(sampled, tmp_path):
    run, _, _ = sampled
    bad = tmp_path / "bad.json"
    for text, why in (
        ("{nope", "not valid JSON"),
        ('{"format": "other"}', "not a gold file"),
        ('{"format": "sleight-gold", "labels": []}', "has no labels"),
        ('{"format": "sleight-gold", "labels": [{"question_id": "q1", "substitute": "x", "flagged": "yes"}]}', "no true/false"),
    ):
        bad.write_text(text)
        with pytest.raises(UserError, match=why):
            gold.read_gold(bad)
    bad.write_text(json.dumps({"format": "sleight-gold", "model": "someone-else", "labels": [dict.fromkeys(LABELS, True) | {"question_id": "q", "substitute": "s"}]}))
    proc = sleight("tamper", "report", str(run), "--out", str(tmp_path / "r"), "--no-site", "--gold", str(bad), check=False)
    assert proc.returncode == 2 and "which none of the runs is" in proc.stderr and "Traceback" not in proc.stderr
    proc = sleight("tamper", "report", str(run), "--out", str(tmp_path / "r"), "--gold", str(tmp_path / "missing.json"), check=False)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
