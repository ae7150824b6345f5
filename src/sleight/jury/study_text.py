"""A local judge's reply read as the study read its judges' replies: vLLM's ``.text``.

The study's jurors ran in vLLM and their verdicts were read from ``o.outputs[0].text``
(fractalego/Sleight-of-Word at 08d2bae, ``scripts/panel_judge.py`` line 123, and
``src/awareness/judge.py`` line 120), under the default ``SamplingParams`` of line 103 there
(``temperature=0.0, max_tokens=256``). vLLM writes that text with its incremental detokenizer:
special tokens skipped (``skip_special_tokens=True`` by default), the token that stopped the reply
left out, no clean-up of tokenization spaces, and each token's text taken in the context of the
tokens before it, prompt included (``vllm/v1/engine/detokenizer.py``: a fast tokenizer's
``tokenizers.decoders.DecodeStream`` primed with the prompt's ids). sleight's own text of a reply
(:meth:`~sleight.backends.base.LanguageModel.decode`) keeps special tokens, so a local judge that
writes ``<|im_start|>`` or ``<file_sep>`` would be read otherwise than the study read it; under the
study's conventions (:mod:`sleight.jury.rules`, ``judge_text="vllm"``) a local judge's replies are
read here instead. A server judge's text is the server's (a vLLM server skips special tokens by
the same default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sleight.backends.chat import LocalChat


def vllm_text(model: Any, prompt_ids: Sequence[int], ids: Sequence[int]) -> str:
    """The text vLLM gives for reply tokens ``ids`` after ``prompt_ids`` (the reply's end-of-sequence
    token, which :meth:`greedy` does not return, is not in it either way).

    A fast tokenizer steps the same ``DecodeStream`` vLLM steps, primed with the prompt; a slow one
    decodes the ids with special tokens skipped and no clean-up of spaces."""
    tok = getattr(model, "tokenizer", None)
    if tok is None:  # not a transformers-tokenized model: drop the special ids, decode the rest
        return str(model.decode([int(t) for t in ids if not model.is_special(int(t))]))
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        return str(tok.decode([int(t) for t in ids], skip_special_tokens=True, clean_up_tokenization_spaces=False))
    from tokenizers.decoders import DecodeStream

    stream = DecodeStream(ids=[int(t) for t in prompt_ids], skip_special_tokens=True)
    return "".join(stream.step(backend, int(t)) or "" for t in ids)


class VLLMTextChat(LocalChat):
    """A local judge whose replies are read as vLLM's ``.text`` (greedy, batched, as :class:`LocalChat`)."""

    def __init__(self, chat: LocalChat) -> None:
        super().__init__(chat.model)
        self.name = chat.name

    def reply_text(self, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> str:
        return vllm_text(self.model, prompt_ids, token_ids)
