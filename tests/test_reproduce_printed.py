"""Issue 34 item 5: printed results without a config or cell become cells and summaries with a difference.

App. E's leave-one-checkpoint-out ranges (Tables 9 and 10), App. H's medians, counts and bounds
(Tables 4 and 13, App. H's short stems and readout (f)), App. B's 59 of 60 against 38 of 60, App. C.6's
declared sets read from tokenizers alone, App. E's four further checkpoints and Qwen2.5-72B-Instruct,
and App. E's OpenCompass judge experiment with the grading prompt pinned. Each is checked in its config
as printed, by hand where it computes something new, and on the bundled model where a reading is new."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sleight.errors import UserError
from sleight.readout.reproduce import load_table
from sleight.readout.reproduce.aggregate import aggregate
from sleight.readout.reproduce.config import Average, Checkpoint, Column, RunSpec, Summary, TableConfig
from sleight.readout.reproduce.writers import number_text, to_markdown
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL, MASS_ATOL


def _config(columns, averages, summaries, B=40) -> TableConfig:
    run = RunSpec("r", "ptrue", "mmlu:hub", "mmlu:x.parquet")
    return TableConfig("t", "T", Path("t.yaml"), (), {"r": run}, tuple(columns), tuple(averages), summaries=tuple(summaries), B=B, seed=5)


def _rows(library, moved, labels):
    out = []
    for readout, scores in (("library", library), ("moved", moved)):
        out += [
            {"setting": "own", "item_id": f"q{i}", "answer_source": "own", "readout": readout, "score": s, "label": y, "option_mass": s}
            for i, (s, y) in enumerate(zip(scores, labels))
        ]
    return out


# -- App. E: leave one checkpoint out ----------------------------------------------------------------
def test_app_e_leave_one_checkpoint_out_ranges_are_summaries_as_printed():
    """App. E, "Leaving out one checkpoint": dropping any one Qwen3 checkpoint keeps Moved − Library above
    zero, from +0.1007 [+0.0434, +0.1578] to +0.1648 [+0.1024, +0.2266] on MMLU (Table 9) and from +0.2424
    [+0.2065, +0.2771] to +0.5846 [+0.5351, +0.6332] on TriviaQA (Table 10): summaries, not notes."""
    printed = {"table9": ((0.1007, 0.0434, 0.1578), (0.1648, 0.1024, 0.2266)), "table10": ((0.2424, 0.2065, 0.2771), (0.5846, 0.5351, 0.6332))}
    for name, (low, high) in printed.items():
        t = load_table(name)
        got = {s.how: (s.paper, *(s.paper_ci or ())) for s in t.summaries if s.how.startswith("loo_")}
        assert got == {"loo_min": low, "loo_max": high}, name
        assert all(s.columns == ("moved_minus_library",) and s.average == "Qwen3 average" for s in t.summaries if s.how.startswith("loo_"))
        assert not any("leave-one" in n or "0.1007" in n or "0.2424" in n for n in t.notes), name
        # the printed range is the per-checkpoint cells' leave-one-out, to the printed precision
        cells = [t.paper[c]["moved_minus_library"] for c in ("qwen3-4b", "qwen3-8b", "qwen3-14b")]
        without = [(sum(cells) - c) / 2 for c in cells]
        assert round(min(without), 2) == round(low[0], 2) and round(max(without), 2) == round(high[0], 2)


def test_leave_one_out_summary_by_hand_with_its_interval():
    """The summary is the lowest / highest of the average's left-out estimates (the mean of the other
    checkpoints' cells) with that estimate's interval from the shared replicates; reproduced −
    published is computed; an average over other checkpoints than the config's is not compared."""
    labels = [1, 0, 1, 0, 1, 0]
    data = {
        "a": _rows([0.1, 0.9, 0.2, 0.8, 0.5, 0.5], [0.9, 0.1, 0.7, 0.2, 0.6, 0.4], labels),
        "b": _rows([0.4, 0.3, 0.2, 0.1, 0.5, 0.6], [0.5, 0.4, 0.3, 0.8, 0.9, 0.1], labels),
        "c": _rows([0.6, 0.2, 0.3, 0.9, 0.5, 0.4], [0.7, 0.1, 0.8, 0.6, 0.2, 0.3], labels),
    }
    col = Column("d", "Moved − Library", "r", {"readout": "moved"}, metric="auroc", minus={"readout": "library"})
    lo = Summary("lo", "lowest", ("d",), "loo_min", 0.1, "avg", (0.0, 0.2))
    hi = Summary("hi", "highest", ("d",), "loo_max", 0.9, "avg")
    config = _config([col], [Average("avg", "all")], [lo, hi])
    table = aggregate(config, [Checkpoint(k, f"m{k}") for k in data], {k: {"r": v} for k, v in data.items()})
    est = {r.name: r.cells["d"].estimate for r in table.rows if r.kind == "checkpoint"}
    without = {k: (sum(est.values()) - v) / 2 for k, v in est.items()}
    intervals = table.leave_one_out["avg"]["d"]["intervals"]
    s_lo, s_hi = table.summaries
    k_lo, k_hi = min(without, key=without.__getitem__), max(without, key=without.__getitem__)
    assert s_lo.value == pytest.approx(without[k_lo], abs=FLOAT64_ATOL) and s_hi.value == pytest.approx(without[k_hi], abs=FLOAT64_ATOL)
    assert (s_lo.low, s_lo.high) == (intervals[k_lo]["low"], intervals[k_lo]["high"]) and s_lo.n == 3
    # the left-out interval by hand: percentiles of the other two checkpoints' per-replicate means
    reps = np.mean([r.cells["d"].replicates for r in table.rows if r.kind == "checkpoint" and r.name != k_hi], axis=0)
    assert (s_hi.low, s_hi.high) == tuple(pytest.approx(x, rel=FLOAT64_RTOL) for x in np.quantile(reps[np.isfinite(reps)], [0.025, 0.975]))
    d = s_lo.as_dict()
    assert d["difference"] == pytest.approx(without[k_lo] - 0.1, abs=FLOAT64_ATOL) and d["paper_interval"] == [0.0, 0.2]
    md = to_markdown(table)
    assert f"| lowest | {number_text(s_lo.value, 3)} [{number_text(s_lo.low, 3)}, {number_text(s_lo.high, 3)}] | 0.100 [0.000, 0.200] |" in md
    # two of the three checkpoints: the average is another row than the config's, nothing is compared
    part = aggregate(config, [Checkpoint("a", "ma"), Checkpoint("b", "mb")], {k: {"r": data[k]} for k in "ab"})
    assert [r.name for r in part.rows if r.kind == "average"] == ["avg"]  # the config names no checkpoints: own = members
    config_own = TableConfig("t", "T", Path("t.yaml"), tuple(Checkpoint(k, f"m{k}", group="q") for k in data), config.runs, (col,),
                             (Average("avg", "group:q"),), summaries=(lo,), B=40, seed=5)
    renamed = aggregate(config_own, [Checkpoint("a", "ma", group="q"), Checkpoint("b", "mb", group="q")], {k: {"r": data[k]} for k in "ab"})
    assert math.isnan(renamed.summaries[0].value) and renamed.summaries[0].as_dict()["difference"] is None


