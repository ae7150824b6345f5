"""A chat-completions server on 127.0.0.1 that answers whatever a test scripts, faults included.

Each model name maps to a function of the request body (and how many requests that model has had)
that returns an :class:`Answer`: a normal reply, an HTTP status with headers (``Retry-After``), a
body shorter than its ``Content-Length``, or raw bytes that are not HTTP at all. The server speaks
HTTP/1.1 keep-alive, so the tests can see whether the client reuses its connection.

:func:`scripted` is the same server for tests that only script a reply's content per model (or an
HTTP status to fail with): the parsing cases a real model cannot be made to produce on demand
(garbage, ``"false"`` strings, a truncated object).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    status: int = 200
    json: Any = None  # the body as JSON
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # written to the socket as is, instead of an HTTP response
    body: bytes | None = None  # the HTTP body as is (not JSON), instead of ``json``
    short_by: int = 0  # announce a Content-Length this many bytes longer than the body, then close
    delay_s: float = 0.0


def reply(content: Any = "", *, finish_reason: str | None = "stop", reasoning: str | None = None, logprobs: Any = None, message: Any = ...) -> Answer:
    """A 200 chat completion; ``message=None`` sends ``"message": null``."""
    msg: Any = {"role": "assistant", "content": content}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    if message is not ...:
        msg = message
    choice: dict[str, Any] = {"index": 0, "message": msg, "finish_reason": finish_reason}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return Answer(json={"id": "cmpl-fault", "object": "chat.completion", "choices": [choice]})


def write_answer(handler: BaseHTTPRequestHandler, a: Answer) -> None:
    """Write ``a`` on ``handler``'s connection: raw bytes, or a JSON response whose announced
    length may exceed its body (``short_by``; the connection is then closed)."""
    if a.delay_s:
        threading.Event().wait(a.delay_s)
    if a.raw is not None:
        handler.wfile.write(a.raw)
        handler.wfile.flush()
        handler.close_connection = True
        return
    data = a.body if a.body is not None else json.dumps(a.json if a.json is not None else {"error": {"message": f"status {a.status}"}}).encode()
    handler.send_response(a.status)
    handler.send_header("Content-Type", "application/json")
    for k, v in a.headers.items():
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(data) + a.short_by))
    if a.short_by:
        handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(data)
    handler.wfile.flush()
    if a.short_by:
        handler.close_connection = True



Script = Callable[[dict, int], Answer]


class FaultServer:
    def __init__(self, scripts: dict[str, Script], *, models: Answer | None = None) -> None:
        self.scripts = scripts
        self.models = models
        self.requests: dict[str, list[dict]] = defaultdict(list)
        self.connections = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with outer.lock:
                    outer.connections += 1

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, a: Answer) -> None:
                write_answer(self, a)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._answer(outer.models or Answer(json={"object": "list", "data": [{"id": m} for m in outer.scripts]}))
                else:
                    self._answer(Answer(status=404))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                model = body.get("model", "")
                with outer.lock:
                    outer.requests[model].append(body)
                    n = len(outer.requests[model])
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    if self.path.rstrip("/") != "/v1/chat/completions" or model not in outer.scripts:
                        self._answer(Answer(status=404))
                    else:
                        self._answer(outer.scripts[model](body, n))
                finally:
                    with outer.lock:
                        outer.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def spec(self, model: str) -> str:
        return f"openai:{self.base_url}#{model}"

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


Content = Callable[[dict], "str | int"]  # reply content, or an HTTP status to fail with


def scripted(contents: dict[str, Content]) -> FaultServer:
    """A :class:`FaultServer` whose models answer ``contents[model](body)``: a string is the reply's
    content, an int an HTTP status to fail with."""

    def script(content: Content) -> Script:
        def answer(body: dict, _n: int) -> Answer:
            c = content(body)
            return Answer(status=c) if isinstance(c, int) else reply(c)

        return answer

    return FaultServer({model: script(fn) for model, fn in contents.items()})


# -- a fault proxy in front of a real server ---------------------------------------------------------
Edit = Callable[[Any], Any]  # rewrites the upstream's JSON answer
Rule = Callable[[str, str, int], "Answer | Edit | float | None"]  # (method, path, n-th request on that path) -> fault


def _what(fault: Answer | Edit | float | None) -> str:
    """How the proxy answered, for its log: forwarded, slow (forwarded late), edited, or a fault."""
    if fault is None:
        return "forwarded"
    if isinstance(fault, float):
        return f"slow {fault} s"
    if not isinstance(fault, Answer):
        return "edited"
    extra = (" raw" if fault.raw is not None else "") + (f" short {fault.short_by}" if fault.short_by else "") + (f" delay {fault.delay_s}" if fault.delay_s else "")
    return f"fault {fault.status}{extra}"


class FaultProxy:
    """A loopback proxy in front of a real OpenAI-compatible server (vLLM's): every request goes
    upstream unless ``rule(method, path, n)`` returns an :class:`Answer` (a fault: a status with
    headers, a dropped connection, a cut or malformed body, a delay before it) or an ``Edit`` of the
    upstream's JSON answer (a server that ignores a field, lists another model). ``log`` holds
    ``(method, path, n, monotonic time, what happened)`` for every request; ``rule`` may be
    replaced between runs. ``edit_request(path, body)``, when set, rewrites each JSON request body
    before it goes upstream (a server that does not know a field: the proxy drops it)."""

    def __init__(self, upstream: str, rule: Rule) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.host, self.port_up = parts.hostname or "127.0.0.1", int(parts.port or 80)
        self.rule = rule
        self.edit_request: Callable[[str, Any], Any] | None = None
        self.counts: dict[str, int] = defaultdict(int)
        self.log: list[tuple[str, str, int, float, str]] = []
        self.lock = threading.Lock()
        self.inflight = 0  # requests being answered now (the rule sees its own request counted)
        self.inflight_max = 0  # the most forwarded upstream at once
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length", 0) or 0)
                body = self.rfile.read(length) if length else None
                path = self.path.split("?", 1)[0].rstrip("/")
                with outer.lock:
                    outer.counts[path] += 1
                    n = outer.counts[path]
                    outer.inflight += 1
                self._counted = True
                try:
                    self._answer(method, path, n, body)
                finally:
                    self._release()

            def _release(self) -> None:
                """The request leaves ``inflight`` once, before its answer is written: a client that
                sends its next request on reading this one's answer finds the slot free, as on a
                server that frees it when it answers (else the rule may see a finished request)."""
                if self._counted:
                    self._counted = False
                    with outer.lock:
                        outer.inflight -= 1

            def _write(self, answer: Answer) -> None:
                self._release()
                write_answer(self, answer)

            def _answer(self, method: str, path: str, n: int, body: bytes | None) -> None:
                fault = outer.rule(method, path, n)
                what = _what(fault)
                with outer.lock:
                    outer.log.append((method, path, n, time.monotonic(), what))
                    if not isinstance(fault, Answer):
                        outer.inflight_max = max(outer.inflight_max, outer.inflight)
                if isinstance(fault, Answer):
                    self._write(fault)
                    return
                if isinstance(fault, float):
                    threading.Event().wait(fault)  # slow: the real answer, late
                    fault = None
                if body and outer.edit_request is not None:
                    body = json.dumps(outer.edit_request(path, json.loads(body))).encode()
                status, headers, data = outer.forward(method, self.path, body, {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type", "accept")})
                if fault is not None and status == 200:
                    data = json.dumps(fault(json.loads(data))).encode()
                self._write(Answer(status=status, body=data, headers={k: v for k, v in headers if k.lower() == "retry-after"}))

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def forward(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port_up, timeout=600)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def spec(self, model: str) -> str:
        return f"openai:{self.base_url}#{model}"

    def faults(self) -> list[tuple[str, str, int, float, str]]:
        """The requests answered with a fault, in arrival order."""
        return [e for e in self.log if e[4].startswith("fault")]

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
