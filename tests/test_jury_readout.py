"""``sleight readout judge``: a jury labels the substituted-instruction and deletion continuations of a
real audit (the bundled model), with the tamper jury's machinery: keyed resumable votes, abstentions,
a majority, κ -- every number checked against scikit-learn on the stored votes."""

from __future__ import annotations

import json
import re
import warnings
import zlib

import pandas as pd
import pytest

from fault_server import Answer, FaultServer, reply
from sleight.backends.chat import LocalChat, OpenAIChat
from sleight.readout.audit import judge
from sleight.readout.audit.judge_run import JUDGEMENTS, VERDICTS, judge_audit, load_judgements
from tamper_artifacts import sleight
from tolerances import FLOAT64_ATOL

pytestmark = pytest.mark.slow  # whole-run fixtures (a judged run, Chromium)



@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit") / "aud"
    sleight(
        "readout", "audit", "--preset", "forecast", "--limit", "2", "--variants",
        "original,substituted:summarise,substituted:french,deleted_instruction", "--max-new-tokens", "8", "--out", str(out), "--no-progress",
    )  # fmt: skip
    return out


def _copy(audit, dst):
    import shutil

    shutil.copytree(audit, dst, ignore=shutil.ignore_patterns(JUDGEMENTS, VERDICTS, "jury.json", "judge.md"))
    return dst


def _classes(body: dict) -> list[str]:
    text = body["messages"][1]["content"]
    return re.findall(r"^- (\w+): ", text, re.M)


def _pick(seed: str, body: dict) -> str:
    opts = _classes(body)
    return opts[zlib.crc32((body["messages"][1]["content"] + seed).encode()) % len(opts)]


SCRIPTS = {
    "a": lambda b, n: reply(json.dumps({"class": _pick("", b), "reason": "a"})),
    "b": lambda b, n: reply("```json\n" + json.dumps({"class": _pick("" if n % 3 else "x", b), "reason": "b"}) + "\n```"),
    "c": lambda b, n: reply("no idea") if zlib.crc32(b["messages"][1]["content"].encode()) % 4 == 0 else reply(json.dumps({"class": _pick("c", b)})),
}


def test_jury_classes_majority_and_kappas_equal_sklearn(audit, tmp_path):
    from sklearn.metrics import cohen_kappa_score

    out = _copy(audit, tmp_path / "aud")
    readings = pd.read_parquet(out / "readings.parquet")
    labelled = readings[readings["variant"].map(judge.judged_variant)]
    with FaultServer(SCRIPTS) as srv:
        jury = [srv.spec(m) for m in SCRIPTS]
        summary = judge_audit(out, jury, vote="text", progress=False)
        # the deletion variants are not offered 'instruction'; the substituted ones are
        for body in srv.requests["a"]:
            subst = "substituted instruction:" in body["messages"][1]["content"] or "instruction was removed" in body["messages"][1]["content"]
            assert ("instruction" in _classes(body)) == subst
        again = judge_audit(out, jury, vote="text", progress=False)  # resumable: nothing asked twice
        assert again.asked == 0 and len(srv.requests["a"]) == len(labelled)
    assert summary.n_continuations == len(labelled)
    votes = load_judgements(out)
    assert len(votes) == 3 * len(labelled) and not votes.duplicated(["item_id", "variant", "juror"]).any()
    c = votes[votes["juror"] == jury[2]]
    assert c["abstained"].any() and c.loc[c["abstained"], "class"].isna().all()  # abstentions recorded, not guessed
    v = pd.read_parquet(out / VERDICTS)
    # the majority: two agreeing votes that outnumber the rest
    for row in v.to_dict("records"):
        mine = votes[(votes["item_id"] == row["item_id"]) & (votes["variant"] == row["variant"]) & ~votes["abstained"]]
        counts = mine["class"].value_counts()
        top = counts.index[0] if len(counts) and counts.iloc[0] >= 2 and (len(counts) == 1 or counts.iloc[0] > counts.iloc[1]) else None
        assert row["jury_class"] == top or (top is None and pd.isna(row["jury_class"]))
        assert row["rule_mapped"] == judge.RULE_TO_JURY[row["rule_class"]]
    # agreement with the rules and between jurors, as scikit-learn computes it
    decided = v[v["jury_class"].notna()]
    rows = {r["variants"]: r for r in judge.agreement_rows(v)}
    assert rows["all"]["with a jury majority"] == len(decided)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if len(decided):
            expected = cohen_kappa_score(decided["rule_mapped"].astype(str), decided["jury_class"].astype(str))
            assert rows["all"]["κ"] == pytest.approx(expected, nan_ok=True)
            assert rows["all"]["agreement %"] == pytest.approx(100.0 * (decided["rule_mapped"] == decided["jury_class"]).mean())
        pairs = {r["pair"]: r for r in judge.juror_kappas(votes, jury)}
        cast = votes[~votes["abstained"]].pivot_table(index=["item_id", "variant"], columns="juror", values="class", aggfunc="first")
        both = cast[[jury[0], jury[2]]].dropna()
        assert pairs[f"{jury[0]} · {jury[2]}"]["n"] == len(both)
        assert pairs[f"{jury[0]} · {jury[2]}"]["κ"] == pytest.approx(cohen_kappa_score(both[jury[0]], both[jury[2]]), nan_ok=True)
    # the audit's own report sets the jury's classes beside the rule classes
    md = (out / "report.md").read_text()
    assert "the jury's classes beside the rule classes" in md and "Cohen's κ" in md and "jury of 3" in md
    assert "What the continuations do" in (out / "report.html").read_text()


