"""One model's engine settings, typed, built once (from the command line or a sweep file) and handed
to :func:`sleight.backends.load_model` unchanged.

The study loaded each of its 19 subjects with its own vLLM settings (Sleight-of-Word 08d2bae,
``src/awareness/config.py`` ``ModelSpec`` l.11-25 and ``runner.py`` ``run_model``: ``quantization``,
``load_format`` (``bitsandbytes`` paired with bitsandbytes quantization), ``dtype="auto"``,
``max_model_len`` 4096, ``gpu_memory_utilization`` 0.90, ``enforce_eager=True`` and a per-model
``extra`` such as ``limit_mm_per_prompt``). :class:`ModelSpec` carries each of those as a field, so a
setting is checked once here and reaches ``vllm.LLM(...)`` as given (:func:`vllm_settings`), in a
worker process too (a spec pickles; an ``argparse.Namespace`` is no longer the configuration).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sleight.errors import UserError

ENGINES = ("hf", "vllm")
SCORERS = ("engine", "twin")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# vLLM's names for the methods a checkpoint or a load can be quantized with (the ones this project's
# sweep files use; vLLM itself checks the name against its registry when it loads).
QUANTIZATIONS = (
    "awq", "awq_marlin", "gptq", "gptq_marlin", "bitsandbytes", "fp8", "mxfp4", "compressed-tensors", "gguf",
)  # fmt: skip
# CUDA: vLLM's share of the GPU when none is given. The study's 0.90 when vLLM scores its own
# tokens; half when an hf twin (scorer "twin") needs the rest.
GPU_MEMORY_UTILIZATION = {"engine": 0.90, "twin": 0.5}
# Engine settings every field of which is a vLLM-only argument (the hf engine refuses them).
VLLM_FIELDS = (
    "quantization", "load_format", "max_model_len", "gpu_memory_utilization", "kv_cache_gib", "enforce_eager",
    "limit_mm_per_prompt", "tensor_parallel_size", "pipeline_parallel_size", "engine_args", "trust_remote_code",
)  # fmt: skip


@dataclass(frozen=True)
class ModelSpec:
    """What to load and how. ``None`` is the engine's own default everywhere.

    ``scorer``: where a vLLM run's per-token records come from: ``"engine"`` (vLLM's own log-probs of
    the tokens it decided, top-k from ``prompt_logprobs``; no second model, entropy only over the
    top-k) or ``"twin"`` (an hf copy of the weights scores every token with the exact
    full-vocabulary entropy; it needs the memory of a second model, and for a quantized subject it is
    a different model from the one that wrote the reply)."""

    model: str
    engine: str = "hf"
    revision: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    load_format: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_gib: float | None = None
    enforce_eager: bool | None = None
    limit_mm_per_prompt: Mapping[str, int] | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    trust_remote_code: bool = False
    engine_args: Mapping[str, Any] = field(default_factory=dict)
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    scorer: str = "engine"
    device: str | None = None
    batch_size: int = 128
    threads: int | None = None

    def __post_init__(self) -> None:
        check(self)

    def with_(self, **changes: Any) -> ModelSpec:
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Every field as plain JSON values (mappings as dicts), for run records and sweep plans."""
        return json.loads(json.dumps(asdict(self), default=dict))

    @property
    def devices(self) -> int:
        """GPUs one engine spans (tensor x pipeline parallel)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def vllm_only(self) -> list[str]:
        """The fields set here that only the vllm engine takes."""
        dflt = ModelSpec(self.model, engine="vllm")
        return [k for k in VLLM_FIELDS if getattr(self, k) != getattr(dflt, k)]


def check(spec: ModelSpec) -> None:
    """One line naming the first bad setting (pure; runs on every spec built)."""
    if not spec.model:
        raise UserError("no model given (a name, a folder, a .gguf file or a hub id)")
    if spec.engine not in ENGINES:
        raise UserError(f"unknown engine '{spec.engine}' (choose from {', '.join(ENGINES)})")
    if spec.scorer not in SCORERS:
        raise UserError(f"unknown scorer '{spec.scorer}' (choose from {', '.join(SCORERS)})")
    if spec.dtype is not None and spec.dtype not in DTYPES:
        raise UserError(f"unknown dtype '{spec.dtype}' (choose from {', '.join(DTYPES)})")
    if spec.quantization is not None and spec.quantization not in QUANTIZATIONS:
        raise UserError(f"unknown quantization '{spec.quantization}' (choose from {', '.join(QUANTIZATIONS)})")
    if spec.gpu_memory_utilization is not None and not 0 < spec.gpu_memory_utilization <= 1:
        raise UserError(f"gpu_memory_utilization must be in (0, 1] (got {spec.gpu_memory_utilization})")
    for name in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "batch_size", "threads"):
        value = getattr(spec, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UserError(f"{name} must be a whole number of at least 1 (got {value!r})")
    if spec.kv_cache_gib is not None and spec.kv_cache_gib <= 0:
        raise UserError(f"kv_cache_gib must be positive (got {spec.kv_cache_gib})")
    if spec.limit_mm_per_prompt is not None:
        bad = {k: v for k, v in spec.limit_mm_per_prompt.items() if isinstance(v, bool) or not isinstance(v, int) or v < 0}
        if bad:
            raise UserError(f"limit_mm_per_prompt takes a count per modality, e.g. {{\"image\": 0}} (got {dict(spec.limit_mm_per_prompt)})")
    clash = sorted(set(spec.engine_args) & set(f for f in ModelSpec.__dataclass_fields__))
    if clash:
        raise UserError(f"engine_args sets {', '.join(clash)}, which the spec has as its own setting; set it there")
    if spec.engine == "hf":
        vllm_only = spec.vllm_only()
        if vllm_only:
            raise UserError(f"engine 'hf' takes no {', '.join(vllm_only)} (vllm settings; use --engine vllm)")
        if spec.scorer != "engine":
            raise UserError("--scorer twin is a vllm setting (the hf engine scores its own tokens)")
    if spec.load_format == "bitsandbytes" and spec.quantization not in (None, "bitsandbytes"):
        raise UserError(f"load_format bitsandbytes goes with quantization bitsandbytes, not {spec.quantization}")


def vllm_settings(spec: ModelSpec) -> dict[str, Any]:
    """The spec's own ``vllm.LLM`` keyword arguments, as the study passed them (pure): bitsandbytes
    quantization loads with ``load_format="bitsandbytes"`` (runner.py ``run_model``), and
    ``engine_args`` go through last, unchanged."""
    kw: dict[str, Any] = {}
    if spec.revision:
        kw["revision"] = spec.revision
    if spec.quantization:
        kw["quantization"] = spec.quantization
    load_format = spec.load_format or ("bitsandbytes" if spec.quantization == "bitsandbytes" else None)
    if load_format:
        kw["load_format"] = load_format
    if spec.limit_mm_per_prompt is not None:
        kw["limit_mm_per_prompt"] = dict(spec.limit_mm_per_prompt)
    if spec.trust_remote_code:
        kw["trust_remote_code"] = True
    kw.update(dict(spec.engine_args))
    return kw
