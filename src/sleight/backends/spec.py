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
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sleight.backends.base import LoadRecord
from sleight.errors import UserError

ENGINES = ("hf", "vllm", "openai")
# A model served elsewhere: ``openai:<base_url>#<model>`` (the jurors' syntax), engine "openai".
SERVED_PREFIX = "openai:"
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
# What a tokenizer-only run (App. C.6) reads of a spec: which checkpoint, and how it renders (and
# batch_size, which always has a value, so a run cannot tell it was given).
TOKENIZER_FIELDS = ("model", "revision", "chat_template_kwargs", "batch_size")
# Engine settings every field of which is a vLLM-only argument (the hf engine refuses them).
VLLM_FIELDS = (
    "quantization", "load_format", "max_model_len", "gpu_memory_utilization", "kv_cache_gib", "enforce_eager",
    "limit_mm_per_prompt", "tensor_parallel_size", "pipeline_parallel_size", "engine_args", "trust_remote_code",
)  # fmt: skip


@dataclass(frozen=True)
class Option:
    """How one :class:`ModelSpec` field is given: its command-line flag (``None``: none), the type a
    sweep file's value must have, the choices, and the help. Every command's model flags and every
    sweep file's model keys are generated from these (``cli/common.py``, ``tamper/sweep/config.py``),
    so a setting is named, typed and explained once."""

    help: str
    kind: type | tuple[type, ...] = str
    flag: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    json: bool = False  # a JSON object on the command line
    vllm: bool = False  # a vLLM engine argument (its own help group)


def _opt(help: str, kind: type | tuple[type, ...] = str, **kw: Any) -> dict[str, Option]:
    return {"option": Option(help, kind, **kw)}


_NUMBER = (int, float)


