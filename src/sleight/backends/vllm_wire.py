"""What the vllm engine asks vLLM for, and what vLLM returns, translated (pure; the tests hold these
against the installed vLLM): each request's ``SamplingParams`` as keyword arguments, and a
``CompletionOutput`` or a request's ``prompt_logprobs`` read as the interface's records. The served
engine reads a vLLM server's prompt log-probs with the same functions (:mod:`.served_wire`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypedDict

import numpy as np

from sleight.backends.base import Completion, Scored
from sleight.errors import UserError

MAX_LOGPROBS = 20  # vLLM's own default; top-k above it needs the engine built with more


class SamplingKwargs(TypedDict, total=False):
    """The ``SamplingParams`` keyword arguments this project sets (vLLM's names); the rest are vLLM's defaults."""

    n: int
    temperature: float
    top_k: int
    top_p: float
    min_tokens: int
    seed: int
    max_tokens: int
    stop_token_ids: list[int]
    stop: list[str]
    include_stop_str_in_output: bool
    detokenize: bool
    logprobs: int
    allowed_token_ids: list[int]
    logprob_token_ids: list[int]
    prompt_logprobs: int


class Entry(Protocol):
    """One token's entry in a row of vLLM's log-probs (its ``Logprob``, or a server's JSON read as
    :class:`~sleight.backends.served_wire.Lp`): the log-prob and the rank (None: not ranked)."""

    @property
    def logprob(self) -> float: ...

    @property
    def rank(self) -> int | None: ...


Row = Mapping[int, Entry]  # one position: {token id: entry}
Rows = Sequence[Row | None]  # one request's prompt log-prob rows (row 0, the first prompt token's, is None)


# -- what the adapter asks vLLM for ---------------------------------------------------------------
def until_params(max_tokens: int, stop_token_ids: Sequence[int] = (), stop: Sequence[str] = (), top_k: int = 0) -> SamplingKwargs:
    """``SamplingParams`` of one Phase A request: greedy, no detokenizing, and with ``top_k`` the
    top-k log-probs of every generated token (its records, read as it is generated).

    vLLM only searches stop strings in detokenized text (``SamplingParams._verify_args`` refuses
    ``stop`` with ``detokenize=False``), so a request with stop strings detokenizes its output.
    """
    params = SamplingKwargs(
        temperature=0.0,
        max_tokens=int(max_tokens),
        stop_token_ids=[int(t) for t in stop_token_ids],
        stop=list(stop),
        include_stop_str_in_output=True,
        detokenize=bool(stop),
    )
    if top_k:
        params["logprobs"] = int(top_k)
    return params


def forced_params(token: int, top_k: int) -> SamplingKwargs:
    """One token that must be ``token``, with its records at that position: ``allowed_token_ids``
    masks every other id before sampling, and vLLM's log-probs are the raw ones, read before any
    mask (``logprobs_mode="raw_logprobs"``, vllm/v1/sample/sampler.py), so the forced token's own
    log-prob and the position's top-k are the model's, as a teacher-forced pass gives them, and the
    request reads the prefix cache (a ``prompt_logprobs`` request does not)."""
    return SamplingKwargs(temperature=0.0, max_tokens=1, logprobs=int(top_k), allowed_token_ids=[int(token)], detokenize=False)


def top_params(top_k: int) -> SamplingKwargs:
    """One token, with the top-k log-probs at the position before it."""
    return SamplingKwargs(temperature=0.0, max_tokens=1, logprobs=int(top_k), detokenize=False)


def asked_params(ids: Sequence[int]) -> SamplingKwargs:
    """One token, with the log-probs of exactly ``ids`` at the position before it."""
    return SamplingKwargs(temperature=0.0, max_tokens=1, logprob_token_ids=[int(t) for t in ids], detokenize=False)


def scored_params(top_k: int) -> SamplingKwargs:
    """One token, with every prompt token's own log-prob and the top-k at its position
    (``prompt_logprobs=0``: the own log-prob alone, no alternatives)."""
    return SamplingKwargs(temperature=0.0, max_tokens=1, prompt_logprobs=int(top_k), detokenize=False)


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


def ranked(entry: Row, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of one position's ``{token_id: Logprob}`` (the sampled token comes first in vLLM's
    dict and keeps its own rank; the top-k carry ranks 1..k), most probable first."""
    items = sorted(((int(v.rank), int(t), float(v.logprob)) for t, v in entry.items() if v.rank is not None and v.rank <= k))
    ids = np.asarray([t for _, t, _ in items], dtype=np.int64)
    lps = np.asarray([lp for _, _, lp in items], dtype=np.float64)
    return ids, lps


def prompt_token_logprobs(rows: Rows, tokens: Sequence[int], start: int) -> np.ndarray:
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


def scored(rows: Rows, reply: Sequence[int], start: int, k: int) -> Scored:
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