def test_a_summary_over_an_averages_members_and_config_errors(tmp_path):
    """App. H prints bounds over the Qwen3 checkpoints only: a summary naming an average reads its
    members' cells; a leave-one-out summary needs one column and a mean average (one line otherwise)."""
    rows = {k: [{"setting": "own", "item_id": "q0", "answer_source": "own", "readout": "library", "score": v, "label": 1, "option_mass": v}]
            for k, v in (("a", 0.9), ("b", 0.99), ("c", 0.1))}
    col = Column("m", "Mass", "r", {"readout": "library"}, stat="median", column="option_mass")
    config = _config([col], [Average("qwen", ("a", "b"))], [Summary("s", "lowest", ("m",), "min", 0.9, "qwen"), Summary("t", "all", ("m",), "min")])
    table = aggregate(config, [Checkpoint(k, k) for k in rows], {k: {"r": v} for k, v in rows.items()})
    assert [(s.value, s.n) for s in table.summaries] == [(0.9, 2), (0.1, 3)]
    base = load_table("table9").path.read_text(encoding="utf-8")
    for bad, message in (
        ("how: loo_min, average: Qwen3 average", "how: loo_min"),
        ("how: loo_min, average: Qwen3 average", "how: loo_min, average: Llama"),
    ):
        path = tmp_path / "t.yaml"
        path.write_text(base.replace(bad, message, 1), encoding="utf-8")
        with pytest.raises(UserError) as e:
            load_table(path)
        assert "summaries[0].average" in str(e.value) and "\n" not in str(e.value)


