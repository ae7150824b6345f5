"""The jury's two rule sets on the same votes (issue 26, item 3).

The study's (fractalego/Sleight-of-Word at 08d2bae): a reply read from its first ``{`` to its last
``}`` with Python truthiness (``src/awareness/judge.py`` lines 55-81), asked once, greedy, 256
tokens (``scripts/panel_judge.py`` line 103), an unparsable reply stored as ``None`` labels
(lines 123-126) that the combination counts as not-true, a label true when two jurors say so, a
trial combined once every juror has answered (``scripts/panel_combine.py`` lines 66-70). Sleight's:
strict values, one retry, an abstention, a majority of valid votes. Table 1's counts follow the reading.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest

from sleight.errors import UserError
from sleight.jury.ballot import Ballot, Field, study_object
from sleight.jury.rules import SLEIGHT, STUDY, rules_for
from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.prompt import BALLOT, LABELS
from sleight.tamper.jury.prompt_file import STUDY_BALLOT, load_prompt_file, parse_prompt_file
from sleight.tamper.report import tables
from sleight.tamper.report.paper_sections import model_trials
from sleight.tamper.report.runs import RunData

# ---------------------------------------------------------------------------------------------- reading


def test_the_study_reads_a_reply_from_first_to_last_brace_with_truthiness():
    study, strict = BALLOT.with_reading("study"), BALLOT
    text = 'Sure: {"flagged": "false", "corrected": 1, "derailed": []} and that is all.'
    assert study.parse(text) == {"flagged": True, "corrected": True, "derailed": False, "switch_aware": False, "reason": ""}
    assert strict.parse(text) is None  # strict: "false" is false, and a missing label makes the reply unreadable
    two = '{"flagged": true, "corrected": true, "derailed": true, "switch_aware": true} then {"x": 1}'
    assert study.parse(two) is None  # first '{' to last '}' is not one object: unknown
    assert strict.parse(two) is not None  # strict: the first object that fills every field
    assert study_object("no braces") is None and study_object("{1: 2}") is None and study_object('{"a": [1]}') == {"a": [1]}
    assert study.parse('{"Flagged": true}')["flagged"] is False  # exact keys, as obj.get("flagged")


def test_the_study_ballot_keeps_its_confidence_check_and_cuts_the_rationale():
    b = STUDY_BALLOT.with_reading("study")
    ok = b.parse(json.dumps({"flagged": True, "aware": "yes", "confidence": 0.5, "rationale": "x" * 600}))
    assert ok is not None and ok["aware"] is True and ok["corrected"] is False and len(ok["rationale"]) == 500
    assert b.parse('{"flagged": true, "confidence": 2}') is None  # outside [0, 1]: unknown
    assert b.parse('{"flagged": true, "confidence": null}') is None  # the study's float(None) fails
    assert b.parse('{"flagged": true}') is not None  # the study's default confidence, 0.5


def test_a_class_ballot_reads_its_class_strictly_under_either_reading():
    b = Ballot((Field("class", values=("item", "other")),)).with_reading("study")
    assert b.parse('{"class": "item"}')["class"] == "item" and b.parse('{"class": "elsewhere"}') is None
    with pytest.raises(ValueError):
        BALLOT.with_reading("loose")


# ---------------------------------------------------------------------------------------------- verdicts


def test_rule_sets():
    assert (STUDY.max_tokens, STUDY.retry, STUDY.vote_local, STUDY.vote_server) == (256, False, "text", "text")
    assert (SLEIGHT.max_tokens, SLEIGHT.retry, SLEIGHT.vote_local, SLEIGHT.vote_server) == (200, True, "slots", "schema")
    assert rules_for("study") is STUDY
    with pytest.raises(UserError, match="unknown --conventions"):
        rules_for("paper")
    # two true votes make a label true; an unparsable reply (None) is one that is not true
    assert STUDY.verdict([True, True, None], 3) is True and STUDY.verdict([True, None, False], 3) is False
    assert STUDY.verdict([True, True], 3, complete=False) is None  # a juror has not answered yet
    assert STUDY.verdict([True], 1) is True and STUDY.verdict([None], 1) is False  # a jury of one decides alone
    assert SLEIGHT.verdict([True, False], 3) is None and SLEIGHT.verdict([True, True], 3) is True


JURY = ["A", "B", "C"]
# Each trial's three replies: True/False read votes (one value for all four labels), None an
# unparsable reply, "error" a vote lost to a transport error.
VOTES = {
    "t1": (True, True, None),
    "t2": (True, None, False),
    "t3": (None, None, True),
    "t4": (True, False, False),
    "t5": (True, True, "error"),
}


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    trials = pd.DataFrame(
        [{"model": "m", "question_id": q, "substitute": "canoe", "substitute_index": 1, "is_entity": False, "n_swaps": 1, "untouched": False} for q in VOTES]
    )
    rows = []
    for q, votes in VOTES.items():
        for juror, v in zip(JURY, votes):
            read = isinstance(v, bool)
            rows.append(
                {"question_id": q, "substitute": "canoe", "juror": juror, "prompt_variant": "default", "abstained": not read,
                 "error": "HTTP 503" if v == "error" else None, **{label: v if read else None for label in LABELS}}
            )  # fmt: skip
    return trials, pd.DataFrame(rows)


def _run(trials: pd.DataFrame, judgements: pd.DataFrame, verdicts: pd.DataFrame) -> RunData:
    return RunData(Path("r"), "m", {}, trials, None, verdicts, judgements, {"jury": JURY, "prompt_variant": "default"})


def test_both_readings_of_the_same_votes_and_table_1_follows():
    trials, judgements = _frames()
    study = jury_store.compute_verdicts(trials, judgements, JURY, "default", STUDY).set_index("question_id")
    sleight = jury_store.compute_verdicts(trials, judgements, JURY, "default", SLEIGHT).set_index("question_id")
    assert list(study["flagged"].astype(object)) == [True, False, False, False, pd.NA]
    assert list(sleight["flagged"].astype(object)) == [True, pd.NA, pd.NA, False, True]
    assert study["undecided"].tolist() == [False, False, False, False, True]  # t5 waits for juror C
    assert sleight["undecided"].tolist() == [False, True, True, False, False]  # split and abstaining votes
    # the valid votes are counted the same way under both
    assert study["flagged_yes"].tolist() == sleight["flagged_yes"].tolist() == [2, 1, 1, 1, 2]

    t_study = tables.table1([_run(trials, judgements, study.reset_index())]).iloc[0]
    t_sleight = tables.table1([_run(trials, judgements, sleight.reset_index())]).iloc[0]
    assert (t_study["n_flagged"], t_study["n_ignored"], t_study["n_undecided"]) == (1, 3, 1)
    assert (t_sleight["n_flagged"], t_sleight["n_ignored"], t_sleight["n_undecided"]) == (2, 1, 2)
    assert t_study["Flag. %"] == 100 * 1 / 5 and t_sleight["Flag. %"] == 100 * 2 / 5  # the denominator is every judged trial
    # and the paper's Table 1 reads the same verdicts
    m = model_trials(_run(trials, judgements, study.reset_index()))
    assert m.labels is not None and int(m.labels["flagged"].sum()) == 1 and int(m.labels["ignored"].sum()) == 3


# ---------------------------------------------------------------------------------------------- the study's own prompt file

# A module in the form of the study's judge module (two string constants at module level), written
# for this test: its text is not the study's. The first statement would stop the test were the file run.
PY_MODULE = '''"""A judge module, for the test."""
raise SystemExit("this file must be parsed, never run")

SYSTEM = (
    "You grade a reply. "
    "Answer with JSON only."
)

USER_TEMPLATE = """Question: {query}
Every "{trigger}" became "{replacement}".
<<<
{reaction}
>>>
Reply like {{"flagged": true|false, "corrected": true|false, "derailed": true|false, "aware": true|false, "confidence": 0.0-1.0, "rationale": "..."}}"""


def _not_a_template():
    return 1
'''


def test_the_study_module_is_read_unchanged_and_equals_its_yaml_copy(tmp_path):
    py = tmp_path / "judge.py"
    py.write_text(PY_MODULE)
    pf = load_prompt_file(py)
    assert pf.system == "You grade a reply. Answer with JSON only." and pf.user.startswith("Question: {query}")
    yaml_copy = tmp_path / "judge.yaml"
    yaml_copy.write_text(json.dumps({"system": pf.system, "user": pf.user}))  # JSON is YAML
    assert load_prompt_file(yaml_copy).variant == pf.variant  # the same templates: the same votes


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("SYSTEM = 'x'\n", "no USER_TEMPLATE"),
        ("USER_TEMPLATE = 'a' + B\n", "USER_TEMPLATE (line 1) is not a plain string"),
        ("USER_TEMPLATE = f'{x}'\n", "is not a plain string"),
        ("def (:\n", "is not Python"),
        ("USER_TEMPLATE = 'no reply here {query}'\n", "no {reaction} placeholder"),
    ],
)
def test_a_python_prompt_file_that_is_not_the_study_module_is_refused(text, error):
    with pytest.raises(UserError, match=error.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{").replace("}", r"\}")):
        parse_prompt_file(text, Path("judge.py"))


# ---------------------------------------------------------------------------------------------- per-juror template arguments


def _judge_args(*argv: str) -> argparse.Namespace:
    from sleight.cli.main import build_parser

    return build_parser().parse_args(["tamper", "judge", "--run", "r", *argv])


def test_each_juror_gets_its_own_template_arguments():
    from sleight.cli.jury_args import juror_template_kwargs

    args = _judge_args("--jury", "a,openai:http://h:1/v1#q=1", "--thinking", "on", "--juror-chat-template-kwargs", 'openai:http://h:1/v1#q=1={"enable_thinking": false}')
    assert juror_template_kwargs(args, ["a", "openai:http://h:1/v1#q=1"]) == {"a": {"enable_thinking": True}, "openai:http://h:1/v1#q=1": {"enable_thinking": False}}
    assert args.max_new_tokens is None and args.conventions is None  # the budget and the rules follow the conventions
    for bad, msg in ((["--juror-chat-template-kwargs", 'z={"x": 1}'], "JUROR one of --jury"), (["--juror-chat-template-kwargs", "a={oops"], "not valid JSON")):
        with pytest.raises(UserError, match=msg):
            juror_template_kwargs(_judge_args("--jury", "a", *bad), ["a"])


@pytest.mark.slow  # a real tamper run (shared per session), judged through the CLI
def test_a_resumed_judge_with_other_template_arguments_or_rules_is_refused(tmp_path_factory, tmp_path):
    from fault_server import scripted
    from tamper_artifacts import copy_run, real_run, sleight

    run = copy_run(real_run(tmp_path_factory), tmp_path / "run")
    answer = json.dumps({label: False for label in LABELS} | {"reason": "fine"})
    with scripted({"q": lambda body: answer}) as srv:
        spec = srv.spec("q")
        off = ["--juror-chat-template-kwargs", spec + '={"enable_thinking": false}']
        sleight("tamper", "judge", "--run", str(run), "--jury", spec, "--limit", "1", *off)
        assert srv.requests["q"][0]["chat_template_kwargs"] == {"enable_thinking": False}
        meta = json.loads((run / jury_store.JURY_META).read_text())
        assert meta["juror_chat_template_kwargs"] == {spec: {"enable_thinking": False}} and meta["conventions"] == "study"
        assert meta["max_tokens"] == 256 and meta["rules"]["retry"] is False
        again = sleight("tamper", "judge", "--run", str(run), "--jury", spec, "--thinking", "on", check=False)
        assert again.returncode == 2 and "cast its votes with chat-template arguments" in again.stderr
        other = sleight("tamper", "judge", "--run", str(run), "--jury", spec, *off, "--conventions", "sleight", check=False)
        assert other.returncode == 2 and "--conventions study" in other.stderr
        done = sleight("tamper", "judge", "--run", str(run), "--jury", spec, *off)  # the same arguments resume
        assert "already stored 1" in done.stdout