@dataclass(frozen=True)
class ModelSpec:
    """What to load and how. ``None`` is the engine's own default everywhere.

    ``scorer``: where a vLLM run's per-token records come from: ``"engine"`` (vLLM's own log-probs of
    the tokens it decided, top-k from ``prompt_logprobs``; no second model, entropy only over the
    top-k) or ``"twin"`` (an hf copy of the weights scores every token with the exact
    full-vocabulary entropy; it needs the memory of a second model, and for a quantized subject it is
    a different model from the one that wrote the reply)."""

    model: str = field(metadata=_opt("model name, folder, .gguf file, hub id, or openai:<base_url>#<model> (a served model)", flag="--model"))
    engine: str = field(
        default="hf", metadata=_opt("inference engine (default: hf; openai for an openai:<base_url>#<model> model)", flag="--engine", choices=ENGINES),
    )
    revision: str | None = field(
        default=None, metadata=_opt("a hub checkpoint's revision (a commit hash pins it; refused for a bundled model, a .gguf file or a folder)", flag="--revision", metavar="REV"),
    )
    dtype: str | None = field(
        default=None,
        metadata=_opt("weights dtype; auto: the checkpoint's own (default: float32; on vllm with CUDA auto, as the study)", flag="--dtype", choices=DTYPES),
    )
    quantization: str | None = field(
        default=None,
        metadata=_opt("vLLM quantization method (bitsandbytes loads with load_format bitsandbytes, as the study)", flag="--quantization", choices=QUANTIZATIONS, vllm=True),
    )
    load_format: str | None = field(
        default=None, metadata=_opt("vLLM load format (default: vLLM's; bitsandbytes with --quantization bitsandbytes)", flag="--load-format", metavar="FMT", vllm=True),
    )
    max_model_len: int | None = field(default=None, metadata=_opt("context length vLLM reserves (default: the model's)", int, flag="--max-model-len", metavar="N", vllm=True))
    gpu_memory_utilization: float | None = field(
        default=None,
        metadata=_opt("CUDA: GPU memory share vLLM takes (default: 0.90, the study's; 0.5 under --scorer twin)", _NUMBER, flag="--gpu-memory-utilization", metavar="F", vllm=True),
    )
    kv_cache_gib: float | None = field(
        default=None,
        metadata=_opt("CPU: GiB of RAM vLLM reserves for its KV cache (default: 2; VLLM_CPU_KVCACHE_SPACE overrides)", _NUMBER, flag="--kv-cache-gib", metavar="G", vllm=True),
    )
    enforce_eager: bool | None = field(
        default=None,
        metadata=_opt("run eager, no CUDA graphs or compile (default: on on the CPU, vLLM's own on CUDA; the study: on)", bool, flag="--enforce-eager", vllm=True),
    )
    limit_mm_per_prompt: Mapping[str, int] | None = field(
        default=None,
        metadata=_opt("inputs per modality, e.g. '{\"image\": 0}' to switch a multimodal checkpoint's image input off", dict, flag="--limit-mm-per-prompt", metavar="JSON", json=True, vllm=True),
    )
    tensor_parallel_size: int = field(default=1, metadata=_opt("GPUs per model, tensor parallel (default: 1)", int, flag="--tensor-parallel-size", metavar="N", vllm=True))
    pipeline_parallel_size: int = field(default=1, metadata=_opt("pipeline stages (default: 1)", int, flag="--pipeline-parallel-size", metavar="N", vllm=True))
    trust_remote_code: bool = field(default=False, metadata=_opt("run the checkpoint's own modelling code (sweep files only)", bool, vllm=True))
    engine_args: Mapping[str, object] = field(
        default_factory=dict, metadata=_opt("other vllm.LLM keyword arguments, a JSON object, passed unchanged", dict, flag="--engine-args", metavar="JSON", json=True, vllm=True),
    )
    chat_template_kwargs: Mapping[str, object] = field(
        default_factory=dict,
        metadata=_opt(
            "variables for the chat template, a JSON object applied to every render (recorded), e.g. '{\"enable_thinking\": false}'",
            dict, flag="--chat-template-kwargs", metavar="JSON", json=True,
        ),
    )
    scorer: str = field(
        default="engine",
        metadata=_opt(
            "engine: vLLM's own log-probs and top-20 for every record, one model in memory; twin: an hf copy of the "
            "weights scores each token with the exact entropy (--conventions sleight needs it) (default: engine)",
            flag="--scorer", choices=SCORERS, vllm=True,
        ),
    )
    device: str | None = field(default=None, metadata=_opt("cpu, cuda, cuda:1 ... (default: cuda if available)", flag="--device"))
    batch_size: int = field(default=128, metadata=_opt("rows per forward pass", int, flag="--batch-size"))
    threads: int | None = field(
        default=None,
        metadata=_opt("CPU threads: torch's on hf, the cores vLLM's CPU worker binds on vllm (default: the engine's own; recorded)", int, flag="--threads", metavar="N"),
    )

    def __post_init__(self) -> None:
        if served(self.model) and self.engine == "hf":  # the default engine: a served model names its own
            object.__setattr__(self, "engine", "openai")
        check(self)

    def with_(self, **changes: Any) -> ModelSpec:
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)

    def as_dict(self) -> dict[str, object]:
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

    def beyond_tokenizer(self) -> list[str]:
        """The flags set here (away from a plain load's) that concern the weights or the engine, which
        a run reading only the checkpoint's tokenizer (App. C.6) does not read. ``batch_size``
        always has a value, so it is not counted."""
        plain = ModelSpec(self.model)
        return [
            opt.flag or name for name, opt in options()
            if name not in TOKENIZER_FIELDS and getattr(self, name) != getattr(plain, name)
        ]  # fmt: skip

    def load_record(self) -> LoadRecord:
        """The load settings that change the records beyond model, engine and dtype (other weights
        score differently; the twin's entropy is another number): a run's manifest records them and
        refuses to resume under others. ``{}`` for a plain load, so a run made before they were
        recorded resumes under the same settings."""
        out = LoadRecord()
        if self.revision is not None:
            out["revision"] = self.revision
        if self.quantization is not None:
            out["quantization"] = self.quantization
        if self.load_format is not None:
            out["load_format"] = self.load_format
        if self.engine == "vllm":
            out["scorer"] = self.scorer
        if self.engine_args:
            out["engine_args"] = dict(self.engine_args)
        return out


