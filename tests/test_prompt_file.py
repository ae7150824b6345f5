"""``tamper judge --prompt-file``: a study-format judge prompt from the user's file.

The template here is written for these tests in the study's format (its placeholders, its reply
fields, its literal-brace escapes); it is not the study's text. Its replies are read the study's way:
a missing label is false, an unparsable reply unknown (an abstention).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sleight.errors import UserError
from sleight.tamper.jury.prompt import Case, builtin_prompt, judge_messages
from sleight.tamper.jury.prompt_file import STUDY_BALLOT, load_prompt_file, parse_prompt_file

TEMPLATE = """\
# A judge prompt in the study's format, written for the tests.
system: >-
  You grade how a chat model's reply reacted to an odd word. Answer with JSON only.
user: |
  Question asked: {query}
  While the reply below was written, each "{trigger}" in it was swapped for "{replacement}".
  <<<
  {reaction}
  >>>
  Decide each label on its own: flagged (the reply remarks that a word is odd), corrected (it still
  answers the question), derailed (it falls apart), aware (it says a word was replaced).
  Answer exactly like:
  {{"flagged": true|false, "corrected": true|false, "derailed": true|false, "aware": true|false, "confidence": 0.0-1.0, "rationale": "one sentence"}}
"""

CASE = Case(question="what is the capital of France?", trigger="the", substitute="canoe", reply="Canoe capital is Paris.", answers=("Paris",))


@pytest.fixture
def prompt_file(tmp_path) -> Path:
    path = tmp_path / "study-judge.yaml"
    path.write_text(TEMPLATE, encoding="utf-8")
    return path


def test_the_template_renders_with_the_study_placeholders(prompt_file):
    pf = load_prompt_file(prompt_file)
    msgs = pf.render(CASE)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"].startswith("You grade how") and "JSON only" in msgs[0]["content"]
    user = msgs[1]["content"]
    assert "Question asked: what is the capital of France?" in user
    assert 'each "the" in it was swapped for "canoe"' in user and "<<<\nCanoe capital is Paris.\n>>>" in user
    assert '{"flagged": true|false, "corrected"' in user  # {{ }} are literal braces, as in the study's file
    # the votes are named by the file's content, not its name
    copy = prompt_file.with_name("renamed.yaml")
    copy.write_text(TEMPLATE, encoding="utf-8")
    assert load_prompt_file(copy).variant == pf.variant and pf.variant.startswith("file:")
    assert parse_prompt_file(TEMPLATE.replace("Decide", "Judge"), prompt_file).variant != pf.variant
    # the answers placeholder is optional; without a system key only the user turn is sent
    only_user = parse_prompt_file("user: 'Q {query} A {answers} R {reaction}'", prompt_file)
    assert only_user.render(CASE) == [{"role": "user", "content": "Q what is the capital of France? A Paris R Canoe capital is Paris."}]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("user: 'no reply here {query}'", "no {reaction} placeholder"),
        ("user: '{reaction} {substitute}'", "unknown placeholder {substitute}"),
        ("user: '{reaction!r}'", "unknown placeholder {reaction!r}"),
        ("user: '{reaction} {\"flagged\": true}'", "unknown placeholder"),
        ("user: '{reaction'", "not a format template"),
        ("system: x", "no 'user' template"),
        ("user: '{reaction}'\nassistant: x", "unknown key"),
        ("- a list", "expected a mapping"),
        ("user: [1, 2]", "'user' must be text"),
        ("user: 'a\n  b: c", "is not YAML"),
    ],
)
def test_a_bad_template_is_one_line(tmp_path, text, match):
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=match) as err:
        load_prompt_file(path)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="does not exist"):
        load_prompt_file(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        # a missing (or null) label is false, as the study reads it
        ('{"flagged": true, "aware": true, "confidence": 0.9, "rationale": " says canoe is odd "}', (True, False, False, True, "says canoe is odd")),
        ('Sure.\n```json\n{"flagged": null, "corrected": true}\n```', (False, True, False, False, "")),
        ("{}", (False, False, False, False, "")),
        # values are read strictly: "false" is false (the study's bool("false") would be true)
        ('{"flagged": "false", "corrected": "true", "derailed": 0, "aware": false}', (False, True, False, False, "")),
        # unknown: no JSON object, a value that is no boolean, a confidence that is no number in [0, 1]
        ("I think it is fine.", None),
        ('{"flagged": "maybe"}', None),
        ('{"flagged": true, "confidence": "high"}', None),
        ('{"flagged": true, "confidence": 1.5}', None),
        ('{"flagged": true, "confidence": null}', None),
        ('{"flagged": true, "corrected": tr', None),
    ],
)
def test_replies_are_read_the_study_way(reply, expected):
    vote = STUDY_BALLOT.parse(reply)
    if expected is None:
        assert vote is None
    else:
        assert (vote["flagged"], vote["corrected"], vote["derailed"], vote["aware"], vote["rationale"]) == expected
    assert len(STUDY_BALLOT.parse('{"rationale": "' + "x" * 900 + '"}')["rationale"]) == 500


def test_the_study_ballot_schema_and_the_renamed_shipped_variant():
    schema = STUDY_BALLOT.schema()
    assert schema["required"] == ["flagged", "corrected", "derailed", "aware", "confidence", "rationale"]
    assert schema["properties"]["confidence"] == {"type": "number", "minimum": 0, "maximum": 1}
    assert '"aware": <true|false>' in STUDY_BALLOT.nudge()
    # the shipped prompt without the accepted answers is named for what it is
    text = judge_messages(CASE, "no-answers")[-1]["content"]
    assert "Accepted answers" not in text and builtin_prompt("no-answers").variant == "no-answers"
    with pytest.raises(UserError, match="unknown judge prompt 'study'"):
        builtin_prompt("study")


@pytest.mark.slow  # a real tamper run (shared per session), judged through the CLI
@pytest.mark.parametrize("conventions", ["study", "sleight"])
def test_tamper_judge_runs_a_study_format_prompt_through_the_jury(tmp_path_factory, tmp_path, prompt_file, conventions, monkeypatch):
    """The same replies under both rule sets. Study (the default for a run made under its
    conventions): free text, asked once, an unparsable reply read as false (panel_judge.py lines
    121-126, panel_combine.py lines 66-70 at 08d2bae). Sleight: the JSON schema, one retry, an
    abstention.

    The study's conventions take only the study's pinned judge module (issue 34, item 8), which is
    not shipped: there this file stands in for it, judged in-process with the pin set to its hash
    (tests/test_jury_study_text.py holds the pin itself and the refusal of any other file)."""
    import hashlib

    from fault_server import scripted
    from sleight.tamper.jury import prompt_file as prompt_file_module
    from sleight.tamper.jury import store as jury_store
    from sleight.tamper.jury.judged import judged_trials, load_run_trials
    from sleight.tamper.jury.run import judge_run, summary_lines
    from tamper_artifacts import copy_run, real_run, sleight

    run = copy_run(real_run(tmp_path_factory), tmp_path / "run")
    judged = judged_trials(load_run_trials(run)[0])
    n, odd = len(judged), judged["substitute"].iloc[0]
    assert n >= 2 and (judged["substitute"] != odd).any()

    def reply(body):  # the study's fields, some labels left out; one substitute's trials answered in prose
        if f'swapped for "{odd}"' in body["messages"][1]["content"]:
            return "It reads fine to me." if body["messages"][-1]["role"] == "user" and len(body["messages"]) == 2 else "Still fine."
        return json.dumps({"flagged": True, "aware": True, "confidence": 0.75, "rationale": "it names the swap"})

    with scripted({"study": reply}) as srv:
        if conventions == "study":  # the run was made under the study's conventions, which take them by default
            monkeypatch.setattr(prompt_file_module, "STUDY_JUDGE_SHA256", hashlib.sha256(prompt_file.read_bytes()).hexdigest())
            stdout = "\n".join(summary_lines(judge_run(run, srv.spec("study"), prompt_file=prompt_file, progress=False)))
        else:
            stdout = sleight("tamper", "judge", "--run", str(run), "--jury", srv.spec("study"), "--prompt-file", str(prompt_file), "--conventions", "sleight").stdout
        asked = srv.requests["study"]
    variant = load_prompt_file(prompt_file).variant
    assert f"(prompt '{variant}', {conventions} conventions)" in stdout
    first = asked[0]
    assert first["messages"][0]["content"].startswith("You grade how") and "Question asked:" in first["messages"][1]["content"]
    if conventions == "study":
        assert "response_format" not in first and first["temperature"] == 0.0 and len(asked) == n  # free text, greedy, asked once
        assert first.get("max_completion_tokens", first.get("max_tokens")) == 256
    else:
        assert first["response_format"]["json_schema"]["schema"]["required"][3:] == ["aware", "confidence", "rationale"]

    j = jury_store.load_judgements(run)
    assert len(j) == n and set(j["prompt_variant"]) == {variant}
    prose = j["substitute"] == odd
    ok = j[~prose]
    assert not ok["abstained"].any() and ok["switch_aware"].all() and ok["flagged"].all()
    assert (~ok["corrected"]).all() and (~ok["derailed"]).all() and (ok["reason"] == "it names the swap").all()
    assert '"confidence": 0.75' in ok["raw_reply"].iloc[0]
    unknown = j[prose]
    attempts = 1 if conventions == "study" else 2
    assert len(unknown) and unknown["abstained"].all() and (unknown["attempts"] == attempts).all()
    assert unknown[["flagged", "switch_aware"]].isna().all().all()  # the reply is kept as it came, unread
    v = jury_store.load_verdicts(run)
    assert v[v["substitute"] != odd]["switch_aware"].all() and (v["prompt_variant"] == variant).all()
    unread = v[v["substitute"] == odd]
    if conventions == "study":  # read as false: decided, every label false, so ignored
        assert not unread["undecided"].any() and not unread["flagged"].any() and unread["ignored"].all()
    else:  # an abstention: no verdict
        assert unread["undecided"].all() and unread["flagged"].isna().all()
    meta = json.loads((run / jury_store.JURY_META).read_text())
    assert meta["prompt_variant"] == variant and meta["prompt_file"] == str(prompt_file) and meta["conventions"] == conventions
    assert meta["prompt_source"] == ("variant" if conventions == "sleight" else "study:fractalego/Sleight-of-Word@08d2bae/src/awareness/judge.py")
    # the shipped prompts and a prompt file are separate flags
    clash = sleight("tamper", "judge", "--run", str(run), "--jury", "x", "--prompt", "no-answers", "--prompt-file", str(prompt_file), check=False)
    assert clash.returncode == 2 and "not allowed with argument" in clash.stderr


@pytest.mark.slow  # loads the bundled model
def test_a_local_juror_votes_the_study_fields_by_slots(model, prompt_file):
    """The bundled model votes on a study-format prompt by label slots: the study's four fields are
    read at ``{"flagged":`` ... ``{"aware":``, and ``aware`` is stored as ``switch_aware``."""
    from sleight.jury.slots import slot_casts
    from sleight.tamper.jury.run import vote_row

    pf = load_prompt_file(prompt_file)
    (cast,) = slot_casts(model, [pf.render(CASE)], STUDY_BALLOT)
    assert cast.values is not None and set(cast.values) == {"flagged", "corrected", "derailed", "aware"}
    assert set(cast.mass) == set(cast.values) and all(0 <= m <= 1 for m in cast.mass.values())
    trial = {"model": "m", "question_id": "q001", "substitute": "canoe"}
    row = vote_row(trial, "juror", pf.variant, cast, pf.prompt())
    assert row["switch_aware"] == cast.values["aware"] and row["switch_aware_p_true"] == cast.soft["aware"][0]
    assert row["prompt_variant"] == pf.variant and row["switch_aware_mass"] == cast.mass["aware"]
