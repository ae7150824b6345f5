"""Chat completion for judges: an OpenAI-compatible HTTP endpoint, or any local model.

A judge only needs "messages in, text out", so both kinds share :class:`ChatModel`. Specs:

* ``openai:<base_url>#<model>`` -- any OpenAI-compatible server (vLLM, llama.cpp, Ollama, hosted
  APIs); the key comes from ``$OPENAI_API_KEY`` (or the variable named by ``api_key_env``);
* anything else -- a model spec for :func:`sleight.backends.load_model`, decoded greedily.

The HTTP client never raises for what a server sends back: a refused request, a body cut short,
bytes that are not HTTP, ``"message": null`` or a content that is not text all become a
:class:`ChatReply` whose ``error`` says what happened, so one bad answer never loses the batch.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict

# The transport is shared with the served engine; its names stay importable from here.
from sleight.backends.base import Completion, ContinuousBatching
from sleight.backends.request_engine import RequestEngine
from sleight.backends.transport import RETRY_STATUS, Endpoint, _Transport, parse_openai_spec, retry_after_s  # noqa: F401

Messages = Sequence[Mapping[str, str]]
TokenParam = Literal["max_completion_tokens", "max_tokens"]


class ChatRequest(TypedDict, total=False):
    """A ``/chat/completions`` body as this client sends it (greedy)."""

    model: str
    messages: list[dict[str, str]]
    temperature: float
    max_completion_tokens: int
    max_tokens: int
    logprobs: bool
    top_logprobs: int
    response_format: dict[str, object]
    chat_template_kwargs: dict[str, object]


class TopLogprob(TypedDict):
    """One listed alternative of a reply token (OpenAI's ``top_logprobs`` entry, the fields read)."""

    token: str
    logprob: float


class TokenLogprob(TopLogprob):
    """One reply token of ``choices[0].logprobs.content`` as the server sends it: the token, its
    log-prob and the alternatives listed beside it (the fields read)."""

    top_logprobs: list[TopLogprob]


class ChoiceParts(TypedDict):
    """What a judge reads of a chat-completions body's first choice (:func:`read_choice`)."""

    text: str
    reasoning: str | None
    finish_reason: str | None
    logprobs: list[TokenLogprob] | None

# A server that does not take a ``response_format`` answers one of these (FastAPI servers say 422;
# llama-cpp-python's server turns the validation error into a 500 that names the field).
FORMAT_REJECTED = frozenset({400, 422})
FORMAT_WORDS = re.compile(r"response_format|json_schema|json_object|grammar", re.IGNORECASE)


@dataclass(frozen=True)
class ChatReply:
    """One completion: its text, how long it took, and what the server said about it.

    ``error`` is set when the request failed after the client's retries (the text is then empty);
    ``status`` is the HTTP status of that failure (``None`` for a transport failure).
    ``reasoning`` is the server's ``reasoning_content`` (thinking models put text there and may
    leave ``content`` null); ``finish_reason`` is ``stop``, ``length``, ... as served.
    """

    text: str
    latency_s: float
    logprobs: list[TokenLogprob] | None = None
    error: str | None = None
    finish_reason: str | None = None
    reasoning: str | None = None
    status: int | None = None
    attempts: int = 1  # HTTP requests made for this reply (retries included)


class ChatModel(Protocol):
    name: str

    def chat_many(
        self, conversations: Sequence[Messages], *, max_tokens: int = 256, progress: Callable[[int], None] | None = None
    ) -> list[ChatReply]:
        """Greedy (temperature 0) replies, one per conversation, in order."""


def format_refused(status: int | None, detail: str | None) -> bool:
    """Did the server refuse the request's ``response_format``? A 400/422, or a server error
    that names the format (what llama-cpp-python's server sends for ``json_schema``)."""
    if status in FORMAT_REJECTED:
        return True
    return status is not None and status >= 500 and bool(FORMAT_WORDS.search(detail or ""))


def _content_text(content: object) -> str | None:
    """The reply text of ``message.content``: a string, or a list of text parts; else ``None``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    return None


def read_choice(body: bytes) -> tuple[ChoiceParts | None, str | None]:
    """The parts of a chat-completions body a judge needs, or why it is malformed (pure).

    Returns ``({"text", "reasoning", "finish_reason", "logprobs"}, None)`` or ``(None, reason)``.
    ``content: null`` is an empty reply (the reasoning, if any, is kept beside it); a message that is
    null or a content that is neither text nor text parts is malformed.
    """
    try:
        obj = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"malformed body: not JSON ({exc}): {body[:120]!r}"
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, f"malformed body: no choices: {body[:160]!r}"
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        return None, f"malformed body: message is {json.dumps(message)[:60]}"
    raw = message.get("content")
    text = "" if raw is None else _content_text(raw)
    if text is None:
        return None, f"malformed body: content is a {type(raw).__name__}, not text: {json.dumps(raw)[:80]}"
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    lps = choice.get("logprobs")
    lps = lps.get("content") if isinstance(lps, dict) else None
    return {
        "text": text,
        "reasoning": reasoning if isinstance(reasoning, str) else None,
        "finish_reason": choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None,
        "logprobs": lps if isinstance(lps, list) else None,
    }, None


class OpenAIChat:
    """Client for ``POST {base_url}/chat/completions``: pooled keep-alive connections, at most
    ``concurrency`` requests in flight, retries with ``Retry-After`` or jittered backoff on 429/5xx
    and on transport failures, never on a deterministic answer (4xx, a malformed body)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        concurrency: int = 8,
        retries: int = 2,
        logprobs: bool = False,
        top_logprobs: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        seed: int | None = None,
        chat_template_kwargs: Mapping[str, object] | None = None,
    ) -> None:
        self.endpoint = Endpoint(
            base_url, api_key_env=api_key_env, timeout_s=timeout_s, concurrency=concurrency, retries=retries,
            backoff_s=backoff_s, max_backoff_s=max_backoff_s, seed=seed,
        )  # fmt: skip
        self.base_url = self.endpoint.base_url
        self.model = model
        self.name = f"openai:{self.base_url}#{model}"
        self.timeout_s = timeout_s
        self.concurrency = self.endpoint.concurrency
        self.retries = self.endpoint.retries
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        # Sent as the request's ``chat_template_kwargs`` (vLLM's server applies them per request).
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.pool = self.endpoint.pool
        # Both token limits are sent until the server refuses one (newer OpenAI models refuse
        # ``max_tokens``; llama-cpp-python's server knows only ``max_tokens`` and ignores the other).
        self.token_params: tuple[TokenParam, ...] = ("max_completion_tokens", "max_tokens")
        self.logprobs_refused = False
        self.sleeps = self.endpoint.sleeps  # every backoff actually slept (the tests read it)

    def check(self) -> None:
        """Fail once, up front, with one line: the endpoint does not answer, or refuses the key."""
        self.endpoint.check()

    # -- one completion -----------------------------------------------------------------------
    def payload(
        self, messages: Messages, max_tokens: int, response_format: Mapping[str, object] | None = None, logprobs: bool | None = None
    ) -> ChatRequest:
        body: ChatRequest = {"model": self.model, "messages": [dict(m) for m in messages], "temperature": 0.0}
        for name in self.token_params:
            body[name] = max_tokens
        if (self.logprobs if logprobs is None else logprobs) and not self.logprobs_refused:
            body["logprobs"] = True
            body["top_logprobs"] = self.top_logprobs
        if response_format is not None:
            body["response_format"] = dict(response_format)
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        return body

    def chat(
        self,
        messages: Messages,
        *,
        max_tokens: int = 256,
        response_format: Mapping[str, object] | None = None,
        logprobs: bool | None = None,
    ) -> ChatReply:
        """One greedy completion; failures come back as a reply with ``error`` set, never raised.

        ``logprobs`` overrides the client's setting for this request (a server that refuses
        log-probs is asked again without them, once per client).
        """
        last, status, attempts, spent = "", None, 0, 0.0
        attempt = 0
        while attempt <= self.retries:
            attempts += 1
            start = time.perf_counter()
            wait: float | None = None
            try:
                resp = self.endpoint.exchange("POST", "/chat/completions", self.payload(messages, max_tokens, response_format, logprobs))
            except _Transport as exc:
                last, status = str(exc), None
                spent += time.perf_counter() - start
            else:
                spent += time.perf_counter() - start
                if resp.status == 200:
                    parts, why = read_choice(resp.body)
                    if parts is None:  # deterministic: the same request gets the same body
                        return ChatReply("", spent, error=why, status=200, attempts=attempts)
                    return ChatReply(
                        parts["text"], spent, logprobs=parts["logprobs"], finish_reason=parts["finish_reason"],
                        reasoning=parts["reasoning"], attempts=attempts,
                    )  # fmt: skip
                detail = resp.body[:200].decode("utf-8", errors="replace")
                last, status = f"HTTP {resp.status}: {detail}", resp.status
                if resp.status in FORMAT_REJECTED and (self._drop_refused_token_param(detail) or self._drop_logprobs(detail, logprobs)):
                    continue  # asked again without the refused parameter; not a retry
                if resp.status in (401, 403):
                    last += f" ({self.endpoint.key_hint()})"
                if resp.status not in RETRY_STATUS or (response_format is not None and format_refused(resp.status, detail)):
                    break  # deterministic: asking again gets the same answer
                wait = retry_after_s(resp.headers.get("retry-after"))
            if attempt < self.retries:  # no sleep after the last attempt
                self.endpoint.pause(attempt, wait)
            attempt += 1
        return ChatReply("", spent, error=last, status=status, attempts=attempts)

    def _drop_logprobs(self, detail: str, asked: bool | None) -> bool:
        if self.logprobs_refused or not (self.logprobs if asked is None else asked) or "logprobs" not in detail:
            return False
        self.logprobs_refused = True
        return True

    def _drop_refused_token_param(self, detail: str) -> bool:
        """On a 400 that names a token limit, stop sending the first one it names (once per client):
        OpenAI says "Unsupported parameter: 'max_tokens' ... Use 'max_completion_tokens' instead"."""
        if len(self.token_params) < 2:
            return False
        found = [(m.start(), m.group(0)) for m in re.finditer(r"\bmax_(?:completion_)?tokens\b", detail)]
        if not found:
            return False
        refused = min(found)[1]
        self.token_params = tuple(p for p in self.token_params if p != refused)
        return True

    def chat_many(
        self,
        conversations: Sequence[Messages],
        *,
        max_tokens: int = 256,
        progress: Callable[[int], None] | None = None,
        response_format: Mapping[str, object] | None = None,
    ) -> list[ChatReply]:
        def one(msgs: Messages) -> ChatReply:
            reply = self.chat(msgs, max_tokens=max_tokens, response_format=response_format)
            if progress:
                progress(1)
            return reply

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(one, conversations))


