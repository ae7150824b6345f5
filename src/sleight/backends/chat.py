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

import email.utils
import http.client
import json
import os
import queue
import random
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from sleight.errors import UserError

Messages = Sequence[Mapping[str, str]]

# Statuses worth asking again: rate limits and server-side failures.
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
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
    logprobs: list[dict[str, Any]] | None = None
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


@dataclass(frozen=True)
class _Response:
    status: int
    headers: Mapping[str, str]
    body: bytes


class _Transport(Exception):
    """The exchange failed below HTTP: refused, reset, cut short, not HTTP at all."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, http.client.IncompleteRead):
        return f"IncompleteRead: body cut short ({len(exc.partial)} bytes read, {exc.expected} more expected)"
    if isinstance(exc, http.client.BadStatusLine):
        return f"BadStatusLine: the server did not answer in HTTP ({str(exc)[:80]!r})"
    text = str(getattr(exc, "reason", None) or exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta seconds or an HTTP date), else ``None``."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def format_refused(status: int | None, detail: str | None) -> bool:
    """Did the server refuse the request's ``response_format``? A 400/422, or a server error
    that names the format (what llama-cpp-python's server sends for ``json_schema``)."""
    if status in FORMAT_REJECTED:
        return True
    return status is not None and status >= 500 and bool(FORMAT_WORDS.search(detail or ""))


class _ConnectionPool:
    """Keep-alive HTTP connections to one host, reused across requests and threads."""

    def __init__(self, base_url: str, timeout_s: float, size: int) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.idle: queue.LifoQueue[http.client.HTTPConnection] = queue.LifoQueue(maxsize=max(size, 1))
        self.opened = 0  # connections ever opened (the tests read it to see reuse)
        self.lock = threading.Lock()

    def _new(self, timeout: float) -> http.client.HTTPConnection:
        with self.lock:
            self.opened += 1
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def exchange(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str], timeout: float) -> _Response:
        """One request and its whole body; a stale reused connection is replaced once, silently."""
        for fresh in (False, True):
            conn = None
            if not fresh:
                try:
                    conn = self.idle.get_nowait()
                except queue.Empty:
                    conn = None
            reused = conn is not None
            if conn is None:
                conn = self._new(timeout)
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                conn.request(method, self.prefix + path, body=body, headers=dict(headers))
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                conn.close()
                if reused:
                    continue  # the server had closed the idle connection; ask again on a new one
                raise _Transport(_describe(exc)) from None
            except (http.client.HTTPException, OSError, ValueError) as exc:
                conn.close()
                raise _Transport(_describe(exc)) from None
            if resp.will_close:
                conn.close()
            else:
                try:
                    self.idle.put_nowait(conn)
                except queue.Full:
                    conn.close()
            return _Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        raise _Transport("connection closed by the server")  # pragma: no cover - loop always returns

    def close(self) -> None:
        while True:
            try:
                self.idle.get_nowait().close()
            except queue.Empty:
                return


def _content_text(content: Any) -> str | None:
    """The reply text of ``message.content``: a string, or a list of text parts; else ``None``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    return None


def read_choice(body: bytes) -> tuple[dict[str, Any] | None, str | None]:
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
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{self.base_url}#{model}"
        self.api_key_env = api_key_env
        self.api_key = os.environ.get(api_key_env, "")
        self.timeout_s = timeout_s
        self.concurrency = max(1, concurrency)
        self.retries = max(0, retries)
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        # Sent as the request's ``chat_template_kwargs`` (vLLM's server applies them per request).
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.pool = _ConnectionPool(self.base_url, timeout_s, self.concurrency)
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        # Both token limits are sent until the server refuses one (newer OpenAI models refuse
        # ``max_tokens``; llama-cpp-python's server knows only ``max_tokens`` and ignores the other).
        self.token_params: tuple[str, ...] = ("max_completion_tokens", "max_tokens")
        self.logprobs_refused = False
        self.sleeps: list[float] = []  # every backoff actually slept (the tests read it)

    # -- HTTP ---------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json", "Connection": "keep-alive"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _exchange(self, method: str, path: str, payload: dict[str, Any] | None, timeout: float) -> _Response:
        data = json.dumps(payload).encode() if payload is not None else None
        return self.pool.exchange(method, path, data, self._headers(), timeout)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff_s)
        with self._rng_lock:
            jitter = self._rng.uniform(0.5, 1.5)
        return min(self.backoff_s * (2.0**attempt) * jitter, self.max_backoff_s)

    def _key_hint(self) -> str:
        return f"set ${self.api_key_env} to a valid key" if self.api_key else f"${self.api_key_env} is not set"

    def check(self) -> None:
        """Fail once, up front, with one line: the endpoint does not answer, or refuses the key."""
        try:
            resp = self._exchange("GET", "/models", None, timeout=min(10.0, self.timeout_s))
        except _Transport as exc:
            raise UserError(f"OpenAI-compatible endpoint {self.base_url} is not reachable ({exc})") from None
        if resp.status in (401, 403):
            raise UserError(f"endpoint {self.base_url} refused the key (HTTP {resp.status}); {self._key_hint()}")
        # any other answer means the server is there (some servers simply have no /models)

    # -- one completion -----------------------------------------------------------------------
    def payload(
        self, messages: Messages, max_tokens: int, response_format: Mapping[str, Any] | None = None, logprobs: bool | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages], "temperature": 0.0}
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
        response_format: Mapping[str, Any] | None = None,
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
                resp = self._exchange("POST", "/chat/completions", self.payload(messages, max_tokens, response_format, logprobs), self.timeout_s)
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
                    last += f" ({self._key_hint()})"
                if resp.status not in RETRY_STATUS or (response_format is not None and format_refused(resp.status, detail)):
                    break  # deterministic: asking again gets the same answer
                wait = retry_after_s(resp.headers.get("retry-after"))
            if attempt < self.retries:  # no sleep after the last attempt
                pause = self._backoff(attempt, wait)
                self.sleeps.append(pause)
                time.sleep(pause)
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
        response_format: Mapping[str, Any] | None = None,
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
        gens = self.model.greedy(prompts, max_tokens, top_k=1)
        each = (time.perf_counter() - start) / max(len(prompts), 1)
        if progress:
            progress(len(prompts))
        return [ChatReply(text=self.model.decode(g.token_ids), latency_s=each, finish_reason=g.finish_reason) for g in gens]


def parse_openai_spec(spec: str) -> tuple[str, str]:
    """``openai:<base_url>#<model>`` -> (base_url, model), with a clear error for anything else."""
    body = spec[len("openai:") :]
    if "#" not in body or not body.split("#", 1)[0].startswith(("http://", "https://")):
        raise UserError(f"bad endpoint spec '{spec}': expected openai:<http(s)://host:port/v1>#<model>")
    base, model = body.split("#", 1)
    if not model:
        raise UserError(f"bad endpoint spec '{spec}': the model name after '#' is empty")
    return base, model


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
