"""The bundled tokenizer with extra whole tokens added (imported by test modules, not a conftest).

SmolLM2's pre-tokenizer never makes a token of punctuation next to a word; Qwen2 and Llama-3 style
pre-tokenizers do ('"the', '(The'). Adding such tokens to the real tokenizer gives the trigger rules
those cases on the bundled model's own vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence


def extended_tokenizer(model, extra: Sequence[str]):
    """A ``decode``/``encode``/``one`` view of the bundled tokenizer with ``extra`` added as tokens."""
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(model.tokenizer.name_or_path)
    assert t.add_tokens(list(extra)) == len(extra)

    class Tok:
        @staticmethod
        def decode(ids):
            return t.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

        @staticmethod
        def encode(text):
            return list(t(text, add_special_tokens=False)["input_ids"])

        @staticmethod
        def one(text):
            ids = Tok.encode(text)
            assert len(ids) == 1, (text, ids)
            return ids[0]

    return Tok


def bundled_tokenizer(model):
    """The same ``decode``/``encode``/``one`` view of the model's own tokenizer, nothing added."""

    class Tok:
        encode = staticmethod(model.encode)
        decode = staticmethod(model.decode)

        @staticmethod
        def one(text: str) -> int:
            ids = model.encode(text)
            assert len(ids) == 1, f"{text!r} is {len(ids)} tokens here"
            return ids[0]

    return Tok