class LocalChat:
    """A local :class:`~sleight.backends.base.LanguageModel` as a chat judge (greedy, batched)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = model.info.spec

    def chat_many(
        self, conversations: Sequence[Messages], *, max_tokens: int = 256, progress: Callable[[int], None] | None = None
    ) -> list[ChatReply]:
        prompts = [self.model.render_chat([dict(m) for m in msgs]).ids for msgs in conversations]
        start = time.perf_counter()
        gens = greedy_rows_alone(self.model, prompts, max_tokens)
        each = (time.perf_counter() - start) / max(len(prompts), 1)
        if progress:
            progress(len(prompts))
        return [ChatReply(text=self.reply_text(p, g.token_ids), latency_s=each, finish_reason=g.finish_reason) for p, g in zip(prompts, gens)]

    def reply_text(self, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> str:
        """The text of a reply's tokens (special tokens kept); a subclass may read them otherwise."""
        return str(self.model.decode(token_ids))


def greedy_rows_alone(model: Any, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Any]:
    """Greedy replies, each prompt read alone and all decoded together where the engine's batches are
    ragged (each prompt its own request on one stream: judge prompts of unequal lengths are not
    padded to the longest, which on a CPU costs more than reading them one by one); on an engine of
    whole requests (vLLM, a server) its ``generate_until``, every prompt one request at once: its
    ``greedy`` decides the same tokens there and then reads each prompt again, one at a time, to
    score them, records a judge's reply never uses; elsewhere the engine's batched ``greedy``. A
    row's tokens are those of that prompt decoded alone."""
    if isinstance(model, RequestEngine):
        done = model.generate_until(prompts, max_tokens)
        return [Completion(c.token_ids, "stop" if c.finish_reason == "stop" else "length") for c in done]
    if not (isinstance(model, ContinuousBatching) and model.ragged) or len(prompts) < 2:
        return list(model.greedy(prompts, max_tokens, top_k=1))
    stream = model.stream(top_k=1, live_rows=len(prompts))
    at = {stream.submit([p], max_tokens): i for i, p in enumerate(prompts)}
    out: list[Any] = [None] * len(prompts)
    for gid, gens in stream:
        out[at[gid]] = gens[0]
    return out


def load_chat(spec: str, *, engine: str = "hf", check: bool = True, **kwargs: Any) -> ChatModel:
    """A judge from a spec: ``openai:<base_url>#<model>`` or a local model spec."""
    if spec.startswith("openai:"):
        base, model = parse_openai_spec(spec)
        client = OpenAIChat(base, model, **kwargs)
        if check:
            client.check()
        return client
    from sleight.backends import load_model

    return LocalChat(load_model(spec, engine=engine))
