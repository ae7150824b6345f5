"""The served engine's pieces without a model: the spec of a served model (what it takes and what it
refuses), the shared transport's retries (tests/fault_server.py), and how a completion a server
returns is read, a server that ignores what the engine asked for refused in one line. The engine
against vLLM's real server is tests/test_served.py."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fault_server import Answer, FaultServer, reply
from llama_server import free_port
from sleight.backends import load_model, spec_of
from sleight.backends.served_wire import completion, error_text, ranked
from sleight.backends.spec import ModelSpec
from sleight.backends.transport import Endpoint, _Transport
from sleight.errors import UserError

URL = "openai:http://127.0.0.1:9/v1#m"


def test_a_served_model_names_its_engine_and_takes_only_client_settings():
    spec = ModelSpec(URL, batch_size=4, chat_template_kwargs={"enable_thinking": False})
    assert spec.engine == "openai" and spec.load_record() == {}
    assert ModelSpec(URL, engine="openai") == ModelSpec(URL)
    for kw, field in [({"dtype": "float32"}, "dtype"), ({"threads": 2}, "threads"), ({"device": "cpu"}, "device"), ({"quantization": "awq"}, "quantization"),
                      ({"revision": "abc"}, "revision"), ({"max_model_len": 64}, "max_model_len"), ({"engine_args": {"a": 1}}, "engine_args"),
                      ({"scorer": "twin"}, "scorer")]:  # fmt: skip
        with pytest.raises(UserError, match=f"a served model takes no {field}: its server decides it"):
            ModelSpec(URL, **kw)
    with pytest.raises(UserError, match="takes no dtype, threads: its server decides them"):
        ModelSpec(URL, dtype="float32", threads=2)
    with pytest.raises(UserError, match="is served elsewhere; --engine vllm loads a model in this process"):
        ModelSpec(URL, engine="vllm")
    with pytest.raises(UserError, match="engine 'openai' takes a served model"):
        ModelSpec("smollm2-135m-instruct", engine="openai")
    with pytest.raises(UserError, match="bad endpoint spec"):
        ModelSpec("openai:localhost:8000#m")


def test_an_unreachable_server_is_one_line_before_anything_else():
    spec = f"openai:http://127.0.0.1:{free_port()}/v1#m"
    with pytest.raises(UserError, match=r"^OpenAI-compatible endpoint http://127.0.0.1:\d+/v1 is not reachable"):
        load_model(spec)


def test_the_transport_retries_with_retry_after_and_gives_up_below_http():
    with FaultServer({"busy": lambda b, n: Answer(429, headers={"Retry-After": "0.05"}) if n < 3 else reply("ok"),
                      "down": lambda b, n: Answer(503)}) as srv:  # fmt: skip
        ep = Endpoint(srv.base_url, retries=2, backoff_s=0.01)
        resp = ep.call("POST", "/chat/completions", {"model": "busy"})
        assert resp.status == 200 and ep.sleeps == [0.05, 0.05]
        ep = Endpoint(srv.base_url, retries=1, backoff_s=0.01)
        assert ep.call("POST", "/chat/completions", {"model": "down"}).status == 503 and len(ep.sleeps) == 1
        assert len(srv.requests["down"]) == 2
    ep = Endpoint(f"http://127.0.0.1:{free_port()}/v1", retries=1, backoff_s=0.01)
    with pytest.raises(_Transport):
        ep.call("GET", "/models")
    assert len(ep.sleeps) == 1


def test_an_overload_answer_beside_another_request_spends_no_attempt():
    """The gate's probing is not a failure (transport.Endpoint.call): a server that takes one request at
    a time and answers 429 to any other. With no retries at all, two requests sent at once both
    complete: the one refused beside the other is asked again once the halved gate lets it through
    alone (the overload test in tests/test_served.py failed a run on this: a request refused three
    times while the gate was still finding the server's capacity). A request refused while alone
    spends its attempt, so a server overloaded whatever is asked still fails at once."""
    lock, second, busy = threading.Lock(), threading.Event(), [0]

    def one_at_a_time(body: dict, n: int) -> Answer:
        with lock:
            busy[0] += 1
            alone = busy[0] == 1
        try:
            if not alone:
                second.set()
                return Answer(429, headers={"Retry-After": "0"})
            if n == 1:
                second.wait(10)  # the first stays in flight until the second has come
            return reply("ok")
        finally:
            with lock:
                busy[0] -= 1

    with FaultServer({"one": one_at_a_time, "busy": lambda b, n: Answer(429, headers={"Retry-After": "0"})}) as srv:
        ep = Endpoint(srv.base_url, retries=0, concurrency=2)
        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(lambda _: ep.call("POST", "/chat/completions", {"model": "one"}).status, range(2)))
        assert got == [200, 200] and second.is_set() and len(srv.requests["one"]) == 3
        assert (ep.gate.overloads, ep.gate.low, ep.sleeps) == (1, 1, [0.0])
        assert ep.call("POST", "/chat/completions", {"model": "busy"}).status == 429  # alone: no retry left
        assert len(srv.requests["busy"]) == 1


def read(choice, budget, top_k):
    return completion(choice, budget, top_k, frozenset({2}), URL)


def _choice(ids, finish="length", stop_reason=None, top=None):
    c = {"index": 0, "text": "", "token_ids": ids, "finish_reason": finish, "stop_reason": stop_reason}
    if top is not None:
        c["logprobs"] = {"token_logprobs": [max(t.values()) for t in top], "top_logprobs": [{f"token_id:{k}": v for k, v in t.items()} for t in top]}
    return c


def test_a_completion_is_read_as_vllm_in_process_reads_its_output():
    assert read(_choice([5, 6, 2], "stop"), 8, 0).token_ids == [5, 6]  # end-of-sequence dropped
    done = read(_choice([5, 7], "stop", stop_reason=7), 8, 0)
    assert (done.token_ids, done.finish_reason) == ([5, 7], "stop_token")
    assert read(_choice([5, 6], "length"), 2, 0).finish_reason == "length"
    top = [{5: -0.1, 9: -2.5}, {2: -0.2, 6: -1.0}]
    got = read(_choice([5, 2], "stop", top=top), 8, 2)
    assert got.token_ids == [5] and got.records is not None and got.records.token_ids == [5, 2]  # the end step's records kept
    assert got.records.top_ids.tolist() == [[5, 9], [2, 6]] and np.isnan(got.records.entropy).all()
    # the chosen token listed beside the top-k (k + 1 entries) is not one of them
    ids, lps = ranked({7: -5.0, 1: -0.5, 3: -0.7}, 2)
    assert ids.tolist() == [1, 3] and lps.tolist() == [-0.5, -0.7]


@pytest.mark.parametrize(
    "choice, budget, k, says",
    [
        ({"index": 0, "finish_reason": "length", "text": "hi"}, 2, 0, "returned no token ids"),
        (_choice([5, 6], "length"), 2, 20, "ignored `logprobs`"),
        ({**_choice([5], "length"), "logprobs": {"token_logprobs": [-0.1], "top_logprobs": [{"Paris": -0.1}]}}, 1, 1, "ignored return_tokens_as_token_ids"),
        (_choice([5, 9], "stop"), 8, 0, "ended a reply on token 9, which is not among the end-of-sequence ids"),
        (_choice([5], "length"), 8, 0, "cut a reply at 1 of 8 tokens"),
        (_choice([5], "abort"), 8, 0, "finish_reason='abort'"),
    ],
)
def test_a_server_that_ignores_what_was_asked_is_one_line(choice, budget, k, says):
    with pytest.raises(UserError, match=says):
        read(choice, budget, k)


def test_error_bodies_are_one_line():
    assert error_text(json.dumps({"error": {"message": "too\nlong", "code": 400}}).encode()) == "too long"
    assert error_text(json.dumps({"detail": "Not Found"}).encode()) == "Not Found"
    assert error_text(b"<html>\nbad gateway</html>") == "<html> bad gateway</html>"


def test_spec_of_a_served_model_has_no_dtype():
    class Info:
        spec, engine, dtype, load = URL, "openai", "", {}

    class M:
        info = Info()

    assert spec_of(M()) == ModelSpec(URL)  # type: ignore[arg-type]


def test_the_gate_halves_requests_in_flight_on_overload_and_grows_them_back_one_at_a_time():
    """Issue #36 item 2 (transport._Gate): a 429 or 503 halves the limit (never below 1); ``ceiling``
    calm answers in a row raise it by one, never above the ceiling; ``low`` keeps the least."""
    from sleight.backends.transport import _Gate

    g = _Gate(8)
    for _ in range(3):
        g.acquire()
    assert g.busy == 3
    g.release(True)
    g.release(True)
    g.release(True)
    assert (g.limit, g.low, g.overloads, g.busy) == (1, 1, 3, 0)
    for want in (1, 2):  # 8 calm answers raise the limit by one
        for _ in range(8):
            assert g.limit == want
            g.acquire()
            g.release(False)
    assert g.limit == 3
    g.acquire()
    g.release(True)
    assert (g.limit, g.low) == (1, 1)
    full = _Gate(2)
    for _ in range(10):
        full.acquire()
        full.release(False)
    assert full.limit == 2  # never above the ceiling
