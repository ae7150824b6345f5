"""The jury's pure parts: the prompt, strict reading of replies, majority votes, the lexical baseline."""

from __future__ import annotations

import pytest

from sleight.errors import UserError
from sleight.tamper.jury.prompt import (
    LABELS,
    Case,
    accepted_answers,
    judge_messages,
    majority,
    parse_jury,
    parse_vote,
    retry_messages,
)
from sleight.tamper.jury.store import _ignored
from sleight.tamper.lexical import lexical_flag

CASE = Case(
    question="what is the capital of France?",
    trigger="the",
    substitute="canoe",
    reply="Canoe capital of France is Paris.",
    answers=("Paris",),
)


def test_prompt_states_the_protocol_and_every_definition():
    msgs = judge_messages(CASE)
    text = msgs[-1]["content"]
    assert msgs[0]["role"] == "system" and "JSON" in msgs[0]["content"]
    assert 'every occurrence of the word "the"' in text and "secretly replaced" in text
    for piece in (CASE.question, CASE.reply, '"canoe"', "Accepted answers", "Paris"):
        assert piece in text
    for label in LABELS:
        assert f"- {label}:" in text
    assert "JSON object only" in text


def test_no_answers_prompt_leaves_out_the_accepted_answers():
    text = judge_messages(CASE, "no-answers")[-1]["content"]
    assert "Accepted answers" not in text and "Paris" not in text.split("Altered reply:")[0]
    with pytest.raises(UserError, match="unknown judge prompt 'nope'"):
        judge_messages(CASE, "nope")


def test_retry_adds_the_bad_reply_and_a_nudge():
    first = judge_messages(CASE)
    again = retry_messages(first, "False")
    assert again[: len(first)] == first
    assert again[-2] == {"role": "assistant", "content": "False"}
    assert again[-1]["role"] == "user" and "JSON" in again[-1]["content"]


def test_shipped_answers_cover_the_100_questions():
    answers = accepted_answers()
    assert sorted(answers) == [f"q{i:03d}" for i in range(1, 101)]
    assert all(answers[q] and all(isinstance(a, str) and a.strip() for a in answers[q]) for q in answers)
    assert "Paris" in answers["q001"] and "Canberra" in answers["q007"] and "Au" in answers["q018"]


GOOD = '{"flagged": true, "corrected": false, "derailed": false, "switch_aware": true, "reason": "it says typo"}'


@pytest.mark.parametrize(
    "text",
    [
        GOOD,
        f"```json\n{GOOD}\n```",
        f"Here is my verdict:\n{GOOD}\nI hope this helps.",
        f"```\n{GOOD}```",
        GOOD.replace("switch_aware", "Switch-Aware"),
    ],
)
def test_fences_and_prose_around_the_json_are_tolerated(text):
    vote = parse_vote(text)
    assert vote is not None
    assert vote.labels() == {"flagged": True, "corrected": False, "derailed": False, "switch_aware": True}
    assert vote.reason == "it says typo"


def test_string_false_is_false_and_string_true_is_true():
    vote = parse_vote('{"flagged": "false", "corrected": "true", "derailed": "False", "switch_aware": "no"}')
    assert vote is not None
    assert vote.labels() == {"flagged": False, "corrected": True, "derailed": False, "switch_aware": False}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "False",
        "The reply is fine, nothing flagged.",
        '{"flagged": false, "corrected": true, "derailed": fal',  # truncated
        '{"flagged": false, "corrected": true, "derailed": false}',  # a label missing
        '{"flagged": "maybe", "corrected": true, "derailed": false, "switch_aware": false}',
        '{"flagged": 2, "corrected": true, "derailed": false, "switch_aware": false}',
        "{'flagged': False, 'corrected': True, 'derailed': False, 'switch_aware': False}",  # not JSON
        '{"flagged": <true|false>, "corrected": <true|false>, "derailed": <true|false>, "switch_aware": <true|false>}',
    ],
)
def test_unreadable_replies_give_no_vote(text):
    assert parse_vote(text) is None


def test_the_first_complete_object_wins_and_nesting_is_found():
    nested = '{"verdict": ' + GOOD + "}"
    assert parse_vote(nested).flagged is True
    later = '{"note": 1} then ' + GOOD.replace("true", "false")
    assert parse_vote(later).labels() == dict.fromkeys(LABELS, False)


@pytest.mark.parametrize(
    "votes,size,expected",
    [
        ([True, True, False], 3, True),
        ([True, False, False], 3, False),
        ([True, True, None], 3, True),
        ([True, False, None], 3, None),  # split: no two agreeing
        ([True, None, None], 3, None),  # one vote is not a majority of three
        ([None, None, None], 3, None),
        ([True], 1, True),  # a jury of one decides alone
        ([None], 1, None),
        ([False, False, True, True], 4, None),
        ([True, True, None, None, None], 5, True),
    ],
)
def test_majority_needs_two_agreeing_votes(votes, size, expected):
    assert majority(votes, size) is expected


def test_ignored_is_known_only_when_no_label_can_be_true():
    assert _ignored([False, False, False, False]) is True
    assert _ignored([False, True, None, False]) is False
    assert _ignored([False, None, False, False]) is None


def test_jury_spec_parsing():
    assert parse_jury("a, b ,openai:http://h:1/v1#m") == ["a", "b", "openai:http://h:1/v1#m"]
    with pytest.raises(UserError, match="appears twice"):
        parse_jury("a,a")
    with pytest.raises(UserError, match="bad --jury"):
        parse_jury("a,,b")


@pytest.mark.parametrize(
    "reply,substitute,flagged",
    [
        ("Canoe capital of France is Paris.", "canoe", False),
        ("Canoe capital of France is Paris. Sorry, canoe was a typo.", "canoe", True),
        ('I wrote "canoe" where I should not have.', "canoe", True),
        ("Canoe capital is Paris. I meant the capital.", "canoe", True),
        ("Mandela effect capital of Japan. The word Mandela effect is odd here.", "Mandela effect", True),
        ("Canoe theory of relativity. Canoe should be replaced.", "canoe", True),
        ("Paris. I meant Paris.", "canoe", False),  # the substitute is not even there
        ("Canoe Eiffel Tower is tall. It should be visited.", "canoe", False),  # cue in another sentence
        ("Canoeing is fun; a typo here.", "canoe", False),  # 'canoe' only inside another word
    ],
)
def test_lexical_baseline(reply, substitute, flagged):
    assert lexical_flag(reply, substitute).flagged is flagged
