"""vLLM engine for GPU sweeps: same interface as :mod:`sleight.backends.hf`.

vLLM needs a CUDA build of torch and cannot be installed on CPU-only machines, so the import is
guarded and a missing vLLM is a one-line :class:`UserError`. Models larger than one GPU use
``tensor_parallel_size`` (Ray as distributed executor across nodes via
``distributed_executor_backend='ray'``).

Decoding with edits re-submits each live row every step with automatic prefix caching on, so a
step costs one new token per row plus a cache lookup; retracting a token simply drops it from the
row's ids (the cached blocks of the longer sequence are never read again). Full-distribution
entropy needs the whole vocabulary's log-probs (``max_logprobs=-1``), which vLLM returns as a dict.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from sleight.backends.base import Edit, Generation, ModelInfo, sha256_text
from sleight.backends.tokens import HFTokenizerOps
from sleight.backends.resolve import ResolvedModel
from sleight.errors import UserError


def _import_vllm():
    try:
        import vllm
        from vllm.inputs import TokensPrompt
    except ImportError:
        raise UserError(
            "engine 'vllm' needs the vllm package and a CUDA GPU (pip install vllm on a GPU machine); "
            "use --engine hf here"
        ) from None
    return vllm, TokensPrompt


def dense_logprobs(entry: dict[int, Any] | None, vocab: int) -> np.ndarray:
    """vLLM's {token_id: Logprob} for one position -> a dense (vocab,) array (-inf where absent)."""
    out = np.full(vocab, -np.inf, dtype=np.float32)
    if entry:
        ids = np.fromiter(entry.keys(), dtype=np.int64)
        vals = np.fromiter((getattr(v, "logprob", v) for v in entry.values()), dtype=np.float32)
        out[ids[ids < vocab]] = vals[ids < vocab]
    return out


