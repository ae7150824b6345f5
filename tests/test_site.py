"""The HTML report in headless Chromium, served by ``sleight tamper view`` on 127.0.0.1."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from urllib.parse import parse_qs

import pandas as pd
import pytest

from chromium import Chromium, chromium_binary
from report_artifacts import judged_report

ROWS = "Array.from(document.querySelectorAll('#t-leaderboard tbody tr'))"


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    return judged_report(tmp_path_factory)


@pytest.fixture(scope="module")
def served(judged):
    """``sleight tamper view REPORT --port 0``: the URL it prints is the one we browse."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sleight.cli.main", "tamper", "view", str(judged.report), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    m = re.search(r"(http://127\.0\.0\.1:\d+)/index\.html", line)
    assert m, f"no URL printed: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
    yield m.group(1)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser():
    binary = chromium_binary()
    if binary is None:
        pytest.fail("chromium is not installed (make test installs Debian's chromium package)")
    c = Chromium(binary)
    yield c
    c.close()


@pytest.fixture()
def page(browser):
    p = browser.new_page()
    yield p
    p.close()


def test_leaderboard_lists_every_model_and_sorts(judged, served, page):
    page.goto(served + "/index.html")
    models = page.eval(f"{ROWS}.map(r => r.cells[0].textContent)")
    expected = pd.read_csv(judged.report / "leaderboard.csv")["Model"].tolist()
    assert sorted(models) == sorted(expected) and len(models) == len(judged.runs)
    assert models == expected  # as written: sorted by flagged
    headers = page.eval("Array.from(document.querySelectorAll('#t-leaderboard thead th')).map(h => h.textContent)")
    for col in ("Model", "Flag. %", "Flag. (M.E.) %", "Ign. %", "Derail. %", "Corr. %", "Switch aware %", "Δsurp. (nats)", "Δent. (nats)"):
        assert col in headers
    # click "Model": alphabetical; click again: reversed
    i = headers.index("Model")
    page.eval(f"document.querySelectorAll('#t-leaderboard thead th')[{i}].click()")
    assert page.eval(f"{ROWS}.map(r => r.cells[0].textContent)") == sorted(models, key=str.lower)
    assert page.eval(f"document.querySelectorAll('#t-leaderboard thead th')[{i}].getAttribute('aria-sort')") == "ascending"
    page.eval(f"document.querySelectorAll('#t-leaderboard thead th')[{i}].click()")
    assert page.eval(f"{ROWS}.map(r => r.cells[0].textContent)") == sorted(models, key=str.lower, reverse=True)
    # a numeric column sorts by value, descending first, then ascending
    for col in ("Δsurp. (nats)", "Eligible"):
        k = headers.index(col)
        page.eval(f"document.querySelectorAll('#t-leaderboard thead th')[{k}].click()")
        vals = page.eval(f"{ROWS}.map(r => parseFloat(r.cells[{k}].getAttribute('data-value')))")
        assert vals == sorted(vals, reverse=True)
        page.eval(f"document.querySelectorAll('#t-leaderboard thead th')[{k}].click()")
        vals = page.eval(f"{ROWS}.map(r => parseFloat(r.cells[{k}].getAttribute('data-value')))")
        assert vals == sorted(vals)
    # the model links open the viewers
    hrefs = page.eval(f"{ROWS}.map(r => r.cells[0].querySelector('a').getAttribute('href'))")
    assert all(h.startswith("models/") and h.endswith(".html") for h in hrefs)


def _first_viewer(judged) -> str:
    html = (judged.report / "index.html").read_text()
    return re.search(r'href="(models/[^"]+\.html)"', html).group(1)


