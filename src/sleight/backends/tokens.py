"""The token side every engine shares: its end ids, its chat template and the rendering rule.

Engines set ``self._eos``, ``self._vocab``, ``self.info`` and ``self.chat_template_kwargs`` (the
in-process ones ``self.tokenizer`` too); :class:`EngineTokens` gives them the token half of
:class:`sleight.backends.base.LanguageModel`, the rendering rule below (applied in one place,
:meth:`sleight.backends.base.Rendering.render_chat`), and :class:`HFTokenizerOps` the rest over a
Hugging Face tokenizer.

**The rendering rule** (the readout paper's, *Scoring the Wrong Question*): a context is the chat
template's rendering of the messages *with the generation prompt*, then the answer stem appended as
plain text, byte for byte, and the whole string encoded. The stem never goes through the template
(no ``continue_final_message``), so a template that trims message content (Llama-3, Gemma) keeps the
stem's trailing space, and a template that opens a thinking block (Qwen3) puts the stem after what
its generation prompt writes. The model's ``chat_template_kwargs`` (``enable_thinking``,
``date_string``, ...) reach every render; a call's own ``template_kwargs`` merge over them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from sleight.backends.base import ModelInfo, Rendering, sha256_text
from sleight.backends.resolve import ResolvedModel
from sleight.errors import UserError


def check_template_kwargs(kwargs: Mapping[str, object] | None, what: str = "chat_template_kwargs") -> dict[str, object]:
    """``kwargs`` as a plain dict of chat-template variables; anything else is one :class:`UserError`.

    The keys are Jinja variable names and the values JSON values, so that the run manifests that
    record them round-trip."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise UserError(f"{what} must be a JSON object (a mapping of template variables), not {type(kwargs).__name__}")
    out = dict(kwargs)
    bad = [k for k in out if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise UserError(f"{what}: {', '.join(repr(k) for k in bad)} cannot name a template variable")
    try:
        json.dumps(out)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{what} must hold JSON values only ({exc})") from None
    return out


class EngineTokens(Rendering):
    """The token half every engine shares: the ids it read at load, and :meth:`render_chat` by the
    rendering rule (:class:`~sleight.backends.base.Rendering`) over the engine's own template
    rendering (:meth:`template_render`)."""

    info: ModelInfo
    _eos: frozenset[int]
    _vocab: int
    # Template variables every render applies, set by the engine at load time (and recorded in its ModelInfo).
    chat_template_kwargs: Mapping[str, object] = MappingProxyType({})

    @property
    def eos_ids(self) -> frozenset[int]:
        return self._eos

    @property
    def vocab_size(self) -> int:
        return self._vocab


class HFTokenizerOps(EngineTokens):
    """An in-process engine's token half: a Hugging Face tokenizer and its chat template."""

    tokenizer: Any  # a transformers tokenizer (PreTrainedTokenizerBase)

    @property
    def chat_template(self) -> str | None:
        return self.tokenizer.chat_template

    def loaded_info(self, resolved: ResolvedModel, **engine: Any) -> ModelInfo:
        """The record of a model loaded in process: what was asked for and what it resolved to, the
        tokenizer's template hash and name, the template variables, then the engine's own fields."""
        return ModelInfo(
            spec=resolved.spec,
            model_id=resolved.model_id,
            revision=resolved.revision,
            chat_template_sha256=sha256_text(self.tokenizer.chat_template),
            tokenizer=f"{type(self.tokenizer).__name__}:{getattr(self.tokenizer, 'name_or_path', '')}",
            chat_template_kwargs=dict(self.chat_template_kwargs),
            **engine,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.convert_tokens_to_string([self.tokenizer.convert_ids_to_tokens(int(token_id))])

    def is_special(self, token_id: int) -> bool:
        return int(token_id) in set(self.tokenizer.all_special_ids)

    def template_render(
        self, messages: Sequence[dict[str, str]], add_generation_prompt: bool, template_kwargs: Mapping[str, object] | None
    ) -> tuple[str, list[int] | None]:
        """The tokenizer's ``apply_chat_template`` as text (its ids: the text's encoding)."""
        if not self.tokenizer.chat_template:
            raise UserError(f"model '{self.info.spec}' has no chat template")
        kwargs = {**self.chat_template_kwargs, **(template_kwargs or {})}
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )
        return text, None
