"""Operations on transformers' KV caches, and what the hf engine's decoders need of a model.

Beside :mod:`.kv_slab` (in-place writes) and :mod:`.ragged` (rows of their own lengths): the name
under which a model takes its cache, forking a batch-1 prefix into rows, selecting live rows, a
layer's keys and values, and the shape of an empty key tensor. :class:`CachedModel` is the part of
:class:`~sleight.backends.hf.HFModel` that :mod:`.sampling` and :mod:`.decode_stream` run their
loops over (forward passes, the prompts' prefill), so neither imports the engine.
"""

from __future__ import annotations

import copy as _copy
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from sleight.errors import UserError

if TYPE_CHECKING:
    from transformers import Cache


class CachedModel(Protocol):
    """A causal LM run pass by pass over a KV cache (the hf engine): what a decoding loop calls."""

    device: str
    batch_size: int
    model: Any  # the transformers module (its config and output layer give the cache's shape)
    slab: bool  # caches are written in place (:mod:`.kv_slab`): a request may join a running batch
    ragged: bool  # attention runs through :mod:`.ragged`: batches of rows of their own lengths

    @property
    def eos_ids(self) -> frozenset[int]: ...

    def forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor | None,
        pos: torch.Tensor,
        cache: Any = None,
        last_only: bool = False,
        keep: int = 0,
    ) -> tuple[torch.Tensor, Any]:
        """One forward pass: ``(logits, cache)``."""

    def prefill(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """The prompts' forward pass: the last position's logits, the cache and the attention mask."""

    def padded(self, seqs: Sequence[Sequence[int]], side: str = "left") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Batch tensors for ragged sequences: ids, attention mask and explicit positions."""


def cache_kwarg(model: torch.nn.Module) -> str:
    """The name under which this transformers takes the KV cache: ``cache`` from 5.20 on (where
    ``past_key_values`` is deprecated), ``past_key_values`` before. A wrong name is swallowed by
    ``**kwargs`` and the model silently runs without its cache, so the name is read, not assumed."""
    names = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in names:
            return name
    raise UserError(f"{type(model).__name__}.forward takes neither 'cache' nor 'past_key_values': this transformers is not supported")


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every sequence shares."""
    first = seqs[0]
    n = len(first)
    for s in seqs[1:]:
        m = min(n, len(s))
        i = 0
        while i < m and s[i] == first[i]:
            i += 1
        n = i
    return n


def repeat_cache(cache: Cache, n: int, copy: bool = True) -> Cache:
    """Fork a batch-1 cache into ``n`` rows (a copy per row, the prefix is not recomputed)."""
    forked = _copy.deepcopy(cache) if copy else cache
    if n > 1:
        forked.batch_repeat_interleave(n)
    return forked


def layer_kv(layer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A filled cache layer's keys and values."""
    k, v = layer.keys, layer.values
    assert isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
    return k, v


def select_cache(cache: Cache, idx: torch.Tensor) -> Cache:
    """Keep the cache's rows ``idx`` (in that order), in place."""
    cache.batch_select_indices(idx)
    return cache


def _text_config(module: Any) -> Any:
    cfg = module.config
    return cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg


def layer_count(module: Any) -> int:
    """The decoder layers of a transformers module: the layers of its cache."""
    return int(_text_config(module).num_hidden_layers)


def kv_template(module: Any) -> torch.Tensor:
    """An empty key tensor of the module's cache shape ``(1, kv_heads, 0, head_dim)``, dtype and device."""
    text = _text_config(module)
    heads = int(text.num_attention_heads)
    dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    kv = int(getattr(text, "num_key_value_heads", None) or heads)
    w = module.get_output_embeddings().weight
    return torch.empty((1, kv, 0, dim), dtype=w.dtype, device=w.device)


def pad_columns(ts: list[torch.Tensor], width: int) -> list[torch.Tensor]:
    """Each ``(rows, heads, columns, dim)`` tensor zero-padded on the right to ``width`` columns."""
    return [t if t.shape[-2] == width else torch.cat([t, t.new_zeros((*t.shape[:2], width - t.shape[-2], t.shape[-1]))], -2) for t in ts]