# -- App. H: medians, counts and bounds as cells ---------------------------------------------------------
def test_app_h_medians_and_counts_are_cells_as_printed():
    """App. H, "Forecast and scored outcome": 160, 163, 171 and 140 correct reader answers; at the production
    position median masses 1.54e-16, 1.49e-15, 1.71e-11, every Qwen3 passage below the floor, an answer
    letter at the argmax on 240, 233, 239; each stemmed median above 0.9999. Five readouts: with the
    instruction deleted the median is above 0.9998 on each Qwen3 checkpoint and 0.0023 on Llama. (f): a grid
    number on 239, 239, 240, 116; short stems: medians at least 0.997, at most 6 of 240 below the floor."""
    t4 = load_table("table4")
    got = {c: {k: t4.paper[c][k] for k in ("correct_answers", "mass_original", "below_original", "letter_original") if k in t4.paper[c]}
           for c in ("qwen3-4b", "qwen3-8b", "qwen3-14b", "llama-3-8b")}
    assert got == {
        "qwen3-4b": {"correct_answers": 160, "mass_original": 1.54e-16, "below_original": 240, "letter_original": 240},
        "qwen3-8b": {"correct_answers": 163, "mass_original": 1.49e-15, "below_original": 240, "letter_original": 233},
        "qwen3-14b": {"correct_answers": 171, "mass_original": 1.71e-11, "below_original": 240, "letter_original": 239},
        "llama-3-8b": {"correct_answers": 140},
    }
    cols = {c.key: c for c in t4.columns}
    assert (cols["mass_original"].stat, cols["mass_original"].column, dict(cols["mass_original"].where)) == ("median", "option_mass", {"position": "original"})
    assert (cols["letter_original"].stat, cols["letter_original"].equals) == ("count", "answer_letter") and cols["letter_original"].integer
    assert [(s.how, s.columns, s.average, s.paper) for s in t4.summaries] == [("min", ("mass_stem",), "Qwen3-averaged", 0.9999)]
    t13 = load_table("table13")
    assert t13.paper["llama-3-8b"] == {"mass_c": 0.0023} and [(s.how, s.average, s.paper) for s in t13.summaries] == [("min", "Qwen3 average", 0.9998)]
    h = load_table("appendix-h")
    assert {c: h.paper[c]["grid_found"] for c in ("qwen3-4b", "qwen3-8b", "qwen3-14b", "llama-3-8b")} == {"qwen3-4b": 239, "qwen3-8b": 239, "qwen3-14b": 240, "llama-3-8b": 116}
    assert [(s.how, s.columns, s.paper) for s in h.summaries] == [("min", ("mass_g", "mass_h"), 0.997), ("max", ("below_g", "below_h"), 6)]
    for t, printed in ((t4, ("160, 163", "1.54", "0.9999")), (t13, ("0.0023", "0.9998")), (h, ("239, 239", "0.997"))):
        assert not any(p in n for n in t.notes for p in printed), t.name  # cells now, not notes
    for t in (t4, t13, h):
        assert "bound" in t.inferred  # a printed bound compared with a measured extreme is an inference, said


def test_forecast_readouts_rows_carry_mass_and_grid_found():
    """App. H's readouts kind: each (passage, readout) row carries its position's option mass and, for
    (f), whether the continuation writes a grid number (App. H counts the passages with one)."""
    from sleight.readout.reproduce.kinds.forecast_readouts import READOUT_ROW, _grid_found

    assert {"mass", "grid_found"} <= set(READOUT_ROW)
    assert _grid_found({"continuation_text": "A. About 70 readers"}) and not _grid_found({"continuation_text": "A: 100 readers, 5"})
    assert not _grid_found({"continuation_text": None})


def _mass(model, context: str) -> float:
    """Σ p over the forecast options' distinct first tokens in context, from separate forward passes."""
    from sleight.position import encode_continuation
    from sleight.readout.audit.presets import FORECAST_OPTIONS

    ctx = model.encode(context)
    firsts = list(dict.fromkeys(encode_continuation(model, context, o)[0] for o in FORECAST_OPTIONS))
    return float(sum(np.exp(model.continuation_logprobs(ctx, [[t]])[0][0]) for t in firsts))


@pytest.mark.slow
def test_readout_masses_equal_independent_forward_passes(model, forecast_run):
    """App. H: the masses behind the new median cells -- (a), (b) as the forecast run read them, (c) and
    the short stems (g), (h) -- equal the options' first-token mass from separate forward passes."""
    from sleight.readout.audit.presets import FORECAST_ITEM_INSTRUCTION, forecast_prompt
    from sleight.readout.forecast.readouts import SHORT_STEMS

    items, rows, recs = forecast_run
    for it, r in zip(items, recs):
        orig = next(x for x in rows if x["item_id"] == it.id and x["position"] == "original")
        stem = next(x for x in rows if x["item_id"] == it.id and x["position"] == "stem")
        assert (r["masses"]["original"], r["masses"]["stem"]) == (orig["option_mass"], stem["option_mass"])
        prompt = forecast_prompt(orig["note"], it.question, it.choices)[0]
        deleted = model.render_chat([{"role": "user", "content": prompt.replace("\n" + FORECAST_ITEM_INSTRUCTION, "")}]).text
        assert r["masses"]["deleted"] == pytest.approx(_mass(model, deleted), abs=MASS_ATOL)
        for key, short in SHORT_STEMS.items():
            ctx = model.render_chat([{"role": "user", "content": prompt}], prefill=short).text
            assert r["masses"][key] == pytest.approx(_mass(model, ctx), abs=MASS_ATOL)


