"""What an OpenAI-compatible server returns to the served engine, read (pure): a completion's token
ids and finish, the records listed per generated token, vLLM's prompt log-probs, an error body.
Anything the engine asked for and the server did not return is one :class:`UserError` naming it
(``who``: the served model's spec), never approximated."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from sleight.backends.base import Completion, Scored
from sleight.backends.vllm_wire import SamplingKwargs
from sleight.errors import UserError

ID_PREFIX = "token_id:"  # vLLM's spelling of a token under return_tokens_as_token_ids


class CompletionRequest(SamplingKwargs, total=False):
    """A ``/v1/completions`` body: the model, a token-id prompt and vLLM's sampling settings (its
    server takes ``SamplingParams`` fields in the body), with the token ids asked back."""

    model: str
    prompt: list[int]
    return_token_ids: bool
    return_tokens_as_token_ids: bool


class Lp(NamedTuple):
    """One entry of vLLM's ``prompt_logprobs`` as JSON gives it (what :func:`sleight.backends.vllm_wire.scored` reads)."""

    logprob: float
    rank: int | None


def positions(choice: Mapping[str, object], n: int, who: str) -> list[tuple[float, dict[int, float]]]:
    """Per generated token (the first ``n``): its log-prob and the listed ``{id: log-prob}``."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("top_logprobs"), list) or len(lp["top_logprobs"]) < n:
        raise UserError(f"served model {who}: the server ignored `logprobs` (no top log-probs per generated token)")
    out = []
    for own, top in zip(lp["token_logprobs"][:n], lp["top_logprobs"][:n]):
        if not isinstance(top, dict) or any(not k.startswith(ID_PREFIX) for k in top):
            raise UserError(f"served model {who}: the server ignored return_tokens_as_token_ids (tokens came back as text)")
        out.append((float(own), {int(k[len(ID_PREFIX) :]): float(v) for k, v in top.items()}))
    return out


def completion(choice: Mapping[str, object], budget: int, top_k: int, eos: frozenset[int], who: str) -> Completion:
    """A completion choice as a :class:`Completion`, as :func:`sleight.backends.vllm_wire.completion`
    reads vLLM's own output: an end-of-sequence id dropped (its records kept), a stop token kept."""
    toks = list(token_ids(choice.get("token_ids"), "/completions (return_token_ids)", who))
    records = scored_records(toks, positions(choice, len(toks), who), top_k) if top_k else None
    finish, why = choice.get("finish_reason"), choice.get("stop_reason")
    if finish == "stop":
        if toks and toks[-1] in eos and (why is None or why in eos):
            return Completion(toks[:-1], "stop", records)
        if why is None:
            raise UserError(
                f"served model {who}: the server ended a reply on token {toks[-1] if toks else None}, which is not "
                f"among the end-of-sequence ids it showed at load ({sorted(eos)})"
            )
        return Completion(toks, "stop_token", records)
    if finish == "length":
        if len(toks) < budget:
            raise UserError(f"served model {who}: the server cut a reply at {len(toks)} of {budget} tokens (its context length)")
        return Completion(toks, "length", records)
    raise UserError(f"served model {who}: the server finished a request with finish_reason={finish!r}")


def scored_records(toks: Sequence[int], pos: Sequence[tuple[float, Mapping[int, float]]], top_k: int) -> Scored:
    """A reply's records from each generated token's ``(own log-prob, {id: log-prob} listed)``:
    the top-k ranked (padded with -inf where fewer are listed); entropy NaN (no whole distribution)."""
    ids = np.zeros((len(toks), top_k), dtype=np.int64)
    lps = np.full((len(toks), top_k), -np.inf, dtype=np.float32)
    for j, (_, entry) in enumerate(pos):
        got_ids, got_lps = ranked(entry, top_k)
        ids[j, : len(got_ids)], lps[j, : len(got_lps)] = got_ids, got_lps
    return Scored(list(toks), np.asarray([p[0] for p in pos], dtype=np.float64), ids, lps, np.full(len(toks), np.nan, np.float32))


# -- requests and errors ---------------------------------------------------------------------------
def greedy_payload(prompt: Sequence[int], max_tokens: int) -> CompletionRequest:
    """A greedy request over a token-id prompt that returns the generated ids."""
    return {"prompt": [int(t) for t in prompt], "max_tokens": int(max_tokens), "temperature": 0.0, "return_token_ids": True}


def ranked(entry: Mapping[int, float], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of one position's listed ``{id: log-prob}``, most probable first. The OpenAI format
    lists the chosen token beside the top-k (k + 1 entries when it is not among them) and carries no
    ranks; a stable sort keeps the server's order among equal log-probs."""
    items = sorted(entry.items(), key=lambda kv: -kv[1])[:k]
    return np.asarray([t for t, _ in items], dtype=np.int64), np.asarray([lp for _, lp in items], dtype=np.float64)


def token_ids(value: object, what: str, spec: str) -> tuple[int, ...]:
    """A list of token ids from a server's answer; anything else is one line naming the request."""
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise UserError(f"served model {spec}: {what} returned no token ids (got {json.dumps(value)[:80]})")
    return tuple(value)


def error_text(body: bytes) -> str:
    """A server's error message (OpenAI's ``{"error": {"message": ...}}``, FastAPI's ``detail``), one line."""
    try:
        obj = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return body[:200].decode("utf-8", errors="replace").replace("\n", " ")
    err = obj.get("error") if isinstance(obj, dict) else None
    msg = err.get("message") if isinstance(err, dict) else (obj.get("detail") or obj.get("message") if isinstance(obj, dict) else None)
    return str(msg if msg is not None else obj)[:300].replace("\n", " ")
