"""A KV cache that writes each step in place instead of concatenating.

transformers' ``DynamicLayer.update`` runs ``torch.cat([keys, new])`` every step, so a decode
step copies every row's whole cache (at 101 rows and 300 columns SmolLM2-135M moves ~1.4 GB a
step, the biggest single cost of a lockstep tamper batch on a 2-core CPU). A slab keeps the keys
and values in a buffer with spare columns, writes the new ones into it and hands attention a view
of the filled part: the same numbers, no copy. The buffer grows by doubling, so a row's columns
are copied a few times over a decode instead of once a step.

Prompts and scoring passes run on the slab. Lockstep decoding runs a ragged batch instead
(:mod:`.ragged`) on models whose attention is transformers' SDPA; on others the slab is what lets
``decode_stream.GreedyStream`` batch continuously: rows of a new request join a running batch by padding the
shorter cache on the left with masked columns and stacking the rows; columns no live row attends
to any more are dropped from the left.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

_SPARE = 128  # columns reserved past what is needed when a buffer grows


def _with_room(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t``'s columns copied once into a buffer with spare ones after them: a batch that loses
    rows, gains rows or is trimmed is copied once, not once more at its next step (None: none)."""
    if t is None:
        return None
    buf = t.new_empty((*t.shape[:-2], t.shape[-2] + _SPARE, t.shape[-1]))
    buf[..., : t.shape[-2], :] = t
    return buf


class SlabLayer(DynamicLayer):
    """One layer's keys and values in a ``(batch, heads, capacity, dim)`` buffer, ``length`` filled."""

    def __init__(self) -> None:
        super().__init__()
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.length = 0

    # ``keys``/``values`` are what DynamicLayer's own methods and the mask code read: views.
    def _filled(self, buf: torch.Tensor | None) -> torch.Tensor | None:
        return None if buf is None else buf[..., : self.length, :]

    @property
    def keys(self) -> torch.Tensor | None:
        return self._filled(self._k)

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        self._k = _with_room(value)
        self.length = 0 if value is None else int(value.shape[-2])

    @property
    def values(self) -> torch.Tensor | None:
        return self._filled(self._v)

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        self._v = _with_room(value)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def _reserve(self, n: int, like_k: torch.Tensor, like_v: torch.Tensor) -> None:
        """Room for ``n`` more columns (and spare ones), the filled part copied over once."""
        cap = 0 if self._k is None else int(self._k.shape[-2])
        need = self.length + n
        if need <= cap:
            return
        b, h, _, d = like_k.shape
        k = like_k.new_empty((b, h, need + max(_SPARE, cap // 4), d))
        v = like_v.new_empty((b, h, k.shape[-2], like_v.shape[-1]))
        if self._k is not None and self.length:
            k[..., : self.length, :] = self._k[..., : self.length, :]
            assert self._v is not None
            v[..., : self.length, :] = self._v[..., : self.length, :]
        self._k, self._v = k, v

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = int(key_states.shape[-2])
        self._reserve(n, key_states, value_states)
        assert self._k is not None and self._v is not None
        self._k[..., self.length : self.length + n, :] = key_states
        self._v[..., self.length : self.length + n, :] = value_states
        self.length += n
        return self._k[..., : self.length, :], self._v[..., : self.length, :]

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def reset(self) -> None:
        self._k = self._v = None
        self.length = 0
        self.is_initialized = False

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0:
            self.length = max(0, self.length + tokens_to_remove)
        elif 0 < tokens_to_remove < self.length:
            self.length = tokens_to_remove

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.length:
            self.keys = self.keys.repeat_interleave(repeats, dim=0)  # type: ignore[union-attr]
            self.values = self.values.repeat_interleave(repeats, dim=0)  # type: ignore[union-attr]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices``. Ascending indices (rows retiring from a batch) are moved up
        inside the same buffer, row by row, with no allocation: a batch loses a row or two at most
        steps, and a fresh buffer each time costs as much as the copy it replaced."""
        if not self.length or self._k is None or self._v is None:
            return
        keep = indices.tolist()
        if keep != sorted(set(keep)):
            self._k, self._v = self._k.index_select(0, indices), self._v.index_select(0, indices)
            return
        for i, j in enumerate(keep):  # j >= i: row j is read before any later step writes it
            if i != j:
                self._k[i].copy_(self._k[j])
                self._v[i].copy_(self._v[j])
        self._k, self._v = self._k[: len(keep)], self._v[: len(keep)]


class SlabCache(DynamicCache):
    """A :class:`DynamicCache` whose layers are :class:`SlabLayer` (models without sliding-window
    layers; :func:`slab_supported` says which)."""

    def __init__(self) -> None:
        super(DynamicCache, self).__init__(layer_class_to_replicate=SlabLayer)

    def _slabs(self) -> list[SlabLayer]:
        return [layer for layer in self.layers if isinstance(layer, SlabLayer)]

    def _each(self, fn: Any) -> None:
        for layer in self._slabs():
            if layer.length:
                layer.keys, layer.values = fn(layer.keys), fn(layer.values)

    def pad_left(self, n: int) -> None:
        """``n`` columns of zeros before every row's columns (the caller masks them)."""
        if n > 0:
            self._each(lambda t: torch.cat([t.new_zeros((*t.shape[:2], n, t.shape[-1])), t], dim=-2))

    def drop_left(self, n: int) -> None:
        """Forget the first ``n`` columns (the caller has them masked for every row)."""
        if n > 0:
            self._each(lambda t: t[..., n:, :])

    def stack(self, other: SlabCache) -> None:
        """Append ``other``'s rows after this cache's (both the same number of columns)."""
        for layer, more in zip(self._slabs(), other._slabs()):
            if layer.length != more.length:
                raise ValueError("stacking caches of different widths (pad the shorter one first)")
            layer.keys = torch.cat([layer.keys, more.keys], dim=0)  # type: ignore[list-item]
            layer.values = torch.cat([layer.values, more.values], dim=0)  # type: ignore[list-item]


def slab_supported(config: Any) -> bool:
    """True for a decoder whose every attention layer is full (no sliding window, no linear/recurrent
    state): the cache layout a slab replaces exactly."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    types = getattr(text, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return not getattr(text, "sliding_window", None)
