"""Model layer: one interface (:class:`LanguageModel`), several engines.

``load_model(spec)`` is the entry point the instruments use; a :class:`ModelSpec` carries every
engine setting from the command line or a sweep file to the engine. The one reading that is not a
next token after a context, App. F's decoder reopened under an encoder's input, loads an
encoder–decoder checkpoint from the same spec (:func:`sleight.backends.seq2seq.load_seq2seq`).

May import: ``sleight.errors`` only (every other layer builds on this one).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sleight.backends.base import Completion, Edit, Generation, LanguageModel, ModelInfo, NextToken, Rendered, Scored
from sleight.backends.resolve import DEFAULT_MODEL, list_offline_models, resolve
from sleight.backends.spec import ENGINES, ModelSpec
from sleight.backends.tokens import check_template_kwargs
from sleight.errors import UserError


def default_dtype(engine: str) -> str:
    """The weights' dtype when none is given: float32 on hf; on vllm float32 on the CPU (so the
    numbers equal hf's) and the checkpoint's own (``auto``, the study's) on CUDA. Answers without
    importing torch or vLLM."""
    if engine == "vllm" and _cuda_visible():
        return "auto"
    return "float32"


def _cuda_visible() -> bool:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def load_model(spec: str | ModelSpec = DEFAULT_MODEL, *, twin: LanguageModel | None = None, **settings: Any) -> LanguageModel:
    """Load a model for scoring and decoding; a bad spec or setting raises :class:`UserError` naming it.

    ``spec`` is a :class:`ModelSpec` (every engine setting typed, as the CLI and sweep files build
    it) or a model name, with ``settings`` the spec's other fields (``engine="vllm"``,
    ``quantization="fp8"``, ``chat_template_kwargs={"enable_thinking": False}``, ...). ``twin``: the
    hf model a vllm engine under ``scorer="twin"`` scores with (default: loaded on first use).
    """
    ms = ModelSpec(spec, **settings) if isinstance(spec, str) else spec.with_(**settings) if settings else spec
    model: LanguageModel
    if ms.engine == "openai":  # served elsewhere (openai:<base_url>#<model>): nothing to resolve or load here
        if twin is not None:
            raise UserError("a served model takes no twin (its server scores its own tokens)")
        from sleight.backends.served_llama import open_served

        model = open_served(ms)  # vLLM's dialect, or llama.cpp's where its server says so
    elif ms.engine == "vllm":
        from sleight.backends.vllm import VLLMModel
        from sleight.backends.vllm_registry import check_specs

        check_specs([(ms.model, ms)])  # a name this vLLM does not know: one line, before the engine starts
        model = VLLMModel(resolve(ms.model, ms.revision), ms, twin=twin)
    else:
        if twin is not None:
            raise UserError("engine 'hf' takes no twin (it scores its own tokens)")
        resolved = resolve(ms.model, ms.revision)
        from sleight.backends.hf import HFModel

        model = HFModel(
            resolved, device=ms.device, dtype=ms.dtype or default_dtype("hf"), batch_size=ms.batch_size, threads=ms.threads,
            chat_template_kwargs=check_template_kwargs(ms.chat_template_kwargs),
        )
    model.info = replace(model.info, load=ms.load_record())  # every run directory records (and compares) them
    return model


def spec_of(model: LanguageModel) -> ModelSpec:
    """The spec a loaded model answers to, read off its :class:`ModelInfo` (its model, engine,
    dtype and load settings): what a run prepared for an already loaded model records."""
    info = model.info
    return ModelSpec(info.spec, engine=info.engine, dtype=info.dtype or None, **info.load)  # a served model's dtype: "" (the server's)


__all__ = [
    "DEFAULT_MODEL",
    "ENGINES",
    "Completion",
    "Edit",
    "Generation",
    "LanguageModel",
    "ModelInfo",
    "ModelSpec",
    "NextToken",
    "Rendered",
    "Scored",
    "default_dtype",
    "list_offline_models",
    "load_model",
    "resolve",
    "spec_of",
]
