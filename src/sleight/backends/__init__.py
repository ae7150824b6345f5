"""Model layer: one interface (:class:`LanguageModel`), several engines.

``load_model(spec, engine=...)`` is the only entry point the instruments use.

May import: ``sleight.errors`` only (every other layer builds on this one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sleight.backends.base import Completion, Edit, Generation, LanguageModel, ModelInfo, NextToken, Rendered, Scored
from sleight.backends.resolve import DEFAULT_MODEL, list_offline_models, resolve
from sleight.backends.tokens import check_template_kwargs
from sleight.errors import UserError

ENGINES = ("hf", "vllm")


def default_dtype(engine: str) -> str:
    """The weights' dtype when none is given: float32 on hf; on vllm float32 on the CPU (so the
    numbers equal hf's) and bfloat16 on CUDA. Answers without importing torch or vLLM."""
    if engine == "vllm" and _cuda_visible():
        return "bfloat16"
    return "float32"


def _cuda_visible() -> bool:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def load_model(
    spec: str = DEFAULT_MODEL,
    *,
    engine: str = "hf",
    device: str | None = None,
    dtype: str | None = None,
    batch_size: int = 128,
    threads: int | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    **engine_kwargs,
) -> LanguageModel:
    """Load a model for scoring and decoding; bad specs raise :class:`UserError` naming them.

    ``dtype`` ``None`` is the engine's default (:func:`default_dtype`); ``threads`` sets
    torch's CPU threads before the model runs (``None``: torch's default). ``chat_template_kwargs``
    are the chat-template variables every render of this model applies (``{"enable_thinking":
    False}`` for Qwen3 with thinking off; recorded in ``model.info``). ``engine_kwargs`` go to
    the vllm engine (``max_model_len``, ``gpu_memory_utilization``, ``tensor_parallel_size``,
    ``pipeline_parallel_size``, ...).
    """
    if engine not in ENGINES:
        raise UserError(f"unknown engine '{engine}' (choose from {', '.join(ENGINES)})")
    dtype = dtype or default_dtype(engine)
    template_kwargs = check_template_kwargs(chat_template_kwargs)
    if engine == "hf" and engine_kwargs:
        raise UserError(f"engine 'hf' takes no {', '.join(sorted(engine_kwargs))} (vllm-only settings)")
    resolved = resolve(spec)  # before the engine's heavy imports: a bad spec answers in a second
    if engine == "vllm":
        from sleight.backends.vllm import VLLMModel

        return VLLMModel(
            resolved, dtype=dtype, batch_size=batch_size, threads=threads, chat_template_kwargs=template_kwargs, **engine_kwargs
        )
    from sleight.backends.hf import HFModel

    return HFModel(resolved, device=device, dtype=dtype, batch_size=batch_size, threads=threads, chat_template_kwargs=template_kwargs)


__all__ = [
    "DEFAULT_MODEL",
    "ENGINES",
    "Completion",
    "Edit",
    "Generation",
    "LanguageModel",
    "ModelInfo",
    "NextToken",
    "Rendered",
    "Scored",
    "default_dtype",
    "list_offline_models",
    "load_model",
    "resolve",
]
