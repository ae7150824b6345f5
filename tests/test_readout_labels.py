"""Human labels for readout continuations (docs/readout.md, "Human labels for readout continuations").

The storage (keyed, atomic, resumable, several labellers) and the κ table on hand-made labels, each κ
worked out by hand as a fraction; then one real audit of the bundled model labelled through the page
in headless Chromium, served by the same server ``sleight readout labels`` runs, and
``sleight readout agreement`` on it."""

from __future__ import annotations

import math
import threading
import urllib.error
import urllib.request

import pandas as pd
import pyarrow as pa
import pytest

from chromium import Chromium, chromium_binary
from sleight import rundir
from sleight.errors import UserError
from sleight.jury import store
from sleight.readout.audit import labels, labels_page
from tamper_artifacts import sleight
from tolerances import FLOAT64_ATOL

SUB, DEL, ORIG = "substituted:summarise", "deleted_instruction", "original"
OFFERED = {
    ("i1", SUB): ["instruction", "item", "forecast", "other"],
    ("i2", SUB): ["instruction", "item", "forecast", "other"],
    ("i1", DEL): ["item", "forecast", "other"],
    ("i2", DEL): ["item", "forecast", "other"],
    ("i3", ORIG): ["item", "forecast", "other"],
}
# three people; A labels all five continuations, B and C the first four
PEOPLE = {
    "A": {("i1", SUB): "item", ("i2", SUB): "instruction", ("i1", DEL): "item", ("i2", DEL): "forecast", ("i3", ORIG): "item"},
    "B": {("i1", SUB): "item", ("i2", SUB): "instruction", ("i1", DEL): "other", ("i2", DEL): "item"},
    "C": {("i1", SUB): "item", ("i2", SUB): "other", ("i1", DEL): "other", ("i2", DEL): "other"},
}


def _rows(people=PEOPLE):
    return [{"item_id": k[0], "variant": k[1], "labeller": who, "class": c} for who, mine in people.items() for k, c in mine.items()]


def test_labels_are_stored_keyed_newest_wins_and_several_labellers(tmp_path):
    assert labels.save_labels(tmp_path, _rows(), OFFERED) == 13
    assert labels.save_labels(tmp_path, [{"item_id": "i3", "variant": ORIG, "labeller": " A ", "class": "other"}], OFFERED) == 1
    got = labels.load_labels(tmp_path)
    assert len(got) == 13 and not got.duplicated(list(labels.LABEL_KEY)).any()
    assert got[(got["labeller"] == "A") & (got["item_id"] == "i3")]["class"].tolist() == ["other"]  # relabelled: the newest wins
    assert sorted(got["labeller"].unique()) == ["A", "B", "C"]
    assert len(store.parts(tmp_path / labels.LABELS_DIR)) == 2  # one atomic part per save
    assert labels.compact_labels(tmp_path) == 1 and len(store.parts(tmp_path / labels.LABELS_DIR)) == 1
    assert labels.load_labels(tmp_path).equals(got)

    for bad, why in (
        ({"item_id": "i9", "variant": ORIG, "labeller": "A", "class": "item"}, "not a continuation of this audit"),
        ({"item_id": "i1", "variant": DEL, "labeller": "A", "class": "instruction"}, "not offered"),  # deletions: no 'instruction'
        ({"item_id": "i1", "variant": DEL, "labeller": "", "class": "item"}, "1 to 64 printable"),
        ({"item_id": "i1", "variant": DEL, "labeller": "A\nB", "class": "item"}, "1 to 64 printable"),
    ):
        with pytest.raises(UserError, match=why):
            labels.save_labels(tmp_path, [bad], OFFERED)
    assert len(labels.load_labels(tmp_path)) == 13  # a refused batch stores nothing

    exported = tmp_path / "export.json"
    rundir.write_json(exported, labels.export_obj(got, "aud"))
    other = tmp_path / "other"
    labels.save_labels(other, labels.read_export(exported), OFFERED)
    assert labels.load_labels(other).equals(got)  # export and import round-trip, timestamps kept
    exported.write_text('{"format": "sleight-gold", "labels": []}')
    with pytest.raises(UserError, match="not a readout labels file"):
        labels.read_export(exported)


def test_a_damaged_part_is_one_line_and_set_aside_on_repair(tmp_path):
    labels.save_labels(tmp_path, _rows(), OFFERED)
    (tmp_path / labels.LABELS_DIR / "part-99999999999999999999-1-deadbeef.parquet").write_bytes(b"PAR1 torn")
    with pytest.raises(UserError, match="damaged"):
        labels.load_labels(tmp_path)
    assert len(labels.load_labels(tmp_path, repair=True)) == 13  # the torn write is moved aside, the rest kept
    assert len(labels.load_labels(tmp_path)) == 13


