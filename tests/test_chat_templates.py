"""The rendering rule on the real chat templates of the readout paper's model families.

The rule (*Scoring the Wrong Question*; ``sleight.backends.tokens``): the context is the chat
template's rendering of the messages with the generation prompt, then the answer stem appended as
plain text, byte for byte. Each family's Jinja text is a fixture taken from a published copy
(``tests/fixtures/chat_templates/README.md`` names the repository, path and commit of each) and
runs on the bundled SmolLM2 tokenizer, so ``bos_token`` and ``eos_token`` are SmolLM2's. Every
expected string below is written from reading the template (transformers renders with
``trim_blocks`` and ``lstrip_blocks`` and drops the template's final newline), not copied from an
output. Token ids are asserted only on SmolLM2, the one family whose own tokenizer is here.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import pytest

from sleight.backends.base import ModelInfo
from sleight.backends.tokens import HFTokenizerOps, check_template_kwargs
from sleight.cli.common import chat_template_kwargs_from_args
from sleight.errors import UserError

FIXTURES = Path(__file__).parent / "fixtures" / "chat_templates"
FAMILIES = ("smollm2", "qwen3", "llama3", "gemma", "mistral", "phi3")

USER = "Out of 100 readers, how many answer correctly?"
STEM = "Out of 100 such readers, about "  # the trailing space is part of the stem
BOS = "<|im_start|>"  # the bundled tokenizer's bos_token, which every template here writes as its own
EOS = "<|im_end|>"
DATE = "26 Jul 2024"  # Llama-3's header date, fixed (the template otherwise writes today's)


def template(family: str) -> str:
    with open(FIXTURES / f"{family}.jinja", encoding="utf-8", newline="") as f:
        return f.read()


@pytest.fixture(scope="module")
def tokenizer():
    """The bundled model's tokenizer alone (no weights loaded)."""
    from transformers import AutoTokenizer

    from sleight.backends.resolve import DEFAULT_MODEL, resolve

    tok = AutoTokenizer.from_pretrained(resolve(DEFAULT_MODEL).load_path)
    assert (tok.bos_token, tok.eos_token) == (BOS, EOS)
    return tok


class TemplateOps(HFTokenizerOps):
    """The engines' own tokenizer half (the code every engine renders with), on one fixture template."""

    def __init__(self, tokenizer, family: str, chat_template_kwargs: dict | None = None) -> None:
        self.tokenizer = copy.deepcopy(tokenizer)
        self.tokenizer.chat_template = template(family)
        self.chat_template_kwargs = check_template_kwargs(chat_template_kwargs)
        self.info = ModelInfo(
            spec=f"fixture:{family}", model_id=family, revision="", chat_template_sha256="", tokenizer="bundled",
            engine="none", engine_version="", dtype="", device="", batch_size=0,
            chat_template_kwargs=dict(self.chat_template_kwargs),
        )
        self._eos = frozenset()
        self._vocab = 0


@pytest.fixture(scope="module")
def ops(tokenizer):
    return lambda family, kwargs=None: TemplateOps(tokenizer, family, kwargs)


def user(text: str = USER) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def old_rule(o: TemplateOps, messages, stem: str = STEM, **kwargs) -> str:
    """What the stem became before: an assistant message closed by ``continue_final_message``."""
    msgs = [*messages, {"role": "assistant", "content": stem}]
    return o.tokenizer.apply_chat_template(msgs, tokenize=False, continue_final_message=True, **kwargs)


def test_the_fixtures_are_the_six_families_and_smollm2_is_the_bundled_template(tokenizer):
    assert sorted(p.stem for p in FIXTURES.glob("*.jinja")) == sorted(FAMILIES)
    assert template("smollm2") == tokenizer.chat_template
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    assert all(f"`{f}.jinja`" in readme for f in FAMILIES)  # each fixture's source is recorded


# -- SmolLM2 (the bundled model's own template and tokenizer: ids matter here) ----------------------


def test_smollm2_stem_after_the_generation_prompt_and_its_ids(ops):
    o = ops("smollm2")
    r = o.render_chat(user(), prefill=STEM)
    prompt = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert r.text == prompt + STEM
    assert r.ids == o.encode(prompt + STEM)  # the whole string encoded once
    plain = o.render_chat(user())
    assert plain.text == prompt and r.ids[: len(plain.ids)] == plain.ids  # the prompt's ids are a prefix
    assert o.decode(r.ids[len(plain.ids) :]) == STEM
    assert o.token_text(r.ids[-1]) == " "  # the stem's trailing space is a token of its own, kept


# -- Qwen3 (the generation prompt opens an empty think block when thinking is off) ------------------