def test_viewer_shows_a_highlighted_swap_the_clean_reply_and_votes(judged, served, page):
    href = _first_viewer(judged)
    page.goto(f"{served}/{href}")
    page.wait_for("document.querySelector('#detail .reply .swap')")
    sub = parse_qs(page.eval("location.hash.slice(1)"))["s"][0]  # the trial on show
    swapped = page.eval("Array.from(document.querySelectorAll('#detail .reply .swap')).map(e => e.textContent).join('')")
    assert sub.lower().split()[0] in swapped.lower()  # the injected tokens spell the substitute
    # surprisal shown on hover for model-chosen tokens, and as a heat strip
    titles = page.eval("Array.from(document.querySelectorAll('#detail .reply .tok:not(.swap)')).map(e => e.title)")
    assert titles and all(re.match(r"surprisal (\d+\.\d\d|—) nats", t) for t in titles)
    assert page.eval("document.querySelectorAll('#detail .strip span').length") > 0
    # the clean reply beside it, with no swap
    heads = page.eval("Array.from(document.querySelectorAll('#detail h3')).map(h => h.textContent)")
    assert "tampered reply" in heads and "clean reply" in heads
    clean = page.eval("document.querySelectorAll('#detail .pair > div')[1].querySelector('.reply').textContent")
    assert sub.lower() not in clean.lower()
    # the judges' votes and reasons
    jurors = page.eval("Array.from(document.querySelectorAll('#detail table.votes tbody tr')).map(r => r.cells[0].textContent)")
    assert jurors == judged.jury
    reasons = page.eval("Array.from(document.querySelectorAll('#detail table.votes tbody tr')).map(r => r.cells[5].textContent)")
    assert any("alpha read it" in r for r in reasons)


def test_viewer_filters_by_label_question_and_word(judged, served, page):
    href = _first_viewer(judged)
    page.goto(f"{served}/{href}")
    page.wait_for("document.querySelectorAll('#trial-list tbody tr').length > 0")
    data_file = judged.report / href.replace(".html", "") / "trials.js"
    data = json.loads(re.search(r"sleightData\(\"trials\", (.*)\);", data_file.read_text(), re.S).group(1))
    col = {c: i for i, c in enumerate(data["columns"])}
    total = len(data["rows"])
    assert page.eval("document.querySelectorAll('#trial-list tbody tr').length") == total

    def set_filter(id_, value):
        page.eval(
            f"(() => {{ const e = document.getElementById({json.dumps(id_)}); e.value = {json.dumps(value)};"
            " e.dispatchEvent(new Event('input')); })()"
        )
        return page.eval("document.querySelectorAll('#trial-list tbody tr').length")

    assert set_filter("f-label", "flagged") == sum(r[col["flagged"]] == 1 for r in data["rows"])
    assert set_filter("f-label", "not-flagged") == sum(r[col["flagged"]] == 0 for r in data["rows"])
    set_filter("f-label", "")
    q = data["rows"][0][col["q"]]
    assert set_filter("f-question", q) == sum(r[col["q"]] == q for r in data["rows"])
    set_filter("f-question", "")
    word = data["rows"][-1][col["sub"]]
    assert set_filter("f-sub", word) == sum(word.lower() in r[col["sub"]].lower() for r in data["rows"])


def test_pages_stay_light_and_work_from_file(judged, browser):
    models = judged.report / "models"
    for html in models.glob("*.html"):
        assert html.stat().st_size < 20_000  # data are not inlined
    for data in models.rglob("*.js"):
        assert data.stat().st_size < 2_000_000
    p = browser.new_page()
    try:
        p.goto((judged.report / _first_viewer(judged)).as_uri())
        p.wait_for("document.querySelector('#detail .reply .swap')")
    finally:
        p.close()


def test_view_refuses_a_directory_without_a_report(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sleight.cli.main", "tamper", "view", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "no index.html" in proc.stderr


def test_viewer_tokens_spell_the_stored_replies(judged, model):
    """The viewer's per-token pieces join to exactly the stored reply (clean runs included); under the
    study's conventions a reply the model ended also shows its end-of-turn token, which the reply text
    leaves out."""
    from sleight.tamper.report.runs import load_run
    from sleight.tamper.report.site import token_texter

    run = load_run(judged.runs[0])
    texts = token_texter(run)
    assert texts is not None
    ends = {model.decode([e]) for e in model.eos_ids}
    for rec in [*run.trials.to_dict("records"), *run.clean.to_dict("records")]:
        pieces = texts(list(rec["token_ids"]))
        if pieces and pieces[-1] in ends:
            pieces = pieces[:-1]
        assert "".join(pieces) == rec["reply"]
