"""Chat completion for judges: an OpenAI-compatible HTTP endpoint, or any local model.

A judge only needs "messages in, text out", so both kinds share :class:`ChatModel`. Specs:

* ``openai:<base_url>#<model>`` -- any OpenAI-compatible server (vLLM, llama.cpp, Ollama, hosted
  APIs); the key comes from ``$OPENAI_API_KEY`` (or the variable named by ``api_key_env``);
* anything else -- a model spec for :func:`sleight.backends.load_model`, decoded greedily.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from sleight.errors import UserError

Messages = Sequence[dict[str, str]]


@dataclass(frozen=True)
class ChatReply:
    """One completion: its text, how long it took, and per-token log-probs where served."""

    text: str
    latency_s: float
    logprobs: list[dict[str, Any]] | None = None
    error: str | None = None  # set when this request failed after retries (the reply is then empty)


class ChatModel(Protocol):
    name: str

    def chat_many(
        self, conversations: Sequence[Messages], *, max_tokens: int = 256, progress: Callable[[int], None] | None = None
    ) -> list[ChatReply]:
        """Greedy (temperature 0) replies, one per conversation, in order."""


class OpenAIChat:
    """Client for ``POST {base_url}/chat/completions`` with several requests in flight."""

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
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{self.base_url}#{model}"
        self.api_key = os.environ.get(api_key_env, "")
        self.timeout_s = timeout_s
        self.concurrency = max(1, concurrency)
        self.retries = retries
        self.logprobs = logprobs

    def _request(self, path: str, payload: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method="POST" if data else "GET")
        req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode())

    def check(self) -> None:
        """Fail fast, with one line naming the endpoint, when the server does not answer."""
        try:
            self._request("/models", None, timeout=min(10.0, self.timeout_s))
        except urllib.error.HTTPError:
            return  # the server answers; some servers simply have no /models
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UserError(f"OpenAI-compatible endpoint {self.base_url} is not reachable ({reason})") from None

    def chat(self, messages: Messages, *, max_tokens: int = 256) -> ChatReply:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": 0.0,
            "max_tokens": max_tokens,
        }
        if self.logprobs:
            payload["logprobs"] = True
            payload["top_logprobs"] = 5
        last = ""
        for attempt in range(self.retries + 1):
            start = time.perf_counter()
            try:
                body = self._request("/chat/completions", payload, timeout=self.timeout_s)
                choice = body["choices"][0]
                text = choice["message"].get("content") or ""
                lps = (choice.get("logprobs") or {}).get("content")
                return ChatReply(text=text, latency_s=time.perf_counter() - start, logprobs=lps)
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[:200].decode(errors='replace')}"
                if exc.code < 500 and exc.code != 429:
                    break
            except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            time.sleep(min(2.0**attempt, 8.0))
        return ChatReply(text="", latency_s=0.0, error=last)

    def chat_many(
        self, conversations: Sequence[Messages], *, max_tokens: int = 256, progress: Callable[[int], None] | None = None
    ) -> list[ChatReply]:
        def one(msgs: Messages) -> ChatReply:
            reply = self.chat(msgs, max_tokens=max_tokens)
            if progress:
                progress(1)
            return reply

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(one, conversations))


class LocalChat:
    """A local :class:`~sleight.backends.base.LanguageModel` as a chat judge (greedy, batched)."""

    def __init__(self, model) -> None:
        self.model = model
        self.name = model.info.spec

    def chat_many(
        self, conversations: Sequence[Messages], *, max_tokens: int = 256, progress: Callable[[int], None] | None = None
    ) -> list[ChatReply]:
        prompts = [self.model.render_chat(list(msgs)).ids for msgs in conversations]
        start = time.perf_counter()
        gens = self.model.greedy(prompts, max_tokens, top_k=1)
        each = (time.perf_counter() - start) / max(len(prompts), 1)
        if progress:
            progress(len(prompts))
        return [ChatReply(text=self.model.decode(g.token_ids), latency_s=each) for g in gens]


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
