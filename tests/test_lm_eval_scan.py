"""``sleight readout scan --lm-eval-tasks DIR`` on the real model: both modes of every task."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sleight.cli.main import main
from sleight.errors import UserError
from sleight.position import encode_continuation
from sleight.readout.scan.lm_eval import find_tasks, leading_whitespace, scan_task
from tolerances import MASS_ATOL

DOCS = [
    {"q": "The capital of France is", "choices": ["Paris", "Rome", "Madrid"], "gold": 0},
    {"q": "Two plus two equals", "choices": ["four", "five", "six"], "gold": 0},
]


@pytest.fixture()
def tasks_dir(tmp_path):
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    common = "dataset_path: json\ndataset_kwargs:\n  data_files: docs.jsonl\ntest_split: train\ndoc_to_choice: choices\ndoc_to_target: gold\n"
    (tmp_path / "capitals.yaml").write_text("task: capitals\n" + common + "doc_to_text: '{{q}}'\n", encoding="utf-8")
    (tmp_path / "letters.yaml").write_text("task: letters\n" + common + "doc_to_text: '{{q}}'\ndoc_to_choice: ['A', 'B', 'C']\n", encoding="utf-8")
    (tmp_path / "gen.yaml").write_text("task: gen\noutput_type: generate_until\ndoc_to_text: x\ndoc_to_choice: y\n", encoding="utf-8")
    return tmp_path


def test_both_modes_with_flags_equal_an_independent_reading(model, tasks_dir):
    specs = find_tasks(tasks_dir)
    assert [s.path.name for s in specs] == ["capitals.yaml", "gen.yaml", "letters.yaml"]
    assert specs[1].skipped and "multiple_choice" in specs[1].skipped
    plain, chat = scan_task(model, specs[0])
    assert plain.mode == "plain" and plain.option_whitespace == " " and plain.separator_rate == 0.0
    assert "missing separator" not in plain.flags  # the delimiter is the separator
    assert chat.context_ending.endswith("assistant") and chat.option_whitespace.startswith("\n")
    assert "delimiter moved (chat mode)" in chat.flags
    # the median mass equals an independent computation: full next-token distribution, distinct first tokens
    masses = []
    for d in DOCS:
        lp = model.next_token_logprobs([model.encode(d["q"])])[0].astype(np.float64)
        firsts = {encode_continuation(model, d["q"], " " + c)[0] for c in d["choices"]}
        masses.append(float(np.exp(lp[sorted(firsts)]).sum()))
    assert plain.position.mass_median == pytest.approx(float(np.median(masses)), abs=MASS_ATOL)
    assert leading_whitespace([" a", " b"]) == " " and leading_whitespace([" a", "b"]) == ""


def test_cli_writes_the_task_report(model, tasks_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["readout", "scan", "--lm-eval-tasks", str(tasks_dir), "--out", str(out)]) == 0
    data = json.loads((out / "lm_eval_scan.json").read_text())
    assert [(r["task"], r["mode"]) for r in data["rows"]] == [("capitals", "plain"), ("capitals", "chat"), ("letters", "plain"), ("letters", "chat")]
    assert data["skipped"][0]["file"] == "gen.yaml"
    md = (out / "lm_eval_scan.md").read_text()
    assert "| capitals | chat |" in md and "delimiter moved (chat mode)" in md
    assert main(["readout", "scan", "--lm-eval-tasks", str(tmp_path / "nowhere")]) == 2
    with pytest.raises(UserError, match="no task YAML"):
        find_tasks(tmp_path / "out")