def test_the_sample_is_stratified_by_variant_group_and_jury_class_and_seeded():
    keys = [(f"i{n}", SUB) for n in range(6)] + [(f"i{n}", DEL) for n in range(3)] + [("i0", ORIG)]
    targets = pd.DataFrame([{"item_id": i, "variant": v} for i, v in keys])
    jury = ["instruction"] * 4 + ["item"] * 2 + [None] * 3
    verdicts = pd.DataFrame([{"item_id": i, "variant": v, "jury_class": c} for (i, v), c in zip(keys, jury)])
    one_each = labels.draw_labels_sample(targets, verdicts, 4, 3)
    assert sorted(one_each["stratum"]) == ["deleted jury=none", "other", "substituted jury=instruction", "substituted jury=item"]
    seven = labels.draw_labels_sample(targets, verdicts, 7, 3)  # one each, then by largest remainder: 7·4/10, 7·3/10, ...
    assert seven["stratum"].value_counts().to_dict() == {"substituted jury=instruction": 3, "deleted jury=none": 2, "substituted jury=item": 1, "other": 1}
    assert seven.equals(labels.draw_labels_sample(targets, verdicts, 7, 3))  # the seed fixes the sample
    assert set(labels.draw_labels_sample(targets, None, 3, 0)["stratum"]) == {"substituted", "deleted", "other"}  # not judged
    with pytest.raises(UserError, match="at least 1"):
        labels.draw_labels_sample(targets, verdicts, 0, 0)


def _row(table, variants, rater):
    hit = table[(table["variants"] == variants) & (table["rater"] == rater)]
    assert len(hit) == 1, (variants, rater)
    return hit.iloc[0]


def test_kappa_table_on_hand_made_labels():
    lab = pd.DataFrame(_rows())
    keys = list(OFFERED)
    votes = pd.DataFrame(
        [
            {"item_id": k[0], "variant": k[1], "juror": "J1", "class": c, "abstained": False}
            for k, c in zip(keys, ["item", "instruction", "item", "other", "item"])
        ]
        + [
            {"item_id": k[0], "variant": k[1], "juror": "J2", "class": c, "abstained": c is None}
            for k, c in zip(keys, ["item", None, "other", "other", "item"])
        ]
    )
    verdicts = pd.DataFrame([{"item_id": k[0], "variant": k[1], "jury_class": c} for k, c in zip(keys, ["item", None, None, "other", "item"])])
    rules = pd.DataFrame([{"item_id": k[0], "variant": k[1], "rule_mapped": c} for k, c in zip(keys, ["item", "other", "other", "forecast", "forecast"])])
    t = labels.agreement_table(lab, votes=votes, verdicts=verdicts, jury=["J1", "J2"], rules=rules)

    def kappa(variants, rater, n, want):
        r = _row(t, variants, rater)
        assert r["n"] == n
        if math.isnan(want):
            assert math.isnan(r["κ"])
        else:
            assert r["κ"] == pytest.approx(want, abs=FLOAT64_ATOL)
        return r

    # Fleiss over the four continuations all three labelled: P̄ = (1 + 1/3 + 1/3 + 0)/4 = 5/12, P_e = 46/144
    kappa("all", "people (3)", 4, 1 / 7)
    kappa("substituted", "people (3)", 2, 5 / 11)  # P̄ = 2/3, P_e = 14/36
    kappa("other", "people (3)", 0, float("nan"))  # only A labelled the original
    kappa("all", "A · B", 4, 3 / 11)  # p_o = 1/2, p_e = 5/16
    # the people's majority: i1/S item, i2/S instruction, i1/D other, i2/D none (three classes), i3/O item (A alone)
    maj = labels.people_majority(lab).set_index(["item_id", "variant"])["people"]
    assert [None if pd.isna(maj[k]) else maj[k] for k in keys] == ["item", "instruction", "other", None, "item"]
    kappa("all", "J1", 4, 5 / 9)  # p_o = 3/4, p_e = 7/16
    kappa("all", "J2", 3, 1.0)  # its abstention is left out of n
    assert kappa("all", "jury", 2, float("nan"))["agreement %"] == pytest.approx(100.0, abs=FLOAT64_ATOL)  # one class each: κ = 0/0
    kappa("all", "rules", 4, 1 / 3)  # p_o = 1/2, p_e = 1/4
    assert list(t.columns) == labels.AGREEMENT_COLUMNS
    assert set(t["variants"]) == {"all", "substituted", "deleted", "other"}