def test_qwen3_thinking_off_puts_the_stem_after_the_empty_think_block(ops):
    r = ops("qwen3").render_chat(user(), prefill=STEM, template_kwargs={"enable_thinking": False})
    assert r.text == f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n{STEM}"


def test_qwen3_thinking_on_puts_the_stem_right_after_the_assistant_header(ops):
    expected = f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n{STEM}"
    assert ops("qwen3").render_chat(user(), prefill=STEM, template_kwargs={"enable_thinking": True}).text == expected
    assert ops("qwen3").render_chat(user(), prefill=STEM).text == expected  # the template's default is thinking on
    # The stem as an assistant message always got the empty think block, thinking on or off.
    assert old_rule(ops("qwen3"), user(), enable_thinking=True).endswith(f"assistant\n<think>\n\n</think>\n\n{STEM}")


def test_qwen3_model_kwargs_apply_to_every_render_and_a_call_overrides_them(ops):
    o = ops("qwen3", {"enable_thinking": False})
    assert o.info.chat_template_kwargs == {"enable_thinking": False}
    head = f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"
    assert o.render_chat(user(), prefill=STEM).text == head + "<think>\n\n</think>\n\n" + STEM
    assert o.render_chat(user()).text == head + "<think>\n\n</think>\n\n"
    assert o.render_chat(user(), prefill=STEM, template_kwargs={"enable_thinking": True}).text == head + STEM


# -- Llama-3.x (trims message content; a dated system header) ---------------------------------------


def test_llama3_keeps_the_stems_trailing_space_though_it_trims_content(ops):
    o = ops("llama3", {"date_string": DATE})
    messages = [{"role": "system", "content": "  Answer briefly.  "}, *user(f"  {USER}  ")]
    r = o.render_chat(messages, prefill=STEM)
    assert r.text == (
        f"{BOS}<|start_header_id|>system<|end_header_id|>\n\n"
        f"Cutting Knowledge Date: December 2023\nToday Date: {DATE}\n\nAnswer briefly.<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{USER}<|eot_id|>"
        f"<|start_header_id|>assistant<|end_header_id|>\n\n{STEM}"
    )
    assert r.text.endswith("about ")
    # Through the template the stem was content too, trimmed: "about" without its space.
    assert old_rule(o, messages, date_string=DATE).endswith("<|end_header_id|>\n\nOut of 100 such readers, about")


def test_llama3_without_a_system_message_writes_an_empty_one(ops):
    r = ops("llama3").render_chat(user(), prefill=STEM, template_kwargs={"date_string": DATE})
    assert r.text == (
        f"{BOS}<|start_header_id|>system<|end_header_id|>\n\n"
        f"Cutting Knowledge Date: December 2023\nToday Date: {DATE}\n\n<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{USER}<|eot_id|>"
        f"<|start_header_id|>assistant<|end_header_id|>\n\n{STEM}"
    )


# -- Gemma (assistant is "model"; trims content) ------------------------------------------------------


def test_gemma_stem_after_the_model_turn(ops):
    r = ops("gemma").render_chat(user(f"{USER} "), prefill=STEM)
    assert r.text == f"{BOS}<start_of_turn>user\n{USER}<end_of_turn>\n<start_of_turn>model\n{STEM}"
    assert old_rule(ops("gemma"), user()).endswith("<start_of_turn>model\nOut of 100 such readers, about")


# -- Mistral ([INST] ... [/INST]; no generation prompt of its own) ----------------------------------


def test_mistral_stem_right_after_the_instruction(ops):
    o = ops("mistral")
    assert o.render_chat(user(), prefill=STEM).text == f"{BOS}[INST]{USER}[/INST]{STEM}"
    # A system message goes in front of the last user message.
    msgs = [{"role": "system", "content": "Answer briefly."}, *user()]
    assert o.render_chat(msgs, prefill=STEM).text == f"{BOS}[INST]Answer briefly.\n\n{USER}[/INST]{STEM}"
    assert o.render_chat(user()).text == f"{BOS}[INST]{USER}[/INST]"  # the generation prompt writes nothing


# -- Phi-3 (<|assistant|> as the generation prompt) ---------------------------------------------------


