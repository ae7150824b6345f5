"""User errors end in one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
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


HEAVY = ("torch", "transformers", "pyarrow", "pandas", "matplotlib")


def _modules_after(code: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """Heavy libraries imported by ``code`` in a fresh interpreter (what a user's shell would pay for)."""
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_building_the_parser_and_help_import_no_heavy_library():
    assert _modules_after("from sleight.cli.main import build_parser\nbuild_parser()") == []
    help_all = "\n".join(
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass"
        for argv in (["--help"], ["tamper", "run", "--help"], ["tamper", "judge", "--help"], ["readout", "audit", "--help"], ["demo", "--help"])
    )
    assert _modules_after("import contextlib, io\nfrom sleight.cli.main import main\nwith contextlib.redirect_stdout(io.StringIO()):\n" + "\n".join("    " + ln for ln in help_all.splitlines())) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["tamper", "run", "--max-new-tokens", "0"],
        ["tamper", "run", "--trigger", "two words"],
        ["tamper", "run", "--out", "/proc/sleight-x"],
        ["generate", "--model", "no-such-model"],
        ["tamper", "report", "/nowhere/run"],
        ["demo", "--out", "/proc/sleight-x"],
    ],
)
def test_input_errors_answer_before_the_heavy_imports(argv):
    """A bad flag or path is refused before the engine (torch, transformers) or matplotlib is imported."""
    code = f"import contextlib, io\nfrom sleight.cli.main import main\nwith contextlib.redirect_stderr(io.StringIO()):\n    assert main({argv!r}) == 2"
    assert _modules_after(code, ("torch", "transformers", "matplotlib")) == []