# -- a real audit, labelled in the browser -------------------------------------------------------------


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("labels") / "aud"
    sleight(
        "readout", "audit", "--preset", "forecast", "--limit", "1", "--variants", f"{ORIG},{SUB}",
        "--max-new-tokens", "4", "--out", str(out), "--no-progress",
    )  # fmt: skip
    return out


def _judge_by_hand(out):
    """A jury of two's votes and verdict, stored as 'sleight readout judge' stores them."""
    from sleight.readout.audit.judge_run import JUDGEMENT_SCHEMA, JUDGEMENTS, JURY_META, VERDICTS, compute_verdicts, continuations

    readings = continuations(out)
    rows = []
    for r in readings.to_dict("records"):
        for juror, cls in (("J1", "instruction"), ("J2", "instruction")):
            rows.append({"item_id": r["item_id"], "variant": r["variant"], "juror": juror, "class": cls, "reason": "", "abstained": False, "attempts": 1})
    store.append(out / JUDGEMENTS, JUDGEMENT_SCHEMA, rows)
    verdicts = compute_verdicts(readings, pd.DataFrame(rows), ["J1", "J2"])
    rundir.write_table(out / VERDICTS, pa.Table.from_pandas(verdicts, preserve_index=False))
    rundir.write_json(out / JURY_META, {"jury": ["J1", "J2"]})


@pytest.mark.slow
def test_label_through_the_page_in_chromium_and_agreement(audit, tmp_path):
    import shutil

    binary = chromium_binary()
    if binary is None:
        pytest.fail("chromium is not installed (make test installs Debian's chromium package)")
    out = tmp_path / "aud"
    shutil.copytree(audit, out)
    _judge_by_hand(out)
    targets = labels.targets(out)
    assert list(targets["variant"]) == [ORIG, SUB]
    assert list(labels.targets(out, ["judged"])["variant"]) == [SUB]
    with pytest.raises(UserError, match="no measured continuations of variant"):
        labels.targets(out, ["nope"])
    with pytest.raises(UserError, match="no human labels"):
        labels.write_agreement(out)
    votes, verdicts, jury = labels.judge_tables(out)
    labels_page.write_page(out, labels_page.page_data(targets, votes, verdicts, jury, "aud"))
    httpd = labels_page.make_server(out, labels.offered_of(targets), port=0)
    server = threading.Thread(target=httpd.serve_forever, daemon=True)
    server.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    c = Chromium(binary)
    try:
        page = c.new_page()
        page.goto(f"{base}/index.html?labeller=ann")
        page.wait_for("document.getElementById('label-form')")
        assert page.eval("document.getElementById('label-count').textContent") == "0 labelled of 2"
        assert page.eval("document.getElementById('judges') === null")  # the judges' classes are hidden before labelling
        shown = page.eval("document.getElementById('continuation').textContent")
        assert shown == targets["continuation"].iloc[0]  # the audit's own greedy continuation
        assert page.eval("Array.from(document.querySelectorAll('#label-form input')).map(b => b.value)") == ["item", "forecast", "other"]
        page.eval("document.getElementById('label-other').click()")
        page.eval("document.getElementById('label-save').click()")
        page.wait_for("document.getElementById('label-count').textContent === '1 labelled of 2'")
        assert page.eval("Array.from(document.querySelectorAll('#label-form input')).map(b => b.value)")[0] == "instruction"  # the substituted one
        page.eval("document.getElementById('label-instruction').click()")
        page.eval("document.getElementById('label-save').click()")
        page.wait_for("document.getElementById('label-count').textContent === '2 labelled of 2'")
        page.wait_for("document.getElementById('judges')")  # shown once labelled
        assert "jury majority: instruction" in page.eval("document.getElementById('judges').textContent")
        stored = labels.load_labels(out)
        assert sorted(zip(stored["variant"], stored["labeller"], stored["class"])) == [(ORIG, "ann", "other"), (SUB, "ann", "instruction")]
        page.goto(f"{base}/index.html?labeller=ann&again=1")  # a page opened again resumes from the run directory
        page.wait_for("document.getElementById('label-count').textContent === '2 labelled of 2'")
        assert page.eval("document.querySelectorAll('#list div.labelled').length") == 2
        page.close()
    finally:
        c.close()
        httpd.shutdown()
        httpd.server_close()
    req = urllib.request.Request(f"{base}/api/labels", data=b"{}", method="POST")
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(req, timeout=5)  # the server is gone; the labels stay in the directory

    # a second person, imported from an export; then the κ table from the command line
    item = str(targets["item_id"].iloc[0])
    bob = [{"item_id": item, "variant": ORIG, "labeller": "bob", "class": "other"}, {"item_id": item, "variant": SUB, "labeller": "bob", "class": "item"}]
    exported = tmp_path / "bob.json"
    rundir.write_json(exported, labels.export_obj(pd.DataFrame(bob).assign(labelled_at="2025-01-01T00:00:00+00:00"), "aud"))
    proc = sleight("readout", "labels", str(out), "--import", str(exported))
    assert "stored 2 label(s)" in proc.stdout
    proc = sleight("readout", "agreement", str(out))
    assert (out / labels.AGREEMENT_MD).read_text(encoding="utf-8") in proc.stdout
    table = pd.read_csv(out / labels.AGREEMENT_CSV)
    # ann and bob agree on the original only: Fleiss P̄ = (1 + 0)/2, P_e = (2² + 1² + 1²)/4² = 3/8; Cohen p_o = 1/2, p_e = 1/4
    fleiss = _row(table, "all", "people (2)")
    assert fleiss["n"] == 2 and fleiss["κ"] == pytest.approx(1 / 5, abs=FLOAT64_ATOL)
    assert _row(table, "all", "ann · bob")["κ"] == pytest.approx(1 / 3, abs=FLOAT64_ATOL)
    # people's majority: the original 'other' (both), the substituted none (they disagree); J1/J2 only voted on the substituted
    assert _row(table, "all", "J1")["n"] == 0 and _row(table, "all", "jury")["n"] == 0
    assert list(table.columns) == labels.AGREEMENT_COLUMNS


