"""llama.cpp's server (``llama-server``) as a served subject: the served engine's second dialect.

``--model openai:<base_url>#<alias>`` names a model on any OpenAI-compatible server; :func:`open_served`
asks the server which one it is (llama.cpp's answers ``GET /props`` with its ``build_info``) and
speaks its own routes, which take and return token ids:

* ``encode`` / ``decode``: ``/tokenize`` (``add_special=false``, ``parse_special=true``, as a
  Hugging Face tokenizer reads special tokens in text) and ``/detokenize``; ``render_chat``:
  ``/apply-template`` (the server's own template, ``chat_template_kwargs`` passed on), its text
  encoded. The server continues a final assistant message (its assistant prefill) unless started
  with ``--no-prefill-assistant``; rendering a whole assistant turn on such a server is one line.
* generation: ``/completion`` with the token-id prompt, ``temperature=0`` (greedy), penalties off,
  ``n_probs=k`` and ``return_tokens``; each generated token's log-prob and top-k are the server's raw
  ones (``post_sampling_probs`` off: a softmax of the logits over the whole vocabulary). The server
  has no stop ids: a reply is generated to its budget and cut after its first stop id here (the
  records of what follows dropped), so it equals a reply stopped there.
* a forced token (a substitute's records; a given id's log-prob): a one-token request whose
  ``logit_bias`` makes the id the greedy choice; the server reports that token's raw log-prob
  (read before the sampler chain's bias), so ``read_next``, ``continuation_logprobs`` and
  ``score_tokens`` are exact: one forced request an id or a reply position.
* the vocabulary size from ``/v1/models`` (``meta.n_vocab``); the version from ``/props``.

Not offered here, each refused in one line: prompt log-probs in one request (none exist on this
server; the forced requests above stand in for them), sampling, and per-step hooks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

import numpy as np

from sleight.backends.base import Completion, NextToken, Sample, Sampling, Scored, check_continuations, check_reads
from sleight.backends.served import ServedModel
from sleight.backends.served_probe import post_status
from sleight.backends.served_wire import ranked, scored_records, token_ids
from sleight.backends.spec import ModelSpec
from sleight.backends.transport import Endpoint, _Transport, parse_openai_spec
from sleight.backends.vllm_wire import Rows
from sleight.errors import UserError

FORCE_BIAS = 1e9  # added to a forced id's logit: the greedy choice, whatever the model thinks


class Greedy(TypedDict):
    """The server's sampling defaults a greedy request switches off (its chain applies them before greedy)."""

    temperature: float
    repeat_penalty: float
    presence_penalty: float
    frequency_penalty: float
    dry_multiplier: float


class LlamaCompletion(Greedy, total=False):
    """A body of llama.cpp's ``/completion``: a token-id prompt, greedy, the generated ids returned."""

    prompt: list[int]
    n_predict: int
    return_tokens: bool
    cache_prompt: bool
    n_probs: int
    logit_bias: list[list[float]]


GREEDY = Greedy(temperature=0.0, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, dry_multiplier=0.0)
PREFILL_PROBE = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


def open_served(spec: ModelSpec) -> ServedModel:
    """The served engine for ``spec``'s server: llama.cpp's dialect where ``GET /props`` says
    llama.cpp (its ``build_info``), vLLM's (the OpenAI routes and vLLM's extensions) otherwise."""
    from sleight.backends.served import TIMEOUT_S

    base, _ = parse_openai_spec(spec.model)
    endpoint = Endpoint(base, concurrency=spec.batch_size, timeout_s=TIMEOUT_S)
    try:  # once, no retries: a server that does not answer is ServedModel's one line, below
        resp = endpoint.exchange("GET", "/props", None, timeout=min(10.0, TIMEOUT_S), root=True)
        props = json.loads(resp.body.decode("utf-8")) if resp.status == 200 else None
    except (_Transport, UnicodeDecodeError, ValueError):
        props = None
    if isinstance(props, dict) and "build_info" in props:
        return LlamaServedModel(spec, endpoint=endpoint)
    return ServedModel(spec, endpoint=endpoint)


