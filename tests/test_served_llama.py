"""The served engine against llama.cpp's own server (``llama-server``, built by ``make test-deps``
from the llama.cpp that llama-cpp-python 0.3.36 carries) serving the bundled SmolLM2 GGUF (Q4_1) on
127.0.0.1: issue #36's second server, read in its own dialect (``sleight.backends.served_llama``).

The in-process reference is llama.cpp itself through llama-cpp-python's ``Llama`` (same source, same
CPU flags): the server's readings and greedy records equal it within ``LLAMA_ATOL`` when the server
computes each request alone as the library does (``tests/llama_server.py``: one slot, flash
attention off; the engine sends no prompt cache). Each departure from that moves a Q4_1 log-prob
far past the tolerance (``benchmarks/llama_settings.py``: four slots 0.265, ``-fa auto`` 0.355, a
cached prefix 0.265; docs/engines.md).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from llama_server import start_llama_cpp_server
from sleight.backends import load_model
from sleight.errors import UserError
from sleight.tamper.store import load_manifest, load_trials
from tamper_artifacts import sleight
from tolerances import LLAMA_ATOL

pytestmark = pytest.mark.slow  # a llama.cpp server (~2 s to start) and llama.cpp in process

QUESTIONS = ["What is the capital of France?", "Why is the sky blue?", "Name three primary colors.", "Answer yes or no: is water wet?"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_llama_cpp_server(tmp_path_factory.mktemp("llama-cpp"), alias="smol-cpp")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def smodel(server):
    sm = load_model(server.spec, batch_size=4)
    yield sm
    sm.close()


class InProcess:
    """llama.cpp in process: a prompt evaluated in one batch, then one token at a time (as the server)."""

    def __init__(self) -> None:
        from llama_cpp import Llama

        from sleight.backends.resolve import BUNDLED, DEFAULT_MODEL, bundled_gguf

        self.llm = Llama(model_path=str(bundled_gguf(BUNDLED[DEFAULT_MODEL])), n_ctx=2048, n_threads=2, logits_all=True, verbose=False)

    def _last(self) -> np.ndarray:
        x = np.asarray(self.llm.scores[self.llm.n_tokens - 1], dtype=np.float64)
        return x - (np.log(np.exp(x - x.max()).sum()) + x.max())

    def next_logprobs(self, ids) -> np.ndarray:
        self.llm.reset()
        self.llm.eval([int(t) for t in ids])
        return self._last()

    def greedy(self, ids, n: int) -> list[tuple[int, np.ndarray]]:
        out = [(int(np.argmax(lp := self.next_logprobs(ids))), lp)]
        while len(out) < n:
            self.llm.eval([out[-1][0]])
            lp = self._last()
            out.append((int(np.argmax(lp)), lp))
        return out


@pytest.fixture(scope="module")
def inproc():
    return InProcess()


def test_the_server_is_read_in_llama_cpps_dialect(smodel, server, model):
    """``/props`` says llama.cpp: its routes, its build as the version, its listed vocabulary; the
    tokenizer and chat template (``/tokenize``, ``/detokenize``, ``/apply-template``) equal the hf
    engine's on the same model, every id's surface string included."""
    from sleight.backends.served_llama import LlamaServedModel

    info = smodel.info
    assert isinstance(smodel, LlamaServedModel) and info.engine == "openai" and info.model_id == "smol-cpp"
    assert info.engine_version.startswith("llamacpp b") and info.engine_version.endswith("(1 slot(s))") and info.device == server.base_url
    assert smodel.vocab_size == model.vocab_size and smodel.eos_ids >= model.eos_ids
    for t in ["Hello the world", " leading space", "Ünïcödé 日本語 🙂", "a\n\nb\tc", "<|im_end|> special"]:
        assert smodel.encode(t) == model.encode(t), t
        assert smodel.decode(model.encode(t)) == model.decode(model.encode(t)), t
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]
    for kw in ({}, {"prefill": "The answer is"}, {"add_generation_prompt": False}):
        assert smodel.render_chat(msgs, **kw) == model.render_chat(msgs, **kw), kw
    whole = [*msgs, {"role": "assistant", "content": "Paris."}]
    assert smodel.render_chat(whole, add_generation_prompt=False) == model.render_chat(whole, add_generation_prompt=False)
    assert [smodel.token_text(t) for t in range(model.vocab_size)] == [model.token_text(t) for t in range(model.vocab_size)]


def test_readings_and_greedy_records_equal_llama_cpp_in_process(smodel, inproc):
    """``read_next`` (the top-20 a request, each asked id by a request forced to it),
    ``continuation_logprobs``, ``score_tokens`` and greedy ``generate_scored`` against the library."""
    ctxs = [smodel.render_chat([{"role": "user", "content": q}]).ids for q in QUESTIONS]
    worst = 0.0
    refs = [inproc.next_logprobs(c) for c in ctxs]
    asked = [[*np.argsort(-r)[:3].tolist(), 0, smodel.vocab_size - 1] for r in refs]  # listed ones and two far outside the top-20
    for nt, r, a in zip(smodel.read_next(ctxs, asked, top_k=20), refs, asked):
        assert nt.top_ids.tolist() == np.argsort(-r)[:20].tolist()
        worst = max(worst, np.abs(nt.logprobs - r[a]).max(), np.abs(nt.top_logprobs - r[nt.top_ids]).max())
    gens = smodel.generate_scored(ctxs[:3], [24] * 3, forced=[None] * 3, top_k=20)
    for c, g in zip(ctxs, gens):
        rec = g.records
        ref = inproc.greedy(c, len(rec.token_ids))
        assert [t for t, _ in ref] == list(rec.token_ids)
        for j, (t, lp) in enumerate(ref):
            assert rec.top_ids[j].tolist() == np.argsort(-lp)[:20].tolist()
            worst = max(worst, abs(rec.logprobs[j] - lp[t]), np.abs(rec.top_logprobs[j] - lp[rec.top_ids[j]]).max())
        # a given reply, each position read by a request forced to its token: the prompt and the reply
        # so far in one batch, as the library evaluates them (a quantized model's batch of rows sums
        # otherwise than its one-token decoding steps: the greedy records above are not these)
        reply = [int(t) for t in g.token_ids[:6]]
        want = [inproc.next_logprobs(list(c) + reply[:j]) for j in range(len(reply))]
        again = smodel.score_tokens(c, [reply], top_k=20)[0]
        np.testing.assert_allclose(again.logprobs, [w[t] for w, t in zip(want, reply)], atol=LLAMA_ATOL)
        assert [row.tolist() for row in again.top_ids] == [np.argsort(-w)[:20].tolist() for w in want]
        cont = smodel.continuation_logprobs(c, [reply[:4]])[0]
        np.testing.assert_allclose(cont, again.logprobs[:4], atol=LLAMA_ATOL)
    print(f"max |server - in process| {worst:.2e} (LLAMA_ATOL {LLAMA_ATOL:.0e})")
    assert worst <= LLAMA_ATOL
    the = smodel.encode(" the")[0]
    stopped = smodel.generate_until(ctxs, 64, stop_token_ids=[the])
    assert any(c.finish_reason == "stop_token" and c.token_ids[-1] == the and the not in c.token_ids[:-1] for c in stopped)


def test_a_server_that_continues_a_final_assistant_message_is_one_line(tmp_path):
    """llama.cpp's default assistant prefill renders no end to a final assistant turn: refused by name."""
    srv = start_llama_cpp_server(tmp_path, alias="smol-prefill", prefill=True)
    try:
        sm = load_model(srv.spec, batch_size=2)
        msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        with pytest.raises(UserError, match="continues a final assistant message .* start it with --no-prefill-assistant") as err:
            sm.render_chat(msgs, add_generation_prompt=False)
        assert "\n" not in str(err.value)
        assert sm.render_chat(msgs[:1]).ids  # a conversation ending with the user renders as ever
        sm.close()
    finally:
        srv.stop()