def _request(base: str, path: str, *, method: str = "GET", body: bytes | None = None, headers: dict | None = None) -> tuple[int, dict]:
    import http.client
    import json
    import urllib.parse

    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True)
        for k, v in {"Content-Length": str(len(body or b"")), **(headers or {})}.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_the_api_refuses_other_hosts_and_origins(audit, tmp_path):
    """The labels API answers only requests that name this server: a DNS-rebinding page (a foreign
    ``Host``) can neither read nor write, and a page of another origin in the same browser (a
    foreign ``Origin``, a cross-site ``Sec-Fetch-Site``) cannot write; this server's own page, and a
    client that is no browser page (no Origin), can. Against the real server on loopback."""
    import json
    import shutil

    out = tmp_path / "aud"
    shutil.copytree(audit, out)
    targets = labels.targets(out)
    labels_page.write_page(out, labels_page.page_data(targets, None, None, [], "aud"))
    httpd = labels_page.make_server(out, labels.offered_of(targets), port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    base = f"http://127.0.0.1:{port}"
    row = {"item_id": str(targets["item_id"].iloc[0]), "variant": ORIG, "labeller": "ann", "class": "other"}
    body = json.dumps(row).encode()
    own = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"}
    try:
        for host in (f"evil.example:{port}", f"127.0.0.1:{port + 1}", "", "attacker.test"):
            assert _request(base, "/api/labels?labeller=ann", headers={"Host": host})[0] == 403
            assert _request(base, "/index.html", headers={"Host": host})[0] == 403
            assert _request(base, "/api/labels", method="POST", body=body, headers={**own, "Host": host})[0] == 403
        for origin in ("http://evil.example", f"http://evil.example:{port}", "null", f"https://127.0.0.1:{port}"):
            status, got = _request(base, "/api/labels", method="POST", body=body, headers={**own, "Origin": origin})
            assert status == 403 and "Origin" in got["error"]
        assert _request(base, "/api/labels", method="POST", body=body, headers={**own, "Sec-Fetch-Site": "cross-site"})[0] == 403
        assert len(labels.load_labels(out)) == 0  # nothing refused was stored
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
            assert _request(base, "/api/labels?labeller=ann", headers={"Host": host})[0] == 200
        assert _request(base, "/api/labels", method="POST", body=body, headers={**own, "Origin": f"http://localhost:{port}", "Sec-Fetch-Site": "same-origin"})[0] == 200
        assert _request(base, "/api/labels", method="POST", body=body, headers=own)[0] == 200  # no Origin: not a browser page
        stored = labels.load_labels(out)
        assert list(stored["labeller"]) == ["ann"]
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert labels_page.own_hosts("127.0.0.1", 8000) == {"127.0.0.1:8000", "localhost:8000", "[::1]:8000"}
    assert labels_page.own_hosts("192.168.1.5", 8000) == {"192.168.1.5:8000"}
