"""``sleight readout forecast`` and ``sleight readout ptrue`` end to end on the real default model
and a few shipped fixtures; what they write is checked against independent computations."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from sleight.cli.main import main
from sleight.position import encode_continuation
from sleight.readout.audit.classify import ARGMAX_CLASSES
from sleight.readout.audit.presets import FORECAST_OPTIONS, FORECAST_STEM, forecast_prompt
from sleight.readout.forecast import pipeline as fp
from sleight.readout.ptrue.answers import judge_answer, load_qa_items
from sleight.readout.ptrue.readouts import ptrue_prompt
from sleight.stats import auroc, brier, paired_bootstrap, prr
from sleight.stats.downstream import cluster_codes
from tolerances import FLOAT64_RTOL, LOGPROB_ATOL, MASS_ATOL

pytestmark = pytest.mark.slow  # the forecast and P(True) commands end to end

B = 400  # bootstrap replicates in these runs (the default is 20,000)
N_FORECAST, N_PTRUE = 4, 2


@pytest.fixture(scope="module")
def forecast_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("forecast")
    rc = main(
        ["readout", "forecast", "--limit", str(N_FORECAST), "--out", str(out), "--B", str(B), "--note-tokens", "44",
         "--continuation-tokens", "3", "--no-progress"]
    )
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def ptrue_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("ptrue")
    rc = main(
        ["readout", "ptrue", "--limit", str(N_PTRUE), "--out", str(out), "--B", str(B), "--max-new-tokens", "16",
         "--continuation-tokens", "3", "--no-progress"]
    )
    assert rc == 0
    return out


def _outputs_exist(out, pngs):
    for name in ("readings.parquet", "summary.json", "report.md", "report.html", *pngs):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / pngs[0]).read_bytes()[:4] == b"\x89PNG"
    assert "data:image/png;base64," in (out / "report.html").read_text()


# ---------------------------------------------------------------------------------------------
# forecast
# ---------------------------------------------------------------------------------------------


def test_forecast_writes_readings_summary_reports_and_plots(forecast_out):
    _outputs_exist(forecast_out, ("roc.png", "mass_vs_score.png"))
    df = pd.read_parquet(forecast_out / "readings.parquet")
    assert len(df) == 2 * N_FORECAST and list(df["position"][:2]) == ["original", "stem"]
    s = json.loads((forecast_out / "summary.json").read_text())
    assert s["kind"] == "forecast" and s["n_items"] == N_FORECAST and s["model"]["model_id"].startswith("SmolLM2-135M")
    assert s["B"] == B and f"--limit {N_FORECAST}" in s["command"]
    md = (forecast_out / "report.md").read_text()
    for needle in ("AUROC [95% CI]", "Brier [95% CI]", "Stem minus original", "constant forecast of 0.5 scores 0.250", "pick the same letter"):
        assert needle in md, needle
    # App. H's writer: a kept note ends at end-of-sequence with 1-32 words, after 1-5 attempts; none is kept otherwise.
    for _, r in df.iterrows():
        assert 1 <= r["note_attempts"] <= 5
        if r["note_ok"]:
            assert r["note"] == r["note_raw"] and r["note_finish"] == "stop" and 1 <= len(r["note"].split()) <= 32
        else:
            assert r["note"] == "" and r["note_attempts"] == 5
    assert s["notes"]["kept"] == int(df[df["position"] == "original"]["note_ok"].sum())


def test_forecast_reports_spaced_unspaced_agreement(forecast_out):
    df = pd.read_parquet(forecast_out / "readings.parquet")
    orig = df[df["position"] == "original"]
    s = json.loads((forecast_out / "summary.json").read_text())["reader"]
    agree = (orig["reader_choice"] == orig["reader_choice_spaced"]).to_numpy()
    assert s["spaced_unspaced_agreement"] == pytest.approx(agree.mean())
    assert s["n_compared"] == N_FORECAST and s["n_agree"] == int(agree.sum())
    assert s["accuracy"] == pytest.approx((orig["reader_choice"] == orig["gold"]).mean())
    assert s["accuracy_spaced"] == pytest.approx((orig["reader_choice_spaced"] == orig["gold"]).mean())
    # Table 4 reads the spaced letters: the target is the spaced reader's correctness (the unspaced one before issue #19)
    assert s["target"] == "spaced" and set(orig["reader_target"]) == {"spaced"}
    assert list(orig["correct"]) == list(orig["reader_choice_spaced"] == orig["gold"])
    assert s["accuracy_target"] == pytest.approx(s["accuracy_spaced"])


def test_forecast_reader_and_forecast_match_independent_passes(model, forecast_out):
    df = pd.read_parquet(forecast_out / "readings.parquet")
    items = fp.load_race_items(_fixture("race_items.jsonl"), limit=1)  # one item: each check is a few long passes
    for it in items:
        rows = df[df["item_id"] == it.id].set_index("position")
        note = rows.loc["original", "note"]
        # The reader: highest full-sequence log-prob over A-D after the rendered prompt, both spacings.
        ctx = model.render_chat([{"role": "user", "content": f"Note: {note}\n\n{fp.quoted_item(it)}"}])
        nxt = model.next_token_logprobs([ctx.ids])[0].astype(np.float64)
        for spacing, col, mass in (("", "reader_choice", "reader_mass"), (" ", "reader_choice_spaced", "reader_mass_spaced")):
            enc = [encode_continuation(model, ctx.text, spacing + x) for x in "ABCD"]
            lps = [float(np.sum(a)) for a in model.continuation_logprobs(ctx.ids, enc)]
            assert rows.loc["original", col] == "ABCD"[int(np.argmax(lps))]
            # The pipeline read this context in a padded batch, here it is alone: float32 rounding ~1e-6.
            assert rows.loc["original", mass] == pytest.approx(float(np.exp(nxt[sorted({e[0] for e in enc})]).sum()), abs=MASS_ATOL)
        # The forecast at the stemmed position: renormalised full-sequence option probabilities.
        prompt = forecast_prompt(note, it.question, it.choices)[0]
        stem = model.render_chat([{"role": "user", "content": prompt}], prefill=FORECAST_STEM)
        assert stem.text.endswith("<|im_start|>assistant\n" + FORECAST_STEM)
        enc = [encode_continuation(model, stem.text, o) for o in FORECAST_OPTIONS]
        lps = np.array([float(np.sum(a)) for a in model.continuation_logprobs(stem.ids, enc)])
        p = np.exp(lps - lps.max())
        p /= p.sum()
        assert rows.loc["stem", "score"] == pytest.approx(float(sum(int(o) / 100 * q for o, q in zip(FORECAST_OPTIONS, p))), abs=MASS_ATOL)
        first = sorted({e[0] for e in enc})
        nxt = model.next_token_logprobs([stem.ids])[0].astype(np.float64)
        assert rows.loc["stem", "option_mass"] == pytest.approx(float(np.exp(nxt[first]).sum()), abs=MASS_ATOL)
        assert rows.loc["original", "argmax_class"] in ARGMAX_CLASSES


def test_forecast_gain_is_the_paired_cluster_bootstrap(forecast_out):
    df = pd.read_parquet(forecast_out / "readings.parquet")
    s = json.loads((forecast_out / "summary.json").read_text())
    o, st = df[df["position"] == "original"], df[df["position"] == "stem"]
    y = o["correct"].astype(float).to_numpy()
    clusters = o["cluster"].to_numpy()
    so, ss = o["score"].to_numpy(), st["score"].to_numpy()
    assert s["positions"]["stem"]["brier"]["estimate"] == pytest.approx(brier(ss, y))
    for metric, fn in (("auroc", auroc), ("brier", brier)):
        g = s["gain"][metric]
        if g["diff"] is None:  # AUROC is undefined when the few readers are all right or all wrong
            assert len(set(y)) == 1
            continue
        pb = paired_bootstrap(fn, (ss, y), (so, y), clusters=clusters, B=B, seed=0)
        assert (g["diff"], g["low"], g["high"]) == pytest.approx((pb.diff, pb.ci_diff.low, pb.ci_diff.high))


def test_forecast_rescore_needs_no_model_and_reuses_the_readings(forecast_out, tmp_path):
    import shutil

    copy = tmp_path / "again"
    shutil.copytree(forecast_out, copy)
    before = json.loads((copy / "summary.json").read_text())
    (copy / "report.md").unlink()
    assert main(["readout", "forecast", "--out", str(copy), "--rescore", "--B", "300", "--seed", "5", "--model", "no-such-model"]) == 0
    after = json.loads((copy / "summary.json").read_text())
    assert (after["B"], after["seed"]) == (300, 5) and (copy / "report.md").is_file()
    for p in ("original", "stem"):  # same readings, same estimates; only the intervals are redrawn
        assert after["positions"][p]["brier"]["estimate"] == before["positions"][p]["brier"]["estimate"]
    assert after["reader"] == before["reader"] and after["command"] == before["command"]
    assert main(["readout", "ptrue", "--out", str(copy), "--rescore"]) == 2  # a forecast folder is not a ptrue run


# ---------------------------------------------------------------------------------------------
# P(True)
# ---------------------------------------------------------------------------------------------


def test_ptrue_writes_five_readouts_per_pair(ptrue_out):
    _outputs_exist(ptrue_out, ("roc_own.png", "mass_vs_score_own.png", "roc_constructed.png", "mass_vs_score_constructed.png"))
    df = pd.read_parquet(ptrue_out / "readings.parquet")
    n_pairs = N_PTRUE + 2 * N_PTRUE  # own answers + gold and wrong per question
    assert len(df) == 5 * n_pairs
    assert sorted(df["readout"].unique()) == sorted(["library", "renormalised", "labels_in_place", "moved", "deleted"])
    assert set(df["argmax_class"].dropna()) <= set(ARGMAX_CLASSES)
    assert df[df["readout"] == "deleted"]["argmax_class"].isna().all()  # no instruction to delete: Deleted is not read
    assert df[df["readout"] != "deleted"]["argmax_class"].notna().all()
    s = json.loads((ptrue_out / "summary.json").read_text())
    assert set(s["settings"]) == {"own", "constructed"}
    for setting in s["settings"].values():
        for r in setting["readouts"].values():
            assert r["mass"]["n"] == setting["n_pairs"] and r["argmax_class"]
    md = (ptrue_out / "report.md").read_text()
    for needle in ("Setting: own", "Setting: constructed", "PRR [95% CI]", "readout minus Library", "Labels in place"):
        assert needle in md, needle


def test_ptrue_own_answers_are_labelled_by_the_rule(ptrue_out):
    df = pd.read_parquet(ptrue_out / "readings.parquet")
    items = {it.id: it for it in load_qa_items(_fixture("qa_items.jsonl"), limit=N_PTRUE)}
    own = df[(df["setting"] == "own") & (df["readout"] == "library")]
    assert len(own) == N_PTRUE
    for _, row in own.iterrows():
        ok, matched = judge_answer(items[row["item_id"]], row["answer"])
        assert row["label"] == float(ok) and (None if pd.isna(row["matched"]) else row["matched"]) == matched
    cons = df[(df["setting"] == "constructed") & (df["readout"] == "library")]
    assert list(cons["label"]) == [1.0, 0.0] * N_PTRUE and list(cons["answer_source"]) == ["gold", "wrong"] * N_PTRUE


def test_ptrue_library_equals_the_lm_polygraph_convention(model, ptrue_out):
    """log P(True) from raw logits: EOS logits -inf (min_new_tokens=1), -inf replaced by the row's
    smallest finite logit (the library's sanitiser), log-softmax, token 'True' encoded alone."""
    df = pd.read_parquet(ptrue_out / "readings.parquet")
    lib = df[df["readout"] == "library"]
    true_id = model.encode("True")[0]
    for _, row in lib.iterrows():
        ctx = model.render_chat([{"role": "user", "content": ptrue_prompt(row["question"], row["answer"])}])
        x = model.next_token_logits([ctx.ids])[0].astype(np.float64)
        x[sorted(model.eos_ids)] = -np.inf
        x[np.isneginf(x)] = x[np.isfinite(x)].min()
        logp = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
        assert row["score"] == pytest.approx(logp[true_id], abs=LOGPROB_ATOL)
        assert row["library_prob"] == pytest.approx(np.exp(row["score"]), rel=FLOAT64_RTOL)
        # The convention is not the plain log-softmax: that one keeps the EOS mass, and the two differ
        # by exactly the EOS mass swapped for the smallest token's.
        plain = model.next_token_logprobs([ctx.ids])[0].astype(np.float64)
        eos = sorted(model.eos_ids)
        others = np.delete(plain, eos)
        swapped = 1.0 - np.exp(plain[eos]).sum() + len(eos) * np.exp(others.min())
        assert plain[true_id] - row["score"] == pytest.approx(np.log(swapped), abs=LOGPROB_ATOL)
        # Mass at the Library position is over the readout's options True/False (first tokens in context).
        first = sorted({encode_continuation(model, ctx.text, o)[0] for o in ("True", "False")})
        assert row["option_mass"] == pytest.approx(float(np.exp(plain[first]).sum()), abs=MASS_ATOL)
        # Labels in place is read at the same position over "(A"/"(B" (first tokens counted once).
        lip = df[(df["readout"] == "labels_in_place") & (df["question"] == row["question"]) & (df["answer"] == row["answer"])].iloc[0]
        first = sorted({encode_continuation(model, ctx.text, o)[0] for o in ("(A", "(B")})
        assert lip["option_mass"] == pytest.approx(float(np.exp(plain[first]).sum()), abs=MASS_ATOL)
        assert lip["argmax_token"] == row["argmax_token"] and lip["first_tokens_distinct"] == (len(first) == 2)


def test_ptrue_differences_against_library_use_the_paired_bootstrap(ptrue_out):
    df = pd.read_parquet(ptrue_out / "readings.parquet")
    s = json.loads((ptrue_out / "summary.json").read_text())["settings"]["constructed"]
    cons = df[df["setting"] == "constructed"]
    lib = cons[cons["readout"] == "library"]
    y = lib["label"].to_numpy()
    clusters = cluster_codes(list(lib["item_id"]))
    assert s["n_clusters"] == N_PTRUE
    assert s["vs_library"]["deleted"] == {"auroc": None, "prr": None}  # the fixture's questions carry no instruction to delete
    for r in ("renormalised", "moved"):
        sr = cons[cons["readout"] == r]["score"].to_numpy(dtype=float)
        for metric, fn in (("auroc", auroc), ("prr", prr)):
            pb = paired_bootstrap(fn, (sr, y), (lib["score"].to_numpy(), y), clusters=clusters, B=B, seed=0)
            d = s["vs_library"][r][metric]
            got = tuple(np.nan if v is None else v for v in (d["diff"], d["low"], d["high"]))
            assert got == pytest.approx((pb.diff, pb.ci_diff.low, pb.ci_diff.high), nan_ok=True)


def test_bad_items_fail_before_the_model_loads(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q1", "question": "Why?"}\n')
    assert main(["readout", "ptrue", "--items", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.jsonl line 1: needs 'answers'" in err[0]
    assert main(["readout", "forecast", "--items", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "items file not found" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _fixture(name: str) -> str:
    return str(fp.DEFAULT_ITEMS.parent / name)
