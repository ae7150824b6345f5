"""Real tamper runs shared by the jury, report and site tests (built once per test session).

Each builder is memoised in this module, so the test modules that import it share one run per
session; a run is made by the real CLI (``sleight tamper run``) on the bundled model.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_MEMO: dict[str, Path] = {}


def sleight(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (as a user would), capturing its output."""
    proc = subprocess.run([sys.executable, "-m", "sleight.cli.main", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"sleight {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def real_run(
    factory: pytest.TempPathFactory, *, name: str = "run", model: str | None = None, questions: int = 2, substitutes: int = 3, max_new_tokens: int = 48
) -> Path:
    """``sleight tamper run --questions 2 --substitutes 3 --max-new-tokens 48`` on the bundled model."""
    key = f"{name}|{model}|{questions}|{substitutes}|{max_new_tokens}"
    if key not in _MEMO:
        out = factory.mktemp("tamper") / name
        args = ["tamper", "run", "--questions", str(questions), "--substitutes", str(substitutes)]
        args += ["--max-new-tokens", str(max_new_tokens), "--no-progress", "--out", str(out)]
        if model:
            args += ["--model", model]
        sleight(*args)
        _MEMO[key] = out
    return _MEMO[key]


def copy_run(src: Path, dst: Path) -> Path:
    """A private copy of a run (trials, clean runs, manifest) without any judgements."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("judgements.parquet", "verdicts.parquet", "jury.json"))
    return dst
