"""The paper's data layer (sleight.readout.data), offline, on hub-layout fixture files.

The fixtures (sleight.readout.data.fixtures, built on first use into the user cache) have each hub dataset's own
columns at the path the hub stores the split under. Every test names the rule it holds: the paper's
RACE-H filters and draw, or lm-polygraph 0.7.0's item construction (file and line at tag v0.7.0).
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleight.errors import UserError
from sleight.readout.data import load_data, load_questions, qa_items, race_items
from sleight.readout.data.fixtures import fixtures_dir
from sleight.readout.data.race import MIN_WORDS, REVISION, word_count

HUB = fixtures_dir()
RACE = HUB / "ehovy/race/high/test-00000-of-00001.parquet"
MMLU = HUB / "cais/mmlu/all/test-00000-of-00001.parquet"
MMLU_PREBUILT = HUB / "LM-Polygraph/mmlu/simple_instruct/test-00000-of-00001.parquet"
TQA = HUB / "mandarjoshi/trivia_qa/rc.nocontext/validation-00000-of-00001.parquet"
MMLU_PRO = HUB / "TIGER-Lab/MMLU-Pro/data/test-00000-of-00001.parquet"
SUMMEVAL = HUB / "mteb/summeval/data/test-00000-of-00001.parquet"
SHA = "0123456789abcdef0123456789abcdef01234567"


def ids(spec: str) -> list[str]:
    return [r["id"] for r in load_data(spec).records]


# ------------------------------------------------------------------------------------------------
# RACE-H: the paper's sample
# ------------------------------------------------------------------------------------------------


def test_race_groups_passages_by_md5_and_drops_short_ones():
    """App. A.1: rows grouped by the MD5 of the passage (a repeated row or a passage seen again in another
    split joins its first occurrence), passages of at least 200 words kept (200 kept, 199 dropped)."""
    raw = pq.read_table(RACE).to_pylist()
    assert sorted(word_count(r["article"]) for r in raw)[:2] == [MIN_WORDS - 1, MIN_WORDS]
    ds = load_data(f"race-h:{RACE}:n=100")
    assert ds.provenance["counts"] == {"rows": 15, "passages": 10, "long_enough": 8, "listed": 8, "drawn": 8}
    passages = [r["passage_id"] for r in ds.records]
    assert "high2.txt" not in passages and "high3.txt" in passages  # 199 words; exactly 200
    assert len(passages) == len(set(passages))  # one question per passage
    assert all(word_count(r["passage"]) >= MIN_WORDS for r in ds.records)


def test_race_draw_is_random_random_0_and_prefix_stable():
    """App. A.1: random.Random(0) shuffles the passages and picks one question each; every sample is a
    prefix of that list (a smaller n, or --limit after the draw)."""
    first = ids(f"race-h:{RACE}:n=100:seed=0")
    assert ids(f"race-h:{RACE}:n=100:seed=0") == first
    assert ids(f"race-h:{RACE}:n=100:seed=1") != first
    assert ids(f"race-h:{RACE}:n=3:seed=0") == first[:3]
    assert ids(f"race-h:{RACE}") == first  # defaults: seed 0, the 3,052 passages of A.1 (more than the pool: all of it)
    assert load_data(f"race-h:{RACE}").provenance["rule"]["n"] == 3052


def test_race_provenance_file_sha_and_pinned_revision(tmp_path):
    """Paper, RACE-H sample: a pinned dataset revision. A plain file records its sha256; a file in a
    hub cache records the snapshot's revision; the pinned revision is always named."""
    prov = load_data(f"race-h:{RACE}").provenance
    assert prov["source"] == "file" and prov["revision"] is None and prov["pinned_revision"] == REVISION
    assert prov["files"][0]["sha256"] == hashlib.sha256(RACE.read_bytes()).hexdigest()
    assert (prov["dataset"], prov["config"], prov["split"]) == ("ehovy/race", "high", "test")
    assert list(prov["splits"]) == ["test", "validation", "train"]  # App. A.1's reading order, siblings of the file

    repo = tmp_path / "datasets--ehovy--race"
    snap = repo / "snapshots" / SHA / "high"
    snap.mkdir(parents=True)
    shutil.copy(RACE, snap / RACE.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA)
    for split in ("validation", "train"):
        shutil.copy(RACE.with_name(RACE.name.replace("test", split)), snap / RACE.name.replace("test", split))
    for where in (repo, snap / RACE.name):  # the repo folder (refs/main) or the file inside the snapshot
        prov = load_data(f"race-h:{where}").provenance
        assert prov["revision"] == SHA
    assert load_data(f"race-h:{repo}").provenance["source"] == "cache"

    # a datasets cache folder: Arrow stream files; the revision read from dataset_info.json's URLs
    cache = tmp_path / "ehovy___race" / "high" / "0.0.0" / "abc123"
    cache.mkdir(parents=True)
    table = pq.read_table(RACE)
    with pa.OSFile(str(cache / "race-test.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    (cache / "dataset_info.json").write_text(json.dumps({"download_checksums": {f"hf://datasets/ehovy/race@{SHA}/high/test-00000-of-00001.parquet": {}}}))
    for split in ("validation", "train"):
        t = pq.read_table(RACE.with_name(RACE.name.replace("test", split)))
        with pa.OSFile(str(cache / f"race-{split}.arrow"), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as writer:
            writer.write_table(t)
    ds = load_data(f"race-h:{tmp_path / 'ehovy___race'}")
    assert ds.provenance["revision"] == SHA and [r["id"] for r in ds.records] == ids(f"race-h:{RACE}")


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_race_reads_the_hub_columns_from_any_table_format(tmp_path, fmt):
    """The same hub rows as JSONL, JSON or CSV give the same sample as the Parquet file."""
    for split in ("test", "validation", "train"):  # A.1 reads the test file's validation and train siblings
        rows = pq.read_table(RACE.with_name(RACE.name.replace("test", split))).to_pylist()
        path = tmp_path / f"{split}.{fmt}"
        if fmt == "jsonl":
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        elif fmt == "json":
            path.write_text(json.dumps(rows))
        else:
            import csv

            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows({**r, "options": json.dumps(r["options"])} for r in rows)
    assert load_data(f"race-h:{tmp_path / f'test.{fmt}'}").records == load_data(f"race-h:{RACE}").records


# ------------------------------------------------------------------------------------------------
# MMLU and TriviaQA as lm-polygraph 0.7.0 builds them
# ------------------------------------------------------------------------------------------------

MMLU_FIRST = (
    "Given the following question about astronomy and four candidate answers (A, B, C, and D), choose the best answer. "
    "Your response should contain only the selected option's letter (A, B, C, or D), not a complete sentence.\n\n"
    "Here are a few examples of questions and answers:\n\n"
    "Q:Astronomy example 2?\nA. a2 one\nB. a2 two\nC. a2 three\nD. a2 four\nAnswer:C\n\n"
    "Q:Astronomy example 1?\nA. a1 one\nB. a1 two\nC. a1 three\nD. a1 four\nAnswer:B\n\n"
    "Q:Astronomy example 4?\nA. a4 one\nB. a4 two\nC. a4 three\nD. a4 four\nAnswer:A\n\n"
    "Q:Astronomy example 0?\nA. a0 one\nB. a0 two\nC. a0 three\nD. a0 four\nAnswer:A\n\n"
    "Q:Astronomy example 3?\nA. a3 one\nB. a3 two\nC. a3 three\nD. a3 four\nAnswer:D\n\n"
    "Now answer the following question in the same format:\n\n"
    "Q:Which planet is largest?\nA. planet one\nB. planet two\nC. planet three\nD. planet four\nAnswer:"
)


def test_mmlu_simple_instruct_prompt_is_lm_polygraphs():
    """lm-polygraph 0.7.0 dataset_builders/builders/mmlu.py: simple_instruct description and prompts
    (190-195, 96-114), instruct few-shot block (42-61), input = description + "\\n\\n" + block + item
    (80-90), question stripped; np.random.seed(1) once (22; constants.py SEED = 1) and 5 dev rows per
    subject by np.random.choice(5, 5, replace=False) in sorted-subject order (30, 38-41): [2, 1, 4, 0, 3]
    for the first subject, [0, 2, 4, 3, 1] for the second from the same state."""
    ds = load_data(f"mmlu:{MMLU}")
    assert ds.records[0]["input"] == MMLU_FIRST
    assert [r["id"] for r in ds.records] == ["mmlu-astronomy-0", "mmlu-astronomy-2", "mmlu-astronomy-4", "mmlu-college_biology-1", "mmlu-college_biology-3"]
    assert [r["answer"] for r in ds.records] == ["C", "A", "B", "B", "D"]  # output = the gold letter (91)
    bio = ds.records[3]["input"]
    assert bio.startswith("Given the following question about college biology and four")  # "_" -> " " (31-33)
    shots = [line for line in bio.split("\n") if line.startswith("Q:Biology example")]
    assert shots == [f"Q:Biology example {k}?" for k in (0, 2, 4, 3, 1)]
    assert ds.records[0]["instruction"] == MMLU_FIRST.split("\n\n")[0]
    assert ds.provenance["fewshot"]["split"] == "dev" and ds.provenance["rule"]["subsample"] == -1


def test_mmlu_continuation_variant_and_subject_cap(monkeypatch):
    """mmlu.py 127-154 and 62-72: the continuation description, examples joined by "\\n"; 74-77: at most
    mmlu_max_subject_size (100) test rows per subject, the first in file order."""
    rec = load_data(f"mmlu:{MMLU}:variant=continuation").records[3]
    assert rec["input"] == (
        "The following are multiple choice questions (with answers) about college biology.\n\n"
        "Q:Biology example 0?\nA. b0 one\nB. b0 two\nC. b0 three\nD. b0 four\nAnswer:B\n"
        "Q:Biology example 2?\nA. b2 one\nB. b2 two\nC. b2 three\nD. b2 four\nAnswer:D\n"
        "Q:Biology example 4?\nA. b4 one\nB. b4 two\nC. b4 three\nD. b4 four\nAnswer:B\n"
        "Q:Biology example 3?\nA. b3 one\nB. b3 two\nC. b3 three\nD. b3 four\nAnswer:A\n"
        "Q:Biology example 1?\nA. b1 one\nB. b1 two\nC. b1 three\nD. b1 four\nAnswer:C\n"
        "Q:What is a cell's powerhouse?\nA. organelle one\nB. organelle two\nC. organelle three\nD. organelle four\nAnswer:"
    )
    from sleight.readout.data import mmlu

    monkeypatch.setattr(mmlu, "MAX_SUBJECT_SIZE", 2)
    assert ids(f"mmlu:{MMLU}") == ["mmlu-astronomy-0", "mmlu-astronomy-2", "mmlu-college_biology-1", "mmlu-college_biology-3"]


def test_mmlu_prebuilt_rows_are_taken_as_they_are():
    """scripts/polygraph_eval 109-125: lm-polygraph reads LM-Polygraph/mmlu's input/output as published;
    the question and choices come back from stripped_input (stripped_formatters.py mcqa_stripped)."""
    row = pq.read_table(MMLU_PREBUILT).to_pylist()[0]
    ds = load_data(f"mmlu:{MMLU_PREBUILT}")
    (rec,) = ds.records
    assert rec["input"] == row["input"] and rec["answer"] == "B"
    assert rec["question"] == "Which star is nearest?" and rec["choices"] == ["Sirius", "The Sun", "Vega", "Polaris"]
    assert ds.provenance["layout"] == "LM-Polygraph/mmlu"


TQA_LEAD = (
    "Answer the following question as briefly as possible.\n\nHere are a few examples of questions and answers:\n\n"
    "Question: Train question 6?\nAnswer: answer 6\n\nQuestion: Train question 2?\nAnswer: answer 2\n\n"
    "Question: Train question 1?\nAnswer: answer 1\n\nQuestion: Train question 0?\nAnswer: answer 0\n\n"
    "Question: Train question 4?\nAnswer: answer 4\n\nNow answer the following question:\n\n"
)


def test_triviaqa_simple_instruct_prompt_is_lm_polygraphs():
    """lm-polygraph 0.7.0 dataset_builders/builders/trivia_qa.py: simple_instruct (177-183), instruct
    few-shot block with normalized_value and stripped questions (30-46), the item "Question: {q}\\nAnswer: "
    with the question not stripped (60-64); 5 train rows by np.random.seed(1); np.random.choice(7, 5,
    replace=False) = [6, 2, 1, 0, 4] (21, 27-29); output = the aliases (70)."""
    ds = load_data(f"triviaqa:{TQA}")
    first = ds.records[0]
    assert first["question"] == TQA_LEAD + "Question: Which river flows through Paris? \nAnswer: "
    assert first["aliases"] == ["Seine", "River Seine", "La Seine"] and first["answers"][0] == "Seine"
    assert first["instruction"] == "Answer the following question as briefly as possible."
    assert first["wrong"] == "William Shakespeare"  # the next question's answer (a constructed wrong answer)
    assert ds.records[2]["answers"] == ["Na", "NA"]
    assert ds.provenance["fewshot"]["split"] == "train"


def test_triviaqa_continuation_variant():
    """trivia_qa.py 113-141, 47-56, 65-69: examples "Question: {q}\\nAnswer:{normalized_value}" + "\\n"."""
    assert load_data(f"triviaqa:{TQA}:variant=continuation").records[1]["question"] == (
        "Question: Train question 6?\nAnswer:answer 6\nQuestion: Train question 2?\nAnswer:answer 2\n"
        "Question: Train question 1?\nAnswer:answer 1\nQuestion: Train question 0?\nAnswer:answer 0\n"
        "Question: Train question 4?\nAnswer:answer 4\nQuestion: Who wrote Hamlet?\nAnswer:"
    )


def test_polygraph_subsample_size_and_seed():
    """lm-polygraph 0.7.0 src/lm_polygraph/utils/dataset.py 119-134 (Dataset.subsample): np.random.seed(seed),
    np.random.choice(len, size, replace=False) in the drawn order, every row when fewer than size;
    scripts/polygraph_eval 136-137 applies it only when subsample_eval_dataset != -1, seed from the config (1)."""
    assert ids(f"triviaqa:{TQA}:subsample=2") == ["tc_4", "tc_3"]  # np.random.RandomState(1).choice(4, 2, replace=False)
    assert ids(f"triviaqa:{TQA}:subsample=2:seed=7") == ["tc_3", "tc_2"]
    assert ids(f"triviaqa:{TQA}:subsample=10") == ["tc_1", "tc_2", "tc_3", "tc_4"]
    assert ids(f"triviaqa:{TQA}") == ["tc_1", "tc_2", "tc_3", "tc_4"]
    assert load_data(f"mmlu:{MMLU}:subsample=2").provenance["rule"] == {
        "library": "lm-polygraph 0.7.0", "variant": "simple_instruct", "n_shot": 5, "fewshot_seed": 1, "max_subject_size": 100, "subsample": 2, "seed": 1,
    }


# ------------------------------------------------------------------------------------------------
# MMLU-Pro and SummEval
# ------------------------------------------------------------------------------------------------


def test_mmlu_pro_keeps_up_to_ten_options():
    """Appendix I data: TIGER-Lab/MMLU-Pro's options (up to 10) and answer letter; the audit items' options
    are this item's letters."""
    from sleight.readout.audit.items import items_from_records

    ds = load_data(f"mmlu-pro:{MMLU_PRO}")
    assert [len(r["choices"]) for r in ds.records] == [10, 9, 4]
    assert [r["answer"] for r in ds.records] == ["D", "B", "C"]
    second = ds.records[1]["input"]
    assert second.startswith("Given the following question about math and nine candidate answers (A, B, C, D, E, F, G, H, and I), choose")
    assert second.endswith("\nH. 11\nI. 12\nAnswer:")
    items = items_from_records((r, f"row {k}") for k, r in enumerate(ds.view("mcq")))
    assert items[0].options == tuple("ABCDEFGHIJ") and items[2].options == ("A", "B", "C", "D")
    assert ids(f"mmlu-pro:{MMLU_PRO}:category=biology") == ["mmlu-pro-70", "mmlu-pro-72"]


def test_summeval_one_record_per_summary_with_expert_grades():
    """Appendix G data: mteb/summeval's per-article lists become one record per (article, summary) with the
    experts' mean grades on the four dimensions; human_score is the chosen dimension's."""
    rows = pq.read_table(SUMMEVAL).to_pylist()
    ds = load_data(f"summeval:{SUMMEVAL}")
    assert [r["id"] for r in ds.records] == ["dm-test-0001:0", "dm-test-0001:1", "dm-test-0001:2", "dm-test-0002:0", "dm-test-0002:1"]
    flat = [(row, j) for row in rows for j in range(len(row["machine_summaries"]))]
    for rec, (row, j) in zip(ds.records, flat):
        assert rec["summary"] == row["machine_summaries"][j] and rec["source"] == row["text"]
        assert all(rec[d] == row[d][j] for d in ("coherence", "consistency", "fluency", "relevance"))
        assert rec["human_score"] == row["consistency"][j]
    assert [r["human_score"] for r in load_data(f"summeval:{SUMMEVAL}:dim=coherence").records] == [row["coherence"][j] for row, j in flat]


# ------------------------------------------------------------------------------------------------
# sources, errors, and the commands' item loading
# ------------------------------------------------------------------------------------------------


def test_hub_is_refused_in_one_line_when_unreachable(monkeypatch):
    """The hub path is tried only when `datasets` is importable and HF_HUB_OFFLINE is unset; otherwise one
    line naming the file to pass."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match=r"pass the file instead: race-h:PATH/high/test-00000-of-00001\.parquet") as err:
        load_data("race-h:hub")
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="summeval:PATH/test-00000-of-00001.parquet"):
        load_data("summeval:hub@abc")


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("race-h:/nowhere/test.parquet", "data file not found: /nowhere/test.parquet"),
        (f"race-h:{RACE}:n=0", "'n' must be at least 1"),
        (f"race-h:{RACE}:n=x", "'n' must be an integer"),
        (f"race-h:{RACE}:size=3", "unknown parameter(s) size for race-h"),
        (f"mmlu:{MMLU}:variant=cot", "'variant' must be one of simple_instruct, continuation"),
        ("nope:file", "expected FAMILY:FILE"),
        (f"summeval:{SUMMEVAL}:dim=taste", "'dim' must be one of"),
    ],
)
def test_bad_specs_are_one_line(spec, needle):
    with pytest.raises(UserError) as err:
        load_data(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_mmlu_test_file_without_dev_split_names_the_fewshot_option(tmp_path):
    path = tmp_path / "mmlu-test.parquet"  # no sibling with "dev" in its name
    shutil.copy(MMLU, path)
    shutil.copy(MMLU, tmp_path / "other.parquet")
    with pytest.raises(UserError, match=r":fewshot=PATH/all/dev-00000-of-00001\.parquet"):
        load_data(f"mmlu:{path}")
    assert ids(f"mmlu:{path}:fewshot={HUB / 'cais/mmlu/all/dev-00000-of-00001.parquet'}") == ids(f"mmlu:{MMLU}")


def test_forecast_ptrue_and_estimators_take_data_specs():
    """Every readout command's items come through the one layer: forecast (RaceItem), ptrue and
    estimators (QAItem answering lm-polygraph's input as is), with the revision or sha256 in the label."""
    from sleight.readout.downstream_run import ForecastConfig, PTrueConfig, load_downstream_items

    label, items = load_downstream_items(ForecastConfig(data=f"race-h:{RACE}:n=4", limit=3))
    assert [it.id for it in items] == ids(f"race-h:{RACE}:n=3") and "sha256" in label
    _, qa = load_downstream_items(PTrueConfig(data=f"mmlu:{MMLU}"))
    assert qa[0].lettered and qa[0].prompt == MMLU_FIRST and qa[0].gold_letter == "C"
    assert qa[0].instruction == MMLU_FIRST.split("\n\n")[0]  # what the paper's Deleted readout removes
    _, tq = qa_items(f"triviaqa:{TQA}", limit=2)
    assert [it.prompt for it in tq] == [r["question"] for r in load_data(f"triviaqa:{TQA}").records[:2]] and tq[0].aliases[0] == "Seine"
    assert [it.id for it in load_questions(None, f"triviaqa:{TQA}", limit=1)] == ["tc_1"]
    assert tq[0].instruction == "Answer the following question as briefly as possible."
    assert [it.id for it in race_items(f"race-h:{RACE}")[1]] == ids(f"race-h:{RACE}")
    with pytest.raises(UserError, match="summeval data has no records for qa"):
        qa_items(f"summeval:{SUMMEVAL}")
    with pytest.raises(UserError, match="one of --items FILE or --data SPEC"):
        PTrueConfig(items="x.jsonl", data=f"mmlu:{MMLU}").check()
    assert "--data" in PTrueConfig(data=f"mmlu:{MMLU}").command("out", label)


def test_audit_presets_take_data_specs_and_ptrue_takes_lettered_records(tmp_path):
    """readout audit --data: the preset's records from the layer (forecast from race-h, ptrue from mmlu and
    triviaqa, grade from summeval, audit items from mmlu-pro without a preset), and lettered records
    (hf:mmlu-style) made into P(True) question/answer pairs instead of being refused."""
    from sleight.readout.audit.run import load_audit
    from sleight.readout.audit.sources import load_source, mmlu_records

    items, config, _ = load_audit(preset="forecast", data=f"race-h:{RACE}:n=2")
    assert [i.id for i in items] == ids(f"race-h:{RACE}:n=2") and REVISION not in config.source and "sha256" in config.source
    items, _, _ = load_audit(preset="ptrue", data=f"mmlu:{MMLU}", limit=1)
    assert [i.id for i in items] == ["mmlu-astronomy-0:true", "mmlu-astronomy-0:false"]
    assert items[0].meta["question_text"] == MMLU_FIRST and items[0].meta["answer"] == "C" and items[1].meta["answer"] == "A"  # App. E: bare letters
    items, _, _ = load_audit(preset="ptrue", data=f"triviaqa:{TQA}", limit=1)
    assert items[0].meta["answer"] == "Seine" and items[1].meta["answer"] == "William Shakespeare"
    items, _, _ = load_audit(preset="grade", data=f"summeval:{SUMMEVAL}")
    assert [i.target for i in items] == [r["consistency"][j] for r in pq.read_table(SUMMEVAL).to_pylist() for j in range(len(r["machine_summaries"]))]
    items, config, name = load_audit(data=f"mmlu-pro:{MMLU_PRO}")
    assert name == "mmlu-pro" and items[1].options == tuple("ABCDEFGHI") and items[1].quoted_instruction in items[1].prompt_text
    with pytest.raises(UserError, match="mmlu data has no records for forecast"):
        load_audit(preset="forecast", data=f"mmlu:{MMLU}")

    lettered = mmlu_records([{"subject": "x", "question": "Q?", "choices": ["a", "b", "c", "d"], "answer": 2}])
    path = tmp_path / "mmlu.jsonl"
    path.write_text(json.dumps({**lettered[0], "passage": None}) + "\n")
    (pair,) = load_source(str(path), preset="ptrue")
    assert pair["answers"] == ["C"] and pair["wrong"] == "A" and pair["question"].startswith("Q?\nA. a\n")
    items, _, _ = load_audit(preset="ptrue", data=str(path))
    assert [i.target for i in items] == [1, 0]


def test_commands_parse_data_and_fail_in_one_line_before_a_model(capsys):
    """The CLI is a thin parse + one library call: a bad --data is exit code 2 and one line, for every
    readout command, before any model loads."""
    from sleight.cli.main import main

    for argv in (
        ["readout", "forecast", "--data", "race-h:/nowhere/test.parquet"],
        ["readout", "ptrue", "--data", "race-h:/nowhere/test.parquet"],
        ["readout", "estimators", "--data", "race-h:/nowhere/test.parquet"],
        ["readout", "audit", "--preset", "forecast", "--data", "race-h:/nowhere/test.parquet"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err == "sleight: error: data file not found: /nowhere/test.parquet (pass ehovy/race's high/test-00000-of-00001.parquet in the hub's own columns)"
    assert main(["readout", "audit", "--data", "hf:race"]) == 2
    assert "without --preset" in capsys.readouterr().err