# -- App. B: the forecast's and the reader task's argmax ---------------------------------------------------
def test_app_b_config_as_printed_and_rows_by_hand():
    """App. B: "the forecast argmax and the reader task's argmax are the same token on 59 of the 60 rows
    whose notes state the answer, against 38 of the 60 whose notes do not", on App. C.3's 120-row probe."""
    from sleight.readout.forecast.constructed import reader_rows
    from sleight.readout.items import RaceItem

    t = load_table("appendix-b")
    assert t.paper == {"qwen3-4b": {"rows_gold": 60, "rows_unrelated": 60, "same_gold": 59, "same_unrelated": 38}}
    assert t.runs["probe"].command == "constructed-reader" and t.runs["probe"].items == 120 and t.runs["probe"].paper_data == "race-h:hub:n=120"
    assert "App. B" in t.section and "App. C.3" in t.section and "mixed" in t.inferred
    items = [RaceItem("i1", "p", "q", ("a", "b", "c", "d"), "A"), RaceItem("i2", "p", "q", ("a", "b", "c", "d"), "B")]
    read = {"option_logprobs": [-0.1, -3.0, -4.0, -5.0], "option_mass": 0.9, "argmax_class": "answer_letter", "argmax_id": 32}
    rows = reader_rows(items, ["constructed", "unrelated"], [(read, read), (read, read)], [32, 33])
    assert [(r["item_id"], r["argmax_id"], r["forecast_argmax_id"], r["same_argmax"]) for r in rows] == [
        ("i1", 32, 32, 1.0), ("i1", 32, 32, 1.0), ("i2", 32, 33, 0.0), ("i2", 32, 33, 0.0),
    ]
    assert reader_rows(items[:1], ["constructed"], [(read, read)])[0]["same_argmax"] is None  # the forecast not read


@pytest.mark.slow
def test_app_b_argmaxes_equal_greedy_first_tokens(model):
    """On the bundled model and the shipped RACE-H fixture: each row's reader argmax is the reader
    prompt's greedy first token, and its forecast argmax the App. B forecast prompt's (the audit's
    original variant with the same note), decoded separately."""
    from sleight.readout.audit.presets import forecast_items
    from sleight.readout.audit.variants import make_variant, render
    from sleight.readout.data import race_items
    from sleight.readout.data.fixtures import fixtures_dir
    from sleight.readout.forecast.constructed import read_constructed
    from sleight.readout.forecast.pipeline import reader_prompt

    spec = f"race-h:{fixtures_dir()}/ehovy/race/high/test-00000-of-00001.parquet"
    ds, items = race_items(spec, 4)
    records = ds.view("forecast", 4)
    rows = read_constructed(model, items, records)
    spaced = [r for r in rows if r["spacing"] == "spaced"]
    for it, ai, r in zip(items, forecast_items(records, note="mixed"), spaced):
        forecast = render(model, make_variant(ai, "original"))
        reader = model.render_chat([{"role": "user", "content": reader_prompt(str(ai.meta["note"]), it)}]).text
        first = [model.greedy([model.encode(c)], 1)[0].token_ids[0] for c in (forecast, reader)]
        assert (r["forecast_argmax_id"], r["argmax_id"]) == tuple(first)
        assert r["same_argmax"] == float(first[0] == first[1])


# -- App. C.6: declared sets and vocabulary, tokenisers only -------------------------------------------------
def test_app_c6_config_as_printed():
    """App. C.6: ' (A)', ' (B)' shares a first token on all eleven checkpoints and ' no', ' yes' stays distinct;
    the spaced grid shares on the seven main checkpoints and stays distinct on GPT-2 and the three Flan ones;
    the rule gives seven false clearances and no false alarms across the 33 cells."""
    from sleight.readout.reproduce import kinds

    t = load_table("appendix-c6")
    assert kinds.kind(t.runs["sets"].command).tokenizer_only and t.runs["sets"].items == 64
    assert dict(t.runs["sets"].settings)["sets"] == {"labels": [" (A)", " (B)"], "no_yes": [" no", " yes"], "grid": [" 1", " 2", " 3", " 4", " 5"]}
    names = [c.name for c in t.checkpoints]
    main, further = names[:7], names[7:]
    assert further == ["gpt2", "flan-t5-xl", "flan-t5-xxl", "flan-ul2"] and not t.paper_rows  # all eleven measured
    assert all(c.revision is None for c in t.checkpoints[7:]) and all(c.revision for c in t.checkpoints[:7])  # App. A.2 pins the seven only
    assert all(t.paper[c] == {"labels": 0, "no_yes": 1, "grid": 0, "false_clearances": 1, "false_alarms": 0} for c in main)
    assert all(t.paper[c]["grid"] == 1 and t.paper[c]["false_clearances"] == 0 for c in further)
    assert [a.name for a in t.averages] == ["Eleven checkpoints"] and all(s.average == "Eleven checkpoints" for s in t.summaries)
    cells = sum(len([k for k in ("labels", "no_yes", "grid") if k in t.paper[c]]) for c in t.paper)
    assert cells == 33 and [(s.how, s.paper) for s in t.summaries] == [("sum", 7), ("sum", 0)]


