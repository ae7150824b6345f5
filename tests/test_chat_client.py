"""The OpenAI-compatible judge client against real loopback servers that misbehave on purpose.

Every fault a server can send back (a rate limit with ``Retry-After``, a refused key, ``content:
null`` beside ``reasoning_content``, a body cut short, bytes that are not HTTP, ``"message": null``,
a content that is not text) must come back as a reply with its error recorded, never an exception.
"""

from __future__ import annotations

import time

import pytest

from fault_server import Answer, FaultServer, reply
from sleight.backends.chat import OpenAIChat, read_choice, retry_after_s
from sleight.errors import UserError

MSG = [{"role": "user", "content": "hi"}]


def client(srv: FaultServer, model: str, **kw) -> OpenAIChat:
    kw.setdefault("backoff_s", 0.01)
    return OpenAIChat(srv.base_url, model, **kw)


def test_sends_max_completion_tokens_and_drops_the_limit_a_server_refuses():
    def openai_like(body, n):
        if "max_tokens" in body:  # what newer OpenAI models answer
            return Answer(400, {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."}})
        return reply("ok")

    with FaultServer({"new": openai_like, "old": lambda b, n: reply("ok")}) as srv:
        c = client(srv, "new")
        assert c.chat(MSG, max_tokens=7).text == "ok"
        assert c.chat(MSG, max_tokens=7).text == "ok"
        first, second, third = srv.requests["new"]
        assert first["max_completion_tokens"] == 7 and first["max_tokens"] == 7
        assert second["max_completion_tokens"] == 7 and "max_tokens" not in second
        assert "max_tokens" not in third  # remembered: one refusal per client, not per request
        old = client(srv, "old")
        assert old.chat(MSG, max_tokens=5).text == "ok"
        assert srv.requests["old"][0]["max_tokens"] == 5  # servers that know only max_tokens keep working


def test_429_waits_for_retry_after_and_never_sleeps_after_the_last_attempt():
    with FaultServer(
        {
            "busy": lambda b, n: Answer(429, headers={"Retry-After": "0.3"}) if n < 3 else reply("done"),
            "always": lambda b, n: Answer(429, headers={"Retry-After": "0.2"}),
        }
    ) as srv:
        c = client(srv, "busy", retries=2)
        start = time.perf_counter()
        r = c.chat(MSG)
        assert r.text == "done" and r.error is None and r.attempts == 3
        assert c.sleeps == [0.3, 0.3] and time.perf_counter() - start >= 0.6
        c = client(srv, "always", retries=2)
        start = time.perf_counter()
        r = c.chat(MSG)
        assert r.error.startswith("HTTP 429") and r.status == 429 and r.attempts == 3
        assert c.sleeps == [0.2, 0.2]  # two pauses between three attempts, none after the last
        assert time.perf_counter() - start < 1.5


def test_5xx_backs_off_with_jitter_and_4xx_is_not_retried():
    with FaultServer({"down": lambda b, n: Answer(503), "bad": lambda b, n: Answer(400)}) as srv:
        c = client(srv, "down", retries=3, backoff_s=0.02, seed=1)
        r = c.chat(MSG)
        assert r.attempts == 4 and r.status == 503 and len(c.sleeps) == 3
        for i, s in enumerate(c.sleeps):
            assert 0.5 * 0.02 * 2**i <= s <= 1.5 * 0.02 * 2**i
        assert len(set(c.sleeps)) == 3
        c = client(srv, "bad", retries=3)
        r = c.chat(MSG)
        assert r.attempts == 1 and r.status == 400 and c.sleeps == []
        assert len(srv.requests["bad"]) == 1


def test_retry_after_as_an_http_date():
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)
    assert retry_after_s("2") == 2.0 and retry_after_s(None) is None and retry_after_s("soon") is None


def test_401_fails_once_up_front_naming_the_key_variable(monkeypatch):
    monkeypatch.setenv("SLEIGHT_TEST_KEY", "wrong")
    with FaultServer({"m": lambda b, n: Answer(401)}, models=Answer(401)) as srv:
        with pytest.raises(UserError) as exc:
            client(srv, "m", api_key_env="SLEIGHT_TEST_KEY").check()
        msg = str(exc.value)
        assert "\n" not in msg and "HTTP 401" in msg and "$SLEIGHT_TEST_KEY" in msg
        # and a 401 at vote time is recorded once, not retried
        r = client(srv, "m", api_key_env="SLEIGHT_TEST_KEY", retries=3).chat(MSG)
        assert r.status == 401 and r.attempts == 1 and "$SLEIGHT_TEST_KEY" in r.error
    monkeypatch.delenv("SLEIGHT_TEST_KEY")
    with FaultServer({"m": lambda b, n: Answer(403)}, models=Answer(403)) as srv:
        with pytest.raises(UserError, match=r"\$SLEIGHT_TEST_KEY is not set"):
            client(srv, "m", api_key_env="SLEIGHT_TEST_KEY").check()


def test_content_null_keeps_reasoning_content_and_finish_reason():
    with FaultServer({"think": lambda b, n: reply(None, reasoning="Let me weigh the labels...", finish_reason="length")}) as srv:
        r = client(srv, "think").chat(MSG)
    assert r.error is None and r.text == ""
    assert r.reasoning == "Let me weigh the labels..." and r.finish_reason == "length"


def test_a_body_cut_short_is_a_recorded_transport_error():
    with FaultServer({"cut": lambda b, n: Answer(json={"choices": []}, short_by=40)}) as srv:
        r = client(srv, "cut", retries=1).chat(MSG)
        assert r.error.startswith("IncompleteRead") and r.status is None and r.attempts == 2


def test_bytes_that_are_not_http_in_the_check_and_in_a_vote():
    garbage = Answer(raw=b"SSH-2.0-OpenSSH_9.6\r\n")
    with FaultServer({"junk": lambda b, n: garbage}, models=garbage) as srv:
        c = client(srv, "junk", retries=1)
        with pytest.raises(UserError, match="not reachable.*BadStatusLine"):
            c.check()
        r = c.chat(MSG)
        assert r.error.startswith("BadStatusLine") and r.attempts == 2


@pytest.mark.parametrize(
    "answer,why",
    [
        (reply(message=None), "message is null"),
        (reply(42), "content is a int"),
        (reply({"text": "x"}), "content is a dict"),
        (Answer(json=["not", "an", "object"]), "no choices"),
        (Answer(json={"choices": [{"message": {"content": "x"}}]}, raw=b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{nope"), "not JSON"),
    ],
)
def test_malformed_bodies_are_recorded_and_not_retried(answer, why):
    with FaultServer({"m": lambda b, n: answer}) as srv:
        r = client(srv, "m", retries=3).chat(MSG)
        assert r.error is not None and r.error.startswith("malformed body") and why in r.error
        assert r.attempts == 1 and len(srv.requests["m"]) == 1


def test_text_parts_are_joined():
    parts, why = read_choice(b'{"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]}')
    assert why is None and parts["text"] == "ab"


def test_one_kept_alive_connection_serves_many_requests():
    with FaultServer({"m": lambda b, n: reply(f"r{n}")}) as srv:
        c = client(srv, "m", concurrency=1)
        texts = [c.chat(MSG).text for _ in range(10)]
        assert texts == [f"r{i}" for i in range(1, 11)]
        assert srv.connections == 1 and c.pool.opened == 1


def test_requests_in_flight_are_bounded_by_concurrency():
    with FaultServer({"slow": lambda b, n: Answer(json=reply("x").json, delay_s=0.15)}) as srv:
        c = client(srv, "slow", concurrency=3)
        out = c.chat_many([MSG] * 9)
        assert [r.text for r in out] == ["x"] * 9
        assert srv.max_in_flight == 3


def test_judge_template_flags_reach_server_and_local_jurors():
    """``--thinking`` / ``--chat-template-kwargs`` on a judge command: a server juror sends them as the
    request's ``chat_template_kwargs`` (vLLM's server applies them), a local juror renders
    with them; without the flags nothing is sent."""
    import argparse

    from sleight.cli.jury_args import add_jury_args, loader_from_args

    p = argparse.ArgumentParser()
    add_jury_args(p, max_tokens=8)
    with FaultServer({"m": lambda b, n: reply("ok")}) as srv:
        for flags, sent in (([], None), (["--thinking", "off"], {"enable_thinking": False}),
                            (["--chat-template-kwargs", '{"date_string": "1 Jan 2025"}'], {"date_string": "1 Jan 2025"})):  # fmt: skip
            juror = loader_from_args(p.parse_args(["--jury", srv.spec("m"), *flags]))(srv.spec("m"))
            assert juror.chat(MSG, max_tokens=3).text == "ok"
            assert srv.requests["m"][-1].get("chat_template_kwargs") == sent, flags
    local = loader_from_args(p.parse_args(["--jury", "smollm2-135m-instruct", "--thinking", "off"]))("smollm2-135m-instruct")
    assert dict(local.model.chat_template_kwargs) == {"enable_thinking": False}
    with pytest.raises(UserError, match="--thinking on conflicts"):
        loader_from_args(p.parse_args(["--jury", "x", "--thinking", "on", "--chat-template-kwargs", '{"enable_thinking": false}']))