def options() -> list[tuple[str, Option]]:
    """Every :class:`ModelSpec` field with how it is given, in field order."""
    return [(f.name, f.metadata["option"]) for f in fields(ModelSpec)]


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
    if spec.engine == "openai" or served(spec.model):
        return _check_served(spec)
    if spec.engine == "hf":
        vllm_only = spec.vllm_only()
        if vllm_only:
            raise UserError(f"engine 'hf' takes no {', '.join(vllm_only)} (vllm settings; use --engine vllm)")
        if spec.scorer != "engine":
            raise UserError("--scorer twin is a vllm setting (the hf engine scores its own tokens)")
    if spec.revision is not None and not hub_id(spec.model):
        raise UserError(
            f"--revision pins a hub checkpoint's snapshot; {spec.model} is {_kind_of(spec.model)} and has none (drop --revision)"
        )
    if spec.load_format == "bitsandbytes" and spec.quantization not in (None, "bitsandbytes"):
        raise UserError(f"load_format bitsandbytes goes with quantization bitsandbytes, not {spec.quantization}")


def served(model: str) -> bool:
    """Whether ``model`` names a model served elsewhere (``openai:<base_url>#<model>``)."""
    return model.startswith(SERVED_PREFIX)


# What a served model's server decides for itself: a spec that sets one is refused.
SERVER_FIELDS = ("revision", "dtype", "device", "threads", *VLLM_FIELDS)


def _check_served(spec: ModelSpec) -> None:
    """A served model (engine "openai") is named ``openai:<base_url>#<model>``, and takes only the
    settings a client has: ``batch_size`` (requests in flight) and ``chat_template_kwargs``; every
    other field is the server's, refused in one line."""
    from sleight.backends.transport import parse_openai_spec

    if not served(spec.model):
        raise UserError(f"engine 'openai' takes a served model, {SERVED_PREFIX}<base_url>#<model> (got '{spec.model}')")
    parse_openai_spec(spec.model)
    if spec.engine != "openai":
        raise UserError(f"{spec.model} is served elsewhere; --engine {spec.engine} loads a model in this process (drop --engine)")
    given = [f.name for f in fields(ModelSpec) if f.name in SERVER_FIELDS and getattr(spec, f.name) != _default(f)]
    if spec.scorer != "engine":
        given.append("scorer")
    if given:
        raise UserError(
            f"a served model takes no {', '.join(given)}: its server decides {'it' if len(given) == 1 else 'them'} (a client "
            "sets --batch-size, the requests in flight, and --chat-template-kwargs)"
        )


def _default(f: Any) -> Any:
    from dataclasses import MISSING

    return f.default_factory() if f.default_factory is not MISSING else f.default


def vllm_settings(spec: ModelSpec) -> dict[str, object]:
    """The spec's own ``vllm.LLM`` keyword arguments, as the study passed them (pure): bitsandbytes
    quantization loads with ``load_format="bitsandbytes"`` (runner.py ``run_model``), and
    ``engine_args`` go through last, unchanged."""
    kw: dict[str, object] = {}
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


def _kind_of(model: str) -> str:
    from sleight.backends.resolve import BUNDLED

    if model in BUNDLED:
        return "a bundled model (a GGUF file a package carries)"
    return "a .gguf file" if model.endswith(".gguf") else "a local folder"


def hub_id(model: str) -> bool:
    """Whether ``model`` names a hub checkpoint (not a bundled name, a .gguf file or a local folder);
    only a hub checkpoint has revisions."""
    from sleight.backends.resolve import BUNDLED

    if model in BUNDLED or model.endswith(".gguf") or model.startswith((".", "/", "~")):
        return False
    return model.count("/") == 1 and not Path(model).expanduser().is_dir()
