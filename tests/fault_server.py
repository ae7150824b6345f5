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

import json
import threading
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
                if a.delay_s:
                    threading.Event().wait(a.delay_s)
                if a.raw is not None:
                    self.wfile.write(a.raw)
                    self.wfile.flush()
                    self.close_connection = True
                    return
                data = json.dumps(a.json if a.json is not None else {"error": {"message": f"status {a.status}"}}).encode()
                self.send_response(a.status)
                self.send_header("Content-Type", "application/json")
                for k, v in a.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data) + a.short_by))
                if a.short_by:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                if a.short_by:
                    self.close_connection = True

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
