"""vLLM engine for GPU sweeps: the :class:`~sleight.backends.base.LanguageModel` interface on vLLM's
offline ``LLM``, written against vLLM 0.33.0 (each call's source lines are in docs/engines.md).

vLLM cannot serve per-step surgery or a full distribution cheaply: every log-prob it returns
becomes a Python object on the host. So this adapter asks it only for what it does well and keeps
each request small:

* ``generate_until``: ``TokensPrompt`` + ``SamplingParams(temperature=0, max_tokens, stop_token_ids,
  stop, include_stop_str_in_output=True, detokenize=False)``, no log-probs, prefix caching on. It is
  Phase A of two-phase decoding (:mod:`sleight.tamper.two_phase`).
* ``read_next``: the asked ids' log-probs through ``logprob_token_ids`` and the top-k through
  ``logprobs=k``, each with ``max_tokens=1`` (two requests: vLLM refuses both in one, and a batch
  that mixes them returns the asked ids for all). vLLM computes no entropy, so ``entropy`` is NaN.
* ``continuation_logprobs``: ``prompt_logprob_token_ids`` with ``prompt_logprob_start``.
* What needs the whole distribution (``score_tokens`` with its exact entropy, ``next_token_logprobs``,
  ``next_token_logits``) and hooked decoding run on the *twin*: the same weights through the hf engine
  on the same GPU, loaded on first use (leave it room with ``gpu_memory_utilization``). Unhooked
  ``greedy`` is ``generate_until`` plus the twin's ``score_tokens``.

``max_logprobs=-1`` is never set and no dense per-step vocabulary vector is ever built. vLLM needs a
CUDA build of torch; without it the import fails and the engine is a one-line :class:`UserError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sleight.backends.base import Completion, Edit, Generation, ModelInfo, NextToken, Scored, sha256_text
from sleight.backends.resolve import ResolvedModel
from sleight.backends.tokens import HFTokenizerOps
from sleight.errors import UserError

DEFAULT_GPU_MEMORY_UTILIZATION = 0.5  # the rest of the GPU is the hf twin's (Phase B scoring)
MAX_LOGPROBS = 20  # vLLM's own default; top-k above it needs the engine built with more


def _import_vllm():
    try:
        import vllm
        from vllm.inputs import TokensPrompt  # noqa: F401  (the adapter builds its prompts with it)
    except ImportError:
        raise UserError(
            "engine 'vllm' needs the vllm package and a CUDA GPU (pip install vllm on a GPU machine); "
            "use --engine hf here"
        ) from None
    return vllm


# -- what the adapter asks vLLM for (pure; the tests hold these against vLLM 0.33's signatures) ----
def engine_kwargs(
    load_path: str,
    *,
    dtype: str = "bfloat16",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_model_len: int | None = None,
    distributed_executor_backend: str | None = None,
    max_logprobs: int = MAX_LOGPROBS,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM``: prefix caching on, a bounded ``max_logprobs``."""
    if max_logprobs < 1:
        raise UserError("max_logprobs must be a positive number of log-probs (a full vocabulary is never asked for)")
    kw: dict[str, Any] = dict(
        model=load_path,
        dtype=dtype,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization,
        enable_prefix_caching=True,
        max_logprobs=max_logprobs,
        seed=0,
    )
    if max_model_len:
        kw["max_model_len"] = max_model_len
    if distributed_executor_backend:
        kw["distributed_executor_backend"] = distributed_executor_backend
    return kw


def until_params(max_tokens: int, stop_token_ids: Sequence[int] = (), stop: Sequence[str] = ()) -> dict[str, Any]:
    """``SamplingParams`` of one Phase A request: greedy, no log-probs, no detokenizing.

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
    )


def top_params(top_k: int) -> dict[str, Any]:
    """One token, with the top-k log-probs at the position before it."""
    return dict(temperature=0.0, max_tokens=1, logprobs=int(top_k), detokenize=False)


def asked_params(ids: Sequence[int]) -> dict[str, Any]:
    """One token, with the log-probs of exactly ``ids`` at the position before it."""
    return dict(temperature=0.0, max_tokens=1, logprob_token_ids=[int(t) for t in ids], detokenize=False)


def continuation_params(context_len: int, continuation: Sequence[int]) -> dict[str, Any]:
    """Score ``continuation`` as prompt tokens: row ``i`` (from ``prompt_logprob_start``) predicts
    prompt token ``start + i + 1``, so the rows start at the context's last token."""
    return dict(
        temperature=0.0,
        max_tokens=1,
        prompt_logprob_token_ids=[[int(t)] for t in continuation],
        prompt_logprob_start=int(context_len) - 1,
        detokenize=False,
    )


