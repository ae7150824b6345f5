"""A recording stand-in for the ``vllm`` package (0.33.0), for testing the adapter without a GPU.

vLLM 0.33.0 does not import on a CPU-only torch (``vllm.sampling_params`` needs its own dependency
set and a CUDA build), so the adapter is tested against this: ``LLM``, ``SamplingParams`` and
``TokensPrompt`` with vLLM's signatures, the checks vLLM makes on sampling parameters, and outputs
shaped like ``vllm.outputs.RequestOutput`` / ``CompletionOutput`` / ``vllm.logprobs.Logprob``. The
numbers come from the real bundled model: greedy tokens and log-probs from full forward passes
(``next_token_logprobs``, no KV cache), so nothing of the adapter's own code computes them.

What is mirrored, from vLLM 0.33.0's source:

* ``SamplingParams``: ``stop`` refused with ``detokenize=False`` (sampling_params.py ``_verify_args``),
  ``logprobs`` and ``logprob_token_ids`` only together with ``logprobs == len(ids)``, at most
  ``max_logprobs`` (engine default 20) log-probs and 128 ``logprob_token_ids``
  (``_validate_logprobs``), ``prompt_logprob_start`` only with ``prompt_logprob_token_ids``.
* Stopping (v1/core/sched/utils.py ``check_stop``): the primary end-of-sequence id ends a request
  with ``finish_reason="stop"``, ``stop_reason=None``; a stop token id (the generation config's other
  end-of-sequence ids are added to them) with ``stop_reason`` = that id; both stay in ``token_ids``.
  A stop string ends it with ``stop_reason`` = the string. The budget gives ``"length"``.
* Sample log-probs (logprobs.py ``append_logprobs_for_next_position``): per generated token a dict
  ``{token_id: Logprob(logprob, rank, decoded_token)}`` holding the sampled token first with its
  true rank, then the top-k with ranks 1..k (or the asked ``logprob_token_ids``).
* ``prompt_token_id_logprobs``: shape [prompt_len - 1 - start, num_ids], row i scoring prompt token
  start + i + 1, -inf in padded columns (outputs.py ``RequestOutput``).
* A batch that mixes ``logprobs`` and ``logprob_token_ids`` requests is answered with the asked ids
  for all its rows in vLLM (v1/sample/sampler.py); the stand-in refuses such a batch outright.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__version__ = "0.33.0 (test stand-in)"
MAX_LOGPROB_TOKEN_IDS = 128


class VLLMValidationError(ValueError):
    pass


def TokensPrompt(*, prompt_token_ids: list[int], **extra: Any) -> dict[str, Any]:
    """vllm.inputs.TokensPrompt is a TypedDict: calling it makes a dict."""
    return {"prompt_token_ids": list(prompt_token_ids), **extra}


class SamplingParams:
    """The fields the adapter may set, with vLLM 0.33's defaults and checks."""

    FIELDS = dict(
        temperature=1.0,
        max_tokens=16,
        stop=None,
        stop_token_ids=None,
        include_stop_str_in_output=False,
        detokenize=True,
        logprobs=None,
        logprob_token_ids=None,
        prompt_logprobs=None,
        prompt_logprob_token_ids=None,
        prompt_logprob_start=None,
        seed=None,
    )

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"SamplingParams got unexpected keyword arguments {sorted(unknown)}")
        self.kwargs = dict(kwargs)
        for k, v in {**self.FIELDS, **kwargs}.items():
            setattr(self, k, v)
        self.stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        self.stop_token_ids = list(dict.fromkeys(self.stop_token_ids or []))
        if self.stop and not self.detokenize:
            raise VLLMValidationError("stop strings are only supported when detokenize is True. Set detokenize=True to use stop.")
        if self.prompt_logprob_start is not None and self.prompt_logprob_token_ids is None:
            raise VLLMValidationError("prompt_logprob_start requires prompt_logprob_token_ids.")

    def verify(self, max_logprobs: int, vocab: int) -> None:
        """SamplingParams._validate_logprobs (run by the engine when a request is added)."""
        if self.logprobs is not None:
            n = vocab if self.logprobs == -1 else self.logprobs
            if n > max_logprobs:
                raise VLLMValidationError(f"Requested sample logprobs of {n}, which is greater than max allowed: {max_logprobs}")
        if self.logprob_token_ids is not None:
            if len(self.logprob_token_ids) > MAX_LOGPROB_TOKEN_IDS:
                raise VLLMValidationError("too many logprob_token_ids")
            if any(t < 0 or t >= vocab for t in self.logprob_token_ids):
                raise VLLMValidationError("out-of-vocab logprob_token_ids")
            if self.logprobs is not None and self.logprobs != len(self.logprob_token_ids):
                raise VLLMValidationError("When both logprobs and logprob_token_ids are set, logprobs must equal len(logprob_token_ids).")
        if self.prompt_logprob_token_ids is not None and max(len(r) for r in self.prompt_logprob_token_ids) > max_logprobs:
            raise VLLMValidationError("too many token ids per row in prompt_logprob_token_ids")


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int | None = None
    prompt_token_id_logprobs: np.ndarray | None = None