def test_vocabulary_rows_by_hand():
    """A set's row: distinct first tokens on every context or not, and C.6's rule (distinct predicted when the
    first characters after the separator differ), on a hand-made encoding where ' 1' and ' 2' share ' '."""
    from sleight.readout.reproduce.kinds.vocabulary import rule_distinct, set_row

    vocab = {"ctx": [1], " ": [9], " 1": [9, 11], " 2": [9, 12], " no": [21], " yes": [22]}

    def encode(text):
        out, rest = [], text
        while rest:
            piece = max((p for p in vocab if rest.startswith(p)), key=len)
            out, rest = out + vocab[piece], rest[len(piece):]
        return out

    assert rule_distinct([" 1", " 2"]) and not rule_distinct([" (A)", " (B)"])
    grid = set_row("grid", [" 1", " 2"], ["ctx", "ctx"], encode)
    assert (grid["distinct_contexts"], grid["distinct"], grid["false_clearance"], grid["false_alarm"]) == (0, 0.0, 1.0, 0.0)
    yes = set_row("no_yes", [" no", " yes"], ["ctx"], encode)
    assert (yes["boundary_contexts"], yes["distinct"], yes["false_clearance"]) == (1, 1.0, 0.0)


def test_vocabulary_reads_the_bundled_tokenizer_alone(tmp_path):
    """The kind reads the tokenizer (no model is loaded: the context's model() refuses), renders Table 3's
    C0 prompts through its chat template, and a set's first tokens equal an independent encoding."""
    from sleight.backends.spec import ModelSpec
    from sleight.readout.data.fixtures import fixtures_dir
    from sleight.readout.reproduce.kinds import RunContext
    from sleight.readout.reproduce.kinds.vocabulary import load_tokenizer, vocabulary_rows

    t = load_table("appendix-c6")
    data = t.runs["sets"].fixture_spec()

    def no_model():
        raise AssertionError("C.6 reads the tokenizer only")

    ctx = RunContext(Checkpoint("smollm2", "smollm2-135m-instruct"), t.runs["sets"], tmp_path / "run", data, 3, ModelSpec("smollm2-135m-instruct"), no_model, 10, 0)
    rows = {r["set"]: r for r in vocabulary_rows(ctx)}
    assert set(rows) == {"labels", "no_yes", "grid"} and all(r["contexts"] == 3 for r in rows.values())
    tok = load_tokenizer(ModelSpec("smollm2-135m-instruct")).tokenizer
    from sleight.readout.audit.conditions import condition_items
    from sleight.readout.data import load_data

    item = condition_items("C0", load_data(data).view("forecast", 1), n=1)[0]
    text = tok.apply_chat_template([dict(m) for m in item.messages], tokenize=False, add_generation_prompt=True)
    base = tok(text, add_special_tokens=False)["input_ids"]
    for name, options in dict(t.runs["sets"].settings)["sets"].items():
        firsts = [tok(text + o, add_special_tokens=False)["input_ids"][len(base)] for o in options]
        assert rows[name]["distinct"] == float(len(set(firsts)) == len(firsts)), name
    assert vocabulary_rows(ctx) == list(rows.values())  # a finished run is read back from its readings.parquet
    assert (ctx.run_dir / "readings.parquet").is_file() and (ctx.run_dir / "manifest.json").is_file()
    assert str(fixtures_dir()) in ctx.data


# -- App. E: four further checkpoints, Qwen2.5-72B-Instruct, OpenCompass's judge prompt ----------------------
def test_app_e_further_checkpoints_and_72b_as_printed():
    """App. E: on Phi-3, Mistral, falcon and SmolLM2 True and False hold under half the mass on every item of
    both tasks (SmolLM2's medians 0.023 and 0.153) and the labels after the stem at least half on every
    TriviaQA item; Qwen2.5-72B-Instruct at 495f393 in bfloat16: medians 9.85e-7 and 4.27e-6, maxima 1.5e-3 and
    6.7e-3, the smallest Moved mass on either task 0.847."""
    t = load_table("appendix-e-checkpoints")
    assert t.dtype == "bfloat16" and {c.model: c.revision for c in t.checkpoints}["Qwen/Qwen2.5-72B-Instruct"] == "495f393"
    assert t.runs["ptrue-mmlu"].paper_data == "mmlu:hub:subsample=500:seed=1" and t.runs["ptrue-triviaqa"].sampling_from == "generation_config"
    for c in ("phi-3-mini", "mistral-7b", "falcon-7b", "smollm2-1.7b"):
        assert (t.paper[c]["mmlu_below"], t.paper[c]["triviaqa_below"], t.paper[c]["triviaqa_moved_below"]) == (500, 500, 0)
    assert (t.paper["smollm2-1.7b"]["mmlu_median"], t.paper["smollm2-1.7b"]["triviaqa_median"]) == (0.023, 0.153)
    assert t.paper["qwen2.5-72b"] == {"mmlu_median": 9.85e-7, "mmlu_max": 1.5e-3, "triviaqa_median": 4.27e-6, "triviaqa_max": 6.7e-3}
    (s,) = t.summaries
    assert (s.how, s.columns, s.paper) == ("min", ("mmlu_moved_min", "triviaqa_moved_min"), 0.847)
    from sleight.readout.reproduce.aggregate import stat_cell

    rows = [{"m": 0.2}, {"m": 0.9}, {"m": None}]
    assert stat_cell(rows, Column("x", "X", "r", stat="max", column="m")).estimate == 0.9