class LlamaServedModel(ServedModel):
    """:class:`~sleight.backends.served.ServedModel` over llama.cpp's own routes (module docstring)."""

    _prefills: bool | None = None  # whether the server continues a final assistant message (read once)

    # -- probe hooks ------------------------------------------------------------------------------
    def listed_vocab(self) -> int | None:
        got = self.endpoint.call("GET", "/models", None)
        try:
            entries = json.loads(got.body.decode("utf-8")).get("data") or []
            meta: Any = next(e.get("meta") for e in entries if isinstance(e, dict) and e.get("id") == self.served_id)
            return int(meta["n_vocab"])
        except (ValueError, AttributeError, StopIteration, KeyError, TypeError):
            raise UserError(f"served model {self.spec.model}: llama.cpp's /v1/models lists no n_vocab for '{self.served_id}'") from None

    def one_forced(self, token: int, prompt: Sequence[int]) -> tuple[int, Mapping[str, object] | str]:
        body: LlamaCompletion = {"prompt": [int(t) for t in prompt], "n_predict": 1, **GREEDY, "return_tokens": True, "logit_bias": [[int(token), FORCE_BIAS]]}
        status, got = post_status(self, "/completion", body, root=True)
        if status != 200 or not isinstance(got, dict):
            return status, str(got)
        return 200, {"finish_reason": "stop" if got.get("stop_type") == "eos" else "length", "stop_reason": None}

    # -- tokens -------------------------------------------------------------------------------------
    def _encode_uncached(self, text: str) -> tuple[int, ...]:
        got = self.post("/tokenize", {"content": text, "add_special": False, "parse_special": True}, root=True)
        return token_ids(got.get("tokens"), "/tokenize", self.spec.model)

    def _decode_uncached(self, ids: tuple[int, ...]) -> str:
        got = self.post("/detokenize", {"tokens": list(ids)}, root=True)
        text = got.get("content")
        if not isinstance(text, str):
            raise UserError(f"served model {self.spec.model}: /detokenize answered no text: {json.dumps(got)[:160]}")
        return text

    def _template_text(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool, template_kwargs: Mapping[str, object]) -> str:
        body: dict[str, object] = {"messages": [dict(m) for m in messages], "add_generation_prompt": add_generation_prompt}
        if template_kwargs:
            body["chat_template_kwargs"] = dict(template_kwargs)
        text = self.post("/apply-template", body, root=True).get("prompt")
        if not isinstance(text, str):
            raise UserError(f"served model {self.spec.model}: /apply-template answered no prompt text")
        return text

    def chat_ids(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool, template_kwargs: Mapping[str, object]) -> list[int]:
        """The ids of the server's rendering (``/apply-template``), encoded by its tokenizer."""
        if messages and messages[-1].get("role") == "assistant" and not add_generation_prompt:
            if self._prefills is None:
                self._prefills = self._template_text(PREFILL_PROBE, False, {}).endswith(PREFILL_PROBE[-1]["content"])
            if self._prefills:
                raise UserError(
                    f"served model {self.spec.model}: llama.cpp's server continues a final assistant message instead of "
                    "rendering the whole turn; start it with --no-prefill-assistant"
                )
        return self.encode(self._template_text(messages, add_generation_prompt, template_kwargs))

    # -- requests -------------------------------------------------------------------------------------
    def _complete(self, prompt: Sequence[int], n_predict: int, top_k: int, forced: int | None = None) -> Mapping[str, object]:
        body: LlamaCompletion = {"prompt": [int(t) for t in prompt], "n_predict": int(n_predict), **GREEDY, "return_tokens": True, "cache_prompt": False}
        if top_k:
            body["n_probs"] = int(top_k)
        if forced is not None:
            body["logit_bias"] = [[int(forced), FORCE_BIAS]]
        return self.post("/completion", body, root=True)

    def _positions(self, out: Mapping[str, object], n: int) -> list[tuple[float, dict[int, float]]]:
        """Per generated token: its raw log-prob and the listed ``{id: log-prob}``."""
        probs = out.get("completion_probabilities")
        if not isinstance(probs, list) or len(probs) < n:
            raise UserError(f"served model {self.spec.model}: the server ignored n_probs (no log-probs per generated token)")
        try:
            return [(float(p["logprob"]), {int(e["id"]): float(e["logprob"]) for e in p["top_logprobs"]}) for p in probs[:n]]
        except (KeyError, TypeError, ValueError):
            raise UserError(f"served model {self.spec.model}: /completion answered log-probs without ids: {json.dumps(probs[:1])[:160]}") from None

    def request(self, prompt: Sequence[int], max_tokens: int, *, forced: int | None = None, top_k: int = 0,
                stop_token_ids: Sequence[int] = (), stop: Sequence[str] = ()) -> Completion:  # fmt: skip
        """One greedy request; stop ids and stop strings are applied here (see the module)."""
        budget = 1 if forced is not None else int(max_tokens)
        out = self._complete(prompt, budget, top_k, forced)
        toks = list(token_ids(out.get("tokens"), "/completion (return_tokens)", self.spec.model))
        pos = self._positions(out, len(toks)) if top_k else []
        cut = _first_stop(toks, frozenset(int(t) for t in stop_token_ids), stop, self.token_text) if forced is None else None
        if cut is not None:
            toks, pos = toks[: cut + 1], pos[: cut + 1]
        records = scored_records(toks, pos, top_k) if top_k else None
        if cut is not None:
            return Completion(toks, "stop_token", records)
        why = out.get("stop_type")
        if why == "eos":
            if not toks or toks[-1] not in self._eos:
                raise UserError(f"served model {self.spec.model}: the server ended a reply on token {toks[-1] if toks else None}, not an end id it showed at load ({sorted(self._eos)})")
            return Completion(toks[:-1], "stop", records)
        if why == "limit" and len(toks) >= budget:
            return Completion(toks, "length", records)
        if why == "limit":
            raise UserError(f"served model {self.spec.model}: the server cut a reply at {len(toks)} of {budget} tokens (its context length)")
        raise UserError(f"served model {self.spec.model}: the server finished a request with stop_type={why!r}")

    def _forced_row(self, prompt: Sequence[int], token: int, k: int) -> tuple[float, dict[int, float]]:
        """``token``'s raw log-prob after ``prompt`` and the top-``k`` there (one forced request)."""
        out = self._complete(prompt, 1, max(1, k), int(token))
        got = list(token_ids(out.get("tokens"), "/completion (return_tokens)", self.spec.model))
        if got[:1] != [int(token)]:
            raise UserError(f"served model {self.spec.model}: a request forced to token {token} generated {got[:1]} (the server ignored logit_bias)")
        return self._positions(out, 1)[0]

    # -- scoring --------------------------------------------------------------------------------------
    def prompt_logprobs(self, seqs: Sequence[Sequence[int]], k: int) -> list[Rows]:
        raise UserError(f"served model {self.spec.model}: llama.cpp's server returns no prompt log-probs")

    def continuation_logprobs(self, context: Sequence[int], continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Each continuation token's raw log-prob, one forced request a position."""
        check_continuations(context, continuations)
        jobs = [(i, j) for i, c in enumerate(continuations) for j in range(len(c))]
        rows = self.many(lambda ij: self._forced_row(list(context) + list(continuations[ij[0]][: ij[1]]), continuations[ij[0]][ij[1]], 1)[0], jobs)
        out = [np.zeros(len(c), dtype=np.float64) for c in continuations]
        for (i, j), lp in zip(jobs, rows):
            out[i][j] = lp
        return out

    def score_tokens(self, context: Sequence[int], replies: Sequence[Sequence[int]], *, top_k: int = 20) -> list[Scored]:
        """Each reply token's raw log-prob and the top-k there, one forced request a position."""
        if not context:
            raise ValueError("score_tokens needs a non-empty context")
        self.check_k(top_k)
        jobs = [(i, j) for i, r in enumerate(replies) for j in range(len(r))]
        rows = self.many(lambda ij: self._forced_row(list(context) + list(replies[ij[0]][: ij[1]]), replies[ij[0]][ij[1]], top_k), jobs)
        per: list[list[tuple[float, dict[int, float]]]] = [[] for _ in replies]
        for (i, _), row in zip(jobs, rows):
            per[i].append(row)
        return [scored_records([int(t) for t in r], per[i], top_k) if len(r) else Scored.empty(top_k) for i, r in enumerate(replies)]

    def _reads(self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], top_k: int, *, listed: bool) -> list[NextToken]:
        """The top-k a position, and each asked id's raw log-prob by a request forced to it: exact,
        so ``read_listed`` is ``read_next`` here (no bound)."""
        check_reads(seqs, asked)
        self.check_k(top_k)
        tops = self.many(lambda s: ranked(self._positions(self._complete(s, 1, top_k), 1)[0][1], top_k) if top_k > 0 else (np.zeros(0, np.int64), np.zeros(0)), list(seqs))
        jobs = [(i, t) for i, ids in enumerate(asked) for t in dict.fromkeys(int(t) for t in ids)]
        got = dict(zip(jobs, self.many(lambda it: self._forced_row(seqs[it[0]], it[1], 1)[0], jobs)))
        return [
            NextToken(np.asarray([got[(i, int(t))] for t in asked[i]], dtype=np.float64), tops[i][0], tops[i][1], float("nan"))
            for i in range(len(seqs))
        ]

    def sample_rows(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, n: int, sampling: Sampling, stop_token_ids: Sequence[int]
    ) -> list[list[Sample]]:
        raise UserError(f"served model {self.spec.model}: sampling on llama.cpp's server is not built (greedy requests only)")


def _first_stop(toks: Sequence[int], stop_ids: frozenset[int], stop: Sequence[str], text_of: Callable[[int], str]) -> int | None:
    """The index of the first token that is a stop id or completes a stop string (pure but for
    ``text_of``, each id's surface string); None when none does."""
    text = ""
    for j, t in enumerate(toks):
        if t in stop_ids:
            return j
        if stop:
            text += text_of(int(t))
            if any(s in text for s in stop):
                return j
    return None
