"""The published-scorer presets: each rendered prompt against its template text and scored position.

A template, a fixture or a rendering change must fail here: the shipped templates are pinned by
hash, and each preset's first rendered context is checked against the template filled by hand, its
ending, its last tokens and their ids on the real tokenizer, and the in-context first tokens of its
declared options.
"""

from __future__ import annotations

import hashlib
from importlib import resources

import pytest

from sleight.errors import UserError
from sleight.position import encode_continuation
from sleight.readout.audit.variants import make_variant, render
from sleight.readout.ptrue.readouts import PTRUE_TEMPLATE, ptrue_prompt
from sleight.readout.scan.scorers import SCORERS, chatml_messages, grader_rotations, scorer_items, scorer_records, template_text

TEMPLATE_SHA256 = {
    "geval": "455153a5fdbba82ae8e790fee4ae74bc33b75fc5e1bc3b9cf6acbcf8864b1b4e",
    "relevance": "6339119ed2649b63e5bdb51b3e557d78bf29b6c7e3668cc80bdd646824070581",
    "alpacaeval": "adac8ebe5ef92b5ddcf2dab24aa5df1cee350d1890323ec902ca94f0d30bd2f0",
    "kadavath": "41ebd953f313db4ff043b8d3d6ce0cd7e13b018bf86a0d5dd3bbc4d40029d51a",
    "opencompass": "5c6835c914b986b50b8ca3742a659467bd84b9eee9716300e47f2298e36a245e",
    "lmpolygraph": "3734cc88f2de8f3881f830791ad08a5f2142fde52e3eaa11501da66ea7ad0552",
}
CHAT_END = "<|im_end|>\n<|im_start|>assistant\n"
DEFAULT_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
# The scored position of each preset: the last four tokens of the rendered context, and their ids.
LAST_TOKENS = {
    "geval": (["-", " Co", "herence", ":"], [29, 2923, 11570, 42]),
    "relevance": ([".", "\n", "Output", ":"], [30, 198, 17597, 42]),
    "alpacaeval": (["<|im_start|>", "ass", "istant", "\n"], [1, 520, 9531, 198]),
    "kadavath": ([" proposed", " answer", " is", ":"], [5433, 2988, 314, 42]),
    "opencompass": (["<|im_start|>", "ass", "istant", "\n"], [1, 520, 9531, 198]),
    "lmpolygraph": (["<|im_start|>", "ass", "istant", "\n"], [1, 520, 9531, 198]),
}


def filled(name: str) -> tuple[str, dict]:
    preset = SCORERS[name]
    rec = scorer_records(preset)[0]
    text = template_text(preset)
    for ph, field in preset.placeholders:
        assert text.count(ph) >= 1, (name, ph)
        text = text.replace(ph, rec[field])
    return text, rec


def expected_context(name: str) -> str:
    """The rendered context written out by hand from the template and the model's chat format."""
    preset = SCORERS[name]
    text, _ = filled(name)
    if preset.rendering == "completion":
        return text
    if preset.rendering == "chatml":
        system, user = text.split("<|im_end|>\n<|im_start|>user\n")
        system = system.removeprefix("<|im_start|>system\n").strip()
        user = user.removesuffix("<|im_end|>").strip()
        return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}{CHAT_END}"
    head = f"<|im_start|>system\n{preset.system}<|im_end|>\n" if preset.system else DEFAULT_SYSTEM
    return f"{head}<|im_start|>user\n{text}{CHAT_END}"


def test_every_preset_is_pinned():
    assert set(SCORERS) == set(TEMPLATE_SHA256) == set(LAST_TOKENS)
    for name, preset in SCORERS.items():
        data = resources.files("sleight").joinpath("data/scorers").joinpath(preset.template).read_bytes()
        assert hashlib.sha256(data).hexdigest() == TEMPLATE_SHA256[name], f"{preset.template} changed: update the pin and the tests"
        assert preset.source.paper and preset.source.url.startswith("https://")
        assert preset.parser in ("first_token", "full_sequence", "text") and preset.rendering in ("completion", "chat", "chatml")
        if preset.source.repo:
            assert preset.source.files and preset.source.revision