def test_opencompass_prompt_is_pinned_with_its_source():
    """App. E: the default MMLU judge configuration of OpenCompass, its grading prompt as the file defines it
    (sha256 recorded with the repository, path and commit), and its verdict rule (the first A or B)."""
    import hashlib

    from sleight.readout.reproduce.kinds.grader import grader_config, grader_prompt, verdict

    cfg = grader_config()
    src = cfg["source"]
    assert src["repo"] == "open-compass/opencompass" and src["path"].endswith("mmlu/mmlu_llmjudge_gen_f4336b.py") and len(src["commit"]) == 40
    assert hashlib.sha256(cfg["template"].encode()).hexdigest() == src["template_sha256"]
    assert cfg["template"].startswith("Please as a grading expert") and cfg["template"].endswith("Judging the correctness of candidates' answers:")
    assert cfg["system"] == "You are a helpful assistant who evaluates the correctness and quality of models' outputs."
    text = grader_prompt("Q?", ["w", "x", "y", "z"], "C", "ANSWER: C")
    assert "<Original Question Begin>: Q?\n A) w\n B) x\n C) y\n D) z\n<Original Question End>" in text
    assert "<Gold Target Begin>: \nC\n<Gold Target End>" in text and "<Predicted Answer Begin>: \nANSWER: C\n<Predicted End>" in text
    assert "{" not in text
    assert [verdict(x) for x in ("A", " B", "Based on it", "The answer: C", "correct")] == ["A", "B", "B", "unknown", "unknown"]


def test_grader_calls_and_the_rotation_contrast_by_hand():
    """App. E: 1,000 shipped-order calls for 500 items; the contrast holds exactly one candidate per item --
    the correct one when gold is B or D (wrong verdict B), the incorrect one when gold is A or C (wrong
    verdict A) -- graded again with the choices moved two places, so 500 pairs as printed."""
    from sleight.readout.items import printed_wrong_letter
    from sleight.readout.reproduce.kinds.grader import calls

    records = [{"id": f"m{k}", "question": f"Q{k}?", "choices": ["w", "x", "y", "z"], "answer": g} for k, g in enumerate("ABCD")]
    out = calls(records)
    shipped = [c for c in out if c["order"] == "shipped"]
    rotated = [c for c in out if c["order"] == "rotated"]
    assert len(shipped) == 8 and len(rotated) == 4 and all(c["contrast"] == 1.0 for c in rotated)
    assert [(c["item_id"], c["candidate"]) for c in rotated] == [("m0", "incorrect"), ("m1", "correct"), ("m2", "incorrect"), ("m3", "correct")]
    for c in rotated:
        ship = next(s for s in shipped if (s["item_id"], s["candidate"]) == (c["item_id"], c["candidate"]))
        assert {ship["gold"], c["gold"]} in ({"A", "C"}, {"B", "D"}) and ship["gold_at_wrong"] + c["gold_at_wrong"] == 1.0
        assert ship["gold_at_cd"] + c["gold_at_cd"] == 1.0  # the gold letter moves between the wrong verdict's letter and C or D
    m1 = [c for c in shipped if c["item_id"] == "m1"]
    assert [c["candidate_letter"] for c in m1] == ["B", printed_wrong_letter("m1", "B")] and "ANSWER: B" in m1[0]["prompt"]
    m1_rot = next(c for c in rotated if c["item_id"] == "m1")
    assert "A) y\n B) z\n C) w\n D) x" in m1_rot["prompt"] and m1_rot["gold"] == "D" and "ANSWER: D" in m1_rot["prompt"]