def test_a_failed_vote_is_asked_again_and_leaves_one_row(audit, tmp_path):
    out = _copy(audit, tmp_path / "aud")
    state = {"up": False}
    with FaultServer({"m": lambda b, n: reply(json.dumps({"class": "other", "reason": "r"})) if state["up"] else Answer(503)}) as srv:
        loader = lambda s: OpenAIChat(srv.base_url, "m", retries=0)  # noqa: E731
        proc_first = judge_audit(out, [srv.spec("m")], vote="text", loader=loader, progress=False)
        assert proc_first.cast == 0
        state["up"] = True
        second = judge_audit(out, [srv.spec("m")], vote="text", loader=loader, progress=False)
    votes = pd.concat([pd.read_parquet(p) for p in (out / JUDGEMENTS).glob("*.parquet")])
    assert second.compacted == len(votes) and not votes["abstained"].any() and (votes["class"] == "other").all()


def test_cli_refuses_an_audit_without_those_variants_in_one_line(tmp_path):
    out = tmp_path / "aud"
    sleight("readout", "audit", "--preset", "forecast", "--limit", "1", "--variants", "original", "--max-new-tokens", "2", "--out", str(out), "--no-progress")
    proc = sleight("readout", "judge", str(out), "--jury", "openai:http://127.0.0.1:9/v1#x", check=False)
    assert proc.returncode == 2 and "no substituted-instruction or deletion variants" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_the_default_model_votes_on_every_continuation_by_slots(audit, model, tmp_path):
    out = _copy(audit, tmp_path / "aud")
    summary = judge_audit(out, ["smollm2-135m-instruct"], loader=lambda s: LocalChat(model), progress=False)
    votes = load_judgements(out)
    assert summary.cast == summary.n_continuations == len(votes)
    assert (votes["vote_path"] == "slots").all() and votes["class"].notna().all()
    for r in votes.to_dict("records"):
        assert len(r["class_probs"]) == len(r["class_options"]) and sum(r["class_probs"]) == pytest.approx(1, abs=FLOAT64_ATOL)
        assert r["class"] == r["class_options"][max(range(len(r["class_probs"])), key=lambda i: r["class_probs"][i])]
        assert 0 <= r["class_mass"] <= 1
    assert "median slot mass" in (out / "report.md").read_text()
