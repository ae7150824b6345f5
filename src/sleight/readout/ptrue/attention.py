"""Attention statistics for lm-polygraph's attention estimators (AttentionScore, RAUQ, CSL; App. E).

App. E counts AttentionScore, RAUQ at both configured settings and CSL among its fourteen
single-answer estimators. Their statistics are attention weights, which transformers returns from an
eager-attention forward pass (``output_attentions=True``); SDPA and the engine's own attention do not
return them, so the pass runs with the model switched to eager attention and switched back after it
(the engine's decoding keeps its own attention). Each statistic is laid out as lm-polygraph 0.7.0's
calculator lays it out, so the library's own estimator classes read it unchanged:

* ``forwardpass_attention_weights`` -- ``AttentionForwardPassCalculator``
  (``stat_calculators/attention_forward_pass.py``): one forward pass over the prompt's tokens and
  the greedy tokens, every layer's and head's full attention matrix, ``(layers, heads, S, S)``
  float32.
* ``attention_all`` -- ``GreedyProbsCalculator`` (``stat_calculators/greedy_probs.py`` 194-239):
  read during generation there; row ``j`` holds, per layer and head (layer-major), the attention of
  the query that produced greedy token ``j`` (the position of token ``j - 1``) over greedy tokens
  ``0 .. j - 1``; row 0 and everything on or above the diagonal are zero, ``(layers * heads, n, n)``.
  Here it is read from the same forward pass as the first statistic: a causal model's attention at
  a position does not depend on the tokens after it, so the full pass gives the rows the library's
  cached decode gives (float noise apart; ``tests/test_estimators.py`` holds the two together).
* ``attention_weights_eliciting_prompt`` -- ``AttentionElicitingPromptCalculator``
  (``stat_calculators/attention_eliciting_prompt.py``): the library's few-shot Y/N prompt around
  the question (the raw input text, no chat template, the tokenizer's own special tokens), the
  greedy tokens, then ``"\\n\\nDecision:"``; the attention of the last position over the greedy
  tokens' span, ``(layers * heads, n)``.

The maths are pure functions of a forward pass's attention array; :func:`attention_stats` runs the
passes on a transformers engine (:class:`~sleight.backends.hf.HFModel`), the only engine here that
holds the model's attention modules.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypedDict

import numpy as np

from sleight.backends.base import LanguageModel
from sleight.errors import UserError

# AttentionElicitingPromptCalculator's prompt and suffix, as the library's indented string holds them
# (tests/test_estimators.py holds them equal to the installed class's attributes).
_INDENT = " " * 12
_ELICITING_LINES = (
    "Context: Luxor International Airport is a airport near Luxor in Egypt (EG). It is 353 km away from the nearest seaport (Duba). "
    "The offical IATA for this airport is LXR.",
    "Question: Luxor international airport is in which country?",
    "Answer: It is in the United States, and its IATA is LXR.",
    "Decision: N. (The airport is in Egypt, not the United States.)",
    "",
    "Context: Harry is a good witcher.",
    "Question: How old is Harry?",
    "Answer: Harry practices witchcraft.",
    "Decision: N. (The answer does not mention Harry's age.)",
    "",
    "Question: What is the capital of Kenya?",
    "Answer: Nairobi is the capital of Kenya.",
    "Decision: Y.",
    "",
    "Question: Who has won the most Premier League titles since 2015?",
    "Answer: Manchester City have win the most Premier League title after 2015.",
    "Decision: Y. (Grammar errors are ignored.)",
    "",
    "Question: {q}",
    "Answer: ",
)
ELICITING_PROMPT = (
    "Read the following question with optional context and decide if the answer correctly answer the question. "
    "Focus on the answer, and reply Y or N.\n" + "\n".join(_INDENT + line if line else "" for line in _ELICITING_LINES)
)
ELICITING_SUFFIX = "\n\nDecision:"


class AttentionStats(TypedDict):
    """The three statistics under lm-polygraph's names, per answer, and ``model``: what the library's
    AttentionScore and RAUQ read the layer and head counts from (``stats["model"].model.config``)."""

    forwardpass_attention_weights: list[np.ndarray]
    attention_all: list[np.ndarray]
    attention_weights_eliciting_prompt: list[np.ndarray]
    model: Any


# -- the maths: pure functions of one forward pass's attention array (layers, heads, S, S) ----------


def generation_attention(full: np.ndarray, prompt_len: int, n: int, *, float16: bool = False) -> np.ndarray:
    """``attention_all`` for an answer of ``n`` tokens after ``prompt_len`` prompt tokens: row ``j``
    is the attention of position ``prompt_len + j - 1`` over the answer's first ``j`` positions,
    layer-major over (layer, head), float64 zeros elsewhere (the library's ``np.zeros`` buffer).
    ``float16``: the values pass through float16 first, as the library converts a bfloat16 model's
    attention before numpy takes it (``greedy_probs.py`` 232-236)."""
    layers, heads = full.shape[:2]
    out = np.zeros((layers * heads, n, n))
    for j in range(1, n):
        rows = full[:, :, prompt_len + j - 1, prompt_len : prompt_len + j].reshape(layers * heads, j)
        out[:, j, :j] = rows.astype(np.float16) if float16 else rows
    return out


def answer_span(ids: Sequence[int], answer: Sequence[int]) -> tuple[int, int]:
    """Where the library finds the answer's tokens in the eliciting prompt's ids: the last match
    starting at or before ``len(ids) - n``, searched downwards; ``(-4 - n, -4)`` where none matches."""
    n = len(answer)
    arr = np.asarray(ids)
    for pos in range(len(ids) - n, -1, -1):
        if np.array_equal(arr[pos : pos + n], answer):
            return pos, pos + n
    return -4 - n, -4


def eliciting_attention(last: np.ndarray, ids: Sequence[int], answer: Sequence[int]) -> np.ndarray:
    """``attention_weights_eliciting_prompt`` from the last position's attention row over ``ids``
    (``(layers, heads, len(ids))``): its weights on the answer's span, ``(layers * heads, n)``."""
    start, end = answer_span(ids, answer)
    return last[:, :, start:end].reshape(-1, len(answer))


# -- the edge: eager forward passes on a transformers engine -----------------------------------------


def supports_attention(model: LanguageModel) -> bool:
    """Whether ``model`` can report attention weights: a transformers engine in this process."""
    from sleight.backends.hf import HFModel

    return isinstance(model, HFModel)


@contextmanager
def eager_attention(module: Any) -> Iterator[None]:
    """``module`` (a transformers model) on eager attention for the block, its own attention after."""
    before = module.config._attn_implementation
    module.set_attn_implementation("eager")
    try:
        if module.config._attn_implementation != "eager":  # transformers only warns where a model cannot switch
            raise UserError(f"{type(module).__name__} cannot switch to eager attention, so it reports no attention weights")
        yield
    finally:
        module.set_attn_implementation(before)


def _attentions(module: Any, ids: Sequence[int], device: Any, *, last_only: bool = False) -> np.ndarray:
    """Every layer's attention of one forward pass over ``ids``, ``(layers, heads, S, S)`` float32, as
    the library's calculators read it (no mask, no cache: one unpadded row); ``last_only``: the last
    query's row only, ``(layers, heads, S)``."""
    import torch

    with torch.no_grad():
        out = module(input_ids=torch.tensor([list(ids)], dtype=torch.long, device=device), output_attentions=True, use_cache=False)
    rows = [a[:, :, -1] if last_only else a for a in out.attentions]
    return torch.cat([a.to("cpu") for a in rows]).float().numpy()


def attention_stats(
    model: LanguageModel, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], questions: Sequence[str]
) -> AttentionStats:
    """The three statistics for each (prompt ids, greedy token ids, question text), two eager passes
    per answer: the prompt with its answer, and the eliciting prompt."""
    from types import SimpleNamespace

    import torch

    from sleight.backends.hf import HFModel

    if not isinstance(model, HFModel):
        raise TypeError(f"attention weights need the transformers engine, not {type(model).__name__}")
    tok = model.tokenizer
    suffix = list(tok([ELICITING_SUFFIX], add_special_tokens=False)["input_ids"][0])
    float16 = model.model.dtype == torch.bfloat16
    forward, generation, eliciting = [], [], []
    with eager_attention(model.model):
        for prompt, answer, q in zip(prompts, answers, questions):
            full = _attentions(model.model, [*prompt, *answer], model.device)
            forward.append(full)
            generation.append(generation_attention(full, len(prompt), len(answer), float16=float16))
            ids = [*tok([ELICITING_PROMPT.format(q=q)])["input_ids"][0], *answer, *suffix]
            eliciting.append(eliciting_attention(_attentions(model.model, ids, model.device, last_only=True), ids, answer))
    return AttentionStats(
        forwardpass_attention_weights=forward,
        attention_all=generation,
        attention_weights_eliciting_prompt=eliciting,
        model=SimpleNamespace(model=SimpleNamespace(config=model.model.config)),
    )