@pytest.mark.slow
def test_grader_judges_on_the_bundled_model(model, tmp_path):
    """The judge's replies are the bundled model's greedy continuations of the rendered grading prompt
    (system turn, then the prompt), each verdict OpenCompass's reading of it."""
    from sleight.backends.spec import ModelSpec
    from sleight.readout.reproduce.kinds import RunContext
    from sleight.readout.reproduce.kinds.grader import grader_config, verdict

    t = load_table("appendix-e-grader")
    spec = t.runs["judge"]
    ctx = RunContext(Checkpoint("smollm2", "smollm2-135m-instruct"), spec, tmp_path / "run", spec.fixture_spec(), 1, ModelSpec("smollm2-135m-instruct"), lambda: model, 10, 0)
    from sleight.readout.reproduce.kinds.grader import calls, grader_rows

    rows = grader_rows(ctx)
    from sleight.readout.data import load_data

    todo = calls(load_data(spec.fixture_spec()).view("qa", 1))
    assert len(rows) == len(todo) == 3
    for row, call in zip(rows, todo):
        ids = model.render_chat([{"role": "system", "content": grader_config()["system"]}, {"role": "user", "content": call["prompt"]}]).ids
        greedy = [t for t in model.greedy([ids], spec.settings["max_new_tokens"])[0].token_ids if t not in model.eos_ids]
        assert row["response"] == model.decode(greedy)
        assert row["verdict"] == verdict(row["response"]) and row["error"] == float(row["verdict"] != ("A" if row["candidate"] == "correct" else "B"))


def test_app_h_grid_rows_difference_and_fitted_constant_are_cells():
    """App. H: on the Qwen3 rows with a grid number, (f) − (b) is −0.0847 [−0.1304, −0.0378]; (f)'s averaged
    Brier 0.2448 stands beside the fitted constant's 0.2220 (Table 12's fitted constants averaged over the
    four checkpoints). The grid-row difference pairs (f)'s passages with a grid number with (b) on the same
    passages (its rows carry no grid_found): a passage without one is in neither side."""
    import numpy as np

    from sleight.readout.reproduce.aggregate import metric_cell
    from sleight.stats import auroc

    h, t12 = load_table("appendix-h"), load_table("table12")
    assert h.paper["Qwen3 average"]["dauc_f_b_grid"] == -0.0847 and h.paper_ci["Qwen3 average"]["dauc_f_b_grid"] == (-0.1304, -0.0378)
    assert h.paper["Four-checkpoint average"]["fitted"] == 0.2220
    fitted = [t12.paper[c]["fitted"] for c in ("qwen3-4b", "qwen3-8b", "qwen3-14b", "llama-3-8b")]
    assert round(sum(fitted) / 4, 4) == 0.2220 and "0.2220" in h.inferred
    cols = {c.key: c for c in h.columns}
    assert (cols["fitted"].stat, dict(cols["fitted"].where)) == ("brier_fitted", {"readout": "original"})

    f = [0.9, 0.2, 0.7, 0.4, 0.6]  # (f) per passage; passage 2 writes no grid number
    b = [0.3, 0.8, 0.1, 0.6, 0.5]
    correct = [1.0, 0.0, 1.0, 0.0, 1.0]
    grid = [True, True, False, True, True]
    rows = [{"item_id": f"p{i}", "cluster": f"p{i}", "readout": "continuation", "score": f[i], "correct": correct[i], "grid_found": grid[i]} for i in range(5)]
    rows += [{"item_id": f"p{i}", "cluster": f"p{i}", "readout": "stem", "score": b[i], "correct": correct[i], "grid_found": None} for i in range(5)]
    cell = metric_cell(rows, cols["dauc_f_b_grid"], "forecast-readouts", {f"p{i}": i for i in range(5)}, np.ones((1, 5), dtype=np.int64))
    keep = [i for i in range(5) if grid[i]]
    want = float(auroc([f[i] for i in keep], [correct[i] for i in keep])) - float(auroc([b[i] for i in keep], [correct[i] for i in keep]))
    assert cell.n == 4 and cell.estimate == want

    # §6, App. H: (f)'s forecasts concentrate on one value: 50 on 167 and 221 passages, 70 on 232 of Qwen3-14B's
    assert (h.paper["qwen3-4b"]["f_writes_50"], h.paper["qwen3-8b"]["f_writes_50"], h.paper["qwen3-14b"]["f_writes_70"]) == (167, 221, 232)
    from sleight.readout.reproduce.aggregate import stat_cell
    from sleight.readout.scan.text_parsers import continuation_forecast

    texts = ["About 70 of them.", "70", "Maybe 50 readers", "They would answer in prose."]  # the last writes none: 0.5, not counted
    rows = [{"readout": "continuation", "score": continuation_forecast(t, ("10", "30", "50", "70", "90")), "grid_found": t != texts[-1]} for t in texts]
    assert (stat_cell(rows, cols["f_writes_70"]).estimate, stat_cell(rows, cols["f_writes_50"]).estimate) == (2.0, 1.0)