# -- what vLLM returns, translated ----------------------------------------------------------------
def completion(out: Any, eos: frozenset[int], max_tokens: int) -> Completion:
    """A ``CompletionOutput`` as a :class:`Completion`.

    vLLM keeps the token that stopped a request: an end-of-sequence id is dropped (the interface's
    ids never hold one), a stop token id is kept. ``finish_reason`` ``"stop"`` with ``stop_reason``
    ``None`` or an end-of-sequence id is the model's own end; another ``stop_reason`` is a stop token
    id or stop string.
    """
    toks = [int(t) for t in out.token_ids]
    if out.finish_reason == "stop":
        if toks and toks[-1] in eos and (out.stop_reason is None or out.stop_reason in eos):
            return Completion(toks[:-1], "stop")
        return Completion(toks, "stop_token")
    if out.finish_reason == "length":
        if len(toks) < max_tokens:
            raise UserError(
                f"vLLM stopped a reply at {len(toks)} of {max_tokens} tokens: the sequence reached max_model_len; "
                "raise --max-model-len"
            )
        return Completion(toks, "length")
    raise RuntimeError(f"vLLM finished a request with finish_reason={out.finish_reason!r}")


def ranked(entry: dict[int, Any], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of one position's ``{token_id: Logprob}`` (the sampled token comes first in vLLM's
    dict and keeps its own rank; the top-k carry ranks 1..k), most probable first."""
    items = sorted(((int(v.rank), int(t), float(v.logprob)) for t, v in entry.items() if v.rank is not None and v.rank <= k))
    ids = np.asarray([t for _, t, _ in items], dtype=np.int64)
    lps = np.asarray([lp for _, _, lp in items], dtype=np.float64)
    return ids, lps


class VLLMModel(HFTokenizerOps):
    """vLLM offline ``LLM`` behind :class:`sleight.backends.base.LanguageModel`.

    ``vllm_module`` stands in for the ``vllm`` package (tests); ``twin`` is the hf engine that serves
    what needs a full distribution (loaded on the GPU on first use when not given).
    """

    def __init__(
        self,
        resolved: ResolvedModel,
        *,
        dtype: str = "bfloat16",
        batch_size: int = 256,
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        gpu_memory_utilization: float | None = None,
        distributed_executor_backend: str | None = None,
        max_model_len: int | None = None,
        max_logprobs: int = MAX_LOGPROBS,
        threads: int | None = None,
        vllm_module: Any = None,
        twin: Any = None,
    ) -> None:
        vllm = vllm_module if vllm_module is not None else _import_vllm()
        self._vllm = vllm
        self.resolved = resolved
        self.batch_size = batch_size
        self.dtype = dtype
        self.max_logprobs = max_logprobs
        self._twin = twin
        n_threads = _set_threads(threads)
        self.llm_kwargs = engine_kwargs(
            resolved.load_path,
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size,
            gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None else gpu_memory_utilization,
            max_model_len=max_model_len,
            distributed_executor_backend=distributed_executor_backend,
            max_logprobs=max_logprobs,
        )
        self.llm = vllm.LLM(**self.llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        cfg = self.llm.llm_engine.model_config
        self._vocab = int(cfg.get_vocab_size())
        eos = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        extra = (cfg.try_get_generation_config() or {}).get("eos_token_id")
        eos |= set([extra] if isinstance(extra, int) else (extra or []))
        self._eos = frozenset(int(e) for e in eos)
        self.info = ModelInfo(
            spec=resolved.spec,
            model_id=resolved.model_id,
            revision=resolved.revision,
            chat_template_sha256=sha256_text(self.tokenizer.chat_template),
            tokenizer=f"{type(self.tokenizer).__name__}:{getattr(self.tokenizer, 'name_or_path', '')}",
            engine="vllm",
            engine_version=f"vllm {vllm.__version__}",
            dtype=dtype,
            device=f"cuda x{tensor_parallel_size * pipeline_parallel_size}",
            batch_size=batch_size,
            threads=n_threads,
        )

    # -- plumbing -------------------------------------------------------------------------------
    def _generate(self, seqs: Sequence[Sequence[int]], params: Sequence[dict[str, Any]]):
        """One ``LLM.generate`` call: one ``TokensPrompt`` and one ``SamplingParams`` per sequence."""
        if not seqs:
            return []
        prompts = [self._vllm.TokensPrompt(prompt_token_ids=[int(t) for t in s]) for s in seqs]
        sps = [self._vllm.SamplingParams(**p) for p in params]
        return self.llm.generate(prompts, sps, use_tqdm=False)

    @property
    def twin(self):
        """The hf engine on the same weights, for what needs the whole distribution."""
        if self._twin is None:
            from sleight.backends.hf import HFModel

            self._twin = HFModel(self.resolved, device="cuda", dtype=self.dtype, batch_size=self.batch_size)
        return self._twin

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

    def next_token_logprobs(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        return self.twin.next_token_logprobs(seqs)

    def next_token_logits(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        return self.twin.next_token_logits(seqs)

    def continuation_logprobs(self, context: Sequence[int], continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        if not context:
            raise ValueError("continuation_logprobs needs a non-empty context")
        if any(len(c) == 0 for c in continuations):
            raise ValueError("continuation_logprobs got an empty continuation")
        seqs = [list(context) + list(c) for c in continuations]
        outs = self._generate(seqs, [continuation_params(len(context), c) for c in continuations])
        return [np.asarray(o.prompt_token_id_logprobs, dtype=np.float64)[: len(c), 0] for o, c in zip(outs, continuations)]

    def score_tokens(self, context: Sequence[int], replies: Sequence[Sequence[int]], *, top_k: int = 20) -> list[Scored]:
        return self.twin.score_tokens(context, replies, top_k=top_k)

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
        if any(len(p) == 0 for p in prompts):
            raise ValueError("generate_until needs non-empty prompts")
        budgets = [int(max_tokens)] * len(prompts) if isinstance(max_tokens, int) else [int(m) for m in max_tokens]
        if len(budgets) != len(prompts):
            raise ValueError("generate_until needs one max_tokens per prompt (or one for all)")
        result = [Completion([], "length") for _ in prompts]
        todo = [i for i, b in enumerate(budgets) if b > 0]
        outs = self._generate([prompts[i] for i in todo], [until_params(budgets[i], stop_token_ids, stop) for i in todo])
        for i, o in zip(todo, outs):
            result[i] = completion(o.outputs[0], self._eos, budgets[i])
            if progress:
                progress(len(result[i].token_ids) + (result[i].finish_reason == "stop"))
        return result

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
        """Unhooked: vLLM decides the tokens, the twin scores them. Hooked: the twin's lockstep
        decoder (per-step surgery is what vLLM cannot serve; the tamper sweep uses two-phase)."""
        if hook is not None:
            return self.twin.greedy(prompts, max_new_tokens, hook=hook, forced=forced, top_k=top_k, progress=progress)
        heads = [list(f)[:max_new_tokens] for f in (forced or [[] for _ in prompts])]
        outs = self.generate_until([list(p) + f for p, f in zip(prompts, heads)], [max_new_tokens - len(f) for f in heads], progress=progress)
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


def _set_threads(threads: int | None) -> int:
    """Apply ``--threads`` to torch in this process (the host side of the engine); 0 without torch."""
    try:
        import torch
    except ImportError:  # pragma: no cover - vLLM always brings torch
        return 0
    if threads:
        torch.set_num_threads(max(1, int(threads)))
    return torch.get_num_threads()
