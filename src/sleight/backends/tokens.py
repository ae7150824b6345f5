"""The tokenizer side every engine shares: a Hugging Face tokenizer and its chat template.

Engines set ``self.tokenizer``, ``self._eos``, ``self._vocab`` and ``self.info``; this mixin gives
them the token half of :class:`sleight.backends.base.LanguageModel`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sleight.backends.base import ModelInfo, Rendered
from sleight.errors import UserError


class HFTokenizerOps:
    tokenizer: Any  # a transformers tokenizer (PreTrainedTokenizerBase)
    info: ModelInfo
    _eos: frozenset[int]
    _vocab: int

    @property
    def eos_ids(self) -> frozenset[int]:
        return self._eos

    @property
    def vocab_size(self) -> int:
        return self._vocab

    @property
    def chat_template(self) -> str | None:
        return self.tokenizer.chat_template

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.convert_tokens_to_string([self.tokenizer.convert_ids_to_tokens(int(token_id))])

    def is_special(self, token_id: int) -> bool:
        return int(token_id) in set(self.tokenizer.all_special_ids)

    def render_chat(
        self,
        messages: Sequence[dict[str, str]],
        *,
        add_generation_prompt: bool = True,
        prefill: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> Rendered:
        if not self.tokenizer.chat_template:
            raise UserError(f"model '{self.info.spec}' has no chat template")
        msgs = [dict(m) for m in messages]
        kwargs = dict(template_kwargs or {})
        if prefill is not None:
            # The answer stem is the opening of the assistant turn, left open for the model.
            msgs.append({"role": "assistant", "content": prefill})
            text = self.tokenizer.apply_chat_template(msgs, tokenize=False, continue_final_message=True, **kwargs)
        else:
            text = self.tokenizer.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
            )
        return Rendered(text=text, ids=self.encode(text))
