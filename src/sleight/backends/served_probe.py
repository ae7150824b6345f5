"""What a served model is, asked of its server once at load (:class:`~sleight.backends.served.ServedModel`).

An OpenAI-compatible server does not list its vocabulary, its end-of-sequence ids or its chat
template, so each is read from what the server itself does, and checked:

* **served id and version**: ``GET /v1/models`` must list the spec's model name (else one line
  listing what it serves); ``GET /version`` (vLLM) and the listing's ``owned_by`` give the version.
* **vocabulary size**: where the server lists it (llama.cpp's ``/v1/models`` ``meta.n_vocab``), that;
  else the size of the logits, found by bisection on one-token requests restricted to
  one id (``allowed_token_ids``): the server refuses an id outside its vocabulary before it computes
  anything (vLLM: ``sampling_params.py`` ``_validate_allowed_token_ids``), and answers one inside it.
* **end-of-sequence ids**: each candidate (the token the chat template writes after an assistant
  turn, and the single-token spellings of the usual end markers) is generated alone, forced (the
  engine's ``one_forced``: vLLM's ``allowed_token_ids``, llama.cpp's ``logit_bias``); the server's own stop decision (``finish_reason`` ``stop`` with no stop
  string or stop id of the request's) says whether it ends a reply. This is the set vLLM stops on:
  the tokenizer's end-of-sequence id and the generation config's.
* **surface strings** (``token_text``): every id decoded alone, as ``/detokenize`` decodes ``[id]``.
  Read in bulk: chunks of ids, each between two copies of an end-of-sequence token whose text is the
  separator, decoded in one request and split; a chunk that does not split into exactly its ids is
  read one id per request, and a sample of ids read one per request must equal the bulk reading
  (a tokenizer whose decoding depends on the neighbouring token, as SentencePiece's leading space
  does, fails the sample and is read one id per request throughout).
* **hashes**: the tokenizer's, over the surface strings, the end ids and a probe text's ids; the chat
  template's, over the server's rendering of a probe conversation (the template itself is not served).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sleight.backends.served_wire import error_text
from sleight.backends.transport import _Transport
from sleight.errors import UserError

CHUNK = 2048  # ids per bulk /detokenize request
SAMPLE = 256  # ids read one per request to check the bulk reading (and the first and last 32)
MAX_VOCAB = 1 << 24  # the bisection's ceiling: a server that takes every id below it bounds nothing
# Single-token spellings of the end markers of the common chat families (checked by generation).
END_MARKERS = (
    "<|endoftext|>", "<|im_end|>", "</s>", "<eos>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<end_of_turn>",
    "<|end|>", "<|return|>", "<|call|>", "<|end▁of▁sentence|>",
)  # fmt: skip
PROBE_TEXT = "The quick brown fox jumps over the lazy dog. Ünïcödé: 日本語, emoji 🙂, digits 12345, code `x = y[0]`."
PROBE_CHAT = [
    {"role": "system", "content": "You are a probe."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"},
]


@dataclass(frozen=True)
class Found:
    """What :func:`probe_server` read."""

    version: str
    vocab_size: int
    eos_ids: frozenset[int]
    texts: list[str]
    texts_read: str  # "bulk" or "one id per request"
    tokenizer_sha256: str
    chat_render_sha256: str


def probe_server(model: Any) -> Found:
    """Ask the server behind ``model`` (a :class:`~sleight.backends.served.ServedModel` being built)
    what its model is; one :class:`UserError` for a server that is down, refuses the key, serves
    another model or lacks what the engine needs."""
    model.endpoint.check()
    version = _version(model)
    vocab = model.listed_vocab() or vocab_size(model)
    eos = eos_ids(model, vocab)
    texts, how = vocabulary(model, vocab, eos)
    tok = hashlib.sha256(json.dumps([texts, sorted(eos), model.encode(PROBE_TEXT)], ensure_ascii=False).encode()).hexdigest()
    render = model.render_chat(PROBE_CHAT).text if _has_template(model) else ""
    chat = hashlib.sha256(render.encode()).hexdigest() if render else ""
    return Found(version, vocab, eos, texts, how, tok, chat)


def _get(model: Any, path: str, *, root: bool = False) -> tuple[int, Any]:
    try:
        resp = model.endpoint.call("GET", path, None, root=root)
    except _Transport as exc:
        raise UserError(f"served model {model.spec.model}: GET {path} failed ({exc})") from None
    try:
        return resp.status, json.loads(resp.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return resp.status, None


def _version(model: Any) -> str:
    """``<owner> <version>`` from ``/v1/models`` and ``/version`` (``vllm 0.32.0``); the served id
    must be listed."""
    status, listing = _get(model, "/models")
    entries = listing.get("data") if isinstance(listing, dict) else None
    if status == 200 and isinstance(entries, list):
        ids = [e.get("id") for e in entries if isinstance(e, dict)]
        if model.served_id not in ids:
            raise UserError(f"{model.endpoint.base_url} serves {', '.join(map(str, ids)) or 'no model'}, not '{model.served_id}'")
        owner = next((e.get("owned_by") for e in entries if isinstance(e, dict) and e.get("id") == model.served_id), None)
    else:
        owner = None
    status, ver = _get(model, "/version", root=True)
    number = ver.get("version") if status == 200 and isinstance(ver, dict) else None
    if number is None:  # llama.cpp's server: its build and its slots (requests batched together sum otherwise), from /props
        status, props = _get(model, "/props", root=True)
        if status == 200 and isinstance(props, dict) and props.get("build_info"):
            number = f"{props['build_info']} ({props.get('total_slots', '?')} slot(s))"
    parts = [str(p) for p in (owner, number) if p]
    return " ".join(parts) if parts else "unknown server"


def post_status(model: Any, path: str, body: Mapping[str, object], *, root: bool = False) -> tuple[int, Any]:
    """POST ``body`` (with the transport's retries): the status and, on 200, the JSON answer (else
    the server's error message), for a probe that reads a refusal as an answer; a malformed 200 is
    one line. The engines' ``one_forced`` (a one-token request forced to a token) use it."""
    try:
        resp = model.endpoint.call("POST", path, body, root=root)
    except _Transport as exc:
        raise UserError(f"served model {model.spec.model}: {path} failed ({exc})") from None
    if resp.status != 200:
        return resp.status, error_text(resp.body)
    try:
        return 200, json.loads(resp.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise UserError(f"served model {model.spec.model}: {path} answered a malformed body: {resp.body[:120]!r}") from None


def vocab_size(model: Any) -> int:
    """The number of logits: the least id the server refuses in ``allowed_token_ids``."""

    def valid(token: int) -> bool:
        status, said = model.one_forced(token, [0])
        if status == 200:
            return True
        if status in (400, 422):
            return False
        raise UserError(f"served model {model.spec.model}: a one-token request answered HTTP {status} while sizing the vocabulary: {said}")

    if not valid(0):
        raise UserError(f"served model {model.spec.model}: the server refuses allowed_token_ids, which forcing a substitute needs")
    lo, hi = 0, 1024  # lo valid; find an invalid hi
    while valid(hi):
        lo, hi = hi, hi * 2
        if hi > MAX_VOCAB:
            raise UserError(f"served model {model.spec.model}: the server takes any token id in allowed_token_ids, so its vocabulary size is unknown")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if valid(mid) else (lo, mid)
    return hi


def _has_template(model: Any) -> bool:
    try:
        model.chat_ids(PROBE_CHAT[1:2], add_generation_prompt=True, template_kwargs=model.chat_template_kwargs)
    except UserError:
        return False
    return True


def eos_ids(model: Any, vocab: int) -> frozenset[int]:
    """The candidates the server stops on when it generates them (see the module's docstring)."""
    cands: set[int] = set()
    for marker in END_MARKERS:
        ids = model.encode(marker)
        if len(ids) == 1:
            cands.add(ids[0])
    prompt = model.encode("Hello")
    turn = None
    if _has_template(model):
        try:
            turn = model.chat_ids(PROBE_CHAT[1:3], add_generation_prompt=False, template_kwargs=model.chat_template_kwargs)
        except UserError:  # a server that will not render a whole assistant turn (llama.cpp's prefill)
            turn = None
    if turn is not None:
        body = model.encode("Hello")
        at = max((i for i in range(len(turn) - len(body) + 1) if turn[i : i + len(body)] == body), default=None)
        if at is not None:
            cands.update(turn[at + len(body) : at + len(body) + 2])  # what the template writes after the turn
        prompt = turn[: at + len(body)] if at is not None else turn
    prompt = prompt or [0]

    def stops(token: int) -> bool:
        status, choice = model.one_forced(token, prompt)
        if status != 200 or not isinstance(choice, dict):
            return False
        return choice.get("finish_reason") == "stop" and choice.get("stop_reason") in (None, token)

    found = sorted(t for t in cands if 0 <= t < vocab)
    return frozenset(t for t, ok in zip(found, model.many(stops, found)) if ok)


def vocabulary(model: Any, vocab: int, eos: frozenset[int]) -> tuple[list[str], str]:
    """Every id's surface string as ``/detokenize`` gives ``[id]``; how it was read."""
    texts: list[str | None] = [None] * vocab
    sep = min(eos) if eos else None
    sep_text = model.decode([sep]) if sep is not None else ""
    if sep is not None and sep_text:
        texts[sep] = sep_text
        chunks = [[t for t in range(s, min(s + CHUNK, vocab)) if t != sep] for s in range(0, vocab, CHUNK)]

        def bulk(chunk: list[int]) -> list[str] | None:
            seq = [sep] + [x for t in chunk for x in (t, sep)]
            parts = model.decode(seq).split(sep_text)
            return parts[1:-1] if len(parts) == len(chunk) + 2 and parts[0] == parts[-1] == "" else None

        for chunk, got in zip(chunks, model.many(bulk, chunks)):
            if got is not None:
                for t, s in zip(chunk, got):
                    texts[t] = s
        sample = sorted({*range(0, vocab, max(1, vocab // SAMPLE)), *range(min(32, vocab)), *range(max(0, vocab - 32), vocab)})
        singles = model.many(lambda t: model.decode([t]), sample)
        if all(texts[t] is None or texts[t] == s for t, s in zip(sample, singles)):
            missing = [t for t, s in enumerate(texts) if s is None]
            for t, s in zip(missing, model.many(lambda t: model.decode([t]), missing)):
                texts[t] = s
            return [s or "" for s in texts], "bulk"
    everything = list(range(vocab))
    return list(model.many(lambda t: model.decode([t]), everything)), "one id per request"