def test_table9_letter_counts_are_cells():
    """App. E (and §4): on 500 MMLU items an A–D letter is the argmax at the library's position on 387, 496 and
    500 items (the letter_argmax shares), 179, 215 and 129 of them C or D; with the quoted instruction
    deleted a letter is the argmax on 0, 0 and 3. A count's ``equals`` list counts a row holding any of
    its values (the letter with or without its space)."""
    from sleight.readout.reproduce.aggregate import stat_cell

    t = load_table("table9")
    got = {c: (t.paper[c]["letter_argmax"], t.paper[c]["letter_c_or_d"], t.paper[c]["letter_argmax_deleted"]) for c in ("qwen3-4b", "qwen3-8b", "qwen3-14b")}
    assert got == {"qwen3-4b": (0.774, 179, 0), "qwen3-8b": (0.992, 215, 0), "qwen3-14b": (1.0, 129, 3)}
    assert not any("387" in n for n in t.notes)
    cols = {c.key: c for c in t.columns}
    rows = [{"setting": "own", "readout": "library", "argmax_class": k, "argmax_token": tok}
            for k, tok in (("answer_letter", " C"), ("answer_letter", "D"), ("answer_letter", " A"), ("prose", " C"), ("answer_letter", "B"))]
    rows += [{"setting": "own", "readout": "deleted", "argmax_class": k, "argmax_token": "x"} for k in ("answer_letter", "prose", "prose")]
    assert stat_cell(rows, cols["letter_c_or_d"]).estimate == 2.0  # " C" and "D" among the letters, not the prose " C"
    assert stat_cell(rows, cols["letter_argmax_deleted"]).estimate == 1.0 and cols["letter_c_or_d"].integer


def test_app_e_grader_excess_errors_are_cells():
    """App. E: shipped-order errors on calls whose gold letter is the wrong verdict's letter exceed the other
    calls' rate with the same candidate correctness by about 19, 82% of the 23 errors: two cells, computed
    per candidate (the group's errors less the others' rate times the group's calls) and summed."""
    from sleight.readout.reproduce.aggregate import stat_cell

    t = load_table("appendix-e-grader")
    cols = {c.key: c for c in t.columns}
    assert t.paper["llama-3-8b"]["excess"] == 19 and t.paper["llama-3-8b"]["excess_share"] == 0.82
    assert round(0.82 * t.paper["llama-3-8b"]["errors"]) == 19  # the two printed numbers agree with each other
    assert (cols["excess"].group, cols["excess"].strata, dict(cols["excess"].where)) == ("gold_at_wrong", "candidate", {"order": "shipped"})

    def row(candidate: str, at_wrong: float, error: float, order: str = "shipped") -> dict[str, object]:
        return {"order": order, "candidate": candidate, "gold_at_wrong": at_wrong, "error": error}

    rows = [row("correct", 1.0, e) for e in (1.0, 1.0, 1.0, 0.0)] + [row("correct", 0.0, e) for e in (1.0, 0.0, 0.0, 0.0, 0.0, 0.0)]
    rows += [row("incorrect", 1.0, e) for e in (1.0, 0.0)] + [row("incorrect", 0.0, 0.0) for _ in range(2)]
    rows += [row("correct", 1.0, 1.0, order="rotated")] * 3  # the rotation contrast's calls are not in the shipped order
    excess = (3 - 4 * (1 / 6)) + (1 - 2 * 0.0)
    assert stat_cell(rows, cols["excess"]).estimate == excess and stat_cell(rows, cols["excess"]).n == 14
    assert stat_cell(rows, cols["excess_share"]).estimate == excess / 5


def test_app_c7_generated_answers_are_cells():
    """App. C.7: against the reader's generated answers (its first standalone letter in 16 greedy tokens) the
    Qwen3-averaged AUC moves from 0.4968 to 0.6132, a gain of 0.1163 [0.0371, 0.1956]; the continuations name
    a letter on 240, 239 and 240 rows. Cells of the same forecast run, its generated target in
    ``correct_generated`` (rows naming no letter have none and leave the metric)."""
    t = load_table("appendix-c7")
    cols = {c.key: c for c in t.columns}
    assert {k: cols[k].target for k in ("auc_original_gen", "auc_stem_gen", "auc_gain_gen")} == dict.fromkeys(("auc_original_gen", "auc_stem_gen", "auc_gain_gen"), "correct_generated")
    assert cols["auc_gain_gen"].minus == {"position": "original"} and cols["named"].equals == [True, False]
    avg = t.paper["Qwen3-averaged"]
    assert (avg["auc_original_gen"], avg["auc_stem_gen"], avg["auc_gain_gen"]) == (0.4968, 0.6132, 0.1163)
    assert t.paper_ci["Qwen3-averaged"]["auc_gain_gen"] == (0.0371, 0.1956)
    assert [t.paper[c]["named"] for c in ("qwen3-4b", "qwen3-8b", "qwen3-14b")] == [240, 239, 240]
    assert not any("not runnable" in n or "helper" in n for n in t.notes)
