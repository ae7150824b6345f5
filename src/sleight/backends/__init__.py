"""Model layer: one interface (:class:`LanguageModel`), several engines.

``load_model(spec, engine=...)`` is the only entry point the instruments use.
"""

from __future__ import annotations

from sleight.backends.base import Edit, Generation, LanguageModel, ModelInfo, NextToken, Rendered
from sleight.backends.resolve import DEFAULT_MODEL, list_offline_models, resolve
from sleight.errors import UserError

ENGINES = ("hf", "vllm")


def load_model(
    spec: str = DEFAULT_MODEL,
    *,
    engine: str = "hf",
    device: str | None = None,
    dtype: str = "float32",
    batch_size: int = 128,
    **engine_kwargs,
) -> LanguageModel:
    """Load a model for scoring and decoding; bad specs raise :class:`UserError` naming them."""
    if engine not in ENGINES:
        raise UserError(f"unknown engine '{engine}' (choose from {', '.join(ENGINES)})")
    if engine == "vllm":
        from sleight.backends.vllm import VLLMModel

        return VLLMModel(resolve(spec), dtype=dtype, batch_size=batch_size, **engine_kwargs)
    from sleight.backends.hf import HFModel

    return HFModel(resolve(spec), device=device, dtype=dtype, batch_size=batch_size)


__all__ = [
    "DEFAULT_MODEL",
    "ENGINES",
    "Edit",
    "Generation",
    "LanguageModel",
    "ModelInfo",
    "NextToken",
    "Rendered",
    "list_offline_models",
    "load_model",
    "resolve",
]