@dataclass
class Call:
    prompts: list[list[int]]
    params: list[SamplingParams]


class LLM:
    """``vllm.LLM(model, **kwargs)``; every ``generate`` call is recorded in ``calls``."""

    instances: list[LLM] = []

    def __init__(self, model: str, *, hf: Any, block_size: int = 16, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs
        self.hf = hf  # the real model that stands in for the GPU
        self.calls: list[Call] = []
        self.block_size = block_size
        self._computed: list[list[int]] = []  # what the prefix cache would hold
        gen_eos = hf.model.generation_config.eos_token_id
        self._gen_eos = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
        self.llm_engine = types.SimpleNamespace(
            model_config=types.SimpleNamespace(
                get_vocab_size=lambda: hf.vocab_size,
                try_get_generation_config=lambda: {"eos_token_id": self._gen_eos} if self._gen_eos else {},
                max_model_len=kwargs.get("max_model_len") or 8192,
            )
        )
        LLM.instances.append(self)

    def get_tokenizer(self):
        return self.hf.tokenizer

    def _cached(self, ids: list[int]) -> int:
        best = 0
        for seq in self._computed:
            n = 0
            while n < min(len(seq), len(ids) - 1) and seq[n] == ids[n]:
                n += 1
            best = max(best, n)
        return best // self.block_size * self.block_size

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, **_: Any) -> list[RequestOutput]:
        prompts = list(prompts)
        params = list(sampling_params) if isinstance(sampling_params, (list, tuple)) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        max_lp = self.kwargs.get("max_logprobs", 20)
        for p in params:
            p.verify(max_lp, self.hf.vocab_size)
        if any(p.logprob_token_ids for p in params) and any(p.logprobs is not None for p in params):
            raise AssertionError("a batch mixing logprobs and logprob_token_ids: vLLM would answer every row with the asked ids")
        ids = [list(p["prompt_token_ids"]) for p in prompts]
        self.calls.append(Call(ids, params))
        return [self._one(i, seq, p) for i, (seq, p) in enumerate(zip(ids, params))]

    def _one(self, i: int, prompt: list[int], p: SamplingParams) -> RequestOutput:
        if p.temperature != 0:
            raise AssertionError("the adapter only ever decodes greedily")
        cached = self._cached(prompt)
        primary = self.hf.tokenizer.eos_token_id
        stops = set(p.stop_token_ids) | (set(self._gen_eos) - {primary})
        out: list[int] = []
        sample_lps: list[dict[int, Logprob]] | None = [] if (p.logprobs is not None or p.logprob_token_ids) else None
        finish, reason = "length", None
        seq = list(prompt)
        while len(out) < p.max_tokens:
            lp = self.hf.next_token_logprobs([seq])[0]
            tok = int(np.argmax(lp))
            if sample_lps is not None:
                entry = {tok: Logprob(float(lp[tok]), int((lp > lp[tok]).sum()) + 1)}
                if p.logprob_token_ids:
                    for r, t in enumerate(p.logprob_token_ids, 1):
                        entry[int(t)] = Logprob(float(lp[t]), r)
                else:
                    for r, t in enumerate(np.argsort(-lp, kind="stable")[: p.logprobs], 1):
                        entry[int(t)] = Logprob(float(lp[t]), r)
                sample_lps.append(entry)
            out.append(tok)
            seq.append(tok)
            if tok == primary:
                finish = "stop"
                break
            if tok in stops:
                finish, reason = "stop", tok
                break
            if p.stop:
                text = self.hf.decode(out)
                hit = next((s for s in p.stop if s in text), None)
                if hit is not None:
                    finish, reason = "stop", hit
                    break
        self._computed.append(prompt + out[:-1])  # the last sampled token is never fed
        ptl = None
        if p.prompt_logprob_token_ids is not None:
            start = p.prompt_logprob_start or 0
            with torch.inference_mode():
                logits = self.hf.model(torch.tensor([prompt])).logits[0].float()
            lps = torch.log_softmax(logits, -1).numpy()
            width = max(len(r) for r in p.prompt_logprob_token_ids)
            ptl = np.full((len(prompt) - 1 - start, width), -np.inf, dtype=np.float32)
            for r in range(len(prompt) - 1 - start):
                for c, t in enumerate(p.prompt_logprob_token_ids[r] if r < len(p.prompt_logprob_token_ids) else []):
                    if t >= 0:
                        ptl[r, c] = lps[start + r, t]
        text = self.hf.decode(out) if p.detokenize else ""
        comp = CompletionOutput(0, text, out, None, sample_lps, finish, reason)
        return RequestOutput(str(i), None, prompt, None, [comp], True, num_cached_tokens=cached, prompt_token_id_logprobs=ptl)


def module(hf: Any) -> types.SimpleNamespace:
    """A ``vllm``-shaped namespace whose ``LLM`` runs on ``hf``."""
    return types.SimpleNamespace(
        __version__=__version__,
        LLM=lambda model, **kw: LLM(model, hf=hf, **kw),
        SamplingParams=SamplingParams,
        TokensPrompt=TokensPrompt,
    )