def test_phi3_stem_after_the_assistant_tag(ops):
    o = ops("phi3")
    assert o.render_chat(user(), prefill=STEM).text == f"<|user|>\n{USER}<|end|>\n<|assistant|>\n{STEM}"
    msgs = [{"role": "system", "content": "Answer briefly."}, *user()]
    assert o.render_chat(msgs, prefill=STEM).text == (
        f"<|system|>\nAnswer briefly.<|end|>\n<|user|>\n{USER}<|end|>\n<|assistant|>\n{STEM}"
    )
    # Without the generation prompt the template closes with its eos token instead.
    assert o.render_chat(user(), add_generation_prompt=False).text == f"<|user|>\n{USER}<|end|>\n{EOS}"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_renders_prompt_plus_stem_byte_for_byte(ops, family):
    """On every family the stemmed context is the plain prompt's text with the stem after it."""
    o = ops(family, {"date_string": DATE} if family == "llama3" else None)
    for stem in (STEM, "Answer: (", " A", "\n"):
        r = o.render_chat(user(), prefill=stem)
        assert r.text == o.render_chat(user()).text + stem
        assert r.ids == o.encode(r.text)


def test_a_stem_needs_the_generation_prompt(ops):
    with pytest.raises(ValueError, match="generation prompt"):
        ops("smollm2").render_chat(user(), add_generation_prompt=False, prefill=STEM)


# -- template arguments from the command line ---------------------------------------------------------


def parse(*flags: str) -> argparse.Namespace:
    from sleight.cli.main import build_parser

    return build_parser().parse_args(["generate", *flags])


def test_thinking_and_chat_template_kwargs_flags_reach_the_rendering(ops):
    assert chat_template_kwargs_from_args(parse()) == {}
    assert chat_template_kwargs_from_args(parse("--thinking", "off")) == {"enable_thinking": False}
    assert chat_template_kwargs_from_args(parse("--thinking", "on")) == {"enable_thinking": True}
    both = chat_template_kwargs_from_args(parse("--chat-template-kwargs", json.dumps({"date_string": DATE}), "--thinking", "off"))
    assert both == {"date_string": DATE, "enable_thinking": False}
    # Agreeing values are fine.
    same = parse("--chat-template-kwargs", '{"enable_thinking": true}', "--thinking", "on")
    assert chat_template_kwargs_from_args(same) == {"enable_thinking": True}

    qwen = ops("qwen3", chat_template_kwargs_from_args(parse("--thinking", "off")))
    assert qwen.render_chat(user(), prefill=STEM).text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n" + STEM)
    llama = ops("llama3", chat_template_kwargs_from_args(parse("--chat-template-kwargs", json.dumps({"date_string": DATE}))))
    assert f"Today Date: {DATE}\n\n" in llama.render_chat(user(), prefill=STEM).text


def test_model_from_args_passes_the_template_kwargs_to_load_model():
    """The one place every command turns its flags into a model hands the kwargs to the engine: the
    bundled model loaded from the flags renders with them and records them."""
    from sleight.cli.common import model_from_args

    model = model_from_args(parse("--thinking", "off", "--chat-template-kwargs", json.dumps({"date_string": DATE})))
    assert model.info.chat_template_kwargs == {"date_string": DATE, "enable_thinking": False}
    assert model_from_args(parse()).info.chat_template_kwargs == {}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--chat-template-kwargs", "{enable_thinking: false}"), "--chat-template-kwargs is not valid JSON"),
        (("--chat-template-kwargs", '["enable_thinking"]'), "--chat-template-kwargs must be a JSON object"),
        (("--chat-template-kwargs", '{"not a name": 1}'), "--chat-template-kwargs: 'not a name' cannot name a template variable"),
        (
            ("--chat-template-kwargs", '{"enable_thinking": true}', "--thinking", "off"),
            "--thinking off conflicts with --chat-template-kwargs enable_thinking=true",
        ),
    ],
)
def test_bad_template_kwargs_are_one_line_naming_the_flag(flags, message, capsys):
    with pytest.raises(UserError, match=message):
        chat_template_kwargs_from_args(parse(*flags))
    from sleight.cli.main import main

    assert main(["generate", *flags]) == 2  # refused before any model loads
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_bad_thinking_value_is_a_usage_error(capsys):
    from sleight.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["generate", "--thinking", "maybe"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--thinking" in err


def test_load_model_records_the_template_kwargs_and_renders_with_them():
    """The real hf engine: the kwargs are the model's, recorded in its ModelInfo (so in every run
    manifest) and applied to its renders."""
    from sleight.backends import load_model

    with pytest.raises(UserError, match="chat_template_kwargs must be a JSON object"):
        load_model(chat_template_kwargs=["enable_thinking"])  # type: ignore[arg-type]
    m = load_model(chat_template_kwargs={"enable_thinking": False, "date_string": DATE})
    assert m.info.as_dict()["chat_template_kwargs"] == {"enable_thinking": False, "date_string": DATE}
    m.tokenizer.chat_template = template("qwen3")  # the engine's own tokenizer, another family's template
    assert m.render_chat(user(), prefill=STEM).text == (
        f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n{STEM}"
    )
