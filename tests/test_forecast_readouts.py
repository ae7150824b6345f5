"""The forecast's readouts (c)-(h) on the real model, against independent recomputations."""

from __future__ import annotations

import numpy as np
import pytest

from sleight.position import encode_continuation
from sleight.readout.audit.presets import FORECAST_ITEM_INSTRUCTION, FORECAST_OPTIONS, forecast_prompt
from sleight.readout.forecast.pipeline import CONTINUATION_TOKENS
from sleight.readout.forecast.readouts import READOUTS, alt_prompt, shipped_alt_template, summarise_readouts
from sleight.readout.scan.text_parsers import first_grid_value
from tolerances import MASS_ATOL


def expected(model, context: str) -> float:
    """Σ int(o)/100 · p_o from each option's full-sequence log-probability, computed separately."""
    ctx = model.encode(context)
    lps = [float(np.sum(model.continuation_logprobs(ctx, [encode_continuation(model, context, o)])[0])) for o in FORECAST_OPTIONS]
    p = np.exp(np.asarray(lps) - max(lps))
    return float(sum(int(o) / 100 * x for o, x in zip(FORECAST_OPTIONS, p / p.sum())))


@pytest.mark.slow
def test_continuation_readout_equals_an_independent_decode(model, forecast_run):
    items, rows, recs = forecast_run
    for it, r in zip(items, recs):
        orig = next(x for x in rows if x["item_id"] == it.id and x["position"] == "original")
        # Appendix H: readout (f) decodes 48 tokens (the pipeline's default; it was 16 before issue #19)
        assert CONTINUATION_TOKENS == 48
        text = model.decode(model.greedy([model.encode(orig["context"])], CONTINUATION_TOKENS)[0].token_ids)
        v = first_grid_value(text, FORECAST_OPTIONS)
        assert r["continuation"] == (0.5 if v is None else int(v) / 100)
        assert r["continuation_text"] == text


@pytest.mark.slow
def test_deleted_and_alternative_template_scores(model, forecast_run):
    items, rows, recs = forecast_run
    tpl = shipped_alt_template()
    for it, r in zip(items, recs):
        note = next(x for x in rows if x["item_id"] == it.id)["note"]
        prompt = forecast_prompt(note, it.question, it.choices)[0]
        assert FORECAST_ITEM_INSTRUCTION in prompt
        deleted = model.render_chat([{"role": "user", "content": prompt.replace("\n" + FORECAST_ITEM_INSTRUCTION, "")}]).text
        assert r["deleted"] == pytest.approx(expected(model, deleted), abs=MASS_ATOL)
        msgs = [{"role": "user", "content": alt_prompt(tpl, note, it)}]
        assert r["alt"] == pytest.approx(expected(model, model.render_chat(msgs).text), abs=MASS_ATOL)
        assert r["alt_stem"] == pytest.approx(expected(model, model.render_chat(msgs, prefill="Estimate: ").text), abs=MASS_ATOL)
        assert r["original"] is not None and r["stem"] is not None


def test_every_pair_on_the_same_replicates():
    rng = np.random.default_rng(1)
    recs = [{"item_id": str(k), "cluster": k // 2, "correct": bool(k % 3), **{name: float(rng.uniform()) for name in READOUTS}} for k in range(12)]
    recs.append({**recs[0], "item_id": "x", "alt": None})  # undefined somewhere: left out of every readout
    s = summarise_readouts(recs, B=300)
    # (a)-(f) and Appendix H's two short stems (g), (h): 8 readouts, 28 pairs (15 of six before issue #19)
    assert len(READOUTS) == 8 and s["n_scored"] == 12 and len(s["pairs"]) == 28
    for pair, d in s["pairs"].items():
        a, b = pair.split(" - ")
        assert d["auroc"]["diff"] == pytest.approx(s["readouts"][a]["auroc"]["estimate"] - s["readouts"][b]["auroc"]["estimate"])
        assert d["auroc"]["n"] == 12