def test_tamper_run_over_llama_cpp_completes_with_its_own_records(server, tmp_path):
    """Sleight of Word over llama.cpp's server (two-phase, the substitutes written as the model's own
    tokens): every trial recorded with its swaps and the study's Δ columns; a rerun writes nothing."""
    out = tmp_path / "llama"
    run = ["tamper", "run", "--model", server.spec, "--questions", "1", "--substitutes", "3", "--max-new-tokens", "24", "--no-progress", "--out", str(out)]
    assert "two-phase decoding" in sleight(*run).stdout
    manifest = load_manifest(out)
    assert manifest["config"]["engine"] == "openai" and "llamacpp" in json.dumps(manifest)
    trials = load_trials(out)
    assert len(trials) == 3 and trials["n_swaps"].sum() > 0
    for _, t in trials.iterrows():
        n = len(t["token_ids"])
        assert len(t["logprobs"]) == n and np.all(np.asarray(t["logprobs"], float) <= LLAMA_ATOL)  # a log-prob, within the noise of its sum
        top = np.stack(t["top20_logprobs"]).astype(float)
        assert top.shape == (n, 20) and np.all(np.diff(top, axis=1) <= 0)  # ranked, most probable first
        for step, ids in zip(t["swap_steps"], t["swap_ids"]):  # each substitute's tokens where it was written
            assert [int(x) for x in t["token_ids"][step : step + len(ids)]] == [int(x) for x in ids]
        assert np.isnan(t["delta_surprisal"]) == (t["n_swaps"] == 0)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")}
    sleight(*run)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")} == before


def test_readout_audit_over_llama_cpp_equals_llama_cpp_in_process(server, inproc, tmp_path):
    """The readout audit over the server: each option's first-token probability, the mass and the
    unrestricted argmax at the scored position equal the library's at the same context."""
    import pandas as pd

    items = tmp_path / "items.jsonl"
    rows = [
        {"id": "capital", "prompt": "What is the capital of France? Answer with one word.", "options": ["Paris", "xylophone", "quagmire"]},
        {"id": "wet", "prompt": "Answer yes or no: is water wet?", "options": ["Yes", "No"]},
    ]
    items.write_text("".join(json.dumps(i) + "\n" for i in rows))
    sleight("readout", "audit", "--items", str(items), "--variants", "original", "--no-progress", "--model", server.spec, "--out", str(tmp_path / "a"))
    got = pd.read_parquet(tmp_path / "a" / "readings.parquet")
    sm = load_model(server.spec, batch_size=2)
    try:
        assert len(got) == 2
        for _, r in got.iterrows():
            lp = inproc.next_logprobs(sm.encode(r["context"]))
            first = [int(t) for t in r["first_token_ids"]]
            np.testing.assert_allclose(np.log(np.asarray(r["option_first_probs"], float)), lp[first], atol=LLAMA_ATOL)
            assert r["option_mass"] == pytest.approx(float(np.exp(lp[list(dict.fromkeys(first))]).sum()), abs=LLAMA_ATOL)
            assert int(r["argmax_id"]) == int(np.argmax(lp))
            assert r["option_mass_low"] == r["option_mass_high"] == r["option_mass"]  # exact reads: no interval
    finally:
        sm.close()