@pytest.mark.parametrize("name", list(SCORERS))
def test_rendered_prompt_and_scored_position(model, name):
    preset = SCORERS[name]
    item = scorer_items(name)[0]
    context = render(model, make_variant(item, "original"))
    assert context == expected_context(name)
    ids = model.encode(context)
    tokens, last_ids = LAST_TOKENS[name]
    assert ids[-4:] == last_ids and [model.token_text(t) for t in ids[-4:]] == tokens
    assert item.options == preset.options and item.chat_template == (preset.rendering != "completion")
    for option in preset.options:  # every declared option is read as a continuation of this context
        enc = encode_continuation(model, context, option)
        assert enc is not None and model.decode(enc) == option


def test_the_published_endings(model):
    ctx = {name: render(model, make_variant(scorer_items(name)[0], "original")) for name in SCORERS}
    assert ctx["geval"].endswith("Evaluation Form (scores ONLY):\n\n- Coherence:")
    assert ctx["relevance"].endswith("\nOutput:")
    assert ctx["kadavath"].endswith("\nIs the proposed answer:\n (A) True\n (B) False\nThe proposed answer is:")
    assert ctx["alpacaeval"].endswith(f"## Best Model Identifier{CHAT_END}")
    assert ctx["opencompass"].endswith(f"Judging the correctness of the candidate's answer:{CHAT_END}")
    assert "A: CORRECT\nB: INCORRECT" in ctx["opencompass"] and "\n A) Paris\n B) Rome\n C) Madrid\n D) Berlin\n" in ctx["opencompass"]
    # lm-polygraph's prompt is the one Library reads (sleight.readout.ptrue.readouts), in the same user turn.
    assert template_text(SCORERS["lmpolygraph"]) == PTRUE_TEMPLATE
    _, rec = filled("lmpolygraph")
    assert ctx["lmpolygraph"] == model.render_chat([{"role": "user", "content": ptrue_prompt(rec["question"], rec["answer"])}]).text


def test_a_user_template_is_audited_as_given(tmp_path):
    path = tmp_path / "my_coh.txt"
    path.write_text("Rate it.\n\n{{Document}}\n\n{{Summary}}\n\n- Coherence:\n", encoding="utf-8")
    item = scorer_items("geval", template=path, limit=1)[0]
    rec = scorer_records(SCORERS["geval"])[0]
    assert item.messages[0]["content"] == f"Rate it.\n\n{rec['document']}\n\n{rec['summary']}\n\n- Coherence:\n"  # read as is, trailing newline kept
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholders here", encoding="utf-8")
    with pytest.raises(UserError, match=r"needs the placeholder\(s\) \{\{Document\}\}, \{\{Summary\}\}"):
        scorer_items("geval", template=bad)
    with pytest.raises(UserError, match="template file not found"):
        scorer_items("geval", template=tmp_path / "missing.txt")


def test_user_records_are_checked(tmp_path):
    path = tmp_path / "recs.jsonl"
    path.write_text('{"id": "x", "query": "q"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"recs.jsonl line 1: the relevance preset needs string field\(s\) document"):
        scorer_records(SCORERS["relevance"], path)
    path.write_text('{"id": "x", "question": "q", "choices": ["a", "b"], "answer": "A"}\n', encoding="utf-8")
    with pytest.raises(UserError, match="'choices' must be a list of 4"):
        scorer_records(SCORERS["opencompass"], path)
    with pytest.raises(UserError, match="unknown scorer preset 'nope'"):
        scorer_items("nope")


def test_grader_rotations_move_the_gold_letter():
    rots = grader_rotations({"id": "o", "question": "Q?", "choices": ["w", "x", "gold", "z"], "answer": "C"})
    assert [r["gold_letter"] for r in rots] == ["A", "B", "C", "D"]
    for r in rots:
        assert r[r["gold_letter"]] == "gold" and r["target"] == r["gold_letter"] and r["prediction"] == "gold"
        assert sorted(r[x] for x in "ABCD") == ["gold", "w", "x", "z"]
    assert len(scorer_items("opencompass", limit=1)) == 4  # one record, four rotations


def test_chatml_split():
    turns = chatml_messages("<|im_start|>system\n S \n<|im_end|>\n<|im_start|>user\nU\n<|im_end|>")
    assert turns == ({"role": "system", "content": "S"}, {"role": "user", "content": "U"})
    with pytest.raises(UserError):
        chatml_messages("plain text")
