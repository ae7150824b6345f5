"""User errors end in one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "sleight.cli.main", *args], capture_output=True, text=True, env=env, timeout=120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "model, needle",
    [
        ("no-such-model", "unknown model 'no-such-model'"),
        ("/nowhere/model.gguf", "model file not found: /nowhere/model.gguf"),
        ("./missing-folder/", "model path not found: ./missing-folder/"),
        ("someorg/some-model", "'someorg/some-model' is not in the local Hugging Face cache"),
        ("openai:http://127.0.0.1:{port}/v1#judge", "endpoint http://127.0.0.1:{port}/v1 is not reachable"),
        ("openai:localhost#x", "bad endpoint spec"),
    ],
)
def test_bad_model_specs_give_one_line(model, needle):
    port = free_port()
    proc = run_cli("generate", "--model", model.format(port=port))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("sleight: error: ") and needle.format(port=port) in lines[0]
    assert "Traceback" not in proc.stderr


def test_help_everywhere():
    for args in (["--help"], ["generate", "--help"], ["models", "--help"], ["tamper", "--help"], ["readout", "--help"]):
        proc = run_cli(*args)
        assert proc.returncode == 0 and "usage: sleight" in proc.stdout


def test_models_lists_the_bundled_default():
    proc = run_cli("models")
    assert proc.returncode == 0
    assert "smollm2-135m-instruct" in proc.stdout and "SmolLM2-135M-Instruct.Q4_1.gguf" in proc.stdout
