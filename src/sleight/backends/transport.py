"""HTTP to one OpenAI-compatible server, shared by the judges' chat client
(:class:`sleight.backends.chat.OpenAIChat`) and the served engine (:mod:`sleight.backends.served`).

:class:`Endpoint` is the transport: pooled keep-alive connections (:class:`_ConnectionPool`), the
API key read from the environment (``$OPENAI_API_KEY`` or the variable named by ``api_key_env``;
sent as a bearer token, never stored anywhere else), and retries with ``Retry-After`` or jittered
exponential backoff on 429/5xx and on transport failures. Nothing here raises for what a server
sends back; a failure below HTTP is :class:`_Transport`.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import os
import queue
import random
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sleight.errors import UserError

# Statuses worth asking again: rate limits and server-side failures.
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

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



class _ConnectionPool:
    """Keep-alive HTTP connections to one host, reused across requests and threads."""

    def __init__(self, base_url: str, timeout_s: float, size: int) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.root = self.prefix.removesuffix("/v1")  # the server's own routes sit beside /v1
        self.timeout_s = timeout_s
        self.idle: queue.LifoQueue[http.client.HTTPConnection] = queue.LifoQueue(maxsize=max(size, 1))
        self.opened = 0  # connections ever opened (the tests read it to see reuse)
        self.lock = threading.Lock()

    def _new(self, timeout: float) -> http.client.HTTPConnection:
        with self.lock:
            self.opened += 1
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def exchange(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str], timeout: float, *, root: bool = False
    ) -> _Response:
        """One request and its whole body; a stale reused connection is replaced once, silently.
        ``root``: ``path`` is beside the OpenAI routes (the base URL's path less a final ``/v1``)."""
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
                conn.request(method, (self.root if root else self.prefix) + path, body=body, headers=dict(headers))
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


OVERLOAD_STATUS = frozenset({429, 503})  # the server says it has too much to do: fewer requests in flight


class _Gate:
    """At most ``limit`` requests in flight, adapted to the server: the limit is halved on each
    overload answer (:data:`OVERLOAD_STATUS`) and raised by one after ``ceiling`` answers in a row
    without one, never above ``ceiling`` (additive increase, multiplicative decrease, as TCP sizes
    its window). ``low`` is the least limit it came to, ``overloads`` how many it saw."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = self.limit = self.low = max(1, ceiling)
        self.busy = self.calm = self.overloads = self.taken = 0
        self.cond = threading.Condition()

    def acquire(self) -> tuple[int, int]:
        """Wait for a place; returns a ticket for :meth:`shared` (places taken so far, requests in
        flight with this one)."""
        with self.cond:
            while self.busy >= self.limit:
                self.cond.wait()
            self.busy += 1
            self.taken += 1
            return self.taken, self.busy

    def shared(self, ticket: tuple[int, int]) -> bool:
        """Whether another request was in flight beside the ticket's at any time before now."""
        taken, busy = ticket
        with self.cond:
            return busy > 1 or self.taken > taken

    def release(self, overloaded: bool) -> None:
        with self.cond:
            self.busy -= 1
            if overloaded:
                self.overloads += 1
                self.limit, self.calm = max(1, self.limit // 2), 0
                self.low = min(self.low, self.limit)
            else:
                self.calm += 1
                if self.calm >= self.ceiling and self.limit < self.ceiling:
                    self.limit, self.calm = self.limit + 1, 0
            self.cond.notify_all()


class Endpoint:
    """One OpenAI-compatible server: a connection pool of ``concurrency`` keep-alive connections,
    the API key from ``$api_key_env``, and ``retries`` more attempts with ``Retry-After`` or
    jittered backoff on a retryable status (:data:`RETRY_STATUS`) or a transport failure.

    ``base_url`` ends where the OpenAI routes start (``http://host:port/v1``); :meth:`exchange`
    with ``root=True`` addresses the server's own routes beside it (vLLM's ``/tokenize``,
    ``/detokenize``, ``/version``). ``sleeps`` holds every backoff actually slept."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        concurrency: int = 8,
        retries: int = 2,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        seed: int | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.api_key = os.environ.get(api_key_env, "")
        self.timeout_s = timeout_s
        self.concurrency = max(1, concurrency)
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.pool = _ConnectionPool(self.base_url, timeout_s, self.concurrency)
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self.sleeps: list[float] = []  # every backoff actually slept (the tests read it)
        self.gate = _Gate(self.concurrency)  # :meth:`call`'s requests in flight, fewer while the server is overloaded

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json", "Connection": "keep-alive"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def exchange(self, method: str, path: str, payload: Any, timeout: float | None = None, *, root: bool = False) -> _Response:
        """One request (``payload`` sent as JSON unless None) and its whole answer; no retry."""
        data = json.dumps(payload).encode() if payload is not None else None
        return self.pool.exchange(method, path, data, self.headers(), self.timeout_s if timeout is None else timeout, root=root)

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt + 1``: the server's ``Retry-After`` (capped), else
        ``backoff_s * 2**attempt`` with jitter (capped)."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff_s)
        with self._rng_lock:
            jitter = self._rng.uniform(0.5, 1.5)
        return min(self.backoff_s * (2.0**attempt) * jitter, self.max_backoff_s)

    def pause(self, attempt: int, retry_after: float | None) -> None:
        """Sleep the backoff before the next attempt (and record it)."""
        wait = self.backoff(attempt, retry_after)
        self.sleeps.append(wait)
        time.sleep(wait)

    def key_hint(self) -> str:
        return f"set ${self.api_key_env} to a valid key" if self.api_key else f"${self.api_key_env} is not set"

    def check(self) -> None:
        """Fail once, up front, with one line: the endpoint does not answer, or refuses the key."""
        try:
            resp = self.exchange("GET", "/models", None, timeout=min(10.0, self.timeout_s))
        except _Transport as exc:
            raise UserError(f"OpenAI-compatible endpoint {self.base_url} is not reachable ({exc})") from None
        if resp.status in (401, 403):
            raise UserError(f"endpoint {self.base_url} refused the key (HTTP {resp.status}); {self.key_hint()}")
        # any other answer means the server is there (some servers simply have no /models)

    def call(self, method: str, path: str, payload: Any = None, *, root: bool = False, timeout: float | None = None) -> _Response:
        """:meth:`exchange` with the retries: a transport failure or a retryable status is asked
        again after :meth:`pause`; returns the last answer (any status), or raises :class:`_Transport`
        when the last attempt failed below HTTP. Each attempt passes the :class:`_Gate`, so an
        overloaded server (429, 503) sees fewer requests in flight until it calms. An overload answer
        to a request sent beside others is the gate finding the server's capacity (the limit halves
        at once, and rises again only after calm answers): it is asked again after the pause without
        spending an attempt, so a request is not failed by its own gate's probing; one sent alone
        spends it, so a server overloaded whatever is asked still fails after the retries."""
        attempt = 0
        while True:
            wait: float | None = None
            resp: _Response | None = None
            ticket = self.gate.acquire()  # the backoff below is slept outside it
            try:
                resp = self.exchange(method, path, payload, timeout, root=root)
            except _Transport:
                if attempt >= self.retries:
                    raise
            finally:
                beside = self.gate.shared(ticket)
                self.gate.release(resp is not None and resp.status in OVERLOAD_STATUS)
            if resp is not None:
                probed = beside and resp.status in OVERLOAD_STATUS
                if resp.status not in RETRY_STATUS or (attempt >= self.retries and not probed):
                    return resp
                wait = retry_after_s(resp.headers.get("retry-after"))
                if probed:
                    self.pause(attempt, wait)
                    continue
            self.pause(attempt, wait)
            attempt += 1

    def close(self) -> None:
        self.pool.close()


def parse_openai_spec(spec: str) -> tuple[str, str]:
    """``openai:<base_url>#<model>`` -> (base_url, model), with a clear error for anything else."""
    body = spec[len("openai:") :]
    if "#" not in body or not body.split("#", 1)[0].startswith(("http://", "https://")):
        raise UserError(f"bad endpoint spec '{spec}': expected openai:<http(s)://host:port/v1>#<model>")
    base, model = body.split("#", 1)
    if not model:
        raise UserError(f"bad endpoint spec '{spec}': the model name after '#' is empty")
    return base, model