def step_summary(lp: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Top-k ids and log-probs, and the exact entropy (nats) of a dense log-prob vector."""
    top = np.argpartition(-lp, top_k)[:top_k]
    top = top[np.argsort(-lp[top], kind="stable")]
    finite = np.isfinite(lp)
    ent = float(-(np.exp(lp[finite]) * lp[finite]).sum())
    return top.astype(np.int64), lp[top].astype(np.float32), ent


class VLLMModel(HFTokenizerOps):
    """vLLM offline ``LLM`` behind :class:`sleight.backends.base.LanguageModel`."""

    def __init__(
        self,
        resolved: ResolvedModel,
        *,
        dtype: str = "bfloat16",
        batch_size: int = 256,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        distributed_executor_backend: str | None = None,
        max_model_len: int | None = None,
    ) -> None:
        vllm, self._TokensPrompt = _import_vllm()
        self._vllm = vllm
        self.resolved = resolved
        self.batch_size = batch_size
        kwargs: dict[str, Any] = dict(
            model=resolved.load_path,
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=True,
            max_logprobs=-1,
            seed=0,
        )
        if distributed_executor_backend:
            kwargs["distributed_executor_backend"] = distributed_executor_backend
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        self.llm = vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._vocab = int(self.llm.llm_engine.model_config.get_vocab_size())
        eos = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        gen_cfg = self.llm.llm_engine.model_config.try_get_generation_config() or {}
        extra = gen_cfg.get("eos_token_id")
        eos |= set([extra] if isinstance(extra, int) else (extra or []))
        self._eos = frozenset(eos)
        self.info = ModelInfo(
            spec=resolved.spec,
            model_id=resolved.model_id,
            revision=resolved.revision,
            chat_template_sha256=sha256_text(self.tokenizer.chat_template),
            tokenizer=f"{type(self.tokenizer).__name__}:{getattr(self.tokenizer, 'name_or_path', '')}",
            engine="vllm",
            engine_version=f"vllm {vllm.__version__}",
            dtype=dtype,
            device=f"cuda x{tensor_parallel_size}",
            batch_size=batch_size,
        )

    # -- scoring -------------------------------------------------------------------------------
    def _params(self, **kw):
        return self._vllm.SamplingParams(temperature=0.0, seed=0, **kw)

    def _run(self, seqs: Sequence[Sequence[int]], params):
        prompts = [self._TokensPrompt(prompt_token_ids=list(s)) for s in seqs]
        return self.llm.generate(prompts, params, use_tqdm=False)

    def next_token_logprobs(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        outs = self._run(seqs, self._params(max_tokens=1, logprobs=-1))
        return np.stack([dense_logprobs(o.outputs[0].logprobs[0], self._vocab) for o in outs])

    def continuation_logprobs(self, context: Sequence[int], continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        seqs = [list(context) + list(c) for c in continuations]
        outs = self._run(seqs, self._params(max_tokens=1, prompt_logprobs=0))
        result = []
        for o, c in zip(outs, continuations):
            plp = o.prompt_logprobs[len(context) :]
            result.append(np.asarray([getattr(e[t], "logprob", e[t]) for e, t in zip(plp, c)], dtype=np.float64))
        return result

    # -- decoding ------------------------------------------------------------------------------
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
        forced = forced or [[] for _ in prompts]
        rows = [_VRow(list(p), list(f)[:max_new_tokens]) for p, f in zip(prompts, forced)]
        params = self._params(max_tokens=1, logprobs=-1)
        while True:
            live = [i for i, r in enumerate(rows) if not r.done]
            if not live:
                break
            outs = self._run([rows[i].ids for i in live], params)
            for i, o in zip(live, outs):
                lp = dense_logprobs(o.outputs[0].logprobs[0], self._vocab)
                rows[i].step(i, lp, top_k, max_new_tokens, hook, self._eos)
            if progress:
                progress(len(live))
        return [r.generation(top_k) for r in rows]


class _VRow:
    """One row of the vLLM step loop: edits act on the id list, no cache to mask."""

    def __init__(self, prompt: list[int], queue: list[int]) -> None:
        self.ids = prompt
        self.n_prompt = len(prompt)
        self.queue = queue
        self.recs: list[tuple[int, float, np.ndarray, np.ndarray, float, bool]] = []
        self.dists: list[np.ndarray] = []  # the distribution each accepted token was read from
        self.edits: list[int] = []
        self.done = False
        self.finish = "length"
        self.end_checked = False

    @property
    def out(self) -> list[int]:
        return self.ids[self.n_prompt :]

    def _accept(self, tok: int, lp: np.ndarray, top_k: int, forced: bool) -> None:
        tids, tlp, ent = step_summary(lp, top_k)
        self.ids.append(tok)
        self.recs.append((tok, float(lp[tok]), tids, tlp, ent, forced))
        self.dists.append(lp)

    def _edit(self, edit: Edit, lp: np.ndarray, top_k: int, budget: int) -> None:
        n_back = min(edit.retract, len(self.out))
        if n_back:
            lp = self.dists[-n_back]
            del self.ids[-n_back:], self.recs[-n_back:], self.dists[-n_back:]
        force = list(edit.force)[: max(budget - len(self.out), 0)]
        if not force:
            self.done = True
            return
        self._accept(force[0], lp, top_k, True)
        self.edits.append(len(self.out) - 1)
        self.queue = force[1:]

    def step(self, row: int, lp: np.ndarray, top_k: int, budget: int, hook, eos: frozenset[int]) -> None:
        if self.queue:
            self._accept(self.queue.pop(0), lp, top_k, True)
        else:
            proposed = int(np.argmax(lp))
            edit = hook(row, self.out, proposed) if hook else None
            if edit is not None:
                self._edit(edit, lp, top_k, budget)
            elif proposed in eos:
                self.done, self.finish = True, "stop"
                return
            else:
                self._accept(proposed, lp, top_k, False)
        if not self.done and len(self.out) >= budget and not self.queue:
            edit = hook(row, self.out, None) if hook and not self.end_checked else None
            self.end_checked = True
            if edit is not None:
                self._edit(edit, self.dists[-1], top_k, budget)
            if not self.queue:
                self.done = True

    def generation(self, k: int) -> Generation:
        return Generation(
            token_ids=[r[0] for r in self.recs],
            logprobs=np.asarray([r[1] for r in self.recs], dtype=np.float64),
            top_ids=np.asarray([r[2] for r in self.recs], dtype=np.int64).reshape(-1, k),
            top_logprobs=np.asarray([r[3] for r in self.recs], dtype=np.float32).reshape(-1, k),
            entropy=np.asarray([r[4] for r in self.recs], dtype=np.float32),
            forced=np.asarray([r[5] for r in self.recs], dtype=bool),
            finish_reason=self.finish,
            edits=self.edits,
        )
